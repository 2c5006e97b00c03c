//! State that must survive the server's own changes (written by the attack on issue 30, from
//! outside): Redis 8.6's atomic slot migration with a replica per node and a failover of the
//! source or the target during or just after the move, the rollback of every relock config by a failed multi-parameter
//! `CONFIG SET`, and tokens under a clock skew between a master and its replica. Each test says
//! what it attacks and what must hold; a test that found a break says so.
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;
use relock_testkit::cmd;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_harness::Cluster;
use common::ask::cluster_migration_supported;
use common::ask::task_field;
use common::raw::{Raw, Reply};
use common::{eventually, Server};
use redis::{Connection, Value};

const DUE: Duration = Duration::from_secs(30);

/// Whether `n` has a migration task neither completed, failed nor canceled.
fn task_under_way(n: &Server) -> bool {
    let Ok(v) = cmd!("CLUSTER", "MIGRATION", "STATUS", "ALL").query::<Value>(&mut n.conn()) else {
        return false;
    };
    let Value::Array(tasks) = v else { return false };
    tasks.iter().any(|task| {
        let fields: Vec<Value> = match task {
            Value::Array(f) => f.clone(),
            Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
            _ => return false,
        };
        fields.chunks(2).any(|pair| match pair {
            [Value::BulkString(name), Value::BulkString(state)] if name == b"state" => {
                !matches!(state.as_slice(), b"completed" | b"failed" | b"canceled")
            }
            _ => false,
        })
    })
}

/// Starts `CLUSTER MIGRATION IMPORT slot slot` on `to`; returns the task id.
fn start_import(to: &Server, slot: u16) -> String {
    cmd!("CLUSTER", "MIGRATION", "IMPORT", slot, slot)
        .query(&mut to.conn())
        .expect("CLUSTER MIGRATION IMPORT")
}

/// Waits until the task `id` on `to` is completed (panics if it failed) and every node sees the
/// slot on `to`.
fn finish_import(cluster: &Cluster, to: &Server, id: &str, slot: u16) {
    let mut c = to.conn();
    assert!(
        eventually(DUE, || {
            let state = task_field(&mut c, id, "state");
            assert_ne!(
                state.as_deref(),
                Some("failed"),
                "migration failed: {:?}",
                task_field(&mut c, id, "last_error")
            );
            state.as_deref() == Some("completed")
        }),
        "migration of slot {slot}: {:?}",
        task_field(&mut c, id, "state")
    );
    wait_owner(cluster, slot, to.port);
}

fn wait_owner(cluster: &Cluster, slot: u16, port: u16) {
    assert!(
        eventually(DUE, || {
            cluster
                .nodes
                .iter()
                .all(|n| cluster_harness::slot_owner_seen_by(n, slot) == Some(port))
        }),
        "not every node sees slot {slot} on {port}"
    );
}

/// (owner, token, count, permits) of every live holder of `key` on `c`, in token order; empty
/// when the key is missing (or the node does not serve its slot).
fn holds(c: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64)> {
    let items = match cmd!("LOCK.HOLDERS", key, "COUNT", 0).query::<Value>(c) {
        Ok(Value::Array(items)) => items,
        Ok(Value::Nil) => return vec![],
        Err(e) if e.kind() == redis::ErrorKind::Moved => return vec![],
        other => panic!("LOCK.HOLDERS {key}: {other:?}"),
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
            (
                String::from_utf8_lossy(&owner).into_owned(),
                int("token"),
                int("count"),
                int("permits"),
            )
        })
        .collect()
}

/// A connection to a replica that may read (cluster `READONLY`).
fn replica_conn(n: &Server) -> Connection {
    let mut r = n.conn();
    let _: () = cmd!("READONLY").query(&mut r).unwrap();
    r
}

/// The node of `cluster` that is a master now and serves `slot`.
fn owner_node(cluster: &Cluster, slot: u16) -> &Server {
    let port = cluster_harness::slot_owner_seen_by(&cluster.nodes[0], slot).expect("slot owner");
    cluster.node(port)
}

/// A client of a key of the slot that follows `MOVED` (as cluster clients do) and retries
/// `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `MASTERDOWN` and lost connections (a failover).
struct Follower {
    port: u16,
    conn: Option<Connection>,
}

/// What `Follower::query` got, and whether it had to retry after a lost connection (then the
/// command may have run twice: a re-acquire is idempotent and answers the same token).
struct Answer<T> {
    value: T,
    retried_after_loss: bool,
}

