//! The module on a real Redis Cluster (3 masters, 3 replicas on loopback): slot routing,
//! hash tags, `LOCK.WAIT` hand-off on every shard, and a `CLUSTER FAILOVER` that keeps every
//! acknowledged lock with its token while the promoted replica keeps tokens rising.
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;
use relock_testkit::cmd;

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::Cluster;
use common::ask::owner_and_token;
use common::try_acquire;

/// A token above any wall-clock floor (~now_ms * 1000 < 2^51 until the year 2041).
const SEED_TOKEN: u64 = 4_503_599_627_370_496; // 2^52

#[test]
fn routes_by_slot_colocates_hash_tags_and_hands_off_on_every_shard() {
    let cluster = Cluster::start();
    let masters: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    assert_eq!(masters.len(), 3);

    // Locks spread over all masters, each taken on the master its slot says.
    let mut used = HashSet::new();
    for i in 0..60 {
        let key = format!("spread:{i}");
        let master = cluster.master_of(&key);
        used.insert(master.port);
        let token = try_acquire(&mut master.conn(), &key, "w", 30_000);
        assert!(token.is_some(), "{key} granted on its master");
        // Any other master answers with a redirect (the key specs route the command).
        let other = cluster.node(*masters.iter().find(|p| **p != master.port).unwrap());
        let err = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("w")
            .arg(30_000)
            .query::<Option<u64>>(&mut other.conn())
            .expect_err("wrong master redirects");
        assert_eq!(err.code(), Some("MOVED"), "{err:?}");
    }
    assert_eq!(used.len(), 3, "60 keys land on every master");
    let total: i64 = masters
        .iter()
        .map(|p| cluster_harness::relock_info(cluster.node(*p))["locks"])
        .sum();
    assert_eq!(total, 60);
    for p in &masters {
        assert!(cluster_harness::relock_info(cluster.node(*p))["locks"] > 0);
    }

    // Hash-tagged locks share a slot, hence a master, and can be held together.
    let tagged = ["{order:7}:row", "{order:7}:invoice", "{order:7}:shipment"];
    let home = cluster.master_of(tagged[0]).port;
    for k in tagged {
        assert_eq!(cluster.master_of(k).port, home, "{k} co-located");
        assert!(try_acquire(&mut cluster.node(home).conn(), k, "tx", 30_000).is_some());
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.WAIT")
        .arg(tagged[1])
        .arg("me")
        .arg(1000)
        .arg(0)
        .query(&mut cluster.node(home).conn())
        .expect("COMMAND GETKEYS");
    assert_eq!(keys, vec![tagged[1].to_string()]);

    // LOCK.WAIT hands off on each shard at once.
    let handoffs: Vec<_> = masters
        .iter()
        .map(|&port| {
            let key = cluster.key_on(port, "handoff:");
            let url = cluster.node(port).url();
            let mut holder_conn = cluster.node(port).conn();
            let first = try_acquire(&mut holder_conn, &key, "holder", 30_000).expect("free");
            let waiter = thread::spawn(move || {
                let mut c = redis::Client::open(url)
                    .and_then(|c| c.get_connection())
                    .expect("waiter connection");
                let started = Instant::now();
                let token: Option<u64> = redis::cmd("LOCK.WAIT")
                    .arg(&key)
                    .arg("waiter")
                    .arg(30_000)
                    .arg(10_000)
                    .query(&mut c)
                    .expect("LOCK.WAIT");
                (key, token, started.elapsed())
            });
            (port, first, holder_conn, waiter)
        })
        .collect();
    for (port, first, mut holder_conn, waiter) in handoffs {
        let key = cluster.key_on(port, "handoff:");
        let queued = common::eventually(Duration::from_secs(5), || {
            cluster_harness::relock_info(cluster.node(port))["waiters"] == 1
        });
        assert!(queued, "waiter queued on {port}");
        // The waiter waits at least this long before the release: it must have really waited.
        common::wait_out_ttl(Duration::from_millis(100));
        let left: Option<u64> = redis::cmd("LOCK.RELEASE")
            .arg(&key)
            .arg("holder")
            .query(&mut holder_conn)
            .expect("LOCK.RELEASE");
        assert_eq!(left, Some(0));
        let (_, token, waited) = waiter.join().expect("waiter thread");
        let token = token.expect("the waiter is granted the lock");
        assert!(token > first, "hand-off token {token} > {first}");
        assert!(waited >= Duration::from_millis(100), "it really waited");
        assert_eq!(
            owner_and_token(&mut cluster.node(port).conn(), &key)
                .map(|(owner, token)| (owner, token as u64)),
            Some(("waiter".to_string(), token))
        );
    }
}

#[test]
fn failover_after_wait_keeps_locks_and_tokens_keep_rising() {
    let cluster = Cluster::start();
    let master = cluster.masters()[0];
    let port = master.port;
    let mut m = master.conn();

    // Raise the counter far above the clock floor, so only a replicated counter can explain
    // larger tokens on the promoted replica.
    let seed_key = cluster.key_on(port, "seed:");
    let _: String = redis::cmd("LOCK.APPLY")
        .arg(&seed_key)
        .arg("o")
        .arg(SEED_TOKEN)
        .arg(1)
        .query(&mut m)
        .expect("LOCK.APPLY");

    let mut held = Vec::new();
    for i in 0..10 {
        let key = cluster.key_on(port, &format!("fo{i}:"));
        let owner = format!("owner-{i}");
        let token = try_acquire(&mut m, &key, &owner, 60_000).expect("free");
        assert!(token > SEED_TOKEN, "token {token} above the seed");
        held.push((key, owner, token));
    }
    let highest = held.iter().map(|h| h.2).max().unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut m)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica acknowledged every grant");

    let replica = cluster.replica_of(&held[0].0);
    let took = cluster.failover(replica);
    eprintln!("CLUSTER FAILOVER: roles switched and cluster healthy in {took:?}");
    assert_eq!(cluster.master_of(&held[0].0).port, replica.port);

    let mut r = replica.conn();
    for (key, owner, token) in &held {
        assert_eq!(
            owner_and_token(&mut r, key).map(|(owner, token)| (owner, token as u64)),
            Some((owner.clone(), *token)),
            "{key} kept its owner and token across the failover"
        );
    }
    // The old master now redirects writes.
    let err = redis::cmd("LOCK.ACQUIRE")
        .arg(&held[0].0)
        .arg("x")
        .arg(1000)
        .query::<Option<u64>>(&mut master.conn())
        .expect_err("the demoted master redirects");
    assert_eq!(err.code(), Some("MOVED"), "{err:?}");
    // The promoted replica never issues a token at or below one it replicated.
    for i in 0..5 {
        let key = cluster.key_on(replica.port, &format!("after{i}:"));
        let token = try_acquire(&mut r, &key, "new", 10_000).expect("free");
        assert!(token > highest, "new token {token} > replicated {highest}");
    }
    // A released lock of the old master can be released on the new one, by its owner only.
    let (key, owner, _) = &held[1];
    let left: Option<u64> = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(owner)
        .query(&mut r)
        .expect("LOCK.RELEASE");
    assert_eq!(left, Some(0));
}

