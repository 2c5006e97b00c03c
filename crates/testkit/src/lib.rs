//! Test harness: every test starts its own `redis-server` with the relock module, in its own
//! temporary directory, on a free port, behind a guard whose `Drop` kills it even when the test
//! panics. Tests never link the module crate; they talk to a real server over the network.
//!
//! The module's tests, relock-client's and lockctl's tests and relock-chaos use it as a
//! dev-dependency (`relock-testkit`, never published), most as `use relock_testkit as common;`;
//! the Redis Cluster guard is `relock_testkit::cluster`, the loopback proxies `proxy` (a link
//! that goes silent or slow) and `cut` (a lost reply), the processes a test starts `process`
//! (killed on drop, the signal counter) and `pty` (a terminal a test types at); `sentinel` and
//! `tls` start the servers of the `redis+sentinel://` and `rediss://` tests.

pub mod cluster;

pub use redis;

pub mod ask;
#[cfg(feature = "client")]
pub mod client;
pub mod cut;
pub mod events;
pub mod payload;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod pty;
pub mod raw;
pub mod reply;
pub mod sentinel;
pub mod tls;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its first `PING`.
const READY_DEADLINE: Duration = Duration::from_secs(20);
/// The same under `RELOCK_SERVER_WRAPPER` (valgrind makes Redis 20-50 times slower).
const WRAPPED_READY_DEADLINE: Duration = Duration::from_secs(180);
/// How long a server may answer `LOADING` while it starts (its data loading, which is
/// progress) before the start counts as failed.
const LOADING_DEADLINE: Duration = Duration::from_secs(300);
/// How long a wrapped server may take to exit after `SHUTDOWN NOSAVE` (valgrind writes its
/// leak report then).
const WRAPPED_EXIT_DEADLINE: Duration = Duration::from_secs(120);

/// `RELOCK_SERVER_WRAPPER`, split on whitespace: a program (and its arguments) that runs
/// redis-server, e.g. `valgrind --leak-check=full --log-file=/tmp/vg.%p.log`.
fn server_wrapper() -> Option<Vec<String>> {
    let words: Vec<String> = std::env::var("RELOCK_SERVER_WRAPPER")
        .ok()?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// Path of the built module (`target/debug/librelock.so` unless `RELOCK_MODULE` says otherwise).
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("RELOCK_MODULE") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    let path = target.join("debug").join("librelock.so");
    assert!(
        path.exists(),
        "module not built at {} (run `cargo build -p relock` or `make test`)",
        path.display()
    );
    assert_module_is_fresh(&path);
    path
}

/// `cargo test` relinks the module crate's rlib but need not rebuild `librelock.so`, which is
/// what the servers load: refuse to test a module older than its sources.
fn assert_module_is_fresh(module: &Path) {
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let path = e.path();
                if path.is_dir() {
                    newest(&path)
                } else {
                    e.metadata().ok()?.modified().ok()
                }
            })
            .max()
    }
    /// The newest of the sources cargo built `module` from, as its dep-info (`librelock.d`
    /// beside it) lists them (the engine's among them): test-only files (`#[cfg(test)]`
    /// modules) do not count.
    fn newest_listed(module: &Path) -> Option<std::time::SystemTime> {
        let deps = std::fs::read_to_string(module.with_extension("d")).ok()?;
        let (_, sources) = deps.lines().next()?.split_once(": ")?;
        sources
            .split_whitespace()
            .filter_map(|f| std::fs::metadata(f).ok()?.modified().ok())
            .max()
    }
    let built = std::fs::metadata(module).and_then(|m| m.modified()).ok();
    // Without the dep-info: the module's sources and the engine's (crates/engine), built into it.
    let sources = newest_listed(module).or_else(|| {
        let root = workspace_root();
        newest(&root.join("src")).max(newest(&root.join("crates/engine/src")))
    });
    if let (Some(built), Some(sources)) = (built, sources) {
        assert!(
            built >= sources,
            "{} is older than src/: run `cargo build -p relock` first (`make test` does)",
            module.display()
        );
    }
}

