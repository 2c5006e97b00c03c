//! Attack round 4 (issue 18): what a helper found by attacking the module from outside after the
//! per-answer revokes, the one host timer with its bounded turns, the treap of shared holders and
//! Valkey 9's atomic slot migration landed. Each test is named after the attack class it belongs
//! to and says what it shows and what the spec expects.
//!
//! Five of them failed when written and pass since their fixes: TTL events of other keys no
//! longer queue a job each (only a shared lock's do, once per key) and housekeeping waits for
//! hand-offs; treap priorities are a secret bijection of the token, ties broken by a keyed hash
//! of the owner; a removal compacts a set whole only up to 16,384 holders and frees off the
//! main thread; a grant pass hands out at most 256 grants per turn. The others are regression
//! tests for attacks that held. All with generous bounds (a busy two-core machine must not
//! make them flaky).
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::payload::{shared_fields, Format};
use common::raw::{Raw, Reply};
use common::reply::used_memory;
use common::{eventually, info_field, now_ms, Server};
use redis::{Connection, Value};

const DUE: Duration = Duration::from_secs(60);

/// The `waiters` field of `LOCK.INFO` (any mode; 0 without a lock).
fn waiters(c: &mut Connection, key: &str) -> i64 {
    match cmd!("LOCK.INFO", key).query(c).unwrap() {
        Value::Array(fields) => match fields.get(9) {
            Some(Value::Int(n)) => *n,
            other => panic!("LOCK.INFO waiters: {other:?}"),
        },
        Value::Nil => 0,
        other => panic!("LOCK.INFO: {other:?}"),
    }
}

/// Runs `body` (Lua, with `n` in ARGV[1]) in one `EVAL`: `n` keyspace events in one turn.
fn script(c: &mut Connection, body: &str, n: u64) {
    let lua = format!("for i = 1, tonumber(ARGV[1]) do {body} end return 1");
    let _: i64 = cmd!("EVAL", lua, 0, n).query(c).expect("EVAL");
}

/// A lock at `key` with a `ttl_ms` lease and a waiter behind it; returns how long after the
/// lease ran out the waiter was granted.
fn hand_off_delay_after_expiry(
    server: &Server,
    c: &mut Connection,
    key: &str,
    ttl_ms: u64,
) -> Duration {
    let _: i64 = cmd!("LOCK.ACQUIRE", key, "holder", ttl_ms)
        .query(c)
        .unwrap();
    let expires = Instant::now() + Duration::from_millis(ttl_ms);
    let mut waiter = Raw::connect(server);
    waiter.send_wait(key, "waiter", 60_000, 0);
    let token = waiter.read(Duration::from_secs(120));
    assert!(matches!(token, Reply::Int(_)), "waiter: {token:?}");
    Instant::now().saturating_duration_since(expires)
}

