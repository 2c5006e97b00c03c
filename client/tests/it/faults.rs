//! relock-client under faults and misuse, against real servers: loss signalled in time,
//! permanent errors failing at once, durations out of range, one server named twice, and the
//! guard's renewal schedule.
use relock_testkit as common;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Error, Options, Relock};
use relock_testkit::client::{patient, patient_client, relock_with};
use tokio::time::Instant;

const KEY: &str = "jobs:faults";

/// Owner of the lock at `key` on `server`, from LOCK.INFO.
fn owner_on(server: &Server, key: &str) -> Option<String> {
    let info: Option<HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(&mut server.conn())
        .expect("LOCK.INFO");
    info.map(|i| redis::from_redis_value(&i["owner"]).expect("owner"))
}

/// How many error replies of `code` (`ERR`, `NOAUTH`, `WRONGTYPE`...) the server sent.
fn error_replies(server: &Server, code: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(&mut server.conn())
        .expect("INFO errorstats");
    let prefix = format!("errorstat_{code}:count=");
    info.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&prefix)?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The guard must tell the body that its lock is gone no later than `valid_until`, even while
/// a renewal is still waiting for masters that stopped answering (issue 11, problem 1).
///
/// The guard cancels `lost` `loss_lead` (at most 20 ms) ahead of the validity's end; the test
/// sees it when its own task is next scheduled, which on a busy machine can be much later
/// (23 ms was seen in issue 19, 784 ms with a 2 s ttl on two cores running `yes` and three
/// builds). A guard that waited for its renewal round, the bug this is about, tells the body
/// only once the round gives up: the first round after the stop starts ttl / 3 after the last
/// proof and waits out the node timeout, so it is late by at least node timeout - 2 / 3 ttl.
/// The node timeout is long (5 s), the slack allowed is half of that lateness (at least 1.8 s
/// here), and the guard's own account of the loss (how long it went unrenewed) is checked
/// against the same bound, so that a test task scheduled late is told from a guard that is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_is_signalled_no_later_than_valid_until() {
    const NODE_TIMEOUT: Duration = Duration::from_secs(5);
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let mut leads = Vec::new();
    for ttl in [2000, 300, 2000, 300].map(Duration::from_millis) {
        let slack = (NODE_TIMEOUT - ttl * 2 / 3) / 2;
        let relock = relock_with(
            &refs,
            Options {
                node_timeout: NODE_TIMEOUT,
                ..Options::default()
            },
        );
        let guard = relock.guard(KEY, ttl).await.expect("guard");
        let owner = guard.hold().owner.clone();
        assert!(eventually(Duration::from_secs(2), || servers
            .iter()
            .all(|s| owner_on(s, KEY).as_deref() == Some(owner.as_str()))));
        // A majority stops answering: every renewal from now on waits out the node timeout.
        let resume = common::Resume(vec![&servers[1], &servers[2]]);
        servers[1].signal("STOP");
        servers[2].signal("STOP");
        let lost = guard.lost();
        tokio::time::timeout(ttl * 3, lost.cancelled())
            .await
            .expect("loss signalled");
        let told_at = Instant::now();
        let valid_until = guard.valid_until();
        drop(resume);
        let lead = valid_until.checked_duration_since(told_at);
        let loss = tokio::time::timeout(NODE_TIMEOUT * 2, guard.hold().loss.explained())
            .await
            .ok()
            .flatten();
        let seen = loss
            .as_ref()
            .map(|l| format!("unrenewed for {:?} when lost: {}", l.unrenewed, l.seen));
        eprintln!(
            "ttl {ttl:?}: loss signalled {}; the guard saw it {seen:?}",
            match lead {
                Some(d) => format!("{d:?} before valid_until"),
                None => format!("{:?} AFTER valid_until", told_at - valid_until),
            }
        );
        assert!(
            told_at <= valid_until + slack,
            "ttl {ttl:?}: loss signalled {:?} after the validity ended ({seen:?})",
            told_at - valid_until
        );
        // Its validity counts from the last renewal's start, less the drift allowance.
        let unrenewed = loss
            .as_ref()
            .map(|l| l.unrenewed)
            .expect("the loss explained");
        assert!(
            unrenewed <= ttl + slack,
            "ttl {ttl:?}: the guard noticed the loss after {unrenewed:?} unrenewed ({seen:?})"
        );
        leads.push(lead);
        assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
        for s in &servers {
            let _: i64 = redis::cmd("LOCK.FORCERELEASE")
                .arg(KEY)
                .query(&mut s.conn())
                .expect("force release");
        }
    }
    eprintln!("leads: {leads:?}");
}