impl Follower {
    fn new(port: u16) -> Follower {
        Follower { port, conn: None }
    }

    /// `cmd`'s reply, once a node answers it: each try that cannot be answered yet (no
    /// connection, a redirect, a node busy with a failover or a move, a lost connection) is
    /// tried again, until one is.
    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Answer<T> {
        let mut retried_after_loss = false;
        let mut reply = None;
        let answered = eventually(DUE, || {
            if self.conn.is_none() {
                self.conn = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
                    .unwrap()
                    .get_connection_with_timeout(Duration::from_secs(2))
                    .ok();
            }
            let Some(conn) = self.conn.as_mut() else {
                return false;
            };
            match cmd.query::<T>(conn) {
                Ok(value) => {
                    reply = Some(value);
                    true
                }
                Err(e) if e.kind() == redis::ErrorKind::Moved => {
                    self.port = e
                        .redirect_node()
                        .and_then(|(addr, _)| addr.rsplit(':').next()?.parse().ok())
                        .expect("MOVED names a node");
                    self.conn = None;
                    false
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::TryAgain
                            | redis::ErrorKind::ClusterDown
                            | redis::ErrorKind::BusyLoadingError
                            | redis::ErrorKind::MasterDown
                    ) || e.code() == Some("READONLY") =>
                {
                    false
                }
                Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                    retried_after_loss = true;
                    self.conn = None;
                    false
                }
                Err(e) => panic!("{}: {e}", common::show(cmd)),
            }
        });
        assert!(answered, "{} never answered", common::show(cmd));
        Answer {
            value: reply.expect("answered"),
            retried_after_loss,
        }
    }
}

/// Two clients taking turns on `work` (following `MOVED` and failovers): each checks it is the
/// only owner and that tokens only rise. Stopped by `stop`; returns the grants.
struct Workload {
    stop: Arc<AtomicBool>,
    last: Arc<Mutex<i64>>,
    workers: Vec<std::thread::JoinHandle<u64>>,
}

impl Workload {
    fn start(work: &str, port: u16) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let last = Arc::new(Mutex::new(0i64));
        let workers = (0..2)
            .map(|w| {
                let (stop, held, last) = (stop.clone(), held.clone(), last.clone());
                let work = work.to_string();
                std::thread::spawn(move || {
                    let mut c = Follower::new(port);
                    let me = format!("worker{w}");
                    let mut grants = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let got: Answer<Option<i64>> =
                            c.query(&cmd!("LOCK.ACQUIRE", &work, &me, 10_000));
                        let Some(t) = got.value else {
                            std::thread::sleep(Duration::from_millis(1)); // the workload's pace (not a wait)
                            continue;
                        };
                        assert!(
                            !held.swap(true, Ordering::SeqCst),
                            "{me} got {work} (token {t}) while the other held it"
                        );
                        {
                            let mut last = last.lock().unwrap();
                            assert!(
                                t > *last || (got.retried_after_loss && t == *last),
                                "{me}: token {t} after {}",
                                *last
                            );
                            *last = t;
                        }
                        grants += 1;
                        held.store(false, Ordering::SeqCst);
                        let left: Answer<Option<i64>> = c.query(&cmd!("LOCK.RELEASE", &work, &me));
                        assert!(
                            left.value == Some(0) || left.retried_after_loss,
                            "{me} released {work}: {:?}",
                            left.value
                        );
                    }
                    grants
                })
            })
            .collect();
        Workload {
            stop,
            last,
            workers,
        }
    }

    fn last(&self) -> i64 {
        *self.last.lock().unwrap()
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.workers.into_iter().map(|w| w.join().unwrap()).sum()
    }
}

/// The keys of a slot a test moves, and what they held before.
struct SlotState {
    lock: String,
    readers: String,
    group: [String; 3],
    work: String,
    token: i64,
    /// When the lease of `lapsing` (a holder of `readers`) ends (Unix ms).
    lapsing_end: i64,
}

impl SlotState {
    fn keys(&self) -> Vec<&String> {
        let mut keys = vec![&self.lock, &self.readers];
        keys.extend(self.group.iter());
        keys
    }

    fn snapshot(&self, c: &mut Connection) -> Vec<Vec<(String, i64, i64, i64)>> {
        self.keys().into_iter().map(|k| holds(c, k)).collect()
    }

