//! "Beyond one key and one permit" (spec): `LOCK.MACQUIRE`/`MRELEASE`/`MRENEW`, `PERMITS p`,
//! `LOCK.DOWNGRADE` and the restart grace (`relock.restart-grace-ms`), rule by rule, against a
//! real server. Runs on every server of the matrix.
use relock_testkit as common;
use relock_testkit::cmd;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::ask::named_permits as holders;
use common::ask::{lock_fields, pttl, waiters};
use common::raw::{Raw, Reply};
use common::reply::{error, fields, int, text};
use common::{acquire, eventually, info_field, int_or_nil, Server};
use redis::{Connection, Value};

const LONG: i64 = 60_000;
const DUE: Duration = Duration::from_secs(10);

fn macquire(c: &mut Connection, keys: &[&str], owner: &str, ttl: i64) -> Option<Vec<i64>> {
    cmd!("LOCK.MACQUIRE", keys.len())
        .arg(keys)
        .arg(owner)
        .arg(ttl)
        .query(c)
        .unwrap()
}

// --- Several keys at once --------------------------------------------------------------------

#[test]
fn macquire_takes_every_key_or_none_with_one_token() {
    let server = Server::start();
    let mut c = server.conn();
    let tokens = macquire(&mut c, &["a", "b", "c"], "o", LONG).expect("all free");
    assert_eq!(tokens.len(), 3);
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "one token per group grant: {tokens:?}"
    );
    // A key the owner holds already counts as granted and keeps its own token.
    let d = acquire(&mut c, "d", "o", LONG);
    let again = macquire(&mut c, &["a", "d", "e"], "o", LONG).expect("idempotent");
    assert_eq!((again[0], again[1]), (tokens[0], d));
    assert!(
        again[2] > d,
        "the new hold gets a token above every earlier one"
    );
    // One key taken: nil, and nothing changed.
    acquire(&mut c, "x", "other", LONG);
    assert_eq!(macquire(&mut c, &["f", "x"], "o", LONG), None);
    assert!(common::lock_info(&mut c, "f").is_none(), "no partial group");
    // MRELEASE / MRENEW reply how many keys the owner held.
    let n: i64 = cmd!("LOCK.MRENEW", 4, "a", "b", "zz", "x", "o", 5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let n: i64 = cmd!("LOCK.MRELEASE", 3, "a", "b", "c", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    assert!(common::lock_info(&mut c, "a").is_none());
    // A key of a group is released on its own too.
    macquire(&mut c, &["g1", "g2"], "o", LONG).unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "g1", "o").query(&mut c).unwrap();
    let n: i64 = cmd!("LOCK.MRELEASE", 2, "g1", "g2", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "fewer than numkeys: part of the group is gone");
}

#[test]
fn macquire_of_a_key_with_waiters_is_nil() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "q", "holder", LONG);
    let mut w = Raw::connect(&server);
    w.send_wait("q", "waiter", LONG as u64, 0);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "q").expect("a lock at the key")["waiters"]
    ) == 1));
    assert_eq!(macquire(&mut c, &["free", "q"], "o", LONG), None);
    assert!(common::lock_info(&mut c, "free").is_none());
}