/// A server without the module, one that refuses the login, and a key of another type are
/// not going to change by retrying: fail at once, and say what is wrong (problem 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_fail_at_once() {
    let ttl = Duration::from_secs(10);
    // A retry would first pause for at least 5 s (retry_delay / 2): an answer well within
    // that came without one.
    let options = Options {
        retry_count: 3,
        retry_delay: Duration::from_secs(10),
        ..patient()
    };
    let no_retry = Duration::from_secs(4);
    let at_once = |started: Instant, what: &str| {
        let took = started.elapsed();
        assert!(
            took < no_retry,
            "{what}: failed only after {took:?}: retried"
        );
    };

    // No module: unknown command.
    let bare = Server::without_module(&[]);
    let relock = relock_with(&[&bare], options.clone());
    let started = Instant::now();
    let err = relock.acquire(KEY, ttl).await.expect_err("no module");
    at_once(started, "no module");
    assert!(err.is_permanent(), "{err}");
    let text = err.to_string();
    assert!(text.contains("unknown command"), "{text}");
    assert!(
        text.contains("module"),
        "says the module is missing: {text}"
    );
    let waited = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("an unlimited wait on a server without the module must fail, not retry forever");
    let text = waited.expect_err("no module").to_string();
    assert!(text.contains("unknown command"), "{text}");

    // Login refused: no password, and a wrong one.
    let locked = Server::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query(&mut locked.conn())
        .expect("CONFIG SET requirepass");
    let relock = relock_with(&[&locked], options.clone());
    let started = Instant::now();
    let err = relock.acquire(KEY, ttl).await.expect_err("no password");
    at_once(started, "no password");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    let wrong = format!("redis://:nope@127.0.0.1:{}/", locked.port);
    let relock = Relock::with_options(&[wrong], options.clone()).expect("client");
    let started = Instant::now();
    let err = relock.acquire(KEY, ttl).await.expect_err("wrong password");
    at_once(started, "wrong password");
    assert!(err.to_string().contains("password"), "{err}");
    let waited = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("a refused login must fail, not retry forever");
    assert!(waited.expect_err("wrong password").is_permanent());

    // The key holds a string: one LOCK.ACQUIRE, answered WRONGTYPE, and nothing more.
    let server = Server::start();
    let _: () = redis::cmd("SET")
        .arg(KEY)
        .arg("not a lock")
        .query(&mut server.conn())
        .expect("SET");
    let relock = relock_with(&[&server], options.clone());
    let err = relock.acquire(KEY, ttl).await.expect_err("WRONGTYPE");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let waited = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("WRONGTYPE must fail, not wait forever");
    assert!(waited
        .expect_err("WRONGTYPE")
        .to_string()
        .contains("WRONGTYPE"));
    relock.settle().await;
    assert_eq!(error_replies(&server, "WRONGTYPE"), 2, "one per call");

    // Redlock: two of three masters without the module can never make a quorum...
    let good = Server::start();
    let bare2 = Server::without_module(&[]);
    let relock = relock_with(&[&good, &bare, &bare2], options.clone());
    let waited = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("no quorum is possible: fail at once");
    let text = waited.expect_err("2 of 3 without the module").to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{}", bare2.port)),
        "{text}"
    );
    relock.settle().await;
    assert_eq!(owner_on(&good, KEY), None, "released again");
    // ...but one of three is only a minority: the lock is still taken.
    let good2 = Server::start();
    let relock = relock_with(&[&good, &bare, &good2], options);
    let lock = relock.acquire(KEY, ttl).await.expect("2 of 3 grant");
    assert_eq!(lock.tokens().len(), 2);
    lock.release().await.expect("release");
}

