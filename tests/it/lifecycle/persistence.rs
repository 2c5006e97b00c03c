//! Locks survive DEBUG RELOAD, RDB and AOF restarts (with and without the RDB preamble), expired
//! locks stay gone, and fencing tokens never go backwards across any of them.
//!
//! Tokens are floored by the wall clock (token >= now_ms * 1000), which alone would make a
//! restarted server issue larger tokens. To see whether the counter itself survives, the
//! monotonicity tests first push it to 2^52 with LOCK.APPLY, far above the clock floor.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::ask::{exists, pttl};
use common::rewrite_aof;
use common::{acquire, int_or_nil, lock_info as info, now_ms, LockInfo as Info, Server};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

const SEED: i64 = 1 << 52;

/// Runs a command that must reply `OK`.
fn assert_ok(c: &mut Connection, cmd: redis::Cmd) {
    let v: Value = cmd
        .query(c)
        .unwrap_or_else(|e| panic!("command failed: {e}"));
    assert!(
        matches!(v, Value::Okay) || v == Value::SimpleString("OK".into()),
        "expected OK, got {v:?}"
    );
}

/// A set of locks of every shape: single, re-entered, binary, long-lived, without TTL.
struct Fixture {
    keys: Vec<Vec<u8>>,
}

impl Fixture {
    fn create(c: &mut Connection) -> Fixture {
        acquire(c, b"single", b"owner-1", 60_000);
        for n in 1..=3 {
            assert_eq!(
                int_or_nil(c, cmd!("LOCK.REENTER", "nested", "owner-2", 120_000)),
                Some(n)
            );
        }
        acquire(c, b"bin\x00\xff\r\n", b"\x00\xff\r\nowner", 90_000);
        acquire(c, b"long", b"owner-3", 3_600_000);
        acquire(c, b"persisted", b"owner-4", 60_000);
        assert_eq!(
            cmd!("PERSIST", "persisted")
                .query::<i64>(c)
                .expect("PERSIST"),
            1
        );
        Fixture {
            keys: vec![
                b"single".to_vec(),
                b"nested".to_vec(),
                b"bin\x00\xff\r\n".to_vec(),
                b"long".to_vec(),
                b"persisted".to_vec(),
            ],
        }
    }

    fn snapshot(&self, c: &mut Connection) -> Vec<Info> {
        self.keys
            .iter()
            .map(|k| info(c, k).unwrap_or_else(|| panic!("no lock at {k:?}")))
            .collect()
    }
}

/// Owner, token and count are identical; the remaining TTL went down by at most `elapsed`.
fn assert_survived(before: &[Info], after: &[Info], elapsed: Duration) {
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(after) {
        assert_eq!(a.owner, b.owner, "owner");
        assert_eq!(a.token, b.token, "token of {:?}", b.owner);
        assert_eq!(a.count, b.count, "count of {:?}", b.owner);
        if b.ttl == -1 {
            assert_eq!(a.ttl, -1, "a lock without TTL keeps none");
        } else {
            let slack = elapsed.as_millis() as i64 + 100;
            assert!(
                a.ttl <= b.ttl && a.ttl >= b.ttl - slack,
                "ttl of {:?}: {} before, {} after ({slack} ms slack)",
                b.owner,
                b.ttl,
                a.ttl
            );
        }
    }
}

/// `LOCK.INFO`'s ttl and `PTTL` agree: two reads a round trip apart, so the PTTL may be lower
/// by the time that passed between them (a busy machine stretches it), never higher.
fn assert_pttl_matches(c: &mut Connection, fixture: &Fixture) {
    for k in &fixture.keys {
        let before = Instant::now();
        let i = info(c, k).expect("lock");
        let p = pttl(c, k);
        let between = before.elapsed().as_millis() as i64;
        assert!(
            p <= i.ttl + 20 && p >= i.ttl - between - 20,
            "{k:?}: ttl {} vs PTTL {p} ({between} ms between the reads)",
            i.ttl
        );
    }
}

fn aof_server(preamble: &str) -> Server {
    Server::with_args(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        preamble,
        // Every write reaches the file before the reply: a SIGKILL loses nothing.
        "--appendfsync",
        "always",
    ])
}

