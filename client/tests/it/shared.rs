//! Shared holds from relock-client against real servers: read-write locks and counting
//! semaphores on one server, over three independent masters, and on a Redis Cluster (lockctl's
//! part: lockctl/tests/it/shared.rs).
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;

use std::time::Duration;

use cluster_harness::Cluster;
use common::{eventually, Server};
use relock_client::{Error, Mode, Relock};
use relock_testkit::ask::holders;
use relock_testkit::ask::info_text as info;
use relock_testkit::client::{patient, patient_client};
use tokio::time::Instant;

const KEY: &str = "catalog";
const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_coexist_and_each_is_its_own() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    assert_eq!(relock.mode(), Mode::Exclusive);
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    assert_eq!(readers.mode(), Mode::shared());

    let a = readers.acquire(KEY, TTL).await.expect("first reader");
    let b = readers.try_acquire(KEY, TTL).await.expect("second reader");
    assert_eq!((a.mode(), b.mode()), (Mode::shared(), Mode::shared()));
    let (ta, tb) = (a.token().expect("token"), b.token().expect("token"));
    assert!(tb > ta, "every shared grant gets a new token: {ta}, {tb}");
    assert_eq!(holders(&mut server.conn(), KEY).len(), 2);

    // LOCK.INFO names no holder of a shared key; LOCK.HOLDERS lists them in grant order.
    let reports = relock.info(KEY).await;
    let lock = reports[0]
        .result
        .as_ref()
        .expect("info")
        .as_ref()
        .expect("locked");
    assert_eq!((lock.mode, lock.holders), (Mode::shared(), 2));
    assert_eq!(
        (lock.owner.as_deref(), lock.token, lock.count),
        (None, None, None)
    );
    assert!(lock.ttl.is_some_and(|t| t > Duration::ZERO && t <= TTL));
    let reports = relock.holders(KEY, 0).await;
    let listed = reports[0]
        .result
        .as_ref()
        .expect("holders")
        .as_ref()
        .expect("locked");
    let owners: Vec<(&str, u64)> = listed.iter().map(|h| (h.owner.as_str(), h.token)).collect();
    assert_eq!(owners, [(a.owner(), ta), (b.owner(), tb)]);
    let mine = relock.holder(KEY, b.owner()).await;
    let mine = mine[0]
        .result
        .as_ref()
        .expect("holder")
        .as_ref()
        .expect("b holds");
    assert_eq!((mine.token, mine.count), (tb, 1));

    // A re-entry of a shared hold counts into that holder, keeping its token.
    let again = readers
        .reenter(KEY, a.owner(), TTL)
        .await
        .expect("re-enter");
    assert_eq!(again.token(), Some(ta));
    let a_now = relock.holder(KEY, a.owner()).await;
    assert_eq!(
        a_now[0]
            .result
            .as_ref()
            .expect("holder")
            .as_ref()
            .map(|h| h.count),
        Some(2)
    );
    again.release().await.expect("release the re-entry");

    // Each renews and releases its own hold.
    let mut a = a;
    a.extend(TTL).await.expect("extend a");
    b.release().await.expect("release b");
    assert_eq!(holders(&mut server.conn(), KEY).len(), 1);
    // The guard works per holder too.
    let guard = readers.guard(KEY, TTL).await.expect("guard");
    assert_eq!(holders(&mut server.conn(), KEY).len(), 2);
    guard.release().await.expect("release guard");
    a.release().await.expect("release a");
    assert_eq!(info(&server, KEY), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waits_for_the_readers() {
    let server = Server::start();
    let writers = patient_client(&[&server]);
    let readers = writers.with_mode(Mode::shared()).expect("shared");
    let r1 = readers.acquire(KEY, TTL).await.expect("reader 1");
    let r2 = readers.acquire(KEY, TTL).await.expect("reader 2");

    // Refused at once while readers hold it...
    let err = writers
        .try_acquire(KEY, TTL)
        .await
        .expect_err("readers hold it");
    assert!(matches!(err, Error::NoQuorum { granted: 0, .. }), "{err}");
    // ...and granted, by LOCK.WAIT, once the last reader is gone.
    let waiting = {
        let writers = writers.clone();
        tokio::spawn(async move {
            let lock = writers
                .acquire_wait(KEY, TTL, Some(Duration::from_secs(60)))
                .await;
            (lock, Instant::now())
        })
    };
    assert!(eventually(Duration::from_secs(20), || info(&server, KEY)
        .is_some_and(|i| i["waiters"] == "1")));
    // A reader that comes after a waiting writer does not barge past it.
    let err = readers
        .try_acquire(KEY, TTL)
        .await
        .expect_err("a writer waits");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    r1.release().await.expect("release r1");
    // The server grants in the release itself: once it answered, the writer still waits there,
    // behind the reader left.
    let i = info(&server, KEY).expect("held");
    assert_eq!(
        (
            i["mode"].as_str(),
            i["holders"].as_str(),
            i["waiters"].as_str()
        ),
        ("shared", "1", "1"),
        "the writer got in with a reader left"
    );
    assert!(
        !waiting.is_finished(),
        "the writer got in with a reader left"
    );
    let last_reader_gone = Instant::now();
    r2.release().await.expect("release r2");
    let (lock, granted_at) = waiting.await.expect("writer task");
    let lock = lock.expect("writer granted");
    assert!(granted_at >= last_reader_gone);
    assert_eq!(lock.mode(), Mode::Exclusive);
    let i = info(&server, KEY).expect("held");
    assert_eq!(
        (i["mode"].as_str(), i["owner"].as_str()),
        ("exclusive", lock.owner())
    );
    lock.release().await.expect("release writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_n_admits_n() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let slots = relock
        .with_mode(Mode::limited(3))
        .expect("semaphore on one server");
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(slots.acquire(KEY, TTL).await.expect("a permit"));
    }
    let i = info(&server, KEY).expect("held");
    assert_eq!(
        (
            i["mode"].as_str(),
            i["limit"].as_str(),
            i["holders"].as_str()
        ),
        ("shared", "3", "3")
    );
    let err = slots.try_acquire(KEY, TTL).await.expect_err("a fourth");
    assert!(matches!(err, Error::NoQuorum { granted: 0, .. }), "{err}");

    // The fourth waits for a permit and gets the one given back.
    let waiting = {
        let slots = slots.clone();
        tokio::spawn(async move {
            slots
                .acquire_wait(KEY, TTL, Some(Duration::from_secs(60)))
                .await
        })
    };
    assert!(eventually(Duration::from_secs(20), || info(&server, KEY)
        .is_some_and(|i| i["waiters"] == "1")));
    permits
        .pop()
        .expect("a permit")
        .release()
        .await
        .expect("release");
    let fourth = waiting.await.expect("task").expect("granted");
    assert_eq!(holders(&mut server.conn(), KEY).len(), 3);

    // Asking with another limit is refused by the server, naming it.
    let other = relock.with_mode(Mode::limited(5)).expect("mode");
    let err = other.acquire(KEY, TTL).await.expect_err("another limit");
    match &err {
        Error::OtherLimit { key, node, limit } => {
            assert_eq!((key.as_str(), *limit), (KEY, 3));
            assert_eq!(node, &format!("127.0.0.1:{}", server.port));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.is_permanent());
    // And so is an owner asking for the key in the other mode.
    let exclusive = relock
        .reenter(KEY, fourth.owner(), TTL)
        .await
        .expect_err("other mode");
    assert!(matches!(exclusive, Error::OtherMode { .. }), "{exclusive}");

    // Force-release counts the holds it removed.
    let removed = relock.force_release_holds(KEY, Some(fourth.owner())).await;
    assert_eq!(*removed[0].result.as_ref().expect("removed"), 1);
    let removed = relock.force_release(KEY).await;
    assert!(*removed[0].result.as_ref().expect("removed"));
    assert_eq!(info(&server, KEY), None);
    drop(permits);
    drop(fourth);
    relock.settle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_over_three_masters_is_a_quorum_read_write_lock() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let writers = patient_client(&refs);
    let readers = writers
        .with_mode(Mode::shared())
        .expect("SHARED over a quorum is sound");
    let a = readers.acquire(KEY, TTL).await.expect("reader a");
    let b = readers.acquire(KEY, TTL).await.expect("reader b");
    assert!(a.tokens().len() >= 2 && b.tokens().len() >= 2);
    assert!(eventually(Duration::from_secs(5), || servers
        .iter()
        .all(|s| holders(&mut s.conn(), KEY).len() == 2)));
    let err = writers
        .try_acquire(KEY, TTL)
        .await
        .expect_err("readers hold it");
    assert!(matches!(err, Error::NoQuorum { granted: 0, .. }), "{err}");

    // A guarded reader renews its own hold on every master.
    let ttl = Duration::from_millis(900);
    let renewed = readers
        .with_lock(KEY, ttl, |hold| async move {
            // Held for more than two ttls: only the renewals keep it.
            common::wait_out_ttl_async(Duration::from_millis(2_000)).await;
            !hold.lost.is_cancelled()
        })
        .await
        .expect("guarded reader");
    assert!(renewed, "the guarded reader lost its hold");

    a.release().await.expect("release a");
    b.release().await.expect("release b");
    assert!(eventually(Duration::from_secs(5), || servers
        .iter()
        .all(|s| info(s, KEY).is_none())));
    // Now the writer gets it, waiting on every master.
    let lock = writers
        .acquire_wait(KEY, TTL, Some(Duration::from_secs(30)))
        .await
        .expect("writer");
    assert_eq!(lock.mode(), Mode::Exclusive);
    lock.release().await.expect("release writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_cluster() {
    let cluster = Cluster::start();
    let seed = cluster.nodes[0].url();
    let relock = Relock::cluster(&[&seed], patient()).expect("cluster client");
    // A cluster keeps each key on one master: a limit is sound there.
    let slots = relock
        .with_mode(Mode::limited(2))
        .expect("semaphore on a cluster");
    let key = "{jobs}:encoders";
    let a = slots.acquire(key, TTL).await.expect("permit a");
    let b = slots.acquire(key, TTL).await.expect("permit b");
    let err = slots.try_acquire(key, TTL).await.expect_err("a third");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    let master = cluster.master_of(key);
    assert_eq!(holders(&mut master.conn(), key).len(), 2);
    let listed = relock.holders(key, 0).await;
    assert_eq!(listed[0].node, format!("127.0.0.1:{}", master.port));
    let listed = listed[0]
        .result
        .as_ref()
        .expect("holders")
        .as_ref()
        .expect("held");
    assert_eq!(listed.len(), 2);
    a.release().await.expect("release a");
    let c = slots
        .acquire_wait(key, TTL, Some(Duration::from_secs(30)))
        .await
        .expect("permit c");
    b.release().await.expect("release b");
    c.release().await.expect("release c");
    assert_eq!(holders(&mut master.conn(), key).len(), 0);
}
