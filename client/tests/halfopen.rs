//! Connections that die silently (half-open TCP: a crashed host, a dropped NAT entry, a stuck
//! middlebox) while lockctl or relock-client waits in `LOCK.WAIT`, through a loopback proxy
//! that stops forwarding without closing anything (issue 19, problem 6: such a wait went on
//! forever, although the lock was free and the server reachable on a new connection).
use relock_testkit as common;
mod support;

use std::process::Stdio;
use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Options, Relock};
use support::proxy::Proxy;
use support::{acquire_as, calls, holder, lockctl_at, relock_stat, stderr, Spawned};
use tokio::time::Instant;

const KEY: &str = "silent";

/// LOCK.RELEASE as `owner`, straight to the server.
fn release_as(server: &Server, owner: &str) {
    let left: Option<u64> = redis::cmd("LOCK.RELEASE")
        .arg(KEY)
        .arg(owner)
        .query(&mut server.conn())
        .expect("LOCK.RELEASE");
    assert_eq!(left, Some(0), "{owner} held {KEY}");
}

/// lockctl waits on one server; its connections go silent; the lock is freed (and so granted
/// to the silent waiting connection): lockctl notices within the documented bound (the
/// server is asked every second whether the wait is still blocked; an answer that does not
/// arrive within the node timeout means the connection died), waits again on a new
/// connection, gets the grant it never received, and runs its command.
#[test]
fn lockctl_waiting_on_a_silent_connection_gets_the_lock_once_free() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(500);
    // What the client documents (about 1 s + 2 x the node timeout), doubled for a machine
    // whose other core is busy and whose timers may fire late.
    let notice_within = (Duration::from_secs(1) + NODE_TIMEOUT * 2) * 2;
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    acquire_as(&server, KEY, "holder", 60_000).expect("held");
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["--node-timeout", "500ms", "run", "--wait", "60s", KEY])
            .args(["--", "sh", "-c"])
            .arg(format!("echo $RELOCK_OWNER > {}", ran.display()))
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || relock_stat(
        &server, "waiters"
    ) == 1));
    let waits = calls(&server, "lock.wait");
    proxy.silence_open_connections();
    release_as(&server, "holder");
    let freed = std::time::Instant::now();
    // The wait again, on a new connection, is how the server sees that lockctl noticed.
    assert!(
        eventually(Duration::from_secs(30), || calls(&server, "lock.wait")
            > waits),
        "lockctl never waited again"
    );
    let noticed = freed.elapsed();
    let status = lockctl.wait_within(Duration::from_secs(20));
    let took = freed.elapsed();
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(ran.exists(), "the command did not run: {}", stderr(&out));
    eprintln!(
        "half-open wait, one server: noticed {noticed:?} and the command ran {took:?} after \
         the lock was freed"
    );
    assert!(
        noticed < notice_within,
        "noticed only after {noticed:?} (bound {notice_within:?})"
    );
    assert!(eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()));
}

/// The server stops answering on every connection, old and new, while lockctl waits; once it
/// answers again (on new connections only: the old ones stay dead), the wait goes on and gets
/// the lock.
#[test]
fn lockctl_waits_through_a_server_that_stopped_answering() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    acquire_as(&server, KEY, "holder", 60_000).expect("held");
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["run", "--wait", "60s", KEY, "--", "true"])
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || relock_stat(
        &server, "waiters"
    ) == 1));
    proxy.silence_all();
    release_as(&server, "holder");
    std::thread::sleep(Duration::from_secs(3));
    assert!(lockctl.try_status().is_none(), "gave up a 60 s wait");
    proxy.speak();
    let spoke = std::time::Instant::now();
    let status = lockctl.wait_within(Duration::from_secs(30));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    eprintln!(
        "half-open wait, server silent for 3 s: the command ran {:?} after it answered again",
        spoke.elapsed()
    );
}

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
            servers.iter().all(|s| relock_stat(s, "waiters") == 1)
        })
    });
    assert!(queued, "not queued on every master");
    for p in &proxies {
        p.silence_open_connections();
    }
    for s in &servers {
        release_as(s, "holder");
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

/// The connection lockctl renews on goes silent while its command runs (the server still
/// reachable on new connections): a renewal that times out drops it, the next one connects
/// again, and the lock is kept (before, every renewal after that went to the silent
/// connection and timed out until the lock was lost).
#[test]
fn lockctl_renews_through_a_connection_that_went_silent() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let (started, stop) = (dir.path().join("started"), dir.path().join("stop"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        stop.display()
    );
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args([
                "--node-timeout",
                "500ms",
                "run",
                "--ttl",
                "3s",
                KEY,
                "--",
                "sh",
                "-c",
            ])
            .arg(&script)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || started.exists()));
    let (owner, token) = holder(&server, KEY).expect("held");
    proxy.silence_open_connections();
    let renewed = relock_stat(&server, "renewed_total");
    // Two ttls of renewals (one every ttl / 3), each of which can reach the server only on a
    // new connection, the lock held by the same owner all along.
    let silenced = std::time::Instant::now();
    while relock_stat(&server, "renewed_total") < renewed + 6 {
        assert!(
            lockctl.try_status().is_none(),
            "lockctl ended {:?} after its connection went silent",
            silenced.elapsed()
        );
        assert_eq!(
            holder(&server, KEY),
            Some((owner.clone(), token)),
            "the lock was lost {:?} after its connection went silent",
            silenced.elapsed()
        );
        assert!(
            silenced.elapsed() < Duration::from_secs(60),
            "{} renewals in a minute",
            relock_stat(&server, "renewed_total") - renewed
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&stop, b"").expect("stop");
    let status = lockctl.wait_within(Duration::from_secs(20));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(
        eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()),
        "released"
    );
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
