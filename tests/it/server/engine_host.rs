//! Adversarial tests of the engine behind its Redis host (crates/engine/src/engine.rs,
//! src/redis/): the reports that arrive while the engine is busy, the timers that carry the
//! engine's numbers, blocked clients, and the server states and key operations that bypass the
//! module's commands.
//! One test per class of attack; each starts its own server. Run on every server of the matrix
//! with `REDIS_SERVER=... cargo test -p relock --test it server::engine_host`.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::ask::await_waiters;
use common::ask::waiters;
use common::connect;
use common::raw::{client_id, encode, queue_behind, Raw, Reply};
use common::settle_to_zero;
use common::{acquire, assert_alive, eventually, info_field, int_or_nil, lock_info, Server};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

const SOON: Duration = Duration::from_secs(3);
/// How long a waiter may wait for a lock of a few seconds' TTL to expire and pass to it.
const EXPIRY_WITHIN: Duration = Duration::from_secs(10);
const LONG_TTL: i64 = 100_000;

fn owner_of(c: &mut Connection, key: &str) -> Option<(String, i64)> {
    lock_info(c, key).map(|i| (String::from_utf8(i.owner).unwrap(), i.token))
}

/// Waits (at most `SOON`) until `w` has an answer to read or its connection closed, without
/// reading it: the server ended the turn that ran what `w` sent, or crashed in it, which
/// `alive` then reports with the log (a read would only say the connection closed).
fn answered_or_closed(w: &mut Raw) {
    w.stream.set_read_timeout(Some(SOON)).expect("read timeout");
    let _ = w.stream.peek(&mut [0u8; 1]);
}

/// Several commands in one write, so Redis runs them in one event-loop turn, before any of the
/// module's 0 ms timers.
fn send_pipelined(w: &mut Raw, commands: &[&[&[u8]]]) {
    use std::io::Write;
    let bytes: Vec<u8> = commands.iter().flat_map(|args| encode(args)).collect();
    w.stream.write_all(&bytes).expect("write pipeline");
}

// ---------------------------------------------------------------------------------------------
// A LOCK.WAIT that finds the key free but queued (a DEL, an expiry, ... whose wake-up is still
// due on the module's 0 ms timer) must queue behind the waiters. On Redis 8.2 the engine asks
// RedisModule_GetAbsExpire of the empty key (`key.hold().and(key.expires_at())` evaluates the
// expiry eagerly) and 8.2 dereferences its null value: segfault.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_wait_on_a_free_key_with_a_queue_queues_behind_it() {
    let server = Server::start();
    let mut c = connect(&server);
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let mut x = Raw::connect(&server);
    send_pipelined(
        &mut x,
        &[
            &[b"DEL", b"k"],
            &[b"LOCK.WAIT", b"k", b"x", b"100000", b"0"],
        ],
    );
    answered_or_closed(&mut x);
    assert_alive(&server, "DEL + LOCK.WAIT of a queued key in one turn");
    let del = x.read_within(SOON);
    assert_eq!(del, Some(Reply::Int(1)));
    let tb = b.read(SOON).token();
    assert!(tb > t0 as u64);
    x.assert_silent("the newcomer queues behind the head");
    assert_eq!(owner_of(&mut c, "k"), Some(("b".into(), tb as i64)));
    assert_eq!(waiters(&mut c, "k"), 1);
    let _: i64 = cmd!("LOCK.RELEASE", "k", "b").query(&mut c).unwrap();
    assert!(x.read(SOON).token() > tb);
    settle_to_zero(&mut c, "after the queue drained");
}

#[test]
fn a_wait_arriving_as_the_lock_expires_queues_behind_the_head() {
    // The lock runs out during DEBUG SLEEP; the LOCK.WAIT right after it opens the key, which
    // Redis expires lazily at that moment, before the module's expiry timer can run.
    let server = Server::start();
    let mut c = connect(&server);
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let mut x = Raw::connect(&server);
    send_pipelined(
        &mut x,
        &[
            &[b"PEXPIRE", b"k", b"5"],
            &[b"DEBUG", b"SLEEP", b"0.05"],
            &[b"LOCK.WAIT", b"k", b"x", b"100000", b"0"],
        ],
    );
    answered_or_closed(&mut x);
    assert_alive(
        &server,
        "LOCK.WAIT on a lock that just expired, with a queue",
    );
    let pexpire = x.read_within(SOON);
    assert_eq!(pexpire, Some(Reply::Int(1)));
    assert_eq!(x.read(SOON), Reply::Status("OK".into()));
    let tb = b.read(SOON).token();
    assert!(tb > t0 as u64);
    x.assert_silent("the newcomer queues behind the head");
    assert_eq!(waiters(&mut c, "k"), 1);
}

