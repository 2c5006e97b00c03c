//! A big shared key stays fast and counted.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::acq;
use common::ask::owner_token_count as holders;
use common::{eventually, info_field, Server};
use redis::Value;
use relock_testkit::wait_out_ttl;

// A bound for events (the removals in bounded slices), not a speed: under make test's four
// lanes the debug build pruned 50k lapsed leases in more than 5 s (a fresh run, 2026-12-03).
const DUE: Duration = Duration::from_secs(60);

/// Found in the attack on shared holds (one test per attack class).
///
/// 100k holders: single-holder commands stay fast; COPY, DEBUG RELOAD, UNLINK, FLUSHALL ASYNC
/// keep `relock_holds` true; many lapsed leases are pruned at once.
#[test]
fn a_big_key_stays_fast_and_counted() {
    let server = Server::start();
    let mut c = server.conn();
    common::acquire_many(&mut c, "big", "o#", (1, 100_000), 600_000, true);
    assert_eq!(info_field(&mut c, "holds"), 100_000);
    for cmd in [
        cmd!("LOCK.RELEASE", "big", "o5"),
        cmd!("LOCK.RENEW", "big", "o6", 1),
        cmd!("LOCK.FORCERELEASE", "big", "o7"),
        cmd!("LOCK.HOLDERS", "big", "OWNER", "o8"),
        cmd!("LOCK.INFO", "big"),
    ] {
        let t = Instant::now();
        let _: Value = cmd.query(&mut c).unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{} took {:?}",
            common::show(&cmd),
            t.elapsed()
        );
    }
    let _: i64 = cmd!("COPY", "big", "big2").query(&mut c).unwrap();
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    // o6's lease (1 ms) lapsed long ago: gone for every command at once.
    assert_eq!(holders(&mut c, "big2").len(), 99_997);
    let _: i64 = cmd!("LOCK.ACQUIRE", "big", "x", 600_000, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "big2", "x", 600_000, "SHARED")
        .query(&mut c)
        .unwrap();
    // The module removes o6's lapsed lease from both keys by itself (on the copy, from the
    // lapse timer the reload armed again), and only then stops counting it.
    assert!(
        eventually(DUE, || info_field(&mut c, "holds") == 2 * 99_998),
        "holds: {}, expected {}",
        info_field(&mut c, "holds"),
        2 * 99_998
    );
    let _: i64 = cmd!("UNLINK", "big").query(&mut c).unwrap();
    assert!(eventually(DUE, || info_field(&mut c, "holds") == 99_998));
    assert_eq!(holders(&mut c, "big2").len(), 99_998);
    let _: () = cmd!("FLUSHALL", "ASYNC").query(&mut c).unwrap();
    assert!(eventually(DUE, || info_field(&mut c, "holds") == 0));
    // 50k leases lapse together behind one long one; the module removes them by itself, in
    // bounded slices (tests/storms.rs checks the server stays responsive).
    acq(&mut c, "lapse", b"long", 600_000, &["SHARED"]).unwrap();
    common::acquire_many(&mut c, "lapse", "o#", (1, 50_000), 3_000, true);
    wait_out_ttl(Duration::from_millis(3_200));
    assert_eq!(holders(&mut c, "lapse").len(), 1);
    let t = Instant::now();
    acq(&mut c, "lapse", b"y", 60_000, &["SHARED"]).unwrap();
    assert!(
        eventually(DUE, || info_field(&mut c, "holds") == 2),
        "holds {}, lapse has {} holders",
        info_field(&mut c, "holds"),
        holders(&mut c, "lapse").len()
    );
    eprintln!("pruning 50k lapsed leases took {:?}", t.elapsed());
}
