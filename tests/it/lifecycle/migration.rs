//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a slot with locks, shared
//! holders and a queued waiter, on a cluster of three masters without replicas or AOF (so that
//! nothing but the migration receives what the source propagates). It behaves as with `MIGRATE`:
//! every hold arrives with its owner, token and lease, changes made while the slot streams
//! arrive as their effects, the waiter is redirected, and nobody gets a second owner.
//!
//! On servers without atomic slot migration (Redis, Valkey 8) the test checks that the command
//! does not exist there, so it never passes by doing nothing where it should run.
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;
use relock_testkit::cmd;

use std::time::Duration;

use cluster_harness::Cluster;
use common::ask::cluster_migration_supported;
use common::ask::job_state;
use common::ask::migrateslots_supported;
use common::ask::owner_token as holders;
use common::ask::task_field;
use common::raw::{Raw, Reply};
use common::{eventually, Server};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

const DUE: Duration = Duration::from_secs(30);

fn node_id(c: &mut Connection) -> String {
    cmd!("CLUSTER", "MYID").query(c).unwrap()
}

#[test]
fn a_slot_migrated_atomically_keeps_every_hold_and_redirects_its_waiters() {
    let cluster = Cluster::start_with(0);
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let mut src = source.conn();
    let mut dst = target.conn();
    if !migrateslots_supported(&mut src) {
        let refused: redis::RedisResult<Value> =
            cmd!("CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", 0, 0, "NODE", "x").query(&mut src);
        assert!(
            refused.is_err(),
            "no atomic slot migration here: {refused:?}"
        );
        return;
    }
    let tag = cluster.key_on(source.port, "asm");
    let (lock, readers) = (format!("{{{tag}}}lock"), format!("{{{tag}}}readers"));
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", &lock).query(&mut src).unwrap();

    let token: i64 = cmd!("LOCK.ACQUIRE", &lock, "owner", 60_000)
        .query(&mut src)
        .unwrap();
    for reader in ["r1", "r2"] {
        let _: i64 = cmd!(
            "LOCK.ACQUIRE",
            &readers,
            reader,
            60_000,
            "SHARED",
            "LIMIT",
            3
        )
        .query(&mut src)
        .unwrap();
    }
    let mut waiter = Raw::connect(source);
    waiter.send(&[b"LOCK.WAIT", lock.as_bytes(), b"waiter", b"10000", b"0"]);
    assert!(eventually(DUE, || {
        common::info_field(&mut src, "waiters") == 1
    }));

    // Hold the job before its pause, change locks while the slot streams, then let it finish.
    let _: () = cmd!("DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", 1)
        .query(&mut src)
        .unwrap();
    let target_id = node_id(&mut dst);
    let _: Value = cmd!(
        "CLUSTER",
        "MIGRATESLOTS",
        "SLOTSRANGE",
        slot,
        slot,
        "NODE",
        &target_id
    )
    .query(&mut src)
    .expect("CLUSTER MIGRATESLOTS");
    // The snapshot is sent and the job streams what changes, held before its pause.
    let streaming = eventually(DUE, || {
        job_state(&mut src).as_deref() == Some("waiting-to-pause")
    });
    assert!(streaming, "migration state: {:?}", job_state(&mut src));
    let renewed: i64 = cmd!("LOCK.RENEW", &lock, "owner", 90_000)
        .query(&mut src)
        .unwrap();
    assert_eq!(renewed, token);
    let left: i64 = cmd!("LOCK.RELEASE", &readers, "r2")
        .query(&mut src)
        .unwrap();
    assert_eq!(left, 0);
    let r3: i64 = cmd!("LOCK.ACQUIRE", &readers, "r3", 60_000, "SHARED", "LIMIT", 3)
        .query(&mut src)
        .unwrap();
    let before = holders(&mut src, &readers);
    let _: () = cmd!("DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", 0)
        .query(&mut src)
        .unwrap();
    assert!(
        eventually(DUE, || job_state(&mut src).as_deref() == Some("success")),
        "migration state: {:?}",
        job_state(&mut src)
    );

    // The waiter is redirected to where the lock lives now.
    let addr = format!("127.0.0.1:{}", target.port);
    assert_eq!(
        waiter.read(DUE),
        Reply::Error(format!("MOVED {slot} {addr}"))
    );
    // Every hold arrived as it was, the changes made while streaming included.
    let info: Value = cmd!("LOCK.INFO", &lock).query(&mut dst).unwrap();
    let Value::Array(fields) = info else {
        panic!("LOCK.INFO on the target: {info:?}")
    };
    assert_eq!(fields[1], Value::BulkString(b"owner".to_vec()));
    assert_eq!(fields[3], Value::Int(token));
    let Value::Int(ttl) = fields[7] else {
        panic!("ttl {:?}", fields[7])
    };
    assert!(
        ttl > 60_000,
        "the renewal made while streaming arrived: ttl {ttl}"
    );
    assert_eq!(holders(&mut dst, &readers), before);
    assert!(before.iter().any(|(o, t)| o == b"r3" && *t == r3));
    // Nobody gets a second owner, and new tokens keep rising on the target.
    let other: Option<i64> = cmd!("LOCK.ACQUIRE", &lock, "other", 1000)
        .query(&mut dst)
        .unwrap();
    assert_eq!(other, None);
    let fresh: i64 = cmd!("LOCK.ACQUIRE", format!("{{{tag}}}fresh"), "o", 1000)
        .query(&mut dst)
        .unwrap();
    assert!(
        fresh > r3,
        "a token issued on the target ({fresh}) after {r3}"
    );
    // The source keeps nothing of the slot.
    assert_eq!(common::info_field(&mut src, "waiters"), 0);
    let moved: redis::RedisResult<Value> = cmd!("LOCK.INFO", &lock).query(&mut src);
    assert!(
        matches!(&moved, Err(e) if e.kind() == redis::ErrorKind::Moved),
        "the source no longer serves the slot: {moved:?}"
    );
}

