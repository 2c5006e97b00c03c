//! The client says why: a guard that loses its hold asks the masters' journals
//! (`LOCK.HISTORY`) and reports the reason, typed ([`LossReason`]) and in words, for every way
//! a hold can end other than by its owner, against real servers; owners name their process.
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Error, LockGuard, Loss, LossReason, Options, Relock};
use relock_testkit::client::{patient, patient_client};

const KEY: &str = "jobs:why";
const TTL: Duration = Duration::from_secs(30);
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// Runs `cmd` on `server`, whatever it replies (an error reply fails the test).
fn run_on(server: &Server, cmd: &mut redis::Cmd) {
    let _: redis::Value = cmd.query(&mut server.conn()).expect("command");
}

/// Whether `server` has a key `key`, of any type (`EXISTS`).
fn key_exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.conn())
        .expect("EXISTS")
        == 1
}

/// Renews now, which finds the hold gone, and returns the guard's explanation of the loss.
async fn loss_of(guard: &LockGuard) -> Loss {
    let renewed = tokio::time::timeout(WITHIN, guard.renew_now())
        .await
        .expect("the renewal ends");
    assert!(renewed.is_err(), "the hold is gone: {renewed:?}");
    assert!(guard.is_lost());
    let loss = tokio::time::timeout(WITHIN, guard.hold().loss.explained())
        .await
        .expect("explained in time")
        .expect("a loss");
    (*loss).clone()
}