// ---------------------------------------------------------------------------------------------
// Revoke: a waiter granted the lock hangs up before its reply; the hold it "never learned of" is
// revoked by a job on a 0 ms timer. But the owner can learn of it in between: the documented
// retry after a lost reply (`LOCK.ACQUIRE` with the same owner, idempotent), `LOCK.RENEW` and
// `LOCK.REENTER` all confirm the hold, and the revoke then takes it away anyway and hands it to
// the next waiter: two clients believe they hold the lock, and a confirmed renewal is undone.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_grant_confirmed_to_its_owner_is_not_revoked_afterwards() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = Raw::connect(&server);
    let b_id = client_id(&mut b);
    b.send_wait("k", "b", LONG_TTL as u64, 0);
    await_waiters(&mut c, "k", 1);
    let mut d = queue_behind(&server, &mut c, "k", "d", LONG_TTL as u64);
    // One turn: the release grants b, b's connection dies before its reply, and b's owner
    // (retrying on another connection) asks again.
    let (released, killed, again, renewed): (i64, i64, Option<i64>, Option<i64>) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(b_id)
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("b")
        .arg(LONG_TTL)
        .cmd("LOCK.RENEW")
        .arg("k")
        .arg("b")
        .arg(LONG_TTL)
        .query(&mut c)
        .expect("MULTI");
    assert_eq!((released, killed), (0, 1));
    // The window in which the revoke of b's undelivered grant (a job on a 0 ms timer) would
    // take the confirmed hold away.
    wait_out_ttl(Duration::from_millis(300));
    match again {
        Some(token) => {
            assert_eq!(renewed, Some(token));
            // b was told (twice) it holds k for 100 s with `token`: it must keep it.
            assert_eq!(
                owner_of(&mut c, "k"),
                Some(("b".into(), token)),
                "LOCK.ACQUIRE and LOCK.RENEW confirmed b's hold (token {token}), \
                 then the revoke of b's undelivered grant took it away"
            );
            d.assert_silent("d while b's confirmed hold lasts");
        }
        None => {
            // Also acceptable: the grant was revoked before b's owner could see it.
            assert_eq!(renewed, None);
            d.read(SOON).token();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scripts and transactions that change a queued key and call LOCK.* in the same atomic unit.
// ---------------------------------------------------------------------------------------------

#[test]
fn scripts_that_delete_expire_and_lock_a_queued_key() {
    let server = Server::start();
    let mut c = connect(&server);
    // DEL, then every LOCK.* in the same script: nobody barges past the queue.
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let v: Value = cmd!(
        "EVAL",
        "redis.call('DEL', KEYS[1]) \
         return {redis.call('LOCK.ACQUIRE', KEYS[1], 'x', 10000) or 'nil', \
                 redis.call('LOCK.REENTER', KEYS[1], 'x', 10000) or 'nil', \
                 redis.call('LOCK.WAIT', KEYS[1], 'y', 10000, 0) or 'nil', \
                 redis.call('LOCK.FORCERELEASE', KEYS[1])}",
        1,
        "k"
    )
    .query(&mut c)
    .expect("EVAL");
    assert_eq!(
        v,
        Value::Array(vec![
            Value::BulkString(b"nil".to_vec()),
            Value::BulkString(b"nil".to_vec()),
            Value::BulkString(b"nil".to_vec()),
            Value::Int(0),
        ])
    );
    let tb = b.read(SOON).token();
    assert!(tb > t0 as u64);
    assert_eq!(owner_of(&mut c, "k"), Some(("b".into(), tb as i64)));

    // RELEASE (hands off to the head), then DEL of the new holder's key in the same script.
    let mut d = queue_behind(&server, &mut c, "k", "d", LONG_TTL as u64);
    let mut e = queue_behind(&server, &mut c, "k", "e", LONG_TTL as u64);
    let v: Vec<Option<i64>> = cmd!(
        "EVAL",
        "local r = redis.call('LOCK.RELEASE', KEYS[1], 'b') \
         redis.call('DEL', KEYS[1]) \
         return {r, redis.call('LOCK.ACQUIRE', KEYS[1], 'z', 1000) or false}",
        1,
        "k"
    )
    .query(&mut c)
    .expect("EVAL");
    assert_eq!(v, vec![Some(0), None]);
    let td = d.read(EXPIRY_WITHIN).token();
    let te = e.read(SOON).token();
    assert!(tb < td && td < te, "{tb} {td} {te}");
    assert_eq!(owner_of(&mut c, "k"), Some(("e".into(), te as i64)));

    // PEXPIRE to 1 ms in a script: the script's frozen clock keeps the lock for the script;
    // the hand-off follows right after it.
    let mut f = queue_behind(&server, &mut c, "k", "f", LONG_TTL as u64);
    let v: Vec<Option<i64>> = cmd!(
        "EVAL",
        "redis.call('PEXPIRE', KEYS[1], 1) \
         local n = 0 for i = 1, 3000000 do n = n + i end \
         return {redis.call('LOCK.ACQUIRE', KEYS[1], 'z', 1000) or false}",
        1,
        "k"
    )
    .query(&mut c)
    .expect("EVAL");
    assert_eq!(v, vec![None]);
    assert!(f.read(SOON).token() > te);
    assert_alive(&server, "scripts");
    settle_to_zero(&mut c, "after the scripts");
}

#[test]
fn transactions_that_delete_a_queued_key_and_lock_it() {
    let server = Server::start();
    let mut c = connect(&server);
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let (del, acq, wait, reenter, unlink): (i64, Option<i64>, Option<i64>, Option<i64>, i64) =
        redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg("k")
            .cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("x")
            .arg(1000)
            .cmd("LOCK.WAIT")
            .arg("k")
            .arg("x")
            .arg(1000)
            .arg(0)
            .cmd("LOCK.REENTER")
            .arg("k")
            .arg("x")
            .arg(1000)
            .cmd("UNLINK")
            .arg("k")
            .query(&mut c)
            .expect("MULTI");
    assert_eq!((del, acq, wait, reenter, unlink), (1, None, None, None, 0));
    let tb = b.read(SOON).token();
    assert!(tb > t0 as u64);
    assert_eq!(owner_of(&mut c, "k"), Some(("b".into(), tb as i64)));
    settle_to_zero(&mut c, "after the transaction");
}

// ---------------------------------------------------------------------------------------------
// Values brought onto a queued key by RESTORE, COPY and RENAME (both directions), and SWAPDB of
// two held locks: the queue stays, its expiry timer follows the new value.
// ---------------------------------------------------------------------------------------------

#[test]
fn restore_and_copy_over_a_queued_key() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "src", "o", LONG_TTL);
    let dump: Vec<u8> = cmd!("DUMP", "src").query(&mut c).expect("DUMP");
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    // RESTORE REPLACE with a 3 s TTL: another lock, still held; the waiter is served at its
    // expiry. (The TTLs here are seconds, not hundreds of ms: the steps that must come before
    // them took longer than that on a loaded machine.)
    let _: () = cmd!("RESTORE", "k", 3000, dump.as_slice(), "REPLACE")
        .query(&mut c)
        .expect("RESTORE");
    b.assert_silent("RESTORE brought a held lock");
    assert_eq!(waiters(&mut c, "k"), 1);
    let started = Instant::now();
    let tb = b.read(EXPIRY_WITHIN).token();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(owner_of(&mut c, "k"), Some(("b".into(), tb as i64)));
    // COPY REPLACE of a lock with a 2 s TTL onto the held key.
    let mut d = queue_behind(&server, &mut c, "k", "d", LONG_TTL as u64);
    let _: i64 = cmd!("PEXPIRE", "src", 2000).query(&mut c).unwrap();
    let copied: i64 = cmd!("COPY", "src", "k", "REPLACE").query(&mut c).unwrap();
    assert_eq!(copied, 1);
    assert_eq!(owner_of(&mut c, "k").map(|o| o.0), Some("o".into()));
    let td = d.read(EXPIRY_WITHIN).token();
    assert!(td > tb);
    // RESTORE of a string over a queued key: WRONGTYPE.
    let mut e = queue_behind(&server, &mut c, "k", "e", LONG_TTL as u64);
    let _: () = cmd!("SET", "s", "v").query(&mut c).unwrap();
    let sdump: Vec<u8> = cmd!("DUMP", "s").query(&mut c).unwrap();
    let _: () = cmd!("RESTORE", "k", 0, sdump.as_slice(), "REPLACE")
        .query(&mut c)
        .unwrap();
    match e.read(SOON) {
        Reply::Error(m) => assert!(m.starts_with("WRONGTYPE"), "{m}"),
        other => panic!("waiter after RESTORE of a string: {other:?}"),
    }
    assert_alive(&server, "RESTORE/COPY");
    settle_to_zero(&mut c, "after RESTORE/COPY");
}

