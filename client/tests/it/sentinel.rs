//! Sentinel-managed masters (`redis+sentinel://`): relock-client against a real master, its
//! replica and two `redis-server --sentinel` processes (lockctl through a failover:
//! lockctl/tests/it/sentinel.rs).

use std::time::Duration;

use relock_client::{Error, Options, Relock};
use relock_testkit::ask::holder;
use relock_testkit::sentinel::Sentinels;

/// relock-client through the sentinels: acquire on the master they name; a bad master name
/// is a permanent error; one sentinel down is not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relock_client_finds_the_master_through_the_sentinels() {
    let setup = tokio::task::block_in_place(Sentinels::start);
    let relock = Relock::with_options(
        &[setup.url()],
        Options {
            node_timeout: Duration::from_secs(1),
            ..Options::default()
        },
    )
    .expect("client");
    let lock = relock
        .acquire("s:one", Duration::from_secs(10))
        .await
        .expect("acquire");
    assert_eq!(
        tokio::task::block_in_place(|| holder(&setup.master, "s:one")).map(|h| h.0),
        Some(lock.owner().to_string())
    );
    let info = relock.info("s:one").await;
    assert_eq!(info[0].node, format!("127.0.0.1:{}", setup.master.port));
    lock.release().await.expect("release");

    let unknown = format!(
        "redis+sentinel://127.0.0.1:{}/no-such-master",
        setup.sentinels[0].port
    );
    let relock = Relock::new(&[unknown]).expect("client");
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        relock.acquire_wait("s:one", Duration::from_secs(10), None),
    )
    .await
    .expect("an unknown master name must not be retried forever")
    .expect_err("no such master");
    assert!(err.is_permanent(), "{err}");
    assert!(err.to_string().contains("no-such-master"), "{err}");

    // The same master by two URLs is one master.
    let twice = [setup.url(), setup.url()];
    assert!(matches!(
        Relock::new(&twice),
        Err(Error::DuplicateServer { .. })
    ));
}
