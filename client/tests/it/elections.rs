//! Elections against real servers: candidates served in arrival order, the next one leading
//! once the leader dies (within its ttl) or resigns (in the same step), observers seeing every
//! leader and a term that went backwards, the refusals of clients that cannot hold an election,
//! and the owners candidates proclaim.
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Command, Error, LeaderChange, Mode, Observer, Relock, Reply};
use relock_testkit::ask::waiters;
use relock_testkit::client::{patient, patient_client};
use tokio::sync::oneshot;
use tokio::time::Instant;

const KEY: &str = "service:leader";
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// A candidate in a process of its own, as far as the server can tell: its own runtime and
/// connections. `crash` ends that runtime at once, as a killed process ends (no release: its
/// hold stays until its ttl ends).
struct Candidate {
    runtime: Option<tokio::runtime::Runtime>,
    won: Option<oneshot::Receiver<(u64, Instant)>>,
    resign: Option<oneshot::Sender<()>>,
    resigned: Option<oneshot::Receiver<Result<(), Error>>>,
}

impl Candidate {
    fn start(server: &Server, value: &str, ttl: Duration) -> Candidate {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (won_tx, won) = oneshot::channel();
        let (resign, resign_rx) = oneshot::channel::<()>();
        let (resigned_tx, resigned) = oneshot::channel();
        let relock = patient_client(&[server]);
        let value = value.to_string();
        runtime.spawn(async move {
            let leading = relock
                .campaign(KEY, &value, ttl, None)
                .await
                .expect("campaign");
            assert_eq!(leading.value(), value);
            let _ = won_tx.send((leading.term(), Instant::now()));
            let _ = resign_rx.await;
            let _ = resigned_tx.send(leading.resign().await);
        });
        Candidate {
            runtime: Some(runtime),
            won: Some(won),
            resign: Some(resign),
            resigned: Some(resigned),
        }
    }

    /// Its term and when it began, once it leads.
    async fn leads(&mut self) -> (u64, Instant) {
        tokio::time::timeout(WITHIN, self.won.take().expect("not awaited yet"))
            .await
            .expect("leads in time")
            .expect("the candidate ran")
    }

    async fn resign(&mut self) {
        let _ = self.resign.take().expect("once").send(());
        tokio::time::timeout(WITHIN, self.resigned.take().expect("once"))
            .await
            .expect("resigned in time")
            .expect("the candidate ran")
            .expect("resigned");
    }

    fn crash(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.crash();
    }
}

async fn next(observer: &mut Observer) -> LeaderChange {
    tokio::time::timeout(WITHIN, observer.next())
        .await
        .expect("a change in time")
        .expect("observing")
}

