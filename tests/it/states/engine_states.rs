//! Adversarial tests of the engine in server states a first pass did not reach: FAILOVER (and
//! its abort), REPLICAOF with deferred hand-offs pending and REPLICAOF NO ONE with locks
//! expiring, out of memory under noeviction and an evicting policy, loading a big RDB (DEBUG
//! RELOAD and a restart) with clients hammering, busy scripts, clients that vanish or misbehave,
//! and extreme values. One test per class of attack; each starts its own server(s).
//! Run on every server of the matrix with `REDIS_SERVER=... cargo test -p relock --test it
//! states::engine_states`.
use relock_testkit as common;
use relock_testkit::cmd;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::ask::{assert_idle, await_waiters};
use common::ask::{queued, waiters};
use common::raw::{encode, parse, Reply};
use common::settle_to_zero;
use common::{
    acquire, assert_alive, attach_replica, eventually, info_field, int_or_nil, lock_info,
    wait_replica, Server,
};
use redis::Connection;
use relock_testkit::info_str;
use relock_testkit::wait_out_ttl;

const SOON: Duration = Duration::from_secs(5);

/// These tests time server pauses and failovers: one at a time, so that on a small machine they
/// do not starve each other past the pauses they measure.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
const LONG_TTL: i64 = 100_000;
const SEED: i64 = 1 << 52;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A connection whose reads give up after 15 s (the kit's `connect` gives 10 s; these tests
/// read through failovers and reloads).
fn connect_15s(server: &Server) -> Connection {
    let c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("read timeout");
    c
}

/// A raw client that never panics on a closed connection: it reports what it got and whether
/// the server hung up, so that "answered exactly once" can be checked.
struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
    closed: bool,
    name: String,
}

impl Peer {
    fn connect(server: &Server, name: &str) -> Peer {
        let s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        s.set_nodelay(true).unwrap();
        Peer {
            s,
            buf: Vec::new(),
            closed: false,
            name: name.to_string(),
        }
    }

    fn send(&mut self, args: &[&[u8]]) {
        self.s.write_all(&encode(args)).expect("write");
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    fn wait(&mut self, key: &[u8], owner: &[u8], ttl: i64, timeout: i64) {
        let (ttl, timeout) = (ttl.to_string(), timeout.to_string());
        self.send(&[b"LOCK.WAIT", key, owner, ttl.as_bytes(), timeout.as_bytes()]);
    }

    /// The next reply, or None if none came within `within` (or the server hung up).
    fn next(&mut self, within: Duration) -> Option<Reply> {
        let deadline = Instant::now() + within;
        loop {
            if let Some((reply, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Some(reply);
            }
            if self.closed {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.s
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
                .unwrap();
            let mut chunk = [0u8; 8192];
            match self.s.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.closed = true,
            }
        }
    }

    fn expect(&mut self, within: Duration) -> Reply {
        let name = self.name.clone();
        self.next(within).unwrap_or_else(|| {
            panic!(
                "{name}: no reply within {within:?} (closed: {})",
                self.closed
            )
        })
    }

    fn token(&mut self, within: Duration) -> i64 {
        match self.expect(within) {
            Reply::Int(t) if t > 0 => t,
            other => panic!("{}: expected a token, got {other:?}", self.name),
        }
    }

    fn silent(&mut self, quiet: Duration, what: &str) {
        if let Some(r) = self.next(quiet) {
            panic!("{}: {what}: expected no reply, got {r:?}", self.name);
        }
    }

    /// Exactly one reply within `within`, then nothing more for `quiet`.
    fn exactly_one(&mut self, within: Duration, quiet: Duration) -> Reply {
        let first = self.expect(within);
        if let Some(second) = self.next(quiet) {
            panic!("{}: answered twice: {first:?} then {second:?}", self.name);
        }
        first
    }
}

/// A waiter (timeout `timeout`) queued behind whatever holds `key`.
fn queue_peer(
    server: &Server,
    c: &mut Connection,
    key: &str,
    owner: &str,
    ttl: i64,
    timeout: i64,
) -> Peer {
    let before = waiters(c, key);
    let mut w = Peer::connect(server, owner);
    w.wait(key.as_bytes(), owner.as_bytes(), ttl, timeout);
    await_waiters(c, key, before + 1);
    w
}

fn is_error(r: &Reply, prefixes: &[&str]) -> bool {
    matches!(r, Reply::Error(e) if prefixes.iter().any(|p| e.starts_with(p)))
}

fn last_token(c: &mut Connection) -> i64 {
    info_field(c, "last_token")
}

fn master_with(args: &[&str]) -> Server {
    let mut all = vec!["--repl-diskless-sync-delay", "0"];
    all.extend_from_slice(args);
    Server::with_args(&all)
}

// ---------------------------------------------------------------------------------------------
// 1. FAILOVER: waiters on the master, a lock expiring during the failover's write pause (the
// replica is stopped so the pause lasts), then the old master becoming a replica. Every waiter
// is answered exactly once (nil for a timed-out wait, READONLY/UNBLOCKED otherwise, never a
// token: the old master may write nothing after the pause began), the promoted replica serves
// the replicated locks, and its tokens are above every token issued before.
// ---------------------------------------------------------------------------------------------

#[test]
fn failover_answers_every_waiter_once_and_tokens_keep_rising() {
    let _serial = serial();
    let master = master_with(&[]);
    let replica = master_with(&[]);
    attach_replica(&master, &replica);
    let mut m = connect_15s(&master);
    let _: () = cmd!("LOCK.APPLY", "seed", "o", SEED, 1)
        .query(&mut m)
        .unwrap();
    let held = acquire(&mut m, "held", "a", LONG_TTL);
    // Long for now; renewed to a short lease right before the failover, so that however slow
    // the setup, it runs out inside the pause.
    let short = acquire(&mut m, "short", "a", LONG_TTL);
    let mut peers = Vec::new();
    for i in 0..3 {
        peers.push(queue_peer(
            &master,
            &mut m,
            "held",
            &format!("h{i}"),
            LONG_TTL,
            0,
        ));
        peers.push(queue_peer(
            &master,
            &mut m,
            "short",
            &format!("s{i}"),
            LONG_TTL,
            0,
        ));
    }
    let mut timing_out = queue_peer(&master, &mut m, "held", "ht", LONG_TTL, 700);
    wait_replica(&mut m);
    let max_before = last_token(&mut m);
    assert!(max_before >= short && short > held && held > SEED);

    replica.signal("STOP");
    let _: () = cmd!("SET", "lag", "1").query(&mut m).unwrap(); // the replica falls behind
    let _: i64 = cmd!("LOCK.RENEW", "short", "a", 600).query(&mut m).unwrap();
    let _: () = cmd!("FAILOVER").query(&mut m).expect("FAILOVER");
    wait_out_ttl(Duration::from_millis(1500)); // `short` runs out inside the pause
    assert_alive(&master, "during the failover pause");
    for p in peers.iter_mut() {
        p.silent(Duration::from_millis(10), "during the failover pause");
    }
    assert_eq!(
        timing_out.exactly_one(SOON, Duration::from_millis(50)),
        Reply::Nil,
        "a wait timing out during the pause"
    );
    assert_idle(
        &mut m,
        "master paused for FAILOVER with a deferred hand-off",
    );
    replica.signal("CONT");

    let mut r = connect_15s(&replica);
    assert!(
        eventually(Duration::from_secs(15), || info_str(
            &mut r,
            "replication",
            "role"
        ) == "master"
            && info_str(&mut m, "replication", "role") == "slave"),
        "failover did not complete: old master {} / replica {}",
        info_str(&mut m, "replication", "role"),
        info_str(&mut r, "replication", "role")
    );
    for p in peers.iter_mut() {
        let reply = p.exactly_one(SOON, Duration::from_millis(200));
        assert!(
            is_error(&reply, &["READONLY", "UNBLOCKED", "REDIRECT"]),
            "{}: waiter on the old master got {reply:?}",
            p.name
        );
    }
    settle_to_zero(&mut m, "old master after FAILOVER");
    assert_alive(&master, "old master after FAILOVER");

    // The promoted replica has the held lock as granted, the short one gone, and issues only
    // larger tokens.
    let info = lock_info(&mut r, "held").expect("held lock replicated");
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], held));
    assert!(eventually(SOON, || lock_info(&mut r, "short").is_none()));
    let fresh = acquire(&mut r, "short", "n", LONG_TTL);
    assert!(
        fresh > max_before,
        "new master issued {fresh} <= {max_before}"
    );
    // Waiters move to the new master and are served there.
    let mut again = queue_peer(&replica, &mut r, "held", "h0", LONG_TTL, 0);
    assert_eq!(
        int_or_nil(&mut r, cmd!("LOCK.RELEASE", "held", "a")),
        Some(0)
    );
    let t = again.token(SOON);
    assert!(t > fresh);
    // The old master, now a replica, refuses lock changes and mirrors the new master.
    let refused: redis::RedisResult<Option<i64>> =
        cmd!("LOCK.ACQUIRE", "x", "y", 1000).query(&mut m);
    assert_eq!(
        refused
            .err()
            .and_then(|e| e.code().map(str::to_string))
            .as_deref(),
        Some("READONLY")
    );
    assert!(
        eventually(SOON, || lock_info(&mut m, "held")
            .is_some_and(|i| i.token == t)),
        "old master does not mirror the new master: {:?}",
        lock_info(&mut m, "held")
    );
    settle_to_zero(&mut r, "new master");
}

