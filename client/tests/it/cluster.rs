//! relock-client against a real Redis Cluster (3 masters, 3 replicas on loopback), and replica
//! acknowledgements in cluster, single-server and Redlock modes (lockctl's part:
//! lockctl/tests/it/cluster.rs).
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;

use std::time::Duration;

use cluster_harness::{relock_info, Cluster};
use common::{eventually, Server};
use relock_client::{Error, Options, Relock};
use relock_testkit::ask::holder_count as holder;
use relock_testkit::client::acked_options;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiters_follow_a_failover() {
    let cluster = Cluster::start();
    let seeds = cluster.urls();
    let relock = Relock::cluster(&seeds, acked_options()).expect("cluster client");
    let key = "{shard}:job";
    let holder_lock = relock
        .acquire(key, Duration::from_secs(30))
        .await
        .expect("acquire");
    let token = holder_lock.token().unwrap();
    let old_master = cluster.master_of(key);
    let replica = cluster.replica_of(key);
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(key, Duration::from_secs(10), Some(Duration::from_secs(20)))
                .await
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        relock_info(old_master)["waiters"] == 1
    }));

    let took = tokio::task::block_in_place(|| cluster.failover(replica));
    eprintln!("failover: roles switched and cluster healthy in {took:?}");
    assert_eq!(cluster.master_of(key).port, replica.port);
    // The acknowledged lock survived with its token; the waiter re-queued on the new master.
    assert_eq!(holder(replica, key).map(|h| h.1), Some(token));
    assert!(
        eventually(Duration::from_secs(5), || {
            relock_info(replica)["waiters"] == 1
        }),
        "waiter followed the failover to the new master"
    );

    // The holder's release follows the MOVED to the new master and hands the lock over.
    let started = Instant::now();
    holder_lock.release().await.expect("release after failover");
    let next = waiter
        .await
        .expect("task")
        .expect("granted on the new master");
    eprintln!(
        "failover: release + hand-off on the new master in {:?}",
        started.elapsed()
    );
    assert!(next.token().unwrap() > token, "tokens keep rising");
    assert_eq!(holder(replica, key).map(|h| h.1), next.token());
    next.release().await.expect("release");

    // New locks land on the new master, acknowledged by its new replica (the old master).
    let lock = relock
        .acquire("{shard}:other", Duration::from_secs(5))
        .await
        .expect("acquire after failover");
    assert!(lock.token().unwrap() > token);
    lock.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_on_single_servers_and_redlock() {
    // Three masters, each with one replica.
    let masters: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let replicas: Vec<Server> = masters
        .iter()
        .map(|m| Server::with_args(&["--replicaof", "127.0.0.1", &m.port.to_string()]))
        .collect();
    for r in &replicas {
        let up = eventually(Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut r.conn())
                .unwrap_or_default();
            info.contains("master_link_status:up")
        });
        assert!(up, "replica in sync");
    }
    let ttl = Duration::from_secs(30);

    // Single server: acknowledged, then refused with the node and the count named.
    let single = Relock::with_options(&[masters[0].url()], acked_options()).expect("client");
    let mut lock = single.acquire("one", ttl).await.expect("acked acquire");
    lock.extend(ttl).await.expect("acked extend");
    let resume = common::Resume(vec![&replicas[0]]);
    replicas[0].signal("STOP");
    let before = lock.valid_until();
    let err = lock.extend(ttl).await.expect_err("extend not acknowledged");
    assert!(err.to_string().contains("only 0 of 1"), "{err}");
    assert_eq!(
        lock.valid_until(),
        before,
        "an unacknowledged extend does not count"
    );
    let started = Instant::now();
    let err = single
        .try_acquire("two", ttl)
        .await
        .expect_err("not acknowledged");
    eprintln!(
        "single server: acquire refused after {:?} (ack timeout 300 ms)",
        started.elapsed()
    );
    assert_eq!(
        err.failed_nodes(),
        vec![format!("127.0.0.1:{}", masters[0].port)]
    );
    assert!(err.to_string().contains("only 0 of 1"), "{err}");
    assert_eq!(holder(&masters[0], "two"), None, "released again");
    drop(resume);
    lock.release().await.expect("release");

    // Redlock: a master whose replica is stopped does not count; a quorum still wins.
    let urls: Vec<String> = masters.iter().map(Server::url).collect();
    let redlock = Relock::with_options(&urls, acked_options()).expect("redlock");
    let resume = common::Resume(vec![&replicas[2]]);
    replicas[2].signal("STOP");
    let lock = redlock
        .acquire("red", ttl)
        .await
        .expect("2 of 3 acknowledged");
    let granted: Vec<String> = lock.tokens().iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(granted.len(), 2);
    assert!(!granted.contains(&format!("127.0.0.1:{}", masters[2].port)));
    // That master's request outlives the decided round; its undo lands when its WAIT ends.
    assert!(
        eventually(Duration::from_secs(2), || holder(&masters[2], "red")
            .is_none()),
        "undone where unacknowledged"
    );
    lock.release().await.expect("release");
    // Two replicas stopped: no quorum, nothing left anywhere.
    replicas[1].signal("STOP");
    let resume2 = common::Resume(vec![&replicas[1]]);
    let err = redlock
        .try_acquire("red2", ttl)
        .await
        .expect_err("no quorum");
    assert!(matches!(err, Error::NoQuorum { granted: 1, .. }), "{err}");
    for m in &masters {
        assert_eq!(holder(m, "red2"), None);
    }
    drop(resume2);
    drop(resume);
}

