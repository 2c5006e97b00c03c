//! A downgrade in front of many readers and one writer.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::named_token_count_permits as holders;
use common::raw::token_of;
use common::raw::Raw;
use common::{acquire, eventually, info_field, Server};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// Found in attack round 7.
///
/// Downgrade / queues: 300 readers queued with a writer in their middle, behind an exclusive
/// holder who downgrades. docs: the downgrade grants "the shared waiters at the head of the
/// queue ... with it"; "a pass hands the lock to at most 256 waiters, and the next event-loop
/// turn goes on in order"; a queued writer holds back later readers.
///
/// Must hold: the readers in front of the writer (150) are granted, none behind it; the writer
/// and the rest stay queued; no turn the module starts is long.
#[test]
fn downgrade_in_front_of_many_readers_stops_at_the_writer() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "d", "w", LONG);
    let mut queue = Vec::new();
    for i in 0..300 {
        if i == 150 {
            let mut r = Raw::connect(&server);
            r.send(&[b"LOCK.WAIT", b"d", b"writer", b"600000", b"0"]);
            queue.push(("writer".to_string(), r));
        }
        let owner = format!("r{i}");
        let mut r = Raw::connect(&server);
        r.send(&[
            b"LOCK.WAIT",
            b"d",
            owner.as_bytes(),
            b"600000",
            b"0",
            b"SHARED",
        ]);
        queue.push((owner, r));
    }
    assert!(eventually(DUE, || info_field(&mut c, "waiters") == 301));
    let token: Option<i64> = cmd!("LOCK.DOWNGRADE", "d", "w").query(&mut c).unwrap();
    assert!(token.is_some());
    let mut granted = 0;
    for (i, (owner, r)) in queue.iter_mut().enumerate() {
        if i < 150 {
            token_of(r, owner);
            granted += 1;
        }
    }
    assert_eq!(granted, 150);
    for (owner, r) in queue.iter_mut().skip(150).take(5) {
        r.assert_silent(owner);
    }
    assert_eq!(info_field(&mut c, "waiters"), 151);
    assert_eq!(holders(&mut c, "d").len(), 151);
    assert!(info_field(&mut c, "longest_turn_us") < 40_000);
}
