//! What `MIGRATE` detection costs, and a big shared key ending in Redis's cycles with a long
//! journal.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::raw::{pipeline, Raw, Reply};
use common::reply::{config_set, int, log_reasons, text, used_memory};
use common::{eventually, info_field, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;

/// How long an answer that must come "at once" may take on a busy machine.
const DUE: Duration = Duration::from_secs(10);

/// The longest latency event `name` the server recorded (`LATENCY LATEST`), in ms.
fn latency_ms(c: &mut Connection, name: &str) -> i64 {
    let v: Value = cmd!("LATENCY", "LATEST").query(c).unwrap();
    let Value::Array(events) = v else { return 0 };
    events
        .iter()
        .filter_map(|e| match e {
            Value::Array(f) if text(&f[0]) == name => Some(int(&f[3])),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The slowlog's entries as (µs, command name), newest first.
fn slow_commands(c: &mut Connection) -> Vec<(i64, String)> {
    let v: Value = cmd!("SLOWLOG", "GET", 128).query(c).unwrap();
    let Value::Array(entries) = v else {
        return vec![];
    };
    entries
        .iter()
        .filter_map(|e| match e {
            Value::Array(f) => match &f[3] {
                Value::Array(args) => Some((int(&f[2]), text(&args[0]).to_uppercase())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Found in attack round 7.
///
/// Stall / `MIGRATE ... KEYS` of 1,024 locks (the most `Serialized` remembers), against 1,024
/// strings. Each `del` notification of a serialized lock reads `INFO stats`
/// (`RedisModule_GetServerInfo`, building and parsing the whole section) to compare
/// `total_commands_processed`: 1,024 reads in one command, though the count cannot change
/// within it (perf: 39 % of the command in `server::server_info`).
///
/// Must hold: the module adds little to the command: the locks' MIGRATE takes at most 3 times
/// the strings' plus 15 ms (both in the same server's slowlog).
///
/// Measured (debug build, loaded 2-core machine): Redis 8.2 37-54 ms for the locks against 5-8
/// ms for the strings; Valkey 9.1 44-72 ms against 4.4 ms; Valkey 8.1 66 ms against 4.6 ms. The
/// same with the journal off (`relock.log-max-len 0`, `relock.log-reasons none`): the reads
/// happen whether or not anything will be journaled. (Redis 7.0 reads nothing: 2 ms.)
#[test]
fn stall_migrate_detection_reads_info_once_per_key() {
    let source = Server::start();
    let target = Server::start();
    let mut c = source.conn();
    let n = 1024;
    let locks: Vec<String> = (0..n).map(|i| format!("l{i}")).collect();
    let strings: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let mut best = (i64::MAX, i64::MAX);
    for _round in 0..3 {
        let mut fill = Vec::new();
        for (l, s) in locks.iter().zip(&strings) {
            fill.push(cmd!("LOCK.ACQUIRE", l, "o", LONG));
            fill.push(cmd!("SET", s, "v"));
        }
        pipeline(
            &mut Raw::connect(&source),
            fill.iter().map(common::raw::words),
            |r| matches!(r, Reply::Int(_)) || matches!(r, Reply::Status(s) if s == "OK"),
        );
        config_set(&mut c, "slowlog-log-slower-than", 0);
        let _: () = cmd!("SLOWLOG", "RESET").query(&mut c).unwrap();
        for keys in [&locks, &strings] {
            let ok: String = cmd!(
                "MIGRATE",
                "127.0.0.1",
                target.port,
                "",
                0,
                10_000,
                "KEYS",
                keys
            )
            .query(&mut c)
            .unwrap();
            assert_eq!(ok, "OK");
        }
        let migrates: Vec<i64> = slow_commands(&mut c)
            .into_iter()
            .filter(|(_, name)| name == "MIGRATE")
            .map(|(us, _)| us)
            .collect();
        assert_eq!(migrates.len(), 2);
        // Newest first: the strings', then the locks'.
        best = (best.0.min(migrates[1]), best.1.min(migrates[0]));
        let _: () = cmd!("FLUSHALL").query(&mut target.conn()).unwrap();
    }
    let (locks_us, strings_us) = best;
    eprintln!("MIGRATE of {n} locks: {locks_us} µs; of {n} strings: {strings_us} µs");
    assert!(
        locks_us <= 3 * strings_us + 15_000,
        "MIGRATE of {n} locks took {locks_us} µs, of {n} strings {strings_us} µs"
    );
}

/// Fills `key` with `n` shared holders (256-byte owners), pipelined (a new hold past a
/// millisecond's 1000th is sent again: [`pipeline`]).
fn fill_readers(server: &Server, key: &[u8], n: usize) {
    let mut raw = Raw::connect(server);
    let ttl = LONG.to_string();
    let commands = (0..n).map(|i| {
        let mut owner = format!("owner-{i:08}-").into_bytes();
        owner.resize(256, b'o');
        vec![
            b"LOCK.ACQUIRE".to_vec(),
            key.to_vec(),
            owner,
            ttl.as_bytes().to_vec(),
            b"SHARED".to_vec(),
        ]
    });
    pipeline(&mut raw, commands, |reply| matches!(reply, Reply::Int(_)));
}

/// Found in attack round 7.
///
/// Stall / journal: a read lock of 100,000 holders (256-byte owners, a 1 KB key name) that
/// Redis removes on its own: its key expires (a `PEXPIRE` shorter than the leases), then it is
/// evicted (`allkeys-lru`), with `relock.log-max-len` at its documented maximum, 100,000. Neither
/// runs in a command anyone can keep short: they run in Redis's expire and eviction cycles.
/// docs/commands.md: a shared key that Redis removes whole is journaled as at most 1,024 of its
/// holds, whatever the journal's length, so the cycle that removes it stays short.
///
/// Measured when written (debug build, every holder described and journaled): `expire-cycle`
/// 92-196 ms on Redis 7.0, 648 ms on Redis 8.2, 538 ms on Valkey 9.1; `eviction-cycle` 196 ms on
/// Redis 7.0 (43 ms with `relock.log-reasons none`, the describing alone).
///
/// Must hold: `expire-cycle`/`expire-del` and `eviction-cycle`/`eviction-del` under 50 ms; the
/// journal holds 1,024 entries of the key, `expired`, then `evicted`; `relock.log-reasons none`
/// with statistics off describes nothing.
#[test]
fn stall_a_big_shared_key_ending_in_redis_cycles_journals_a_bounded_sample() {
    let n = 100_000;
    let server = Server::with_args(&[
        "--relock.log-max-len",
        "100000",
        "--latency-monitor-threshold",
        "10",
    ]);
    let mut c = server.conn();
    let key = vec![b'k'; 1024];
    fill_readers(&server, &key, n);
    let _: () = cmd!("LATENCY", "RESET").query(&mut c).unwrap();
    let _: i64 = cmd!("PEXPIRE", key.as_slice(), 50).query(&mut c).unwrap();
    assert!(
        eventually(DUE, || info_field(&mut c, "locks") == 0),
        "the key did not expire"
    );
    let expiry = latency_ms(&mut c, "expire-cycle").max(latency_ms(&mut c, "expire-del"));
    assert_eq!(info_field(&mut c, "log_len"), 1024);
    assert!(log_reasons(&mut c, 2000).iter().all(|r| r == "expired"));

    let _: () = cmd!("LOCK.LOG", "RESET").query(&mut c).unwrap();
    fill_readers(&server, &key, n);
    let _: () = cmd!("LATENCY", "RESET").query(&mut c).unwrap();
    let used = used_memory(&mut c);
    config_set(&mut c, "maxmemory-policy", "allkeys-lru");
    config_set(&mut c, "maxmemory", used - 5_000_000);
    let _: redis::RedisResult<()> = cmd!("SET", "x", "y").query(&mut c);
    // An eviction that runs out of its time slice goes on in a timer (Valkey 9 on a busy
    // machine): the limit stays until the key is gone.
    assert!(
        eventually(DUE, || info_field(&mut c, "locks") == 0),
        "the lock was not evicted"
    );
    config_set(&mut c, "maxmemory", 0);
    let eviction = latency_ms(&mut c, "eviction-cycle").max(latency_ms(&mut c, "eviction-del"));
    assert_eq!(info_field(&mut c, "log_len"), 1024);
    assert!(log_reasons(&mut c, 2000).iter().all(|r| r == "evicted"));
    eprintln!("one key of {n} holds removed by Redis: expiry {expiry} ms, eviction {eviction} ms");
    assert!(
        expiry < 50 && eviction < 50,
        "Redis's own cycles removing one key of {n} holds: expiry {expiry} ms, eviction \
         {eviction} ms"
    );

    // Nothing kept of them: nothing described.
    let _: () = cmd!("LOCK.LOG", "RESET").query(&mut c).unwrap();
    config_set(&mut c, "relock.log-reasons", "forcereleased revoked");
    config_set(&mut c, "relock.stats", "no");
    fill_readers(&server, &key, 10);
    let _: i64 = cmd!("DEL", key.as_slice()).query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "log_len"), 0);
}