#[test]
fn macquire_arguments_and_errors_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("SET", "str", "v").query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "sh", "o", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    for (cmd, wanted) in [
        (
            cmd!("LOCK.MACQUIRE", 2, "a", "a", "o", 1000),
            "duplicate key",
        ),
        (
            cmd!("LOCK.MACQUIRE", 0, "a", "o", 1000),
            "numkeys should be greater than 0",
        ),
        (
            cmd!("LOCK.MACQUIRE", "x", "a", "o", 1000),
            "numkeys should be greater than 0",
        ),
        (
            cmd!("LOCK.MACQUIRE", 257, "a", "o", 1000),
            "greater than 256",
        ),
        (
            cmd!("LOCK.MACQUIRE", 5, "a", "o", 1000),
            "can't be greater than number of args",
        ),
        (
            cmd!("LOCK.MACQUIRE", 1, "a", "o", 1000, "x"),
            "syntax error",
        ),
        (cmd!("LOCK.MACQUIRE", 1, "a", "o", 0), "invalid ttl_ms"),
        (cmd!("LOCK.MACQUIRE", 2, "a", "str", "o", 1000), "WRONGTYPE"),
        (
            cmd!("LOCK.MACQUIRE", 2, "a", "sh", "o", 1000),
            "held in another mode",
        ),
        (cmd!("LOCK.MRELEASE", 2, "a", "a", "o"), "duplicate key"),
        (cmd!("LOCK.MRENEW", 1, "a", "o", -1), "invalid ttl_ms"),
    ] {
        let e = error(&mut c, cmd);
        assert!(e.contains(wanted), "{wanted}: {e}");
    }
    assert!(
        common::lock_info(&mut c, "a").is_none(),
        "nothing was taken"
    );
    let keys: Vec<String> = cmd!(
        "COMMAND",
        "GETKEYS",
        "LOCK.MACQUIRE",
        3,
        "k1",
        "k2",
        "k3",
        "o",
        1
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(keys, ["k1", "k2", "k3"], "a keynum key spec");
    let keys: Vec<String> = cmd!("COMMAND", "GETKEYS", "LOCK.MRELEASE", 2, "k1", "k2", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k1", "k2"]);
    // ACL key patterns apply to every key.
    let _: () = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all")
        .query(&mut c)
        .unwrap();
    let mut app = server.conn();
    let _: () = cmd!("AUTH", "app", "pw").query(&mut app).unwrap();
    assert!(macquire(&mut app, &["app:1", "app:2"], "o", LONG).is_some());
    let e = error(
        &mut app,
        cmd!("LOCK.MACQUIRE", 2, "app:3", "other:1", "o", LONG),
    );
    assert!(e.contains("NOPERM"), "{e}");
    assert!(common::lock_info(&mut c, "app:3").is_none());
}

#[test]
fn a_group_reaches_the_aof_as_one_transaction_and_replicas_get_it() {
    // `always`: with `everysec` the AOF write may wait up to 2 s behind a background fsync
    // while replies go out, and the file read below could miss the group.
    let server = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    common::attach_replica(&server, &replica);
    let mut c = server.conn();
    let tokens = macquire(&mut c, &["a", "b", "c"], "o", LONG).unwrap();
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    for key in ["a", "b", "c"] {
        let held = common::lock_info(&mut r, key).expect("on the replica");
        assert_eq!((held.owner.as_slice(), held.token), (&b"o"[..], tokens[0]));
    }
    let aof = common::aof_commands(&server);
    let applies: Vec<usize> = aof
        .iter()
        .enumerate()
        .filter(|(_, w)| w.first().is_some_and(|c| c == "LOCK.APPLY"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(applies.len(), 3, "{aof:?}");
    // The command before the first apply, a SELECT aside (Valkey writes it inside the MULTI).
    let before = aof[..applies[0]]
        .iter()
        .rev()
        .find(|w| w.first().is_some_and(|c| c != "SELECT"))
        .expect("a command before the group");
    assert_eq!(before[0], "MULTI", "{aof:?}");
    assert_eq!(aof[applies[2] + 1][0], "EXEC", "{aof:?}");
}

// --- Several permits at once --------------------------------------------------------------------

#[test]
fn permits_sum_to_at_most_the_limit() {
    let server = Server::start();
    let mut c = server.conn();
    let take = |c: &mut Connection, owner: &str, p: i64| {
        int_or_nil(
            c,
            cmd!(
                "LOCK.ACQUIRE",
                "sem",
                owner,
                LONG,
                "SHARED",
                "LIMIT",
                10,
                "PERMITS",
                p
            ),
        )
    };
    assert!(take(&mut c, "a", 7).is_some());
    assert_eq!(take(&mut c, "b", 4), None, "7 + 4 > 10");
    assert!(take(&mut c, "c", 3).is_some());
    let i = lock_fields(&mut c, "sem").expect("a lock at the key");
    assert_eq!(
        (
            int(&i["holders"]),
            int(&i["limit"]),
            int(&i["permits_free"])
        ),
        (2, 10, 0)
    );
    assert_eq!(holders(&mut c, "sem"), [("a".into(), 7), ("c".into(), 3)]);
    // A hold counts its permits, never its reentrancy count.
    let n: i64 = cmd!(
        "LOCK.REENTER",
        "sem",
        "a",
        LONG,
        "SHARED",
        "LIMIT",
        10,
        "PERMITS",
        7
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        int(&lock_fields(&mut c, "sem").expect("a lock at the key")["permits_free"]),
        0
    );
    let _: i64 = cmd!("LOCK.RELEASE", "sem", "c").query(&mut c).unwrap();
    assert_eq!(
        int(&lock_fields(&mut c, "sem").expect("a lock at the key")["permits_free"]),
        3
    );
    // Errors, checked mode, limit, permits; nothing changes.
    for (cmd, wanted) in [
        (
            cmd!(
                "LOCK.ACQUIRE",
                "sem",
                "a",
                LONG,
                "SHARED",
                "LIMIT",
                10,
                "PERMITS",
                2
            ),
            "lock is held with other permits",
        ),
        (
            cmd!("LOCK.ACQUIRE", "sem", "z", LONG, "SHARED", "PERMITS", 2),
            "syntax error",
        ),
        (
            cmd!(
                "LOCK.ACQUIRE",
                "sem",
                "z",
                LONG,
                "SHARED",
                "LIMIT",
                10,
                "PERMITS",
                11
            ),
            "invalid permits",
        ),
        (
            cmd!(
                "LOCK.ACQUIRE",
                "sem",
                "z",
                LONG,
                "SHARED",
                "LIMIT",
                10,
                "PERMITS",
                0
            ),
            "invalid permits",
        ),
        (
            cmd!(
                "LOCK.ACQUIRE",
                "sem",
                "z",
                LONG,
                "SHARED",
                "LIMIT",
                9,
                "PERMITS",
                1
            ),
            "lock has another limit (10)",
        ),
    ] {
        let e = error(&mut c, cmd);
        assert!(e.contains(wanted), "{wanted}: {e}");
    }
    assert_eq!(
        int(&lock_fields(&mut c, "sem").expect("a lock at the key")["permits_free"]),
        3
    );
    // An exclusive key has no free permits; a reader lock no limit.
    acquire(&mut c, "x", "o", LONG);
    assert_eq!(
        int(&lock_fields(&mut c, "x").expect("a lock at the key")["permits_free"]),
        0
    );
    let _: i64 = cmd!("LOCK.ACQUIRE", "r", "o", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        int(&lock_fields(&mut c, "r").expect("a lock at the key")["permits_free"]),
        -1
    );
}

#[test]
fn a_large_request_at_the_head_is_never_starved_by_small_ones() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |p: i64| -> Vec<String> {
        ["SHARED", "LIMIT", "10", "PERMITS"]
            .iter()
            .map(|s| s.to_string())
            .chain([p.to_string()])
            .collect()
    };
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "a", LONG)
        .arg(sem(6))
        .query(&mut c)
        .unwrap();
    let mut big = Raw::connect(&server);
    let big_words = sem(8);
    let mut args: Vec<&[u8]> = vec![b"LOCK.WAIT", b"s", b"big", b"60000", b"0"];
    args.extend(big_words.iter().map(|w| w.as_bytes()));
    big.send(&args);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "s").expect("a lock at the key")["waiters"]
    ) == 1));
    // 4 permits are free, but the head needs 8: a request for 1 does not pass it.
    let mut small = cmd!("LOCK.ACQUIRE", "s", "small", LONG);
    small.arg(sem(1));
    let small = int_or_nil(&mut c, small);
    assert_eq!(small, None, "FIFO: no barging past a large head");
    let list = fields(
        &cmd!("LOCK.WAITERS", "s")
            .query::<Vec<Value>>(&mut c)
            .unwrap()[0],
    );
    assert_eq!((int(&list["limit"]), int(&list["permits"])), (10, 8));
    let _: i64 = cmd!("LOCK.RELEASE", "s", "a").query(&mut c).unwrap();
    big.read(DUE).token();
    assert_eq!(holders(&mut c, "s"), [("big".into(), 8)]);
}