/// Lease storms / TTL events: a burst of keyspace events that change TTLs (`EXPIRE`, `SET ..
/// EX`, `RENAME`, `RESTORE`, `PERSIST`...) queues one `Leases` job per event, none of them
/// deduplicated, in the engine's one FIFO job queue, drained at most 256 a turn. A lock's expiry
/// hand-off is a `Serve` job queued behind all of them.
///
/// Spec ("Expiry hand-off is prompt"): the head waiter is granted the lock within 5 ms of the
/// holder's TTL running out. Here the waiter of an unrelated exclusive lock waits seconds,
/// after one script that set a TTL a million times while any shared lock exists on the server
/// (measured: 4.6 s with the release module; under a pipelined `SET k v EX` load the hand-off
/// waited for the whole load, 18.6 s, and `used_memory` grew by 67 MB of queued jobs, never
/// given back). The queue's memory counts against `maxmemory`: with `maxmemory 40mb`, 600 000
/// `EXPIRE`s of one key took `used_memory` from 1 MB to 54 MB and every write (`LOCK.ACQUIRE`,
/// `SET`) was refused with `OOM` until the queue drained; 33 MB stayed allocated afterwards
/// (the queue's capacity is never given back). Expected: TTL events are
/// deduplicated per key (or bounded), and never delay a hand-off.
#[test]
fn lease_storms_ttl_events_on_other_keys_do_not_delay_an_expiry_hand_off() {
    let server = Server::start();
    let mut c = server.conn();
    // Any shared lock anywhere on the server makes every `expire` event count.
    let _: i64 = cmd!("LOCK.ACQUIRE", "readers", "r", 600_000, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("SET", "cache", "v").query(&mut c).unwrap();
    let before = used_memory(&mut c);
    script(&mut c, "redis.call('EXPIRE', 'cache', 1000)", 1_000_000);
    let grown = used_memory(&mut c) - before;
    let late = hand_off_delay_after_expiry(&server, &mut c, "lock", 50);
    assert!(
        late < Duration::from_secs(1),
        "the waiter was granted {late:?} after the lock expired (spec: within 5 ms); \
         used_memory grew by {grown} bytes with the TTL events queued"
    );
}

/// The same without any shared lock: `rename_to` (like `restore`, `copy_to`, `move_to` and
/// `persist`) queues a `Leases` job whatever the server holds, so a workload that swaps keys
/// with `RENAME` delays every expiry hand-off of plain exclusive locks (4.6 s extra after half a
/// million renames in one script, release module). Expected: within 5 ms of the expiry.
#[test]
fn lease_storms_renames_of_other_keys_do_not_delay_an_expiry_hand_off() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("SET", "a", "v").query(&mut c).unwrap();
    script(
        &mut c,
        "redis.call('RENAME', 'a', 'b') redis.call('RENAME', 'b', 'a')",
        500_000,
    );
    let late = hand_off_delay_after_expiry(&server, &mut c, "lock", 50);
    assert!(
        late < Duration::from_secs(1),
        "the waiter was granted {late:?} after the lock expired (spec: within 5 ms)"
    );
}

/// `n` holders `h0000000`, `h0000001`... (ascending), all with `token` and lease end `end`.
fn same_token_payload(c: &mut Connection, n: usize, token: u64, end: i64) -> Vec<u8> {
    let owners: Vec<Vec<u8>> = (0..n).map(|i| format!("h{i:07}").into_bytes()).collect();
    let holders: Vec<(&[u8], u64, u64, i64)> = owners
        .iter()
        .map(|o| (o.as_slice(), token, 1, end))
        .collect();
    let (format, _) = Format::of(c);
    format.payload(2, &shared_fields(0, &holders))
}

/// Big values through DUMP/RESTORE: the treap of a shared key takes each node's heap priority
/// from `mix(token_len ^ rotl(lease_end, 29) ^ seed)`, so holders with the same token, owner
/// length and lease end (which `RESTORE` accepts: nothing checks tokens are distinct; `LOCK.APPLY`
/// too) all get the *same* priority, and the per-key random seed cannot separate them. Inserted
/// in ascending owner order they form one chain: loading costs O(H²) and every later operation
/// on the key O(H), recursively. Measured (Redis 7.0.15, release module): 20 000 such holders
/// take 4.1 s to `RESTORE` (24 ms with distinct tokens) and each `LOCK.RELEASE` 2 ms; 160 000
/// crash the server with SIGSEGV (stack overflow in the recursive treap insert) after 183 s of
/// stall, with no crash report in the log (30 000 crash it at once under `ulimit -s 1024`).
/// The same payload in an RDB file crashes every restart. Refusing duplicate tokens is not
/// enough: distinct tokens `t` with lease ends `rotr(t | (len - 1) << 53, 29)` (all within the
/// loader's 1..=2^62) make the mixed word 0 for every holder, and 20 000 of them take 2.7 s.
///
/// Spec: "acquire, release, renew and one lease's end cost O(log H) at most (amortized)"; RDB
/// load O(H); bad input never takes the server down. Expected: priorities independent of
/// what a payload chooses (random per node, or a keyed hash of the owner), or such values
/// refused.
#[test]
fn big_values_restore_of_holders_sharing_one_token_keeps_the_holder_set_balanced() {
    let server = Server::start();
    let mut c = server.conn();
    let n = 25_000;
    let end = now_ms() + 3_600_000;
    let payload = same_token_payload(&mut c, n, 1_900_000_000_000_000, end);
    // The bug takes minutes in a debug build: give up waiting well before.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let restored: redis::RedisResult<()> = cmd!("RESTORE", "k", 0, payload).query(&mut c);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "RESTORE of {n} holders sharing one token took {took:?} ({restored:?}): the holder set \
         degenerated into a chain (O(H²) load, O(H) recursion per operation)"
    );
    c.set_read_timeout(None).unwrap();
    // Refusing such a value is fine too; what is not fine is a stall or a crash.
    if restored.is_ok() {
        let released: Option<i64> = cmd!("LOCK.RELEASE", "k", format!("h{:07}", n - 1))
            .query(&mut c)
            .unwrap();
        assert_eq!(released, Some(0));
    }
}