/// Three candidates in line; the leader dies (its runtime ends: no release, no renewal) and
/// the next one leads within the ttl (+ the expiry event and one round trip), with a larger
/// term; it resigns and the third leads in the same step. Two observers see every leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_candidate_leads_when_the_leader_dies_and_observers_see_every_leader() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let mut observers = [
        relock.observe(KEY).expect("observe"),
        relock.observe(KEY).expect("observe"),
    ];
    for o in &mut observers {
        assert_eq!(next(o).await.leader, None, "nobody leads yet");
    }
    // 2 s: with 600 ms a renewal 400 ms late on a loaded machine ended a's lead before its
    // crash; the bound below is the same claim at any ttl.
    let ttl = Duration::from_secs(2);
    let mut a = Candidate::start(&server, "node-a", ttl);
    let (term_a, _) = a.leads().await;
    let mut b = Candidate::start(&server, "node-b", ttl);
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 1));
    let mut c = Candidate::start(&server, "node-c", ttl);
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 2));
    for o in &mut observers {
        let seen = next(o).await;
        let leader = seen.leader.expect("a leads");
        assert_eq!((leader.value.as_str(), leader.term), ("node-a", term_a));
        assert!(!seen.regressed);
    }
    let leader = relock.leader(KEY).await.expect("leader").expect("a leads");
    assert_eq!((leader.value.as_str(), leader.term), ("node-a", term_a));
    assert!(leader.owner.starts_with("node-a/") && leader.owner.len() == "node-a/".len() + 32);

    let died = Instant::now();
    a.crash();
    let (term_b, led) = b.leads().await;
    let took = led - died;
    eprintln!("the leader died; the next one led {took:?} later (ttl {ttl:?})");
    // Its hold ends at most a ttl after its last renewal, which came before its death; then
    // the expiry event (within 5 ms) grants the next in line, whose campaign measures its
    // validity with one renewal round. 100 ms covers that on an idle machine; the bound is
    // 500 ms so that the test passes with the cores busy (the measurement is printed).
    assert!(took <= ttl + Duration::from_millis(500), "took {took:?}");
    assert!(term_b > term_a, "a larger term: {term_b} after {term_a}");
    for o in &mut observers {
        let seen = next(o).await;
        let leader = seen.leader.expect("b leads");
        assert_eq!((leader.value.as_str(), leader.term), ("node-b", term_b));
        assert!(!seen.regressed);
    }

    // Resigning grants the next candidate in the same step: the very next read shows it.
    b.resign().await;
    let leader = relock.leader(KEY).await.expect("leader").expect("c leads");
    assert_eq!(leader.value, "node-c", "c leads as soon as b resigned");
    assert!(leader.term > term_b);
    let (term_c, _) = c.leads().await;
    assert_eq!(leader.term, term_c);
    for o in &mut observers {
        let seen = next(o).await;
        let leader = seen.leader.expect("c leads");
        assert_eq!((leader.value.as_str(), leader.term), ("node-c", term_c));
        assert!(!seen.regressed);
    }
    c.resign().await;
    for o in &mut observers {
        assert_eq!(next(o).await.leader, None, "nobody leads after c resigned");
    }
}

/// A timeout of `LOCK.OBSERVE`, or its connection dropped, is not a change: the observer
/// asks again and reports only the next real change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_dropped_connections_are_not_changes() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let leading = relock
        .campaign(KEY, "one", Duration::from_secs(30), None)
        .await
        .expect("campaign");
    let mut observer = relock
        .observe(KEY)
        .expect("observe")
        .every(Duration::from_millis(50));
    let first = next(&mut observer).await;
    assert_eq!(first.leader.map(|l| l.term), Some(leading.term()));
    // Several timeouts, and the observer's connection killed while it waits, while nothing
    // changes. Each `LOCK.OBSERVE` the server runs is one call more, and here each ends in a
    // timeout: three more calls are two timeouts at least.
    let observes = || common::ask::calls(&server, "lock.observe");
    let asked_again = |after: u64| {
        common::eventually_async(WITHIN, move || async move { observes() >= after + 3 })
    };
    let quiet = tokio::select! {
        change = observer.next() => Err(change),
        () = async {
            assert!(asked_again(observes()).await, "the observer did not ask again");
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query(&mut server.conn())
                .expect("CLIENT KILL");
            assert!(
                asked_again(observes()).await,
                "the observer did not ask again after its connection was killed"
            );
        } => Ok(()),
    };
    assert!(quiet.is_ok(), "no change reported: {quiet:?}");
    // The leader's renewal reconnects too: it still leads.
    assert!(!leading.is_lost());
    leading.resign().await.expect("resign");
    assert_eq!(next(&mut observer).await.leader, None);
}