#[test]
fn permits_survive_a_reload_and_reach_replicas() {
    let server = Server::start();
    let replica = Server::start();
    common::attach_replica(&server, &replica);
    let mut c = server.conn();
    let _: i64 = cmd!(
        "LOCK.ACQUIRE",
        "s",
        "a",
        LONG,
        "SHARED",
        "LIMIT",
        5,
        "PERMITS",
        3
    )
    .query(&mut c)
    .unwrap();
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    assert_eq!(holders(&mut c, "s"), [("a".into(), 3)]);
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    assert_eq!(holders(&mut r, "s"), [("a".into(), 3)]);
    assert_eq!(
        int(&lock_fields(&mut r, "s").expect("a lock at the key")["permits_free"]),
        2
    );
}

// --- Downgrade -------------------------------------------------------------------------------

#[test]
fn a_downgrade_grants_the_readers_at_the_head_in_the_same_step() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "KEd")
        .query(&mut c)
        .unwrap();
    let token = acquire(&mut c, "k", "w", LONG);
    let mut r1 = Raw::connect(&server);
    r1.send(&[b"LOCK.WAIT", b"k", b"r1", b"60000", b"0", b"SHARED"]);
    let mut r2 = Raw::connect(&server);
    r2.send(&[b"LOCK.WAIT", b"k", b"r2", b"60000", b"0", b"SHARED"]);
    let mut w2 = Raw::connect(&server);
    w2.send(&[b"LOCK.WAIT", b"k", b"w2", b"60000", b"0"]);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "k").expect("a lock at the key")["waiters"]
    ) == 3));
    // The downgrade and a check of the holders in one transaction: the readers are in.
    let (downgraded, list): (i64, Value) = redis::pipe()
        .atomic()
        .cmd("LOCK.DOWNGRADE")
        .arg("k")
        .arg("w")
        .cmd("LOCK.HOLDERS")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(downgraded, token, "the same token");
    let Value::Array(list) = list else { panic!() };
    assert_eq!(list.len(), 3, "w, r1 and r2 hold it together");
    r1.read(DUE).token();
    r2.read(DUE).token();
    w2.assert_silent("the writer waits for every reader");
    let i = lock_fields(&mut c, "k").expect("a lock at the key");
    assert_eq!(int(&i["limit"]), 0);
    assert!(int(&i["ttl"]) > 50_000, "the same lease");
    // Safe to retry; nil for a non-holder; INFO counts it.
    let again: i64 = cmd!("LOCK.DOWNGRADE", "k", "w").query(&mut c).unwrap();
    assert_eq!(again, token);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", "k", "nobody")),
        None
    );
    assert_eq!(info_field(&mut c, "downgraded_total"), 1);
    let _: i64 = cmd!("LOCK.ACQUIRE", "sem", "o", LONG, "SHARED", "LIMIT", 2)
        .query(&mut c)
        .unwrap();
    let e = error(&mut c, cmd!("LOCK.DOWNGRADE", "sem", "o"));
    assert!(e.contains("lock has another limit (2)"), "{e}");
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "k", "r1", LONG));
    assert!(
        e.contains("LOCK.DOWNGRADE"),
        "the mode error names the way: {e}"
    );
}