/// Connection churn around grants / one turn: when a writer's lease runs out with `n` readers
/// queued behind it, the deadline timer's `Serve` job runs one grant pass that grants every
/// reader in the same turn (each a token, an effect, an unblock), whatever `TURN_BUDGET` says:
/// the budget is only checked between jobs. Measured with the release module on Redis 7.0.15:
/// 5 000 readers, one turn of 19.6 ms (`relock_longest_turn_us`); failing 5 000 waiters with
/// `WRONGTYPE` (a `SET` over the key) is one 5 ms turn.
///
/// Issue 18 ("Done means"): every event-loop turn that relock starts by itself (timers, jobs)
/// is bounded, no turn above 5 ms; the engine's docs say each does at most `TURN_BUDGET` units.
/// The spec's "a pass that grants k waiters costs O(k log H)" allows a *command* (a release) to
/// grant k at once, but a timer turn could stop at the budget and go on in the next turn
/// (nobody can barge past the queue meanwhile).
#[test]
fn connection_churn_a_batch_of_readers_granted_at_an_expiry_comes_in_bounded_turns() {
    let n = 5_000;
    let server = Server::with_args(&["--maxclients", "10000"]);
    let mut c = server.conn();
    let _: i64 = cmd!("LOCK.ACQUIRE", "k", "writer", 600_000)
        .query(&mut c)
        .unwrap();
    let mut readers: Vec<Raw> = (0..n)
        .map(|i| {
            let mut r = Raw::connect(&server);
            let owner = format!("reader-{i}");
            r.send(&[
                b"LOCK.WAIT",
                b"k",
                owner.as_bytes(),
                b"60000",
                b"0",
                b"SHARED",
            ]);
            r
        })
        .collect();
    assert!(
        eventually(DUE, || waiters(&mut c, "k") == n as i64),
        "readers not all queued"
    );
    assert!(
        info_field(&mut c, "longest_turn_us") < 20_000,
        "a turn was already long before the expiry"
    );
    // The writer's lease now runs out in 100 ms, in a timer turn of the module's own.
    let _: i64 = cmd!("LOCK.RENEW", "k", "writer", 100)
        .query(&mut c)
        .unwrap();
    for r in &mut readers {
        assert!(
            matches!(r.read(DUE), Reply::Int(_)),
            "a reader was not granted"
        );
    }
    // Four times the issue's 5 ms, so that a busy machine does not fail a bounded turn.
    let turn = info_field(&mut c, "longest_turn_us");
    assert!(
        turn < 20_000,
        "granting {n} readers at the writer's expiry took one turn of {turn} µs (bound: 5 ms)"
    );
}