/// A term lower than the last one seen is reported as a regression: here a server that had
/// issued tokens far above its clock (LOCK.COUNTER) restarts without persistence and issues
/// from its clock again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_went_backwards_is_reported_regressed() {
    let mut server = Server::start();
    let ahead = (common::now_ms() as u64 + 3_600_000) * 1000;
    let _: () = redis::cmd("LOCK.COUNTER")
        .arg(ahead)
        .query(&mut server.conn())
        .expect("LOCK.COUNTER");
    let relock = patient_client(&[&server]);
    let mut observer = relock
        .observe(KEY)
        .expect("observe")
        .every(Duration::from_millis(500));
    assert_eq!(next(&mut observer).await.leader, None);
    let first = relock
        .campaign(KEY, "before", Duration::from_secs(30), None)
        .await
        .expect("campaign");
    assert!(first.term() > ahead);
    let seen = next(&mut observer).await;
    assert_eq!(seen.leader.map(|l| l.term), Some(first.term()));
    assert!(!seen.regressed);

    server.restart();
    let again = patient_client(&[&server]);
    let second = again
        .campaign(KEY, "after", Duration::from_secs(30), Some(WITHIN))
        .await
        .expect("campaign after the restart");
    assert!(second.term() < first.term(), "the term went backwards");
    // Perhaps "no leader" first (the restarted server had none), then the regression.
    let seen = loop {
        let seen = next(&mut observer).await;
        if seen.leader.is_some() {
            break seen;
        }
        assert!(!seen.regressed, "no leader is not a regression");
    };
    let leader = seen.leader.expect("after leads");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("after", second.term())
    );
    assert!(seen.regressed, "a lower term is reported regressed");
    // From then on, changes are compared with the new term.
    second.resign().await.expect("resign");
    let third = again
        .campaign(KEY, "later", Duration::from_secs(30), None)
        .await
        .expect("campaign");
    let seen = loop {
        let seen = next(&mut observer).await;
        if seen.leader.is_some() {
            break seen;
        }
    };
    assert_eq!(seen.leader.map(|l| l.term), Some(third.term()));
    assert!(!seen.regressed);
    drop(first);
}

