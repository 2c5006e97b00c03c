//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a slot with locks, shared
//! holders and a queued waiter, on a cluster of three masters without replicas or AOF (so that
//! nothing but the migration receives what the source propagates). It behaves as with `MIGRATE`:
//! every hold arrives with its owner, token and lease, changes made while the slot streams
//! arrive as their effects, the waiter is redirected, and nobody gets a second owner.
//!
//! On servers without atomic slot migration (Redis, Valkey 8) the test checks that the command
//! does not exist there, so it never passes by doing nothing where it should run.
#[path = "cluster_harness/mod.rs"]
mod cluster_harness;
#[macro_use]
mod common;

use std::time::Duration;

use cluster_harness::Cluster;
use common::raw::{Raw, Reply};
use common::{eventually, Server};
use redis::{Connection, Value};

const DUE: Duration = Duration::from_secs(30);

fn migrateslots_supported(c: &mut Connection) -> bool {
    let docs: Value = cmd!("COMMAND", "INFO", "CLUSTER|MIGRATESLOTS")
        .query(c)
        .unwrap();
    matches!(docs, Value::Array(ref items) if items.first().is_some_and(|i| *i != Value::Nil))
}

/// (owner, token) of every live holder of `key`, in token order.
fn holders(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64)> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let Value::Array(items) = v else {
        return vec![];
    };
    items
        .into_iter()
        .map(|entry| {
            let Value::Array(f) = entry else {
                panic!("entry {entry:?}")
            };
            let (Value::BulkString(owner), Value::Int(token)) = (&f[1], &f[3]) else {
                panic!("entry {f:?}")
            };
            (owner.clone(), *token)
        })
        .collect()
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
    std::thread::sleep(Duration::from_millis(300));
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
