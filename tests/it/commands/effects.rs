//! Errors change nothing, and `WATCH` sees only what changed.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use common::ask::digest;
use common::{acquire, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;

/// Found in attack round 7.
///
/// Groups, permits, downgrade, extreme integers: commands that must fail, each run against a
/// keyspace of an exclusive lock, a semaphore, a read lock and a string. docs: "A command with a
/// bad argument changes nothing"; "Errors change nothing" (groups); refusals "change nothing".
///
/// Must hold: each answers an error, and the keyspace (`DEBUG DIGEST`), the counters of
/// `INFO relock` and `LOCK.STATS` are as before.
#[test]
fn errors_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "ex", "x", LONG);
    let _: i64 = cmd!("LOCK.ACQUIRE", "sem", "a", LONG, "SHARED", "LIMIT", 2)
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "rd", "r", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("SET", "str", "v").query(&mut c).unwrap();
    let snapshot = |c: &mut Connection| {
        let info: String = cmd!("INFO", "relock").query(c).unwrap();
        let counters: Vec<String> = info
            .lines()
            .filter(|l| {
                l.contains("_total:")
                    || l.starts_with("relock_holds")
                    || l.starts_with("relock_last_token")
            })
            .map(str::to_string)
            .collect();
        let stats: Value = cmd!("LOCK.STATS", "COUNT", 100).query(c).unwrap();
        (digest(c), counters, format!("{stats:?}"))
    };
    let before = snapshot(&mut c);
    let bad: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", "sem", "b", "1000", "SHARED", "LIMIT", "3"],
        vec![
            "LOCK.WAIT",
            "sem",
            "b",
            "1000",
            "10",
            "SHARED",
            "LIMIT",
            "3",
        ],
        vec![
            "LOCK.ACQUIRE",
            "sem",
            "a",
            "1000",
            "SHARED",
            "LIMIT",
            "2",
            "PERMITS",
            "2",
        ],
        vec!["LOCK.REENTER", "sem", "a", "1000"],
        vec!["LOCK.WAIT", "ex", "x", "1000", "100", "SHARED"],
        vec!["LOCK.DOWNGRADE", "sem", "a"],
        vec!["LOCK.DOWNGRADE", "str", "a"],
        vec!["LOCK.MACQUIRE", "2", "free1", "rd", "r", "1000"],
        vec!["LOCK.MACQUIRE", "3", "free1", "free2", "str", "o", "1000"],
        vec!["LOCK.MACQUIRE", "2", "free1", "free1", "o", "1000"],
        vec!["LOCK.MACQUIRE", "257", "free1", "o", "1000"],
        vec!["LOCK.MACQUIRE", "9223372036854775808", "free1", "o", "1000"],
        vec![
            "LOCK.MACQUIRE",
            "-9223372036854775808",
            "free1",
            "o",
            "1000",
        ],
        vec!["LOCK.MACQUIRE", "1", "free1", "o", "0"],
        vec!["LOCK.MACQUIRE", "1", "free1", "o", "1000000000001"],
        vec!["LOCK.MACQUIRE", "1", "free1", "", "1000"],
        vec!["LOCK.MRELEASE", "2", "ex", "str", "x"],
        vec!["LOCK.MRENEW", "2", "ex", "str", "x", "1000"],
        vec!["LOCK.MRENEW", "1", "ex", "x", "-1"],
        vec!["LOCK.ACQUIRE", "free1", "o", "9223372036854775808"],
        vec!["LOCK.ACQUIRE", "free1", "o", "-1"],
        vec!["LOCK.ACQUIRE", "free1", "o", "0"],
        vec![
            "LOCK.ACQUIRE",
            "free1",
            "o",
            "1000",
            "SHARED",
            "LIMIT",
            "1000001",
        ],
        vec![
            "LOCK.ACQUIRE",
            "free1",
            "o",
            "1000",
            "SHARED",
            "LIMIT",
            "4294967297",
        ],
        vec![
            "LOCK.ACQUIRE",
            "free1",
            "o",
            "1000",
            "SHARED",
            "LIMIT",
            "5",
            "PERMITS",
            "6",
        ],
        vec![
            "LOCK.ACQUIRE",
            "free1",
            "o",
            "1000",
            "SHARED",
            "LIMIT",
            "5",
            "PERMITS",
            "4294967297",
        ],
        vec![
            "LOCK.ACQUIRE",
            "free1",
            "o",
            "1000",
            "SHARED",
            "PERMITS",
            "1",
        ],
        vec!["LOCK.WAIT", "free1", "o", "1000", "-1"],
        vec!["LOCK.WAIT", "free1", "o", "1000", "1000000000001"],
        vec!["LOCK.HOLDERS", "ex", "COUNT", "4294967296"],
        vec!["LOCK.WAITERS", "ex", "COUNT", "-1"],
        vec!["LOCK.HISTORY", "ex", "18446744073709551616"],
        vec!["LOCK.LOG", "-1"],
        vec!["LOCK.STATS", "COUNT", "-1"],
        vec!["LOCK.RENEW", "ex", "x", "0"],
        vec!["LOCK.RENEW", "ex", "x", "1000000000001"],
        vec!["LOCK.FORCERELEASE", "ex", ""],
        vec!["LOCK.APPLY", "ex", "x", "0", "1"],
        vec!["LOCK.APPLY", "ex", "x", "9007199254740992", "1"],
        vec![
            "LOCK.APPLY",
            "ex",
            "x",
            "5",
            "1",
            "PXAT",
            "4611686018427387905",
        ],
        vec!["LOCK.COUNTER", "9007199254740992"],
    ];
    for args in &bad {
        let mut command = redis::cmd(args[0]);
        for a in &args[1..] {
            command.arg(*a);
        }
        let reply: redis::RedisResult<Value> = command.query(&mut c);
        assert!(reply.is_err(), "{args:?} answered {reply:?}");
    }
    assert_eq!(snapshot(&mut c), before, "after the refused commands");
}

