//! Attack round 6: what issue 18's classes leave to attack once they are fixed. Big shared
//! values moved between servers (`MIGRATE`, Valkey 9's atomic slot migration), one key of a
//! `LOCK.MACQUIRE` group moved away, `FLUSHALL` and `SWAPDB` under queued permit waiters, clients
//! that go away in the middle of a group's wait or inside a `MULTI` with `CLIENT KILL`, and a
//! request for more permits than are free while holders time out and others arrive behind it.
//! One test per class; each says what it attacks and what must hold. All waits end on an event
//! (a reply, a counter) within generous bounds: a busy two-core machine must not fail them.
#[path = "cluster_harness/mod.rs"]
mod cluster_harness;
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use cluster_harness::Cluster;
use common::probe::Prober;
use common::raw::{Raw, Reply};
use common::reply::{bytes, history_reasons, int};
use common::{attach_replica, eventually, info_field, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;
/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);
/// How long a ping may wait on a busy machine while the module works through a big value.
const PING_BOUND: Duration = Duration::from_millis(250);

// --- helpers ----------------------------------------------------------------------------------

/// The longest turn the module may start by itself (`longest_turn_us`, CPU time): as in
/// `tests/storms.rs`, 5 ms for a release module, 40 ms for the debug build; none under
/// `RELOCK_SERVER_WRAPPER` (valgrind).
fn turn_bound_us() -> Option<i64> {
    if std::env::var_os("RELOCK_SERVER_WRAPPER").is_some() {
        return None;
    }
    let release = common::module_path()
        .components()
        .any(|part| part.as_os_str() == "release");
    Some(if release { 5_000 } else { 40_000 })
}

fn assert_turns_bounded(c: &mut Connection, server: &str) {
    let turn = info_field(c, "longest_turn_us");
    eprintln!("{server}: longest turn {turn} µs");
    if let Some(bound) = turn_bound_us() {
        assert!(
            turn <= bound,
            "{server}: a turn the module started took {turn} µs (bound {bound} µs)"
        );
    }
}

/// `LOCK.INFO key` as a flat list of values (RESP2: owner, token, count, ttl, waiters, mode,
/// holders, limit, permits_free); `None` for nil.
fn info(c: &mut Connection, key: &str) -> Option<Vec<Value>> {
    match cmd!("LOCK.INFO", key).query(c).unwrap() {
        Value::Nil => None,
        Value::Array(items) => Some(items.into_iter().skip(1).step_by(2).collect()),
        other => panic!("LOCK.INFO {key}: {other:?}"),
    }
}

/// (owner, token, permits) of every live holder of `key`, in token order.
fn holders(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64, i64)> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let Value::Array(items) = v else {
        return vec![];
    };
    items
        .iter()
        .map(|entry| {
            let Value::Array(f) = entry else {
                panic!("entry {entry:?}")
            };
            (bytes(&f[1]), int(&f[3]), int(&f[9]))
        })
        .collect()
}

/// The owners of `key`'s queue, in queue order.
fn queued(c: &mut Connection, key: &str) -> Vec<String> {
    let v: Value = cmd!("LOCK.WAITERS", key, "COUNT", 0).query(c).unwrap();
    let Value::Array(items) = v else {
        panic!("LOCK.WAITERS {key}: {v:?}")
    };
    items
        .iter()
        .map(|entry| {
            let Value::Array(f) = entry else {
                panic!("entry {entry:?}")
            };
            String::from_utf8_lossy(&bytes(&f[1])).into_owned()
        })
        .collect()
}

/// A raw connection's client id.
fn client_id(r: &mut Raw) -> i64 {
    r.send(&[b"CLIENT", b"ID"]);
    match r.read(DUE) {
        Reply::Int(id) => id,
        other => panic!("CLIENT ID: {other:?}"),
    }
}

/// Sends `LOCK.WAIT key owner ttl 0 words...` on a new raw connection and waits until the
/// server counts `waiters` waiters in all; returns the connection and its client id.
fn wait_on(
    server: &Server,
    c: &mut Connection,
    key: &str,
    owner: &str,
    ttl: i64,
    words: &[&str],
    waiters: i64,
) -> (Raw, i64) {
    let mut r = Raw::connect(server);
    let id = client_id(&mut r);
    let ttl = ttl.to_string();
    let mut args: Vec<&[u8]> = vec![
        b"LOCK.WAIT",
        key.as_bytes(),
        owner.as_bytes(),
        ttl.as_bytes(),
        b"0",
    ];
    args.extend(words.iter().map(|w| w.as_bytes()));
    r.send(&args);
    assert!(
        eventually(DUE, || info_field(c, "waiters") == waiters),
        "{owner} not queued for {key} ({waiters} waiters in all)"
    );
    (r, id)
}

/// A token from a raw connection's next reply.
fn token_of(r: &mut Raw, who: &str) -> i64 {
    match r.read(DUE) {
        Reply::Int(t) if t > 0 => t,
        other => panic!("{who}: expected a token, got {other:?}"),
    }
}

/// Takes `owners` shared holds of `key` (`words` after `SHARED`), pipelined; asserts each got a
/// token.
fn fill(c: &mut Connection, key: &str, owners: &[Vec<u8>], ttl: i64, words: &[&str]) {
    for chunk in owners.chunks(10_000) {
        let mut p = redis::pipe();
        for owner in chunk {
            p.cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(owner.as_slice())
                .arg(ttl)
                .arg("SHARED")
                .arg(words);
        }
        let tokens: Vec<Option<i64>> = p.query(c).expect("fill");
        assert!(
            tokens.iter().all(Option::is_some),
            "a holder of {key} was refused"
        );
    }
}

