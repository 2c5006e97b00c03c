//! Big shared values moved between servers (`MIGRATE`, Valkey 9's atomic slot migration) and
//! one key of a `LOCK.MACQUIRE` group moved away.
//!
//! Found in attack round 6. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;
use relock_testkit::cmd;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::load::storms::{turn_bound_us, usec_per_call};
use cluster_harness::Cluster;
use common::ask::job_state;
use common::ask::lock_fields as info;
use common::ask::migrateslots_supported;
use common::ask::owner_token_permits as holders;
use common::probe::Prober;
use common::raw::token_of;
use common::raw::wait_on;
use common::raw::{pipeline, Raw, Reply};
use common::reply::{bytes, history_reasons, int};
use common::{attach_replica, eventually, info_field, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// How long a ping may wait on a busy machine while the module works through a big value.
const PING_BOUND: Duration = Duration::from_millis(250);

/// Asserts that no turn the module started by itself on `c`'s server took longer than
/// [`turn_bound_us`] (40 ms for the debug build); prints the longest, named `server`.
fn assert_server_turns_bounded(c: &mut Connection, server: &str) {
    let turn = info_field(c, "longest_turn_us");
    eprintln!("{server}: longest turn {turn} µs");
    if let Some(bound) = turn_bound_us(40_000) {
        assert!(
            turn <= bound,
            "{server}: a turn the module started took {turn} µs (bound {bound} µs)"
        );
    }
}

/// Takes `owners` shared holds of `key` (`words` after `SHARED`), pipelined; asserts each got a
/// token (a new hold past a millisecond's 1000th is sent again: [`pipeline`]).
fn take_shared_holds(server: &Server, key: &str, owners: &[Vec<u8>], ttl: i64, words: &[&str]) {
    let mut raw = Raw::connect(server);
    let ttl = ttl.to_string();
    let commands = owners.iter().map(|owner| {
        let mut args: Vec<Vec<u8>> = vec![
            b"LOCK.ACQUIRE".to_vec(),
            key.as_bytes().to_vec(),
            owner.clone(),
            ttl.as_bytes().to_vec(),
            b"SHARED".to_vec(),
        ];
        args.extend(words.iter().map(|w| w.as_bytes().to_vec()));
        args
    });
    pipeline(&mut raw, commands, |reply| matches!(reply, Reply::Int(_)));
}

/// `n` owners `{prefix}{i}` padded to `len` bytes.
fn padded_owners(prefix: &str, n: usize, len: usize) -> Vec<Vec<u8>> {
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

/// Found in attack round 6.
///
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
    let readers_live = padded_owners("r-", 60_000, 16);
    let readers_short = padded_owners("s-", 60_000, 16);
    take_shared_holds(&source, "readers", &readers_live, LONG, &[]);
    take_shared_holds(&source, "readers", &readers_short, 3_000, &[]);
    let wide = padded_owners("w-", 100_000, 256);
    let limit = (wide.len() + 1).to_string();
    take_shared_holds(&source, "wide", &wide, LONG, &["LIMIT", &limit]);
    // Nothing touches `readers` until its short leases lapsed: they are all still there.
    let lapsed = eventually(Duration::from_secs(60), || {
        info(&mut src, "readers").is_some_and(|i| int(&i["holders"]) == readers_live.len() as i64)
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
    let [migrate_us, restore_us] = [(&mut src, "migrate"), (&mut dst, "restore")]
        .map(|(c, name)| usec_per_call(c, name).unwrap_or(0.0));
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
    assert_server_turns_bounded(&mut src, "source");
    assert_server_turns_bounded(&mut dst, "target");
}

/// Found in attack round 6.
///
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
    take_shared_holds(
        source,
        &readers,
        &padded_owners("r-", 60_000, 16),
        LONG,
        &[],
    );
    let wide_owners = padded_owners("w-", 100_000, 256);
    let limit = (wide_owners.len() + 1).to_string();
    take_shared_holds(source, &wide, &wide_owners, LONG, &["LIMIT", &limit]);
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
    assert_server_turns_bounded(&mut src, "source");
    assert_server_turns_bounded(&mut dst, "target");
}

/// Found in attack round 6.
///
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
    assert_eq!(
        (bytes(&there["owner"]), int(&there["token"])),
        (b"grp".to_vec(), token)
    );
    assert!(
        (1..=LONG).contains(&int(&there["ttl"])),
        "ttl {:?}",
        there["ttl"]
    );
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.ACQUIRE", "{g}b", "other", 1000)),
        None
    );
    assert_eq!(
        common::int_or_nil(&mut dst, cmd!("LOCK.RENEW", "{g}b", "grp", LONG)),
        Some(token)
    );
    // The source: the group is two keys there, the third is the waiter's.
    let w_ttl = |c: &mut Connection| int(&info(c, "{g}b").expect("w's hold")["ttl"]);
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
        assert_eq!(
            (bytes(&held["owner"]), int(&held["token"])),
            (b"grp".to_vec(), token)
        );
    }
    let released: i64 = cmd!("LOCK.MRELEASE", 3, &keys[..], "grp")
        .query(&mut src)
        .unwrap();
    assert_eq!(released, 2, "MRELEASE counts the keys the owner held");
    assert!(info(&mut src, "{g}a").is_none() && info(&mut src, "{g}c").is_none());
    let b = info(&mut src, "{g}b").expect("the waiter's hold");
    assert_eq!(
        (bytes(&b["owner"]), int(&b["token"])),
        (b"w".to_vec(), w_token)
    );
    let next: Vec<i64> = cmd!("LOCK.MACQUIRE", 2, "{g}a", "{g}c", "next", LONG)
        .query(&mut src)
        .unwrap();
    assert!(next[0] > w_token, "tokens rise: {next:?} after {w_token}");
    // The replica applied the same.
    let _: i64 = cmd!("WAIT", 1, 5000).query(&mut src).unwrap();
    let mut rep = replica.conn();
    for key in keys {
        let (m, r) = (info(&mut src, key), info(&mut rep, key));
        let strip = |i: Option<HashMap<String, Value>>| {
            i.map(|v| (v["owner"].clone(), v["token"].clone(), v["count"].clone()))
        };
        assert_eq!(strip(m), strip(r), "{key} on the replica");
    }
    assert_eq!(info_field(&mut src, "waiters"), 0);
    assert!(eventually(DUE, || info_field(&mut src, "timers") == 0));
}