/// Moves `slot` to `to` with `CLUSTER MIGRATION IMPORT` (sent to the target) and waits until the
/// task is completed and every node of `cluster` agrees who owns the slot.
fn import_slot(cluster: &Cluster, to: &Server, slot: u16) {
    let mut c = to.conn();
    let id: String = cmd!("CLUSTER", "MIGRATION", "IMPORT", slot, slot)
        .query(&mut c)
        .expect("CLUSTER MIGRATION IMPORT");
    assert!(
        eventually(DUE, || {
            let state = task_field(&mut c, &id, "state");
            assert_ne!(
                state.as_deref(),
                Some("failed"),
                "migration failed: {:?}",
                task_field(&mut c, &id, "last_error")
            );
            state.as_deref() == Some("completed")
        }),
        "migration of slot {slot}: {:?}",
        task_field(&mut c, &id, "state")
    );
    assert!(
        eventually(DUE, || cluster.nodes.iter().all(
            |n| cluster_harness::slot_owner_seen_by(n, slot) == Some(to.port)
        )),
        "not every node sees slot {slot} on {}",
        to.port
    );
}

/// A hold as `LOCK.HOLDERS` shows it: owner, token, count, permits, and its lease end (now + ttl,
/// ms; compared within a margin).
#[derive(Debug, Clone)]
struct Seen {
    owner: String,
    token: i64,
    count: i64,
    permits: i64,
    lease_end: i64,
}

fn seen_holders(c: &mut Connection, key: &str) -> Vec<Seen> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let now = common::now_ms();
    let Value::Array(items) = v else {
        return vec![];
    };
    items
        .into_iter()
        .map(|entry| {
            let Value::Array(f) = entry else {
                panic!("entry {entry:?}")
            };
            let field = |name: &str| {
                f.chunks(2)
                    .find(|p| p[0] == Value::BulkString(name.as_bytes().to_vec()))
                    .map(|p| p[1].clone())
                    .unwrap_or_else(|| panic!("no {name} in {f:?}"))
            };
            let int = |name: &str| match field(name) {
                Value::Int(n) => n,
                other => panic!("{name}: {other:?}"),
            };
            let Value::BulkString(owner) = field("owner") else {
                panic!("owner {f:?}")
            };
            Seen {
                owner: String::from_utf8_lossy(&owner).into_owned(),
                token: int("token"),
                count: int("count"),
                permits: int("permits"),
                lease_end: now + int("ttl"),
            }
        })
        .collect()
}