/// `n` owners `{prefix}{i}` padded to `len` bytes.
fn owners(prefix: &str, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut owner = format!("{prefix}{i:08}-").into_bytes();
            owner.resize(len.max(owner.len()), b'o');
            owner
        })
        .collect()
}

fn config_resetstat(c: &mut Connection) {
    let _: () = cmd!("CONFIG", "RESETSTAT").query(c).unwrap();
}

// --- (a) big values through MIGRATE -----------------------------------------------------------

/// Big values / `MIGRATE` between two standalone servers. Attacks the O(H) paths a move runs
/// through: the value's save and load (a read lock of 120,000 holders, half of their leases
/// lapsed and their removal under way on the source when the move starts; a semaphore of
/// 100,000 holders with 256-byte owners, 25 MB of owners), the free of both on the source, the
/// waiters queued there, the removal of the lapsed leases on the target, and the token counter
/// of a server that receives tokens it never issued.
///
/// Must hold: the move takes seconds, not minutes; after it, no turn the module starts on
/// either server exceeds the storm bound and pings stay quick; every live holder arrives with
/// its token and permits; the source's waiters are answered at once (standalone, the key left
/// the server: as after a `DEL` it is free there, so they are granted, and the journal says
/// `moved`, or `deleted` where the server cannot tell MIGRATE from DEL); on the target nobody gets a hold the moved holders exclude, new tokens are above
/// every moved one, and the lapsed leases are removed once a command touches the key.
#[test]
fn migrate_big_shared_values_between_standalone_servers() {
    let source = Server::start();
    let target = Server::start();
    let mut src = source.conn();
    let mut dst = target.conn();
    let readers_live = owners("r-", 60_000, 16);
    let readers_short = owners("s-", 60_000, 16);
    fill(&mut src, "readers", &readers_live, LONG, &[]);
    fill(&mut src, "readers", &readers_short, 3_000, &[]);
    let wide = owners("w-", 100_000, 256);
    let limit = (wide.len() + 1).to_string();
    fill(&mut src, "wide", &wide, LONG, &["LIMIT", &limit]);
    // Nothing touches `readers` until its short leases lapsed: they are all still there.
    let lapsed = eventually(Duration::from_secs(60), || {
        info(&mut src, "readers").is_some_and(|i| int(&i[6]) == readers_live.len() as i64)
    });
    assert!(lapsed, "the short leases did not lapse");
    let lapsed_at_source = info_field(&mut src, "holds") - 160_000;
    let before_readers = holders(&mut src, "readers");
    let before_wide = holders(&mut src, "wide");
    assert_eq!(before_readers.len(), 60_000);
    assert_eq!(before_wide.len(), 100_000);
    let moved_max = before_readers
        .iter()
        .chain(&before_wide)
        .map(|h| h.1)
        .max()
        .unwrap_or(0);
    // A writer waits behind the readers (its LOCK.WAIT starts the removal of the lapsed
    // leases, in slices); a request for 2 permits waits for the one free.
    let (mut writer, _) = wait_on(&source, &mut src, "readers", "writer", LONG, &[], 1);
    let (mut pair, _) = wait_on(
        &source,
        &mut src,
        "wide",
        "pair",
        LONG,
        &["SHARED", "LIMIT", &limit, "PERMITS", "2"],
        2,
    );
    config_resetstat(&mut src);
    config_resetstat(&mut dst);
    let started = Instant::now();
    let moved: String = cmd!(
        "MIGRATE",
        "127.0.0.1",
        target.port,
        "",
        0,
        120_000,
        "KEYS",
        "readers",
        "wide"
    )
    .query(&mut src)
    .expect("MIGRATE");
    let took = started.elapsed();
    assert_eq!(moved, "OK");
    let source_probe = Prober::start(&source);
    // The source: the keys left, the waiters are granted there at once.
    let writer_token = token_of(&mut writer, "the writer on the source");
    let pair_token = token_of(&mut pair, "the 2-permit request on the source");
    assert_eq!(
        holders(&mut src, "readers"),
        vec![(b"writer".to_vec(), writer_token, 1)]
    );
    assert_eq!(
        holders(&mut src, "wide"),
        vec![(b"pair".to_vec(), pair_token, 2)]
    );
    // The journal (1,024 entries) keeps the newest: holds of `wide`, moved last (`deleted`
    // on Redis 7.0, which cannot tell MIGRATE's deletion from DEL's).
    assert_eq!(
        history_reasons(&mut src, "wide")
            .first()
            .map(String::as_str),
        Some(common::migrate_reason(&mut src))
    );
    assert_eq!(info_field(&mut src, "waiters"), 0);
    // The target: every live holder with its token and permits.
    let arrived = info_field(&mut dst, "holds");
    assert_eq!(holders(&mut dst, "readers"), before_readers);
    assert_eq!(holders(&mut dst, "wide"), before_wide);
    // (Probed from here: the listings above are this test's own long commands.)
    let target_probe = Prober::start(&target);
    // Nobody gets what the moved holders exclude; new tokens are above the moved ones.
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.ACQUIRE", "readers", "x", 1000)),
        None,
        "an exclusive hold among 60,000 moved readers"
    );
    let shared = |owner: &str, permits: &str| {
        cmd!(
            "LOCK.ACQUIRE",
            "wide",
            owner,
            60_000,
            "SHARED",
            "LIMIT",
            &limit,
            "PERMITS",
            permits
        )
    };
    assert_eq!(
        common::int_or_nil(&mut dst, shared("x", "2")),
        None,
        "2 permits of 1 free"
    );
    let fresh = common::int_or_nil(&mut dst, shared("y", "1")).expect("the one free permit");
    assert!(
        fresh > moved_max,
        "a new token {fresh} at or below a moved one {moved_max}"
    );
    assert_eq!(
        common::int_or_nil(&mut dst, shared("z", "1")),
        None,
        "the semaphore is full"
    );
    let new_reader = common::int_or_nil(
        &mut dst,
        cmd!("LOCK.ACQUIRE", "readers", "late", 60_000, "SHARED"),
    )
    .expect("a reader joins readers");
    assert!(new_reader > fresh);
    // The commands on `readers` start the removal of its lapsed leases on the target.
    let live = 60_000 + 100_000 + 2;
    let pruned = eventually(Duration::from_secs(60), || {
        info_field(&mut dst, "holds") == live
    });
    let (worst_src, worst_dst) = (source_probe.worst(), target_probe.worst());
    let [migrate_us, restore_us] =
        [(&mut src, "migrate"), (&mut dst, "restore")].map(|(c, name)| usec_per_call(c, name));
    eprintln!(
        "{lapsed_at_source} lapsed leases on the source; MIGRATE took {took:?} ({migrate_us} µs in the source, {restore_us} \
         µs in the target's RESTORE); {} lapsed leases arrived; longest ping after: \
         source {worst_src:?}, target {worst_dst:?}",
        arrived - (live - 2)
    );
    assert!(
        pruned,
        "the target kept {} holds",
        info_field(&mut dst, "holds")
    );
    assert!(took < Duration::from_secs(60), "MIGRATE took {took:?}");
    assert!(
        worst_src.within(PING_BOUND),
        "a ping on the source waited {worst_src:?}"
    );
    assert!(
        worst_dst.within(PING_BOUND),
        "a ping on the target waited {worst_dst:?}"
    );
    assert_turns_bounded(&mut src, "source");
    assert_turns_bounded(&mut dst, "target");
}

