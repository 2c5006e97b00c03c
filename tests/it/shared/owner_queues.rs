//! One owner queued for permits on several connections.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::named_token_count_permits as holders;
use common::raw::token_of;
use common::raw::wait_on;
use common::raw::Reply;
use common::{acquire, info_field, Server};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// Found in attack round 7.
///
/// Permits / connection churn: one owner queued on three connections with different requests
/// (1 permit, 2 permits, then 1 permit again) behind a full semaphore of 3, and one exclusive
/// and one shared request of another owner on an exclusive key. docs: "another p is `ERR lock is
/// held with other permits` (also for a waiter whose owner holds with another p when its turn
/// comes)"; a re-acquire of one's own hold is idempotent.
///
/// Must hold: at the release the first is granted, the second refused with the permits error,
/// the third gets the first's token (its own hold); the next owner is granted with what is left;
/// the permits never exceed the limit; on the exclusive key the owner's shared request is
/// refused with the mode error when its exclusive request was granted first.
#[test]
fn permits_one_owner_queued_on_several_connections() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = ["SHARED", "LIMIT", "3"];
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "x", LONG, &sem, "PERMITS", 3)
        .query(&mut c)
        .unwrap();
    let mut a1 = wait_on(
        &server,
        &mut c,
        "s",
        "a",
        LONG,
        &["SHARED", "LIMIT", "3", "PERMITS", "1"],
        1,
    )
    .0;
    let mut a2 = wait_on(
        &server,
        &mut c,
        "s",
        "a",
        LONG,
        &["SHARED", "LIMIT", "3", "PERMITS", "2"],
        2,
    )
    .0;
    let mut a3 = wait_on(
        &server,
        &mut c,
        "s",
        "a",
        LONG,
        &["SHARED", "LIMIT", "3"],
        3,
    )
    .0;
    let mut b = wait_on(
        &server,
        &mut c,
        "s",
        "b",
        LONG,
        &["SHARED", "LIMIT", "3", "PERMITS", "2"],
        4,
    )
    .0;
    let left: i64 = cmd!("LOCK.RELEASE", "s", "x").query(&mut c).unwrap();
    assert_eq!(left, 0);
    let t1 = token_of(&mut a1, "a with 1 permit");
    assert_eq!(
        a2.read(DUE),
        Reply::Error("ERR lock is held with other permits".into())
    );
    assert_eq!(token_of(&mut a3, "a again with 1 permit"), t1);
    let tb = token_of(&mut b, "b with 2 permits");
    assert!(tb > t1);
    let permits: i64 = holders(&mut c, "s").iter().map(|h| h.3).sum();
    assert_eq!(permits, 3);

    acquire(&mut c, "e", "x", LONG);
    let mut ex = wait_on(&server, &mut c, "e", "a", LONG, &[], 1).0;
    let mut sh = wait_on(&server, &mut c, "e", "a", LONG, &["SHARED"], 2).0;
    let left: i64 = cmd!("LOCK.RELEASE", "e", "x").query(&mut c).unwrap();
    assert_eq!(left, 0);
    token_of(&mut ex, "a exclusive");
    match sh.read(DUE) {
        Reply::Error(e) => assert!(e.starts_with("ERR lock is held in another mode"), "{e}"),
        other => panic!("a's shared request after its exclusive grant: {other:?}"),
    }
    assert_eq!(info_field(&mut c, "waiters"), 0);
}
