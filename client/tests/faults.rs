//! relock-client under faults and misuse, against real servers: loss signalled in time,
//! permanent errors failing at once, durations out of range, one server named twice, and the
//! guard's renewal schedule.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::Server;
use relock_client::{Error, Options, Relock};
use tokio::time::Instant;

const KEY: &str = "jobs:faults";

fn urls(servers: &[&Server]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// Defaults with a node timeout that a busy machine cannot mistake for a failure, for the tests
/// whose subject is not timing.
fn patient() -> Options {
    Options {
        node_timeout: Duration::from_secs(1),
        ..Options::default()
    }
}

fn client_with(servers: &[&Server], options: Options) -> Relock {
    Relock::with_options(&urls(servers), options).expect("client")
}

/// A wait longer than the server accepts (10^12 ms) or than an `Instant` can hold is clamped,
/// not rejected by every master forever or a panic (problem 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_waits_are_clamped() {
    let server = Server::start();
    let relock = client_with(&[&server], patient());
    let ttl = Duration::from_secs(10);
    for wait in [
        Duration::from_millis(10_000_000_000_000),
        Duration::from_secs(10_000_000_000_000_000_000),
        Duration::MAX,
    ] {
        let relock = relock.clone();
        let attempt = tokio::spawn(async move { relock.acquire_wait(KEY, ttl, Some(wait)).await });
        let lock = tokio::time::timeout(Duration::from_secs(10), attempt)
            .await
            .unwrap_or_else(|_| panic!("a free lock not acquired with wait {wait:?}"))
            .unwrap_or_else(|e| panic!("wait {wait:?}: {e}"))
            .expect("acquired");
        lock.release().await.expect("release");
    }
    // And a waiter with a huge limit still waits for a holder, then gets the lock.
    let held = relock
        .acquire(KEY, Duration::from_millis(800))
        .await
        .expect("held");
    let started = Instant::now();
    let lock = relock
        .acquire_wait(KEY, ttl, Some(Duration::MAX))
        .await
        .expect("granted at expiry");
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(held.valid_until() <= Instant::now());
    lock.release().await.expect("release");
}

/// The ttl is checked once, the same way everywhere: out of range is an error before any
/// server is asked (problem 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_ttls_are_refused_before_any_request() {
    let server = Server::start();
    let relock = client_with(&[&server], patient());
    let before: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_secs(2_000_000_000),
        Duration::MAX,
    ] {
        let err = relock.acquire(KEY, ttl).await.expect_err("invalid");
        assert!(matches!(err, Error::InvalidTtl(_)), "{ttl:?}: {err}");
        let err = relock
            .acquire_wait(KEY, ttl, None)
            .await
            .expect_err("invalid");
        assert!(matches!(err, Error::InvalidTtl(_)), "{ttl:?}: {err}");
    }
    let after: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    assert!(!before.to_lowercase().contains("cmdstat_lock."), "{before}");
    assert!(!after.to_lowercase().contains("cmdstat_lock."), "{after}");
}

/// `Options::default()` is what the docs say it is.
#[test]
fn documented_defaults() {
    let o = Options::default();
    assert_eq!(o.node_timeout, Duration::from_millis(100));
    assert_eq!(o.retry_count, 3);
    assert_eq!(o.retry_delay, Duration::from_millis(200));
    assert_eq!(o.max_partial_hold, Duration::from_millis(500));
    assert_eq!(o.replica_acks, 0);
    assert_eq!(o.replica_ack_timeout, Duration::from_millis(500));
}