/// A FAILOVER that times out (the replica never catches up) or a SHUTDOWN waiting for a lagging
/// replica that is aborted: the write pause ends with the server still a master, and the
/// hand-off deferred during it happens then.
#[test]
fn aborted_failover_and_shutdown_hand_off_after_the_pause() {
    let _serial = serial();
    let master = master_with(&["--shutdown-timeout", "20"]);
    let replica = master_with(&[]);
    attach_replica(&master, &replica);
    let mut m = connect_15s(&master);
    for how in ["FAILOVER TIMEOUT", "SHUTDOWN", "FAILOVER ABORT"] {
        let key = format!("k-{}", how.replace(' ', "-"));
        let before = acquire(&mut m, &key, "a", LONG_TTL);
        let mut w = queue_peer(&master, &mut m, &key, "b", LONG_TTL, 0);
        wait_replica(&mut m);
        replica.signal("STOP");
        let _: () = cmd!("SET", "lag", how).query(&mut m).unwrap();
        // A short lease from now, so that it runs out inside the pause however slow the setup.
        let _: i64 = cmd!("LOCK.RENEW", &key, "a", 600).query(&mut m).unwrap();
        let mut shutdown = None;
        match how {
            "FAILOVER TIMEOUT" => {
                let _: () = cmd!("FAILOVER", "TIMEOUT", 5000).query(&mut m).unwrap();
            }
            "FAILOVER ABORT" => {
                let _: () = cmd!("FAILOVER").query(&mut m).unwrap();
            }
            _ => {
                let mut s = Peer::connect(&master, "shutdown");
                s.send(&[b"SHUTDOWN"]);
                shutdown = Some(s);
            }
        }
        wait_out_ttl(Duration::from_millis(1500)); // the 600 ms lease runs out inside the pause
        w.silent(
            Duration::from_millis(10),
            &format!("{how}: during the pause"),
        );
        assert_alive(&master, how);
        match how {
            "FAILOVER TIMEOUT" => {} // ends by itself
            "FAILOVER ABORT" => {
                let _: () = cmd!("FAILOVER", "ABORT").query(&mut m).unwrap();
            }
            _ => {
                let _: () = cmd!("SHUTDOWN", "ABORT")
                    .query(&mut m)
                    .expect("SHUTDOWN ABORT");
                let mut s = shutdown.take().unwrap();
                let r = s.exactly_one(SOON, Duration::from_millis(50));
                assert!(is_error(&r, &["ERR"]), "SHUTDOWN after ABORT: {r:?}");
            }
        }
        let t = w.token(Duration::from_secs(10));
        assert!(t > before, "{how}");
        w.silent(Duration::from_millis(200), &format!("{how}: second reply"));
        assert_eq!(info_str(&mut m, "replication", "role"), "master", "{how}");
        let info = lock_info(&mut m, &key).expect("handed off");
        assert_eq!((info.owner.as_slice(), info.token), (&b"b"[..], t), "{how}");
        replica.signal("CONT");
        wait_replica(&mut m);
        let mut r = connect_15s(&replica);
        assert_eq!(
            lock_info(&mut r, &key).map(|i| i.token),
            Some(t),
            "{how}: replica"
        );
        settle_to_zero(&mut m, how);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. REPLICAOF on a master with deferred work pending (an expiry hand-off and a DEL held back
// by CLIENT PAUSE WRITE), and REPLICAOF NO ONE on a replica whose locks expire.
// ---------------------------------------------------------------------------------------------

#[test]
fn replicaof_during_a_pause_with_deferred_hand_offs_then_no_one() {
    let _serial = serial();
    let upstream = Server::start();
    let server = master_with(&[]);
    let mut c = connect_15s(&server);
    // `exp` is held long until its waiters are queued, then renewed to 300 ms in the EXEC that
    // starts the pause: its lease ends inside the pause however slow a loaded machine makes
    // the steps before (with a 300 ms lease taken first, the queue could be granted before it
    // was seen). The pause is long enough for REPLICAOF to land inside it at load too.
    let first = acquire(&mut c, "exp", "a", LONG_TTL);
    let mut e1 = queue_peer(&server, &mut c, "exp", "e1", LONG_TTL, 0);
    let mut e2 = queue_peer(&server, &mut c, "exp", "e2", LONG_TTL, 0);
    acquire(&mut c, "del", "a", LONG_TTL);
    let mut d1 = queue_peer(&server, &mut c, "del", "d1", LONG_TTL, 0);
    let mut d2 = queue_peer(&server, &mut c, "del", "d2", LONG_TTL, 2000);
    let paused_at = Instant::now();
    let () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("exp")
        .arg("a")
        .arg(300)
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("WRITE")
        .ignore()
        .query(&mut c)
        .unwrap();
    let mut deleter = Peer::connect(&server, "deleter");
    deleter.send(&[b"DEL", b"del"]); // held back by the pause
    wait_out_ttl(Duration::from_millis(500)); // `exp` ran out: its hand-off is deferred
    for p in [&mut e1, &mut e2, &mut d1, &mut d2, &mut deleter] {
        p.silent(Duration::from_millis(10), "during the pause");
    }
    let _: () = cmd!("REPLICAOF", "127.0.0.1", upstream.port)
        .query(&mut c)
        .expect("REPLICAOF during a pause");
    for p in [&mut e1, &mut e2, &mut d1, &mut d2] {
        let r = p.exactly_one(SOON, Duration::from_millis(300));
        assert!(
            is_error(&r, &["READONLY", "UNBLOCKED", "REDIRECT"]),
            "{}: {r:?}",
            p.name
        );
    }
    // The held-back DEL runs once the pause ends (or is refused): one answer either way.
    let r = deleter.exactly_one(Duration::from_secs(8), Duration::from_millis(200));
    assert!(
        matches!(r, Reply::Int(_)) || is_error(&r, &["READONLY", "UNBLOCKED", "REDIRECT"]),
        "held-back DEL: {r:?}"
    );
    assert_alive(&server, "after REPLICAOF during a pause");
    assert!(eventually(Duration::from_secs(10), || info_str(
        &mut c,
        "replication",
        "master_link_status"
    ) == "up"));
    settle_to_zero(&mut c, "master turned replica");
    // Past the pause and every retry.
    let past = (paused_at + Duration::from_millis(4200)).saturating_duration_since(Instant::now());
    wait_out_ttl(past.max(Duration::from_millis(1200)));
    assert_idle(&mut c, "replica with dropped deferred work");
    // Promoted again: grants above everything it issued before, hand-offs work.
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut c).unwrap();
    let t = acquire(&mut c, "exp", "z", LONG_TTL);
    assert!(t > first);
    let mut w = queue_peer(&server, &mut c, "exp", "w", LONG_TTL, 0);
    let _: i64 = cmd!("LOCK.RENEW", "exp", "z", 300).query(&mut c).unwrap();
    assert!(w.token(SOON) > t);
    settle_to_zero(&mut c, "promoted again");
}

#[test]
fn a_promoted_replica_expires_and_hands_off_replicated_locks() {
    let _serial = serial();
    let mut master = master_with(&[]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = connect_15s(&master);
    let _: () = cmd!("LOCK.APPLY", "seed", "o", SEED, 1)
        .query(&mut m)
        .unwrap();
    let gone = acquire(&mut m, "gone", "a", 300);
    // (6 s: it must still be held after the kill, the promotion and the first waiter's grant,
    // which took more than 1.5 s on a loaded machine.)
    let later = acquire(&mut m, "later", "a", 6000);
    let forever = acquire(&mut m, "forever", "a", LONG_TTL);
    let _: i64 = cmd!("PERSIST", "forever").query(&mut m).unwrap();
    wait_replica(&mut m);
    let max_before = last_token(&mut m);
    master.kill();
    wait_out_ttl(Duration::from_millis(400)); // `gone` ran out on the orphaned replica
    let mut r = connect_15s(&replica);
    assert_eq!(lock_info(&mut r, "gone"), None, "expired on the replica");
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    // A waiter on a lock that ran out while this was a replica gets it at once, above all
    // tokens the old master issued.
    let mut g = Peer::connect(&replica, "g");
    g.wait(b"gone", b"g", LONG_TTL, 0);
    let tg = g.token(SOON);
    assert!(tg > max_before && tg > gone);
    // A waiter on a lock that runs out later is served at its expiry.
    let started = Instant::now();
    let mut l = queue_peer(&replica, &mut r, "later", "l", LONG_TTL, 0);
    let tl = l.token(Duration::from_secs(10));
    assert!(tl > tg && tl > later);
    assert!(started.elapsed() < Duration::from_secs(8));
    // A lock without expiry keeps its waiter until released; its timeout still works (2 s:
    // longer than the look that it is queued).
    let mut f = queue_peer(&replica, &mut r, "forever", "f", LONG_TTL, 2000);
    assert_eq!(f.exactly_one(SOON, Duration::from_millis(100)), Reply::Nil);
    let mut f2 = queue_peer(&replica, &mut r, "forever", "f2", LONG_TTL, 0);
    assert_eq!(
        int_or_nil(&mut r, cmd!("LOCK.RELEASE", "forever", "a")),
        Some(0)
    );
    assert!(f2.token(SOON) > forever);
    settle_to_zero(&mut r, "promoted replica");
    assert_alive(&replica, "promoted replica");
}

// ---------------------------------------------------------------------------------------------
// 3. Out of memory.
// ---------------------------------------------------------------------------------------------

fn expect_oom(c: &mut Connection, command: redis::Cmd) {
    let result: redis::RedisResult<redis::Value> = command.query(c);
    match result {
        Err(e) if e.to_string().contains("OOM") => {}
        other => panic!("{} out of memory: {other:?}", common::show(&command)),
    }
}

#[test]
fn out_of_memory_under_noeviction_refuses_new_holds_and_still_hands_off() {
    let _serial = serial();
    let server = Server::with_args(&["--maxmemory-policy", "noeviction"]);
    let mut c = connect_15s(&server);
    acquire(&mut c, "exp", "a", 600);
    let mut chain = Vec::new();
    for i in 0..5 {
        chain.push(queue_peer(&server, &mut c, "exp", &format!("c{i}"), 30, 0));
    }
    let held = acquire(&mut c, "held", "a", LONG_TTL);
    let mut hw = queue_peer(&server, &mut c, "held", "hw", LONG_TTL, 0);
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 1).query(&mut c).unwrap();
    for command in [
        cmd!("LOCK.ACQUIRE", "new", "x", 1000),
        cmd!("LOCK.REENTER", "held", "a", 1000),
        cmd!("LOCK.WAIT", "held", "x", 1000, 0),
        cmd!("LOCK.WAIT", "new", "x", 1000, 0),
        cmd!("LOCK.APPLY", "new", "x", SEED, 1),
    ] {
        expect_oom(&mut c, command);
    }
    // MULTI with a denied command is refused as a whole; one with a release runs.
    let r: redis::RedisResult<Vec<i64>> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("new")
        .arg("x")
        .arg(1000)
        .query(&mut c);
    assert!(r.is_err(), "MULTI with LOCK.ACQUIRE under OOM: {r:?}");
    // The expiry chain (timer hand-offs) runs through every waiter under OOM.
    let mut last = 0;
    for w in chain.iter_mut() {
        let t = w.token(SOON);
        assert!(t > last);
        last = t;
        w.silent(Duration::from_millis(5), "chain");
    }
    // (Redis refuses every command queued in MULTI under OOM, so these run one by one.)
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "held", "a", LONG_TTL)),
        Some(held)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "held", "a")),
        Some(0)
    );
    let t = hw.token(SOON);
    assert!(t > held);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.FORCERELEASE", "held")),
        Some(1)
    );
    settle_to_zero(&mut c, "OOM");
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    acquire(&mut c, "new", "x", 1000);
    assert_alive(&server, "OOM");
}

