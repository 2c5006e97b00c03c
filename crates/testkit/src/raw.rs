//! A raw RESP2 connection: writes commands by hand and reads replies with a deadline, so a test
//! needs no thread per blocked client and never hangs on a missing reply.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::Server;

/// How long we watch a connection to conclude it was not (yet) answered.
pub const QUIET: Duration = Duration::from_millis(300);

/// How long [`pipeline`] waits for each reply: a batch of thousands of commands on a busy
/// machine.
const PIPELINE_REPLY_DUE: Duration = Duration::from_secs(60);
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Int(i64),
    Nil,
    Bulk(Vec<u8>),
    Status(String),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn token(&self) -> u64 {
        match self {
            Reply::Int(t) if *t > 0 => *t as u64,
            other => panic!("expected a token, got {other:?}"),
        }
    }
}

/// One connection speaking RESP2 by hand.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(server: &Server) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect raw");
        stream.set_nodelay(true).unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        self.stream.write_all(&encode(args)).expect("write command");
    }

    /// Sends `LOCK.WAIT key owner ttl timeout`.
    pub fn send_wait(&mut self, key: &str, owner: &str, ttl_ms: u64, timeout_ms: u64) {
        let ttl = ttl_ms.to_string();
        let timeout = timeout_ms.to_string();
        self.send(&[
            b"LOCK.WAIT",
            key.as_bytes(),
            owner.as_bytes(),
            ttl.as_bytes(),
            timeout.as_bytes(),
        ]);
    }

    /// The next reply, or `None` if none arrived within `within`.
    pub fn read_within(&mut self, within: Duration) -> Option<Reply> {
        let deadline = Instant::now() + within;
        loop {
            if let Some((reply, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Some(reply);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
                .unwrap();
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("server closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                // A signal that reached this thread (a busy machine's test runner sees them):
                // the read is simply tried again, against the same deadline.
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// The next reply; panics if none arrives within `within`.
    pub fn read(&mut self, within: Duration) -> Reply {
        self.read_within(within)
            .unwrap_or_else(|| panic!("no reply within {within:?}"))
    }

    /// Asserts that no reply arrives for a while.
    pub fn assert_silent(&mut self, what: &str) {
        if let Some(r) = self.read_within(QUIET) {
            panic!("{what}: expected no reply yet, got {r:?}");
        }
    }
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses one RESP2 reply from the front of `buf`; `None` if it is incomplete.
pub fn parse(buf: &[u8]) -> Option<(Reply, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..end]).expect("utf8 header");
    let after = end + 2;
    match *buf.first()? {
        b':' => Some((Reply::Int(line.parse().unwrap()), after)),
        b'+' => Some((Reply::Status(line.to_string()), after)),
        b'-' => Some((Reply::Error(line.to_string()), after)),
        b'$' => {
            let len: i64 = line.parse().unwrap();
            if len < 0 {
                return Some((Reply::Nil, after));
            }
            let len = len as usize;
            if buf.len() < after + len + 2 {
                return None;
            }
            Some((
                Reply::Bulk(buf[after..after + len].to_vec()),
                after + len + 2,
            ))
        }
        b'*' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                return Some((Reply::Nil, after));
            }
            let mut items = Vec::new();
            let mut at = after;
            for _ in 0..n {
                let (item, used) = parse(&buf[at..])?;
                items.push(item);
                at += used;
            }
            Some((Reply::Array(items), at))
        }
        other => panic!("unexpected RESP type byte {other:?}"),
    }
}

/// How long the helpers below wait for a reply or for the server to count a waiter.
const DUE: Duration = Duration::from_secs(30);

/// A raw connection's client id.
pub fn client_id(r: &mut Raw) -> i64 {
    r.send(&[b"CLIENT", b"ID"]);
    match r.read(DUE) {
        Reply::Int(id) => id,
        other => panic!("CLIENT ID: {other:?}"),
    }
}

/// A token from a raw connection's next reply.
pub fn token_of(r: &mut Raw, who: &str) -> i64 {
    match r.read(DUE) {
        Reply::Int(t) if t > 0 => t,
        other => panic!("{who}: expected a token, got {other:?}"),
    }
}

/// Sends `LOCK.WAIT key owner ttl 0 words...` on a new raw connection and waits until the
/// server counts `waiters` waiters in all (`INFO relock`); returns the connection and its
/// client id.
pub fn wait_on(
    server: &Server,
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: i64,
    words: &[&str],
    waiters: i64,
) -> (Raw, i64) {
    let mut r = Raw::connect(server);
    let id = client_id(&mut r);
    let ttl = ttl.to_string();
    let mut args: Vec<&[u8]> = vec![
        b"LOCK.WAIT",
        key.as_bytes(),
        owner.as_bytes(),
        ttl.as_bytes(),
        b"0",
    ];
    args.extend(words.iter().map(|w| w.as_bytes()));
    r.send(&args);
    assert!(
        super::eventually(DUE, || super::info_field(c, "waiters") == waiters),
        "{owner} not queued for {key} ({waiters} waiters in all)"
    );
    (r, id)
}

/// Sends `LOCK.WAIT key owner 100000 0 words...` on a new raw connection after learning its
/// client id, and waits until it is the `n`th waiter of `key`; returns the connection and id.
pub fn queue_wait(
    server: &Server,
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
    words: &[&str],
    n: i64,
) -> (Raw, i64) {
    let mut r = Raw::connect(server);
    let id = client_id(&mut r);
    let mut args: Vec<&[u8]> = vec![
        b"LOCK.WAIT",
        key.as_bytes(),
        owner.as_bytes(),
        b"100000",
        b"0",
    ];
    args.extend(words.iter().map(|w| w.as_bytes()));
    r.send(&args);
    assert!(
        super::eventually(DUE, || super::ask::waiters(c, key) == n),
        "{owner} not queued as #{n}"
    );
    (r, id)
}

/// Sends `LOCK.WAIT key owner ttl 0` on a new raw connection and waits until it queued behind
/// whatever `key` holds (the queue grew by one: [`crate::ask::await_waiters`]).
pub fn queue_behind(
    server: &Server,
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
    ttl: u64,
) -> Raw {
    let before = super::ask::waiters(c, key);
    let mut w = Raw::connect(server);
    w.send_wait(key, owner, ttl, 0);
    super::ask::await_waiters(c, key, before + 1);
    w
}

/// Sends `commands` down one connection in pipelined batches and checks every reply. A new
/// hold past a millisecond's 1000th answers `TRYAGAIN ... 1 ms left (tokens ahead of this
/// server's clock)` (docs/waiting-and-fencing.md: a release build reaches that rate from a
/// pipeline, and so may a debug one on a server that caches its clock per event-loop turn),
/// and a counter raised ahead of the clock answers it with more ms left: such a command is
/// sent again after its batch, as a client does, for up to 60 s. Every bulk fill of the suites
/// goes through here ([`pipeline_cmds`] for redis-rs commands).
pub fn pipeline(
    raw: &mut Raw,
    commands: impl Iterator<Item = Vec<Vec<u8>>>,
    ok: impl Fn(&Reply) -> bool,
) {
    const BATCH: usize = 20_000;
    let mut commands = commands.peekable();
    let mut again: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut refused_since: Option<Instant> = None;
    while commands.peek().is_some() || !again.is_empty() {
        if again.is_empty() {
            refused_since = None;
        } else {
            let since = *refused_since.get_or_insert_with(Instant::now);
            assert!(
                since.elapsed() < PIPELINE_REPLY_DUE,
                "{} commands answered tokens ahead of the clock for 60 s",
                again.len()
            );
        }
        let batch: Vec<Vec<Vec<u8>>> = if again.is_empty() {
            commands.by_ref().take(BATCH).collect()
        } else {
            std::mem::take(&mut again)
        };
        let mut out = Vec::new();
        for args in &batch {
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            out.extend_from_slice(&encode(&args));
        }
        use std::io::Write;
        raw.stream.write_all(&out).expect("write a batch");
        for args in batch {
            let reply = raw.read(PIPELINE_REPLY_DUE);
            if token_floor_wait(&reply) {
                again.push(args);
                continue;
            }
            assert!(ok(&reply), "{reply:?}");
        }
    }
}

/// Whether `reply` refuses a new hold because the token counter is ahead of the server's clock
/// (`TRYAGAIN ... N ms left (tokens ahead of this server's clock)`, whatever N): a pipeline past
/// a millisecond's 1000th token, or a counter raised ahead of the clock. Such a command is sent
/// again; a restart grace's own `TRYAGAIN` (no "tokens ahead") is not, and fails the check.
pub fn token_floor_wait(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.starts_with("TRYAGAIN") && e.contains(" ms left (tokens ahead of this server's clock)"))
}

/// [`pipeline`] for commands built with redis-rs: how the suites' bulk fills are written.
pub fn pipeline_cmds(raw: &mut Raw, commands: &[redis::Cmd], ok: impl Fn(&Reply) -> bool) {
    pipeline(raw, commands.iter().map(words), ok)
}

/// The words of a redis-rs command, for [`pipeline`].
pub fn words(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            redis::Arg::Cursor => b"0".to_vec(),
        })
        .collect()
}