#[test]
fn debug_reload_keeps_locks() {
    let server = Server::start();
    let mut c = server.conn();
    let fixture = Fixture::create(&mut c);
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    assert_ok(&mut c, cmd!("DEBUG", "RELOAD"));
    let after = fixture.snapshot(&mut c);
    assert_survived(&before, &after, start.elapsed());
    assert_pttl_matches(&mut c, &fixture);
    assert_eq!(common::info_field(&mut c, "locks"), 5);
    // The reloaded locks still work.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "nested", "owner-2")),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "single", "someone", 1_000)),
        None
    );
}

/// `DEBUG LOADAOF` while writes are paused (`CLIENT PAUSE ... WRITE`, as during a failover):
/// the commands read back from the AOF are not a client's writes, and relock applies them. (A
/// mutant that took every command for a client's refused them as paused and lost every lock
/// of the file, and no suite noticed.)
#[test]
fn aof_loaded_during_a_write_pause_keeps_locks() {
    let server = aof_server("no");
    let mut c = server.conn();
    let fixture = Fixture::create(&mut c);
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    let mut pauser = server.conn();
    assert_ok(&mut pauser, cmd!("CLIENT", "PAUSE", 60_000, "WRITE"));
    assert_ok(&mut c, cmd!("DEBUG", "LOADAOF"));
    let after = fixture.snapshot(&mut c);
    assert_ok(&mut pauser, cmd!("CLIENT", "UNPAUSE"));
    assert_survived(&before, &after, start.elapsed());
    assert_eq!(common::info_field(&mut c, "locks"), 5);
}

#[test]
fn rdb_restart_keeps_locks() {
    let mut server = Server::start();
    let mut c = server.conn();
    let fixture = Fixture::create(&mut c);
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    assert_ok(&mut c, cmd!("SAVE"));
    server.restart();
    let mut c = server.conn();
    let after = fixture.snapshot(&mut c);
    assert_survived(&before, &after, start.elapsed());
    assert_pttl_matches(&mut c, &fixture);
    assert_eq!(common::info_field(&mut c, "locks"), 5);
    let kind: String = cmd!("TYPE", "single").query(&mut c).unwrap();
    assert_eq!(kind, "relock-lk");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "nested", "owner-2")),
        Some(2)
    );
}

fn aof_restart_keeps_locks(preamble: &str) {
    let mut server = aof_server(preamble);
    let mut c = server.conn();
    let fixture = Fixture::create(&mut c);
    rewrite_aof(&mut c);
    // Writes after the rewrite land in the incremental AOF.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "nested", "owner-2")),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "single", "owner-1", 200_000)),
        Some(info(&mut c, b"single").unwrap().token)
    );
    acquire(&mut c, b"after", b"owner-5", 60_000);
    acquire(&mut c, b"gone", b"owner-6", 60_000);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "gone", "owner-6")),
        Some(0)
    );
    acquire(&mut c, b"forced", b"owner-7", 60_000);
    assert_eq!(
        cmd!("LOCK.FORCERELEASE", "forced")
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    let mut keys = fixture.keys.clone();
    keys.push(b"after".to_vec());
    let fixture = Fixture { keys };
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    server.restart();
    let mut c = server.conn();
    let after = fixture.snapshot(&mut c);
    assert_survived(&before, &after, start.elapsed());
    assert_pttl_matches(&mut c, &fixture);
    assert_eq!(info(&mut c, b"gone"), None);
    assert_eq!(info(&mut c, b"forced"), None);
    assert_eq!(common::info_field(&mut c, "locks"), 6);

    // Rewrite once more from the loaded state and restart again.
    rewrite_aof(&mut c);
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    server.restart();
    let mut c = server.conn();
    let after = fixture.snapshot(&mut c);
    assert_survived(&before, &after, start.elapsed());
}

#[test]
fn aof_with_preamble_keeps_locks() {
    aof_restart_keeps_locks("yes");
}

#[test]
fn aof_without_preamble_keeps_locks() {
    aof_restart_keeps_locks("no");
}

#[test]
fn aof_log_without_rewrite_keeps_locks() {
    // Only the command log written since start-up: no rewrite at all.
    let mut server = aof_server("no");
    let mut c = server.conn();
    let fixture = Fixture::create(&mut c);
    let before = fixture.snapshot(&mut c);
    let start = std::time::Instant::now();
    server.restart();
    let mut c = server.conn();
    let after = fixture.snapshot(&mut c);
    assert_survived(&before, &after, start.elapsed());
    assert_pttl_matches(&mut c, &fixture);
}