    /// What the slot's owner holds before a move: every key there (none answers MOVED).
    fn before(&self, cluster: &Cluster, slot: u16) -> Vec<Vec<(String, i64, i64, i64)>> {
        let owner = owner_node(cluster, slot);
        let mut c = owner.conn();
        let mut exists = cmd!("EXISTS");
        for k in self.keys() {
            exists.arg(k);
        }
        let n: i64 = exists.query(&mut c).expect("the slot's owner answers");
        assert_eq!(n, 5, "every key of the slot on its owner {}", owner.port);
        self.snapshot(&mut c)
    }
}

/// Fills the slot of a key on `source` with an exclusive hold (reentered), `readers` shared
/// holders and a lapsing lease, a group, and `filler` plain keys (so the move takes a while).
fn fill_slot(cluster: &Cluster, source: &Server, readers: usize, filler: usize) -> SlotState {
    let mut src = source.conn();
    let tag = cluster.key_on(source.port, "asm");
    let k = |name: &str| format!("{{{tag}}}{name}");
    let state = SlotState {
        lock: k("lock"),
        readers: k("readers"),
        group: [k("g1"), k("g2"), k("g3")],
        work: k("work"),
        token: 0,
        lapsing_end: 0,
    };
    let token: i64 = cmd!("LOCK.ACQUIRE", &state.lock, "owner", 120_000)
        .query(&mut src)
        .unwrap();
    let _: i64 = cmd!("LOCK.REENTER", &state.lock, "owner", 120_000)
        .query(&mut src)
        .unwrap();
    let fill: Vec<redis::Cmd> = (0..readers)
        .map(|i| {
            cmd!(
                "LOCK.ACQUIRE",
                &state.readers,
                format!("r{i}"),
                120_000,
                "SHARED"
            )
        })
        .collect();
    let ok = |r: &Reply| matches!(r, Reply::Int(_));
    common::raw::pipeline_cmds(&mut Raw::connect(source), &fill, ok);
    let _: i64 = cmd!("LOCK.ACQUIRE", &state.readers, "lapsing", 1_500, "SHARED")
        .query(&mut src)
        .unwrap();
    let lapsing_end = common::now_ms() + 1_500;
    let _: Vec<i64> = cmd!(
        "LOCK.MACQUIRE",
        3,
        &state.group[0],
        &state.group[1],
        &state.group[2],
        "grp",
        120_000
    )
    .query(&mut src)
    .unwrap();
    // In chunks: one DEBUG POPULATE of 200,000 keys blocks the node long enough on a loaded
    // machine for its replica to take over (cluster-node-timeout 2 s).
    for chunk in 0..filler.div_ceil(10_000) {
        let _: () = cmd!("DEBUG", "POPULATE", 10_000, k(&format!("fill{chunk}")), 64)
            .query(&mut src)
            .unwrap();
    }
    SlotState {
        token,
        lapsing_end,
        ..state
    }
}

fn without_lapsing(v: Vec<(String, i64, i64, i64)>) -> Vec<(String, i64, i64, i64)> {
    v.into_iter().filter(|h| h.0 != "lapsing").collect()
}