/// allkeys-lru evicts held locks with waiters: the waiters are served (each exactly once, FIFO
/// tokens), nobody is left queued, and the module warned at load.
#[test]
fn allkeys_lru_evicting_held_locks_serves_every_waiter_once() {
    let _serial = serial();
    let server = Server::with_args(&["--maxmemory-policy", "allkeys-lru"]);
    assert!(
        server.log().contains("maxmemory-policy is allkeys-lru"),
        "no warning at load:\n{}",
        server.log()
    );
    let mut c = connect_15s(&server);
    let _: () = cmd!("CLIENT", "NO-EVICT", "on").query(&mut c).unwrap_or(());
    let mut peers = Vec::new();
    for k in 0..4 {
        let key = format!("k{k}");
        acquire(&mut c, &key, "a", LONG_TTL);
        for i in 0..5 {
            peers.push((
                k,
                queue_peer(&server, &mut c, &key, &format!("w{k}-{i}"), LONG_TTL, 0),
            ));
        }
    }
    let used: i64 = info_str(&mut c, "memory", "used_memory").parse().unwrap();
    let _: () = cmd!("CONFIG", "SET", "maxmemory", used + (2 << 20))
        .query(&mut c)
        .unwrap();
    // Fill memory: every write evicts, locks included (they are the least recently used).
    let value = vec![b'x'; 64 << 10];
    for i in 0..200 {
        let _: redis::RedisResult<()> = cmd!("SET", format!("fill{i}"), &value[..]).query(&mut c);
    }
    let evicted: i64 = info_str(&mut c, "stats", "evicted_keys").parse().unwrap();
    assert!(evicted > 0, "nothing evicted");
    // Keep evicting until every waiter has been granted (a granted lock is itself evicted).
    let mut last = [0i64; 4];
    for (k, p) in peers.iter_mut() {
        let mut got = None;
        for round in 0..200 {
            if let Some(r) = p.next(Duration::from_millis(20)) {
                got = Some(r);
                break;
            }
            let _: redis::RedisResult<()> =
                cmd!("SET", format!("more{round}"), &value[..]).query(&mut c);
        }
        match got {
            Some(Reply::Int(t)) if t > last[*k] => last[*k] = t,
            other => panic!(
                "{}: {other:?} (previous token on k{k}: {})",
                p.name, last[*k]
            ),
        }
        p.silent(Duration::from_millis(5), "evicted lock's waiter");
    }
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    settle_to_zero(&mut c, "allkeys-lru");
    assert_alive(&server, "allkeys-lru");
}