/// The workspace's root folder (the module crate's).
pub fn workspace_root() -> PathBuf {
    // This crate is crates/testkit of the workspace.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|dir| dir.join("client").is_dir() && dir.join("Cargo.toml").is_file())
        .unwrap_or(here)
        .to_path_buf()
}

const PORT_TAKEN: &str = "port taken by another server";

/// Picks a port that was free a moment ago, below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 here). A port in that range is one
/// the kernel hands out by itself, to any outgoing connection or bind to port 0 on the machine:
/// between a server's kill and its restart on the same port one of those can take it, and the
/// restart fails ("Address already in use": a fresh make test, the AOF restart of
/// `expired_locks_do_not_come_back_from_aof_with_preamble`). Below the range only another
/// test's own pick can, which `Server::boot` retries for a new server.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    if low > 11_000 {
        for _ in 0..200 {
            let port = 10_000 + (next_random() % u64::from(low - 10_000)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A pseudo-random number, different in every process and call (xorshift over the time, the
/// process id and a counter): parallel test processes pick different ports.
fn next_random() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ seed;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// A running redis-server with the module loaded. Killed on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    load_module: bool,
}

impl Server {
    /// A server with the module and no persistence.
    pub fn start() -> Server {
        Server::with_args(&[])
    }

    /// A server with the module and extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub fn with_args(args: &[&str]) -> Server {
        Server::spawn(args, true)
    }

    /// A plain redis-server without the module (for baselines and negative tests).
    pub fn without_module(args: &[&str]) -> Server {
        Server::spawn(args, false)
    }

    fn spawn(args: &[&str], load_module: bool) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("relock-test-")
            .tempdir()
            .expect("temp dir");
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            args: args.iter().map(|s| s.to_string()).collect(),
            load_module,
        };
        server.boot(None);
        server
    }

    fn boot(&mut self, port: Option<u16>) {
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let port_now = port.unwrap_or_else(free_port);
            let mut cmd = match server_wrapper() {
                Some(words) => {
                    let mut cmd = Command::new(&words[0]);
                    cmd.args(&words[1..]).arg(redis_server_bin());
                    cmd
                }
                None => Command::new(redis_server_bin()),
            };
            cmd.arg("--port")
                .arg(port_now.to_string())
                .arg("--bind")
                .arg("127.0.0.1")
                .arg("--dir")
                .arg(self.dir.path())
                .arg("--save")
                .arg("")
                .arg("--appendonly")
                .arg("no")
                .arg("--logfile")
                .arg("redis.log")
                .arg("--enable-debug-command")
                .arg("yes");
            if self.load_module {
                cmd.arg("--loadmodule").arg(module_path());
            }
            cmd.args(&self.args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = cmd.spawn().expect("start redis-server (is it installed?)");
            self.child = Some(child);
            self.port = port_now;
            match self.wait_ready() {
                Ok(()) => return,
                Err(e) => {
                    last_error = e;
                    self.kill();
                    // Another process took the port between our probe and the start: try another.
                    let taken = last_error.starts_with(PORT_TAKEN)
                        || self.log().contains("Address already in use");
                    if port.is_none() && taken {
                        continue;
                    }
                    break;
                }
            }
        }
        panic!(
            "redis-server did not start: {last_error}\n--- log ---\n{}",
            self.log()
        );
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let wait = if server_wrapper().is_some() {
            WRAPPED_READY_DEADLINE
        } else {
            READY_DEADLINE
        };
        let mut deadline = Instant::now() + wait;
        let loading_bound = Instant::now() + LOADING_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("redis-server exited with {status}"));
                }
            }
            if let Ok(mut c) = self.try_conn() {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
                if let Err(e) = &pong {
                    // Loading its data (an AOF of a storm of 100,000 leases took over 20 s with
                    // the debug module beside the other lanes: a fresh run, 2026-12-02): it is
                    // up and making progress, so the deadline moves, up to a bound of its own.
                    if e.code() == Some("LOADING") && Instant::now() < loading_bound {
                        deadline = deadline.max(Instant::now() + wait);
                    }
                }
                if pong.is_ok() {
                    // Another test's server may have taken the port between our probe and our
                    // server's bind: only our own process counts as ready.
                    return match self.answering_pid(&mut c) {
                        Some(pid) if Some(pid) == self.pid() => Ok(()),
                        other => Err(format!(
                            "{PORT_TAKEN}: port {} answered by pid {other:?}, ours is {:?}",
                            self.port,
                            self.pid()
                        )),
                    };
                }
            }
            if Instant::now() > deadline {
                return Err("no PONG before the deadline".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn answering_pid(&self, c: &mut redis::Connection) -> Option<u32> {
        let info: String = redis::cmd("INFO").arg("server").query(c).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        connect_url(&self.url(), Duration::from_secs(5))
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection (RESP2).
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to test server")
    }

    /// A new connection that speaks RESP3 (`HELLO 3`).
    pub fn conn_resp3(&self) -> redis::Connection {
        connect_url(
            &format!("{}?protocol=resp3", self.url()),
            Duration::from_secs(5),
        )
        .expect("connect resp3")
    }

    /// The server's working directory (RDB/AOF files live here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Process id of the running server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL the server and reap it (no shutdown save). Under `RELOCK_SERVER_WRAPPER` it is
    /// asked to `SHUTDOWN NOSAVE` first, so that the wrapper (valgrind) can write its report.
    pub fn kill(&mut self) {
        if server_wrapper().is_some() {
            self.shutdown_gracefully();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn shutdown_gracefully(&mut self) {
        if self.child.is_none() {
            return;
        }
        if let Ok(mut c) = self.try_conn() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut c);
        }
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let deadline = Instant::now() + WRAPPED_EXIT_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill the server and start it again on the same port, dir and arguments, with `extra`
    /// arguments appended (later ones win in redis-server).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.kill();
        self.args.extend(extra.iter().map(|s| s.to_string()));
        let port = self.port;
        self.boot(Some(port));
    }

    /// Kill the server and start it again on the same port, dir and arguments.
    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }

    /// Send a signal (e.g. "STOP", "CONT") to the server process.
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A stopped server cannot die from SIGKILL until it is continued on some kernels'
        // accounting of wait(); continue it first so the reap never hangs.
        self.signal("CONT");
        self.kill();
    }
}