/// Several keys on a cluster: one hash tag is one slot, one `LOCK.MACQUIRE` and one token;
/// keys of several slots are taken slot by slot (a token per slot), all or nothing, and
/// waited for in sorted order across slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_on_a_cluster() {
    let cluster = Cluster::start_with(0);
    let seed = cluster.nodes[0].url();
    let options = Options {
        node_timeout: Duration::from_secs(1),
        retry_count: 0,
        ..Options::default()
    };
    let relock = Relock::cluster(&[&seed], options).expect("cluster client");
    let ttl = Duration::from_secs(30);
    let tagged = ["{acct}:1", "{acct}:2", "{acct}:3"];
    let group = relock.acquire_all(&tagged, ttl).await.expect("one slot");
    let token = group.token().expect("token");
    for key in tagged {
        assert_eq!(group.token_of(key), Some(token), "one MACQUIRE, one token");
        let (owner, t, _) = holder(cluster.master_of(key), key).expect("held");
        assert_eq!((owner.as_str(), t), (group.owner(), token));
    }
    group.release().await.expect("release");
    // Keys on every master (no common slot).
    let spread: Vec<String> = cluster
        .masters()
        .iter()
        .map(|m| cluster.key_on(m.port, "g"))
        .collect();
    let group = relock.acquire_all(&spread, ttl).await.expect("three slots");
    for key in &spread {
        let (owner, t, _) = holder(cluster.master_of(key), key).expect("held");
        assert_eq!(
            (owner.as_str(), Some(t)),
            (group.owner(), group.token_of(key))
        );
    }
    let guard = group.keep_alive();
    guard.renew_now().await.expect("renewed on every master");
    // All or nothing across slots: with the last key held, none is taken.
    let mut sorted = spread.clone();
    sorted.sort();
    let last = sorted.last().expect("a key").clone();
    guard.release().await.expect("release");
    let blocker = relock.acquire(&last, ttl).await.expect("blocker");
    let err = relock
        .acquire_all(&spread, ttl)
        .await
        .expect_err("last is held");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    for key in &sorted[..sorted.len() - 1] {
        assert!(
            holder(cluster.master_of(key), key).is_none(),
            "{key} left behind"
        );
    }
    // Waiting across slots: granted once the blocker goes.
    let waiting = {
        let (relock, spread) = (relock.clone(), spread.clone());
        tokio::spawn(async move {
            relock
                .wait_all(&spread, ttl, Some(Duration::from_secs(20)))
                .await
        })
    };
    let first = sorted[0].clone();
    assert!(eventually(Duration::from_secs(20), || holder(
        cluster.master_of(&first),
        &first
    )
    .is_some()));
    blocker.release().await.expect("release");
    let group = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("granted")
        .expect("task")
        .expect("group");
    group.release().await.expect("release");
}