#[test]
fn expired_locks_do_not_come_back_from_rdb() {
    let mut server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, b"short", b"o", 300);
    acquire(&mut c, b"long", b"o", 60_000);
    assert_ok(&mut c, cmd!("SAVE"));
    // The lock expires while the server is down.
    server.kill();
    wait_out_ttl(Duration::from_millis(500));
    server.restart();
    let mut c = server.conn();
    assert_eq!(info(&mut c, b"short"), None);
    assert_eq!(exists(&mut c, b"short"), 0);
    assert!(info(&mut c, b"long").is_some());
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "short", "o")),
        None,
        "an expired hold cannot be released"
    );
    assert_eq!(common::info_field(&mut c, "locks"), 1);
}

#[test]
fn expired_locks_do_not_come_back_from_debug_reload() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0).query(&mut c).unwrap();
    acquire(&mut c, b"short", b"o", 100);
    wait_out_ttl(Duration::from_millis(300));
    assert_ok(&mut c, cmd!("DEBUG", "RELOAD"));
    assert_eq!(info(&mut c, b"short"), None);
    assert_eq!(exists(&mut c, b"short"), 0);
}

fn expired_locks_do_not_come_back_from_aof(preamble: &str) {
    let mut server = aof_server(preamble);
    let mut c = server.conn();
    acquire(&mut c, b"before-rewrite", b"o", 400);
    rewrite_aof(&mut c);
    acquire(&mut c, b"after-rewrite", b"o", 400);
    acquire(&mut c, b"long", b"o", 60_000);
    server.kill();
    wait_out_ttl(Duration::from_millis(700));
    server.restart();
    let mut c = server.conn();
    assert_eq!(info(&mut c, b"before-rewrite"), None);
    assert_eq!(info(&mut c, b"after-rewrite"), None);
    assert_eq!(exists(&mut c, b"before-rewrite"), 0);
    assert_eq!(exists(&mut c, b"after-rewrite"), 0);
    assert!(info(&mut c, b"long").is_some());
}

#[test]
fn expired_locks_do_not_come_back_from_aof_with_preamble() {
    expired_locks_do_not_come_back_from_aof("yes");
}

#[test]
fn expired_locks_do_not_come_back_from_aof_without_preamble() {
    expired_locks_do_not_come_back_from_aof("no");
}

/// Raises the counter to 2^52, takes one token above it, then removes every lock so that no
/// key carries the high token any more. Returns the highest token issued.
fn seed_and_clear(c: &mut Connection) -> i64 {
    assert_ok(c, cmd!("LOCK.APPLY", "seed", "o", SEED, 1));
    let t = acquire(c, b"x", b"o", 60_000);
    assert!(t > SEED, "token {t} after APPLY of {SEED}");
    assert_eq!(common::info_field(c, "last_token"), t);
    assert_eq!(int_or_nil(c, cmd!("LOCK.RELEASE", "x", "o")), Some(0));
    assert_eq!(cmd!("DEL", "seed").query::<i64>(c).unwrap(), 1);
    assert_eq!(common::info_field(c, "locks"), 0);
    t
}

fn assert_next_token_above(c: &mut Connection, last: i64, when: &str) -> i64 {
    let t = acquire(c, b"next", b"o", 60_000);
    assert!(t > last, "{when}: new token {t} is not above {last}");
    assert_eq!(int_or_nil(c, cmd!("LOCK.RELEASE", "next", "o")), Some(0));
    t
}

#[test]
fn tokens_keep_rising_after_release_and_del() {
    let server = Server::start();
    let mut c = server.conn();
    let t = seed_and_clear(&mut c);
    let t = assert_next_token_above(&mut c, t, "after release and DEL");
    let u = acquire(&mut c, b"y", b"o", 60_000);
    assert!(u > t);
    assert_eq!(cmd!("UNLINK", "y").query::<i64>(&mut c).unwrap(), 1);
    assert_next_token_above(&mut c, u, "after UNLINK");
}