/// Every master's replica agrees with it on every key of `state` (after `WAIT`).
fn replicas_agree(cluster: &Cluster, state: &SlotState) {
    for master in cluster.masters() {
        // Redis may move a replica to another master (replica migration) after a failover: a
        // master without one is left out.
        let Some(replica) = cluster.nodes.iter().find(|n| {
            cluster_harness::role(n) == "slave"
                && cmd!("INFO", "replication")
                    .query::<String>(&mut n.conn())
                    .is_ok_and(|i| i.contains(&format!("master_port:{}\r", master.port)))
        }) else {
            println!("master {} has no replica now", master.port);
            continue;
        };
        let mut m = master.conn();
        let mut r = replica_conn(replica);
        let acked: i64 = cmd!("WAIT", 1, 10_000).query(&mut m).unwrap();
        assert_eq!(acked, 1, "the replica of {} caught up", master.port);
        for (node, c) in [(master, &mut m), (replica, &mut r)] {
            // How long ago the lease ended when the question was sent: the server cannot be
            // blamed for the time its answer took (2,000 holders, a just-promoted master).
            let late = common::now_ms() - state.lapsing_end;
            let raw: Value = cmd!("LOCK.HOLDERS", &state.readers, "COUNT", 0)
                .query(c)
                .unwrap_or(Value::Nil);
            let lapsing = match raw {
                Value::Array(items) => items.into_iter().find(|e| {
                    matches!(e, Value::Array(f)
                        if f.contains(&Value::BulkString(b"lapsing".to_vec())))
                }),
                _ => None,
            };
            assert!(
                lapsing.is_none() || late < 200,
                "{}: {} ({}) lists the lease that ended {late} ms ago: {lapsing:?}",
                state.readers,
                node.port,
                cluster_harness::role(node)
            );
        }
        for key in state.keys() {
            // The lapsing lease may end between the two reads: it is checked above.
            let (on_m, on_r) = (holds(&mut m, key), holds(&mut r, key));
            let (on_m, on_r) = (without_lapsing(on_m), without_lapsing(on_r));
            let only = |a: &[(String, i64, i64, i64)], b: &[(String, i64, i64, i64)]| {
                a.iter()
                    .filter(|h| !b.contains(h))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert!(
                on_m == on_r,
                "{key}: master {} has {} holds, its replica {} has {}; only on the master: \
                 {:?}; only on the replica: {:?}",
                master.port,
                on_m.len(),
                replica.port,
                on_r.len(),
                only(&on_m, &on_r),
                only(&on_r, &on_m)
            );
        }
    }
}

/// Every node's view of the slot's keys, for a failure's message: role, keys in the slot, the
/// holders of each key and the journal's entries for them.
fn where_are(cluster: &Cluster, slot: u16, state: &SlotState) -> String {
    let mut out = String::new();
    for n in &cluster.nodes {
        let mut c = n.conn();
        let _: redis::RedisResult<()> = cmd!("READONLY").query(&mut c);
        let count: i64 = cmd!("CLUSTER", "COUNTKEYSINSLOT", slot)
            .query(&mut c)
            .unwrap_or(-1);
        let held: Vec<(String, String)> = state
            .keys()
            .iter()
            .map(|k| {
                let n = match cmd!("LOCK.HOLDERS", *k, "COUNT", 0).query::<Value>(&mut c) {
                    Ok(Value::Array(items)) => items.len().to_string(),
                    other => format!("{other:?}"),
                };
                (k.to_string(), n)
            })
            .collect();
        let log: Vec<String> = common::reply::entries(&mut c, cmd!("LOCK.LOG", 100_000))
            .iter()
            .filter(|e| {
                let key = common::reply::text(&e["key"]);
                state.group.contains(&key) || key == state.lock || key.is_empty()
            })
            .map(|e| {
                format!(
                    "{} {} {}",
                    common::reply::text(&e["reason"]),
                    common::reply::text(&e["key"]),
                    common::reply::text(&e["owner"])
                )
            })
            .take(20)
            .collect();
        let offset: String = cmd!("INFO", "replication")
            .query(&mut c)
            .unwrap_or_default();
        let offset = offset
            .lines()
            .filter(|l| {
                l.starts_with("role") || l.contains("repl_offset") || l.starts_with("master_port")
            })
            .collect::<Vec<_>>()
            .join(",");
        out.push_str(&format!(
            "node {}: {offset}; {count} keys in slot {slot}; holders {held:?}; journal {log:?}\n",
            n.port
        ));
    }
    out
}

/// The holds of `state` are where the slot is, exactly as `before` minus the lapsed lease, and on
/// no other master (once trimmed).
fn holds_only_on_owner(
    cluster: &Cluster,
    slot: u16,
    state: &SlotState,
    before: &[Vec<(String, i64, i64, i64)>],
) {
    let owner = owner_node(cluster, slot);
    let mut o = owner.conn();
    let without_lapsed = |v: &[Vec<(String, i64, i64, i64)>]| -> Vec<Vec<(String, i64, i64, i64)>> {
        v.iter()
            .map(|k| k.iter().filter(|h| h.0 != "lapsing").cloned().collect())
            .collect()
    };
    let now = without_lapsed(&state.before(cluster, slot));
    let was = without_lapsed(before);
    let diff: Vec<String> = state
        .keys()
        .iter()
        .zip(now.iter().zip(&was))
        .filter(|(_, (n, w))| n != w)
        .map(|(k, (n, w))| {
            let lost: Vec<_> = w.iter().filter(|h| !n.contains(h)).take(5).collect();
            let new: Vec<_> = n.iter().filter(|h| !w.contains(h)).take(5).collect();
            format!(
                "{k}: {} holds, were {}; lost {lost:?}; new {new:?}",
                n.len(),
                w.len()
            )
        })
        .collect();
    assert!(
        diff.is_empty(),
        "the holds on the slot's owner {} ({}): {diff:?}\n{}",
        owner.port,
        cluster_harness::role(owner),
        where_are(cluster, slot, state)
    );
    for other in cluster.masters() {
        if other.port == owner.port {
            continue;
        }
        let mut c = other.conn();
        // A node that does not serve the slot answers MOVED for EXISTS: ask its keyspace.
        let left = |c: &mut Connection| -> i64 {
            cmd!("CLUSTER", "COUNTKEYSINSLOT", slot)
                .query(c)
                .unwrap_or(-1)
        };
        let started = Instant::now();
        let trimmed = eventually(Duration::from_secs(120), || left(&mut c) == 0);
        let sample: Value = cmd!("CLUSTER", "GETKEYSINSLOT", slot, 5)
            .query(&mut c)
            .unwrap_or(Value::Nil);
        assert!(
            trimmed,
            "master {} still has {} keys of slot {slot} after {:?} (e.g. {sample:?}); \
             its relock keys: {:?}",
            other.port,
            left(&mut c),
            started.elapsed(),
            state
                .keys()
                .iter()
                .map(|k| {
                    let mut r = other.conn();
                    let _: redis::RedisResult<()> = cmd!("READONLY").query(&mut r);
                    (k.to_string(), holds(&mut r, k).len())
                })
                .collect::<Vec<_>>()
        );
        if started.elapsed() > Duration::from_secs(5) {
            println!(
                "master {} took {:?} to trim slot {slot}",
                other.port,
                started.elapsed()
            );
        }
    }
    let second: Option<i64> = cmd!("LOCK.ACQUIRE", &state.lock, "intruder", 1000)
        .query(&mut o)
        .unwrap();
    assert_eq!(second, None, "a second owner of {}", state.lock);
}

/// No node's journal says a hold of `state` (other than the lapsing lease) ended other than by a
/// move: they all live on.
fn journal_says_only_moved(cluster: &Cluster, state: &SlotState) {
    for n in &cluster.nodes {
        let mut c = n.conn();
        let entries = common::reply::entries(&mut c, cmd!("LOCK.LOG", 100_000));
        let wrong: Vec<String> = entries
            .iter()
            .filter_map(|e| {
                let (reason, key, owner) = (
                    common::reply::text(&e["reason"]),
                    common::reply::text(&e["key"]),
                    common::reply::text(&e["owner"]),
                );
                (state.keys().iter().any(|k| **k == key) && owner != "lapsing" && reason != "moved")
                    .then(|| format!("{reason} {key} {owner}"))
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "node {} ({}) journals holds that live on as ended: {:?}",
            n.port,
            cluster_harness::role(n),
            &wrong[..wrong.len().min(10)]
        );
    }
}

/// A waiter queued on the slot's owner; returns its connection.
fn queue_on_slot_owner(cluster: &Cluster, slot: u16, state: &SlotState) -> Raw {
    let owner = owner_node(cluster, slot);
    let before = common::info_field(&mut owner.conn(), "waiters");
    let mut waiter = Raw::connect(owner);
    waiter.send(&[
        b"LOCK.WAIT",
        state.lock.as_bytes(),
        b"waiter",
        b"30000",
        b"60000",
    ]);
    assert!(eventually(DUE, || {
        common::info_field(&mut owner.conn(), "waiters") == before + 1
    }));
    waiter
}

fn skip_without_asm() -> bool {
    let probe = Server::start();
    if !cluster_migration_supported(&mut probe.conn()) {
        println!(
            "skipped: this server has no atomic slot migration (CLUSTER MIGRATION, Redis 8.4+)"
        );
        return true;
    }
    false
}

// --- 1. atomic slot migration with replicas and failovers ---------------------------------------

/// A slot with an exclusive hold, 2,000 shared holders, a group, a lapsing lease, a waiter and
/// 50,000 plain keys moves to another master under a live workload; right after the move the
/// target's replica takes over (`CLUSTER FAILOVER`); then the slot moves back and the source's
/// replica takes over. Every hold survives both moves and both failovers exactly once (on the
/// slot's owner, never on another master), the waiter is answered at each move and failover
/// (MOVED) and served at the end with a greater token, replicas equal their masters, and the
/// workload never sees two owners or a token going backwards.
#[test]
fn asm_then_failover_of_the_target_and_back_keeps_every_hold_once() {
    if skip_without_asm() {
        return;
    }
    let cluster = Cluster::start();
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let state = fill_slot(&cluster, source, 2_000, 50_000);
    let slot = cluster_harness::key_slot(&state.lock);
    let before = state.before(&cluster, slot);
    assert_eq!(
        owner_node(&cluster, slot).port,
        source.port,
        "the source still serves the slot (no automatic failover while it was filled)"
    );
    let mut waiter = queue_on_slot_owner(&cluster, slot, &state);
    let workload = Workload::start(&state.work, source.port);
    assert!(eventually(DUE, || workload.last() > 0), "the workload runs");

    // Move, then fail the target over to its replica.
    let id = start_import(target, slot);
    finish_import(&cluster, target, &id, slot);
    match waiter.read(DUE) {
        Reply::Error(e) if e.starts_with("MOVED") => {}
        other => panic!("the waiter at the source got {other:?}"),
    }
    holds_only_on_owner(&cluster, slot, &state, &before);
    let target_replica = cluster.replica_of_master(target.port);
    let mut waiter = queue_on_slot_owner(&cluster, slot, &state);
    cluster.failover(target_replica);
    wait_owner(&cluster, slot, target_replica.port);
    match waiter.read_within(DUE) {
        Some(Reply::Error(_)) => {}
        other => panic!("the waiter on the demoted target got {other:?}"),
    }
    holds_only_on_owner(&cluster, slot, &state, &before);
    replicas_agree(&cluster, &state);

    // And back to the source, whose replica then takes over.
    let mut waiter = queue_on_slot_owner(&cluster, slot, &state);
    let id = start_import(source, slot);
    finish_import(&cluster, source, &id, slot);
    match waiter.read(DUE) {
        Reply::Error(e) if e.starts_with("MOVED") => {}
        other => panic!("the waiter at the new target got {other:?}"),
    }
    let source_replica = cluster.replica_of_master(source.port);
    cluster.failover(source_replica);
    wait_owner(&cluster, slot, source_replica.port);
    holds_only_on_owner(&cluster, slot, &state, &before);
    replicas_agree(&cluster, &state);
    journal_says_only_moved(&cluster, &state);

    let grants_before = workload.last();
    assert!(
        eventually(DUE, || workload.last() > grants_before),
        "the workload goes on"
    );
    let grants = workload.stop();
    assert!(grants > 0);

    // The waiter is served at last with a greater token.
    let owner = owner_node(&cluster, slot);
    let mut waiter = queue_on_slot_owner(&cluster, slot, &state);
    for _ in 0..2 {
        let _: i64 = cmd!("LOCK.RELEASE", &state.lock, "owner")
            .query(&mut owner.conn())
            .unwrap();
    }
    match waiter.read(DUE) {
        Reply::Int(t) => assert!(
            t > state.token,
            "the waiter's token {t} after {}",
            state.token
        ),
        other => panic!("the waiter got {other:?}"),
    }
    replicas_agree(&cluster, &state);
}

/// The source fails over to its replica while the slot streams to the target (50,000 filler keys
/// and 20,000 shared holders make the move last). Whatever becomes of the task (Redis cancels it
/// or it completes), the holds exist exactly once afterwards: on the node that serves the slot,
/// equal to what they were, and on no other master once trimmed; nobody gets a second owner; the
/// workload never sees two owners; replicas equal their masters.
#[test]
fn asm_with_failover_of_the_source_during_the_move_keeps_every_hold_once() {
    if skip_without_asm() {
        return;
    }
    for round in 0..2 {
        let cluster = Cluster::start();
        let masters: Vec<&Server> = cluster.masters();
        let (source, target) = (masters[0], masters[1]);
        let state = fill_slot(&cluster, source, 20_000, 200_000);
        let slot = cluster_harness::key_slot(&state.lock);
        let before = state.before(&cluster, slot);
        assert_eq!(
            owner_node(&cluster, slot).port,
            source.port,
            "the source still serves the slot (no automatic failover while it was filled)"
        );
        let workload = Workload::start(&state.work, source.port);
        assert!(eventually(DUE, || workload.last() > 0), "the workload runs");
        // Round 0 fails the source over, round 1 the target, while the slot streams.
        let id = start_import(target, slot);
        let failing = if round == 0 { source } else { target };
        let replica = cluster.replica_of_master(failing.port);
        let state_then = task_field(&mut target.conn(), &id, "state");
        cluster.failover(replica);
        let mut t = target.conn();
        let mut r = replica.conn();
        // The task ends one way or the other (Redis retries a failed import with a new task):
        // wait until no node has a task under way and every node names the same owner, for 3 s
        // in a row.
        let settled = || {
            let owners: std::collections::HashSet<Option<u16>> = cluster
                .nodes
                .iter()
                .map(|n| cluster_harness::slot_owner_seen_by(n, slot))
                .collect();
            owners.len() == 1 && cluster.nodes.iter().all(|n| !task_under_way(n))
        };
        let mut calm_since: Option<Instant> = None;
        assert!(
            eventually(Duration::from_secs(120), || {
                if !settled() {
                    calm_since = None;
                    return false;
                }
                calm_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(3)
            }),
            "round {round}: the migration never settled"
        );
        cluster.wait_healthy();
        println!(
            "round {round}: task {:?} at the failover, then {:?} / {:?}; slot {slot} on {:?} \
             (source {}, target {}, promoted {})",
            state_then,
            task_field(&mut t, &id, "state"),
            task_field(&mut r, &id, "state"),
            cluster_harness::slot_owner_seen_by(&cluster.nodes[0], slot),
            source.port,
            target.port,
            replica.port
        );
        holds_only_on_owner(&cluster, slot, &state, &before);
        journal_says_only_moved(&cluster, &state);
        let grants_before = workload.last();
        assert!(
            eventually(DUE, || workload.last() > grants_before),
            "round {round}: the workload goes on"
        );
        workload.stop();
        replicas_agree(&cluster, &state);
    }
}

// --- 2. config rollback of every relock config --------------------------------------------------

/// What relock's configs govern, as a client sees it: the journal's entries (id, reason, key),
/// the statistics table's keys, every `relock.*` config, and `INFO relock`'s grace fields.
/// (journal entries, statistics keys, `relock.*` configs, `INFO relock`'s grace lines).
type RelockState = (Vec<String>, Vec<String>, Vec<(String, String)>, String);

fn relock_state(c: &mut Connection) -> RelockState {
    let log = common::reply::entries(c, cmd!("LOCK.LOG", 100_000))
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                common::reply::int(&e["id"]),
                common::reply::text(&e["reason"]),
                common::reply::text(&e["key"])
            )
        })
        .collect();
    let stats = common::reply::entries(c, cmd!("LOCK.STATS", "COUNT", 100_000))
        .iter()
        .map(|e| common::reply::text(&e["key"]))
        .collect();
    let mut configs: Vec<(String, String)> = cmd!("CONFIG", "GET", "relock.*").query(c).unwrap();
    configs.sort();
    let info: String = cmd!("INFO", "relock").query(c).unwrap();
    let grace = info
        .lines()
        .filter(|l| l.contains("grace"))
        .collect::<Vec<_>>()
        .join(",");
    (log, stats, configs, grace)
}

