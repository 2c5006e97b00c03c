//! Beyond one key and one permit, from relock-client against real servers: several permits,
//! downgrade, several keys (`acquire_all`, `wait_all` and their guard), and the restart grace.
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Error, Mode, Options, Relock};
use relock_testkit::ask::info_text as info;
use relock_testkit::ask::{holder, waiters};
use relock_testkit::client::{patient, patient_client};

const TTL: Duration = Duration::from_secs(30);
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_sum_to_the_limit_and_large_requests_do_not_starve() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
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
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "pool") == 1));
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
    let relock = patient_client(&[&server]);
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    let mut write = relock.acquire("report", TTL).await.expect("write");
    let token = write.token();
    let reader = {
        let readers = readers.clone();
        tokio::spawn(async move { readers.acquire_wait("report", TTL, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "report") == 1));
    // A writer queued behind the reader stays queued through the downgrade.
    let writer = {
        let relock = relock.clone();
        tokio::spawn(async move { relock.acquire_wait("report", TTL, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "report") == 2));
    write.downgrade().await.expect("downgrade");
    assert_eq!(write.mode(), Mode::shared());
    assert_eq!(write.token(), token, "the same hold");
    let read = tokio::time::timeout(WITHIN, reader)
        .await
        .expect("granted with the downgrade")
        .expect("task")
        .expect("read");
    assert_eq!(info(&server, "report").expect("held")["holders"], "2");
    assert_eq!(
        waiters(&mut server.conn(), "report"),
        1,
        "the writer still waits"
    );
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
    let relock = patient_client(&refs);
    let guard = relock
        .guard("catalog", Duration::from_millis(900))
        .await
        .expect("guard");
    guard.downgrade().await.expect("downgrade");
    // A quorum downgraded (the third may not even have the grant yet).
    let shared = servers
        .iter()
        .filter(|s| info(s, "catalog").is_some_and(|i| i["mode"] == "shared"))
        .count();
    assert!(shared >= 2, "{shared} of 3 shared");
    // A reader joins at once; the guard keeps its own shared hold alive past its ttl.
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    let read = readers.acquire("catalog", TTL).await.expect("read");
    let renewed = guard.renew_now().await.expect("renewed");
    assert!(renewed > tokio::time::Instant::now());
    read.release().await.expect("release");
    guard.release().await.expect("release");
    relock.settle().await;
    for s in &servers {
        assert!(eventually(WITHIN, || info(s, "catalog").is_none()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_all_takes_every_key_or_none_with_one_token() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let group = relock
        .acquire_all(&["acct:2", "acct:1", "ledger"], TTL)
        .await
        .expect("group");
    assert_eq!(group.keys(), ["acct:1", "acct:2", "ledger"]);
    let token = group.token().expect("token");
    for key in group.keys() {
        assert_eq!(group.token_of(key), Some(token), "one token for the group");
        assert_eq!(
            holder(&server, key).map(|(owner, _)| owner).as_deref(),
            Some(group.owner())
        );
    }
    // Overlapping: nothing of it is taken, not even the free key.
    let other = Relock::with_options(
        &[server.url()],
        Options {
            retry_count: 0,
            ..patient()
        },
    )
    .expect("client");
    let err = other
        .acquire_all(&["acct:3", "ledger"], TTL)
        .await
        .expect_err("ledger is held");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    assert!(holder(&server, "acct:3").is_none(), "all or nothing");
    let mut group = group;
    group.extend(TTL).await.expect("MRENEW");
    group.release().await.expect("MRELEASE");
    for key in ["acct:1", "acct:2", "ledger"] {
        assert!(holder(&server, key).is_none());
    }
    // Checked before any server is asked.
    for keys in [vec![], vec!["a", "a"]] {
        let err = relock.acquire_all(&keys, TTL).await.expect_err("refused");
        assert!(matches!(err, Error::InvalidKeys(_)), "{err}");
    }
    let readers = relock.with_mode(Mode::shared()).expect("shared");
    let err = readers
        .wait_all(&["a", "b"], TTL, None)
        .await
        .expect_err("shared");
    assert!(matches!(err, Error::InvalidKeys(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_most_keys_a_group_may_have() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let keys: Vec<String> = (0..relock_client::MAX_KEYS)
        .map(|i| format!("k:{i:03}"))
        .collect();
    let started = tokio::time::Instant::now();
    let group = relock.acquire_all(&keys, TTL).await.expect("256 keys");
    eprintln!("acquire_all of 256 keys: {:?}", started.elapsed());
    assert_eq!(group.keys().len(), 256);
    let guard = group.keep_alive();
    guard.renew_now().await.expect("renewed as one");
    guard.release().await.expect("released");
    assert!(holder(&server, "k:255").is_none());
    // 256 keys the slow way: the first is held, so every key is waited for one by one.
    let first = relock.acquire("k:000", TTL).await.expect("k:000");
    let waiting = {
        let (relock, keys) = (relock.clone(), keys.clone());
        tokio::spawn(async move { relock.wait_all(&keys, TTL, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "k:000") == 1));
    let started = tokio::time::Instant::now();
    first.release().await.expect("release");
    let group = tokio::time::timeout(WITHIN, waiting)
        .await
        .expect("granted")
        .expect("task")
        .expect("256 keys, one by one");
    eprintln!("wait_all of 256 keys, one by one: {:?}", started.elapsed());
    assert!(group.keys().iter().all(|k| group.token_of(k).is_some()));
    group.release().await.expect("release");
    assert!(holder(&server, "k:128").is_none());
    let mut more = keys.clone();
    more.push("k:256".into());
    let err = relock.acquire_all(&more, TTL).await.expect_err("257");
    assert!(matches!(err, Error::InvalidKeys(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_waits_for_each_key_in_order_and_renews_what_it_holds() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    // b is held by someone else: the group waits for it, holding a meanwhile.
    let b = relock.acquire("b", TTL).await.expect("b");
    // 2 s (renewed every 667 ms): a 600 ms ttl lost a on a loaded machine when one renewal
    // came 400 ms late.
    let ttl = Duration::from_secs(2);
    let waiting = {
        let relock = relock.clone();
        tokio::spawn(async move { relock.wait_all(&["c", "b", "a"], ttl, Some(WITHIN)).await })
    };
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "b") == 1));
    let a_owner = holder(&server, "a")
        .map(|(owner, _)| owner)
        .expect("a is held while b is waited for");
    // Longer than the ttl (a time that must run its length): a is renewed meanwhile.
    common::wait_out_ttl_async(ttl * 2).await;
    assert_eq!(
        holder(&server, "a").map(|(owner, _)| owner),
        Some(a_owner.clone()),
        "a renewed"
    );
    assert!(holder(&server, "c").is_none(), "c only after b");
    b.release().await.expect("release b");
    let group = tokio::time::timeout(WITHIN, waiting)
        .await
        .expect("granted")
        .expect("task")
        .expect("group");
    assert_eq!(group.owner(), a_owner);
    assert!(group.is_valid());
    for key in ["a", "b", "c"] {
        assert_eq!(
            holder(&server, key).map(|(owner, _)| owner).as_deref(),
            Some(group.owner())
        );
        assert!(group.token_of(key).is_some());
    }
    group.release().await.expect("release");
    // A wait that runs out gives back what it took.
    let c = relock.acquire("c", TTL).await.expect("c");
    let err = relock
        .wait_all(&["a", "b", "c"], TTL, Some(Duration::from_millis(300)))
        .await
        .expect_err("c is held");
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert!(holder(&server, "a").is_none() && holder(&server, "b").is_none());
    c.release().await.expect("release");
}

/// Clients wait for overlapping key sets given in opposite orders, many times over: never two
/// holders of one key, never a deadlock (every wait ends well within its limit).
///
/// What could deadlock is the wait key by key (`LOCK.MACQUIRE` takes a group at once or not
/// at all), so a fourth client keeps queueing for k1, the key every set shares, and holding
/// it: a group's `LOCK.MACQUIRE` then finds k1 taken and the group waits for its keys one by
/// one. The test checks that most groups did.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_orders_never_deadlock() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    const ROUNDS: usize = 150;
    let server = Server::start();
    let held: Arc<Vec<AtomicU32>> = Arc::new((0..4).map(|_| AtomicU32::new(0)).collect());
    let take = |held: &[AtomicU32], key: &str| {
        let i: usize = key[1..].parse().expect("index");
        assert_eq!(
            held[i].fetch_add(1, Ordering::SeqCst),
            0,
            "{key} held twice"
        );
    };
    let give = |held: &[AtomicU32], key: &str| {
        let i: usize = key[1..].parse().expect("index");
        held[i].fetch_sub(1, Ordering::SeqCst);
    };
    let done = Arc::new(AtomicBool::new(false));
    let blocker = {
        let relock = patient_client(&[&server]);
        let (held, done) = (held.clone(), done.clone());
        tokio::spawn(async move {
            let mut taken = 0;
            while !done.load(Ordering::SeqCst) {
                let lock = relock
                    .acquire_wait("k1", Duration::from_secs(10), Some(WITHIN))
                    .await
                    .unwrap_or_else(|e| panic!("k1's own waiter, after {taken}: {e}"));
                take(&held, "k1");
                tokio::time::sleep(Duration::from_millis(1)).await; // the work under k1 (not a wait)
                give(&held, "k1");
                lock.release().await.expect("release k1");
                taken += 1;
            }
            taken
        })
    };
    let sets: [&[&str]; 3] = [&["k0", "k1", "k2"], &["k2", "k1", "k0"], &["k3", "k1"]];
    let mut tasks = Vec::new();
    for (who, keys) in sets.into_iter().enumerate() {
        let relock = patient_client(&[&server]);
        let held = held.clone();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        tasks.push(tokio::spawn(async move {
            let mut slow_path = 0;
            for round in 0..ROUNDS {
                let group = relock
                    .wait_all(&keys, Duration::from_secs(10), Some(WITHIN))
                    .await
                    .unwrap_or_else(|e| panic!("client {who}, round {round}: {e}"));
                // Keys waited for one by one have tokens of their own.
                if group
                    .keys()
                    .iter()
                    .any(|k| group.token_of(k) != group.token())
                {
                    slow_path += 1;
                }
                for key in group.keys() {
                    take(&held, key);
                }
                tokio::task::yield_now().await;
                for key in group.keys() {
                    give(&held, key);
                }
                group.release().await.expect("release");
            }
            slow_path
        }));
    }
    let mut slow = 0;
    for task in tasks {
        slow += tokio::time::timeout(WITHIN * 6, task)
            .await
            .expect("no deadlock")
            .expect("task");
    }
    done.store(true, Ordering::SeqCst);
    let blocked = tokio::time::timeout(WITHIN, blocker)
        .await
        .expect("k1's own waiter is stuck")
        .expect("blocker");
    eprintln!(
        "{} groups, {slow} waited for key by key; k1 taken alone {blocked} times",
        ROUNDS * 3
    );
    assert!(
        slow * 2 > ROUNDS * 3,
        "only {slow} of {} groups waited key by key: the test did not exercise the ordered wait",
        ROUNDS * 3
    );
}

/// Redlock with the restart grace: a majority of masters restarts without its locks during a
/// hold; while the grace lasts they grant nothing (TRYAGAIN counts as a master that did not
/// grant), so nobody else holds the key before the holder's validity has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_restart_grace_keeps_a_second_owner_out() {
    const GRACE_MS: u64 = 2500;
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let options = Options {
        node_timeout: Duration::from_secs(1),
        retry_count: 0,
        ..Options::default()
    };
    let holder = Relock::with_options(&urls, options.clone()).expect("holder");
    let rival = Relock::with_options(&urls, options).expect("rival");
    let ttl = Duration::from_millis(2000);
    let guard = holder.guard("job", ttl).await.expect("guard");
    // Two of three forget the lock (no persistence) and come back in their grace.
    let grace = GRACE_MS.to_string();
    let restarting = tokio::time::Instant::now();
    for s in &mut servers[1..] {
        s.restart_with(&["--relock.restart-grace-ms", &grace]);
    }
    let restarted = tokio::time::Instant::now();
    // The rival tries every few milliseconds until it wins.
    let refused_in_grace = std::cell::Cell::new(0);
    let won = std::cell::RefCell::new(None);
    let (rival, refused, won_ref) = (&rival, &refused_in_grace, &won);
    let rival_won = common::eventually_async(WITHIN, || async move {
        match rival.try_acquire("job", ttl).await {
            Ok(lock) => {
                *won_ref.borrow_mut() = Some((tokio::time::Instant::now(), lock));
                true
            }
            Err(e) => {
                assert!(!e.is_permanent(), "a grace is never a hard error: {e}");
                if e.to_string().contains("restart grace") {
                    refused.set(refused.get() + 1);
                }
                false
            }
        }
    })
    .await;
    assert!(rival_won, "the rival never got it");
    let (won_at, lock) = won.into_inner().expect("won");
    let refused_in_grace = refused_in_grace.get();
    // The holder learns of the loss at its next renewal, and its validity had ended before the
    // rival could win.
    tokio::time::timeout(WITHIN, guard.lost().cancelled())
        .await
        .expect("the holder is told");
    let holder_valid_until = guard.valid_until();
    eprintln!(
        "rival won {:?} after the restart, {:?} after the holder's validity; {refused_in_grace} \
         rounds refused in grace",
        won_at - restarted,
        won_at.saturating_duration_since(holder_valid_until)
    );
    assert!(refused_in_grace > 0);
    assert!(
        won_at >= holder_valid_until,
        "two owners: the rival won {:?} before the holder's validity ended",
        holder_valid_until - won_at
    );
    // Not before a grace had passed since the first of them went down.
    assert!(won_at - restarting >= Duration::from_millis(GRACE_MS));
    lock.release().await.expect("release");
    let _ = guard.release().await;
}

/// Sets `relock.restart-grace-ms` at runtime: the ttl_ms bound changes at once, no grace starts.
fn set_grace(server: &Server, ms: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("relock.restart-grace-ms")
        .arg(ms)
        .query(&mut server.conn())
        .expect("CONFIG SET relock.restart-grace-ms");
}

/// A renewal whose ttl the master refuses (`ERR ttl_ms exceeds relock.restart-grace-ms`, the
/// grace lowered under a hold) changes nothing there: `Lock::extend` says so with
/// `Error::TtlRefused` and keeps its validity, and a guard keeps the hold and renews again,
/// instead of ending it as lost (and releasing it) at the first refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_ttl_keeps_the_hold() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let ttl = Duration::from_millis(3000);

    let mut lock = relock.try_acquire("plain", ttl).await.expect("acquire");
    set_grace(&server, 1000);
    let before = lock.valid_until();
    let err = lock
        .extend(ttl)
        .await
        .expect_err("the ttl is above the grace now");
    assert!(matches!(err, Error::TtlRefused { .. }), "{err}");
    assert!(
        err.is_permanent() && err.to_string().contains("kept"),
        "{err}"
    );
    assert_eq!(lock.valid_until(), before, "nothing changed");
    assert_eq!(
        holder(&server, "plain").map(|(owner, _)| owner).as_deref(),
        Some(lock.owner())
    );
    lock.extend(Duration::from_millis(900))
        .await
        .expect("a ttl within the grace renews");
    lock.release().await.expect("release");
    set_grace(&server, 0);

    let guard = relock.guard("job", ttl).await.expect("guard");
    let renewals = relock_testkit::ask::calls(&server, "lock.renew");
    set_grace(&server, 1000);
    // Two refused renewals: the guard went on after the first.
    assert!(
        common::eventually_async(WITHIN, || async {
            relock_testkit::ask::calls(&server, "lock.renew") >= renewals + 2 || guard.is_lost()
        })
        .await,
        "no renewal came"
    );
    assert!(!guard.is_lost(), "a refused ttl is not a loss");
    assert!(holder(&server, "job").is_some(), "the hold is still there");
    // Once the ttl is allowed again, the next renewal succeeds.
    set_grace(&server, 0);
    tokio::time::timeout(WITHIN, guard.renew_now())
        .await
        .expect("renewed in time")
        .expect("renewed");
    guard.release().await.expect("release");

    // Refused until the validity ends: lost then, and the release says why.
    let guard = relock
        .guard("short", Duration::from_millis(600))
        .await
        .expect("guard");
    set_grace(&server, 300);
    tokio::time::timeout(WITHIN, guard.lost().cancelled())
        .await
        .expect("lost at the validity's end");
    let err = guard.release().await.expect_err("lost");
    assert!(matches!(err, Error::TtlRefused { .. }), "{err}");
}

/// A `PERSIST`ed lock has no expiry: `LOCK.INFO` and `LOCK.HOLDERS` answer ttl -1, which the
/// client decodes as no expiry (`None`), never as 0 ms left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_lock_has_no_expiry() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let lock = relock.try_acquire("kept", TTL).await.expect("acquire");
    let info = &relock.info("kept").await[0];
    let ttl = info
        .result
        .as_ref()
        .expect("info")
        .as_ref()
        .expect("held")
        .ttl;
    assert!(
        ttl.is_some_and(|t| t > Duration::ZERO && t <= TTL),
        "{ttl:?}"
    );
    let persisted: i64 = redis::cmd("PERSIST")
        .arg("kept")
        .query(&mut server.conn())
        .expect("PERSIST");
    assert_eq!(persisted, 1);
    let info = &relock.info("kept").await[0];
    let info = info.result.as_ref().expect("info").as_ref().expect("held");
    assert_eq!(info.ttl, None, "no expiry");
    let holders = &relock.holders("kept", 0).await[0];
    let holders = holders
        .result
        .as_ref()
        .expect("holders")
        .as_ref()
        .expect("held");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].ttl, None, "no expiry");
    lock.release().await.expect("release");
}

/// A group's guard loses the whole group when one key goes, and says which and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_guard_says_which_key_went_and_why() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let keys: Vec<String> = (0..200).map(|i| format!("g:{i:03}")).collect();
    let guard = relock
        .acquire_all(&keys, TTL)
        .await
        .expect("group")
        .keep_alive();
    assert_eq!(guard.hold().keys.len(), 200);
    let _: i64 = redis::cmd("DEL")
        .arg("g:150")
        .query(&mut server.conn())
        .expect("DEL");
    assert!(
        guard.renew_now().await.is_err(),
        "part of the group is gone"
    );
    let asked = tokio::time::Instant::now();
    let loss = tokio::time::timeout(WITHIN, guard.hold().loss.explained())
        .await
        .expect("explained")
        .expect("a loss");
    eprintln!("{loss} (explained {:?} after the loss)", asked.elapsed());
    assert_eq!(loss.reason, relock_client::LossReason::Deleted);
    assert_eq!(loss.key, "g:150");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    // The rest of the group was released after the loss.
    assert!(holder(&server, "g:000").is_none());
}

/// A wait for a group dropped half-way leaves nothing held behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_all_leaves_nothing_behind() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let c = relock.acquire("c", TTL).await.expect("c");
    let waiting = {
        let relock = relock.clone();
        tokio::spawn(async move { relock.wait_all(&["a", "b", "c"], TTL, None).await })
    };
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), "c") == 1));
    assert!(holder(&server, "a").is_some() && holder(&server, "b").is_some());
    waiting.abort();
    let _ = waiting.await;
    relock.settle().await;
    assert!(eventually(WITHIN, || holder(&server, "a").is_none()
        && holder(&server, "b").is_none()
        && waiters(&mut server.conn(), "c") == 0));
    c.release().await.expect("release");
}