#[test]
fn rename_between_two_queued_keys_and_swapdb_of_two_held_locks() {
    let server = Server::start();
    let mut c = connect(&server);
    let t1 = acquire(&mut c, "k1", "a", LONG_TTL);
    acquire(&mut c, "k2", "b", LONG_TTL);
    let mut w1 = queue_behind(&server, &mut c, "k1", "w1", LONG_TTL as u64);
    let mut w2 = queue_behind(&server, &mut c, "k2", "w2", LONG_TTL as u64);
    // k1 moves onto k2: k1's waiter gets the free k1; k2's waiter waits for a's lock, now at k2.
    let _: () = cmd!("RENAME", "k1", "k2").query(&mut c).unwrap();
    let g1 = w1.read(SOON).token();
    assert!(g1 > t1 as u64);
    w2.assert_silent("k2 now holds a's lock");
    assert_eq!(owner_of(&mut c, "k2"), Some(("a".into(), t1)));
    // And back: k2 (a's lock) onto k1 (w1's lock, no queue); k2's waiter is served.
    let _: i64 = cmd!("PEXPIRE", "k2", 3000).query(&mut c).unwrap();
    let _: () = cmd!("RENAME", "k2", "k1").query(&mut c).unwrap();
    let g2 = w2.read(SOON).token();
    assert!(g2 > g1);
    assert_eq!(owner_of(&mut c, "k2"), Some(("w2".into(), g2 as i64)));
    assert_eq!(owner_of(&mut c, "k1"), Some(("a".into(), t1)));

    // SWAPDB of two held locks: db 0's waiter now waits for db 1's former lock (3 s).
    let _: () = cmd!("SELECT", 1).query(&mut c).unwrap();
    acquire(&mut c, "s", "db1", 3000);
    let _: () = cmd!("SELECT", 0).query(&mut c).unwrap();
    acquire(&mut c, "s", "db0", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "s", "w", LONG_TTL as u64);
    let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
    assert_eq!(owner_of(&mut c, "s").map(|o| o.0), Some("db1".into()));
    let started = Instant::now();
    let gw = w.read(EXPIRY_WITHIN).token();
    assert!(gw > g2 && started.elapsed() < Duration::from_secs(5));
    let _: () = cmd!("SELECT", 1).query(&mut c).unwrap();
    assert_eq!(owner_of(&mut c, "s").map(|o| o.0), Some("db0".into()));
    let _: () = cmd!("SELECT", 0).query(&mut c).unwrap();
    settle_to_zero(&mut c, "after RENAME/SWAPDB");
}