/// Elections need one sequence of terms: a client of several independent masters, or one
/// that holds keys shared, is refused before any server is asked; a shared key is refused by
/// leader and observe; a fenced write on a Redlock hold is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_cannot_hold_an_election_are_refused() {
    let servers = [Server::start(), Server::start(), Server::start()];
    let redlock = patient_client(&servers);
    let ttl = Duration::from_secs(10);
    let refused = |e: Error| {
        assert!(e.is_permanent(), "refusals are permanent: {e:?}");
        match e {
            Error::ElectionRefused { key, why } => {
                assert_eq!(key, KEY);
                assert!(why.contains("3 independent masters"), "{why}");
            }
            other => panic!("not refused: {other:?}"),
        }
    };
    refused(
        redlock
            .campaign(KEY, "x", ttl, None)
            .await
            .expect_err("campaign"),
    );
    refused(redlock.leader(KEY).await.expect_err("leader"));
    refused(redlock.observe(KEY).expect_err("observe"));
    for s in &servers {
        assert_eq!(waiters(&mut s.conn(), KEY), 0);
        assert!(
            common::lock_info(&mut s.conn(), KEY).is_none(),
            "nothing asked"
        );
    }
    // A fenced write on a Redlock hold: refused, saying why.
    let lock = redlock.acquire("orders:1", ttl).await.expect("acquire");
    let e = lock
        .fenced(&relock_client::Command::new("SET").arg("x").arg("1"))
        .await
        .expect_err("fenced on Redlock");
    assert!(
        matches!(e, Error::FencedRefused { masters: 3, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("each master has its own tokens"),
        "{e}"
    );
    assert!(e.is_permanent());
    lock.release().await.expect("release");

    let one = patient_client(&[&servers[0]]);
    let readers = one.with_mode(Mode::shared()).expect("shared");
    match readers.campaign(KEY, "x", ttl, None).await {
        Err(Error::ElectionRefused { why, .. }) => assert!(why.contains("exclusively"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    // A key held shared is no election.
    let read = readers.acquire(KEY, ttl).await.expect("a read lock");
    match one.leader(KEY).await {
        Err(Error::ElectionRefused { why, .. }) => assert!(why.contains("shared"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    let mut observer = one.observe(KEY).expect("observe");
    let e = tokio::time::timeout(WITHIN, observer.next())
        .await
        .expect("answered")
        .expect_err("a shared key");
    assert!(e.is_permanent(), "{e:?}");
    read.release().await.expect("release");
}

/// A candidate's owner is `<value>/<32 hex random>`, the value cut to fit 256 bytes at a
/// character boundary, never the random part; two candidates with one value are two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_proclaim_their_value_cut_to_fit() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let long = "é".repeat(200);
    let leading = relock
        .campaign(KEY, &long, Duration::from_secs(10), None)
        .await
        .expect("campaign");
    let owner = leading.owner().to_string();
    assert!(owner.len() <= 256, "{}", owner.len());
    let (value, random) = owner.rsplit_once('/').expect("value/random");
    assert_eq!(random.len(), 32);
    assert!(random.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(long.starts_with(value) && !value.is_empty());
    assert_eq!(leading.value(), value);
    let leader = relock.leader(KEY).await.expect("leader").expect("leads");
    assert_eq!(leader.value, value);
    assert_eq!(leader.term, leading.term());

    // One value, two candidates: the second waits for the first.
    let same = patient_client(&[&server]);
    let second = tokio::spawn(async move {
        same.campaign(KEY, "twin", Duration::from_secs(10), None)
            .await
            .map(|l| (l.term(), l.owner().to_string()))
    });
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 1));
    leading.resign().await.expect("resign");
    let first = relock
        .campaign(KEY, "twin", Duration::from_secs(10), Some(WITHIN))
        .await;
    let (term, owner) = tokio::time::timeout(WITHIN, second)
        .await
        .expect("in time")
        .expect("ran")
        .expect("the first twin leads");
    let first = first.expect("the second twin leads after the first");
    assert!(first.term() > term);
    assert_ne!(first.owner(), owner);
}

/// A campaign with a timeout leaves the queue when it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_that_times_out_leaves_the_queue() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let leading = relock
        .campaign(KEY, "a", Duration::from_secs(10), None)
        .await
        .expect("campaign");
    let e = relock
        .campaign(
            KEY,
            "b",
            Duration::from_secs(10),
            Some(Duration::from_millis(200)),
        )
        .await
        .expect_err("times out");
    assert!(matches!(e, Error::WaitTimeout { .. }), "{e:?}");
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 0));
    assert!(!leading.is_lost());
    // The observer as a stream: the same items as next().
    use futures_util::StreamExt;
    let mut changes = Box::pin(relock.observe(KEY).expect("observe").into_stream());
    let first = tokio::time::timeout(WITHIN, changes.next())
        .await
        .expect("in time")
        .expect("an item")
        .expect("observing");
    assert_eq!(first.leader.map(|l| l.term), Some(leading.term()));
}

/// On a Redis Cluster: the key's master holds the election; campaign, leader, observe and the
/// hand-off at a resignation work as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_run_on_a_cluster() {
    let cluster = relock_testkit::cluster::Cluster::start_with(0);
    let key = "{svc}:leader";
    let master = cluster.node(cluster.owner_of(key).master_port);
    let relock = Relock::cluster(&cluster.urls(), patient()).expect("client");
    let mut observer = relock.observe(key).expect("observe");
    assert_eq!(next(&mut observer).await.leader, None);
    let a = relock
        .campaign(key, "a", Duration::from_secs(10), None)
        .await
        .expect("campaign");
    let seen = next(&mut observer).await.leader.expect("a leads");
    assert_eq!((seen.value.as_str(), seen.term), ("a", a.term()));
    // A fenced write, routed to the key's master (its data under the same hash tag).
    let write = Command::new("SET").arg("{svc}:data").arg("a");
    assert_eq!(
        a.fenced(&write).await.expect("fenced"),
        Reply::Simple("OK".into())
    );
    let other = Relock::cluster(&cluster.urls(), patient()).expect("client");
    let b = tokio::spawn(async move {
        // The leadership itself is returned: dropping it would resign.
        other
            .campaign(key, "b", Duration::from_secs(10), None)
            .await
    });
    assert!(eventually(WITHIN, || waiters(&mut master.conn(), key) == 1));
    let term_a = a.term();
    a.resign().await.expect("resign");
    let now = relock.leader(key).await.expect("leader").expect("b leads");
    assert_eq!(now.value, "b");
    assert!(now.term > term_a);
    let seen = next(&mut observer).await.leader.expect("b leads");
    assert_eq!((seen.value.as_str(), seen.term), ("b", now.term));
    let b = tokio::time::timeout(WITHIN, b)
        .await
        .expect("in time")
        .expect("ran")
        .expect("b led");
    assert_eq!(b.term(), now.term);
    // a's fenced write landed on the key's master.
    let value: Option<String> = redis::cmd("GET")
        .arg("{svc}:data")
        .query(&mut master.conn())
        .expect("GET");
    assert_eq!(value.as_deref(), Some("a"));
    b.resign().await.expect("resign");
}

/// `LOCK.FENCED` under a term: the write runs while the term is the live hold, its reply
/// passed through (an error reply of the command too); once another term began, the deposed
/// leader's write is `Error::Fenced` and changes nothing. The same on a plain lock and a guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_run_under_the_live_term_only() {
    let server = Server::start();
    let key = "{svc}:leader";
    let data = "{svc}:data";
    let relock = patient_client(&[&server]);
    let a = relock
        .campaign(key, "a", Duration::from_secs(30), None)
        .await
        .expect("campaign");
    let set = |v: &str| Command::new("SET").arg(data).arg(v);
    assert_eq!(
        a.fenced(&set("from a")).await.expect("fenced"),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        a.fenced(&Command::new("APPEND").arg(data).arg("!"))
            .await
            .expect("fenced"),
        Reply::Int(7)
    );
    // The command's own error reply, passed through as a node error (not a fencing one).
    match a.fenced(&Command::new("INCR").arg(data)).await {
        Err(Error::Node(e)) => assert!(e.to_string().contains("not an integer"), "{e}"),
        other => panic!("INCR of a string: {other:?}"),
    }
    // Deposed: the lock broken by an operator, and b leads in a newer term.
    relock_testkit::ask::force_release(&server, key);
    let b = relock
        .campaign(key, "b", Duration::from_secs(30), Some(WITHIN))
        .await
        .expect("b leads");
    match a.fenced(&set("stale")).await {
        Err(e @ Error::Fenced { .. }) => {
            assert!(e.is_permanent());
            let Error::Fenced { message, node, .. } = &e else {
                unreachable!()
            };
            assert!(
                message.contains(&format!("stale token {}", a.term())),
                "{message}"
            );
            assert!(message.contains(&b.term().to_string()), "{message}");
            assert_eq!(node, &relock.nodes()[0]);
        }
        other => panic!("a deposed leader's write: {other:?}"),
    }
    let value: String = redis::cmd("GET")
        .arg(data)
        .query(&mut server.conn())
        .expect("GET");
    assert_eq!(value, "from a!", "the stale write did not run");
    assert_eq!(
        b.fenced(&set("from b")).await.expect("fenced"),
        Reply::Simple("OK".into())
    );
    b.resign().await.expect("resign");

    // A plain lock and a guard fence the same way.
    let lock = relock
        .acquire(key, Duration::from_secs(30))
        .await
        .expect("lock");
    assert_eq!(
        lock.fenced(&Command::new("GET").arg(data))
            .await
            .expect("fenced"),
        Reply::Bulk(b"from b".to_vec())
    );
    lock.release().await.expect("release");
    let guard = relock
        .guard(key, Duration::from_secs(30))
        .await
        .expect("guard");
    assert_eq!(
        guard
            .fenced(&Command::new("DEL").arg(data))
            .await
            .expect("fenced"),
        Reply::Int(1)
    );
    guard.release().await.expect("release");
}
