//! The module never takes the server down, whatever state the server is in: write pauses
//! (`CLIENT PAUSE`, what `FAILOVER` and shutdowns do), far-future expiries, `CLIENT UNBLOCK` in
//! the turn of a grant, `WATCH`, writable replicas, ACL changes while a client waits, and an
//! exhausted token space. Each test is a class of problem that once crashed, froze or misled a
//! server; `make test` runs them on every server of the matrix.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::ask::server_field;
use common::ask::waiters;
use common::ask::{assert_idle, await_waiters};
use common::connect;
use common::raw::{queue_behind, Raw, Reply};
use common::{acquire, assert_alive, eventually, int_or_nil, lock_info, Server};
use redis::Connection;
use relock_testkit::wait_out_ttl;

const SOON: Duration = Duration::from_secs(3);
const LONG_TTL: i64 = 100_000;

fn raw_client_id(w: &mut Raw) -> i64 {
    w.send(&[b"CLIENT", b"ID"]);
    match w.read(SOON) {
        Reply::Int(id) => id,
        other => panic!("CLIENT ID: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Write pauses: a lock with a waiter whose TTL runs out while writes are paused. Redis does not
// expire keys during the pause, so the key is still there; writing it (the hand-off) once
// aborted the server (`de != NULL` in setKey).
// ---------------------------------------------------------------------------------------------

/// `LOCK.RENEW key owner ttl` and `CLIENT PAUSE ms mode` in one `EXEC`: the lease ends `ttl` ms
/// into the pause, however long a loaded machine makes the test's own steps before it (a lock
/// acquired with a 200 ms ttl before the waiter queued and the pause began could end first).
fn renew_and_pause(c: &mut Connection, key: &str, owner: &str, ttl: u64, ms: u64, mode: &str) {
    let () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(mode)
        .ignore()
        .query(c)
        .expect("LOCK.RENEW and CLIENT PAUSE");
}

fn expiry_during_pause(mode: &str) {
    let server = Server::start();
    let mut c = connect(&server);
    let holder = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let paused_at = Instant::now();
    renew_and_pause(&mut c, "k", "a", 200, 3000, mode);
    // The lock's TTL and its expiry timer run out inside the pause: nothing may be written.
    if let Some(reply) = w.read_within(Duration::from_millis(1500)) {
        panic!("{mode} pause: waiter answered during the pause: {reply:?}");
    }
    assert_alive(&server, "the server");
    if mode == "WRITE" {
        // Reads still run (under ALL they wait too), and already see the lock as gone.
        assert_eq!(lock_info(&mut c, "k"), None, "{mode} pause");
    }
    // Once the pause ends, the hand-off happens, as Redis's own expiry resumes then.
    let token = w.read(Duration::from_secs(5)).token();
    assert!(token > holder as u64);
    assert!(
        paused_at.elapsed() >= Duration::from_millis(2900),
        "{mode} pause: granted after {:?}, before the pause ended",
        paused_at.elapsed()
    );
    let info = lock_info(&mut c, "k").expect("granted lock");
    assert_eq!(info.owner, b"b");
    assert_eq!(info.token as u64, token);
    assert_alive(&server, "the server");
}

#[test]
fn expiry_during_a_write_pause_waits_for_the_pause() {
    expiry_during_pause("WRITE");
}

#[test]
fn expiry_during_a_full_pause_waits_for_the_pause() {
    expiry_during_pause("ALL");
}

#[test]
fn a_revoke_during_a_write_pause_waits_for_the_pause() {
    // A waiter granted and gone before its reply: the module revokes the grant on its own, a
    // write from a timer that must also wait for the pause.
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    renew_and_pause(&mut c, "k", "a", 150, 2000, "WRITE");
    // The 150 ms lease runs out inside the pause.
    wait_out_ttl(Duration::from_millis(300));
    // It leaves during the pause, and the server sees it go: this connection is then its only
    // client.
    drop(w);
    let clients = |c: &mut Connection| server_field(c, "clients", "connected_clients");
    assert!(
        eventually(SOON, || clients(&mut c) == Some(1)),
        "the waiter's connection is still there: {:?} clients",
        clients(&mut c)
    );
    assert_alive(&server, "the server");
    // The pause ends 2 s after it began.
    assert!(
        eventually(Duration::from_secs(10), || lock_info(&mut c, "k").is_none()),
        "lock still there after the pause: {:?}",
        lock_info(&mut c, "k")
    );
    assert_alive(&server, "the server");
}

/// A pause that starts inside `EXEC` (`MULTI; CLIENT PAUSE ms WRITE; LOCK.ACQUIRE ...; EXEC`)
/// applies to the rest of that `EXEC`: the lock command runs while a lock past its TTL is still
/// in the keyspace. Writing it once aborted Redis 7.0/8.2 (`de != NULL` in setKey) and, on
/// Valkey, answered the old holder's token and leaked the new hold. Lock changes are refused
/// with TRYAGAIN while writes are paused.
fn lock_write_after_a_pause_in_the_same_exec(command: redis::Cmd) {
    let server = Server::start();
    let mut c = connect(&server);
    let _: () = cmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0).query(&mut c).unwrap();
    acquire(&mut c, "k", "a", 50);
    wait_out_ttl(Duration::from_millis(200)); // expired, not deleted
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("WRITE")
        .add_command(command.clone());
    let replies: redis::RedisResult<Vec<redis::Value>> = pipe.query(&mut c);
    assert_alive(&server, "the server");
    let what = common::show(&command);
    match replies {
        Err(e) if e.code() == Some("TRYAGAIN") => {}
        other => panic!("{what} after CLIENT PAUSE in EXEC: {other:?}"),
    }
    wait_out_ttl(Duration::from_millis(600)); // the pause (500 ms) is over
    assert_eq!(
        lock_info(&mut c, "k"),
        None,
        "{what}: the expired lock stays ended"
    );
    acquire(&mut c, "k", "b", 1000);
    // SYNC: Valkey flushes lazily by default, and frees values on a background thread.
    let _: () = cmd!("FLUSHALL", "SYNC").query(&mut c).unwrap();
    assert_eq!(
        common::info_field(&mut c, "locks"),
        0,
        "{what}: a hold leaked"
    );
}

#[test]
fn lock_changes_after_a_pause_in_the_same_exec_are_refused() {
    for command in [
        cmd!("LOCK.ACQUIRE", "k", "b", 100_000),
        cmd!("LOCK.REENTER", "k", "b", 100_000),
        cmd!("LOCK.WAIT", "k", "b", 100_000, 100),
        cmd!("LOCK.APPLY", "k", "b", 1, 1),
        cmd!("LOCK.RELEASE", "k", "a"),
        cmd!("LOCK.FORCERELEASE", "k"),
    ] {
        lock_write_after_a_pause_in_the_same_exec(command);
    }
}

// ---------------------------------------------------------------------------------------------
// Out of memory: new holds are refused (deny-oom), what frees or keeps memory runs, and a
// hand-off (which replaces the hold that ended) still happens.
// ---------------------------------------------------------------------------------------------

#[test]
fn out_of_memory_refuses_new_holds_but_releases_and_hands_off() {
    let server = Server::start();
    let mut c = connect(&server);
    let holder = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let _: () = cmd!("CONFIG", "SET", "maxmemory-policy", "noeviction")
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 1).query(&mut c).unwrap();
    for command in [
        cmd!("LOCK.ACQUIRE", "new", "x", 1000),
        cmd!("LOCK.REENTER", "new", "x", 1000),
        cmd!("LOCK.WAIT", "new", "x", 1000, 10),
    ] {
        let result: redis::RedisResult<Option<i64>> = command.query(&mut c);
        match result {
            Err(e) if e.to_string().contains("OOM") => {}
            other => panic!("{} out of memory: {other:?}", common::show(&command)),
        }
    }
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "a", LONG_TTL)),
        Some(holder)
    );
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "a")), Some(0));
    let token = w.read(SOON).token();
    assert_eq!(
        lock_info(&mut c, "k").expect("handed off").token as u64,
        token
    );
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    acquire(&mut c, "new", "x", 1000);
}