/// A master that vanishes during a hold: the loss is told by the validity's end and explained
/// (it cannot know why) within a node timeout more, not left hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_master_cannot_say_why() {
    let mut server = Server::start();
    let node_timeout = Duration::from_millis(300);
    let relock = Relock::with_options(
        &[server.url()],
        Options {
            node_timeout,
            ..Options::default()
        },
    )
    .expect("client");
    let guard = relock
        .guard("gone", Duration::from_millis(1500))
        .await
        .expect("guard");
    server.kill();
    tokio::time::timeout(WITHIN, guard.lost().cancelled())
        .await
        .expect("lost");
    let told = tokio::time::Instant::now();
    let loss = guard.hold().loss.explained().await.expect("a loss");
    let took = told.elapsed();
    eprintln!("{loss} ({took:?} after the loss signal)");
    assert_eq!(loss.reason, relock_client::LossReason::Unknown);
    assert!(took < node_timeout * 3, "{took:?}");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

/// Over three masters, waiters for overlapping keys in opposite orders never deadlock either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_orders_never_deadlock_over_three_masters() {
    const ROUNDS: usize = 40;
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let mut tasks = Vec::new();
    for keys in [["r0", "r1", "r2"], ["r2", "r1", "r0"]] {
        let relock = patient_client(&refs);
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let group = relock
                    .wait_all(&keys, Duration::from_secs(10), Some(WITHIN))
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
                group.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(WITHIN * 4, task)
            .await
            .expect("no deadlock")
            .expect("task");
    }
}