fn myid(node: &common::Server) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.conn())
        .expect("CLUSTER MYID")
}

fn setslot(node: &common::Server, slot: u16, state: &str, id: &str) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(id)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on {}: {e}", node.port));
}

#[test]
fn waiters_of_a_key_migrated_away_are_redirected_not_granted() {
    use common::raw::{Raw, Reply};
    let cluster = Cluster::start();
    let masters: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    let (from, to) = (cluster.node(masters[0]), cluster.node(masters[1]));
    let key = cluster.key_on(from.port, "moving:");
    let slot = cluster_harness::key_slot(&key);
    let mut src = from.conn();
    let token = try_acquire(&mut src, &key, "a", 60_000).expect("free");
    let mut waiter = Raw::connect(from);
    waiter.send_wait(&key, "b", 60_000, 0);
    assert!(
        common::eventually(Duration::from_secs(5), || {
            common::lock_info(&mut src, &key).is_some_and(|i| i.waiters == 1)
        }),
        "the waiter queued on the source"
    );

    // Resharding moves the slot, and MIGRATE moves the key (and deletes it on the source).
    let (from_id, to_id) = (myid(from), myid(to));
    setslot(to, slot, "IMPORTING", &from_id);
    setslot(from, slot, "MIGRATING", &to_id);
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to.port)
        .arg(&key)
        .arg(0)
        .arg(5000)
        .query(&mut src)
        .expect("MIGRATE");

    // The source must not grant: the lock lives on at the target. The waiter is told where.
    match waiter.read(Duration::from_secs(5)) {
        Reply::Error(e) => assert!(
            e.starts_with(&format!("ASK {slot} ")) && e.ends_with(&format!(":{}", to.port)),
            "redirect to the target: {e}"
        ),
        other => panic!("waiter on the source was answered {other:?} instead of a redirect"),
    }
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut src)
        .unwrap();
    assert_eq!(left, 0, "no lock granted on the source");
    let mut dst = to.conn();
    let _: () = redis::cmd("ASKING").query(&mut dst).unwrap();
    assert_eq!(
        owner_and_token(&mut dst, &key).map(|(owner, token)| (owner, token as u64)),
        Some(("a".to_string(), token)),
        "the hold moved intact"
    );

    // Once the slot belongs to the target, a waiter left on the source hears MOVED.
    for node in cluster.masters() {
        setslot(node, slot, "NODE", &to_id);
    }
    let waited: redis::RedisResult<Option<u64>> = redis::cmd("LOCK.WAIT")
        .arg(&key)
        .arg("c")
        .arg(1000)
        .arg(100)
        .query(&mut src);
    assert_eq!(waited.expect_err("redirect").code(), Some("MOVED"));
}

