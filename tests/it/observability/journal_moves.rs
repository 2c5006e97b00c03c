//! What the journal says of moves: `MIGRATE` of more locks than remembered, Valkey 9's atomic
//! slot migration at the source, and serializations that move nothing.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::named_token_count_permits as holders;
use common::reply::{history_reasons, log_reasons, text};
use common::{acquire, eventually, Server};
use redis::Value;

const LONG: i64 = 600_000;

/// Found in attack round 7.
///
/// Journal / `MIGRATE ... KEYS` of 1,100 locks on a server that lets the module tell MIGRATE
/// from DEL (Redis 7.2+, Valkey). docs/commands.md: `moved` is "`RENAME`, `MOVE` or `MIGRATE`
/// away: the hold lives on under the new name, in the other db or on the other server",
/// `deleted` for MIGRATE only on Redis 7.0. `unlinked::Serialized` keeps 1,024 values per
/// command.
///
/// Must hold: every one of the 1,100 holds is journaled `moved` (the journal is long enough to
/// keep them all).
///
/// Measured (Redis 8.2, Valkey 9.1): 1,024 `moved`, 76 `deleted`.
#[test]
fn journal_migrate_of_more_locks_than_remembered_says_moved_for_each() {
    let source = Server::with_args(&["--relock.log-max-len", "5000"]);
    let target = Server::start();
    let mut c = source.conn();
    if common::migrate_reason(&mut c) != "moved" {
        return; // Redis 7.0 says `deleted` for every MIGRATE, as documented.
    }
    let n = 1100;
    let keys: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let mut p = redis::pipe();
    for k in &keys {
        p.cmd("LOCK.ACQUIRE").arg(k).arg("o").arg(LONG);
    }
    let _: Vec<i64> = p.query(&mut c).unwrap();
    let ok: String = cmd!(
        "MIGRATE",
        "127.0.0.1",
        target.port,
        "",
        0,
        10_000,
        "KEYS",
        &keys
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(ok, "OK");
    let reasons = log_reasons(&mut c, 2 * n);
    assert_eq!(reasons.len(), n);
    let deleted = reasons.iter().filter(|r| *r == "deleted").count();
    assert_eq!(
        deleted, 0,
        "{deleted} of {n} holds MIGRATE moved say deleted"
    );
}

/// Found in attack round 7.
///
/// Journal / Valkey 9 `CLUSTER MIGRATESLOTS` of a slot with an exclusive lock and a read lock of
/// two holders. docs/commands.md: `moved` is a hold that "lives on under the new name, in the
/// other db or on the other server"; `deleted` is `DEL`, `UNLINK`, an overwrite. The source
/// removes the slot's keys after the handover.
///
/// Must hold: the holds live on at the target (owner, token), and the source's journal, if it
/// says anything of them, says `moved`, never `deleted` or `expired`. Servers without atomic
/// slot migration skip.
///
/// Measured (Valkey 9.1): every hold of the slot is journaled `deleted` at the source (the
/// serialization `unlinked::Serialized` looks for happens in the child that streams the slot;
/// the source's deletion after the handover is a `del`).
#[test]
fn journal_atomic_slot_migration_says_moved_at_the_source() {
    let cluster = cluster_harness::Cluster::start_with(0);
    let masters: Vec<&Server> = cluster.masters();
    let (source, target) = (masters[0], masters[1]);
    let mut src = source.conn();
    let mut dst = target.conn();
    let supported: Value = cmd!("COMMAND", "INFO", "CLUSTER|MIGRATESLOTS")
        .query(&mut src)
        .unwrap();
    if !matches!(supported, Value::Array(ref i) if i.first().is_some_and(|i| *i != Value::Nil)) {
        return;
    }
    let tag = cluster.key_on(source.port, "asm");
    let (ex, rd) = (format!("{{{tag}}}ex"), format!("{{{tag}}}rd"));
    let slot: u16 = cmd!("CLUSTER", "KEYSLOT", &ex).query(&mut src).unwrap();
    let token = acquire(&mut src, &ex, "writer", LONG);
    for r in ["r1", "r2"] {
        let _: i64 = cmd!("LOCK.ACQUIRE", &rd, r, LONG, "SHARED")
            .query(&mut src)
            .unwrap();
    }
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
    let moved = eventually(Duration::from_secs(60), || {
        let n: i64 = cmd!("EXISTS", &ex).query(&mut dst).unwrap_or(0);
        let gone: i64 = cmd!("DBSIZE").query(&mut src).unwrap_or(1);
        n == 1 && gone == 0
    });
    assert!(moved, "the slot did not move");
    let there = holders(&mut dst, &ex);
    assert_eq!(there.len(), 1);
    assert_eq!((there[0].0.as_str(), there[0].1), ("writer", token));
    assert_eq!(holders(&mut dst, &rd).len(), 2);
    // LOCK.HISTORY of the key is redirected now (its slot is the target's): the whole journal.
    let log: Value = cmd!("LOCK.LOG", 100).query(&mut src).unwrap();
    let Value::Array(entries) = log else {
        panic!("LOCK.LOG: {log:?}")
    };
    let said: Vec<(String, String)> = entries
        .iter()
        .filter_map(|e| match e {
            Value::Array(f) if text(&f[7]) == ex || text(&f[7]) == rd => {
                Some((text(&f[7]), text(&f[13])))
            }
            _ => None,
        })
        .collect();
    eprintln!("the source's journal: {said:?}");
    assert!(
        said.iter().all(|(_, r)| r == "moved"),
        "the source's journal of holds that live on at the target: {said:?}"
    );
}

/// Found in attack round 7.
///
/// Journal / the `MIGRATE` detection: values serialized by commands that move nothing, then
/// deleted: `DEBUG OBJECT` (which serializes to measure) and `DEL` pipelined, `MIGRATE ... COPY`
/// and `DEL` in one `MULTI`, `SAVE` and `DEL` pipelined, `DUMP` then `RESTORE ... REPLACE`
/// over it; and a real `MIGRATE` run from a script.
///
/// Must hold: every hold that only a `DEL` ended says `deleted` (`restored` for the RESTORE);
/// the script's MIGRATE says what a MIGRATE says on this server.
#[test]
fn journal_serializations_that_move_nothing_are_not_moves() {
    let source = Server::start();
    let target = Server::start();
    let mut c = source.conn();
    let moved = common::migrate_reason(&mut c);
    for i in 0..20 {
        let key = format!("obj{i}");
        acquire(&mut c, &key, "o", LONG);
        let _: (Value, i64) = redis::pipe()
            .cmd("DEBUG")
            .arg("OBJECT")
            .arg(&key)
            .cmd("DEL")
            .arg(&key)
            .query(&mut c)
            .unwrap();
    }
    acquire(&mut c, "copied", "o", LONG);
    let (ok, n): (String, i64) = redis::pipe()
        .atomic()
        .cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("copied")
        .arg(0)
        .arg(5000)
        .arg("COPY")
        .cmd("DEL")
        .arg("copied")
        .query(&mut c)
        .unwrap();
    assert_eq!((ok.as_str(), n), ("OK", 1));
    acquire(&mut c, "saved", "o", LONG);
    // SAVE is refused in MULTI: pipelined, so the DEL may start in the SAVE's microsecond.
    let _: (String, i64) = redis::pipe()
        .cmd("SAVE")
        .cmd("DEL")
        .arg("saved")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "dumped", "o", LONG);
    let dump: Vec<u8> = cmd!("DUMP", "dumped").query(&mut c).unwrap();
    let _: () = cmd!("RESTORE", "dumped", 0, dump, "REPLACE")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "scripted", "o", LONG);
    let ok: String = cmd!(
        "EVAL",
        "return redis.call('MIGRATE', '127.0.0.1', ARGV[1], KEYS[1], 0, 5000)",
        1,
        "scripted",
        target.port
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(ok, "OK");
    let mut said = Vec::new();
    for i in 0..20 {
        said.extend(history_reasons(&mut c, &format!("obj{i}")));
    }
    said.extend(history_reasons(&mut c, "copied"));
    said.extend(history_reasons(&mut c, "saved"));
    assert_eq!(said, vec!["deleted"; 22], "holds a DEL ended");
    assert_eq!(history_reasons(&mut c, "dumped"), ["restored"]);
    assert_eq!(history_reasons(&mut c, "scripted"), [moved]);
}
