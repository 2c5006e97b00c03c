//! `CLIENT PAUSE` inside a transaction refuses groups and downgrades.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::mode_of;
use common::ask::named_token_count_permits as holders;
use common::raw::{Raw, Reply};
use common::{acquire, Server};
use relock_testkit::wait_out_ttl;

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// Found in attack round 7.
///
/// Server states / the new write commands after `CLIENT PAUSE WRITE` in the same `EXEC`, one of
/// the group's keys past its TTL (Redis keeps it while writes are paused, lookups call it
/// missing). docs: "one that runs anyway (queued in the same `EXEC` after `CLIENT PAUSE`) is
/// refused with `TRYAGAIN`".
///
/// Must hold: `LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.DOWNGRADE` and `LOCK.MRENEW` answer
/// `TRYAGAIN`; afterwards the live key is as it was and no new key exists.
#[test]
fn pause_in_a_transaction_refuses_groups_and_downgrade() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "{g}a", "o", 100);
    let token = acquire(&mut c, "{g}b", "o", LONG);
    wait_out_ttl(Duration::from_millis(200));
    let mut r = Raw::connect(&server);
    r.send(&[b"MULTI"]);
    r.read(DUE);
    for args in [
        &[&b"CLIENT"[..], b"PAUSE", b"300", b"WRITE"][..],
        &[b"LOCK.MACQUIRE", b"2", b"{g}a", b"{g}c", b"o", b"1000"],
        &[b"LOCK.MRELEASE", b"2", b"{g}a", b"{g}b", b"o"],
        &[b"LOCK.DOWNGRADE", b"{g}b", b"o"],
        &[b"LOCK.MRENEW", b"2", b"{g}a", b"{g}b", b"o", b"5000"],
    ] {
        r.send(args);
        r.read(DUE);
    }
    r.send(&[b"EXEC"]);
    let Reply::Array(out) = r.read(DUE) else {
        panic!("EXEC")
    };
    for (i, reply) in out.iter().enumerate().skip(1) {
        match reply {
            Reply::Error(e) => assert!(e.starts_with("TRYAGAIN"), "command {i}: {e}"),
            other => panic!("command {i} ran while writes were paused: {other:?}"),
        }
    }
    // The pause (300 ms from the EXEC) runs out, and a little more: what is checked below is
    // the state once writes run again.
    wait_out_ttl(Duration::from_millis(400));
    let b = holders(&mut c, "{g}b");
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].0.as_str(), b[0].1), ("o", token));
    assert_eq!(
        mode_of(&mut c, "{g}b").map(|m| m.0),
        Some("exclusive".into())
    );
    let c_exists: i64 = cmd!("EXISTS", "{g}c").query(&mut c).unwrap();
    assert_eq!(c_exists, 0);
}