/// Every lock has a TTL, so any policy but noeviction can evict a held lock when memory runs out
/// (and its waiter is then granted while the holder still works). The module says so in the log
/// when it loads into such a server.
#[test]
fn an_evicting_policy_is_warned_about_at_load() {
    let evicting = Server::with_args(&["--maxmemory-policy", "volatile-lru"]);
    assert!(
        evicting
            .log()
            .contains("maxmemory-policy is volatile-lru: when memory runs out Redis may evict"),
        "no warning in the log:\n{}",
        evicting.log()
    );
    let safe = Server::start();
    assert!(
        !safe.log().contains("maxmemory-policy is"),
        "{}",
        safe.log()
    );
}

// ---------------------------------------------------------------------------------------------
// A busy script: the module's timers wait for the event loop; the hand-off comes right after.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_busy_script_delays_an_expiry_hand_off_until_it_ends() {
    let server = Server::with_args(&["--busy-reply-threshold", "100"]);
    let mut c = connect(&server);
    // The lease is cut to 200 ms only once the waiter queued: on a busy machine a 200 ms lock
    // could expire before the waiter arrives, which then finds it free.
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let renewed: Option<i64> = cmd!("LOCK.RENEW", "k", "a", 200).query(&mut c).unwrap();
    assert!(renewed.is_some());
    let url = server.url();
    let script = std::thread::spawn(move || {
        let mut s = redis::Client::open(url).unwrap().get_connection().unwrap();
        // Busy for about 1.5 s, past the lock's expiry.
        let _: redis::RedisResult<()> = cmd!(
            "EVAL",
            "local s = redis.call('TIME') local t = tonumber(s[1]) * 1000000 + tonumber(s[2]) \
             while true do local n = redis.call('TIME') \
             if tonumber(n[1]) * 1000000 + tonumber(n[2]) - t > 1500000 then break end end",
            0
        )
        .query(&mut s);
    });
    // The script runs once a PING is answered BUSY (before it starts, PING answers PONG).
    let mut busy: redis::RedisResult<String> = Ok(String::new());
    assert!(
        eventually(SOON, || {
            busy = cmd!("PING").query(&mut c);
            busy.as_ref().is_err_and(|e| e.to_string().contains("BUSY"))
        }),
        "the script should be busy: {busy:?}"
    );
    script.join().unwrap();
    let token = w.read(SOON).token();
    assert_eq!(
        lock_info(&mut c, "k").expect("handed off").token as u64,
        token
    );
    assert_alive(&server, "the server");
}