/// Found in attack round 7.
///
/// Keyspace semantics / `WATCH` on a lock key while another client runs the new commands.
/// docs: a key opened for writing that ends up unchanged (a refused acquire, a release by a
/// non-owner) signals nothing.
///
/// Must hold: a transaction watching the key runs after a nil or refused `LOCK.MACQUIRE`,
/// `LOCK.DOWNGRADE` of a non-owner, `LOCK.MRELEASE` by a non-owner, a refused semaphore request;
/// it is aborted after a `LOCK.DOWNGRADE` and a `LOCK.MRENEW` that changed the key.
#[test]
fn watch_sees_only_what_changed() {
    let server = Server::start();
    let mut a = server.conn();
    let mut b = server.conn();
    let cases: Vec<(&str, Vec<&str>, Vec<&str>, bool)> = vec![
        (
            "nil group",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.MACQUIRE", "2", "j", "k", "y", "1000"],
            false,
        ),
        (
            "group of a wrong type",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.MACQUIRE", "2", "k", "s", "x", "1000"],
            false,
        ),
        (
            "downgrade by another",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.DOWNGRADE", "k", "y"],
            false,
        ),
        (
            "group release by another",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.MRELEASE", "1", "k", "y"],
            false,
        ),
        (
            "another limit",
            vec!["LOCK.ACQUIRE", "k", "x", "600000", "SHARED", "LIMIT", "2"],
            vec!["LOCK.ACQUIRE", "k", "y", "1000", "SHARED", "LIMIT", "3"],
            false,
        ),
        (
            "downgrade",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.DOWNGRADE", "k", "x"],
            true,
        ),
        (
            "group renew",
            vec!["LOCK.ACQUIRE", "k", "x", "600000"],
            vec!["LOCK.MRENEW", "1", "k", "x", "1000"],
            true,
        ),
    ];
    for (what, setup, other, aborts) in cases {
        let _: () = cmd!("FLUSHALL").query(&mut a).unwrap();
        let _: () = cmd!("SET", "s", "v").query(&mut a).unwrap();
        let mut s = redis::cmd(setup[0]);
        s.arg(&setup[1..]);
        let _: Value = s.query(&mut a).unwrap();
        let _: () = cmd!("WATCH", "k").query(&mut a).unwrap();
        let mut o = redis::cmd(other[0]);
        o.arg(&other[1..]);
        let _: redis::RedisResult<Value> = o.query(&mut b);
        let ran: Option<(String,)> = redis::pipe().atomic().cmd("PING").query(&mut a).unwrap();
        assert_eq!(
            ran.is_none(),
            aborts,
            "{what}: EXEC aborted = {}",
            ran.is_none()
        );
    }
}