/// `INFO commandstats` µs per call of `command` (0 if it did not run).
fn usec_per_call(c: &mut Connection, command: &str) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let wanted = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|line| {
            line.to_lowercase()
                .strip_prefix(&wanted)
                .map(str::to_string)
        })
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec_per_call=").map(str::to_string))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

// --- (b) big values through Valkey 9's atomic slot migration --------------------------------

fn migrateslots_supported(c: &mut Connection) -> bool {
    let docs: Value = cmd!("COMMAND", "INFO", "CLUSTER|MIGRATESLOTS")
        .query(c)
        .unwrap();
    matches!(docs, Value::Array(ref items) if items.first().is_some_and(|i| *i != Value::Nil))
}

/// The state of the newest migration job `CLUSTER GETSLOTMIGRATIONS` lists on `c`.
fn job_state(c: &mut Connection) -> Option<String> {
    let jobs: Value = cmd!("CLUSTER", "GETSLOTMIGRATIONS").query(c).ok()?;
    let Value::Array(jobs) = jobs else {
        return None;
    };
    let Value::Array(fields) = jobs.last()? else {
        return None;
    };
    fields.chunks(2).find_map(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] if name == b"state" => {
            Some(String::from_utf8_lossy(value).into_owned())
        }
        _ => None,
    })
}

/// Big values / Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a slot holding a
/// read lock of 60,000 holders and a semaphore of 100,000 holders with 256-byte owners, each
/// with a waiter queued on the source. Attacks what `MIGRATE` attacks (see above) through the
/// other way a value can move: the slot's keys streamed to the target while both keep serving.
///
/// Must hold: pings on both servers stay quick all through the migration (the stream is the
/// server's own work in slices; no turn of the module's is long); the waiters are redirected
/// (`MOVED`) once the target owns the slot; every holder arrives with its token and permits;
/// on the target nobody gets a hold the moved holders exclude and new tokens are above the
/// moved ones. On servers without atomic slot migration the command must not exist.
#[test]
fn a_slot_migrated_atomically_with_big_shared_values() {
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
    let tag = cluster.key_on(source.port, "big");
    let (readers, wide) = (format!("{{{tag}}}readers"), format!("{{{tag}}}wide"));
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", &readers)
        .query(&mut src)
        .unwrap();
    fill(&mut src, &readers, &owners("r-", 60_000, 16), LONG, &[]);
    let wide_owners = owners("w-", 100_000, 256);
    let limit = (wide_owners.len() + 1).to_string();
    fill(&mut src, &wide, &wide_owners, LONG, &["LIMIT", &limit]);
    let before_readers = holders(&mut src, &readers);
    let before_wide = holders(&mut src, &wide);
    let moved_max = before_readers
        .iter()
        .chain(&before_wide)
        .map(|h| h.1)
        .max()
        .unwrap_or(0);
    let (mut writer, _) = wait_on(source, &mut src, &readers, "writer", LONG, &[], 1);
    let (mut pair, _) = wait_on(
        source,
        &mut src,
        &wide,
        "pair",
        LONG,
        &["SHARED", "LIMIT", &limit, "PERMITS", "2"],
        2,
    );
    let probes = (Prober::start(source), Prober::start(target));
    let started = Instant::now();
    let target_id: String = cmd!("CLUSTER", "MYID").query(&mut dst).unwrap();
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
    let done = eventually(Duration::from_secs(120), || {
        job_state(&mut src).as_deref() == Some("success")
    });
    let took = started.elapsed();
    let (worst_src, worst_dst) = (probes.0.worst(), probes.1.worst());
    eprintln!(
        "the slot with 160,000 holders migrated in {took:?}; longest ping meanwhile: source \
         {worst_src:?}, target {worst_dst:?}"
    );
    assert!(done, "migration state: {:?}", job_state(&mut src));
    let addr = format!("127.0.0.1:{}", target.port);
    for (waiter, who) in [(&mut writer, "writer"), (&mut pair, "pair")] {
        assert_eq!(
            waiter.read(DUE),
            Reply::Error(format!("MOVED {slot} {addr}")),
            "the {who} on the source"
        );
    }
    assert_eq!(info_field(&mut src, "waiters"), 0);
    assert_eq!(holders(&mut dst, &readers), before_readers);
    assert_eq!(holders(&mut dst, &wide), before_wide);
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.ACQUIRE", &readers, "x", 1000)),
        None,
        "an exclusive hold among 60,000 moved readers"
    );
    let shared = |owner: &str, permits: &str| {
        cmd!(
            "LOCK.ACQUIRE",
            &wide,
            owner,
            60_000,
            "SHARED",
            "LIMIT",
            &limit,
            "PERMITS",
            permits
        )
    };
    assert_eq!(
        common::int_or_nil(&mut dst, shared("x", "2")),
        None,
        "2 permits of 1 free"
    );
    let fresh = common::int_or_nil(&mut dst, shared("y", "1")).expect("the one free permit");
    assert!(
        fresh > moved_max,
        "a new token {fresh} at or below a moved one {moved_max}"
    );
    assert!(
        worst_src.within(Duration::from_secs(1)),
        "a ping on the source waited {worst_src:?}"
    );
    assert!(
        worst_dst.within(Duration::from_secs(1)),
        "a ping on the target waited {worst_dst:?}"
    );
    assert_turns_bounded(&mut src, "source");
    assert_turns_bounded(&mut dst, "target");
}

