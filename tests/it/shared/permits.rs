//! A request for more permits than are free, while holders time out and others arrive behind it.
//!
//! Found in attack round 6. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::{Duration, Instant};

use common::ask::owner_token_permits as holders;
use common::ask::queued;
use common::raw::token_of;
use common::raw::wait_on;
use common::raw::Raw;
use common::{eventually, info_field, Server};
use redis::Connection;

const LONG: i64 = 600_000;

/// Found in attack round 6.
///
/// Permits / a request for 8 permits of 10 waits while the holders of the other permits (2
/// each) time out one by one, and requests for 1 or 2 permits arrive behind it (queued, and
/// tried without waiting) as permits come free. Attacks starvation of a large request and
/// barging past it, with every permit freed by a lease's end (the engine's timers), not by a
/// command.
///
/// Must hold: nothing behind the large request is granted before it, not even when permits
/// are free that it cannot use yet (an acquire finds the key taken); it is granted within a few
/// ms of the lease end that frees its 8th permit (the bound is generous); the permits of the
/// live holders never sum past 10; once it releases, the waiters behind it are granted in
/// order.
#[test]
fn a_large_permit_request_is_not_starved_nor_passed_while_holders_time_out() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |owner: &str, ttl: i64, permits: i64| {
        cmd!(
            "LOCK.ACQUIRE",
            "sem",
            owner,
            ttl,
            "SHARED",
            "LIMIT",
            10,
            "PERMITS",
            permits
        )
    };
    let sum = |c: &mut Connection| holders(c, "sem").iter().map(|h| h.2).sum::<i64>();
    let mut ends = Vec::new();
    for (i, ttl) in [1_000, 2_000, 3_000, 4_000, LONG].into_iter().enumerate() {
        let sent = Instant::now();
        common::int_or_nil(&mut c, sem(&format!("h{i}"), ttl, 2)).expect("a holder");
        ends.push(sent + Duration::from_millis(ttl as u64));
    }
    let words = |p: &'static str| ["SHARED", "LIMIT", "10", "PERMITS", p];
    let (mut big, _) = wait_on(&server, &mut c, "sem", "big", LONG, &words("8"), 1);
    let (s1, _) = wait_on(&server, &mut c, "sem", "s1", LONG, &words("1"), 2);
    let mut behind = vec![("s1".to_string(), s1)];
    // Whether a raw connection got a reply (looked at for a moment).
    let answered = |r: &mut Raw| r.read_within(Duration::from_millis(50));
    // As each of the first three holders times out, another request arrives behind, and a
    // newcomer tries without waiting: neither passes the large request.
    for gone in 1..=3 {
        let left = 5 - gone;
        assert!(
            eventually(Duration::from_secs(30), || holders(&mut c, "sem").len()
                == left),
            "holder {gone} did not time out"
        );
        assert!(sum(&mut c) <= 10);
        assert_eq!(
            common::int_or_nil(&mut c, sem(&format!("n{gone}"), LONG, 1)),
            None,
            "a newcomer passed the queue with {} permits free",
            2 * gone
        );
        let owner = format!("s{}", gone + 1);
        let queue = 2 + gone as i64;
        let (r, _) = wait_on(&server, &mut c, "sem", &owner, LONG, &words("2"), queue);
        behind.push((owner, r));
        assert_eq!(answered(&mut big), None, "big, with {} free", 2 * gone);
    }
    // The fourth holder's lease end frees the eighth permit.
    let t_big = token_of(&mut big, "the 8-permit request");
    let late = Instant::now().saturating_duration_since(ends[3]);
    assert!(
        late < Duration::from_millis(250),
        "granted {late:?} after the lease end"
    );
    for (owner, r) in &mut behind {
        assert_eq!(
            answered(r),
            None,
            "{owner} was answered behind the large request"
        );
    }
    assert_eq!(sum(&mut c), 10, "big's 8 and the last holder's 2");
    assert_eq!(queued(&mut c, "sem"), ["s1", "s2", "s3", "s4"]);
    // big releases: s1 (1), s2 (2), s3 (2), s4 (2) fit in 8, in order.
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "sem", "big")),
        Some(0)
    );
    let mut last = t_big;
    for (owner, r) in &mut behind {
        let t = token_of(r, owner);
        assert!(t > last, "{owner} out of order");
        last = t;
    }
    assert_eq!(sum(&mut c), 9);
    assert_eq!(info_field(&mut c, "waiters"), 0);
}
