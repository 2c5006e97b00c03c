//! Revokes in mixed queues: a revoked re-acquire does not end the hold of the owner's other
//! connection.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;

use std::time::Duration;

use common::acq;
use common::ask::owner_token_count as holders;
use common::raw::queue_wait;
use common::raw::Reply;
use common::wait_out_ttl;
use common::Server;
use redis::Value;

const LONG: u64 = 100_000;

const DUE: Duration = Duration::from_secs(5);

/// Found in the attack on shared holds (one test per attack class).
///
/// Two connections of one owner wait; the batch grants the first and answers the second as a
/// re-acquire with the same token. The second hangs up before its answer: "a client that
/// disconnects while waiting ... is never granted anything", but the first was granted and told
/// so. Revoking the second must not take the first's hold away.
#[test]
fn a_revoked_reacquire_does_not_end_the_other_connections_hold() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"w", LONG, &[]).unwrap();
    let (mut first, _) = queue_wait(&server, &mut c, "k", "o", &["SHARED"], 1);
    let (_second, second_id) = queue_wait(&server, &mut c, "k", "o", &["SHARED"], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("w")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(second_id);
    let _: Value = p.query(&mut c).unwrap();
    let t1 = match first.read(DUE) {
        Reply::Int(t) => t,
        other => panic!("first: {other:?}"),
    };
    // The window in which the revoke of the second connection's answer (a job on a 0 ms
    // timer) would end the first's hold.
    wait_out_ttl(Duration::from_millis(200));
    let now = holders(&mut c, "k");
    assert_eq!(
        now,
        vec![(b"o".to_vec(), t1, 1)],
        "the first connection was granted token {t1} and still believes it holds the key"
    );
}

/// Found in the attack on shared holds (one test per attack class).
///
/// Same with an exclusive head: the granted hold of the first connection is revoked by the
/// disconnect of the second connection of the same owner.
#[test]
fn a_revoked_reacquire_exclusive_baseline() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"w", LONG, &[]).unwrap();
    let (mut first, _) = queue_wait(&server, &mut c, "k", "o", &[], 1);
    let (_second, second_id) = queue_wait(&server, &mut c, "k", "o", &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("w")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(second_id);
    let _: Value = p.query(&mut c).unwrap();
    let t1 = match first.read(DUE) {
        Reply::Int(t) => t,
        other => panic!("first: {other:?}"),
    };
    // The window in which the revoke would end the first's hold, as above.
    wait_out_ttl(Duration::from_millis(200));
    assert_eq!(holders(&mut c, "k"), vec![(b"o".to_vec(), t1, 1)]);
}
