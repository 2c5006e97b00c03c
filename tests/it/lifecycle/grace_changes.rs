//! The restart grace set at runtime under a queued waiter, and a downgrade in the grace.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::raw::token_of;
use common::raw::wait_on;
use common::raw::Reply;
use common::reply::config_set;
use common::wait_replica;
use common::{acquire, attach_replica, info_field, Server};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// Found in attack round 7.
///
/// Restart grace / ttl bounds: "While a grace is configured, a ttl_ms above it is refused
/// (`ERR ttl_ms exceeds relock.restart-grace-ms`), so a grace always outlasts every hold the
/// server may have forgotten." A waiter queued with a ttl of 600 s before the operator sets
/// `relock.restart-grace-ms` to 1000 at runtime (`CONFIG SET`, the way it is rolled out
/// without a restart) is granted after the change.
///
/// Must hold: no hold granted while the grace is configured ends later than the grace (the
/// waiter is refused at its turn, or its ttl is cut to the grace); the owner itself cannot
/// renew to 600 s any more.
///
/// Measured (every server): the waiter is granted with its 600 s ttl (`PTTL` ~600000) while
/// `LOCK.RENEW` of the same ttl answers `ERR ttl_ms exceeds relock.restart-grace-ms`. If the
/// server then restarts without its locks, the 1 s grace ends long before the hold does and a
/// second owner is granted the key: the two owners the grace exists to prevent.
#[test]
fn grace_set_at_runtime_under_a_queued_waiter_bounds_its_grant() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "g", "first", LONG);
    let mut waiter = wait_on(&server, &mut c, "g", "second", LONG, &[], 1).0;
    config_set(&mut c, "relock.restart-grace-ms", 1000);
    let refused: redis::RedisResult<Option<i64>> =
        cmd!("LOCK.ACQUIRE", "other", "x", LONG).query(&mut c);
    assert!(
        refused.is_err(),
        "a new request above the grace: {refused:?}"
    );
    let left: i64 = cmd!("LOCK.RELEASE", "g", "first").query(&mut c).unwrap();
    assert_eq!(left, 0);
    let granted = waiter.read(DUE);
    if let Reply::Int(_) = granted {
        let pttl: i64 = cmd!("PTTL", "g").query(&mut c).unwrap();
        assert!(
            pttl <= 1000,
            "granted while relock.restart-grace-ms is 1000: the hold lasts {pttl} ms"
        );
    }
}

/// Found in attack round 7.
///
/// Restart grace / downgrade: a replica promoted (`REPLICAOF NO ONE`) with a grace configured
/// holds a lock it replicated; a reader queues for it during the grace; the owner downgrades.
/// docs: in the grace "no hold gets a new token ... hand-offs ... wait for the end of the grace";
/// the downgrade grants "the shared waiters at the head of the queue ... with it".
///
/// Must hold: the downgrade answers the token at once and grants the reader nothing before the
/// grace ends; the reader is granted (a new token) once it does.
#[test]
fn grace_a_downgrade_grants_no_reader_before_the_grace_ends() {
    let master = Server::start();
    let replica = Server::with_args(&["--relock.restart-grace-ms", "3000"]);
    attach_replica(&master, &replica);
    let mut m = master.conn();
    // A 10 s lease: the owner's downgrade below must come while it holds the lease, after
    // the master's end and the promotion (a 3 s one could run out first on a loaded machine).
    let token = acquire(&mut m, "k", "owner", 10_000);
    wait_replica(&mut m);
    drop(master);
    let mut r = replica.conn();
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    assert!(info_field(&mut r, "grace_left_ms") > 0);
    let mut reader = wait_on(&replica, &mut r, "k", "reader", 3000, &["SHARED"], 1).0;
    let down: Option<i64> = cmd!("LOCK.DOWNGRADE", "k", "owner").query(&mut r).unwrap();
    assert_eq!(down, Some(token));
    let early = reader.read_within(Duration::from_millis(200));
    let left = info_field(&mut r, "grace_left_ms");
    assert!(
        early.is_none() || left == 0,
        "granted {early:?} with {left} ms of grace left"
    );
    let started = Instant::now();
    let t = match early {
        Some(reply) => reply.token() as i64,
        None => token_of(&mut reader, "the reader"),
    };
    assert!(t > token);
    assert!(started.elapsed() < Duration::from_secs(8));
}