// ---------------------------------------------------------------------------------------------
// 4. Loading: a big RDB (locks and strings) reloaded with waiters queued and locks running out
// during the reload, clients sending LOCK.* meanwhile; then a restart that loads it again
// while clients hammer.
// ---------------------------------------------------------------------------------------------

/// Clients that send `LOCK.*` to `port` until `stop`, one connection after another; each
/// answer they get counts in `answers` (a `LOADING` error too), so that a test can wait for the
/// hammering to be under way.
fn hammer(
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> std::thread::JoinHandle<(usize, usize, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut loading, mut ok, mut odd) = (0, 0, Vec::new());
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                std::thread::sleep(Duration::from_millis(5)); // the hammer's pace (not a wait)
                continue;
            };
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            n += 1;
            let key = format!("h{n}");
            let cmds: Vec<Vec<u8>> = vec![
                encode(&[b"LOCK.ACQUIRE", key.as_bytes(), b"o", b"100000"]),
                encode(&[b"LOCK.WAIT", b"held", b"hammer", b"1000", b"1"]),
                encode(&[b"LOCK.INFO", key.as_bytes()]),
            ];
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let mut fine = true;
            for cmd in cmds {
                if s.write_all(&cmd).is_err() {
                    fine = false;
                    break;
                }
                let reply = loop {
                    if let Some((r, used)) = parse(&buf) {
                        buf.drain(..used);
                        break Some(r);
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break None,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                };
                if reply.is_some() {
                    answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match reply {
                    Some(Reply::Error(e)) if e.starts_with("LOADING") => loading += 1,
                    Some(Reply::Error(e)) => odd.push(e),
                    Some(_) => ok += 1,
                    None => {
                        fine = false;
                        break;
                    }
                }
            }
            if !fine {
                std::thread::sleep(Duration::from_millis(5)); // the hammer's pace (not a wait)
            }
        }
        (loading, ok, odd)
    })
}

#[test]
fn loading_a_big_rdb_with_waiters_and_clients_hammering() {
    let _serial = serial();
    let mut server = Server::start();
    let mut c = connect_15s(&server);
    let _: () = cmd!("DEBUG", "POPULATE", 150_000).query(&mut c).unwrap();
    common::acquire_many(&mut c, "lk:#", "o", (0, 149_999), 3_600_000, false);
    // How long a reload takes here, to make a lock run out in the middle of one.
    let started = Instant::now();
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).expect("DEBUG RELOAD");
    let reload = started.elapsed();
    let ttl = (reload.as_millis() as i64 / 3).max(20);

    let held = acquire(&mut c, "held", "a", LONG_TTL);
    let mut hw = queue_peer(&server, &mut c, "held", "hw", LONG_TTL, 0);
    let mut ht = queue_peer(&server, &mut c, "held", "ht", LONG_TTL, ttl);
    let exp = acquire(&mut c, "exp", "a", ttl + 30);
    let mut ew = queue_peer(&server, &mut c, "exp", "ew", LONG_TTL, 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answered = || answers.load(std::sync::atomic::Ordering::Relaxed);
    let h = hammer(server.port, stop.clone(), answers.clone());
    // The reload starts with the hammer under way, and the hammer goes on past its end.
    assert!(
        eventually(SOON, || answered() > 0),
        "the hammer got no answer"
    );
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).expect("DEBUG RELOAD");
    let after_reload = answered();
    assert!(
        eventually(SOON, || answered() > after_reload),
        "the hammer got no answer after the reload"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (loading, ok, odd) = h.join().unwrap();
    eprintln!("reload {reload:?}; hammer: {loading} LOADING, {ok} answered, odd {odd:?}");
    assert!(
        odd.iter().all(|e| e.starts_with("BUSY")),
        "unexpected errors: {odd:?}"
    );
    assert_alive(&server, "after DEBUG RELOAD");
    // The lock that ran out during the reload went to its waiter; the wait that ran out ended.
    let te = ew.token(SOON);
    assert!(te > exp);
    assert_eq!(ht.exactly_one(SOON, Duration::from_millis(50)), Reply::Nil);
    hw.silent(Duration::from_millis(200), "held lock's waiter");
    let info = lock_info(&mut c, "held").expect("held survives");
    assert_eq!((info.token, info.waiters), (held, 1));
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "held", "a")),
        Some(0)
    );
    assert!(hw.token(SOON) > te);
    settle_to_zero(&mut c, "after DEBUG RELOAD");

    // A restart loads the same RDB; a lock that runs out while the server is down is gone.
    let _: i64 = cmd!("LOCK.FORCERELEASE", "held").query(&mut c).unwrap();
    acquire(&mut c, "down", "a", 200);
    let max_before = last_token(&mut c);
    let _: () = cmd!("SAVE").query(&mut c).unwrap();
    drop(c);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hammer(server.port, stop.clone(), answers.clone());
    // The restart comes with the hammer under way (it goes on while the server is down and
    // loads, until the restarted server answers).
    assert!(
        eventually(SOON, || answers.load(std::sync::atomic::Ordering::Relaxed)
            > 0),
        "the hammer got no answer before the restart"
    );
    server.restart();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (loading, ok, odd) = h.join().unwrap();
    eprintln!("restart: hammer {loading} LOADING, {ok} answered, odd {odd:?}");
    let mut c = connect_15s(&server);
    assert_eq!(lock_info(&mut c, "down"), None);
    assert!(info_field(&mut c, "locks") >= 150_000);
    let t = acquire(&mut c, "down", "b", 1000);
    assert!(t > max_before, "token after restart {t} <= {max_before}");
    settle_to_zero(&mut c, "after restart");
}

