//! relock-client against real servers: one master and five independent masters.
use relock_testkit as common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Server;
use relock_client::validity::drift;
use relock_client::{Error, Options, Relock};
use relock_testkit::ask::{calls, force_release, holder_count, waiters};
use relock_testkit::client::relock_with;
use tokio::time::Instant;

const KEY: &str = "jobs:nightly";

fn masters(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// A client of `servers` with the [`test_options`].
fn client_of(servers: &[Server]) -> Relock {
    relock_with(servers, test_options())
}

/// Defaults, with a per-node timeout that tolerates a busy debug build.
fn test_options() -> Options {
    Options {
        node_timeout: Duration::from_millis(300),
        ..Options::default()
    }
}

/// (owner, count) of the lock at `key` on `server`, from LOCK.INFO.
fn owner_count(server: &Server, key: &str) -> Option<(String, u64)> {
    holder_count(server, key).map(|(owner, _, count)| (owner, count))
}

/// [`owner_count`] on each of `servers`.
fn owner_counts(servers: &[Server], key: &str) -> Vec<Option<(String, u64)>> {
    servers.iter().map(|s| owner_count(s, key)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_on_five_masters() {
    let servers = masters(5);
    let relock = client_of(&servers);
    assert_eq!(relock.quorum(), 3);
    let ttl = Duration::from_secs(10);
    let before = Instant::now();
    let mut lock = relock.acquire(KEY, ttl).await.expect("acquire");
    eprintln!("5-master acquire took {:?}", before.elapsed());
    assert!(lock.tokens().len() >= 3, "tokens: {:?}", lock.tokens());
    assert!(lock.token().is_some_and(|t| t > 0 && t < 1 << 53));
    assert!(lock.is_valid());
    // (A retried round may have started after `before`, so bound it by now.)
    assert!(lock.valid_until() <= Instant::now() + ttl - drift(ttl));
    let owner = lock.owner().to_string();
    // Late grants are not waited for, but every master ends up holding for us.
    assert!(common::eventually(Duration::from_secs(2), || owner_counts(
        &servers, KEY
    )
    .iter()
    .all(|h| h.as_ref().is_some_and(|(o, _)| *o == owner))));

    let first_validity = lock.valid_until();
    // No event to wait for: the first validity has to age (a time that must run its length),
    // so that the extension's, measured from a round of its own, is later by more than a
    // round's time can make up.
    common::wait_out_ttl_async(Duration::from_millis(50)).await;
    lock.extend(ttl).await.expect("extend");
    assert!(lock.valid_until() > first_validity);
    assert!(lock.tokens().len() >= 3);

    // Someone else cannot take it meanwhile.
    let err = relock.try_acquire(KEY, ttl).await.expect_err("held");
    assert!(matches!(err, Error::NoQuorum { granted: 0, .. }), "{err}");

    lock.release().await.expect("release");
    assert!(owner_counts(&servers, KEY).iter().all(Option::is_none));
}

/// A release right after a round decided without one master waits for that master's request
/// to land and releases behind it, once: nothing is sent there again later (each release once
/// more later was 2 more commands per master and a background task per lock, most of what 5
/// masters cost over 1), and the key is free everywhere when the release returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_behind_a_late_grant_is_sent_once() {
    let servers = masters(3);
    let relock = relock_with(
        &servers,
        Options {
            // Far above the pause: the late request lands, it does not time out.
            node_timeout: Duration::from_secs(5),
            ..Options::default()
        },
    );
    let _warm = relock.info(KEY).await;
    // The third master answers writes only 2 s from now: the round is decided without it (with
    // 200 ms, a loaded machine could start the round after the pause).
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2000)
        .arg("WRITE")
        .query(&mut servers[2].conn())
        .expect("CLIENT PAUSE");
    let lock = relock
        .try_acquire(KEY, Duration::from_secs(10))
        .await
        .expect("a quorum of 2");
    assert_eq!(lock.tokens().len(), 2, "{:?}", lock.tokens());
    let owner = lock.owner().to_string();
    lock.release().await.expect("release");
    // Released behind the late grant: free everywhere once the release returned.
    assert_eq!(owner_counts(&servers, KEY), vec![None, None, None]);
    relock.settle().await;
    for (i, s) in servers.iter().enumerate() {
        assert_eq!(calls(s, "lock.acquire"), 1, "master {i}");
        assert_eq!(
            calls(s, "lock.release"),
            1,
            "master {i}: a release sent more than once for {owner}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_master_acquires_in_one_request_and_drop_releases() {
    let servers = masters(1);
    let relock = client_of(&servers);
    let _warm = relock.info(KEY).await;
    let started = Instant::now();
    let lock = relock
        .acquire(KEY, Duration::from_secs(10))
        .await
        .expect("acquire");
    eprintln!("1-master acquire took {:?}", started.elapsed());
    // One round, one request: no retry, no extra round trip.
    assert_eq!(calls(&servers[0], "lock.acquire"), 1);
    assert_eq!(lock.tokens().len(), 1);
    assert!(owner_count(&servers[0], KEY).is_some());
    drop(lock); // released by a spawned task, never blocking here
    assert!(common::eventually(Duration::from_secs(2), || owner_count(
        &servers[0],
        KEY
    )
    .is_none()));
    assert_eq!(calls(&servers[0], "lock.release"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_never_both_hold() {
    let servers = masters(5);
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let relock = relock_with(
            &servers,
            Options {
                retry_count: 50,
                retry_delay: Duration::from_millis(20),
                ..test_options()
            },
        );
        let (inside, entries) = (inside.clone(), entries.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let lock = relock
                    .acquire(KEY, Duration::from_secs(5))
                    .await
                    .expect("acquire eventually");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "both contenders hold the lock"
                );
                entries.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await; // the work under the lock (not a wait)
                inside.store(false, Ordering::SeqCst);
                lock.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    assert_eq!(entries.load(Ordering::SeqCst), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_two_dead_masters_and_fails_fast_with_three() {
    let mut servers = masters(5);
    let relock = client_of(&servers);
    servers[1].kill();
    servers[3].kill();
    let lock = relock
        .acquire(KEY, Duration::from_secs(10))
        .await
        .expect("3 of 5 alive");
    assert_eq!(lock.tokens().len(), 3);
    lock.release().await.expect("release");

    servers[4].kill();
    let dead: Vec<String> = [1, 3, 4]
        .iter()
        .map(|&i| format!("127.0.0.1:{}", servers[i].port))
        .collect();
    let started = Instant::now();
    let err = relock
        .try_acquire(KEY, Duration::from_secs(10))
        .await
        .expect_err("2 of 5 alive");
    let took = started.elapsed();
    eprintln!("quorum lost after {took:?}: {err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    match &err {
        Error::NoQuorum {
            granted, quorum, ..
        } => {
            assert_eq!(*quorum, 3);
            assert!(*granted <= 2);
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    let text = err.to_string();
    for node in &dead {
        assert!(text.contains(node.as_str()), "{text} does not name {node}");
    }
    // A failed round is released everywhere: the live masters are free again (one still to
    // answer when the round was lost is released in the background).
    for i in [0, 2] {
        assert!(common::eventually(Duration::from_secs(5), || owner_count(
            &servers[i],
            KEY
        )
        .is_none()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_master_does_not_stall_acquisition() {
    let servers = masters(5);
    // Long enough that any wait for the paused master shows.
    let node_timeout = Duration::from_secs(1);
    let relock = relock_with(
        &servers,
        Options {
            node_timeout,
            ..Options::default()
        },
    );
    let _warm = relock.info(KEY).await;
    servers[2].signal("STOP");
    let started = Instant::now();
    let result = relock.acquire(KEY, Duration::from_secs(10)).await;
    let took = started.elapsed();
    eprintln!("acquire with a paused master took {took:?}");
    let lock = result.expect("4 of 5 answer");
    // Decided by the quorum that answered: the paused master was not waited for.
    assert!(took < node_timeout, "took {took:?}");
    assert!(lock.tokens().len() >= 3);

    // Release waits for every master, the paused one for exactly one node timeout.
    let started = Instant::now();
    lock.release().await.expect("release");
    let took = started.elapsed();
    eprintln!("release with a paused master took {took:?}");
    assert!(took >= node_timeout, "took {took:?}");
    assert!(took < node_timeout * 2, "took {took:?}");

    // When the round cannot be decided without the paused masters, it ends after one node
    // timeout instead of hanging: here 2 answer, 1 is paused too and 1 is dead.
    servers[4].signal("STOP");
    let mut dead = Server::start();
    dead.kill();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let relock = Relock::with_options(
        &[&urls[0], &urls[1], &urls[2], &urls[4], &dead.url()],
        Options {
            node_timeout,
            retry_count: 0,
            ..Options::default()
        },
    )
    .expect("client");
    let started = Instant::now();
    let err = relock
        .acquire(KEY, Duration::from_secs(10))
        .await
        .expect_err("only 2 of 5 answer");
    let took = started.elapsed();
    eprintln!("round needing paused masters ended after {took:?}: {err}");
    assert!(took >= node_timeout, "took {took:?}");
    assert!(took < node_timeout * 2, "took {took:?}");
    let text = err.to_string();
    for s in [&servers[2], &servers[4]] {
        assert!(text.contains(&format!("127.0.0.1:{}", s.port)), "{text}");
    }
    servers[2].signal("CONT");
    servers[4].signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_never_exceeds_ttl_minus_elapsed_minus_drift() {
    let servers = masters(5);
    let relock = relock_with(
        &servers,
        Options {
            node_timeout: Duration::from_secs(3),
            retry_count: 0,
            ..Options::default()
        },
    );
    let _warm = relock.info(KEY).await;

    // A ttl no larger than the drift can never leave validity: refused before any server is
    // asked (issue 19), never a wrapped-around validity.
    for ms in [1, 2] {
        let err = relock
            .acquire(KEY, Duration::from_millis(ms))
            .await
            .expect_err("no validity");
        assert!(matches!(err, Error::InvalidTtl(_)), "{err}");
    }

    // Three masters answering ~400 ms late: each holds every client's commands for 400 ms
    // from the moment its `CLIENT PAUSE` answered, so a round started after the answers waits
    // for them (the answer is the event; a `DEBUG SLEEP` sent ahead gave no sign of having
    // started). The connections are opened first, so that the pauses start close together.
    let mut pausers: Vec<redis::Connection> = servers[..3].iter().map(|s| s.conn()).collect();
    let mut pause = || {
        for c in &mut pausers {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(400)
                .arg("ALL")
                .query(c)
                .expect("CLIENT PAUSE");
        }
    };
    // A round that used up the whole ttl leaves nothing: an error, never a wrapped-around
    // validity; and the grants are released.
    pause();
    let err = relock
        .acquire(KEY, Duration::from_millis(200))
        .await
        .expect_err("no validity left");
    assert!(matches!(err, Error::ValidityExhausted { .. }), "{err}");
    relock.settle().await;

    // The round's time comes off the validity.
    pause();
    let ttl = Duration::from_secs(5);
    let before = Instant::now();
    let lock = relock.acquire(KEY, ttl).await.expect("slow quorum");
    let after = Instant::now();
    eprintln!("slow round took {:?}", after - before);
    assert!(after - before >= Duration::from_millis(300));
    assert!(
        lock.valid_until() <= before + ttl - drift(ttl) - Duration::from_millis(250),
        "validity {:?} ignores the round's time",
        lock.valid_until() - before
    );
    assert!(lock.valid_until() > after);
    lock.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_renews_past_the_ttl_and_stops_on_release() {
    let servers = masters(5);
    let relock = client_of(&servers);
    let ttl = Duration::from_secs(1);
    let owner = relock
        .with_lock(KEY, ttl, |hold| async move {
            // Held three ttls: only the renewals keep it.
            common::wait_out_ttl_async(ttl * 3).await;
            assert!(!hold.lost.is_cancelled());
            hold.owner
        })
        .await
        .expect("with_lock");
    // with_lock returned after releasing; check the body's end state via a second run below.
    assert!(owner_counts(&servers, KEY).iter().all(Option::is_none));

    let guard = relock.guard(KEY, ttl).await.expect("guard");
    assert_ne!(guard.hold().owner, owner);
    common::wait_out_ttl_async(ttl * 3).await;
    let held = owner_counts(&servers, KEY);
    assert!(
        held.iter()
            .all(|h| h.as_ref().is_some_and(|(o, _)| *o == guard.hold().owner)),
        "after 3 ttl: {held:?}"
    );
    assert!(guard.valid_until() > Instant::now());
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    guard.release().await.expect("release");
    assert!(owner_counts(&servers, KEY).iter().all(Option::is_none));
    let renewed: Vec<i64> = conns
        .iter_mut()
        .map(|c| common::info_field(c, "renewed_total"))
        .collect();
    // A quiet window longer than a renewal's period: no renewal may come in it.
    common::wait_out_ttl_async(ttl + ttl / 2).await;
    assert!(owner_counts(&servers, KEY).iter().all(Option::is_none));
    let renewed_later: Vec<i64> = conns
        .iter_mut()
        .map(|c| common::info_field(c, "renewed_total"))
        .collect();
    assert_eq!(renewed, renewed_later, "renewed after release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lock_is_signalled_to_the_body() {
    let servers = masters(5);
    let relock = client_of(&servers);
    let ttl = Duration::from_secs(1);
    let guard = relock.guard(KEY, ttl).await.expect("guard");
    let lost = guard.lost();
    // The round returned at quorum; let the other grants land first, or one landing after the
    // force-release below would rightly keep a quorum (and the lock) alive.
    assert!(common::eventually(Duration::from_secs(2), || owner_counts(
        &servers, KEY
    )
    .iter()
    .all(Option::is_some)));
    for s in &servers[..3] {
        force_release(s, KEY);
    }
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), lost.cancelled())
        .await
        .expect("loss signalled");
    eprintln!(
        "loss signalled {:?} after the force-release",
        started.elapsed()
    );
    assert!(guard.is_lost());
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    // What was left on the minority is released too.
    assert!(common::eventually(Duration::from_secs(2), || owner_counts(
        &servers, KEY
    )
    .iter()
    .all(Option::is_none)));

    // The same through with_lock: the body learns of it and stops early.
    let servers_ref = &servers;
    let outcome = relock
        .with_lock(KEY, ttl, |hold| async move {
            for s in servers_ref {
                force_release(s, &hold.key);
            }
            match tokio::time::timeout(Duration::from_secs(10), hold.lost.cancelled()).await {
                Ok(()) => "lost",
                Err(_) => "not told",
            }
        })
        .await
        .expect("with_lock");
    assert_eq!(outcome, "lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_holds_count_on_every_master() {
    let servers = masters(5);
    let relock = client_of(&servers);
    let ttl = Duration::from_secs(10);
    let owner = Relock::new_owner();
    let outer = relock.reenter(KEY, &owner, ttl).await.expect("first hold");
    let inner = outer.reenter(ttl).await.expect("reentered");
    assert_eq!(inner.owner(), owner);
    assert_eq!(inner.token(), outer.token(), "reentering keeps the token");
    assert!(owner_counts(&servers, KEY)
        .iter()
        .all(|h| *h == Some((owner.clone(), 2))));

    let other = relock
        .reenter(KEY, &Relock::new_owner(), ttl)
        .await
        .expect_err("another owner");
    assert!(matches!(other, Error::NoQuorum { .. }));

    inner.release().await.expect("inner release");
    assert!(owner_counts(&servers, KEY)
        .iter()
        .all(|h| *h == Some((owner.clone(), 1))));
    outer.release().await.expect("outer release");
    assert!(owner_counts(&servers, KEY).iter().all(Option::is_none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_acquire_with_one_server() {
    let servers = masters(1);
    let relock = client_of(&servers);
    let ttl = Duration::from_secs(10);
    let held = relock.acquire(KEY, ttl).await.expect("first holder");

    let timed_out = relock
        .acquire_wait(KEY, ttl, Some(Duration::from_millis(200)))
        .await
        .expect_err("held");
    assert!(
        matches!(timed_out, Error::WaitTimeout { .. }),
        "{timed_out}"
    );

    // A wait that is given up (its future dropped) leaves the queue at once: its connection
    // closes, so it can never be granted a lock nobody would release.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        relock.acquire_wait(KEY, ttl, None),
    )
    .await;
    assert!(abandoned.is_err());
    assert!(common::eventually(Duration::from_secs(2), || waiters(
        &mut servers[0].conn(),
        KEY
    ) == 0));

    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            let lock = relock.acquire_wait(KEY, ttl, None).await;
            (lock, Instant::now())
        })
    };
    assert!(common::eventually(Duration::from_secs(2), || waiters(
        &mut servers[0].conn(),
        KEY
    ) == 1));
    assert!(!waiter.is_finished(), "got a held lock");
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (lock, got_at) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted")
        .expect("task");
    let lock = lock.expect("acquired after release");
    eprintln!("1-server hand-off after {:?}", got_at - released_at);
    assert!(got_at - released_at < Duration::from_secs(2));
    assert!(lock.is_valid());
    assert_eq!(
        owner_count(&servers[0], KEY).map(|h| h.0),
        Some(lock.owner().to_string())
    );
    lock.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_acquire_with_five_masters() {
    let servers = masters(5);
    let relock = client_of(&servers);
    let ttl = Duration::from_secs(5);
    let held = relock.acquire(KEY, ttl).await.expect("first holder");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            let lock = relock
                .acquire_wait(KEY, ttl, Some(Duration::from_secs(20)))
                .await;
            (lock, Instant::now())
        })
    };
    // The waiter is queued on a quorum of masters (every one, once the first holder's late
    // grants have landed): it cannot have won.
    assert!(
        common::eventually_async(Duration::from_secs(20), || async {
            servers
                .iter()
                .filter(|s| waiters(&mut s.conn(), KEY) == 1)
                .count()
                >= 3
        })
        .await,
        "the waiter never queued on a quorum"
    );
    assert!(!waiter.is_finished());
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (lock, got_at) = waiter.await.expect("task");
    let lock = lock.expect("acquired after release");
    eprintln!("5-master hand-off after {:?}", got_at - released_at);
    assert!(got_at - released_at < Duration::from_secs(3));
    assert!(lock.tokens().len() >= 3);
    lock.release().await.expect("release");

    // Several waiters on several masters: all get it in turn, never two at once, no deadlock.
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let relock = relock.clone();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let lock = relock
                    .acquire_wait(KEY, ttl, Some(Duration::from_secs(30)))
                    .await
                    .expect("no deadlock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                tokio::time::sleep(Duration::from_millis(20)).await; // the work under the lock (not a wait)
                inside.store(false, Ordering::SeqCst);
                lock.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(40), t)
            .await
            .expect("waiters finish")
            .expect("waiter");
    }
}
