//! `rediss://` servers: relock-client against a real TLS-enabled redis-server (with the
//! module), certificates made here (a CA, the server's, a client's, and an impostor CA), client
//! certificates required (lockctl's part: lockctl/tests/it/tls.rs).
use relock_testkit as common;

use std::time::Duration;

use relock_client::{Error, Options, Relock, Tls};
use relock_testkit::tls::{Files, TlsServer};

const KEY: &str = "tls:deploy";

/// The client's TLS settings: our CA, our client certificate.
fn client_tls(files: &Files) -> Tls {
    Tls {
        ca: Some(files.read("ca.pem")),
        client_cert: Some(files.read("client.pem")),
        client_key: Some(files.read("client.key")),
    }
}

/// relock-client over TLS: acquire, a waiter handed the lock on release, renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relock_client_over_tls() {
    let files = Files::new();
    let tls = TlsServer::start(&files);
    let options = Options {
        node_timeout: Duration::from_secs(1),
        tls: client_tls(&files),
        ..Options::default()
    };
    let relock = Relock::with_options(&[tls.url()], options.clone()).expect("client");
    let ttl = Duration::from_secs(10);
    let lock = relock.acquire(KEY, ttl).await.expect("acquire over TLS");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(KEY, ttl, Some(Duration::from_secs(20)))
                .await
        })
    };
    assert!(tokio::task::block_in_place(|| common::eventually(
        Duration::from_secs(10),
        || relock_testkit::info_field(&mut tls.server.conn(), "waiters") == 1
    )));
    let first = lock.token();
    lock.release().await.expect("release");
    let next = waiter.await.expect("task").expect("handed over");
    assert!(next.token() > first);
    let guard = next.keep_alive();
    let renewed = guard.renew_now().await.expect("renewed over TLS");
    assert!(renewed > tokio::time::Instant::now());
    guard.release().await.expect("release");

    // The settings are checked when the client is built.
    let half = Options {
        tls: Tls {
            client_key: None,
            ..client_tls(&files)
        },
        ..options.clone()
    };
    assert!(matches!(
        Relock::with_options(&[tls.url()], half),
        Err(Error::InvalidOption { name: "tls", .. })
    ));
    // Without our CA the server is not trusted: a permanent error, at once.
    let untrusted = Options {
        tls: Tls {
            ca: None,
            ..client_tls(&files)
        },
        ..options
    };
    let relock = Relock::with_options(&[tls.url()], untrusted).expect("client");
    let err = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("an untrusted certificate must not be retried forever")
        .expect_err("untrusted");
    assert!(err.is_permanent(), "{err}");
}