// ---------------------------------------------------------------------------------------------
// Write pauses: a DEL of a queued key after CLIENT PAUSE in the same EXEC; the hand-off waits
// for the pause, newcomers in the EXEC are refused, and the head is served once it ends.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_delete_under_a_pause_in_the_same_exec_hands_off_after_the_pause() {
    let server = Server::start();
    let mut c = connect(&server);
    let t0 = acquire(&mut c, "k", "a", LONG_TTL);
    let mut b = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let mut x = Raw::connect(&server);
    // Taken before the pause is sent: reading EXEC's reply may take long on a busy machine.
    let started = Instant::now();
    send_pipelined(
        &mut x,
        &[
            &[b"MULTI"],
            &[b"CLIENT", b"PAUSE", b"400", b"WRITE"],
            &[b"DEL", b"k"],
            &[b"LOCK.WAIT", b"k", b"z", b"1000", b"0"],
            &[b"EXEC"],
        ],
    );
    for _ in 0..4 {
        match x.read(SOON) {
            Reply::Status(s) if s == "OK" || s == "QUEUED" => {}
            other => panic!("MULTI: {other:?}"),
        }
    }
    let v = match x.read(SOON) {
        Reply::Array(v) => v,
        other => panic!("EXEC: {other:?}"),
    };
    assert_eq!(v[1], Reply::Int(1));
    assert!(
        matches!(&v[2], Reply::Error(e) if e.starts_with("TRYAGAIN")),
        "LOCK.WAIT after CLIENT PAUSE in the same EXEC: {:?}",
        v[2]
    );
    let tb = b.read(SOON).token();
    assert!(tb > t0 as u64);
    assert!(started.elapsed() >= Duration::from_millis(390));
    assert_eq!(owner_of(&mut c, "k"), Some(("b".into(), tb as i64)));
    assert_alive(&server, "pause in EXEC");
}