// ---------------------------------------------------------------------------------------------
// Far-future expiries: a timer period added to the clock unchecked once overflowed into the
// past, fired at once, re-armed in the past, and spun the event loop at 100 % forever.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_far_future_expiry_with_a_waiter_does_not_spin() {
    let server = Server::start();
    let mut c = connect(&server);
    // The waiter's expiry timer is armed at 300 ms; when it fires, it finds the lock moved far
    // out and re-arms there.
    // (Held long until the waiter is queued, then renewed to 300 ms in the EXEC that moves the
    // expiry: a loaded machine cannot let the 300 ms pass first.)
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("k")
        .arg("a")
        .arg(300)
        .ignore()
        .cmd("PEXPIREAT")
        .arg("k")
        .arg(4_611_686_018_427_387_904_i64)
        .ignore()
        .query(&mut c)
        .expect("LOCK.RENEW and PEXPIREAT");
    wait_out_ttl(Duration::from_millis(400)); // the timer armed at 300 ms fires and re-arms
    assert_idle(&mut c, "PEXPIREAT 2^62");
    assert_alive(&server, "PEXPIREAT 2^62");
    // The timer still works: bring the expiry back and the waiter is served.
    let _: i64 = cmd!("PEXPIRE", "k", 50).query(&mut c).expect("PEXPIRE");
    w.read(SOON).token();
}

#[test]
fn a_far_future_applied_lock_with_a_waiter_does_not_spin() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let _w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("k")
        .arg("a")
        .arg(300)
        .ignore()
        .cmd("LOCK.APPLY")
        .arg("k")
        .arg("a")
        .arg(5)
        .arg(1)
        .arg("PXAT")
        .arg(1_i64 << 62)
        .ignore()
        .query(&mut c)
        .expect("LOCK.RENEW and LOCK.APPLY");
    wait_out_ttl(Duration::from_millis(400)); // the 300 ms lease's timer fires
    assert_idle(&mut c, "LOCK.APPLY PXAT 2^62");
    assert_alive(&server, "LOCK.APPLY PXAT 2^62");
    assert_eq!(waiters(&mut c, "k"), 1);
}