// ---------------------------------------------------------------------------------------------
// 5. Busy scripts: timers wait for the script, then hand-offs and timeouts happen; a script's
// LOCK.WAIT never blocks; SCRIPT KILL of a reading script; DEBUG SLEEP.
// ---------------------------------------------------------------------------------------------

#[test]
fn busy_scripts_and_debug_sleep_delay_but_do_not_lose_hand_offs() {
    let _serial = serial();
    let server = Server::with_args(&["--busy-reply-threshold", "200"]);
    let mut c = connect_15s(&server);
    // `exp` is held long until its waiter is queued; the script renews it to 300 ms, so that
    // its lease ends inside the script however slow a loaded machine makes the steps before;
    // `ht`'s 2 s timeout also ends inside the 4 s script (a 300 ms lease and a 400 ms timeout
    // had to outlast three queued waiters and a connect, and the BUSY check had to come
    // within 1.2 s).
    let t0 = acquire(&mut c, "exp", "a", LONG_TTL);
    let mut ew = queue_peer(&server, &mut c, "exp", "ew", LONG_TTL, 0);
    acquire(&mut c, "held", "a", LONG_TTL);
    let mut ht = queue_peer(&server, &mut c, "held", "ht", LONG_TTL, 2000);
    let mut hw = queue_peer(&server, &mut c, "held", "hw", LONG_TTL, 0);
    // A script that keeps the server busy for 4 s, after writing.
    let busy = "redis.call('LOCK.RENEW', 'exp', 'a', 300) redis.call('SET', 'x', '1') \
                local t = redis.call('TIME') \
                local start = t[1] * 1000000 + t[2] \
                while true do t = redis.call('TIME') \
                if t[1] * 1000000 + t[2] - start > 4000000 then break end end \
                return redis.call('LOCK.WAIT', 'held', 'script', 1000, 0)";
    let mut s = Peer::connect(&server, "script");
    s.send(&[b"EVAL", busy.as_bytes(), b"0"]);
    // The script runs once another client's command is answered BUSY (before it starts, the
    // command is answered; once it runs, past the 200 ms threshold, it is refused).
    let mut last = None;
    assert!(
        eventually(SOON, || {
            let mut other = Peer::connect(&server, "other");
            other.send(&[b"LOCK.INFO", b"exp"]);
            let r = other.expect(SOON);
            let busy = is_error(&r, &["BUSY"]);
            last = Some(r);
            busy
        }),
        "during a busy script: {last:?}"
    );
    // The 300 ms lease the script gave `exp` runs out inside the script.
    wait_out_ttl(Duration::from_millis(300));
    ew.silent(Duration::from_millis(10), "during the script");
    ht.silent(Duration::from_millis(10), "during the script");
    // The script's LOCK.WAIT on a held lock does not block: nil.
    assert_eq!(s.exactly_one(SOON, Duration::from_millis(50)), Reply::Nil);
    assert!(ew.token(SOON) > t0);
    assert_eq!(ht.exactly_one(SOON, Duration::from_millis(50)), Reply::Nil);
    hw.silent(Duration::from_millis(100), "held lock's waiter");
    // LOCK.WAIT in a script on a free key grants at once; on a queued free key, nil.
    let t: Option<i64> = cmd!(
        "EVAL",
        "return redis.call('LOCK.WAIT', KEYS[1], 'sc', 1000, 0)",
        1,
        "free"
    )
    .query(&mut c)
    .unwrap();
    assert!(t.is_some());
    let queued: Option<i64> = cmd!(
        "EVAL",
        "redis.call('DEL', KEYS[1]) return redis.call('LOCK.WAIT', KEYS[1], 'sc', 1000, 100000)",
        1,
        "held"
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(queued, None, "a script barged past a queued waiter");
    let th = hw.token(SOON);
    // SCRIPT KILL of a script that only reads locks.
    let reader = "while true do redis.call('LOCK.INFO', KEYS[1]) end";
    let mut s = Peer::connect(&server, "reader");
    s.send(&[b"EVAL", reader.as_bytes(), b"1", b"held"]);
    // Once the script runs, SCRIPT KILL kills it (before, it answers NOTBUSY).
    assert!(
        eventually(SOON, || {
            let killed: redis::RedisResult<()> = cmd!("SCRIPT", "KILL").query(&mut c);
            match killed {
                Ok(()) => true,
                Err(e) if e.code() == Some("NOTBUSY") => false,
                Err(e) => panic!("SCRIPT KILL: {e}"),
            }
        }),
        "the reading script never ran"
    );
    let r = s.exactly_one(SOON, Duration::from_millis(50));
    assert!(matches!(r, Reply::Error(_)), "killed script: {r:?}");
    // DEBUG SLEEP while a lock with a waiter runs out (renewed to 200 ms in the same write as
    // the sleep, once the waiter is queued).
    acquire(&mut c, "exp2", "a", LONG_TTL);
    let mut w2 = queue_peer(&server, &mut c, "exp2", "w2", LONG_TTL, 0);
    let _: (i64, ()) = redis::pipe()
        .cmd("LOCK.RENEW")
        .arg("exp2")
        .arg("a")
        .arg(200)
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.6")
        .query(&mut c)
        .unwrap();
    assert!(w2.token(SOON) > th);
    let info = lock_info(&mut c, "held").expect("hw holds");
    assert_eq!((info.owner.as_slice(), info.token), (&b"hw"[..], th));
    settle_to_zero(&mut c, "busy scripts");
    assert_alive(&server, "busy scripts");
}

// ---------------------------------------------------------------------------------------------
// 6. Clients that vanish or misbehave.
// ---------------------------------------------------------------------------------------------

#[test]
fn clients_that_vanish_or_misbehave() {
    let _serial = serial();
    let server = Server::start();
    let mut c = connect_15s(&server);
    let _: () = cmd!("CLIENT", "NO-EVICT", "on").query(&mut c).unwrap();
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    // Half-sent LOCK.WAIT, then gone.
    {
        let mut p = Peer::connect(&server, "half");
        p.send_bytes(b"*5\r\n$9\r\nLOCK.WAIT\r\n$1\r\nk\r\n$4\r\nhalf\r\n$6\r\n10");
    }
    // Pipelined waits then gone at once.
    {
        let mut p = Peer::connect(&server, "pipe");
        let mut bytes = encode(&[b"LOCK.WAIT", b"k", b"p1", b"100000", b"0"]);
        bytes.extend(encode(&[b"LOCK.WAIT", b"k", b"p2", b"100000", b"0"]));
        bytes.extend(encode(&[b"PING"]));
        p.send_bytes(&bytes);
    }
    // QUIT inside MULTI with a queued LOCK.WAIT.
    {
        let mut p = Peer::connect(&server, "quit");
        let mut bytes = encode(&[b"MULTI"]);
        bytes.extend(encode(&[b"LOCK.WAIT", b"k", b"q", b"100000", b"0"]));
        bytes.extend(encode(&[b"QUIT"]));
        p.send_bytes(&bytes);
        let _ = p.next(Duration::from_millis(300));
    }
    // A waiter with RESET and a PING pipelined behind it: they run after its grant.
    let mut reset = Peer::connect(&server, "reset");
    let mut bytes = encode(&[b"LOCK.WAIT", b"k", b"r", b"100000", b"0"]);
    bytes.extend(encode(&[b"RESET"]));
    bytes.extend(encode(&[b"PING"]));
    reset.send_bytes(&bytes);
    // Whatever of the vanished ones got queued is gone again; only `reset` waits.
    assert!(
        eventually(SOON, || queued(&mut c, "k") == ["r"]),
        "waiters on k: {:?}",
        queued(&mut c, "k")
    );
    // Client eviction (maxmemory-clients) of blocked waiters.
    let mut evictable = Vec::new();
    for i in 0..5 {
        let mut p = queue_peer(&server, &mut c, "k", &format!("ev{i}"), LONG_TTL, 0);
        // A big query buffer makes them the clients to evict.
        p.send_bytes(&vec![b'x'; 256 << 10]);
        evictable.push(p);
    }
    let _: redis::RedisResult<()> =
        cmd!("CONFIG", "SET", "maxmemory-clients", "64kb").query(&mut c);
    let _: redis::RedisResult<()> = cmd!("PING").query(&mut c);
    // Each of them holds more than the limit: the server evicts all five (once it has read
    // their buffers), and they leave the queue.
    assert!(
        eventually(Duration::from_secs(10), || waiters(&mut c, "k") == 1),
        "waiters on k after client eviction: {:?} (evicted_clients {})",
        queued(&mut c, "k"),
        info_str(&mut c, "stats", "evicted_clients")
    );
    let _: () = cmd!("CONFIG", "SET", "maxmemory-clients", 0)
        .query(&mut c)
        .unwrap();
    let left = waiters(&mut c, "k");
    eprintln!("waiters after client eviction: {left}");
    // Release: the lock goes to `reset` (the head), whose RESET and PING then run.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "a")), Some(0));
    let t = reset.token(SOON);
    assert!(t > t0);
    assert_eq!(reset.expect(SOON), Reply::Status("RESET".into()));
    assert_eq!(reset.expect(SOON), Reply::Status("PONG".into()));
    let info = lock_info(&mut c, "k").expect("reset's lock");
    assert_eq!((info.owner.as_slice(), info.token), (&b"r"[..], t));
    assert_eq!(
        info.waiters,
        left - 1,
        "the survivors of client eviction stay queued"
    );
    for p in evictable.iter_mut() {
        // Evicted ones were closed without a reply; survivors are still queued.
        p.silent(Duration::from_millis(10), "evicted or still queued");
    }
    let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut c).unwrap();
    drop(evictable);
    // CLIENT PAUSE / UNPAUSE spam during a chain of short hand-offs.
    acquire(&mut c, "chain", "a", 20);
    let mut chain = Vec::new();
    for i in 0..30 {
        let mut p = Peer::connect(&server, &format!("c{i}"));
        p.wait(b"chain", format!("c{i}").as_bytes(), 5, 0);
        chain.push(p);
    }
    let mut spam = connect_15s(&server);
    let spammer = std::thread::spawn(move || {
        for i in 0..150 {
            let mode = if i % 2 == 0 { "WRITE" } else { "ALL" };
            let _: redis::RedisResult<()> = cmd!("CLIENT", "PAUSE", 15, mode).query(&mut spam);
            if i % 3 == 0 {
                let _: redis::RedisResult<()> = cmd!("CLIENT", "UNPAUSE").query(&mut spam);
            }
            std::thread::sleep(Duration::from_millis(3)); // the spam's pace (not a wait)
        }
    });
    let mut last = 0;
    for p in chain.iter_mut() {
        let t = p.token(Duration::from_secs(10));
        assert!(t > last, "{}: FIFO tokens", p.name);
        last = t;
        p.silent(Duration::from_millis(2), "chain");
    }
    spammer.join().unwrap();
    settle_to_zero(&mut c, "misbehaving clients");
    assert_alive(&server, "misbehaving clients");
}