// --- Restart grace ---------------------------------------------------------------------------

#[test]
fn a_restarted_master_grants_nothing_for_the_grace_then_serves_its_queue_in_order() {
    let mut server = Server::start();
    {
        let mut c = server.conn();
        acquire(&mut c, "k", "before", 60_000);
    }
    // Restarted without persistence: the lock is gone, and the server cannot know it granted it.
    // The grace starts when the new process loads the module, after this instant: the time to
    // restart (long on a busy machine) counts against the grace, never for it.
    let started = Instant::now();
    server.restart_with(&["--relock.restart-grace-ms", "2000"]);
    let mut c = server.conn();
    assert_eq!(info_field(&mut c, "restart_grace_ms"), 2000);
    assert!(info_field(&mut c, "grace_left_ms") > 0);
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "k", "a", 1000));
    assert!(e.contains("relock restart grace, "), "{e}");
    let e = error(&mut c, cmd!("LOCK.MACQUIRE", 1, "k", "a", 1000));
    assert!(e.contains("relock restart grace"), "{e}");
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "k", "a", 2001));
    assert!(e.contains("ttl_ms exceeds relock.restart-grace-ms"), "{e}");
    // Each asks for the longest ttl the grace allows: first's hold must outlive the checks
    // that second waits behind it, on a busy machine too.
    let mut first = Raw::connect(&server);
    first.send_wait("k", "first", 2000, 0);
    let mut second = Raw::connect(&server);
    second.send_wait("k", "second", 2000, 0);
    assert!(eventually(DUE, || waiters(&mut c, "k") == 2));
    let t = first.read(DUE).token();
    assert!(
        started.elapsed() >= Duration::from_millis(1990),
        "granted {:?} after the restart",
        started.elapsed()
    );
    assert_eq!(info_field(&mut c, "grace_left_ms"), 0);
    second.assert_silent("in queue order");
    let _: i64 = cmd!("LOCK.RELEASE", "k", "first").query(&mut c).unwrap();
    assert!(second.read(DUE).token() > t);
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "free", "a", 1000)).is_some());
}