#[test]
fn a_wait_of_hours_does_not_spin_and_still_ends() {
    // Module timers sit behind one event-loop timer whose handler returns the period to the
    // next module timer; Redis 7.0 multiplies it by 1000 in an int, so a next timer more than
    // ~35 minutes out once wrapped into the past and spun. The handler runs when another
    // module timer fires: here the expiry of a short lock with a waiter.
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = Raw::connect(&server);
    w.send_wait("k", "b", LONG_TTL as u64, 3_600_000); // an hour
    await_waiters(&mut c, "k", 1);
    acquire(&mut c, "short", "a", 200);
    let mut s = queue_behind(&server, &mut c, "short", "b", LONG_TTL as u64);
    s.read(SOON).token(); // the short lock's timer fired; the wait's timer is the next one
    assert_idle(&mut c, "LOCK.WAIT with a one-hour timeout");
    assert_alive(&server, "LOCK.WAIT with a one-hour timeout");
    assert_eq!(
        common::info_field(&mut c, "timers"),
        2,
        "the wait's timeout and k's expiry"
    );
    // Still served normally.
    let _: i64 = cmd!("LOCK.RELEASE", "k", "a").query(&mut c).unwrap();
    w.read(SOON).token();
    assert!(eventually(SOON, || common::info_field(&mut c, "timers") == 0));
}

// ---------------------------------------------------------------------------------------------
// CLIENT UNBLOCK: Redis's own unblock path once reached a waiter the module had just granted
// and left it with no reply at all (7.0) or a nil while the lock was held in its name (8.x).
// ---------------------------------------------------------------------------------------------

#[test]
fn client_unblock_in_the_turn_of_a_grant_leaves_one_reply() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = Raw::connect(&server);
    let id = raw_client_id(&mut w);
    w.send_wait("k", "b", LONG_TTL as u64, 0);
    await_waiters(&mut c, "k", 1);
    // Deterministic: both in one transaction, so the grant's reply is still pending when
    // CLIENT UNBLOCK runs.
    let (released, unblocked): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(id)
        .arg("TIMEOUT")
        .query(&mut c)
        .expect("MULTI");
    assert_eq!(released, 0);
    assert_eq!(unblocked, 0, "a granted waiter is no longer blocked");
    let token = w.read(SOON).token();
    let info = lock_info(&mut c, "k").expect("the waiter's lock");
    assert_eq!(
        (info.owner.as_slice(), info.token as u64),
        (&b"b"[..], token)
    );
    // Exactly one reply: the connection carries on in step.
    w.send(&[b"PING"]);
    assert_eq!(w.read(SOON), Reply::Status("PONG".into()));
}

#[test]
fn client_unblock_leaves_a_waiter_waiting() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = Raw::connect(&server);
    let id = raw_client_id(&mut w);
    w.send_wait("k", "b", LONG_TTL as u64, 0);
    await_waiters(&mut c, "k", 1);
    for how in ["TIMEOUT", "ERROR"] {
        let n: i64 = cmd!("CLIENT", "UNBLOCK", id, how)
            .query(&mut c)
            .expect("CLIENT UNBLOCK");
        assert_eq!(n, 0, "CLIENT UNBLOCK {how}");
    }
    w.assert_silent("after CLIENT UNBLOCK");
    assert_eq!(waiters(&mut c, "k"), 1);
    let _: i64 = cmd!("LOCK.RELEASE", "k", "a").query(&mut c).unwrap();
    w.read(SOON).token();
}

// ---------------------------------------------------------------------------------------------
// WATCH: a command that changes nothing must not touch the key (EXEC aborted, caches flushed).
// ---------------------------------------------------------------------------------------------

fn exec_after(c: &mut Connection, watched: &[&str], meanwhile: impl FnOnce()) -> bool {
    let _: () = cmd!("WATCH").arg(watched).query(c).expect("WATCH");
    meanwhile();
    let result: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("x")
        .arg("1")
        .query(c)
        .expect("EXEC");
    result.is_some()
}