// ---------------------------------------------------------------------------------------------
// 7. Extreme values.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_chain_of_a_thousand_one_ms_hand_offs() {
    let _serial = serial();
    let server = Server::start();
    let mut c = connect_15s(&server);
    // Held until all 1,000 are queued, then released: the chain starts on that event. (It was a
    // 300 ms lease, which ran out while 1,000 connections queued on a machine with a core kept
    // busy: the chain had ended before the count, "never had 1000 waiters (has 0)".)
    let first = acquire(&mut c, "k", "a", LONG_TTL);
    let mut peers = Vec::new();
    for i in 0..1000 {
        let mut p = Peer::connect(&server, &format!("w{i}"));
        p.wait(b"k", format!("w{i}").as_bytes(), 1, 0);
        peers.push(p);
    }
    await_waiters(&mut c, "k", 1000);
    let released: i64 = cmd!("LOCK.RELEASE", "k", "a").query(&mut c).unwrap();
    assert_eq!(released, 0, "the first holder released");
    let started = Instant::now();
    let mut last = first;
    for p in peers.iter_mut() {
        let t = p.token(Duration::from_secs(20));
        assert!(t > last, "{}: FIFO tokens", p.name);
        last = t;
    }
    eprintln!("1000 hand-offs of 1 ms leases in {:?}", started.elapsed());
    for p in peers.iter_mut() {
        p.silent(Duration::from_millis(1), "second reply");
    }
    settle_to_zero(&mut c, "1 ms chain");
}

