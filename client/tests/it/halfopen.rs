//! Connections that die silently (half-open TCP: a crashed host, a dropped NAT entry, a stuck
//! middlebox) while relock-client waits in `LOCK.WAIT`, reenters or releases, through a
//! loopback proxy that stops forwarding without closing anything (issue 19, problem 6: such a
//! wait went on forever, although the lock was free and the server reachable on a new
//! connection). lockctl's part: lockctl/tests/it/halfopen.rs.
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Options, Relock};
use relock_testkit::ask::{acquire_as, calls, holder};
use relock_testkit::client::release_as;
use relock_testkit::proxy::Proxy;
use tokio::time::Instant;

const KEY: &str = "silent";

/// relock-client's Redlock wait on three masters, every connection of which goes silent: each
/// master's wait notices on its own and waits again; the quorum is won once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_wait_survives_silent_connections_on_every_master() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port)).collect();
    for s in &servers {
        acquire_as(s, KEY, "holder", 60_000).expect("held");
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let relock = Relock::with_options(
        &urls,
        Options {
            node_timeout: Duration::from_millis(200),
            ..Options::default()
        },
    )
    .expect("client");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(KEY, Duration::from_secs(10), Some(Duration::from_secs(60)))
                .await
        })
    };
    let queued = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(20), || {
            servers
                .iter()
                .all(|s| relock_testkit::info_field(&mut s.conn(), "waiters") == 1)
        })
    });
    assert!(queued, "not queued on every master");
    for p in &proxies {
        p.silence_open_connections();
    }
    for s in &servers {
        release_as(s, KEY, "holder");
    }
    let freed = Instant::now();
    let lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the wait never noticed its connections were dead")
        .expect("task")
        .expect("acquired");
    eprintln!(
        "half-open wait, Redlock of 3: acquired {:?} after the lock was freed",
        freed.elapsed()
    );
    assert!(lock.tokens().len() >= 2);
    for s in &servers {
        if let Some((owner, _)) = tokio::task::block_in_place(|| holder(s, KEY)) {
            assert_eq!(owner, lock.owner());
        }
    }
    lock.release().await.expect("release");
}

/// A re-entry whose answer does not come within the node timeout (a slow link: the command is
/// on its way, and will run) is taken back on its own connection, behind it: the server runs
/// the `LOCK.REENTER ... FROM 2`, then the `LOCK.RELEASE ... FROM 3`, and the hold's count is
/// what it was. The handles' own releases, which name the counts they know, then end the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_without_an_answer_is_taken_back_on_its_connection() {
    const KEY: &str = "taken-back";
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let relock = Relock::with_options(
        &[proxy.url()],
        Options {
            node_timeout: Duration::from_millis(200),
            ..Options::default()
        },
    )
    .expect("client");
    let count = || {
        tokio::task::block_in_place(|| common::lock_info(&mut server.conn(), KEY).map(|i| i.count))
    };
    let ttl = Duration::from_secs(60);
    let outer = relock.reenter(KEY, "me", ttl).await.expect("outer");
    let inner = outer.reenter(ttl).await.expect("inner");
    assert_eq!(count(), Some(2));
    let released_before = tokio::task::block_in_place(|| calls(&server, "lock.release"));
    // Every chunk now takes longer than the node timeout, each way.
    proxy.delay(Duration::from_millis(600));
    let lost = inner.reenter(ttl).await;
    assert!(lost.is_err(), "answered in time: {lost:?}");
    proxy.delay(Duration::ZERO);
    let ran = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(20), || {
            calls(&server, "lock.release") > released_before
        })
    });
    assert!(ran, "the re-entry was not taken back");
    assert_eq!(count(), Some(2), "the count the lost re-entry added stayed");
    inner.release().await.expect("inner release");
    assert_eq!(count(), Some(1));
    outer.release().await.expect("outer release");
    assert_eq!(count(), None);
}

/// A re-entry whose connection ends before its answer arrives (the server ran it: the proxy
/// drops the answer and closes the connection) is taken back as one that timed out: the
/// caller gets an error, and the count it added comes off (on a new connection: the old one is
/// gone, and the re-entry ran before the server answered it). The handles' own releases, which
/// name the counts they know, then end the hold; before, the level stayed, each release was
/// refused (`ERR hold count is 3, not 2`) and the hold lived on to its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_whose_connection_ends_unanswered_is_taken_back() {
    const KEY: &str = "cut-answer";
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let relock = Relock::with_options(
        &[proxy.url()],
        Options {
            node_timeout: Duration::from_millis(2000),
            ..Options::default()
        },
    )
    .expect("client");
    let count = || {
        tokio::task::block_in_place(|| common::lock_info(&mut server.conn(), KEY).map(|i| i.count))
    };
    let ttl = Duration::from_secs(60);
    let outer = relock.reenter(KEY, "me", ttl).await.expect("outer");
    let inner = outer.reenter(ttl).await.expect("inner");
    assert_eq!(count(), Some(2));
    let reentered_before = tokio::task::block_in_place(|| calls(&server, "lock.reenter"));
    proxy.cut_next_answer();
    let lost = inner.reenter(ttl).await;
    assert!(lost.is_err(), "answered: {lost:?}");
    assert_eq!(
        tokio::task::block_in_place(|| calls(&server, "lock.reenter")),
        reentered_before + 1,
        "the re-entry did not run"
    );
    assert_eq!(count(), Some(2), "the count the lost re-entry added stayed");
    inner.release().await.expect("inner release");
    assert_eq!(count(), Some(1));
    outer.release().await.expect("outer release");
    assert_eq!(count(), None);
}

/// A release whose connection ends before its answer (the server ran it) is sent once more: a
/// `LOCK.RELEASE ... FROM c` sent twice takes one level off, whichever copy runs first. Three
/// handles deep, the innermost release's answer is lost; the two outer releases then name the
/// right counts and end the hold. Before, the lost answer made the next release name 1 on a
/// hold at 2 (`ERR hold count is 2, not 1`), and the hold lived on to its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_connection_ends_unanswered_is_sent_again() {
    const KEY: &str = "cut-release";
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let relock = Relock::with_options(
        &[proxy.url()],
        Options {
            node_timeout: Duration::from_millis(2000),
            ..Options::default()
        },
    )
    .expect("client");
    let count = || {
        tokio::task::block_in_place(|| common::lock_info(&mut server.conn(), KEY).map(|i| i.count))
    };
    let ttl = Duration::from_secs(60);
    let outer = relock.reenter(KEY, "me", ttl).await.expect("outer");
    let middle = outer.reenter(ttl).await.expect("middle");
    let inner = middle.reenter(ttl).await.expect("inner");
    assert_eq!(count(), Some(3));
    proxy.cut_next_answer();
    inner
        .release()
        .await
        .expect("inner release, answered the second time");
    assert_eq!(count(), Some(2));
    middle.release().await.expect("middle release");
    assert_eq!(count(), Some(1));
    // The last release's answer lost too: its second copy finds the hold gone (nil), which,
    // after a first copy that may have ended it, is a release done.
    proxy.cut_next_answer();
    outer.release().await.expect("outer release");
    assert_eq!(count(), None);
}