/// Every relock config changed in one `CONFIG SET` (the journal and the statistics table shrunk
/// to 1 and 2, the journal's reasons to none, statistics off, a restart grace) that then fails:
/// on a bad value of each relock config, of a server config, before or after relock's, on an
/// apply that fails after relock's (`port` taken), inside `MULTI` with relock commands after it.
/// Each time relock is exactly as before: the journal's 20 entries, the statistics' 20 keys,
/// every config, the grace. (Held in this round on Redis 7.0.15 and 8.6.3: 22 failing forms.)
#[test]
fn config_set_that_fails_changes_no_relock_config() {
    let server = Server::start();
    let mut c = server.conn();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let _: () = cmd!("LOCK.STATS", "RESET").query(&mut c).unwrap();
    for i in 0..20 {
        let key = format!("k{i}");
        common::acquire(&mut c, key.as_bytes(), b"a", 600_000);
        let none: Option<i64> = cmd!("LOCK.ACQUIRE", &key, "b", 600_000)
            .query(&mut c)
            .unwrap();
        assert_eq!(none, None);
        let _: i64 = cmd!("LOCK.FORCERELEASE", &key).query(&mut c).unwrap();
    }
    let before = relock_state(&mut c);
    assert_eq!((before.0.len(), before.1.len()), (20, 20), "{before:?}");
    let every = [
        ("relock.log-max-len", "1"),
        ("relock.stats-keys", "2"),
        ("relock.stats", "no"),
        ("relock.log-reasons", "none"),
        ("relock.restart-grace-ms", "5"),
    ];
    let bad: Vec<(&str, &str)> = vec![
        ("relock.log-max-len", "100001"),
        ("relock.log-max-len", "-1"),
        ("relock.stats-keys", "100001"),
        ("relock.stats", "maybe"),
        ("relock.log-reasons", "bogus"),
        ("relock.log-reasons", "all none"),
        ("relock.restart-grace-ms", "-5"),
        ("relock.restart-grace-ms", "1000000000001"),
        ("maxmemory-policy", "bogus"),
        ("port", taken_port.as_str()),
        ("dir", "/nonexistent/relock"),
    ];
    for (name, value) in &bad {
        for first in [false, true] {
            let mut set = cmd!("CONFIG", "SET");
            if first {
                set.arg(*name).arg(*value);
            }
            for (n, v) in every {
                set.arg(n).arg(v);
            }
            if !first {
                set.arg(*name).arg(*value);
            }
            let failed = set.query::<()>(&mut c);
            assert!(failed.is_err(), "CONFIG SET ... {name} {value} succeeded");
            assert_eq!(
                relock_state(&mut c),
                before,
                "after a failed CONFIG SET with {name} {value} ({})",
                if first { "first" } else { "last" }
            );
        }
        // The same inside MULTI, relock commands after it in the transaction.
        let mut set = cmd!("CONFIG", "SET");
        for (n, v) in every {
            set.arg(n).arg(v);
        }
        set.arg(*name).arg(*value);
        let mut tx = redis::pipe();
        tx.atomic()
            .add_command(set)
            .cmd("LOCK.LOG")
            .arg(100)
            .cmd("LOCK.STATS")
            .arg("COUNT")
            .arg(100);
        let replies: Vec<Value> = tx.query(&mut c).unwrap_or_default();
        if let [_, Value::Array(log), Value::Array(stats)] = replies.as_slice() {
            assert_eq!((log.len(), stats.len()), (20, 20), "in MULTI with {name}");
        }
        assert_eq!(
            relock_state(&mut c),
            before,
            "after MULTI with {name} {value}"
        );
    }
    drop(taken);
}

