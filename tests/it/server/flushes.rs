//! `FLUSHALL` and `SWAPDB` under queued permit waiters.
//!
//! Found in attack round 6. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::lock_fields as info;
use common::ask::owner_token_permits as holders;
use common::ask::queued;
use common::raw::token_of;
use common::raw::wait_on;
use common::raw::Reply;
use common::reply::{bytes, int};
use common::{eventually, info_field, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// A `SELECT`ed connection.
fn conn_in(server: &Server, db: i64) -> Connection {
    let mut c = server.conn();
    let _: () = cmd!("SELECT", db).query(&mut c).unwrap();
    c
}

/// Found in attack round 6.
///
/// Permits / `FLUSHALL` and `SWAPDB` while requests for several permits (`SHARED LIMIT 10
/// PERMITS p`) and an exclusive request are queued. Attacks the serving of a queue whose key
/// changed wholesale behind the engine's back: the queue must be served by permits, in order,
/// as if the holds had ended one by one, and a value of another limit arriving by `SWAPDB` must
/// answer every waiter it can never admit at once, not only the head (issue 18, class 4).
///
/// Must hold: after `FLUSHALL` the waiters are granted in queue order while permits last (4 + 2
/// of 10) and the one needing 5 of the 4 left holds back everyone behind it, exclusive or not;
/// after `SWAPDB` brings a `LIMIT 5` value, every `LIMIT 10` waiter gets `ERR lock has another
/// limit (5)` at once, the exclusive one keeps waiting, and the old value's holders live on in
/// the other db; `LOCK.INFO`, `LOCK.WAITERS` and `INFO relock` agree at each step, and nothing
/// stays armed at the end.
#[test]
fn flushall_and_swapdb_under_queued_permit_waiters() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |owner: &str, permits: &str| {
        cmd!(
            "LOCK.ACQUIRE",
            "pool",
            owner,
            LONG,
            "SHARED",
            "LIMIT",
            10,
            "PERMITS",
            permits
        )
    };
    common::int_or_nil(&mut c, sem("a", "7")).expect("a");
    common::int_or_nil(&mut c, sem("b", "3")).expect("b");
    let permits = |p: &'static str| ["SHARED", "LIMIT", "10", "PERMITS", p];
    let (mut w1, _) = wait_on(&server, &mut c, "pool", "w1", LONG, &permits("4"), 1);
    let (mut w2, _) = wait_on(&server, &mut c, "pool", "w2", LONG, &permits("2"), 2);
    let (mut w3, _) = wait_on(&server, &mut c, "pool", "w3", LONG, &permits("5"), 3);
    let (mut x, _) = wait_on(&server, &mut c, "pool", "x", LONG, &[], 4);
    let (mut w4, _) = wait_on(&server, &mut c, "pool", "w4", LONG, &permits("1"), 5);

    // FLUSHALL: served by permits, in order, until the head needs more than are free.
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let t1 = token_of(&mut w1, "w1 after FLUSHALL");
    let t2 = token_of(&mut w2, "w2 after FLUSHALL");
    assert!(t1 < t2, "granted in queue order");
    let granted: Vec<(Vec<u8>, i64, i64)> = vec![(b"w1".to_vec(), t1, 4), (b"w2".to_vec(), t2, 2)];
    assert_eq!(holders(&mut c, "pool"), granted);
    assert_eq!(queued(&mut c, "pool"), ["w3", "x", "w4"]);
    let i = info(&mut c, "pool").expect("pool");
    assert_eq!(
        (
            int(&i["waiters"]),
            int(&i["holders"]),
            int(&i["limit"]),
            int(&i["permits_free"])
        ),
        (3, 2, 10, 4)
    );
    assert_eq!(info_field(&mut c, "waiters"), 3);
    // A request for 1 permit may not pass the queue, though 4 are free.
    assert_eq!(common::int_or_nil(&mut c, sem("late", "1")), None);
    // w1's release lets w3 in (8 free); x and w4 still wait (no barging past x).
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "pool", "w1")),
        Some(0)
    );
    let t3 = token_of(&mut w3, "w3 after w1's release");
    assert!(t3 > t2);
    assert_eq!(queued(&mut c, "pool"), ["x", "w4"]);
    for (who, r) in [("x", &mut x), ("w4", &mut w4)] {
        assert_eq!(
            r.read_within(Duration::from_millis(200)),
            None,
            "{who} was answered"
        );
    }
    let (mut w5, _) = wait_on(&server, &mut c, "pool", "w5", LONG, &permits("2"), 3);

    // SWAPDB brings a LIMIT 5 value to db 0: every LIMIT 10 waiter is told at once, the
    // exclusive one keeps waiting; the old value lives on in db 1.
    let mut db1 = conn_in(&server, 1);
    let y = common::int_or_nil(
        &mut db1,
        cmd!(
            "LOCK.ACQUIRE",
            "pool",
            "y",
            LONG,
            "SHARED",
            "LIMIT",
            5,
            "PERMITS",
            5
        ),
    )
    .expect("y in db 1");
    let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
    for (who, r) in [("w4", &mut w4), ("w5", &mut w5)] {
        assert_eq!(
            r.read(DUE),
            Reply::Error("ERR lock has another limit (5)".into()),
            "{who} after SWAPDB"
        );
    }
    assert_eq!(queued(&mut c, "pool"), ["x"]);
    assert_eq!(holders(&mut c, "pool"), vec![(b"y".to_vec(), y, 5)]);
    assert_eq!(
        holders(&mut db1, "pool"),
        vec![(b"w2".to_vec(), t2, 2), (b"w3".to_vec(), t3, 5)]
    );
    assert_eq!(queued(&mut db1, "pool"), Vec::<String>::new());
    assert_eq!(info_field(&mut c, "waiters"), 1);
    assert_eq!(
        x.read_within(Duration::from_millis(200)),
        None,
        "x was answered"
    );
    let log: Value = cmd!("LOCK.LOG", 5).query(&mut c).unwrap();
    let reasons = format!("{log:?}");
    assert!(
        reasons.contains("swapped") && reasons.contains("flushed"),
        "{reasons}"
    );

    // SWAPDB back: the LIMIT 10 value with 7 permits taken holds x back; FLUSHALL lets it in.
    let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
    assert_eq!(
        x.read_within(Duration::from_millis(200)),
        None,
        "x was answered"
    );
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let tx = token_of(&mut x, "x after the second FLUSHALL");
    assert!(tx > t3);
    let i = info(&mut c, "pool").expect("x's hold");
    assert_eq!(
        (bytes(&i["owner"]), int(&i["token"]), int(&i["waiters"])),
        (b"x".to_vec(), tx, 0)
    );
    assert_eq!(info_field(&mut c, "waiters"), 0);
    assert!(eventually(DUE, || info_field(&mut c, "timers") == 0));
}