// --- (c) one key of a group moved away ----------------------------------------------------------

/// Groups / `MIGRATE` of one key of a group taken with `LOCK.MACQUIRE`, with a waiter queued for
/// that key on the source (and a replica of the source). Attacks the all-or-nothing commands
/// on a group that is no longer whole: the key left the server under them.
///
/// Must hold: the moved key keeps its hold (owner, token, lease) on the target, where nobody
/// else may take it and its owner renews it; on the source the waiter is granted the key at once
/// (it left the server), `LOCK.MRENEW` and `LOCK.MRELEASE` answer 2 of 3 (part of the group is
/// gone) and never touch the waiter's hold, a `LOCK.MACQUIRE` of the three by the group's owner
/// is refused and changes nothing, the replica agrees with its master, and the engine's
/// counters come back to zero.
#[test]
fn migrate_of_one_key_of_a_group() {
    let source = Server::start();
    let replica = Server::start();
    attach_replica(&source, &replica);
    let target = Server::start();
    let mut src = source.conn();
    let mut dst = target.conn();
    let keys = ["{g}a", "{g}b", "{g}c"];
    let taken: Vec<i64> = cmd!("LOCK.MACQUIRE", 3, &keys[..], "grp", LONG)
        .query(&mut src)
        .unwrap();
    let token = taken[0];
    assert_eq!(taken, vec![token; 3]);
    let (mut waiter, _) = wait_on(&source, &mut src, "{g}b", "w", LONG, &[], 1);
    let moved: String = cmd!("MIGRATE", "127.0.0.1", target.port, "{g}b", 0, 10_000)
        .query(&mut src)
        .expect("MIGRATE");
    assert_eq!(moved, "OK");
    let w_token = token_of(&mut waiter, "the waiter for the moved key");
    assert!(w_token > token);
    // The target: the group's hold on the moved key, whole.
    let there = info(&mut dst, "{g}b").expect("the moved key on the target");
    assert_eq!((bytes(&there[0]), int(&there[1])), (b"grp".to_vec(), token));
    assert!((1..=LONG).contains(&int(&there[3])), "ttl {:?}", there[3]);
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.ACQUIRE", "{g}b", "other", 1000)),
        None
    );
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.RENEW", "{g}b", "grp", LONG)),
        Some(token)
    );
    // The source: the group is two keys there, the third is the waiter's.
    let w_ttl = |c: &mut Connection| int(&info(c, "{g}b").expect("w's hold")[3]);
    let ttl_before = w_ttl(&mut src);
    let renewed: i64 = cmd!("LOCK.MRENEW", 3, &keys[..], "grp", 2 * LONG)
        .query(&mut src)
        .unwrap();
    assert_eq!(renewed, 2, "MRENEW counts the keys the owner holds");
    assert!(
        w_ttl(&mut src) <= ttl_before,
        "MRENEW renewed another owner's hold"
    );
    let again: Option<Vec<i64>> = cmd!("LOCK.MACQUIRE", 3, &keys[..], "grp", LONG)
        .query(&mut src)
        .unwrap();
    assert_eq!(again, None, "the group is not whole");
    for key in ["{g}a", "{g}c"] {
        let held = info(&mut src, key).expect("still the group's");
        assert_eq!((bytes(&held[0]), int(&held[1])), (b"grp".to_vec(), token));
    }
    let released: i64 = cmd!("LOCK.MRELEASE", 3, &keys[..], "grp")
        .query(&mut src)
        .unwrap();
    assert_eq!(released, 2, "MRELEASE counts the keys the owner held");
    assert!(info(&mut src, "{g}a").is_none() && info(&mut src, "{g}c").is_none());
    let b = info(&mut src, "{g}b").expect("the waiter's hold");
    assert_eq!((bytes(&b[0]), int(&b[1])), (b"w".to_vec(), w_token));
    let next: Vec<i64> = cmd!("LOCK.MACQUIRE", 2, "{g}a", "{g}c", "next", LONG)
        .query(&mut src)
        .unwrap();
    assert!(next[0] > w_token, "tokens rise: {next:?} after {w_token}");
    // The replica applied the same.
    let _: i64 = cmd!("WAIT", 1, 5000).query(&mut src).unwrap();
    let mut rep = replica.conn();
    for key in keys {
        let (m, r) = (info(&mut src, key), info(&mut rep, key));
        let strip = |i: Option<Vec<Value>>| i.map(|v| (v[0].clone(), v[1].clone(), v[2].clone()));
        assert_eq!(strip(m), strip(r), "{key} on the replica");
    }
    assert_eq!(info_field(&mut src, "waiters"), 0);
    assert!(eventually(DUE, || info_field(&mut src, "timers") == 0));
}