#[test]
fn a_promoted_replica_starts_a_grace() {
    let master = Server::start();
    let replica = Server::with_args(&["--relock.restart-grace-ms", "1500"]);
    common::attach_replica(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(
        info_field(&mut r, "grace_left_ms"),
        0,
        "no grace for a replica"
    );
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    let e = error(&mut r, cmd!("LOCK.ACQUIRE", "k", "a", 1000));
    assert!(e.contains("relock restart grace"), "{e}");
    let granted = eventually(DUE, || {
        cmd!("LOCK.ACQUIRE", "k", "a", 1000)
            .query::<Option<i64>>(&mut r)
            .is_ok_and(|t| t.is_some())
    });
    assert!(granted, "granted once the grace is over");
}

// --- Groups, rule by rule ----------------------------------------------------------------------

/// `LOCK.HOLDERS key OWNER owner` as a field map, if `owner` holds `key`.
fn holder_of(c: &mut Connection, key: &str, owner: &str) -> Option<HashMap<String, Value>> {
    match cmd!("LOCK.HOLDERS", key, "OWNER", owner)
        .query::<Value>(c)
        .unwrap()
    {
        Value::Nil => None,
        Value::Array(items) => items.first().map(fields),
        other => panic!("LOCK.HOLDERS: {other:?}"),
    }
}

#[test]
fn mrenew_renews_every_key_the_owner_holds_and_nothing_else() {
    let server = Server::start();
    let mut c = server.conn();
    let tokens = macquire(&mut c, &["a", "b", "c"], "o", 2000).expect("all free");
    acquire(&mut c, "theirs", "other", 2000);
    let _: i64 = cmd!("LOCK.ACQUIRE", "sh", "o", 2000, "SHARED")
        .query(&mut c)
        .unwrap();
    let n: i64 = cmd!("LOCK.MRENEW", 5, "a", "b", "c", "theirs", "sh", "o", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 4, "the owner holds a, b, c and sh");
    for key in ["a", "b", "c"] {
        let ttl = pttl(&mut c, key);
        assert!(
            ttl > 2000 && ttl <= LONG,
            "{key} renewed to the new ttl: {ttl}"
        );
        let held = common::lock_info(&mut c, key).unwrap();
        assert_eq!((held.token, held.count), (tokens[0], 1), "{key}: same hold");
    }
    let lease = int(&holder_of(&mut c, "sh", "o").expect("o holds sh")["ttl"]);
    assert!(
        lease > 2000,
        "a shared hold of the owner is renewed too: {lease}"
    );
    assert!(
        pttl(&mut c, "theirs") <= 2000,
        "another owner's lock is untouched"
    );
    // Shorter, too (as LOCK.RENEW): the ttl is set, not only raised.
    let n: i64 = cmd!("LOCK.MRENEW", 1, "a", "o", 5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!((1..=5000).contains(&pttl(&mut c, "a")));
    // Part of the group gone: fewer than numkeys, and what is gone stays gone.
    let _: i64 = cmd!("DEL", "b").query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "c", "o").query(&mut c).unwrap();
    let n: i64 = cmd!("LOCK.MRENEW", 3, "a", "b", "c", "o", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "only a is still held");
    assert!(pttl(&mut c, "a") > 5000);
    assert_eq!(
        (pttl(&mut c, "b"), pttl(&mut c, "c")),
        (-2, -2),
        "never revived"
    );
    // A lock that expired is not revived either.
    macquire(&mut c, &["short"], "o", 50).unwrap();
    assert!(eventually(DUE, || pttl(&mut c, "short") == -2));
    let n: i64 = cmd!("LOCK.MRENEW", 2, "short", "a", "o", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(pttl(&mut c, "short"), -2);
    // A non-holder renews nothing.
    let before = pttl(&mut c, "theirs");
    let n: i64 = cmd!("LOCK.MRENEW", 3, "a", "theirs", "sh", "nobody", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0);
    assert!(pttl(&mut c, "theirs") <= before);
    assert_eq!(common::lock_info(&mut c, "theirs").unwrap().owner, b"other");
    assert_eq!(info_field(&mut c, "renewed_total"), 4 + 1 + 1 + 1);
}

#[test]
fn mrelease_takes_one_count_off_each_key_and_hands_on() {
    let server = Server::start();
    let mut c = server.conn();
    let tokens = macquire(&mut c, &["a", "b", "c"], "o", LONG).unwrap();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "a", "o", LONG)),
        Some(2),
        "a re-entered"
    );
    let mut waiter = Raw::connect(&server);
    waiter.send_wait("b", "next", LONG as u64, 0);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "b").expect("a lock at the key")["waiters"]
    ) == 1));
    let n: i64 = cmd!("LOCK.MRELEASE", 4, "a", "b", "c", "zz", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3, "the number of keys the owner held");
    let a = common::lock_info(&mut c, "a").expect("a is still held once");
    assert_eq!(
        (a.token, a.count),
        (tokens[0], 1),
        "one count off, as LOCK.RELEASE"
    );
    let next = waiter.read(DUE).token() as i64;
    assert!(next > tokens[0], "b passed to its waiter in the same step");
    let b = common::lock_info(&mut c, "b").unwrap();
    assert_eq!((b.owner.as_slice(), b.token), (&b"next"[..], next));
    assert!(common::lock_info(&mut c, "c").is_none());
    // Again: only a is left, at count 1; then nothing.
    let n: i64 = cmd!("LOCK.MRELEASE", 3, "a", "b", "c", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(common::lock_info(&mut c, "a").is_none());
    let n: i64 = cmd!("LOCK.MRELEASE", 3, "a", "b", "c", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0);
    // A non-holder releases nothing.
    let n: i64 = cmd!("LOCK.MRELEASE", 1, "b", "o").query(&mut c).unwrap();
    assert_eq!(n, 0);
    assert_eq!(common::lock_info(&mut c, "b").unwrap().owner, b"next");
    // A shared hold of the owner is released as LOCK.RELEASE would.
    let _: i64 = cmd!("LOCK.ACQUIRE", "sh", "o", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "sh", "r", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    let n: i64 = cmd!("LOCK.MRELEASE", 1, "sh", "o").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(holders(&mut c, "sh"), [("r".into(), 1)]);
}

// --- Permits, rule by rule ---------------------------------------------------------------------

#[test]
fn a_waiter_whose_owner_holds_with_other_permits_at_its_turn_gets_the_error() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |p: u32| -> Vec<String> {
        ["SHARED", "LIMIT", "10", "PERMITS"]
            .iter()
            .map(|s| s.to_string())
            .chain([p.to_string()])
            .collect()
    };
    let wait = |owner: &str, p: u32, n: i64, c: &mut Connection| {
        let mut r = Raw::connect(&server);
        let words = sem(p);
        let mut args: Vec<&[u8]> = vec![b"LOCK.WAIT", b"s", owner.as_bytes(), b"60000", b"0"];
        args.extend(words.iter().map(|w| w.as_bytes()));
        r.send(&args);
        assert!(eventually(DUE, || int(
            &lock_fields(c, "s").expect("a lock at the key")["waiters"]
        ) == n));
        r
    };
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "full", LONG)
        .arg(sem(10))
        .query(&mut c)
        .unwrap();
    // x waits twice (it holds nothing yet, so both queue): for 2 permits, then for 3.
    let mut x2 = wait("x", 2, 1, &mut c);
    let mut x3 = wait("x", 3, 2, &mut c);
    let mut y1 = wait("y", 1, 3, &mut c);
    let mut x2_again = wait("x", 2, 4, &mut c);
    let _: i64 = cmd!("LOCK.RELEASE", "s", "full").query(&mut c).unwrap();
    let t = x2.read(DUE).token();
    match x3.read(DUE) {
        Reply::Error(e) => assert!(e.contains("lock is held with other permits"), "{e}"),
        other => panic!("x's second turn, for 3 permits: {other:?}"),
    }
    let y = y1.read(DUE).token();
    assert!(y > t, "the queue goes on past the refused head");
    assert_eq!(
        x2_again.read(DUE).token(),
        t,
        "the same permits: answered as a re-acquire, with the existing token"
    );
    assert_eq!(holders(&mut c, "s"), [("x".into(), 2), ("y".into(), 1)]);
    assert_eq!(
        int(&lock_fields(&mut c, "s").expect("a lock at the key")["permits_free"]),
        7
    );
}