// ---------------------------------------------------------------------------------------------
// A storm: hundreds of waiters over a few short-lived locks, with timeouts from none to an hour,
// clients hanging up at random, holders releasing or letting their lease run out. Every live
// waiter is answered exactly once, no token is handed out twice, and INFO relock comes back to
// no waiters and no timers.
// ---------------------------------------------------------------------------------------------

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn a_storm_of_waiters_timeouts_and_hang_ups_leaves_nothing_behind() {
    let server = Server::start();
    let mut c = connect(&server);
    let mut rng = Lcg(7);
    const KEYS: u64 = 12;
    const N: usize = 600;
    for k in 0..KEYS {
        acquire(&mut c, format!("s{k}"), "init", 50 + rng.next(300) as i64);
    }
    struct W {
        raw: Option<Raw>,
        key: String,
        owner: String,
        answered: bool,
    }
    let mut ws: Vec<W> = (0..N)
        .map(|i| {
            let key = format!("s{}", rng.next(KEYS));
            let owner = format!("o{i}");
            let timeout = [0, 0, 1 + rng.next(500), 3_600_000][rng.next(4) as usize];
            let ttl = 5 + rng.next(40);
            let mut raw = Raw::connect(&server);
            raw.send_wait(&key, &owner, ttl, timeout);
            W {
                raw: Some(raw),
                key,
                owner,
                answered: false,
            }
        })
        .collect();
    // The hang-ups come once every wait has arrived: each one either took its key at once
    // (`acquired_total`, as the KEYS first acquires did) or queued (`contended_total`).
    let arrived =
        |c: &mut Connection| info_field(c, "acquired_total") + info_field(c, "contended_total");
    assert!(
        eventually(Duration::from_secs(30), || arrived(&mut c)
            >= (KEYS as usize + N) as i64),
        "only {} of the {N} waits and {KEYS} acquires arrived",
        arrived(&mut c)
    );
    for _ in 0..100 {
        let i = rng.next(N as u64) as usize;
        if let Some(raw) = ws[i].raw.take() {
            let _ = raw.stream.shutdown(std::net::Shutdown::Both);
        }
    }
    let mut tokens = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert_alive(&server, "storm");
        let mut pending = 0;
        for w in ws.iter_mut() {
            let Some(raw) = w.raw.as_mut() else { continue };
            if w.answered {
                continue;
            }
            match raw.read_within(Duration::from_millis(1)) {
                None => pending += 1,
                Some(Reply::Nil) => w.answered = true,
                Some(Reply::Int(t)) => {
                    w.answered = true;
                    assert!(tokens.insert(t), "token {t} handed out twice");
                    if rng.next(2) == 0 {
                        raw.send(&[b"LOCK.RELEASE", w.key.as_bytes(), w.owner.as_bytes()]);
                        match raw.read(SOON) {
                            Reply::Int(0) | Reply::Nil => {}
                            other => panic!("release: {other:?}"),
                        }
                    }
                }
                Some(other) => panic!("waiter {} on {}: {other:?}", w.owner, w.key),
            }
        }
        if pending == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{pending} waiters never answered"
        );
    }
    settle_to_zero(&mut c, "after the storm");
    for w in ws.iter_mut() {
        if let Some(raw) = w.raw.as_mut() {
            raw.assert_silent("a waiter already answered (second reply)");
            break;
        }
    }
    assert_alive(&server, "after the storm");
}

// ---------------------------------------------------------------------------------------------
// Far-future expiries (PEXPIREAT 2^62-1) with many hour-long waits: the server stays idle, and a
// FLUSHALL starts a chain of short-lease hand-offs through every waiter; timers come back to 0.
// ---------------------------------------------------------------------------------------------

