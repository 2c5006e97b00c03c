//! Clients that go away in the middle of a group's wait or inside a `MULTI` with `CLIENT KILL`.
//!
//! Found in attack round 6. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::ask::lock_fields as info;
use common::ask::{owner_and_token, queued};
use common::raw::client_id;
use common::raw::token_of;
use common::raw::wait_on;
use common::raw::{Raw, Reply};
use common::reply::history_reasons;
use common::{attach_replica, eventually, info_field, Server};
use redis::Value;

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// Found in attack round 6.
///
/// Disconnects / a client in the middle of the group wait pattern the docs give (`LOCK.MACQUIRE`
/// refused, then `LOCK.WAIT` key by key in sorted order) hangs up while it holds the first key
/// and waits for the second; another waits behind it for the second key, and a third group
/// waiter waits for the first. Then the same pattern, but the hang-up comes in the same
/// `MULTI` as the release that grants it the second key.
///
/// Must hold: a refused `LOCK.MACQUIRE` takes nothing; the hung-up waiter leaves its queue at
/// once and is never granted; the hold it has lives until its ttl and then passes to the next
/// waiter within a few ms; a grant whose only answer was lost with its connection is revoked
/// (journal `revoked`) and the key passes on; at no moment does a key have two owners; the
/// third waiter completes the group and `LOCK.MRENEW` counts all of it.
#[test]
fn a_group_waiter_that_hangs_up_midway() {
    let server = Server::start();
    let mut c = server.conn();
    let h = common::acquire(&mut c, "{g}b", "h", LONG);
    // A's hold on a lasts 5 s: the queues below must be in place and checked while A still
    // holds it (1.5 s was not always enough on a loaded machine).
    let mut a = Raw::connect(&server);
    a.send(&[
        b"LOCK.MACQUIRE",
        b"3",
        b"{g}a",
        b"{g}b",
        b"{g}c",
        b"A",
        b"5000",
    ]);
    assert_eq!(a.read(DUE), Reply::Nil, "b is taken");
    assert!(info(&mut c, "{g}a").is_none() && info(&mut c, "{g}c").is_none());
    a.send(&[b"LOCK.WAIT", b"{g}a", b"A", b"5000", b"0"]);
    let a_on_a = token_of(&mut a, "A's wait for a (free)");
    let a_took = Instant::now();
    a.send(&[b"LOCK.WAIT", b"{g}b", b"A", b"5000", b"0"]);
    assert!(eventually(DUE, || info_field(&mut c, "waiters") == 1));
    let (mut b, _) = wait_on(&server, &mut c, "{g}a", "B", LONG, &[], 2);
    let (mut cw, _) = wait_on(&server, &mut c, "{g}b", "C", LONG, &[], 3);
    assert_eq!(queued(&mut c, "{g}b"), ["A", "C"]);

    // A hangs up: it leaves b's queue at once; its hold on a lives until its ttl.
    drop(a);
    assert!(eventually(DUE, || queued(&mut c, "{g}b") == ["C"]));
    assert_eq!(owner_and_token(&mut c, "{g}a"), Some(("A".into(), a_on_a)));
    let b_on_a = token_of(&mut b, "B's wait for a, after A's ttl");
    let waited = a_took.elapsed();
    assert!(
        waited >= Duration::from_millis(4900),
        "B got a {waited:?} after A took it for 5000 ms"
    );
    assert_eq!(owner_and_token(&mut c, "{g}a"), Some(("B".into(), b_on_a)));
    assert_eq!(
        history_reasons(&mut c, "{g}a").first().map(String::as_str),
        Some("expired")
    );

    // h releases b: C, never A, gets it.
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "{g}b", "h")),
        Some(0)
    );
    let c_on_b = token_of(&mut cw, "C after h's release");
    assert!(c_on_b > h);
    assert_eq!(owner_and_token(&mut c, "{g}b"), Some(("C".into(), c_on_b)));

    // B goes on in order: b (after C), then c. D waits for b behind B and is killed in the
    // same MULTI as C's release, which grants B, the head: D was only queued, B's grant stays.
    b.send(&[b"LOCK.WAIT", b"{g}b", b"B", b"60000", b"0"]);
    assert!(eventually(DUE, || queued(&mut c, "{g}b") == ["B"]));
    let (d, d_id) = wait_on(&server, &mut c, "{g}b", "D", LONG, &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{g}b")
        .arg("C")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(d_id);
    let _: Value = p.query(&mut c).unwrap();
    let b_on_b = token_of(&mut b, "B's wait for b");
    assert_eq!(owner_and_token(&mut c, "{g}b"), Some(("B".into(), b_on_b)));
    drop(d);
    b.send(&[b"LOCK.WAIT", b"{g}c", b"B", b"60000", b"0"]);
    token_of(&mut b, "B's wait for c (free)");
    b.send(&[
        b"LOCK.MRENEW",
        b"3",
        b"{g}a",
        b"{g}b",
        b"{g}c",
        b"B",
        b"60000",
    ]);
    assert_eq!(b.read(DUE), Reply::Int(3), "B holds the whole group");
    b.send(&[b"LOCK.MRELEASE", b"3", b"{g}a", b"{g}b", b"{g}c", b"B"]);
    assert_eq!(b.read(DUE), Reply::Int(3));

    // The hang-up in the same MULTI as the release that grants it: the grant is revoked and
    // the key passes to the next waiter.
    let h2 = common::acquire(&mut c, "{g}b", "h", LONG);
    let (_e, e_id) = wait_on(&server, &mut c, "{g}b", "E", LONG, &[], 1);
    let (mut f, _) = wait_on(&server, &mut c, "{g}b", "F", LONG, &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{g}b")
        .arg("h")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(e_id);
    let _: Value = p.query(&mut c).unwrap();
    let f_on_b = token_of(&mut f, "F after E's grant was revoked");
    assert!(f_on_b > h2);
    assert_eq!(owner_and_token(&mut c, "{g}b"), Some(("F".into(), f_on_b)));
    assert_eq!(
        history_reasons(&mut c, "{g}b").first().map(String::as_str),
        Some("revoked")
    );
    assert_eq!(info_field(&mut c, "waiters"), 0);
}

/// Found in attack round 6.
///
/// Disconnects / `LOCK.MACQUIRE` inside a `MULTI` with `CLIENT KILL`: of the connection running
/// the transaction itself, and of a waiter for one of the group's keys, killed before or after
/// the release that frees the key (and grants it to that waiter). A replica follows.
///
/// Must hold: a group taken in a transaction whose connection is killed by it stays taken
/// (it was answered: no revoke for a command's reply) until its ttl, and nobody else takes it;
/// a waiter killed before the release leaves the queue, and the group is taken in the same
/// transaction; a waiter granted by the release and killed after it loses the grant (revoked),
/// the `LOCK.MACQUIRE` between them is refused and changes nothing, and a retry takes the
/// group; the replica ends with the master's holds.
#[test]
fn macquire_in_a_multi_with_client_kill() {
    let server = Server::start();
    let replica = Server::start();
    attach_replica(&server, &replica);
    let mut c = server.conn();

    // MULTI: MACQUIRE, then kill yourself.
    let mut k = Raw::connect(&server);
    let k_id = client_id(&mut k).to_string();
    for args in [
        vec![&b"MULTI"[..]],
        vec![b"LOCK.MACQUIRE", b"2", b"{m}x", b"{m}y", b"K", b"60000"],
        vec![b"CLIENT", b"KILL", b"ID", k_id.as_bytes(), b"SKIPME", b"no"],
        vec![b"EXEC"],
    ] {
        k.send(&args);
    }
    for _ in 0..3 {
        k.read(DUE);
    }
    let exec = k.read(DUE);
    let Reply::Array(results) = exec else {
        panic!("EXEC: {exec:?}")
    };
    let Reply::Array(tokens) = &results[0] else {
        panic!("MACQUIRE in EXEC: {results:?}")
    };
    let tk = match tokens[0] {
        Reply::Int(t) => t,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(
        results[1],
        Reply::Int(1),
        "the transaction killed its own connection"
    );
    let listed = format!("id={k_id} ");
    assert!(eventually(DUE, || {
        let list: String = cmd!("CLIENT", "LIST").query(&mut c).unwrap();
        !list.lines().any(|l| l.starts_with(&listed))
    }));
    assert_eq!(owner_and_token(&mut c, "{m}x"), Some(("K".into(), tk)));
    assert_eq!(owner_and_token(&mut c, "{m}y"), Some(("K".into(), tk)));
    let other: Option<Vec<i64>> = cmd!("LOCK.MACQUIRE", 2, "{m}x", "{m}y", "O", 1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(other, None);

    // MULTI: kill a waiter for x, release x, take the group.
    let _: i64 = cmd!("LOCK.MRELEASE", 2, "{m}x", "{m}y", "K")
        .query(&mut c)
        .unwrap();
    let h = common::acquire(&mut c, "{m}x", "h", LONG);
    let (_w, w_id) = wait_on(&server, &mut c, "{m}x", "W", LONG, &[], 1);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(w_id)
        .cmd("LOCK.RELEASE")
        .arg("{m}x")
        .arg("h")
        .cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg("{m}x")
        .arg("{m}y")
        .arg("K2")
        .arg(60_000);
    let (_, _, taken): (Value, i64, Option<Vec<i64>>) = p.query(&mut c).unwrap();
    let taken = taken.expect("x is free once the killed waiter left");
    assert!(taken[0] > h);
    assert_eq!(
        owner_and_token(&mut c, "{m}x"),
        Some(("K2".into(), taken[0]))
    );
    assert_eq!(info_field(&mut c, "waiters"), 0);

    // MULTI: release x (granting the waiter), MACQUIRE (refused), kill the waiter.
    let _: i64 = cmd!("LOCK.MRELEASE", 2, "{m}x", "{m}y", "K2")
        .query(&mut c)
        .unwrap();
    common::acquire(&mut c, "{m}x", "h", LONG);
    let (_v, v_id) = wait_on(&server, &mut c, "{m}x", "V", LONG, &[], 1);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{m}x")
        .arg("h")
        .cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg("{m}x")
        .arg("{m}y")
        .arg("K3")
        .arg(60_000)
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(v_id);
    let (_, refused, _): (i64, Option<Vec<i64>>, Value) = p.query(&mut c).unwrap();
    assert_eq!(refused, None, "x was V's in that step");
    assert!(info(&mut c, "{m}y").is_none(), "a refused MACQUIRE took y");
    assert!(
        eventually(DUE, || info(&mut c, "{m}x").is_none()),
        "V's grant was not revoked: {:?}",
        owner_and_token(&mut c, "{m}x")
    );
    assert_eq!(
        history_reasons(&mut c, "{m}x").first().map(String::as_str),
        Some("revoked")
    );
    let retry: Vec<i64> = cmd!("LOCK.MACQUIRE", 2, "{m}x", "{m}y", "K3", 60_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        owner_and_token(&mut c, "{m}x"),
        Some(("K3".into(), retry[0]))
    );

    // The replica followed every step.
    let _: i64 = cmd!("WAIT", 1, 5000).query(&mut c).unwrap();
    let mut rep = replica.conn();
    for key in ["{m}x", "{m}y"] {
        assert_eq!(
            owner_and_token(&mut rep, key),
            owner_and_token(&mut c, key),
            "{key} on the replica"
        );
    }
    assert!(eventually(DUE, || info_field(&mut c, "timers") == 0));
}