// --- Downgrade, rule by rule -------------------------------------------------------------------

#[test]
fn a_downgrade_keeps_token_ttl_and_count_and_is_safe_to_retry() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "w", 30_000)),
        Some(1)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "w", 30_000)),
        Some(2)
    );
    let token = common::lock_info(&mut c, "k").unwrap().token;
    let _: i64 = cmd!("PEXPIRE", "k", 20_000).query(&mut c).unwrap();
    let down = int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", "k", "w"));
    assert_eq!(down, Some(token), "the same token");
    let h = holder_of(&mut c, "k", "w").expect("w holds k shared");
    assert_eq!(
        (int(&h["token"]), int(&h["count"])),
        (token, 2),
        "same count"
    );
    let ttl = int(&h["ttl"]);
    assert!((15_000..=20_000).contains(&ttl), "the same lease: {ttl}");
    let i = lock_fields(&mut c, "k").expect("a lock at the key");
    assert_eq!(text(&i["mode"]), "shared");
    assert_eq!(int(&i["limit"]), 0, "shared without a limit");
    assert!(pttl(&mut c, "k") <= 20_000, "the key's TTL is the lease");
    // Safe to retry: the shared holder gets its token, and nothing changes.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", "k", "w")),
        Some(token)
    );
    let h = holder_of(&mut c, "k", "w").unwrap();
    assert_eq!((int(&h["token"]), int(&h["count"])), (token, 2));
    assert_eq!(
        info_field(&mut c, "downgraded_total"),
        1,
        "a retry is no downgrade"
    );
    // Nil for a non-holder: a missing key, another reader's key, a key the owner does not hold.
    let _: i64 = cmd!("LOCK.ACQUIRE", "k", "r", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    for (key, owner) in [("missing", "w"), ("k", "nobody")] {
        assert_eq!(
            int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", key, owner)),
            None,
            "{key} {owner}"
        );
    }
    acquire(&mut c, "x", "other", LONG);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", "x", "w")), None);
    assert_eq!(common::lock_info(&mut c, "x").unwrap().owner, b"other");
    // The count is the one it had: two releases end it.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "w")), Some(1));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "w")), Some(0));
    assert_eq!(holders(&mut c, "k"), [("r".into(), 1)]);
}

#[test]
fn a_downgrade_on_a_key_with_a_limit_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    // A semaphore: the owner's hold is shared already, but the rule is checked first.
    let _: i64 = cmd!("LOCK.ACQUIRE", "sem", "o", LONG, "SHARED", "LIMIT", 3)
        .query(&mut c)
        .unwrap();
    let e = error(&mut c, cmd!("LOCK.DOWNGRADE", "sem", "o"));
    assert!(e.contains("lock has another limit (3)"), "{e}");
    assert_eq!(holders(&mut c, "sem"), [("o".into(), 1)]);
    // An exclusive hold while a semaphore request waits (it set the key's limit).
    let token = acquire(&mut c, "k", "w", LONG);
    let mut q = Raw::connect(&server);
    q.send(&[
        b"LOCK.WAIT",
        b"k",
        b"q",
        b"60000",
        b"0",
        b"SHARED",
        b"LIMIT",
        b"2",
    ]);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "k").expect("a lock at the key")["waiters"]
    ) == 1));
    let e = error(&mut c, cmd!("LOCK.DOWNGRADE", "k", "w"));
    assert!(e.contains("lock has another limit (2)"), "{e}");
    let held = common::lock_info(&mut c, "k").expect("still exclusive");
    assert_eq!((held.owner.as_slice(), held.token), (&b"w"[..], token));
    q.assert_silent("the semaphore waiter still waits");
    assert_eq!(info_field(&mut c, "downgraded_total"), 0);
}

// --- Keyspace events of the new commands -------------------------------------------------------