#[test]
fn far_future_locks_with_hour_long_waits_idle_then_drain() {
    let server = Server::start();
    let mut c = connect(&server);
    let mut all = Vec::new();
    for k in 0..5 {
        let key = format!("f{k}");
        acquire(&mut c, &key, "a", 1000);
        let _: i64 = cmd!("PEXPIREAT", &key, 4_611_686_018_427_387_903_i64)
            .query(&mut c)
            .unwrap();
        for i in 0..20 {
            let mut w = Raw::connect(&server);
            w.send_wait(&key, &format!("w{i}"), 20, 3_600_000);
            all.push(w);
        }
        await_waiters(&mut c, &key, 20);
    }
    wait_out_ttl(Duration::from_millis(1200)); // past the original 1 s lease timers
    let cpu = |c: &mut Connection| -> f64 {
        let info: String = cmd!("INFO", "cpu").query(c).unwrap();
        info.lines()
            .filter_map(|l| l.trim().split_once(':'))
            .filter(|(n, _)| *n == "used_cpu_sys" || *n == "used_cpu_user")
            .map(|(_, v)| v.parse::<f64>().unwrap_or(0.0))
            .sum()
    };
    let before = cpu(&mut c);
    wait_out_ttl(Duration::from_secs(1)); // the idle second measured
    let used = cpu(&mut c) - before;
    assert!(used < 0.5, "idle server used {used:.2} s of CPU in 1 s");
    assert_eq!(info_field(&mut c, "waiters"), 100);
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let mut last = std::collections::HashMap::new();
    for (n, w) in all.iter_mut().enumerate() {
        let t = w.read(Duration::from_secs(10)).token();
        let key = n / 20;
        let prev = last.insert(key, t).unwrap_or(0);
        assert!(t > prev, "FIFO tokens on f{key}");
    }
    settle_to_zero(&mut c, "after the chains drained");
}

// ---------------------------------------------------------------------------------------------
// CLIENT KILL of every client in the turn of a grant: the grant is revoked, nobody holds the
// lock, and nothing is left queued or armed.
// ---------------------------------------------------------------------------------------------

#[test]
fn killing_every_waiter_in_the_turn_of_a_grant_frees_the_lock() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let _ws: Vec<Raw> = (0..5)
        .map(|i| {
            let mut w = Raw::connect(&server);
            w.send_wait(
                "k",
                &format!("w{i}"),
                LONG_TTL as u64,
                if i % 2 == 0 { 0 } else { 60_000 },
            );
            w
        })
        .collect();
    await_waiters(&mut c, "k", 5);
    let (released, _killed): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut c)
        .expect("MULTI");
    assert_eq!(released, 0);
    assert!(
        eventually(SOON, || lock_info(&mut c, "k").is_none()),
        "a lock granted to a client that hung up stays: {:?}",
        lock_info(&mut c, "k")
    );
    settle_to_zero(&mut c, "after killing every waiter");
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "z", 1000)).is_some());
}

// ---------------------------------------------------------------------------------------------
// Forks during hand-offs: BGREWRITEAOF and BGSAVE while waiters are granted; the AOF then
// reloads to exactly the same locks and a counter no lower.
// ---------------------------------------------------------------------------------------------

#[test]
fn forks_during_hand_offs_keep_the_aof_exact() {
    let server = Server::with_args(&["--appendonly", "yes"]);
    let mut c = connect(&server);
    const K: usize = 20;
    for i in 0..K {
        acquire(&mut c, format!("h{i}"), "a", LONG_TTL);
    }
    let mut ws: Vec<Raw> = (0..K)
        .map(|i| {
            let mut w = Raw::connect(&server);
            w.send_wait(&format!("h{i}"), "b", LONG_TTL as u64, 0);
            w
        })
        .collect();
    for i in 0..K {
        await_waiters(&mut c, &format!("h{i}"), 1);
    }
    let _: String = cmd!("BGREWRITEAOF").query(&mut c).unwrap();
    for i in 0..K {
        let _: i64 = cmd!("LOCK.RELEASE", format!("h{i}"), "a")
            .query(&mut c)
            .unwrap();
        if i == K / 2 {
            let _: Value = cmd!("BGSAVE", "SCHEDULE").query(&mut c).unwrap();
        }
    }
    for w in ws.iter_mut() {
        w.read(SOON).token();
    }
    assert!(eventually(Duration::from_secs(10), || {
        let p: String = cmd!("INFO", "persistence").query(&mut c).unwrap();
        p.contains("aof_rewrite_in_progress:0") && p.contains("rdb_bgsave_in_progress:0")
    }));
    let before: Vec<_> = (0..K).map(|i| owner_of(&mut c, &format!("h{i}"))).collect();
    let last = info_field(&mut c, "last_token");
    let _: () = cmd!("DEBUG", "LOADAOF").query(&mut c).unwrap();
    let after: Vec<_> = (0..K).map(|i| owner_of(&mut c, &format!("h{i}"))).collect();
    assert_eq!(before, after);
    assert!(info_field(&mut c, "last_token") >= last);
    assert_alive(&server, "forks during hand-offs");
}