/// A connection to `url`: connected, and its setup (the client's `CLIENT SETINFO` or `HELLO`,
/// which redis-rs waits for without a bound: a stopped server held `conn()` for ever) answered,
/// within `within`. A setup that is not answered in time leaves its thread blocked until the
/// server answers or goes away; the caller gets an I/O error.
///
/// Its reads and writes have no timeout: with one (`SO_RCVTIMEO`), Linux fails a blocked read
/// with EINTR when the process is stopped and continued, or gets a signal, and redis-rs does
/// not retry it (a fresh make test failed three tests of one binary at once with
/// "Interrupted system call" after a 300 s bound was set on every connection).
pub fn connect_url(url: &str, within: Duration) -> redis::RedisResult<redis::Connection> {
    connect_setup(url, within)
}

/// [`connect_url`] with reads and writes bounded by `replies` (cluster and sentinel probes, which
/// must tell a node that does not answer from one that does, and treat any failure, EINTR
/// included, as "does not answer" and ask again).
pub fn connect_url_with(
    url: &str,
    within: Duration,
    replies: Duration,
) -> redis::RedisResult<redis::Connection> {
    let c = connect_setup(url, within)?;
    c.set_read_timeout(Some(replies))?;
    c.set_write_timeout(Some(replies))?;
    Ok(c)
}

fn connect_setup(url: &str, within: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url)?;
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(client.get_connection_with_timeout(within));
    });
    rx.recv_timeout(within + Duration::from_secs(1))
        .map_err(|_| {
            redis::RedisError::from((
                redis::ErrorKind::IoError,
                "no answer to the connection's setup",
                format!("{url} within {within:?}"),
            ))
        })?
}

fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// Makes `replica` a replica of `master` and waits until its link is up.
pub fn attach_replica(master: &Server, replica: &Server) {
    let mut r = replica.conn();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut r)
        .expect("REPLICAOF");
    assert!(
        link_up(&mut r, Duration::from_secs(10)),
        "replica did not connect:\n{}",
        replica.log()
    );
}

/// Waits, at most `within`, until the replica behind `c` says its link to its master is up.
pub fn link_up(c: &mut redis::Connection, within: Duration) -> bool {
    eventually(within, || {
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(c)
            .is_ok_and(|i| i.contains("master_link_status:up"))
    })
}

/// Continues (`SIGCONT`) the servers on drop, so that a failing assertion never leaves one that
/// the test stopped (`server.signal("STOP")`) stopped.
pub struct Resume<'a>(pub Vec<&'a Server>);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        for s in &self.0 {
            s.signal("CONT");
        }
    }
}

/// Polls `check` every few milliseconds until it returns true or `within` passes.
pub fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The journal's reason for a lock `MIGRATE` took away: `moved` where the server lets the
/// module tell which command runs (`RedisModule_CachedMicroseconds`: Redis 7.2+ and every
/// Valkey, which says `redis_version:7.2.4`), `deleted` on Redis 7.0 (docs/commands.md).
pub fn migrate_reason(c: &mut redis::Connection) -> &'static str {
    let info: String = redis::cmd("INFO").arg("server").query(c).expect("INFO");
    let version: Vec<u32> = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .expect("redis_version")
        .trim()
        .split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect();
    if version.as_slice() >= [7, 2].as_slice() {
        "moved"
    } else {
        "deleted"
    }
}

/// One field of `INFO relock` as an integer, e.g. `info_field(&mut c, "locks")` reads
/// `relock_locks` (Redis prefixes a module's INFO fields with the module name). The counts of what the keyspace holds (`locks`,
/// `holds`) are read once the server has no background free pending: Valkey 8 and later free a
/// flushed or reloaded database, and big values, in a background thread (their `lazyfree-lazy-*`
/// defaults), and a value counts until it is freed (docs/commands.md, `relock_locks`).
pub fn info_field(conn: &mut redis::Connection, field: &str) -> i64 {
    if field == "locks" || field == "holds" {
        wait_for_background_frees(conn);
    }
    let info: String = redis::cmd("INFO")
        .arg("relock")
        .query(conn)
        .expect("INFO relock");
    let wanted = format!("relock_{field}");
    info.lines()
        .find_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            (name == wanted)
                .then(|| value.parse::<i64>().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("INFO relock has no integer field {field}:\n{info}"))
}

/// Waits (at most 30 s) until `INFO memory` says `lazyfree_pending_objects:0`.
pub fn wait_for_background_frees(conn: &mut redis::Connection) {
    let mut none_pending =
        || reply::memory_field(conn, "lazyfree_pending_objects").unwrap_or(0) == 0;
    assert!(
        eventually(Duration::from_secs(30), &mut none_pending),
        "background frees still pending after 30 s"
    );
}

/// Builds a command from a name and any number of arguments: `cmd!("LOCK.ACQUIRE", k, o, 100)`.
#[macro_export]
macro_rules! cmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = $crate::redis::cmd($name);
        $(cmd.arg($arg);)*
        cmd
    }};
}