/// **A fenced write is never sent twice.** A request that timed out on a stopped master went
/// to the slot's new master once the slot map named one, which is right for the lock commands
/// (safe to run twice) but not for `LOCK.FENCED`: had the old master run the write and
/// replicated it before its reply was lost, the promoted replica (same hold, same token)
/// would run it again. Staged: the key's master stopped (SIGSTOP) and its replica promoted
/// (`CLUSTER FAILOVER TAKEOVER`), then a fenced `INCR` with the slot map still naming the old
/// master. What must hold: an error, and the new master never ran it (before the fix: `Ok`,
/// the counter at 2 there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_that_timed_out_is_not_sent_to_the_new_master() {
    let cluster = Cluster::start();
    let relock = Relock::cluster(&cluster.urls(), acked_options()).expect("cluster client");
    let key = "{fence}:lock";
    let counter = "{fence}:n";
    let lock = relock
        .acquire(key, Duration::from_secs(60))
        .await
        .expect("acquire");
    let incr = relock_client::Command::new("INCR").arg(counter);
    lock.fenced(&incr)
        .await
        .expect("a fenced INCR on the master");
    let old_master = cluster.master_of(key);
    let replica = cluster.replica_of(key);
    // The counter as `node` has it (READONLY: a replica answers for its own data).
    let count = |node: &Server| -> Option<i64> {
        let mut c = node.conn();
        let _: () = redis::cmd("READONLY").query(&mut c).expect("READONLY");
        redis::cmd("GET").arg(counter).query(&mut c).expect("GET")
    };
    assert!(
        eventually(Duration::from_secs(5), || count(replica) == Some(1)),
        "the replica has the first write"
    );
    old_master.signal("STOP");
    let _resume = common::Resume(vec![old_master]);
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut replica.conn())
        .expect("CLUSTER FAILOVER TAKEOVER");
    assert!(
        eventually(Duration::from_secs(10), || cluster_harness::role(replica)
            == "master"),
        "the replica took over"
    );
    let second = lock.fenced(&incr).await;
    let on_new_master = count(replica);
    assert!(
        second.is_err(),
        "a fenced write that timed out was sent again: {second:?}"
    );
    assert_eq!(on_new_master, Some(1), "the new master ran the write again");
}

/// The send-once rule names `LOCK.FORCERELEASE` too: run again after its reply was lost, it
/// removes a hold taken since. Sent to a master stopped by the failover (its reply never
/// comes), it is reported, not sent again to the new master, which keeps the hold (it was
/// sent there before, as to every master a timeout or a dropped connection may mean failed
/// over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_that_timed_out_is_not_sent_to_the_new_master() {
    let cluster = Cluster::start();
    let relock = Relock::cluster(&cluster.urls(), acked_options()).expect("cluster client");
    let key = "{forced}:lock";
    let lock = relock
        .acquire(key, Duration::from_secs(60))
        .await
        .expect("acquire");
    let old_master = cluster.master_of(key);
    let replica = cluster.replica_of(key);
    let held_on = |node: &Server| -> bool {
        let mut c = node.conn();
        let _: () = redis::cmd("READONLY").query(&mut c).expect("READONLY");
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).expect("EXISTS");
        exists == 1
    };
    assert!(
        eventually(Duration::from_secs(5), || held_on(replica)),
        "the replica has the hold"
    );
    old_master.signal("STOP");
    let _resume = common::Resume(vec![old_master]);
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut replica.conn())
        .expect("CLUSTER FAILOVER TAKEOVER");
    assert!(
        eventually(Duration::from_secs(10), || cluster_harness::role(replica)
            == "master"),
        "the replica took over"
    );
    let reports = relock.force_release(key).await;
    assert!(
        reports.iter().all(|r| r.result.is_err()),
        "the force-release timed out on the stopped master and was reported: {reports:?}"
    );
    assert!(
        held_on(replica),
        "the force-release that timed out was sent again to the new master"
    );
    drop(lock);
}