/// [`fill`] with leases that end `budget` ms from now, once the replica has the value:
/// returns when they end. The leases must still be live then, with 2 s to spare: a busy
/// machine that took longer than the budget to build and replicate the value tries again with
/// twice the time.
fn fill_in_time(m: &mut Connection, key: &str, n: usize, mut budget: i64) -> i64 {
    loop {
        let end = now_ms() + budget;
        fill(m, key, n, end);
        let _: i64 = cmd!("WAIT", 1, 120_000).query(m).unwrap();
        if end - now_ms() > 2_000 {
            return end;
        }
        assert!(
            budget < 200_000,
            "the value took too long to build, {budget} ms"
        );
        let _: i64 = cmd!("DEL", key).query(m).unwrap();
        budget *= 2;
    }
}

/// Puts at `key` a shared value of `n` holders `o0000000`... whose leases end at `end`, and one
/// more (`long`) whose lease ends ten minutes later. One `RESTORE`.
fn fill(c: &mut Connection, key: &str, n: usize, end: i64) {
    let owners: Vec<Vec<u8>> = (0..n).map(|i| format!("o{i:07}").into_bytes()).collect();
    let mut holders: Vec<(&[u8], u64, u64, i64)> = owners
        .iter()
        .enumerate()
        .map(|(i, o)| (o.as_slice(), 1_000_000 + i as u64, 1, end))
        .collect();
    holders.push((b"long", 1_000_000 + n as u64, 1, end + 600_000));
    let (format, _) = Format::of(c);
    let payload = format.payload(2, &shared_fields(0, &holders));
    let _: () = cmd!("RESTORE", key, 0, payload).query(c).expect("RESTORE");
}

/// Lease storms with replicas: the master removes lapsed leases in bounded slices (removing
/// without compacting, then compacting once at the end, freeing the old arrays off the main
/// thread), but the replica applies each `LOCK.DROP` effect with `Shared::remove`, which
/// compacts the arrays (owners, table, slots) whenever enough was removed, copying what is
/// left and freeing the old arrays inline: an O(H) command every so often. Measured with the
/// release module, one million leases ending together: single `LOCK.DROP`s of 24, 19, 18, 11
/// and 7 ms in the replica's `SLOWLOG` (pings to the replica waited 25 ms), while the master's
/// longest turn was 5 ms; with the debug module and 400 000 leases, 117 and 70 ms (the test's
/// bound is 40 ms, for a busy machine).
///
/// Issue 18 counted the replica's 317 ms stall among the freezes to fix ("Redis's own expiry
/// works in bounded slices; so must relock"); the spec: one lease's end costs O(log H),
/// amortized. Expected: a replica applies one removal without O(H) work in the same command
/// (compaction incremental or deferred, large arrays freed off the main thread).
#[test]
fn lease_storms_a_replica_applies_lease_ends_in_short_commands() {
    let master = Server::start();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let n = 400_000;
    let end = fill_in_time(&mut m, "storm", n, 5_000 + n as i64 / 20);
    let left = end + 50 - now_ms();
    assert!(
        left > 0,
        "the value took too long to build: the leases lapsed already"
    );
    std::thread::sleep(Duration::from_millis(left as u64));
    // A command on the key sets off the removal of its lapsed leases.
    let _: i64 = cmd!("LOCK.RENEW", "storm", "long", 600_000)
        .query(&mut m)
        .unwrap();
    assert!(
        eventually(Duration::from_secs(300), || info_field(&mut r, "holds")
            == 1),
        "the replica did not apply every lease end"
    );
    // CPU time of the longest single change the replica applied: a busy machine that preempts
    // the replica does not count, an O(H) compaction inside one `LOCK.DROP` does.
    let longest = info_field(&mut r, "longest_apply_us");
    assert!(
        longest < 40_000,
        "the replica applied a single lease end in {longest} µs of CPU; \
         the master's longest turn was {} µs",
        info_field(&mut m, "longest_turn_us")
    );
}