/// A command as text, for failure messages.
pub fn show(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Arg::Cursor => "<cursor>".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An integer-or-nil reply (tokens, counts); panics with the command on an error reply.
pub fn int_or_nil(c: &mut redis::Connection, cmd: redis::Cmd) -> Option<i64> {
    cmd.query(c)
        .unwrap_or_else(|e| panic!("{} failed: {e}", show(&cmd)))
}

/// `LOCK.ACQUIRE` of a lock the test knows is free: the token.
pub fn acquire(
    c: &mut redis::Connection,
    key: impl redis::ToRedisArgs,
    owner: impl redis::ToRedisArgs,
    ttl: i64,
) -> i64 {
    int_or_nil(c, cmd!("LOCK.ACQUIRE", key, owner, ttl)).expect("the lock should be free")
}

/// `LOCK.ACQUIRE key owner ttl`: the token, or `None` when the lock is taken.
pub fn try_acquire(c: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> Option<u64> {
    int_or_nil(c, cmd!("LOCK.ACQUIRE", key, owner, ttl)).map(|t| t as u64)
}

/// `LOCK.RELEASE key owner`: what it answers (the holds left, or `None` when `owner` held
/// nothing there).
pub fn release(c: &mut redis::Connection, key: &str, owner: &str) -> Option<i64> {
    int_or_nil(c, cmd!("LOCK.RELEASE", key, owner))
}

/// `LOCK.RENEW key owner ttl`: what it answers (`None` when `owner` holds nothing there).
pub fn renew(c: &mut redis::Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    int_or_nil(c, cmd!("LOCK.RENEW", key, owner, ttl))
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// `LOCK.INFO`'s reply for an exclusive lock, decoded after checking its field names and their
/// order (a shared key has no single owner: read it with `lock_info_fields`).
#[derive(Debug, Clone, PartialEq)]
pub struct LockInfo {
    pub owner: Vec<u8>,
    pub token: i64,
    pub count: i64,
    pub ttl: i64,
    pub waiters: i64,
}

/// The field names of `LOCK.INFO`, in order: the five of an exclusive lock, then the three every
/// key has since shared holds (spec: "Introspection"), then `permits_free` (since permits).
pub const LOCK_INFO_FIELDS: [&str; 9] = [
    "owner",
    "token",
    "count",
    "ttl",
    "waiters",
    "mode",
    "holders",
    "limit",
    "permits_free",
];

/// `LOCK.INFO`'s (name, value) pairs after checking the names and their order.
pub fn checked_info_pairs(pairs: Vec<(redis::Value, redis::Value)>) -> Vec<redis::Value> {
    use redis::Value;
    let names: Vec<String> = pairs
        .iter()
        .map(|(k, _)| match k {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            other => panic!("LOCK.INFO field name {other:?}"),
        })
        .collect();
    assert_eq!(names, LOCK_INFO_FIELDS, "LOCK.INFO fields and their order");
    pairs.into_iter().map(|(_, v)| v).collect()
}

/// Decodes `LOCK.INFO` of an exclusive lock from its (name, value) pairs; checks the three
/// trailing fields say so (mode exclusive, one holder, limit 1).
pub fn decode_lock_info(pairs: Vec<(redis::Value, redis::Value)>) -> LockInfo {
    use redis::Value;
    let values = checked_info_pairs(pairs);
    let int_at = |i: usize| match &values[i] {
        Value::Int(n) => *n,
        other => panic!(
            "LOCK.INFO {} is not an integer: {other:?}",
            LOCK_INFO_FIELDS[i]
        ),
    };
    let mode = match &values[5] {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("LOCK.INFO mode is not a string: {other:?}"),
    };
    assert_eq!(
        (mode.as_str(), int_at(6), int_at(7)),
        ("exclusive", 1, 1),
        "LOCK.INFO of an exclusive lock: mode, holders, limit"
    );
    let owner = match &values[0] {
        Value::BulkString(b) => b.clone(),
        other => panic!("LOCK.INFO owner is not a bulk string: {other:?}"),
    };
    LockInfo {
        owner,
        token: int_at(1),
        count: int_at(2),
        ttl: int_at(3),
        waiters: int_at(4),
    }
}

/// `LOCK.INFO key` as (name, value) pairs, or `None` for nil (a flat array of eighteen under
/// RESP2, a map under RESP3).
pub fn lock_info_pairs(
    c: &mut redis::Connection,
    key: impl redis::ToRedisArgs,
) -> Option<Vec<(redis::Value, redis::Value)>> {
    use redis::Value;
    let v: Value = cmd!("LOCK.INFO", key).query(c).expect("LOCK.INFO");
    match v {
        Value::Nil => None,
        Value::Map(pairs) => Some(pairs),
        Value::Array(items) => {
            assert_eq!(items.len(), 18, "LOCK.INFO flat array: {items:?}");
            let mut it = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            Some(pairs)
        }
        other => panic!("LOCK.INFO replied {other:?}"),
    }
}

/// `LOCK.INFO key` of an exclusive lock: nil, or the decoded map.
pub fn lock_info(c: &mut redis::Connection, key: impl redis::ToRedisArgs) -> Option<LockInfo> {
    lock_info_pairs(c, key).map(decode_lock_info)
}

/// `LOCK.ACQUIRE key owner ttl words...`: the token, or `None` for nil.
pub fn acq(
    c: &mut redis::Connection,
    key: &str,
    owner: &[u8],
    ttl: u64,
    words: &[&str],
) -> Option<i64> {
    let mut cmd = cmd!("LOCK.ACQUIRE", key, owner, ttl);
    for w in words {
        cmd.arg(*w);
    }
    int_or_nil(c, cmd)
}

/// Acquires `LOCK.ACQUIRE key owner ttl [SHARED]` for each `i` in `from..=to`, in Lua scripts
/// of up to 20,000 (fast, no round trips), `#` in `key` and `owner` standing for `i`. A new
/// hold past a millisecond's 1000th token answers `TRYAGAIN ... 1 ms left (tokens ahead of this
/// server's clock)` (docs/waiting-and-fencing.md: a loop in a script can reach that rate): the
/// script stops there and the rest is sent again in the next one, as a client does. Any other
/// error fails the test.
pub fn acquire_many(
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
    (from, to): (u64, u64),
    ttl: u64,
    shared: bool,
) {
    const SCRIPT: &str = "local to = tonumber(ARGV[4]) \
        for i = tonumber(ARGV[3]), to do \
          local key = string.gsub(ARGV[1], '#', tostring(i)) \
          local owner = string.gsub(ARGV[2], '#', tostring(i)) \
          local r \
          if ARGV[6] == 'SHARED' then \
            r = redis.pcall('LOCK.ACQUIRE', key, owner, ARGV[5], 'SHARED') \
          else \
            r = redis.pcall('LOCK.ACQUIRE', key, owner, ARGV[5]) \
          end \
          if type(r) == 'table' and r.err then \
            if string.find(r.err, ', 1 ms left (tokens ahead of this server', 1, true) then \
              return i \
            end \
            return r \
          end \
        end \
        return to + 1";
    let mode = if shared { "SHARED" } else { "" };
    let mut next = from;
    while next <= to {
        let last = to.min(next + 19_999);
        let reached: u64 = cmd!("EVAL", SCRIPT, 0, key, owner, next, last, ttl, mode)
            .query(c)
            .unwrap_or_else(|e| panic!("acquiring {key} / {owner} for {next}..={last}: {e}"));
        assert!(
            (next..=last + 1).contains(&reached),
            "the script stopped at {reached}, outside {next}..={last}"
        );
        next = reached;
    }
}

/// A connection whose reads give up after 10 s (a server that stopped answering fails the
/// test instead of hanging it).
pub fn connect(server: &Server) -> redis::Connection {
    let c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    c
}

/// Asserts that `server` still answers a `PING` (within 10 s); panics with `what`, the log's
/// crash lines and its tail when it died or froze.
pub fn assert_alive(server: &Server, what: &str) {
    use std::io::{Read, Write};
    let pong = (|| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"PING\r\n").ok()?;
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).ok()?;
        (&buf == b"+PONG\r\n").then_some(())
    })();
    if pong.is_none() {
        let log = server.log();
        let crash: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("crashed") || l.contains("RM_") || l.contains("ASSERT"))
            .take(8)
            .collect();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        panic!(
            "{what}: the server died or froze\n--- log (crash lines) ---\n{}\n--- log (tail) ---\n{}",
            crash.join("\n"),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

/// `BGREWRITEAOF` once no rewrite is running, then waits (at most 20 s each) for it to end and
/// asserts it succeeded.
pub fn rewrite_aof(c: &mut redis::Connection) {
    let persistence = |c: &mut redis::Connection| -> String {
        cmd!("INFO", "persistence")
            .query(c)
            .expect("INFO persistence")
    };
    let idle = |c: &mut redis::Connection| {
        let s = persistence(c);
        s.contains("aof_rewrite_in_progress:0") && s.contains("aof_rewrite_scheduled:0")
    };
    assert!(
        eventually(Duration::from_secs(20), || idle(c)),
        "an AOF rewrite did not finish:\n{}",
        persistence(c)
    );
    let _: redis::Value = cmd!("BGREWRITEAOF").query(c).expect("BGREWRITEAOF");
    assert!(
        eventually(Duration::from_secs(20), || idle(c)),
        "the AOF rewrite did not finish:\n{}",
        persistence(c)
    );
    let s = persistence(c);
    assert!(
        s.contains("aof_last_bgrewrite_status:ok"),
        "the AOF rewrite failed:\n{s}"
    );
}

/// Every command of the server's incremental AOF files so far (the multi-part AOF of Redis 7+
/// and Valkey), in order, as words (a non-bulk item as its debug text).
pub fn aof_commands(server: &Server) -> Vec<Vec<String>> {
    use raw::{parse, Reply};
    let dir = server.dir().join("appendonlydir");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("appendonlydir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).expect("an AOF file");
        let mut at = 0;
        while let Some((reply, used)) = parse(&bytes[at..]) {
            at += used;
            if let Reply::Array(items) = reply {
                out.push(
                    items
                        .into_iter()
                        .map(|i| match i {
                            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                            other => format!("{other:?}"),
                        })
                        .collect(),
                );
            }
        }
    }
    out
}

/// Waits (at most 10 s) until `INFO relock` counts no waiter and no timer.
pub fn settle_to_zero(c: &mut redis::Connection, what: &str) {
    assert!(
        eventually(Duration::from_secs(10), || info_field(c, "waiters") == 0
            && info_field(c, "timers") == 0),
        "{what}: INFO relock waiters {} timers {} never came back to 0",
        info_field(c, "waiters"),
        info_field(c, "timers")
    );
}

/// `WAIT 1 5000` until the one replica acknowledged everything.
pub fn wait_replica(m: &mut redis::Connection) {
    let acked: i64 = cmd!("WAIT", 1, 5000).query(m).expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

/// One field of an `INFO` section as text, e.g. `info_str(c, "replication", "role")`; empty
/// when the section does not have it.
pub fn info_str(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = cmd!("INFO", section).query(c).expect("INFO");
    info.lines()
        .find_map(|l| {
            let (n, v) = l.trim().split_once(':')?;
            (n == field).then(|| v.to_string())
        })
        .unwrap_or_default()
}

/// Lets `ttl` pass: a lease, a TTL or a timeout set just before (plus whatever margin the
/// caller adds) has run out, a TTL read now reads that much less, or a stall or a quiet window
/// a test asks for has run its whole length (a waiter still blocked after it, nothing sent
/// during it). The one fixed wait the Rust suites make, as in the Python and Node suites:
/// Redis's clock cannot be paused or moved. Everything else waits for an event
/// ([`eventually`], a reply with a deadline); `meta::suite_rules` keeps it so.
pub fn wait_out_ttl(ttl: Duration) {
    thread::sleep(ttl);
}

/// [`wait_out_ttl`] from a tokio task: the runtime keeps running meanwhile (a hold's renewals,
/// a waiter's task).
pub async fn wait_out_ttl_async(ttl: Duration) {
    tokio::time::sleep(ttl).await;
}

/// [`wait_out_ttl`] until `at` (nothing when it has passed), from a tokio task.
pub async fn wait_out_ttl_until(at: Instant) {
    tokio::time::sleep_until(at.into()).await;
}

/// [`eventually`] from a tokio task: polls the future `check` makes every few milliseconds
/// until it answers true or `within` passes, without blocking the runtime's thread.
pub async fn eventually_async<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