/// A renewal that a quorum answers with a permanent error (the key was overwritten with
/// another type) ends the hold at once, not when the validity runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwritten_key_is_a_loss_at_the_next_renewal() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let ttl = Duration::from_secs(12);
    let guard = relock.guard(KEY, ttl).await.expect("guard");
    let _: () = redis::cmd("SET")
        .arg(KEY)
        .arg("overwritten")
        .query(&mut server.conn())
        .expect("SET");
    let started = Instant::now();
    tokio::time::timeout(ttl * 2, guard.lost().cancelled())
        .await
        .expect("loss signalled");
    let told_at = Instant::now();
    eprintln!(
        "overwritten key: loss signalled after {:?}",
        told_at - started
    );
    // The next renewal (ttl / 3 after the grant) finds a string: that is the loss, not the
    // end of the validity some 8 seconds later.
    assert!(
        told_at + ttl / 3 < guard.valid_until(),
        "loss signalled only {:?} before the validity ended",
        guard.valid_until() - told_at
    );
}

/// A wait longer than the server accepts (10^12 ms) or than an `Instant` can hold is clamped,
/// not rejected by every master forever or a panic (problem 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_waits_are_clamped() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
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
    let relock = patient_client(&[&server]);
    let before: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        // What the drift allowance (2 ms + 1 %) leaves (almost) nothing of: 1 and 2 ms waited
        // forever on a free key, 3 ms was granted and lost at once (issue 19, problem 5).
        Duration::from_millis(1),
        Duration::from_millis(2),
        Duration::from_millis(3),
        Duration::from_millis(4),
        Duration::from_secs(2_000_000_000),
        Duration::MAX,
    ] {
        let err = relock.acquire(KEY, ttl).await.expect_err("invalid");
        assert!(matches!(err, Error::InvalidTtl(_)), "{ttl:?}: {err}");
        assert!(
            err.to_string().contains("smallest usable ttl is 5 ms"),
            "{err}"
        );
        assert!(err.is_permanent());
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
    // The smallest usable ttl is taken: every try runs its round (at worst it outlasts its 5 ms
    // of validity and says so, ValidityExhausted: a round took 14 ms in a fresh `make test` at
    // load 14), and one of them holds the lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match relock.acquire(KEY, relock_client::limits::MIN_TTL).await {
            Ok(lock) => {
                let _ = lock.release().await;
                break;
            }
            Err(err @ Error::ValidityExhausted { .. }) => {
                assert!(Instant::now() < deadline, "5 ms for 30 s: {err}")
            }
            Err(err) => panic!("5 ms: {err}"),
        }
    }
}