#[test]
fn extreme_ttls_timeouts_owners_and_dbs() {
    let _serial = serial();
    let master = master_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut c = connect_15s(&master);
    let mut r = connect_15s(&replica);
    let max = 1_000_000_000_000_i64;
    // ttl 10^12 accepted, 10^12 + 1 refused; timeout likewise.
    let t = acquire(&mut c, "far", "a", max);
    let info = lock_info(&mut c, "far").unwrap();
    assert!(info.ttl > max - 10_000 && info.ttl <= max, "{info:?}");
    for bad in [
        cmd!("LOCK.ACQUIRE", "x", "a", max + 1),
        cmd!("LOCK.WAIT", "far", "b", 1000, max + 1),
        cmd!("LOCK.RENEW", "far", "a", max + 1),
    ] {
        let r: redis::RedisResult<redis::Value> = bad.query(&mut c);
        assert!(r.is_err(), "{}: {r:?}", common::show(&bad));
    }
    let mut fw = queue_peer(&master, &mut c, "far", "fw", max, max);
    assert_idle(&mut c, "ttl and timeout of 10^12");
    // Binary owners of 256 bytes (every byte value), handed off, replicated, persisted.
    let owner_a: Vec<u8> = (0..=255u8).collect();
    let owner_b: Vec<u8> = (0..=255u8).rev().collect();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "far", "a")),
        Some(0)
    );
    let tf = fw.token(SOON);
    assert!(tf > t);
    let ta = acquire(&mut c, "bin", &owner_a[..], LONG_TTL);
    let mut bw = Peer::connect(&master, "bw");
    bw.wait(b"bin", &owner_b, LONG_TTL, 0);
    await_waiters(&mut c, "bin", 1);
    let too_long = vec![b'z'; 257];
    let refused: redis::RedisResult<redis::Value> =
        cmd!("LOCK.ACQUIRE", "x", &too_long[..], 1000).query(&mut c);
    assert!(refused.is_err());
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "bin", &owner_a[..])),
        Some(0)
    );
    let tb = bw.token(SOON);
    assert!(tb > ta);
    wait_replica(&mut c);
    assert_eq!(lock_info(&mut r, "bin").unwrap().owner, owner_b);
    // Waiters on the same key name in all 16 dbs, then FLUSHALL ASYNC with 100k locks.
    common::acquire_many(&mut c, "bulk:#", "o", (0, 99_999), LONG_TTL as u64, false);
    let mut dbs = Vec::new();
    for db in 0..16 {
        let mut admin = connect_15s(&master);
        let _: () = cmd!("SELECT", db).query(&mut admin).unwrap();
        if db > 0 {
            acquire(&mut admin, "bulk:7", "a", LONG_TTL);
        }
        let mut p = Peer::connect(&master, &format!("db{db}"));
        p.send(&[b"SELECT", db.to_string().as_bytes()]);
        assert_eq!(p.expect(SOON), Reply::Status("OK".into()));
        p.wait(b"bulk:7", format!("db{db}").as_bytes(), LONG_TTL, 0);
        await_waiters(&mut admin, "bulk:7", 1);
        dbs.push(p);
    }
    assert_eq!(info_field(&mut c, "waiters"), 16);
    let _: () = cmd!("FLUSHALL", "ASYNC").query(&mut c).unwrap();
    for p in dbs.iter_mut() {
        assert!(p.token(SOON) > tb, "{}", p.name);
    }
    assert!(
        eventually(Duration::from_secs(10), || info_field(&mut c, "locks")
            == 16),
        "locks after FLUSHALL ASYNC and 16 grants: {}",
        info_field(&mut c, "locks")
    );
    wait_replica(&mut c);
    // The bin-owner lock survives an AOF rewrite and restart? It was flushed; take it again.
    let tb2 = acquire(&mut c, "bin", &owner_b[..], LONG_TTL);
    let _: () = cmd!("BGREWRITEAOF").query(&mut c).unwrap();
    assert!(eventually(Duration::from_secs(20), || info_str(
        &mut c,
        "persistence",
        "aof_rewrite_in_progress"
    ) == "0"
        && info_str(&mut c, "persistence", "aof_rewrite_scheduled")
            == "0"));
    assert_eq!(
        info_str(&mut c, "persistence", "aof_last_bgrewrite_status"),
        "ok",
        "the AOF rewrite"
    );
    let mut master = master;
    drop(c);
    master.restart();
    let mut c = connect_15s(&master);
    let info = lock_info(&mut c, "bin").expect("binary owner after AOF restart");
    assert_eq!((info.owner.clone(), info.token), (owner_b.clone(), tb2));
    assert!(acquire(&mut c, "after", "x", 1000) > tb2);
    // fw got the `far` lock with ttl 10^12; it was flushed. Nothing is left waiting.
    settle_to_zero(&mut c, "extremes");
}

// ---------------------------------------------------------------------------------------------
// 8. Races: a lease and a wait ending in the same millisecond; waiters hanging up or killed
// while DEBUG RELOAD loads (CLIENT runs during loading); DEBUG RELOAD inside a write pause with
// an expired lock's hand-off deferred.
// ---------------------------------------------------------------------------------------------