/// Waiters queued on a master whose lock expires while `CLUSTER FAILOVER` pauses it (found by
/// an attack round; FORCE and TAKEOVER behave the same): every waiter is answered (no hang),
/// at most one is granted, the new master agrees on that grant, and no node keeps a blocked
/// client.
#[test]
fn cluster_failover_with_waiters_and_an_expiring_lock_answers_every_waiter_once() {
    use common::raw::{Raw, Reply};
    let mode: Option<&str> = None;
    let cluster = Cluster::start();
    let master = cluster.masters()[0];
    let key = cluster.key_on(master.port, "fo:");
    let mut m = master.conn();
    // Held long until the five waiters are queued, then renewed to 400 ms (a 400 ms lease taken
    // first could end before a loaded machine had queued them all).
    let _: Option<i64> = cmd!("LOCK.ACQUIRE", &key, "a", 30_000)
        .query(&mut m)
        .unwrap();
    let mut waiters: Vec<Raw> = (0..5)
        .map(|i| {
            let mut w = Raw::connect(master);
            w.send_wait(&key, &format!("w{i}"), 30_000, 0);
            w
        })
        .collect();
    assert!(common::eventually(Duration::from_secs(5), || {
        common::lock_info(&mut master.conn(), &key).is_some_and(|i| i.waiters == 5)
    }));
    let _: i64 = cmd!("LOCK.RENEW", &key, "a", 400).query(&mut m).unwrap();
    let _: i64 = cmd!("WAIT", 1, 2000).query(&mut m).unwrap();
    let replica = cluster.replica_of(&key);
    let mut r = replica.conn();
    let mut c = cmd!("CLUSTER", "FAILOVER");
    if let Some(mode) = mode {
        c.arg(mode);
    }
    let _: String = c.query(&mut r).unwrap();
    let started = Instant::now();
    let mut answers = Vec::new();
    for w in waiters.iter_mut() {
        answers.push(w.read_within(Duration::from_secs(15)));
    }
    eprintln!("answers after {:?}: {answers:?}", started.elapsed());
    assert!(
        answers.iter().all(|a| a.is_some()),
        "a waiter was never answered: {answers:?}"
    );
    let granted: Vec<_> = answers
        .iter()
        .filter(|a| matches!(a, Some(Reply::Int(_))))
        .collect();
    assert!(granted.len() <= 1, "two waiters granted: {answers:?}");
    cluster.wait_healthy();
    // Whatever was granted, the new master must agree on it.
    let new_master = cluster.master_of(&key);
    let info = common::lock_info(&mut new_master.conn(), &key);
    eprintln!("new master {} holds {info:?}", new_master.port);
    if let Some(Some(Reply::Int(t))) = granted.first().map(|a| (*a).clone()) {
        let info = info.expect("a granted lock exists on the new master");
        assert_eq!(
            info.token, t,
            "the granted token is the one on the new master"
        );
    }
    for n in &cluster.nodes {
        let i = cluster_harness::relock_info(n);
        assert_eq!(i["waiters"], 0, "node {} waiters", n.port);
        let mut c = n.conn();
        let blocked: String = cmd!("INFO", "clients").query(&mut c).unwrap();
        assert!(
            blocked.contains("blocked_clients:0"),
            "node {} still has blocked clients:\n{blocked}",
            n.port
        );
    }
}

/// `LOCK.MACQUIRE`'s keys share a slot: the keynum key spec lets Redis answer `CROSSSLOT` for
/// keys of different slots, route a group of one hash tag to its master, and `MOVED` elsewhere.
#[test]
fn a_group_of_keys_lives_in_one_slot() {
    let cluster = Cluster::start_with(0);
    let group = ["{acct:9}:from", "{acct:9}:to", "{acct:9}:ledger"];
    let home = cluster.master_of(group[0]);
    let tokens: Vec<u64> = redis::cmd("LOCK.MACQUIRE")
        .arg(group.len())
        .arg(&group)
        .arg("tx")
        .arg(30_000)
        .query(&mut home.conn())
        .expect("a group of one slot");
    assert!(tokens.iter().all(|t| *t == tokens[0]), "{tokens:?}");
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != home.port)
        .expect("another master");
    let err = redis::cmd("LOCK.MRELEASE")
        .arg(group.len())
        .arg(&group)
        .arg("tx")
        .query::<i64>(&mut other.conn())
        .expect_err("another master redirects");
    assert_eq!(err.code(), Some("MOVED"), "{err:?}");
    let (a, b) = ("spread:1", "spread:2");
    assert_ne!(cluster_harness::key_slot(a), cluster_harness::key_slot(b));
    let err = redis::cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg(a)
        .arg(b)
        .arg("tx")
        .arg(30_000)
        .query::<Option<Vec<u64>>>(&mut cluster.master_of(a).conn())
        .expect_err("keys of two slots");
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err:?}");
    let released: i64 = redis::cmd("LOCK.MRELEASE")
        .arg(group.len())
        .arg(&group)
        .arg("tx")
        .query(&mut home.conn())
        .unwrap();
    assert_eq!(released, 3);
}