/// An ACL user (an application's own, as production setups have) that may wait for a lock
/// but not run LOCK.RENEW: the renewal that measures a waited-for grant fails for good, so
/// acquire_wait fails at once with that error instead of acquiring and releasing a free lock
/// forever (issue 19, problem 4); one that may not release gets Error::Permanent from
/// release, judged like every other round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_are_judged_the_same_at_every_step() {
    let server = Server::start();
    let acl = |user: &str, rule: &str| {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg(&["on", ">pw", "~*", "&*", "+@all", rule][..])
            .query(&mut server.conn())
            .expect("ACL SETUSER");
    };
    acl("no-renew", "-lock.renew");
    acl("no-release", "-lock.release");
    let url = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}/", server.port);
    let ttl = Duration::from_secs(10);

    let relock = Relock::with_options(&[url("no-renew")], patient()).expect("client");
    let err = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("an ACL refusal after the wait must end it, not start it again forever")
        .expect_err("LOCK.RENEW forbidden");
    assert!(err.is_permanent(), "{err}");
    assert!(err.to_string().contains("NOPERM"), "{err}");
    assert_eq!(err.failed_nodes(), [format!("127.0.0.1:{}", server.port)]);
    relock.settle().await;
    assert_eq!(owner_on(&server, KEY), None, "the grant was given back");

    let relock = Relock::with_options(&[url("no-release")], patient()).expect("client");
    let lock = relock.acquire(KEY, ttl).await.expect("acquire");
    let err = lock.release().await.expect_err("LOCK.RELEASE forbidden");
    assert!(matches!(err, Error::Permanent { .. }), "{err}");
    assert!(err.to_string().contains("NOPERM"), "{err}");
}

/// `127.0.0.1:P` and `localhost:P` are one server: it must not count twice toward a quorum
/// (problem 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_named_twice_is_refused() {
    let a = Server::start();
    let b = Server::start();
    let list = [
        format!("redis://127.0.0.1:{}", a.port),
        format!("redis://localhost:{}/", a.port),
        b.url(),
    ];
    match Relock::new(&list) {
        Ok(relock) => {
            let lock = relock.acquire(KEY, Duration::from_secs(10)).await;
            panic!(
                "one server named twice was accepted as two masters (acquire: {:?})",
                lock.map(|l| l.tokens().len())
            );
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&a.port.to_string()),
                "names the server: {text}"
            );
        }
    }
    // The same server under another database number is still the same server.
    let list = [format!("{}0", a.url()), format!("{}1", a.url()), b.url()];
    assert!(Relock::new(&list).is_err(), "db 0 and db 1 of one server");
    // Distinct servers are fine, and a cluster's seeds may repeat.
    assert!(Relock::new(&[a.url(), b.url()]).is_ok());
    assert!(Relock::cluster(&[a.url(), a.url()], Options::default()).is_ok());
}

/// IPv6 masters are named `[addr]:port`, as in a URL.
#[test]
fn ipv6_masters_print_in_brackets() {
    let relock = Relock::new(&["redis://[::1]:6390", "redis://127.0.0.1:6391"]).expect("client");
    assert_eq!(relock.nodes(), vec!["[::1]:6390", "127.0.0.1:6391"]);
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

/// Dropping a guard releases the lock (in the background) long before its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let guard = relock
        .guard(KEY, Duration::from_secs(30))
        .await
        .expect("guard");
    assert!(owner_on(&server, KEY).is_some());
    drop(guard);
    assert!(
        eventually(Duration::from_secs(3), || owner_on(&server, KEY).is_none()),
        "a dropped guard left its lock behind"
    );
}

/// The guard renews every ttl / 3: the server sees one `lock.renewed` event per third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_renews_every_third_of_the_ttl() {
    let server = Server::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ed")
        .query(&mut server.conn())
        .expect("CONFIG SET");
    let mut events = server.conn();
    events
        .send_packed_command(
            &redis::cmd("SUBSCRIBE")
                .arg("__keyevent@0__:lock.renewed")
                .get_packed_command(),
        )
        .expect("SUBSCRIBE");
    let _ = events.recv_response().expect("subscribed");
    // Read events on a thread of its own; it ends when the server goes away.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while events.recv_response().is_ok() {
            if tx.send(std::time::Instant::now()).is_err() {
                break;
            }
        }
    });

    let relock = patient_client(&[&server]);
    let ttl = Duration::from_secs(3);
    let every = ttl / 3;
    // Before the grant, so that every renewal is measured from earlier than the guard did.
    let asked = std::time::Instant::now();
    let guard = relock.guard(KEY, ttl).await.expect("guard");
    // The first four, as the reader thread sees them: every second, at about 1, 2, 3 and 4 s
    // (never sooner; later only on a busy machine, which may also wake this test or its
    // reader late: it waits for the events, not for a window of time to count them in).
    let renewals: Vec<Duration> = tokio::task::block_in_place(|| {
        (1..=4)
            .map(|n| match rx.recv_timeout(ttl * 2) {
                Ok(at) => at - asked,
                Err(e) => panic!("renewal {n} did not come: {e}"),
            })
            .collect()
    });
    guard.release().await.expect("release");
    eprintln!("renewals at {renewals:?} (ttl {ttl:?})");
    // Never sooner: the k-th renewal waits k thirds at least, each after the one before
    // ended. (A renewal seen late makes the next gap look short, never the sum.)
    for (k, at) in renewals.iter().enumerate() {
        assert!(
            *at >= every * (k as u32 + 1) - Duration::from_millis(50),
            "renewal {} at {at:?}: {renewals:?}",
            k + 1
        );
    }
    // Not much later either: each within two thirds of the one before.
    for pair in renewals.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap <= every * 2, "renewals {gap:?} apart: {renewals:?}");
    }
}