/// `before` and `after` are the same holds, leases within `margin_ms` (ttl is read in ms at two
/// moments).
fn assert_same_holds(what: &str, before: &[Seen], after: &[Seen]) {
    let key = |s: &Seen| (s.owner.clone(), s.token, s.count, s.permits);
    assert_eq!(
        before.iter().map(key).collect::<Vec<_>>(),
        after.iter().map(key).collect::<Vec<_>>(),
        "{what}: holds differ"
    );
    for (b, a) in before.iter().zip(after) {
        assert!(
            (b.lease_end - a.lease_end).abs() <= 250,
            "{what}: {} lease end moved from {} to {}",
            b.owner,
            b.lease_end,
            a.lease_end
        );
    }
}

/// (reason, key, owner) of the newest `n` journal entries.
fn journal(c: &mut Connection, n: usize) -> Vec<(String, String, String)> {
    let v: Value = cmd!("LOCK.LOG", n).query(c).unwrap();
    let Value::Array(items) = v else {
        return vec![];
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    items
        .iter()
        .map(|e| {
            let Value::Array(f) = e else { panic!("{e:?}") };
            let get = |name: &str| {
                f.chunks(2)
                    .find(|p| p[0] == Value::BulkString(name.as_bytes().to_vec()))
                    .map(|p| text(&p[1]))
                    .unwrap_or_default()
            };
            (get("reason"), get("key"), get("owner"))
        })
        .collect()
}

/// A client of a key of the slot that follows `MOVED` (as cluster clients do) and retries
/// `TRYAGAIN`.
struct Follower {
    conn: Connection,
}

impl Follower {
    fn new(port: u16) -> Follower {
        let conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        Follower { conn }
    }

    /// `cmd`'s reply, once a node answers it: after a `MOVED`, asked again of the node it names;
    /// after a `TRYAGAIN` (the slot's keys are being moved), asked again shortly.
    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        let mut reply = None;
        let answered = eventually(DUE, || match cmd.query::<T>(&mut self.conn) {
            Ok(v) => {
                reply = Some(v);
                true
            }
            Err(e) if e.kind() == redis::ErrorKind::Moved => {
                let port: u16 = e
                    .redirect_node()
                    .and_then(|(addr, _)| addr.rsplit(':').next()?.parse().ok())
                    .expect("MOVED names a node");
                *self = Follower::new(port);
                false
            }
            Err(e) if e.kind() == redis::ErrorKind::TryAgain => false,
            Err(e) => panic!("{}: {e}", common::show(cmd)),
        });
        assert!(answered, "{} never answered", common::show(cmd));
        reply.expect("answered")
    }
}