// --- (d) FLUSHALL and SWAPDB under queued permit waiters ---------------------------------------

/// A `SELECT`ed connection.
fn conn_in(server: &Server, db: i64) -> Connection {
    let mut c = server.conn();
    let _: () = cmd!("SELECT", db).query(&mut c).unwrap();
    c
}

/// Permits / `FLUSHALL` and `SWAPDB` while requests for several permits (`SHARED LIMIT 10
/// PERMITS p`) and an exclusive request are queued. Attacks the serving of a queue whose key
/// changed wholesale behind the engine's back: the queue must be served by permits, in order,
/// as if the holds had ended one by one, and a value of another limit arriving by `SWAPDB` must
/// answer every waiter it can never admit at once, not only the head (issue 18, class 4).
///
/// Must hold: after `FLUSHALL` the waiters are granted in queue order while permits last (4 + 2
/// of 10) and the one needing 5 of the 4 left holds back everyone behind it, exclusive or not;
/// after `SWAPDB` brings a `LIMIT 5` value, every `LIMIT 10` waiter gets `ERR lock has another
/// limit (5)` at once, the exclusive one keeps waiting, and the old value's holders live on in
/// the other db; `LOCK.INFO`, `LOCK.WAITERS` and `INFO relock` agree at each step, and nothing
/// stays armed at the end.
#[test]
fn flushall_and_swapdb_under_queued_permit_waiters() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |owner: &str, permits: &str| {
        cmd!(
            "LOCK.ACQUIRE",
            "pool",
            owner,
            LONG,
            "SHARED",
            "LIMIT",
            10,
            "PERMITS",
            permits
        )
    };
    common::int_or_nil(&mut c, sem("a", "7")).expect("a");
    common::int_or_nil(&mut c, sem("b", "3")).expect("b");
    let permits = |p: &'static str| ["SHARED", "LIMIT", "10", "PERMITS", p];
    let (mut w1, _) = wait_on(&server, &mut c, "pool", "w1", LONG, &permits("4"), 1);
    let (mut w2, _) = wait_on(&server, &mut c, "pool", "w2", LONG, &permits("2"), 2);
    let (mut w3, _) = wait_on(&server, &mut c, "pool", "w3", LONG, &permits("5"), 3);
    let (mut x, _) = wait_on(&server, &mut c, "pool", "x", LONG, &[], 4);
    let (mut w4, _) = wait_on(&server, &mut c, "pool", "w4", LONG, &permits("1"), 5);

    // FLUSHALL: served by permits, in order, until the head needs more than are free.
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let t1 = token_of(&mut w1, "w1 after FLUSHALL");
    let t2 = token_of(&mut w2, "w2 after FLUSHALL");
    assert!(t1 < t2, "granted in queue order");
    let granted: Vec<(Vec<u8>, i64, i64)> = vec![(b"w1".to_vec(), t1, 4), (b"w2".to_vec(), t2, 2)];
    assert_eq!(holders(&mut c, "pool"), granted);
    assert_eq!(queued(&mut c, "pool"), ["w3", "x", "w4"]);
    let i = info(&mut c, "pool").expect("pool");
    assert_eq!(
        (int(&i[4]), int(&i[6]), int(&i[7]), int(&i[8])),
        (3, 2, 10, 4)
    );
    assert_eq!(info_field(&mut c, "waiters"), 3);
    // A request for 1 permit may not pass the queue, though 4 are free.
    assert_eq!(common::int_or_nil(&mut c, sem("late", "1")), None);
    // w1's release lets w3 in (8 free); x and w4 still wait (no barging past x).
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "pool", "w1")),
        Some(0)
    );
    let t3 = token_of(&mut w3, "w3 after w1's release");
    assert!(t3 > t2);
    assert_eq!(queued(&mut c, "pool"), ["x", "w4"]);
    for (who, r) in [("x", &mut x), ("w4", &mut w4)] {
        assert_eq!(
            r.read_within(Duration::from_millis(200)),
            None,
            "{who} was answered"
        );
    }
    let (mut w5, _) = wait_on(&server, &mut c, "pool", "w5", LONG, &permits("2"), 3);

    // SWAPDB brings a LIMIT 5 value to db 0: every LIMIT 10 waiter is told at once, the
    // exclusive one keeps waiting; the old value lives on in db 1.
    let mut db1 = conn_in(&server, 1);
    let y = common::int_or_nil(
        &mut db1,
        cmd!(
            "LOCK.ACQUIRE",
            "pool",
            "y",
            LONG,
            "SHARED",
            "LIMIT",
            5,
            "PERMITS",
            5
        ),
    )
    .expect("y in db 1");
    let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
    for (who, r) in [("w4", &mut w4), ("w5", &mut w5)] {
        assert_eq!(
            r.read(DUE),
            Reply::Error("ERR lock has another limit (5)".into()),
            "{who} after SWAPDB"
        );
    }
    assert_eq!(queued(&mut c, "pool"), ["x"]);
    assert_eq!(holders(&mut c, "pool"), vec![(b"y".to_vec(), y, 5)]);
    assert_eq!(
        holders(&mut db1, "pool"),
        vec![(b"w2".to_vec(), t2, 2), (b"w3".to_vec(), t3, 5)]
    );
    assert_eq!(queued(&mut db1, "pool"), Vec::<String>::new());
    assert_eq!(info_field(&mut c, "waiters"), 1);
    assert_eq!(
        x.read_within(Duration::from_millis(200)),
        None,
        "x was answered"
    );
    let log: Value = cmd!("LOCK.LOG", 5).query(&mut c).unwrap();
    let reasons = format!("{log:?}");
    assert!(
        reasons.contains("swapped") && reasons.contains("flushed"),
        "{reasons}"
    );

    // SWAPDB back: the LIMIT 10 value with 7 permits taken holds x back; FLUSHALL lets it in.
    let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
    assert_eq!(
        x.read_within(Duration::from_millis(200)),
        None,
        "x was answered"
    );
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let tx = token_of(&mut x, "x after the second FLUSHALL");
    assert!(tx > t3);
    let i = info(&mut c, "pool").expect("x's hold");
    assert_eq!(
        (bytes(&i[0]), int(&i[1]), int(&i[4])),
        (b"x".to_vec(), tx, 0)
    );
    assert_eq!(info_field(&mut c, "waiters"), 0);
    assert!(eventually(DUE, || info_field(&mut c, "timers") == 0));
}