#[test]
fn lease_and_wait_ending_together_answer_once() {
    let _serial = serial();
    let server = Server::start();
    let mut c = connect_15s(&server);
    let mut peers = Vec::new();
    for i in 0..150i64 {
        let key = format!("r{i}");
        acquire(&mut c, &key, "a", 400);
        let mut p = Peer::connect(&server, &key);
        // Timeouts around the lease's end: 400 ms after the acquire, give or take a few ms.
        p.wait(key.as_bytes(), key.as_bytes(), LONG_TTL, 395 + (i % 11));
        peers.push((key, p));
    }
    let (mut granted, mut timed_out) = (0, 0);
    for (key, p) in peers.iter_mut() {
        match p.exactly_one(SOON, Duration::from_millis(5)) {
            Reply::Int(t) => {
                granted += 1;
                let info = lock_info(&mut c, key.as_str()).expect("granted lock");
                assert_eq!((info.owner.as_slice(), info.token), (key.as_bytes(), t));
            }
            Reply::Nil => {
                timed_out += 1;
                assert!(
                    eventually(SOON, || lock_info(&mut c, key.as_str()).is_none()),
                    "{key}: timed out but the lock is held: {:?}",
                    lock_info(&mut c, key.as_str())
                );
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    eprintln!("{granted} granted, {timed_out} timed out");
    settle_to_zero(&mut c, "lease/wait races");
}

#[test]
fn waiters_vanish_and_are_killed_while_debug_reload_loads() {
    let _serial = serial();
    let server = Server::start();
    let mut c = connect_15s(&server);
    let _: () = cmd!("DEBUG", "POPULATE", 300_000).query(&mut c).unwrap();
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut hang = queue_peer(&server, &mut c, "k", "hang", LONG_TTL, 0);
    let mut killed = queue_peer(&server, &mut c, "k", "killed", LONG_TTL, 0);
    let mut stays = queue_peer(&server, &mut c, "k", "stays", LONG_TTL, 0);
    let kid = {
        let mut ids = Peer::connect(&server, "ids");
        ids.send(&[b"CLIENT", b"LIST"]);
        let Reply::Bulk(list) = ids.expect(SOON) else {
            panic!("CLIENT LIST")
        };
        let list = String::from_utf8_lossy(&list).into_owned();
        // The killed waiter is the second LOCK.WAIT client by id order (not the LOCK.WAITERS
        // the test asked on its own connection).
        let mut waiting: Vec<i64> = list
            .lines()
            .filter(|l| l.to_lowercase().contains("cmd=lock.wait "))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix("id="))
                    .and_then(|v| v.parse().ok())
            })
            .collect();
        waiting.sort();
        assert_eq!(waiting.len(), 3, "{list}");
        waiting[1]
    };
    let mut reloader = Peer::connect(&server, "reloader");
    reloader.send(&[b"DEBUG", b"RELOAD"]);
    // The hang-up, the kill and INFO come while the reload loads: once a command is answered
    // LOADING (the server answers between chunks of the load; before it, the command runs).
    assert!(
        eventually(Duration::from_secs(30), || {
            let mut probe = Peer::connect(&server, "probe");
            probe.send(&[b"GET", b"probe"]);
            probe
                .next(Duration::from_secs(30))
                .is_some_and(|r| is_error(&r, &["LOADING"]))
        }),
        "the server never answered LOADING during DEBUG RELOAD"
    );
    drop(std::mem::replace(
        &mut hang,
        Peer::connect(&server, "dummy"),
    ));
    let mut killer = Peer::connect(&server, "killer");
    killer.send(&[b"CLIENT", b"KILL", b"ID", kid.to_string().as_bytes()]);
    let mut info = Peer::connect(&server, "info");
    info.send(&[b"INFO", b"relock"]);
    let r = reloader.expect(Duration::from_secs(60));
    assert_eq!(r, Reply::Status("OK".into()), "DEBUG RELOAD");
    let k = killer.expect(SOON);
    assert!(
        matches!(k, Reply::Int(1)) || is_error(&k, &["LOADING"]),
        "CLIENT KILL: {k:?}"
    );
    let _ = info.expect(SOON);
    assert_alive(&server, "after DEBUG RELOAD with hang-ups");
    if k == Reply::Int(1) {
        assert!(killed.next(Duration::from_millis(300)).is_none() && killed.closed);
    }
    let expected = if k == Reply::Int(1) { 1 } else { 2 };
    assert!(
        eventually(SOON, || waiters(&mut c, "k") == expected),
        "waiters after reload: {}",
        waiters(&mut c, "k")
    );
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "a")), Some(0));
    let head = if expected == 2 {
        &mut killed
    } else {
        &mut stays
    };
    let t = head.token(SOON);
    assert!(t > t0);
    stays.silent(Duration::from_millis(10), "behind the head");
    let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut c).unwrap();
    if expected == 2 {
        stays.token(SOON);
        let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut c).unwrap();
    }
    settle_to_zero(&mut c, "hang-ups during loading");
}

#[test]
fn debug_reload_inside_a_write_pause_defers_the_hand_off() {
    let _serial = serial();
    let server = Server::start();
    let mut c = connect_15s(&server);
    let t0 = acquire(&mut c, "k", "a", 300);
    let mut w = queue_peer(&server, &mut c, "k", "w", LONG_TTL, 0);
    let _: () = cmd!("CLIENT", "PAUSE", 1500, "WRITE")
        .query(&mut c)
        .unwrap();
    wait_out_ttl(Duration::from_millis(400)); // ran out inside the pause
    let reloaded: redis::RedisResult<()> = cmd!("DEBUG", "RELOAD").query(&mut c);
    eprintln!("DEBUG RELOAD during a pause: {reloaded:?}");
    assert_alive(&server, "DEBUG RELOAD during a pause");
    let t = w.token(SOON);
    assert!(t > t0);
    w.silent(Duration::from_millis(100), "second reply");
    let info = lock_info(&mut c, "k").expect("w holds");
    assert_eq!((info.owner.as_slice(), info.token), (&b"w"[..], t));
    settle_to_zero(&mut c, "reload in a pause");
}

/// Two failovers there and back: the waiters of each old master are answered once, and the
/// tokens of each new master are above all before.
#[test]
fn failover_there_and_back_keeps_tokens_rising() {
    let _serial = serial();
    let a = master_with(&[]);
    let b = master_with(&[]);
    attach_replica(&a, &b);
    let mut ca = connect_15s(&a);
    let mut cb = connect_15s(&b);
    let _: () = cmd!("LOCK.APPLY", "seed", "o", SEED, 1)
        .query(&mut ca)
        .unwrap();
    let mut last = acquire(&mut ca, "k", "a", 300);
    let (mut m, mut r, mut ms, mut rs) = (&mut ca, &mut cb, &a, &b);
    for round in 0..2 {
        let mut w = queue_peer(ms, m, "k", &format!("w{round}"), LONG_TTL, 0);
        let keep_key = format!("keep{round}");
        acquire(m, &keep_key, "h", LONG_TTL);
        let mut keep = queue_peer(ms, m, &keep_key, "x", LONG_TTL, 0);
        wait_replica(m);
        let _: () = cmd!("FAILOVER").query(m).expect("FAILOVER");
        assert!(
            eventually(Duration::from_secs(15), || info_str(
                r,
                "replication",
                "role"
            ) == "master"
                && info_str(m, "replication", "role") == "slave"),
            "round {round}: failover did not complete"
        );
        for p in [&mut w, &mut keep] {
            let reply = p.exactly_one(SOON, Duration::from_millis(200));
            assert!(
                matches!(reply, Reply::Int(_))
                    || is_error(&reply, &["READONLY", "UNBLOCKED", "REDIRECT"]),
                "round {round}: {reply:?}"
            );
            if let Reply::Int(t) = reply {
                // A grant made before the failover must be on the new master.
                assert!(eventually(SOON, || lock_info(r, "k").is_some_and(|i| i.token == t)));
                last = last.max(t);
            }
        }
        settle_to_zero(m, "old master");
        // Whoever holds `k` now (a waiter granted before the failover, if the first lease ran
        // out before the pause on a slow machine), the new master's next grant must be above.
        let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(r).unwrap();
        let t = int_or_nil(r, cmd!("LOCK.WAIT", "k", format!("n{round}"), 300, 5000))
            .expect("granted on the new master");
        assert!(t > last, "round {round}: {t} <= {last}");
        last = t;
        std::mem::swap(&mut m, &mut r);
        std::mem::swap(&mut ms, &mut rs);
        let _ = &rs;
    }
}