// --- 3. tokens under clock skew -----------------------------------------------------------------

/// A counter more than the longest catch-up (60 s) ahead of the clock is accepted: tokens go on
/// above it, and (docs/tokens.rs) "once tokens went out above such a lead, it stays accepted as
/// it shrinks with the clock (waiting then would protect nothing and stop new holds for up to a
/// minute a second later)". That holds while the server runs (and across `DEBUG RELOAD`), but not
/// across a restart that keeps every token (RDB): the accepted lead is not persisted, the
/// reloaded counter is judged afresh, and a second after issuing above a 61 s lead the restarted
/// server refuses every new hold for ~59 s (`TRYAGAIN ... tokens ahead of this server's
/// clock`), the very wait the rule says protects nothing. Found by attack30 (Redis 7.0.15:
/// `TRYAGAIN relock restart grace, 58525 ms left`). Availability, not safety: no token repeats
/// or goes backwards.
#[test]
fn skew_an_accepted_lead_stays_accepted_across_a_restart_with_its_rdb() {
    let mut server = Server::start();
    let mut c = server.conn();
    let lead_ms = 61_000;
    let start = common::now_ms();
    let _: () = cmd!("LOCK.COUNTER", (start + lead_ms) * 1000)
        .query(&mut c)
        .unwrap();
    let first = common::acquire(&mut c, b"first", b"a", 10_000);
    // The clock closes the lead below the longest catch-up: 1.1 s of it must pass.
    let left = start + 1_101 - common::now_ms();
    common::wait_out_ttl(Duration::from_millis(left.max(0) as u64));
    let second = common::acquire(&mut c, b"second", b"a", 10_000);
    assert_eq!(second, first + 1, "accepted while running");
    let _: () = cmd!("SAVE").query(&mut c).unwrap();
    server.restart();
    let mut c = server.conn();
    assert_eq!(common::info_field(&mut c, "last_token"), second);
    let third: redis::RedisResult<Option<i64>> =
        cmd!("LOCK.ACQUIRE", "third", "a", 10_000).query(&mut c);
    assert_eq!(
        third.map_err(|e| e.to_string()),
        Ok(Some(second + 1)),
        "restarted with every token it issued"
    );
}