#[test]
fn commands_that_change_nothing_do_not_abort_watch() {
    let server = Server::start();
    let mut c = connect(&server);
    let mut other = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    type Unchanging = (&'static str, fn(&mut Connection));
    let unchanging: [Unchanging; 6] = [
        ("a refused LOCK.ACQUIRE", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.ACQUIRE", "k", "b", 1000)), None)
        }),
        ("a refused LOCK.REENTER", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.REENTER", "k", "b", 1000)), None)
        }),
        ("LOCK.RELEASE by a non-owner", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.RELEASE", "k", "b")), None)
        }),
        ("LOCK.RENEW by a non-owner", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.RENEW", "k", "b", 1000)), None)
        }),
        ("LOCK.FORCERELEASE of a missing key", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.FORCERELEASE", "free")), Some(0))
        }),
        ("LOCK.RELEASE of a missing key", |o| {
            assert_eq!(int_or_nil(o, cmd!("LOCK.RELEASE", "free", "a")), None)
        }),
    ];
    for (what, run) in unchanging {
        assert!(
            exec_after(&mut c, &["k", "free"], || run(&mut other)),
            "{what} aborted a WATCH transaction"
        );
    }
    // A real change still aborts it.
    assert!(
        !exec_after(&mut c, &["k"], || {
            int_or_nil(&mut other, cmd!("LOCK.RENEW", "k", "a", 5000));
        }),
        "a renewal must abort a WATCH on its key"
    );
    assert!(!exec_after(&mut c, &["k"], || {
        int_or_nil(&mut other, cmd!("LOCK.RELEASE", "k", "a"));
    }));
}

// ---------------------------------------------------------------------------------------------
// Writable replicas: a replica never grants, whatever `replica-read-only` says.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_writable_replica_refuses_every_lock_change() {
    let master = Server::with_args(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::with_args(&["--replica-read-only", "no"]);
    common::attach_replica(&master, &replica);
    let mut m = connect(&master);
    let mut r = connect(&replica);
    acquire(&mut m, "held", "a", LONG_TTL);
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    // The replica is writable for plain keys...
    let _: () = cmd!("SET", "plain", "1")
        .query(&mut r)
        .expect("writable replica");
    // ...but no lock command that changes a lock runs there.
    let changes = [
        cmd!("LOCK.ACQUIRE", "free", "b", 1000),
        cmd!("LOCK.REENTER", "free", "b", 1000),
        cmd!("LOCK.WAIT", "free", "b", 1000, 100),
        cmd!("LOCK.WAIT", "held", "b", 1000, 100),
        cmd!("LOCK.RELEASE", "held", "a"),
        cmd!("LOCK.RENEW", "held", "a", 1000),
        cmd!("LOCK.FORCERELEASE", "held"),
        cmd!("LOCK.APPLY", "free", "b", 7, 1),
        cmd!("LOCK.COUNTER", 1_i64 << 52),
    ];
    for command in changes {
        let result: redis::RedisResult<redis::Value> = command.query(&mut r);
        match result {
            Err(e) if e.code() == Some("READONLY") => {}
            other => panic!("{} on a replica: {other:?}", common::show(&command)),
        }
    }
    assert_eq!(lock_info(&mut r, "free"), None);
    assert_eq!(lock_info(&mut r, "held").expect("mirrored").owner, b"a");
    // The master's changes still arrive.
    let _: i64 = cmd!("LOCK.RELEASE", "held", "a").query(&mut m).unwrap();
    acquire(&mut m, "free", "c", LONG_TTL);
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(lock_info(&mut r, "held"), None);
    assert_eq!(lock_info(&mut r, "free").expect("mirrored").owner, b"c");
}

/// A server configured as a replica from the start (no role-change event ever fires) refuses
/// lock changes too, and grants again once promoted.
#[test]
fn a_replica_by_configuration_refuses_until_promoted() {
    let master = Server::start();
    let port = master.port.to_string();
    let replica = Server::with_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--replica-read-only",
        "no",
    ]);
    let mut r = connect(&replica);
    let refused: redis::RedisResult<Option<i64>> =
        cmd!("LOCK.ACQUIRE", "k", "a", 1000).query(&mut r);
    assert_eq!(
        refused.as_ref().err().and_then(|e| e.code()),
        Some("READONLY"),
        "{refused:?}"
    );
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    acquire(&mut r, "k", "a", 1000);
}

// ---------------------------------------------------------------------------------------------
// ACL: a waiter whose permission is taken away while it waits is not granted.
// ---------------------------------------------------------------------------------------------

