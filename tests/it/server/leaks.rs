//! The module keeps no memory it no longer needs, and says what it must in the server's log.
//!
//! - Every answer to a blocked client (a grant, a time-out, an error) is a small allocation Redis
//!   hands back to the module to free: tens of thousands of hand-offs and time-outs must leave
//!   `used_memory` where it was.
//! - The engine's own bookkeeping (lines, tickets, timers) is gone once nobody waits.
//! - The load-time warning about eviction appears exactly when locks may be evicted.
use relock_testkit as common;

use std::time::Duration;

use common::raw::{Raw, Reply};
use common::reply::used_memory;
use common::{eventually, info_field, Server};

const DUE: Duration = Duration::from_secs(10);

/// `rounds` hand-offs between two connections on one key, and as many waits that time out.
fn churn(server: &Server, rounds: usize) {
    let mut a = Raw::connect(server);
    let mut b = Raw::connect(server);
    a.send(&[b"LOCK.ACQUIRE", b"k", b"a", b"60000"]);
    assert!(matches!(a.read(DUE), Reply::Int(_)));
    let (mut holder, mut waiter) = ((&mut a, &b"a"[..]), (&mut b, &b"b"[..]));
    for _ in 0..rounds {
        // The waiter queues, the holder releases: one hand-off, one answer to a blocked client.
        waiter
            .0
            .send(&[b"LOCK.WAIT", b"k", waiter.1, b"60000", b"0"]);
        holder.0.send(&[b"LOCK.RELEASE", b"k", holder.1]);
        assert_eq!(holder.0.read(DUE), Reply::Int(0));
        assert!(matches!(waiter.0.read(DUE), Reply::Int(_)));
        // A wait that times out: another answer to free.
        holder
            .0
            .send(&[b"LOCK.WAIT", b"k", holder.1, b"60000", b"1"]);
        assert_eq!(holder.0.read(DUE), Reply::Nil);
        std::mem::swap(&mut holder, &mut waiter);
    }
    holder.0.send(&[b"LOCK.RELEASE", b"k", holder.1]);
    assert_eq!(holder.0.read(DUE), Reply::Int(0));
}

#[test]
fn hand_offs_and_time_outs_leave_no_memory_behind() {
    let server = Server::start();
    let mut c = server.conn();
    // Warm up: allocator pools, the engine's maps and the clients' buffers reach their size.
    churn(&server, 2_000);
    let before = used_memory(&mut c);
    churn(&server, 10_000);
    assert!(eventually(DUE, || info_field(&mut c, "waiters") == 0));
    assert_eq!(info_field(&mut c, "timers"), 0, "no timer left armed");
    assert_eq!(info_field(&mut c, "locks"), 0);
    let after = used_memory(&mut c);
    // 20,000 answers of at least 24 bytes each would add about 600 kB if they were kept.
    assert!(
        after - before < 256 * 1024,
        "used_memory grew by {} bytes over 10,000 hand-offs and 10,000 time-outs",
        after - before
    );
}

#[test]
fn locks_that_may_be_evicted_are_warned_of_in_the_log() {
    let evicting = Server::with_args(&["--maxmemory-policy", "allkeys-lru"]);
    assert!(
        eventually(DUE, || evicting
            .log()
            .contains("maxmemory-policy is allkeys-lru")),
        "no warning in the log:\n{}",
        evicting.log()
    );
    let safe = Server::start();
    let mut c = safe.conn();
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    assert!(
        !safe.log().contains("maxmemory-policy is"),
        "a warning under noeviction:\n{}",
        safe.log()
    );
}
