//! lockctl (and relock-client beside it) against a real Redis Cluster (3 masters, 3 replicas on
//! loopback): through automatic failovers, with replica acknowledgements (the client's part:
//! client/tests/it/cluster.rs).
use crate::support;
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cluster_harness::{relock_info, Cluster};
use common::{eventually, Server};
use relock_client::{Error, NodeFailure, Options, Relock};
use relock_testkit::ask::holder_count as holder;
use relock_testkit::client::acked_options;
use tokio::time::Instant;

/// `lockctl --cluster` with the seeds `seed` (comma-separated URLs) and the node timeout of
/// [`acked_options`].
fn lockctl_cluster(seed: &str) -> Command {
    let mut cmd = support::lockctl_at(seed);
    cmd.args(["--cluster", "--node-timeout", "500ms"]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_lockctl_on_a_cluster() {
    let cluster = Cluster::start();
    // One seed is enough: the client learns the rest.
    let seed = cluster.nodes[0].url();
    let relock = Relock::cluster(&[&seed], acked_options()).expect("cluster client");
    assert!(relock.is_cluster());
    assert_eq!(relock.quorum(), 1);
    let ttl = Duration::from_secs(30);

    // Locks spread over every master, each where its slot says, acknowledged by its replica.
    let mut masters = HashSet::new();
    let mut locks = Vec::new();
    let started = Instant::now();
    for i in 0..30 {
        let key = format!("c:{i}");
        let lock = relock.acquire(&key, ttl).await.expect("acquire");
        let master = cluster.master_of(&key);
        masters.insert(master.port);
        assert_eq!(
            holder(master, &key),
            Some((lock.owner().to_string(), lock.token().unwrap(), 1))
        );
        locks.push(lock);
    }
    eprintln!(
        "cluster mode: mean acquire (with 1 replica ack) {:?}",
        started.elapsed() / 30
    );
    assert_eq!(masters.len(), 3, "locks on every master");
    for lock in locks {
        lock.release().await.expect("release");
    }
    for p in &masters {
        assert_eq!(relock_info(cluster.node(*p))["locks"], 0);
    }

    // Hash tags co-locate.
    let a = relock.acquire("{cart:9}:a", ttl).await.expect("a");
    let b = relock.acquire("{cart:9}:b", ttl).await.expect("b");
    let home = cluster.master_of("{cart:9}:a");
    assert_eq!(home.port, cluster.master_of("{cart:9}:b").port);
    assert!(holder(home, "{cart:9}:a").is_some() && holder(home, "{cart:9}:b").is_some());
    a.release().await.expect("release a");
    b.release().await.expect("release b");

    // LOCK.WAIT blocks on the key's master and is handed the lock on release.
    let key = "handoff";
    let first = relock.acquire(key, ttl).await.expect("first");
    let master = cluster.master_of(key);
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(key, Duration::from_secs(10), Some(Duration::from_secs(10)))
                .await
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            relock_info(master)["waiters"] == 1
        }),
        "waiter queued on the key's master"
    );
    let first_token = first.token().unwrap();
    first.release().await.expect("release first");
    let second = waiter.await.expect("task").expect("handed over");
    assert!(second.token().unwrap() > first_token);
    assert_eq!(holder(master, key).map(|h| h.1), second.token());
    second.release().await.expect("release second");

    // Reentrant holds are counted on the key's master.
    let owner = Relock::new_owner();
    let outer = relock.reenter("re", &owner, ttl).await.expect("reenter 1");
    let inner = relock.reenter("re", &owner, ttl).await.expect("reenter 2");
    assert_eq!(outer.token(), inner.token());
    assert_eq!(holder(cluster.master_of("re"), "re").map(|h| h.2), Some(2));
    inner.release().await.expect("release inner");
    outer.release().await.expect("release outer");
    assert_eq!(holder(cluster.master_of("re"), "re"), None);

    // The guard renews (with acknowledgements) past the ttl. The ttl leaves room for three
    // renewals, each of which may take the node timeout and the acknowledgements' wait.
    let options = acked_options();
    let short = (options.node_timeout + options.replica_ack_timeout) * 3;
    let guard = relock.guard("guarded", short).await.expect("guard");
    let granted = Instant::now();
    // Unrenewed, the lock would have expired a third of a ttl ago.
    common::wait_out_ttl_until((granted + short + short / 3).into_std()).await;
    assert!(!guard.is_lost(), "{:?}", guard.loss());
    assert!(guard.valid_until() > Instant::now());
    assert!(holder(cluster.master_of("guarded"), "guarded").is_some());
    guard.release().await.expect("release guard");

    // lockctl: run, info, force-release through the cluster.
    let out = lockctl_cluster(&seed)
        .args(["--replica-acks", "1", "run", "deploy", "--"])
        .args(["sh", "-c", "echo token=$RELOCK_TOKEN"])
        .output()
        .expect("lockctl run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout
        .trim()
        .strip_prefix("token=")
        .unwrap()
        .parse::<u64>()
        .is_ok());
    assert_eq!(holder(cluster.master_of("deploy"), "deploy"), None);
    let held = relock.acquire("deploy", ttl).await.expect("held");
    let out = lockctl_cluster(&seed)
        .args(["info", "deploy"])
        .output()
        .expect("info");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let master_addr = format!("127.0.0.1:{}", cluster.master_of("deploy").port);
    assert!(
        stdout.starts_with(&master_addr) && stdout.contains(held.owner()),
        "{stdout}"
    );
    let out = lockctl_cluster(&seed)
        .args(["run", "--wait", "0", "deploy", "--", "true"])
        .output()
        .expect("run while held");
    assert_eq!(out.status.code(), Some(75), "not acquired");
    let out = lockctl_cluster(&seed)
        .args(["force-release", "deploy"])
        .output()
        .expect("force-release");
    assert!(String::from_utf8_lossy(&out.stdout).contains("released"));
    assert_eq!(holder(cluster.master_of("deploy"), "deploy"), None);
    drop(held);

    // A cluster node given as a plain server answers MOVED for a key of another node's
    // slots: that fails at once (exit 78), with a hint to pass --cluster, instead of being
    // retried forever (issue 19, problem 7).
    let home = cluster.master_of("deploy").port;
    let elsewhere = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != home)
        .expect("another master");
    let mut plain = support::Spawned::new(
        support::lockctl_at(&elsewhere.url())
            .args(["run", "deploy", "--", "true"])
            .stderr(Stdio::piped()),
    );
    let status = tokio::task::block_in_place(|| plain.wait_within(Duration::from_secs(15)));
    let stderr = support::stderr(&plain.output());
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("MOVED") && stderr.contains("--cluster"),
        "{stderr}"
    );
    let plain = Relock::new(&[elsewhere.url()]).expect("client");
    let err = plain
        .acquire_wait("deploy", ttl, None)
        .await
        .expect_err("a cluster node as a plain server");
    assert!(err.is_permanent(), "{err}");

    // With every replica stopped, no acquire counts, and none is left behind. The key's master
    // is looked up first, while every node answers.
    let key = "unacked";
    let master = cluster.master_of(key);
    let replicas = cluster.replicas();
    let resume = common::Resume(replicas.clone());
    for r in &replicas {
        r.signal("STOP");
    }
    let started = Instant::now();
    let err = relock
        .try_acquire(key, ttl)
        .await
        .expect_err("no replica acknowledges");
    let refused_in = started.elapsed();
    let master_addr = format!("127.0.0.1:{}", master.port);
    let msg = err.to_string();
    assert!(
        msg.contains(&master_addr) && msg.contains("only 0 of 1"),
        "{msg}"
    );
    assert!(matches!(
        &err,
        Error::NoQuorum { failures, .. }
            if matches!(failures.0[0].failure, NodeFailure::ReplicaAcks { acked: 0, wanted: 1, .. })
    ));
    assert_eq!(holder(master, key), None, "undone");
    // Some seeds are stopped replicas: give them all.
    let started = Instant::now();
    let out = lockctl_cluster(&cluster.urls().join(","))
        .args(["--replica-acks", "1", "--replica-ack-timeout", "200ms"])
        .args(["run", "--wait", "0", key, "--", "true"])
        .output()
        .expect("lockctl with acks");
    eprintln!(
        "cluster mode: lockctl (fresh client) refused after {:?} with replicas stopped",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("replica acknowledgements"), "{stderr}");
    drop(resume);
    eprintln!("cluster mode: acquire refused after {refused_in:?} with replicas stopped");
    cluster.wait_healthy();
    let lock = relock.acquire(key, ttl).await.expect("acks come back");
    lock.release().await.expect("release");
}