/// Redis 8.4+'s atomic slot migration, on a cluster with a replica per master: a slot holding an
/// exclusive hold (reentered), 50 shared holders, a group (`LOCK.MACQUIRE`), a lease that lapses
/// during the move and a queued waiter is moved to another master under a live workload (two
/// clients taking turns on a lock of the slot, following `MOVED`), and back. Every hold keeps
/// its owner, token, count and lease; the lapsed lease is gone; the waiter is served; the
/// source's journal says `moved` (not `deleted`) for the holds it handed over; the replicas agree
/// with their masters; the workload never sees two owners or a token going backwards.
#[test]
fn redis_atomic_slot_migration_keeps_every_hold_under_load_and_back() {
    let probe = Server::start();
    if !cluster_migration_supported(&mut probe.conn()) {
        println!(
            "skipped: this server has no atomic slot migration (CLUSTER MIGRATION, Redis 8.4+)"
        );
        return;
    }
    drop(probe);
    let cluster = Cluster::start();
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let mut src = source.conn();
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 1000)
        .query(&mut src)
        .unwrap();
    let mut dst = target.conn();
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 1000)
        .query(&mut dst)
        .unwrap();
    let tag = cluster.key_on(source.port, "asm");
    let k = |name: &str| format!("{{{tag}}}{name}");
    let (lock, readers, work) = (k("lock"), k("readers"), k("work"));
    let group = [k("g1"), k("g2"), k("g3")];
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", &lock).query(&mut src).unwrap();

    // An exclusive hold, reentered (count 2).
    let token: i64 = cmd!("LOCK.ACQUIRE", &lock, "owner", 60_000)
        .query(&mut src)
        .unwrap();
    let count: i64 = cmd!("LOCK.REENTER", &lock, "owner", 60_000)
        .query(&mut src)
        .unwrap();
    assert_eq!(count, 2);
    // 50 shared holders, and one whose lease lapses during the move.
    for i in 0..50 {
        let _: i64 = cmd!("LOCK.ACQUIRE", &readers, format!("r{i}"), 60_000, "SHARED")
            .query(&mut src)
            .unwrap();
    }
    let _: i64 = cmd!("LOCK.ACQUIRE", &readers, "lapsing", 2_000, "SHARED")
        .query(&mut src)
        .unwrap();
    // A group.
    let group_tokens: Vec<i64> = cmd!(
        "LOCK.MACQUIRE",
        3,
        &group[0],
        &group[1],
        &group[2],
        "grp",
        60_000
    )
    .query(&mut src)
    .unwrap();
    // A waiter queued behind the exclusive hold.
    let mut waiter = Raw::connect(source);
    waiter.send(&[b"LOCK.WAIT", lock.as_bytes(), b"waiter", b"30000", b"0"]);
    assert!(eventually(DUE, || {
        common::info_field(&mut src, "waiters") == 1
    }));
    let exclusive_before = seen_holders(&mut src, &lock);
    let group_before: Vec<Vec<Seen>> = group.iter().map(|g| seen_holders(&mut src, g)).collect();
    let readers_before: Vec<Seen> = seen_holders(&mut src, &readers);
    assert_eq!(readers_before.len(), 51);

    // The workload: two clients taking turns on `work`, following MOVED; each checks it is the
    // only owner and that tokens only rise.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let last = std::sync::Arc::new(std::sync::Mutex::new(0i64));
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, held, last) = (stop.clone(), held.clone(), last.clone());
            let (work, port) = (work.clone(), source.port);
            std::thread::spawn(move || {
                let mut c = Follower::new(port);
                let me = format!("worker{w}");
                let mut grants = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let got: Option<i64> = c.query(&cmd!("LOCK.ACQUIRE", &work, &me, 10_000));
                    let Some(t) = got else {
                        std::thread::sleep(Duration::from_millis(1)); // the workload's pace (not a wait)
                        continue;
                    };
                    assert!(
                        !held.swap(true, std::sync::atomic::Ordering::SeqCst),
                        "{me} got {work} (token {t}) while the other held it"
                    );
                    {
                        let mut last = last.lock().unwrap();
                        assert!(t > *last, "token {t} after {}", *last);
                        *last = t;
                    }
                    grants += 1;
                    held.store(false, std::sync::atomic::Ordering::SeqCst);
                    let left: i64 = c.query(&cmd!("LOCK.RELEASE", &work, &me));
                    assert_eq!(left, 0, "{me} released {work}");
                }
                grants
            })
        })
        .collect();

    let grants_before = *last.lock().unwrap();
    import_slot(&cluster, target, slot);

    // The waiter is served: redirected to the target, where it queues again and gets the lock
    // once the owner lets go.
    let addr = format!("127.0.0.1:{}", target.port);
    assert_eq!(
        waiter.read(DUE),
        Reply::Error(format!("MOVED {slot} {addr}")),
        "the waiter queued on the source"
    );
    let mut waiter = Raw::connect(target);
    waiter.send(&[b"LOCK.WAIT", lock.as_bytes(), b"waiter", b"30000", b"30000"]);
    assert!(eventually(DUE, || {
        common::info_field(&mut dst, "waiters") == 1
    }));

    // Every hold arrived as it was; the lapsed lease did not come back.
    assert_same_holds(
        "exclusive",
        &exclusive_before,
        &seen_holders(&mut dst, &lock),
    );
    for (g, before) in group.iter().zip(&group_before) {
        assert_same_holds(g, before, &seen_holders(&mut dst, g));
        assert_eq!(before[0].token, group_tokens[0]);
    }
    // The shared holders too, the lapsing lease with its lease end, which then lapses there.
    let mut readers_after = seen_holders(&mut dst, &readers);
    let lapsing_end = readers_before.last().map(|s| s.lease_end).unwrap();
    if common::now_ms() < lapsing_end - 250 {
        assert_same_holds("shared", &readers_before, &readers_after);
    } else {
        readers_after.push(readers_before[50].clone());
        assert_same_holds("shared", &readers_before, &readers_after);
    }
    let readers_before: Vec<Seen> = readers_before[..50].to_vec();
    wait_out_ttl(Duration::from_millis(
        (lapsing_end + 50 - common::now_ms()).max(0) as u64,
    ));
    let lapsed: Option<i64> = cmd!("LOCK.RENEW", &readers, "lapsing", 1000)
        .query(&mut dst)
        .unwrap();
    assert_eq!(lapsed, None, "the lease lapsed on the target");
    assert_same_holds("shared", &readers_before, &seen_holders(&mut dst, &readers));
    // Nobody gets a second owner on the target.
    let other: Option<i64> = cmd!("LOCK.ACQUIRE", &lock, "other", 1000)
        .query(&mut dst)
        .unwrap();
    assert_eq!(other, None);

    // The source handed its holds over: its journal says `moved`, never `deleted`.
    // Redis trims the slot a few keys per cron tick after the handover: wait for the lock's key.
    let handed = |c: &mut Connection| {
        let moved = |c: &mut Connection| {
            let j = journal(c, 1000);
            assert!(
                !j.iter()
                    .any(|(r, key, _)| r == "deleted" && key.contains(&tag)),
                "handed-over holds logged as deleted: {j:?}"
            );
            j.iter()
                .filter(|(r, key, _)| r == "moved" && key.contains(&tag))
                .map(|(_, key, owner)| (key.clone(), owner.clone()))
                .collect::<std::collections::HashSet<_>>()
        };
        let all_trimmed = |m: &std::collections::HashSet<(String, String)>| {
            [&lock, &readers, &group[0], &group[1], &group[2]]
                .iter()
                .all(|k| m.iter().any(|(key, _)| key == *k))
        };
        assert!(
            eventually(DUE, || all_trimmed(&moved(c))),
            "no `moved` entries for every key: {:?}",
            moved(c)
        );
        moved(c)
    };
    let moved = handed(&mut src);
    for (key, owner) in [(&lock, "owner"), (&group[0], "grp"), (&group[2], "grp")] {
        assert!(
            moved.contains(&(key.clone(), owner.to_string())),
            "no `moved` entry for {owner} of {key} at the source: {moved:?}"
        );
    }
    assert_eq!(
        moved
            .iter()
            .filter(|(key, owner)| *key == readers && owner != "lapsing")
            .count(),
        50,
        "one `moved` entry per shared holder: {moved:?}"
    );
    assert_eq!(common::info_field(&mut src, "waiters"), 0);

    // And back, still under the workload.
    let _: () = cmd!("LOCK.LOG", "RESET").query(&mut dst).unwrap();
    import_slot(&cluster, source, slot);
    assert_eq!(
        waiter.read(DUE),
        Reply::Error(format!("MOVED {slot} 127.0.0.1:{}", source.port)),
        "the waiter queued on the target"
    );
    assert_same_holds(
        "exclusive, back",
        &exclusive_before,
        &seen_holders(&mut src, &lock),
    );
    for (g, before) in group.iter().zip(&group_before) {
        assert_same_holds(g, before, &seen_holders(&mut src, g));
    }
    assert_same_holds(
        "shared, back",
        &readers_before,
        &seen_holders(&mut src, &readers),
    );
    let moved_back = handed(&mut dst);
    assert!(moved_back.contains(&(lock.clone(), "owner".to_string())));

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let grants: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(
        *last.lock().unwrap() > grants_before && grants > 0,
        "the workload ran through the moves ({grants} grants)"
    );

    // The waiter is served at last, on the node that holds the slot now.
    let mut waiter = Raw::connect(source);
    waiter.send(&[b"LOCK.WAIT", lock.as_bytes(), b"waiter", b"30000", b"30000"]);
    assert!(eventually(DUE, || {
        common::info_field(&mut src, "waiters") == 1
    }));
    for _ in 0..2 {
        let _: i64 = cmd!("LOCK.RELEASE", &lock, "owner")
            .query(&mut src)
            .unwrap();
    }
    match waiter.read(DUE) {
        Reply::Int(t) => assert!(t > token, "the waiter's token {t} after {token}"),
        other => panic!("the waiter got {other:?}"),
    }

    // The replicas agree with their masters: the source's replica has the slot's holds again,
    // the target's replica none of them.
    for master in [source, target] {
        let replica = cluster.replica_of_master(master.port);
        let mut m = master.conn();
        let mut r = replica.conn();
        let _: () = cmd!("READONLY").query(&mut r).unwrap();
        let offset: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
        assert_eq!(offset, 1, "the replica of {} caught up", master.port);
        for key in [&lock, &readers, &group[0], &group[1], &group[2]] {
            let on = |c: &mut Connection| -> Vec<(String, i64, i64)> {
                match cmd!("LOCK.HOLDERS", key, "COUNT", 0).query::<Value>(c) {
                    Ok(Value::Nil) | Err(_) => vec![],
                    Ok(_) => seen_holders(c, key)
                        .into_iter()
                        .map(|s| (s.owner, s.token, s.count))
                        .collect(),
                }
            };
            assert_eq!(
                on(&mut m),
                on(&mut r),
                "{key} on {} and its replica",
                master.port
            );
        }
    }
}