#[test]
fn tokens_keep_rising_after_debug_reload() {
    let server = Server::start();
    let mut c = server.conn();
    let t = seed_and_clear(&mut c);
    assert_ok(&mut c, cmd!("DEBUG", "RELOAD"));
    let t = assert_next_token_above(&mut c, t, "after DEBUG RELOAD with no locks");
    // And with a lock holding the highest token.
    let u = acquire(&mut c, b"kept", b"o", 60_000);
    assert!(u > t);
    assert_ok(&mut c, cmd!("DEBUG", "RELOAD"));
    assert_next_token_above(&mut c, u, "after DEBUG RELOAD with a lock");
}

#[test]
fn tokens_keep_rising_after_rdb_restart() {
    let mut server = Server::start();
    let mut c = server.conn();
    let t = seed_and_clear(&mut c);
    assert_ok(&mut c, cmd!("SAVE"));
    server.restart();
    let mut c = server.conn();
    assert_next_token_above(&mut c, t, "after RDB restart with no locks");
}

/// Everything released before the rewrite: the rewritten AOF holds no lock at all.
fn tokens_after_aof_rewrite_of_no_locks(preamble: &str) {
    let mut server = aof_server(preamble);
    let mut c = server.conn();
    let t = seed_and_clear(&mut c);
    rewrite_aof(&mut c);
    server.restart();
    let mut c = server.conn();
    assert_next_token_above(
        &mut c,
        t,
        &format!("AOF (preamble {preamble}) rewritten after all locks were released"),
    );
}

/// The rewrite happens while the high-token lock exists; the release and DEL come after it, in
/// the incremental AOF. Then a second restart from the state the first one loaded.
fn tokens_after_releases_following_aof_rewrite(preamble: &str) {
    let mut server = aof_server(preamble);
    let mut c = server.conn();
    assert_ok(&mut c, cmd!("LOCK.APPLY", "seed", "o", SEED, 1));
    rewrite_aof(&mut c);
    let u = acquire(&mut c, b"z", b"o", 60_000);
    assert!(u > SEED);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "z", "o")), Some(0));
    assert_eq!(cmd!("DEL", "seed").query::<i64>(&mut c).unwrap(), 1);
    server.restart();
    let mut c = server.conn();
    let v = assert_next_token_above(
        &mut c,
        u,
        &format!("AOF (preamble {preamble}) with releases after the rewrite"),
    );
    server.restart();
    let mut c = server.conn();
    assert_next_token_above(
        &mut c,
        v,
        &format!("AOF (preamble {preamble}) second restart"),
    );
}

/// No rewrite at all: the command log written since start-up.
fn tokens_after_aof_log_only(preamble: &str) {
    let mut server = aof_server(preamble);
    let mut c = server.conn();
    let t = seed_and_clear(&mut c);
    server.restart();
    let mut c = server.conn();
    assert_next_token_above(
        &mut c,
        t,
        &format!("AOF (preamble {preamble}) log without rewrite"),
    );
}

#[test]
fn tokens_keep_rising_after_aof_rewrite_of_no_locks_with_preamble() {
    tokens_after_aof_rewrite_of_no_locks("yes");
}

#[test]
fn tokens_keep_rising_after_aof_rewrite_of_no_locks_without_preamble() {
    tokens_after_aof_rewrite_of_no_locks("no");
}

#[test]
fn tokens_keep_rising_after_releases_following_aof_rewrite_with_preamble() {
    tokens_after_releases_following_aof_rewrite("yes");
}

#[test]
fn tokens_keep_rising_after_releases_following_aof_rewrite_without_preamble() {
    tokens_after_releases_following_aof_rewrite("no");
}

#[test]
fn tokens_keep_rising_after_aof_log_restart_with_preamble() {
    tokens_after_aof_log_only("yes");
}

#[test]
fn tokens_keep_rising_after_aof_log_restart_without_preamble() {
    tokens_after_aof_log_only("no");
}

#[test]
fn tokens_keep_rising_after_restart_without_persistence() {
    // No APPLY here: only the clock floor carries the counter over.
    let mut server = Server::start();
    let mut c = server.conn();
    let mut last = 0;
    for key in ["a", "b", "c"] {
        let t = acquire(&mut c, key.as_bytes(), b"o", 60_000);
        assert!(t > last);
        last = t;
    }
    assert!(last >= (now_ms() - 60_000) * 1000, "token {last} vs clock");
    server.restart();
    let mut c = server.conn();
    assert_eq!(exists(&mut c, b"a"), 0, "no persistence: nothing survives");
    assert_next_token_above(&mut c, last, "after a restart without persistence");
}
