//! Sentinel-managed masters (`redis+sentinel://`): lockctl against a real master, its replica
//! and two `redis-server --sentinel` processes, through a failover (`SENTINEL FAILOVER`), with
//! the lock kept, renewed and released on the new master and a waiter following it there.
use crate::support;
use relock_testkit as common;

use std::process::Stdio;
use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Options, Relock};
use relock_testkit::sentinel::Sentinels;
use support::{holder, lockctl_at, stderr, Spawned};
use tokio::time::Instant;

/// The holder of `key` on `server` (owner, token), or `None` when there is none or the
/// server does not answer: the sentinels kill every client of an instance they reconfigure.
fn holder_now(server: &Server, key: &str) -> Option<(String, u64)> {
    let mut c = redis::Client::open(server.url())
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let info: Option<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("LOCK.INFO").arg(key).query(&mut c).ok()?;
    let info = info?;
    Some((
        redis::from_redis_value(info.get("owner")?).ok()?,
        redis::from_redis_value(info.get("token")?).ok()?,
    ))
}

/// A field of `INFO relock` on `server`, or -1 when it does not answer (see [`holder_now`]).
fn stat_now(server: &Server, field: &str) -> i64 {
    let Ok(mut c) = redis::Client::open(server.url())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
    else {
        return -1;
    };
    let info: String = redis::cmd("INFO")
        .arg("relock")
        .query(&mut c)
        .unwrap_or_default();
    let wanted = format!("relock_{field}:");
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&wanted)?.parse().ok())
        .unwrap_or(-1)
}

/// lockctl through the sentinels, across a failover: it keeps its lock, renews it on the
/// promoted replica (which counts renewals only as a master), keeps it for a whole ttl after
/// the failover, and releases it there; a waiter queued on the old master before the
/// failover gets the lock from the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_keeps_its_lock_across_a_sentinel_failover() {
    let setup = tokio::task::block_in_place(Sentinels::start);
    let key = "s:deploy";
    // 8 s: with 4 s, in a fresh make test at load 14, no renewal reached the promoted replica
    // within the ttl (discovery through the sentinels and each retry are slower then); the
    // test's claim, a renewal there before the copy expires, is the same at any ttl.
    let ttl = Duration::from_secs(8);
    let dir = tempfile::tempdir().expect("tempdir");
    let (env, stop) = (dir.path().join("env"), dir.path().join("stop"));
    let script = format!(
        "echo $RELOCK_OWNER > {0}.tmp && mv {0}.tmp {0}; while [ ! -e {1} ]; do sleep 0.05; done",
        env.display(),
        stop.display()
    );
    let mut lockctl = Spawned::new(
        lockctl_at(&setup.url())
            .args(["--node-timeout", "500ms", "run", "--ttl", "8s", key])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let started = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(20), || {
            env.exists() || lockctl.try_status().is_some()
        })
    });
    if !env.exists() {
        let status = lockctl.try_status();
        // Still waiting for the lock (this run has no --wait): stopped, so its stderr ends.
        support::send_quietly(lockctl.pid(), libc::SIGKILL);
        panic!(
            "the command did not start ({started}, {status:?}): {}",
            stderr(&lockctl.output())
        );
    }
    let owner = std::fs::read_to_string(&env)
        .expect("owner")
        .trim()
        .to_string();
    let (_, token) = tokio::task::block_in_place(|| holder(&setup.master, key)).expect("held");
    // The grant reached the replica.
    assert!(tokio::task::block_in_place(|| eventually(
        Duration::from_secs(5),
        || holder(&setup.replica, key).is_some_and(|h| h.0 == owner)
    )));
    let relock = Relock::with_options(
        &[setup.url()],
        Options {
            node_timeout: Duration::from_millis(500),
            ..Options::default()
        },
    )
    .expect("client");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(key, Duration::from_secs(10), Some(Duration::from_secs(60)))
                .await
        })
    };
    assert!(tokio::task::block_in_place(|| eventually(
        Duration::from_secs(10),
        || relock_testkit::info_field(&mut setup.master.conn(), "waiters") == 1
    )));

    let renewed_as_replica = tokio::task::block_in_place(|| {
        relock_testkit::info_field(&mut setup.replica.conn(), "renewed_total")
    });
    tokio::task::block_in_place(|| setup.failover());
    let promoted = Instant::now();
    // lockctl renews on the new master, before the copy there expires.
    assert!(
        tokio::task::block_in_place(|| eventually(ttl, || stat_now(
            &setup.replica,
            "renewed_total"
        ) > renewed_as_replica
            && holder_now(&setup.replica, key).is_some_and(|h| h.0 == owner))),
        "lockctl does not renew on the new master"
    );
    // It goes on renewing there for more than a whole ttl (a renewal every ttl / 3: four of
    // them), holding the lock with its token all along, its command running.
    let mut renewed_here = -1;
    assert!(tokio::task::block_in_place(|| eventually(
        Duration::from_secs(10),
        || {
            renewed_here = stat_now(&setup.replica, "renewed_total");
            renewed_here >= 0
        }
    )));
    let kept = tokio::task::block_in_place(|| {
        eventually(ttl * 4, || {
            assert!(
                lockctl.try_status().is_none(),
                "lockctl ended after the failover"
            );
            if let Some(h) = holder_now(&setup.replica, key) {
                assert_eq!(h, (owner.clone(), token), "the lock changed hands");
            }
            std::thread::sleep(Duration::from_millis(50)); // spaces the looks (not a wait)
            stat_now(&setup.replica, "renewed_total") >= renewed_here + 4
        })
    });
    assert!(
        kept,
        "lockctl stopped renewing on the new master ({} renewals since {:?} after the promotion)",
        stat_now(&setup.replica, "renewed_total") - renewed_here,
        promoted.elapsed()
    );
    assert_eq!(
        tokio::task::block_in_place(|| holder_now(&setup.replica, key)),
        Some((owner.clone(), token))
    );
    std::fs::write(&stop, b"").expect("stop");
    let status = tokio::task::block_in_place(|| lockctl.wait_within(Duration::from_secs(20)));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    // Released on the new master, where the waiter (queued on the old one) gets it.
    let next = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter is stuck on the old master")
        .expect("task")
        .expect("granted on the new master");
    assert!(
        next.token().is_some_and(|t| t > token),
        "tokens keep rising"
    );
    assert_eq!(
        tokio::task::block_in_place(|| holder_now(&setup.replica, key)).map(|h| h.0),
        Some(next.owner().to_string())
    );
    next.release().await.expect("release");
}