/// One way to end a hold: a guard loses `KEY` to `end`, and says `reason`.
async fn lost_to(reason: LossReason, end: impl FnOnce(&Server)) -> Loss {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let guard = relock.guard(KEY, TTL).await.expect("guard");
    end(&server);
    let loss = loss_of(&guard).await;
    eprintln!("{reason}: {loss}");
    assert_eq!(loss.reason, reason, "{loss}");
    assert_eq!(loss.key, KEY);
    assert_eq!(loss.node.as_deref(), Some(relock.nodes()[0]), "{loss}");
    assert!(
        loss.to_string().starts_with(&format!("lock {KEY:?} ")),
        "{loss}"
    );
    // The guard's own end says it too.
    match guard.release().await {
        Err(Error::Lost { cause, .. }) => {
            assert_eq!(cause.map(|c| c.reason), Some(reason));
        }
        // A key overwritten by another type ends the renewal with WRONGTYPE, which is what
        // release reports; the hold's loss says why all the same.
        Err(e) if e.is_permanent() => assert!(e.to_string().contains("WRONGTYPE"), "{e}"),
        other => panic!("release after a loss: {other:?}"),
    }
    loss
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_names_who_did_it() {
    let loss = lost_to(LossReason::ForceReleased, |s| {
        let mut ops = s.conn();
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("ops")
            .query(&mut ops)
            .expect("setname");
        let _: i64 = redis::cmd("LOCK.FORCERELEASE")
            .arg(KEY)
            .query(&mut ops)
            .expect("force release");
    })
    .await;
    let by = loss.by_whom().expect("who");
    assert!(by.starts_with("client "), "{by}");
    assert!(
        by.contains("name ops") && by.contains("user default"),
        "{by}"
    );
    let text = loss.to_string();
    assert!(text.contains("was force-released on "), "{text}");
    assert!(
        text.contains(" by client ") && text.contains(" ago"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_says_it_was_not_renewed() {
    let loss = lost_to(LossReason::Expired, |s| {
        // The lease runs out (a shorter PEXPIRE fires like the ttl): the server expires it.
        run_on(s, redis::cmd("PEXPIRE").arg(KEY).arg(1));
        assert!(eventually(WITHIN, || !key_exists(s, KEY)));
    })
    .await;
    assert!(loss.to_string().contains("not renewed for"), "{loss}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_says_deleted() {
    lost_to(LossReason::Deleted, |s| {
        run_on(s, redis::cmd("DEL").arg(KEY))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwrite_says_deleted() {
    // Another type in the key: the renewal gets WRONGTYPE, the journal says deleted.
    lost_to(LossReason::Deleted, |s| {
        run_on(s, redis::cmd("SET").arg(KEY).arg("not a lock"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_says_flushed() {
    lost_to(LossReason::Flushed, |s| {
        run_on(s, &mut redis::cmd("FLUSHALL"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_says_swapped() {
    lost_to(LossReason::Swapped, |s| {
        run_on(s, redis::cmd("SWAPDB").arg(0).arg(1))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_says_moved() {
    lost_to(LossReason::Moved, |s| {
        run_on(s, redis::cmd("RENAME").arg(KEY).arg("elsewhere"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_says_restored() {
    lost_to(LossReason::Restored, |s| {
        let mut c = s.conn();
        let _: Option<u64> = redis::cmd("LOCK.ACQUIRE")
            .arg("other")
            .arg("someone")
            .arg(60_000)
            .query(&mut c)
            .expect("acquire");
        let dump: Vec<u8> = redis::cmd("DUMP").arg("other").query(&mut c).expect("DUMP");
        let _: () = redis::cmd("RESTORE")
            .arg(KEY)
            .arg(0)
            .arg(dump)
            .arg("REPLACE")
            .query(&mut c)
            .expect("RESTORE");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_says_evicted() {
    lost_to(LossReason::Evicted, |s| {
        let mut c = s.conn();
        let set = |c: &mut redis::Connection, name: &str, value: &str| {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(c)
                .expect("CONFIG SET");
        };
        set(&mut c, "maxmemory-policy", "allkeys-random");
        set(&mut c, "maxmemory", "1");
        // Every command evicts while memory is over the limit.
        assert!(eventually(WITHIN, || !key_exists(s, KEY)));
        set(&mut c, "maxmemory", "0");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_it_cannot_know() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let guard = relock.guard(KEY, TTL).await.expect("guard");
    run_on(
        &server,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("relock.log-max-len")
            .arg(0),
    );
    run_on(&server, redis::cmd("LOCK.FORCERELEASE").arg(KEY));
    let loss = loss_of(&guard).await;
    assert_eq!(loss.reason, LossReason::Unknown);
    assert_eq!(loss.node, None);
    assert!(loss.to_string().contains("cannot know why"), "{loss}");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

/// Over three masters, the journal of a master that refused the renewal explains the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_asks_the_masters_that_refused() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let relock = patient_client(&refs);
    let guard = relock.guard(KEY, TTL).await.expect("guard");
    let owner = guard.hold().owner.clone();
    assert!(eventually(WITHIN, || servers
        .iter()
        .all(|s| key_exists(s, KEY))));
    // A majority loses it (one of them to a force-release), the third still has it.
    run_on(&servers[1], redis::cmd("DEL").arg(KEY));
    run_on(&servers[2], redis::cmd("LOCK.FORCERELEASE").arg(KEY));
    let loss = loss_of(&guard).await;
    assert!(
        matches!(loss.reason, LossReason::Deleted | LossReason::ForceReleased),
        "{loss}"
    );
    let node = loss.node.clone().expect("a master");
    assert_ne!(node, relock.nodes()[0], "master 0 still had it: {loss}");
    // The minority's hold is released after the loss.
    drop(guard);
    relock.settle().await;
    assert!(
        eventually(WITHIN, || !key_exists(&servers[0], KEY)),
        "{owner}"
    );
}

/// The default owner names host and pid; the prefix is the caller's; none leaves the random
/// part alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_name_their_process() {
    let server = Server::start();
    let relock = patient_client(&[&server]);
    let lock = relock.acquire(KEY, TTL).await.expect("lock");
    let pid = std::process::id().to_string();
    let parts: Vec<&str> = lock.owner().rsplitn(3, '/').collect();
    assert_eq!(parts.len(), 3, "{}", lock.owner());
    assert_eq!(parts[1], pid);
    assert_eq!(parts[0].len(), 32);
    let (held_by, _) = relock_testkit::ask::holder(&server, KEY).expect("held");
    assert_eq!(held_by, lock.owner());
    lock.release().await.expect("release");
    for (prefix, starts) in [("billing", "billing/"), ("", "")] {
        let options = Options {
            owner_prefix: Some(prefix.to_string()),
            ..patient()
        };
        let named = Relock::with_options(&[server.url()], options).expect("client");
        let lock = named.acquire(KEY, TTL).await.expect("lock");
        assert!(lock.owner().starts_with(starts), "{}", lock.owner());
        assert_eq!(lock.owner().len(), starts.len() + 32);
        lock.release().await.expect("release");
    }
    // A huge prefix is cut to fit; the server takes the owner.
    let options = Options {
        owner_prefix: Some("x".repeat(1 << 20)),
        ..patient()
    };
    let huge = Relock::with_options(&[server.url()], options).expect("client");
    let lock = huge.acquire(KEY, TTL).await.expect("lock");
    assert_eq!(lock.owner().len(), 256);
    lock.release().await.expect("release");
}