/// `LOCK.INFO` on a replica (after `READONLY`): (owner, token, ttl ms).
fn holder_anywhere(server: &Server, key: &str) -> Option<(String, u64, i64)> {
    let mut c = server.conn();
    let _: () = redis::cmd("READONLY").query(&mut c).expect("READONLY");
    let info: Option<Vec<redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(&mut c)
        .expect("LOCK.INFO");
    info.map(|f| {
        (
            redis::from_redis_value(&f[1]).expect("owner"),
            redis::from_redis_value(&f[3]).expect("token"),
            redis::from_redis_value(&f[7]).expect("ttl"),
        )
    })
}

/// How a failover test ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OldMaster {
    /// Continued once its replica is promoted: it comes back as the new master's replica.
    Returns,
    /// Stopped until the end of the test.
    StaysDown,
}

/// The key's master stops (SIGSTOP) under a running `lockctl --cluster --replica-acks <acks>`;
/// the cluster promotes its replica, which holds our lock with our owner (issue 11, problem 2).
///
/// lockctl must follow the lock to the new master: renew it there and release it there,
/// instead of renewing the stopped master until the validity runs out and releasing into the
/// void while waiters sit out a ttl. The command runs for a full ttl after the promotion and
/// lockctl exits 0: only renewals made on the new master can have kept it valid that long.
/// With acknowledgements asked and the old master still down, the new master has no replica
/// left; a renewal there counts once every replica it still has acknowledged (none), since it
/// holds the only copy of the lock. A waiter queued on the stopped master before the stop gets
/// the lock from the new master once lockctl releases it there.
async fn lockctl_follows_an_automatic_failover(acks: u32, old: OldMaster) {
    // relock-client's own account of the waiter below, shown when the test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("relock_client=debug")
        .with_test_writer()
        .try_init();
    let cluster = Cluster::start();
    // A replica that comes back after a failover needs a full sync (the stopped master had
    // taken writes its replica never saw); start it at once rather than after the default
    // 5 s diskless delay, which would leave no replica to acknowledge for that long.
    for n in &cluster.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg("0")
            .query(&mut n.conn())
            .expect("CONFIG SET");
    }
    let keeps_lock = true;
    let key = "{failover}:job";
    // 20 s: a busy machine took 3.9 s to promote the replica, and the returning old master
    // must resync before it can acknowledge a renewal; 10 s left too little of the lease.
    let ttl = Duration::from_secs(20);
    let old_master = cluster.master_of(key);
    let replica = cluster.replica_of(key);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = dir.path().join("env");
    let stop = dir.path().join("stop");
    let script = format!(
        "echo $RELOCK_OWNER > {0}.tmp && mv {0}.tmp {0}; while [ ! -e {1} ]; do sleep 0.05; done",
        env.display(),
        stop.display()
    );
    let seeds = cluster.urls().join(",");
    let mut child = lockctl_cluster(&seeds)
        .args([
            "--replica-acks",
            &acks.to_string(),
            "run",
            "--ttl",
            "20s",
            key,
        ])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockctl");
    let reap = Reap(&mut child);
    assert!(eventually(Duration::from_secs(20), || env.exists()));
    let owner = std::fs::read_to_string(&env)
        .expect("owner")
        .trim()
        .to_string();
    assert_eq!(
        holder(old_master, key).map(|h| h.0).as_deref(),
        Some(owner.as_str())
    );
    // (Without acknowledgements, make sure the grant reached the replica before the stop.)
    assert!(eventually(Duration::from_secs(5), || holder_anywhere(
        replica, key
    )
    .is_some_and(|h| h.0 == owner)));

    // A waiter queued on the master before it stops must not stay stuck there.
    let options = Options {
        // A new grant still needs a replica's acknowledgement: none is left while the old
        // master stays down.
        replica_acks: if old == OldMaster::Returns { acks } else { 0 },
        ..acked_options()
    };
    let relock = Relock::cluster(&[replica.url()], options).expect("client");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(key, ttl, Some(Duration::from_secs(60)))
                .await
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        relock_info(old_master)["waiters"] == 1
    }));

    // The replica counts no renewal while it is one (it applies the master's effects); once
    // promoted, every renewal it counts is lockctl's, made on it.
    let renewed_as_replica = relock_info(replica)["renewed_total"];
    let resume = common::Resume(vec![old_master]);
    old_master.signal("STOP");
    let stopped = Instant::now();
    let promoted = eventually(Duration::from_secs(30), || {
        cluster_harness::role(replica) == "master"
    });
    assert!(promoted, "the replica was not promoted");
    let promoted_at = Instant::now();
    eprintln!(
        "automatic failover (acks {acks}, old master {old:?}): replica promoted {:?} after the stop",
        promoted_at - stopped
    );
    let (held_by, token, _) = holder(replica, key).expect("the lock survived the failover");
    assert_eq!(held_by, owner);
    if old == OldMaster::Returns {
        drop(resume);
    }
    // lockctl moves to the new master: it renews there, in time to keep the lock (before its
    // validity, a ttl at most after the promotion, runs out). Waited for as that event, the
    // new master's count of renewals, not as a rise of the lock's ttl above a sample taken
    // after the promotion was seen: on a busy machine lockctl often renewed before the
    // sample, which then left no room for the rise (issue 19).
    assert!(
        eventually(ttl, || relock_info(replica)["renewed_total"]
            > renewed_as_replica
            && holder(replica, key).is_some_and(|h| h.0 == owner)),
        "lockctl does not renew on the new master"
    );
    eprintln!(
        "automatic failover (acks {acks}, old master {old:?}): lockctl renewing on the new \
         master {:?} after the stop",
        stopped.elapsed()
    );

    let wait_exit = |reap: &mut Reap, within: Duration| {
        tokio::task::block_in_place(|| {
            let mut status = None;
            let exited = eventually(within, || {
                status = reap.0.try_wait().expect("try_wait");
                status.is_some()
            });
            assert!(exited, "lockctl did not exit");
            status.expect("exited")
        })
    };
    let mut reap = reap;
    if old == OldMaster::Returns {
        // The waiter's grant (and lockctl's renewals) need an acknowledgement from the returned
        // old master, now the new master's replica: its link up is the event they rest on, so a
        // machine slow to resync fails here, saying so, not as a stuck waiter below.
        let linked = tokio::task::block_in_place(|| {
            common::link_up(&mut old_master.conn(), Duration::from_secs(30))
        });
        assert!(
            linked,
            "the old master did not become the new master's replica: {}",
            replication(old_master)
        );
    }
    let status = if keeps_lock {
        // A full ttl later the command still runs under the lock.
        common::wait_out_ttl_until((promoted_at + ttl).into_std()).await;
        assert!(
            reap.0.try_wait().expect("try_wait").is_none(),
            "lockctl ended during the failover"
        );
        assert_eq!(
            holder(replica, key).map(|h| (h.0, h.1)),
            Some((owner.clone(), token))
        );
        std::fs::write(&stop, b"").expect("stop");
        wait_exit(&mut reap, Duration::from_secs(20))
    } else {
        // Nothing can acknowledge a renewal: the lock is given up when its validity ends,
        // which no renewal made before the stop can push past stop + ttl.
        let status = wait_exit(&mut reap, ttl + Duration::from_secs(10));
        assert!(stopped.elapsed() < ttl + Duration::from_secs(2));
        status
    };
    let exited = Instant::now();
    // The release reached the new master: the lock is gone there at once, not after a ttl.
    let released = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(3), || {
            holder(replica, key).is_none_or(|h| h.0 != owner)
        })
    });
    let released_after = exited.elapsed();
    drop(reap);
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = if keeps_lock { 0 } else { 76 };
    assert_eq!(status.code(), Some(expected), "{err}");
    assert!(released, "the release did not reach the new master: {err}");
    eprintln!(
        "automatic failover (acks {acks}, old master {old:?}): lockctl exited {expected}, lock \
         gone on the new master {released_after:?} later"
    );
    let next = match tokio::time::timeout(Duration::from_secs(30), waiter).await {
        Ok(result) => result
            .expect("task")
            .expect("the waiter gets the lock from the new master"),
        // What the servers say, for a failure seen once in many runs (2026-12-04) that the
        // test's own output could not explain.
        Err(_) => panic!(
            "the waiter is still stuck 30 s after lockctl exited: new master {} / {:?} / \
             holder {:?} / clients {}; old master {}",
            replication(replica),
            relock_info(replica),
            holder(replica, key),
            redis::cmd("CLIENT")
                .arg("LIST")
                .query::<String>(&mut replica.conn())
                .unwrap_or_default(),
            replication(old_master),
        ),
    };
    eprintln!(
        "automatic failover (acks {acks}, old master {old:?}): the waiter got the lock {:?} \
         after lockctl exited",
        exited.elapsed()
    );
    assert!(next.token().unwrap() > token);
    next.release().await.expect("release");
}

/// `INFO replication` of `server`, on one line.
fn replication(server: &Server) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut server.conn())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Kills the child on drop (a failing assertion must not leave lockctl running).
struct Reap<'a>(&'a mut std::process::Child);

impl Drop for Reap<'_> {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_keeps_its_lock_through_an_automatic_failover() {
    lockctl_follows_an_automatic_failover(0, OldMaster::StaysDown).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_keeps_an_acknowledged_lock_when_the_old_master_returns() {
    lockctl_follows_an_automatic_failover(1, OldMaster::Returns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_keeps_an_acknowledged_lock_while_the_old_master_stays_down() {
    lockctl_follows_an_automatic_failover(1, OldMaster::StaysDown).await;
}
