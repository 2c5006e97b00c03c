//! Beyond one key and one permit, from relock-client against real servers: several permits,
//! downgrade, several keys (`acquire_all`, `wait_all` and their guard), and the restart grace.
#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Error, Mode, Options, Relock};

const TTL: Duration = Duration::from_secs(30);
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

fn patient() -> Options {
    Options {
        node_timeout: Duration::from_secs(1),
        ..Options::default()
    }
}

fn client(servers: &[&Server]) -> Relock {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    Relock::with_options(&urls, patient()).expect("client")
}

/// `LOCK.INFO key` as text fields, `None` without a lock.
fn info(server: &Server, key: &str) -> Option<HashMap<String, String>> {
    let info: Option<HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(&mut server.conn())
        .expect("LOCK.INFO");
    info.map(|fields| {
        fields
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    redis::Value::Int(n) => n.to_string(),
                    redis::Value::Nil => "nil".to_string(),
                    other => redis::from_redis_value(&other).expect("text"),
                };
                (k, text)
            })
            .collect()
    })
}

/// How many clients wait for `key` on `server`.
fn waiters(server: &Server, key: &str) -> u64 {
    info(server, key).map_or(0, |i| i["waiters"].parse().expect("waiters"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_sum_to_the_limit_and_large_requests_do_not_starve() {
    let server = Server::start();
    let relock = client(&[&server]);
    let pool = relock.with_mode(Mode::limited(10)).expect("semaphore");
    let seven = pool.with_permits(7).expect("7 of 10");
    let three = pool.with_permits(3).expect("3 of 10");
    let a = seven.acquire("pool", TTL).await.expect("7 permits");
    assert_eq!(a.permits(), 7);
    let b = three.acquire("pool", TTL).await.expect("3 more");
    assert_eq!(info(&server, "pool").expect("held")["permits_free"], "0");
    // No room: a round refused, not an error.
    let one = pool.try_acquire("pool", TTL).await.expect_err("full");
    assert!(matches!(one, Error::NoQuorum { .. }), "{one}");
    // Five wait; a single permit asked after them waits behind them though one is free.
    let five = pool.with_permits(5).expect("5 of 10");
    let waiting = tokio::spawn(async move { five.acquire_wait("pool", TTL, Some(WITHIN)).await });
    assert!(eventually(WITHIN, || waiters(&server, "pool") == 1));
    b.release().await.expect("release 3");
    let barging = pool.try_acquire("pool", TTL).await;
    assert!(barging.is_err(), "a free permit, but five wait first");
    a.release().await.expect("release 7");
    let big = tokio::time::timeout(WITHIN, waiting)
        .await
        .expect("granted")
        .expect("task")
        .expect("five permits");
    assert_eq!(big.permits(), 5);
    assert_eq!(info(&server, "pool").expect("held")["permits_free"], "5");
    // One owner, one hold: a re-entry with other permits is refused, naming the server.
    let other = three
        .reenter("pool", big.owner(), TTL)
        .await
        .expect_err("other permits");
    assert!(matches!(other, Error::OtherPermits { .. }), "{other}");
    assert!(other.is_permanent());
    big.release().await.expect("release 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_checked_before_any_server_is_asked() {
    let relock = Relock::new(&["redis://127.0.0.1:1"]).expect("client");
    for (mode, permits) in [
        (Mode::limited(3), 4),
        (Mode::limited(3), 0),
        (Mode::Exclusive, 2),
        (Mode::shared(), 2),
    ] {
        let Err(err) = relock.with_mode(mode).expect("mode").with_permits(permits) else {
            panic!("{mode} with {permits} permits accepted");
        };
        assert!(matches!(err, Error::InvalidPermits { .. }), "{err}");
    }
    let pool = relock.with_mode(Mode::limited(3)).expect("semaphore");
    assert_eq!(pool.with_permits(3).expect("3 of 3").permits(), 3);
    // A new mode starts again from one permit.
    let again = pool
        .with_permits(2)
        .expect("2")
        .with_mode(Mode::limited(5))
        .expect("mode");
    assert_eq!(again.permits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_lets_the_waiting_readers_in_and_no_writer() {
    let server = Server::start();
    let relock = client(&[&server]);
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    let mut write = relock.acquire("report", TTL).await.expect("write");
    let token = write.token();
    let reader = {
        let readers = readers.clone();
        tokio::spawn(async move { readers.acquire_wait("report", TTL, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&server, "report") == 1));
    // A writer queued behind the reader stays queued through the downgrade.
    let writer = {
        let relock = relock.clone();
        tokio::spawn(async move { relock.acquire_wait("report", TTL, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&server, "report") == 2));
    write.downgrade().await.expect("downgrade");
    assert_eq!(write.mode(), Mode::shared());
    assert_eq!(write.token(), token, "the same hold");
    let read = tokio::time::timeout(WITHIN, reader)
        .await
        .expect("granted with the downgrade")
        .expect("task")
        .expect("read");
    assert_eq!(info(&server, "report").expect("held")["holders"], "2");
    assert_eq!(waiters(&server, "report"), 1, "the writer still waits");
    // Safe to retry.
    write.downgrade().await.expect("again");
    write.extend(TTL).await.expect("a shared hold renews");
    read.release().await.expect("release");
    write.release().await.expect("release");
    let w = tokio::time::timeout(WITHIN, writer)
        .await
        .expect("the writer after both")
        .expect("task")
        .expect("write");
    w.release().await.expect("release");
    // A semaphore is never downgraded.
    let slots = relock.with_mode(Mode::limited(2)).expect("semaphore");
    let mut permit = slots.acquire("slots", TTL).await.expect("permit");
    let err = permit.downgrade().await.expect_err("a semaphore");
    assert!(matches!(err, Error::OtherLimit { .. }), "{err}");
    permit.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_downgrades_and_renews_the_shared_hold() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let relock = client(&refs);
    let guard = relock
        .guard("catalog", Duration::from_millis(900))
        .await
        .expect("guard");
    guard.downgrade().await.expect("downgrade");
    for s in &servers {
        assert_eq!(info(s, "catalog").expect("held")["mode"], "shared");
    }
    // A reader joins at once; the guard keeps its own shared hold alive past its ttl.
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    let read = readers.acquire("catalog", TTL).await.expect("read");
    let renewed = guard.renew_now().await.expect("renewed");
    assert!(renewed > tokio::time::Instant::now());
    read.release().await.expect("release");
    guard.release().await.expect("release");
    for s in &servers {
        assert!(info(s, "catalog").is_none());
    }
}