/// A small deterministic generator (xorshift), so that a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// (owner, token) of every live holder of `key`.
fn holders(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64)> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let Value::Array(items) = v else {
        return vec![];
    };
    items
        .into_iter()
        .map(|entry| {
            let Value::Array(f) = entry else {
                panic!("entry {entry:?}")
            };
            let (Value::BulkString(owner), Value::Int(token)) = (&f[1], &f[3]) else {
                panic!("entry {f:?}")
            };
            (owner.clone(), *token)
        })
        .collect()
}

/// Connection churn around grants (held): rounds of two to eight connections of three owners
/// waiting on one key (exclusive, shared, `SHARED LIMIT 2`) behind an exclusive holder, whose
/// release runs in one `MULTI` with `CLIENT KILL`s of a random half of them, in random order.
/// Whatever a surviving connection was told, its owner holds with that token after any revoke
/// had its time; one token per owner; never two exclusive owners, never more than two permits.
#[test]
fn connection_churn_same_owner_connections_killed_with_the_release_keep_what_they_were_told() {
    let server = Server::start();
    let mut c = server.conn();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let modes: [&[&str]; 3] = [&[], &["SHARED"], &["SHARED", "LIMIT", "2"]];
    for round in 0..45 {
        let words = modes[round % 3];
        let key = format!("k{round}");
        let _: i64 = cmd!("LOCK.ACQUIRE", &key, "holder", 60_000)
            .query(&mut c)
            .unwrap();
        let mut conns: Vec<(String, Raw, i64)> = Vec::new();
        for _ in 0..2 + rng.below(7) {
            let owner = format!("X{}", rng.below(3));
            let mut r = Raw::connect(&server);
            r.send(&[b"CLIENT", b"ID"]);
            let Reply::Int(id) = r.read(DUE) else {
                panic!("CLIENT ID")
            };
            let mut args: Vec<&[u8]> = vec![
                b"LOCK.WAIT",
                key.as_bytes(),
                owner.as_bytes(),
                b"60000",
                b"0",
            ];
            args.extend(words.iter().map(|w| w.as_bytes()));
            r.send(&args);
            conns.push((owner, r, id));
        }
        let queued = conns.len() as i64;
        assert!(eventually(DUE, || waiters(&mut c, &key) == queued));
        let killed: Vec<bool> = conns.iter().map(|_| rng.below(2) == 0).collect();
        let mut steps: Vec<redis::Cmd> = vec![cmd!("LOCK.RELEASE", &key, "holder")];
        for ((_, _, id), kill) in conns.iter().zip(&killed) {
            if *kill {
                steps.push(cmd!("CLIENT", "KILL", "ID", *id));
            }
        }
        for i in (1..steps.len()).rev() {
            steps.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut p = redis::pipe();
        p.atomic();
        for step in steps {
            p.add_command(step);
        }
        let _: Value = p.query(&mut c).unwrap();
        let mut told: Vec<(String, i64)> = Vec::new();
        for ((owner, r, _), kill) in conns.iter_mut().zip(&killed) {
            if *kill {
                continue;
            }
            if let Some(Reply::Int(token)) = r.read_within(Duration::from_millis(300)) {
                told.push((owner.clone(), token));
            }
        }
        // A revoke runs a moment after the hang-up: give it ample time.
        std::thread::sleep(Duration::from_millis(400));
        let held = holders(&mut c, &key);
        for (owner, token) in &told {
            assert!(
                held.contains(&(owner.clone().into_bytes(), *token)),
                "round {round} ({words:?}): {owner} was told {token}, the key holds {held:?}"
            );
            assert!(
                told.iter().all(|(o, t)| o != owner || t == token),
                "round {round}: two tokens for {owner}: {told:?}"
            );
        }
        let most = match words {
            [] => 1,
            ["SHARED"] => usize::MAX,
            _ => 2,
        };
        assert!(held.len() <= most, "round {round} ({words:?}): {held:?}");
        drop(conns);
        let _: i64 = cmd!("DEL", &key).query(&mut c).unwrap();
    }
    assert!(eventually(DUE, || info_field(&mut c, "waiters") == 0));
}

/// Lease storms with a replica and AOF (held): 100 000 leases end together on a master with a
/// replica, both with `appendonly yes`, while a writer waits behind one lease that lives on.
/// The module removes them in slices; pings to either server never wait long; the replica's
/// keyspace (`DEBUG DIGEST`), holders and counts equal the master's after `WAIT`; the writer is
/// granted when the last lease is released; and the master restarted from its AOF has the same
/// keyspace as the replica.
#[test]
fn lease_storms_with_a_replica_and_aof_leave_equal_keyspaces() {
    // `appendfsync always`: the restart below is a SIGKILL, and with `everysec` Redis holds a
    // write back for up to 2 s while a background fsync is slow (a busy disk), so the file
    // could miss the last changes.
    let mut master = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::with_args(&["--appendonly", "yes"]);
    common::attach_replica(&master, &replica);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let n = 100_000;
    let end = fill_in_time(&mut m, "storm", n, 4_000 + n as i64 / 20);
    let mut writer = Raw::connect(&master);
    writer.send_wait("storm", "writer", 60_000, 0);
    assert!(eventually(DUE, || waiters(&mut m, "storm") == 1));
    let pingers: Vec<_> = [master.port, replica.port]
        .into_iter()
        .map(|port| {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            std::thread::spawn(move || {
                let mut worst = Duration::ZERO;
                let until = Instant::now() + Duration::from_secs(6);
                while Instant::now() < until {
                    let t = Instant::now();
                    let _: String = redis::cmd("PING").query(&mut c).unwrap();
                    worst = worst.max(t.elapsed());
                    std::thread::sleep(Duration::from_millis(1));
                }
                worst
            })
        })
        .collect();
    let left = end - now_ms();
    assert!(left > 0, "the value took too long to build");
    std::thread::sleep(Duration::from_millis(left as u64));
    let settle = Duration::from_secs(300);
    assert!(eventually(settle, || info_field(&mut m, "holds") == 1));
    let acked: i64 = cmd!("WAIT", 1, 60_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    // The module's share of a ping's wait is the CPU time of its turns, judged here with a
    // generous bound (a debug build; `make bench` case 15 has the release figure). The pings
    // themselves also wait for the master's `appendfsync always`: on a disk other programs
    // keep busy one waited 1.59 s (Valkey 9.1.2, 2026-12-02) with the module's longest turn a
    // few ms, so they only have to be answered.
    let turn = info_field(&mut m, "longest_turn_us");
    assert!(
        turn > 0 && turn < 100_000,
        "the master's longest turn: {turn} µs"
    );
    for (p, who) in pingers.into_iter().zip(["master", "replica"]) {
        let worst = p.join().unwrap();
        assert!(
            worst < Duration::from_secs(5),
            "a ping to the {who} waited {worst:?}"
        );
    }
    // A replaced value of thousands of holders may be freed in the background (Valkey 8's
    // lazyfree defaults): its holds count until then (docs/commands.md, `relock_holds`).
    assert!(
        eventually(DUE, || info_field(&mut r, "holds") == 1),
        "replica holds: {}",
        info_field(&mut r, "holds")
    );
    assert_eq!(info_field(&mut m, "expired_total"), n as i64);
    assert_eq!(holders(&mut m, "storm"), holders(&mut r, "storm"));
    let digest = |c: &mut Connection| -> String { cmd!("DEBUG", "DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r), "replica differs after WAIT");
    let _: i64 = cmd!("LOCK.RELEASE", "storm", "long").query(&mut m).unwrap();
    let token = writer.read(DUE);
    assert!(matches!(token, Reply::Int(_)), "writer: {token:?}");
    let _: i64 = cmd!("WAIT", 1, 60_000).query(&mut m).unwrap();
    assert_eq!(
        digest(&mut m),
        digest(&mut r),
        "replica differs after the hand-off"
    );
    // The master's AOF replays to the same keyspace.
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    master.restart();
    let mut m = master.conn();
    assert_eq!(digest(&mut m), digest(&mut r), "AOF replay differs");
}
