//! Shared holds in server states: a write pause defers the hand-off; OOM refuses new holders.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::acq;
use common::ask::owner_token_count as holders;
use common::int_or_nil as int;
use common::raw::queue_wait;
use common::raw::Reply;
use common::{info_field, Server};
use redis::Value;

const DUE: Duration = Duration::from_secs(5);

/// Found in the attack on shared holds (one test per attack class).
///
/// Leases lapse while writes are paused, with a writer queued: the hand-off waits for the
/// pause and comes promptly after it.
#[test]
fn a_write_pause_defers_the_hand_off() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"r", 300, &["SHARED"]).unwrap();
    let (mut w, _) = queue_wait(&server, &mut c, "k", "w", &[], 1);
    let _: () = cmd!("CLIENT", "PAUSE", 1000, "WRITE")
        .query(&mut c)
        .unwrap();
    assert!(
        w.read_within(Duration::from_millis(700)).is_none(),
        "granted during the pause"
    );
    let t = match w.read(DUE) {
        Reply::Int(t) => t,
        o => panic!("{o:?}"),
    };
    assert_eq!(holders(&mut c, "k"), vec![(b"w".to_vec(), t, 1)]);
}

/// Found in the attack on shared holds (one test per attack class).
///
/// maxmemory reached: new holders are refused with OOM, releases work, counts stay true.
#[test]
fn oom_refuses_new_holders_and_keeps_counts() {
    let server = Server::start();
    let mut c = server.conn();
    common::acquire_many(&mut c, "k", "o#", (1, 5_000), 600_000, true);
    let used: String = cmd!("MEMORY", "STATS")
        .query::<Value>(&mut c)
        .map(|_| String::new())
        .unwrap();
    let _ = used;
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 1).query(&mut c).unwrap();
    let r = cmd!("LOCK.ACQUIRE", "k", "new", 1000, "SHARED").query::<Value>(&mut c);
    assert!(r.is_err(), "OOM: {r:?}");
    assert_eq!(int(&mut c, cmd!("LOCK.RELEASE", "k", "o1")), Some(0));
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "holds"), 4999);
    assert_eq!(holders(&mut c, "k").len(), 4999);
}