#[test]
fn groups_permits_and_downgrades_emit_the_documented_events() {
    use common::events::{keyevent as ev, Events};
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "KEd")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "theirs", "other", LONG);
    let mut events = Events::subscribe(&server, "__keyevent@0__:*");
    // LOCK.MACQUIRE: lock.acquired per key, in argument order, new holds and refreshes alike;
    // none when the group is refused.
    macquire(&mut c, &["b", "a"], "o", LONG).unwrap();
    macquire(&mut c, &["a", "c"], "o", LONG).unwrap();
    assert_eq!(macquire(&mut c, &["d", "theirs"], "o", LONG), None);
    // LOCK.MRENEW: lock.renewed per key the owner holds.
    let _: i64 = cmd!("LOCK.MRENEW", 3, "a", "zz", "theirs", "o", LONG)
        .query(&mut c)
        .unwrap();
    // LOCK.MRELEASE: lock.released per hold that ends (none for a count taken off), then
    // lock.granted where a waiter is handed the key.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "a", "o", LONG)),
        Some(2)
    );
    let mut w = Raw::connect(&server);
    w.send_wait("c", "next", LONG as u64, 0);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "c").expect("a lock at the key")["waiters"]
    ) == 1));
    let _: i64 = cmd!("LOCK.MRELEASE", 3, "a", "b", "c", "o")
        .query(&mut c)
        .unwrap();
    w.read(DUE).token();
    // LOCK.DOWNGRADE: lock.downgraded, then one lock.granted for the readers let in with it;
    // a retry emits nothing.
    acquire(&mut c, "rw", "writer", LONG);
    let mut r = Raw::connect(&server);
    r.send(&[b"LOCK.WAIT", b"rw", b"reader", b"60000", b"0", b"SHARED"]);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "rw").expect("a lock at the key")["waiters"]
    ) == 1));
    let _: i64 = cmd!("LOCK.DOWNGRADE", "rw", "writer")
        .query(&mut c)
        .unwrap();
    r.read(DUE).token();
    let _: i64 = cmd!("LOCK.DOWNGRADE", "rw", "writer")
        .query(&mut c)
        .unwrap();
    // Permits: a grant of several at once is lock.acquired; a hand-off of several lock.granted.
    let sem = ["SHARED", "LIMIT", "4", "PERMITS"];
    let _: i64 = cmd!("LOCK.ACQUIRE", "sem", "big", LONG)
        .arg(&sem)
        .arg(3)
        .query(&mut c)
        .unwrap();
    let mut p = Raw::connect(&server);
    p.send(&[
        b"LOCK.WAIT",
        b"sem",
        b"p",
        b"60000",
        b"0",
        b"SHARED",
        b"LIMIT",
        b"4",
        b"PERMITS",
        b"2",
    ]);
    assert!(eventually(DUE, || int(
        &lock_fields(&mut c, "sem").expect("a lock at the key")["waiters"]
    ) == 1));
    let _: i64 = cmd!("LOCK.RELEASE", "sem", "big").query(&mut c).unwrap();
    p.read(DUE).token();
    acquire(&mut c, "sentinel", "o", LONG);
    assert_eq!(
        events.until_sentinel(),
        [
            ev("lock.acquired", "b"),
            ev("lock.acquired", "a"),
            ev("lock.acquired", "a"),
            ev("lock.acquired", "c"),
            ev("lock.renewed", "a"),
            ev("lock.acquired", "a"),
            ev("lock.released", "b"),
            ev("lock.released", "c"),
            ev("lock.granted", "c"),
            ev("lock.acquired", "rw"),
            ev("lock.downgraded", "rw"),
            ev("lock.granted", "rw"),
            ev("lock.acquired", "sem"),
            ev("lock.released", "sem"),
            ev("lock.granted", "sem"),
        ]
    );
}

// --- Restart grace, rule by rule ---------------------------------------------------------------

/// Saves the RDB, then restarts `server` from it with a restart grace of `grace_ms`; returns an
/// instant before the restart (the grace ends no earlier than `grace_ms` after it).
fn restart_with_grace(server: &mut Server, grace_ms: u64) -> Instant {
    let mut c = server.conn();
    let _: () = cmd!("SAVE").query(&mut c).unwrap();
    drop(c);
    let before = Instant::now();
    server.restart_with(&["--relock.restart-grace-ms", &grace_ms.to_string()]);
    before
}

/// A raw connection queued in `LOCK.WAIT key owner ttl 0`, once `key` has `n` waiters.
fn raw_waiter(
    server: &Server,
    c: &mut Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    n: usize,
) -> Raw {
    let mut r = Raw::connect(server);
    r.send_wait(key, owner, ttl, 0);
    assert!(
        eventually(DUE, || waiters(c, key) == n as i64),
        "{owner} queued"
    );
    r
}

#[test]
fn in_the_grace_hand_offs_at_release_or_expiry_wait_for_its_end_then_go_in_order() {
    const GRACE: u64 = 5000;
    let mut server = Server::start();
    {
        let mut c = server.conn();
        acquire(&mut c, "released", "holder", LONG);
        acquire(&mut c, "expires", "holder", LONG);
    }
    // Restarted from its RDB: the server has these holds, and a grace.
    let before = restart_with_grace(&mut server, GRACE);
    let mut c = server.conn();
    assert_eq!(info_field(&mut c, "restart_grace_ms"), GRACE as i64);
    // The longest ttl the grace allows: a hold granted at its end must outlive the checks that
    // the next waiter waits behind it, on a busy machine too.
    let mut first = raw_waiter(&server, &mut c, "released", "first", GRACE, 1);
    let mut second = raw_waiter(&server, &mut c, "released", "second", GRACE, 2);
    let mut e1 = raw_waiter(&server, &mut c, "expires", "e1", GRACE, 1);
    let mut e2 = raw_waiter(&server, &mut c, "expires", "e2", GRACE, 2);
    // A release ends its hold at once; a renewal to 100 ms lets the other expire soon.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "released", "holder")),
        Some(0)
    );
    assert!(int_or_nil(&mut c, cmd!("LOCK.RENEW", "expires", "holder", 100)).is_some());
    assert!(eventually(DUE, || common::lock_info(&mut c, "expires").is_none()));
    let left = info_field(&mut c, "grace_left_ms");
    assert!(left > 0, "both holds ended inside the grace");
    // No hand-off at a release or an expiry in the grace: at its end each queue is served in
    // order.
    let t1 = first.read(DUE).token();
    let at_least = Duration::from_millis(GRACE - 50);
    assert!(
        before.elapsed() >= at_least,
        "granted {:?}",
        before.elapsed()
    );
    let te1 = e1.read(DUE).token();
    assert_eq!(info_field(&mut c, "grace_left_ms"), 0);
    second.assert_silent("second waits behind first");
    e2.assert_silent("e2 waits behind e1");
    let _: i64 = cmd!("LOCK.RELEASE", "released", "first")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "expires", "e1").query(&mut c).unwrap();
    assert!(second.read(DUE).token() > t1);
    assert!(e2.read(DUE).token() > te1);
    // The grace is over; its ttl bound stays while it is configured.
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "new", "a", GRACE + 1));
    assert!(e.contains("ttl_ms exceeds relock.restart-grace-ms"), "{e}");
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "new", "a", GRACE)).is_some());
}