/// Redis 8.4+: an import cancelled on the target (`CLUSTER MIGRATION CANCEL`) after some of the
/// slot's locks arrived. The target trims what it received (one `key_trimmed` each); those holds
/// were never its own and did not move (the source keeps serving them): the target's journal
/// says nothing of them (before: `moved` for each), and the source keeps every hold, its journal
/// silent too.
///
/// The slot is padded with large strings so that its snapshot streams long enough for the test
/// to cancel between the first lock's arrival and the handover.
#[test]
fn a_cancelled_import_journals_nothing_for_the_holds_the_target_drops() {
    let probe = Server::start();
    if !cluster_migration_supported(&mut probe.conn()) {
        println!(
            "skipped: this server has no atomic slot migration (CLUSTER MIGRATION, Redis 8.4+)"
        );
        return;
    }
    drop(probe);
    let cluster = Cluster::start_with(0);
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let mut src = source.conn();
    let mut dst = target.conn();
    for c in [&mut src, &mut dst] {
        let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 1000)
            .query(c)
            .unwrap();
    }
    let tag = cluster.key_on(source.port, "cancel");
    let k = |name: String| format!("{{{tag}}}{name}");
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", k("x".into()))
        .query(&mut src)
        .unwrap();
    // Locks spread among the padding, so that some arrive early in the snapshot.
    let locks = 50;
    let mut pipe = redis::pipe();
    let padding = vec![b'p'; 32 * 1024];
    for i in 0..1500 {
        pipe.cmd("SET")
            .arg(k(format!("pad{i}")))
            .arg(&padding)
            .ignore();
        if i % (1500 / locks) == 0 {
            // 1500 / 50: exactly `locks` of them.
            let key = k(format!("lock{i}"));
            for r in 0..5 {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg(format!("r{r}"))
                    .arg(600_000)
                    .arg("SHARED")
                    .ignore();
            }
        }
    }
    let _: () = pipe.query(&mut src).unwrap();
    let holds = common::info_field(&mut src, "holds");
    assert_eq!(holds, 5 * locks as i64);
    let id: String = cmd!("CLUSTER", "MIGRATION", "IMPORT", slot, slot)
        .query(&mut dst)
        .expect("CLUSTER MIGRATION IMPORT");
    // As soon as the first lock arrived: cancel.
    let arrived = eventually(DUE, || common::info_field(&mut dst, "locks") > 0);
    let _: redis::RedisResult<Value> =
        cmd!("CLUSTER", "MIGRATION", "CANCEL", "ID", &id).query(&mut dst);
    let state = task_field(&mut dst, &id, "state");
    assert!(arrived, "no lock arrived at the target");
    assert_ne!(
        state.as_deref(),
        Some("completed"),
        "the import completed before the test could cancel it"
    );
    let received = common::info_field(&mut dst, "locks");
    eprintln!("cancelled with {received} of {locks} locks received; task {state:?}");
    // The target trims what it received.
    assert!(
        eventually(DUE, || common::info_field(&mut dst, "locks") == 0),
        "the target kept {} locks of a cancelled import",
        common::info_field(&mut dst, "locks")
    );
    let target_journal = journal(&mut dst, 1000);
    assert!(
        target_journal.iter().all(|(_, key, _)| !key.contains(&tag)),
        "the target's journal speaks of holds that were never its own: {target_journal:?}"
    );
    // The source still serves every hold, and says nothing of them.
    assert!(eventually(DUE, || {
        cluster_harness::slot_owner_seen_by(source, slot) == Some(source.port)
    }));
    assert_eq!(common::info_field(&mut src, "holds"), holds);
    let source_journal = journal(&mut src, 1000);
    assert!(
        source_journal.iter().all(|(_, key, _)| !key.contains(&tag)),
        "the source's journal: {source_journal:?}"
    );
}