fn authed_waiter(server: &Server, c: &mut Connection, key: &str, owner: &str) -> Raw {
    let mut w = Raw::connect(server);
    w.send(&[b"AUTH", b"app", b"pw"]);
    assert_eq!(w.read(SOON), Reply::Status("OK".into()));
    let before = waiters(c, key);
    w.send_wait(key, owner, LONG_TTL as u64, 0);
    await_waiters(c, key, before + 1);
    w
}

fn expect_noperm(w: &mut Raw, what: &str) {
    match w.read(SOON) {
        Reply::Error(e) if e.starts_with("NOPERM") => {}
        other => panic!("{what}: expected NOPERM, got {other:?}"),
    }
}

#[test]
fn a_waiter_whose_key_permission_is_revoked_is_not_granted() {
    let server = Server::start();
    let mut c = connect(&server);
    let _: () = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "app:k", "a", LONG_TTL);
    let mut revoked = authed_waiter(&server, &mut c, "app:k", "b");
    let mut next = Raw::connect(&server); // the default user, still allowed
    next.send_wait("app:k", "c", LONG_TTL as u64, 0);
    await_waiters(&mut c, "app:k", 2);
    let _: () = cmd!("ACL", "SETUSER", "app", "resetkeys", "~other:*")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "app:k", "a").query(&mut c).unwrap();
    expect_noperm(&mut revoked, "key pattern revoked");
    // The lock goes to the next waiter that may have it, in the same step.
    let token = next.read(SOON).token();
    let info = lock_info(&mut c, "app:k").expect("granted to c");
    assert_eq!(
        (info.owner.as_slice(), info.token as u64),
        (&b"c"[..], token)
    );
}

#[test]
fn a_waiter_whose_command_permission_is_revoked_is_not_granted() {
    let server = Server::start();
    let mut c = connect(&server);
    let _: () = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all")
        .query(&mut c)
        .unwrap();
    // Held long until the waiter waits and its permission is gone, then renewed to 300 ms: a
    // loaded machine cannot let the lease end (and grant the waiter) before the revocation.
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = authed_waiter(&server, &mut c, "k", "b");
    let _: () = cmd!("ACL", "SETUSER", "app", "-lock.wait")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.RENEW", "k", "a", 300).query(&mut c).unwrap();
    // Served by the expiry path this time (a timer, not a command).
    expect_noperm(&mut w, "command revoked");
    assert!(eventually(SOON, || lock_info(&mut c, "k").is_none()));
    assert_eq!(waiters(&mut c, "k"), 0);
}

// ---------------------------------------------------------------------------------------------
// Token space: a token of 2^53-1 arriving from outside pins the counter (decided: tokens never
// go back, so every later grant is refused, clearly and persistently).
// ---------------------------------------------------------------------------------------------

#[test]
fn the_largest_token_exhausts_the_token_space_persistently() {
    let server = Server::start();
    let mut c = connect(&server);
    acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queue_behind(&server, &mut c, "k", "b", LONG_TTL as u64);
    let max: i64 = (1 << 53) - 1;
    let _: () = cmd!("LOCK.APPLY", "pin", "x", max, 1)
        .query(&mut c)
        .unwrap();
    let exhausted = |c: &mut Connection, command: redis::Cmd| {
        let result: redis::RedisResult<Option<i64>> = command.query(c);
        match result {
            Err(e) if e.to_string().contains("fencing token space exhausted") => {}
            other => panic!("{}: {other:?}", common::show(&command)),
        }
    };
    exhausted(&mut c, cmd!("LOCK.ACQUIRE", "other", "a", 1000));
    exhausted(&mut c, cmd!("LOCK.WAIT", "other", "a", 1000, 10));
    // A waiter is answered, not left hanging, and the queue moves on.
    let _: i64 = cmd!("LOCK.RELEASE", "k", "a").query(&mut c).unwrap();
    match w.read(SOON) {
        Reply::Error(e) if e.contains("fencing token space exhausted") => {}
        other => panic!("waiter: {other:?}"),
    }
    assert_eq!(lock_info(&mut c, "k"), None);
    // Persistent: the counter comes back with the data.
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).expect("DEBUG RELOAD");
    exhausted(&mut c, cmd!("LOCK.ACQUIRE", "other", "a", 1000));
    // What exists keeps working: the pinned lock can be renewed and released.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "pin", "x", 1000)),
        Some(max)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "pin", "x")),
        Some(0)
    );
}