#[test]
fn in_the_grace_the_holds_the_server_has_keep_working() {
    const GRACE: u64 = 60_000;
    let mut server = Server::start();
    let (x, g, s) = {
        let mut c = server.conn();
        let x = acquire(&mut c, "x", "holder", LONG);
        assert_eq!(
            int_or_nil(&mut c, cmd!("LOCK.REENTER", "r", "holder", LONG)),
            Some(1)
        );
        let g = macquire(&mut c, &["g1", "g2"], "holder", LONG).unwrap()[0];
        let s: i64 = cmd!("LOCK.ACQUIRE", "s", "reader", LONG, "SHARED", "LIMIT", 5)
            .query(&mut c)
            .unwrap();
        (x, g, s)
    };
    restart_with_grace(&mut server, GRACE);
    let mut c = server.conn();
    let left = info_field(&mut c, "grace_left_ms");
    assert!((1..=GRACE as i64).contains(&left), "{left}");
    assert_eq!(info_field(&mut c, "restart_grace_ms"), GRACE as i64);
    let got: Vec<String> = cmd!("CONFIG", "GET", "relock.restart-grace-ms")
        .query(&mut c)
        .unwrap();
    assert_eq!(got[1], GRACE.to_string());
    // Idempotent re-acquires, re-entries, renewals and releases of holds it has.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "x", "holder", 10_000)),
        Some(x)
    );
    assert!(pttl(&mut c, "x") <= 10_000);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "x", "holder", 20_000)),
        Some(x)
    );
    assert!(pttl(&mut c, "x") > 10_000);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.WAIT", "x", "holder", 20_000, 0)),
        Some(x),
        "a LOCK.WAIT of the holder is a re-acquire"
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "r", "holder", LONG)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "r", "holder")),
        Some(1)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "r", "holder")),
        Some(0)
    );
    assert_eq!(
        macquire(&mut c, &["g1", "g2"], "holder", LONG),
        Some(vec![g, g])
    );
    let n: i64 = cmd!("LOCK.MRENEW", 2, "g1", "g2", "holder", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let shared = cmd!("LOCK.ACQUIRE", "s", "reader", LONG, "SHARED", "LIMIT", 5);
    assert_eq!(int_or_nil(&mut c, shared), Some(s));
    let reenter = cmd!("LOCK.REENTER", "s", "reader", LONG, "SHARED", "LIMIT", 5);
    assert_eq!(int_or_nil(&mut c, reenter), Some(2));
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.DOWNGRADE", "x", "holder")),
        Some(x)
    );
    // Whatever would create a hold is refused, and changes nothing.
    for cmd in [
        cmd!("LOCK.ACQUIRE", "s", "reader2", LONG, "SHARED", "LIMIT", 5),
        cmd!("LOCK.ACQUIRE", "x", "reader2", LONG, "SHARED"),
        cmd!("LOCK.REENTER", "fresh", "o", LONG),
        cmd!("LOCK.MACQUIRE", 2, "g1", "fresh", "holder", LONG),
    ] {
        let e = error(&mut c, cmd);
        assert!(e.contains("relock restart grace, "), "{e}");
    }
    assert!(common::lock_info(&mut c, "fresh").is_none());
    assert_eq!(holders(&mut c, "s"), [("reader".into(), 1)]);
    let n: i64 = cmd!("LOCK.MRELEASE", 2, "g1", "g2", "holder")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    // A ttl above the grace is refused by every command that sets one.
    let over = GRACE + 1;
    for cmd in [
        cmd!("LOCK.ACQUIRE", "x", "holder", over),
        cmd!("LOCK.REENTER", "x", "holder", over),
        cmd!("LOCK.RENEW", "x", "holder", over),
        cmd!("LOCK.WAIT", "x", "holder", over, 0),
        cmd!("LOCK.MACQUIRE", 1, "x", "holder", over),
        cmd!("LOCK.MRENEW", 1, "x", "holder", over),
    ] {
        let shown = common::show(&cmd);
        let e = error(&mut c, cmd);
        assert!(
            e.contains("ttl_ms exceeds relock.restart-grace-ms"),
            "{shown}: {e}"
        );
    }
    assert!(int(&holder_of(&mut c, "x", "holder").unwrap()["ttl"]) <= 20_000);
}