/// Redis 8.4+: a shared key imported by an atomic slot migration gets its lapse timer on the
/// target once the import completes (while importing, the target does no work of its own on
/// the slot): a lease that lapses after the move is ended by the target's schedule without any
/// command touching the key. (Before: it stayed until a command touched the key.)
#[test]
fn a_lease_imported_by_a_slot_migration_is_ended_by_the_targets_schedule() {
    let probe = Server::start();
    if !cluster_migration_supported(&mut probe.conn()) {
        println!(
            "skipped: this server has no atomic slot migration (CLUSTER MIGRATION, Redis 8.4+)"
        );
        return;
    }
    drop(probe);
    let cluster = Cluster::start_with(0);
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let mut src = source.conn();
    let mut dst = target.conn();
    let tag = cluster.key_on(source.port, "lapse");
    let key = format!("{{{tag}}}readers");
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", &key).query(&mut src).unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", &key, "short", 4_000, "SHARED")
        .query(&mut src)
        .unwrap();
    let end = common::now_ms() + 4_000;
    let _: i64 = cmd!("LOCK.ACQUIRE", &key, "long", 600_000, "SHARED")
        .query(&mut src)
        .unwrap();
    import_slot(&cluster, target, slot);
    assert_eq!(common::info_field(&mut dst, "holds"), 2);
    assert!(
        common::now_ms() < end,
        "the machine was too slow: the lease ended first"
    );
    // Only INFO from here on: no command touches the key.
    let ended = eventually(DUE, || common::info_field(&mut dst, "holds") == 1);
    assert!(
        ended,
        "the lapsed lease is still on the target {} ms after it ended (lapse timers: {})",
        common::now_ms() - end,
        common::info_field(&mut dst, "lapse_timers")
    );
}