// --- (e) clients that go away around groups -----------------------------------------------------

/// The owner and token of the exclusive hold at `key`, if any.
fn owner_of(c: &mut Connection, key: &str) -> Option<(String, i64)> {
    info(c, key).map(|i| {
        (
            String::from_utf8_lossy(&bytes(&i[0])).into_owned(),
            int(&i[1]),
        )
    })
}

/// Disconnects / a client in the middle of the group wait pattern the docs give (`LOCK.MACQUIRE`
/// refused, then `LOCK.WAIT` key by key in sorted order) hangs up while it holds the first key
/// and waits for the second; another waits behind it for the second key, and a third group
/// waiter waits for the first. Then the same pattern, but the hang-up comes in the same
/// `MULTI` as the release that grants it the second key.
///
/// Must hold: a refused `LOCK.MACQUIRE` takes nothing; the hung-up waiter leaves its queue at
/// once and is never granted; the hold it has lives until its ttl and then passes to the next
/// waiter within a few ms; a grant whose only answer was lost with its connection is revoked
/// (journal `revoked`) and the key passes on; at no moment does a key have two owners; the
/// third waiter completes the group and `LOCK.MRENEW` counts all of it.
#[test]
fn a_group_waiter_that_hangs_up_midway() {
    let server = Server::start();
    let mut c = server.conn();
    let h = common::acquire(&mut c, "{g}b", "h", LONG);
    let mut a = Raw::connect(&server);
    a.send(&[
        b"LOCK.MACQUIRE",
        b"3",
        b"{g}a",
        b"{g}b",
        b"{g}c",
        b"A",
        b"1500",
    ]);
    assert_eq!(a.read(DUE), Reply::Nil, "b is taken");
    assert!(info(&mut c, "{g}a").is_none() && info(&mut c, "{g}c").is_none());
    a.send(&[b"LOCK.WAIT", b"{g}a", b"A", b"1500", b"0"]);
    let a_on_a = token_of(&mut a, "A's wait for a (free)");
    let a_took = Instant::now();
    a.send(&[b"LOCK.WAIT", b"{g}b", b"A", b"1500", b"0"]);
    assert!(eventually(DUE, || info_field(&mut c, "waiters") == 1));
    let (mut b, _) = wait_on(&server, &mut c, "{g}a", "B", LONG, &[], 2);
    let (mut cw, _) = wait_on(&server, &mut c, "{g}b", "C", LONG, &[], 3);
    assert_eq!(queued(&mut c, "{g}b"), ["A", "C"]);

    // A hangs up: it leaves b's queue at once; its hold on a lives until its ttl.
    drop(a);
    assert!(eventually(DUE, || queued(&mut c, "{g}b") == ["C"]));
    assert_eq!(owner_of(&mut c, "{g}a"), Some(("A".into(), a_on_a)));
    let b_on_a = token_of(&mut b, "B's wait for a, after A's ttl");
    let waited = a_took.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "B got a {waited:?} after A took it for 1500 ms"
    );
    assert_eq!(owner_of(&mut c, "{g}a"), Some(("B".into(), b_on_a)));
    assert_eq!(
        history_reasons(&mut c, "{g}a").first().map(String::as_str),
        Some("expired")
    );

    // h releases b: C, never A, gets it.
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "{g}b", "h")),
        Some(0)
    );
    let c_on_b = token_of(&mut cw, "C after h's release");
    assert!(c_on_b > h);
    assert_eq!(owner_of(&mut c, "{g}b"), Some(("C".into(), c_on_b)));

    // B goes on in order: b (after C), then c. D waits for b behind B and is killed in the
    // same MULTI as C's release, which grants B, the head: D was only queued, B's grant stays.
    b.send(&[b"LOCK.WAIT", b"{g}b", b"B", b"60000", b"0"]);
    assert!(eventually(DUE, || queued(&mut c, "{g}b") == ["B"]));
    let (d, d_id) = wait_on(&server, &mut c, "{g}b", "D", LONG, &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{g}b")
        .arg("C")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(d_id);
    let _: Value = p.query(&mut c).unwrap();
    let b_on_b = token_of(&mut b, "B's wait for b");
    assert_eq!(owner_of(&mut c, "{g}b"), Some(("B".into(), b_on_b)));
    drop(d);
    b.send(&[b"LOCK.WAIT", b"{g}c", b"B", b"60000", b"0"]);
    token_of(&mut b, "B's wait for c (free)");
    b.send(&[
        b"LOCK.MRENEW",
        b"3",
        b"{g}a",
        b"{g}b",
        b"{g}c",
        b"B",
        b"60000",
    ]);
    assert_eq!(b.read(DUE), Reply::Int(3), "B holds the whole group");
    b.send(&[b"LOCK.MRELEASE", b"3", b"{g}a", b"{g}b", b"{g}c", b"B"]);
    assert_eq!(b.read(DUE), Reply::Int(3));

    // The hang-up in the same MULTI as the release that grants it: the grant is revoked and
    // the key passes to the next waiter.
    let h2 = common::acquire(&mut c, "{g}b", "h", LONG);
    let (_e, e_id) = wait_on(&server, &mut c, "{g}b", "E", LONG, &[], 1);
    let (mut f, _) = wait_on(&server, &mut c, "{g}b", "F", LONG, &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{g}b")
        .arg("h")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(e_id);
    let _: Value = p.query(&mut c).unwrap();
    let f_on_b = token_of(&mut f, "F after E's grant was revoked");
    assert!(f_on_b > h2);
    assert_eq!(owner_of(&mut c, "{g}b"), Some(("F".into(), f_on_b)));
    assert_eq!(
        history_reasons(&mut c, "{g}b").first().map(String::as_str),
        Some("revoked")
    );
    assert_eq!(info_field(&mut c, "waiters"), 0);
}

/// Disconnects / `LOCK.MACQUIRE` inside a `MULTI` with `CLIENT KILL`: of the connection running
/// the transaction itself, and of a waiter for one of the group's keys, killed before or after
/// the release that frees the key (and grants it to that waiter). A replica follows.
///
/// Must hold: a group taken in a transaction whose connection is killed by it stays taken
/// (it was answered: no revoke for a command's reply) until its ttl, and nobody else takes it;
/// a waiter killed before the release leaves the queue, and the group is taken in the same
/// transaction; a waiter granted by the release and killed after it loses the grant (revoked),
/// the `LOCK.MACQUIRE` between them is refused and changes nothing, and a retry takes the
/// group; the replica ends with the master's holds.
#[test]
fn macquire_in_a_multi_with_client_kill() {
    let server = Server::start();
    let replica = Server::start();
    attach_replica(&server, &replica);
    let mut c = server.conn();

    // MULTI: MACQUIRE, then kill yourself.
    let mut k = Raw::connect(&server);
    let k_id = client_id(&mut k).to_string();
    for args in [
        vec![&b"MULTI"[..]],
        vec![b"LOCK.MACQUIRE", b"2", b"{m}x", b"{m}y", b"K", b"60000"],
        vec![b"CLIENT", b"KILL", b"ID", k_id.as_bytes(), b"SKIPME", b"no"],
        vec![b"EXEC"],
    ] {
        k.send(&args);
    }
    for _ in 0..3 {
        k.read(DUE);
    }
    let exec = k.read(DUE);
    let Reply::Array(results) = exec else {
        panic!("EXEC: {exec:?}")
    };
    let Reply::Array(tokens) = &results[0] else {
        panic!("MACQUIRE in EXEC: {results:?}")
    };
    let tk = match tokens[0] {
        Reply::Int(t) => t,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(
        results[1],
        Reply::Int(1),
        "the transaction killed its own connection"
    );
    let listed = format!("id={k_id} ");
    assert!(eventually(DUE, || {
        let list: String = cmd!("CLIENT", "LIST").query(&mut c).unwrap();
        !list.lines().any(|l| l.starts_with(&listed))
    }));
    assert_eq!(owner_of(&mut c, "{m}x"), Some(("K".into(), tk)));
    assert_eq!(owner_of(&mut c, "{m}y"), Some(("K".into(), tk)));
    let other: Option<Vec<i64>> = cmd!("LOCK.MACQUIRE", 2, "{m}x", "{m}y", "O", 1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(other, None);

    // MULTI: kill a waiter for x, release x, take the group.
    let _: i64 = cmd!("LOCK.MRELEASE", 2, "{m}x", "{m}y", "K")
        .query(&mut c)
        .unwrap();
    let h = common::acquire(&mut c, "{m}x", "h", LONG);
    let (_w, w_id) = wait_on(&server, &mut c, "{m}x", "W", LONG, &[], 1);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(w_id)
        .cmd("LOCK.RELEASE")
        .arg("{m}x")
        .arg("h")
        .cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg("{m}x")
        .arg("{m}y")
        .arg("K2")
        .arg(60_000);
    let (_, _, taken): (Value, i64, Option<Vec<i64>>) = p.query(&mut c).unwrap();
    let taken = taken.expect("x is free once the killed waiter left");
    assert!(taken[0] > h);
    assert_eq!(owner_of(&mut c, "{m}x"), Some(("K2".into(), taken[0])));
    assert_eq!(info_field(&mut c, "waiters"), 0);

    // MULTI: release x (granting the waiter), MACQUIRE (refused), kill the waiter.
    let _: i64 = cmd!("LOCK.MRELEASE", 2, "{m}x", "{m}y", "K2")
        .query(&mut c)
        .unwrap();
    common::acquire(&mut c, "{m}x", "h", LONG);
    let (_v, v_id) = wait_on(&server, &mut c, "{m}x", "V", LONG, &[], 1);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("{m}x")
        .arg("h")
        .cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg("{m}x")
        .arg("{m}y")
        .arg("K3")
        .arg(60_000)
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(v_id);
    let (_, refused, _): (i64, Option<Vec<i64>>, Value) = p.query(&mut c).unwrap();
    assert_eq!(refused, None, "x was V's in that step");
    assert!(info(&mut c, "{m}y").is_none(), "a refused MACQUIRE took y");
    assert!(
        eventually(DUE, || info(&mut c, "{m}x").is_none()),
        "V's grant was not revoked: {:?}",
        owner_of(&mut c, "{m}x")
    );
    assert_eq!(
        history_reasons(&mut c, "{m}x").first().map(String::as_str),
        Some("revoked")
    );
    let retry: Vec<i64> = cmd!("LOCK.MACQUIRE", 2, "{m}x", "{m}y", "K3", 60_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(owner_of(&mut c, "{m}x"), Some(("K3".into(), retry[0])));

    // The replica followed every step.
    let _: i64 = cmd!("WAIT", 1, 5000).query(&mut c).unwrap();
    let mut rep = replica.conn();
    for key in ["{m}x", "{m}y"] {
        assert_eq!(
            owner_of(&mut rep, key),
            owner_of(&mut c, key),
            "{key} on the replica"
        );
    }
    assert!(eventually(DUE, || info_field(&mut c, "timers") == 0));
}

// --- (f) a request for more permits than are free, while holders time out ----------------------

/// Permits / a request for 8 permits of 10 waits while the holders of the other permits (2
/// each) time out one by one, and requests for 1 or 2 permits arrive behind it (queued, and
/// tried without waiting) as permits come free. Attacks starvation of a large request and
/// barging past it, with every permit freed by a lease's end (the engine's timers), not by a
/// command.
///
/// Must hold: nothing behind the large request is granted before it, not even when permits
/// are free that it cannot use yet (an acquire finds the key taken); it is granted within a few
/// ms of the lease end that frees its 8th permit (the bound is generous); the permits of the
/// live holders never sum past 10; once it releases, the waiters behind it are granted in
/// order.
#[test]
fn a_large_permit_request_is_not_starved_nor_passed_while_holders_time_out() {
    let server = Server::start();
    let mut c = server.conn();
    let sem = |owner: &str, ttl: i64, permits: i64| {
        cmd!(
            "LOCK.ACQUIRE",
            "sem",
            owner,
            ttl,
            "SHARED",
            "LIMIT",
            10,
            "PERMITS",
            permits
        )
    };
    let sum = |c: &mut Connection| holders(c, "sem").iter().map(|h| h.2).sum::<i64>();
    let mut ends = Vec::new();
    for (i, ttl) in [1_000, 2_000, 3_000, 4_000, LONG].into_iter().enumerate() {
        let sent = Instant::now();
        common::int_or_nil(&mut c, sem(&format!("h{i}"), ttl, 2)).expect("a holder");
        ends.push(sent + Duration::from_millis(ttl as u64));
    }
    let words = |p: &'static str| ["SHARED", "LIMIT", "10", "PERMITS", p];
    let (mut big, _) = wait_on(&server, &mut c, "sem", "big", LONG, &words("8"), 1);
    let (s1, _) = wait_on(&server, &mut c, "sem", "s1", LONG, &words("1"), 2);
    let mut behind = vec![("s1".to_string(), s1)];
    // Whether a raw connection got a reply (looked at for a moment).
    let answered = |r: &mut Raw| r.read_within(Duration::from_millis(50));
    // As each of the first three holders times out, another request arrives behind, and a
    // newcomer tries without waiting: neither passes the large request.
    for gone in 1..=3 {
        let left = 5 - gone;
        assert!(
            eventually(Duration::from_secs(30), || holders(&mut c, "sem").len()
                == left),
            "holder {gone} did not time out"
        );
        assert!(sum(&mut c) <= 10);
        assert_eq!(
            common::int_or_nil(&mut c, sem(&format!("n{gone}"), LONG, 1)),
            None,
            "a newcomer passed the queue with {} permits free",
            2 * gone
        );
        let owner = format!("s{}", gone + 1);
        let queue = 2 + gone as i64;
        let (r, _) = wait_on(&server, &mut c, "sem", &owner, LONG, &words("2"), queue);
        behind.push((owner, r));
        assert_eq!(answered(&mut big), None, "big, with {} free", 2 * gone);
    }
    // The fourth holder's lease end frees the eighth permit.
    let t_big = token_of(&mut big, "the 8-permit request");
    let late = Instant::now().saturating_duration_since(ends[3]);
    assert!(
        late < Duration::from_millis(250),
        "granted {late:?} after the lease end"
    );
    for (owner, r) in &mut behind {
        assert_eq!(
            answered(r),
            None,
            "{owner} was answered behind the large request"
        );
    }
    assert_eq!(sum(&mut c), 10, "big's 8 and the last holder's 2");
    assert_eq!(queued(&mut c, "sem"), ["s1", "s2", "s3", "s4"]);
    // big releases: s1 (1), s2 (2), s3 (2), s4 (2) fit in 8, in order.
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RELEASE", "sem", "big")),
        Some(0)
    );
    let mut last = t_big;
    for (owner, r) in &mut behind {
        let t = token_of(r, owner);
        assert!(t > last, "{owner} out of order");
        last = t;
    }
    assert_eq!(sum(&mut c), 9);
    assert_eq!(info_field(&mut c, "waiters"), 0);
}