/// With several masters, a waiter granted by a minority gives that grant back after
/// `max_partial_hold` instead of sitting on it (so two waiters can never block each other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_grants_are_given_back_after_max_partial_hold() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    // Another owner holds masters 1 and 2; master 0 is free, so a waiter gets only it.
    for s in &servers[1..] {
        let _: Option<u64> = redis::cmd("LOCK.ACQUIRE")
            .arg(KEY)
            .arg("other")
            .arg(60_000)
            .query(&mut s.conn())
            .expect("LOCK.ACQUIRE");
    }
    let partial = Duration::from_millis(300);
    let relock = relock_with(
        &refs,
        Options {
            max_partial_hold: partial,
            retry_delay: Duration::from_millis(400),
            ..patient()
        },
    );
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(KEY, Duration::from_secs(10), Some(Duration::from_secs(4)))
                .await
        })
    };
    // The waiter takes master 0 and then lets it go again, over and over. Watched for 3 s at
    // most: well before the wait's 4 s limit, whose end would free master 0 too.
    let seen_held = std::cell::Cell::new(false);
    let (seen, free_master) = (&seen_held, &servers[0]);
    let seen_free_after = common::eventually_async(Duration::from_secs(3), || async move {
        match owner_on(free_master, KEY) {
            Some(_) => {
                seen.set(true);
                false
            }
            None => seen.get(),
        }
    })
    .await;
    assert!(seen_held.get(), "the waiter never took the free master");
    assert!(seen_free_after, "the waiter kept its minority grant");
    let err = waiter.await.expect("task").expect_err("no quorum in 4 s");
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert!(
        eventually(Duration::from_secs(2), || owner_on(&servers[0], KEY)
            .is_none()),
        "nothing left on the free master"
    );
}

/// LockGuard::renew_now renews at once (not at the next ttl / 3) and says so; once the lock
/// is gone, it says that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_now_renews_at_once_or_reports_the_loss() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let ttl = Duration::from_secs(30);
    let guard = relock.guard(KEY, ttl).await.expect("guard");
    let first = guard.valid_until();
    // No event to wait for: the first validity has to age (a time that must run its length),
    // so that the renewal's, measured from a round of its own, is later by more than a
    // round's time can make up.
    common::wait_out_ttl_async(Duration::from_millis(50)).await;
    let started = Instant::now();
    let renewed = guard.renew_now().await.expect("renewed");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited for the schedule"
    );
    assert!(renewed > first, "{renewed:?} <= {first:?}");
    assert_eq!(guard.valid_until(), renewed);
    let _: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg(KEY)
        .query(&mut server.conn())
        .expect("force release");
    let err = guard.renew_now().await.expect_err("lost");
    assert!(matches!(err, Error::Lost { .. }), "{err}");
    assert!(guard.is_lost());
}
