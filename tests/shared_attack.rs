//! Adversarial tests of shared holds: one test per attack class. A test that fails here is a
//! break of the spec ("Shared holds: read-write locks and counting semaphores").
#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::payload::{shared_fields, Field, Format};
use common::raw::{Raw, Reply};
use common::{eventually, info_field, now_ms, Server};
use redis::{Connection, Value};

const LONG: u64 = 100_000;
const DUE: Duration = Duration::from_secs(5);

fn int(c: &mut Connection, cmd: redis::Cmd) -> Option<i64> {
    common::int_or_nil(c, cmd)
}

fn acq(c: &mut Connection, key: &str, owner: &[u8], ttl: u64, words: &[&str]) -> Option<i64> {
    let mut cmd = cmd!("LOCK.ACQUIRE", key, owner, ttl);
    for w in words {
        cmd.arg(*w);
    }
    int(c, cmd)
}

fn waiters(c: &mut Connection, key: &str) -> i64 {
    let v: Value = cmd!("LOCK.INFO", key).query(c).unwrap();
    match v {
        Value::Array(items) => match &items[9] {
            Value::Int(n) => *n,
            other => panic!("waiters: {other:?}"),
        },
        Value::Nil => 0,
        other => panic!("LOCK.INFO: {other:?}"),
    }
}

/// Sends LOCK.WAIT on a new raw connection after learning its client id; waits until queued.
fn queue_wait(
    server: &Server,
    c: &mut Connection,
    key: &str,
    owner: &str,
    words: &[&str],
    n: i64,
) -> (Raw, i64) {
    let mut r = Raw::connect(server);
    r.send(&[b"CLIENT", b"ID"]);
    let id = match r.read(DUE) {
        Reply::Int(i) => i,
        other => panic!("CLIENT ID: {other:?}"),
    };
    let ttl = LONG.to_string();
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
        eventually(DUE, || waiters(c, key) == n),
        "{owner} not queued as #{n}"
    );
    (r, id)
}

/// (owner, token, count) of every live holder, in token order.
fn holders(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64, i64)> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let items = match v {
        Value::Nil => return vec![],
        Value::Array(items) => items,
        other => panic!("LOCK.HOLDERS: {other:?}"),
    };
    items
        .into_iter()
        .map(|e| {
            let Value::Array(f) = e else { panic!("entry") };
            let owner = match &f[1] {
                Value::BulkString(b) => b.clone(),
                o => panic!("owner {o:?}"),
            };
            let num = |v: &Value| match v {
                Value::Int(n) => *n,
                o => panic!("num {o:?}"),
            };
            (owner, num(&f[3]), num(&f[5]))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Mixed queues: revokes
// ---------------------------------------------------------------------------------------------

/// Two connections of one owner wait; the batch grants the first and answers the second as a
/// re-acquire with the same token. The second hangs up before its answer: "a client that
/// disconnects while waiting ... is never granted anything", but the first was granted and told
/// so. Revoking the second must not take the first's hold away.
#[test]
fn a_revoked_reacquire_does_not_end_the_other_connections_hold() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"w", LONG, &[]).unwrap();
    let (mut first, _) = queue_wait(&server, &mut c, "k", "o", &["SHARED"], 1);
    let (_second, second_id) = queue_wait(&server, &mut c, "k", "o", &["SHARED"], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("w")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(second_id);
    let _: Value = p.query(&mut c).unwrap();
    let t1 = match first.read(DUE) {
        Reply::Int(t) => t,
        other => panic!("first: {other:?}"),
    };
    std::thread::sleep(Duration::from_millis(200));
    let now = holders(&mut c, "k");
    assert_eq!(
        now,
        vec![(b"o".to_vec(), t1, 1)],
        "the first connection was granted token {t1} and still believes it holds the key"
    );
}

/// Same with an exclusive head: the granted hold of the first connection is revoked by the
/// disconnect of the second connection of the same owner.
#[test]
fn a_revoked_reacquire_exclusive_baseline() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"w", LONG, &[]).unwrap();
    let (mut first, _) = queue_wait(&server, &mut c, "k", "o", &[], 1);
    let (_second, second_id) = queue_wait(&server, &mut c, "k", "o", &[], 2);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("w")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(second_id);
    let _: Value = p.query(&mut c).unwrap();
    let t1 = match first.read(DUE) {
        Reply::Int(t) => t,
        other => panic!("first: {other:?}"),
    };
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(holders(&mut c, "k"), vec![(b"o".to_vec(), t1, 1)]);
}

// ---------------------------------------------------------------------------------------------
// Mixed queues: limit conflicts brought by RENAME behind an exclusive head
// ---------------------------------------------------------------------------------------------

/// "If RENAME ... brings a value whose mode or limit conflicts with queued waiters, those
/// waiters get the error, as they get WRONGTYPE" (at once, every one of them), not only when
/// they reach the head.
#[test]
fn a_limit_conflict_brought_by_rename_fails_waiters_behind_an_exclusive_head() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"x", LONG, &[]).unwrap();
    let (_e, _) = queue_wait(&server, &mut c, "k", "e", &[], 1);
    let (mut q, _) = queue_wait(&server, &mut c, "k", "q", &["SHARED", "LIMIT", "2"], 2);
    acq(&mut c, "other", b"y", LONG, &["SHARED", "LIMIT", "3"]).unwrap();
    let _: () = cmd!("RENAME", "other", "k").query(&mut c).unwrap();
    let got = q.read_within(Duration::from_secs(1));
    assert_eq!(
        got,
        Some(Reply::Error("ERR lock has another limit (3)".into())),
        "the LIMIT 2 waiter behind the exclusive head"
    );
}

// ---------------------------------------------------------------------------------------------
// Churn against a model
// ---------------------------------------------------------------------------------------------

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Owners of 1 and 256 bytes and binary ones, acquired, re-entered, renewed (earlier and later),
/// released and force-released in random order: LOCK.HOLDERS, LOCK.INFO, the key's TTL and
/// `relock_holds` against a model.
#[test]
fn churn_matches_a_model() {
    let server = Server::start();
    let mut c = server.conn();
    let mut rng = Lcg(7);
    let owner = |i: u64| -> Vec<u8> {
        match i % 4 {
            0 => vec![(i % 251) as u8 + 1],
            1 => {
                let mut v = vec![b'L'; 256];
                v[255] = (i % 256) as u8;
                v[0] = (i / 256) as u8;
                v
            }
            2 => format!("o\r\n\0{i}").into_bytes(),
            _ => (i as u32).to_le_bytes().to_vec(),
        }
    };
    // owner -> (token, count, lease_end)
    let mut model: BTreeMap<Vec<u8>, (i64, i64, i64)> = BTreeMap::new();
    let start = Instant::now();
    for step in 0..6000u32 {
        let o = owner(rng.below(300));
        let ttl = 200_000 + rng.below(400_000);
        let op = rng.below(10);
        let now = now_ms();
        match op {
            0..=3 => {
                let t = acq(&mut c, "k", &o, ttl, &["SHARED"]).expect("shared acquire");
                let e = model.entry(o.clone()).or_insert((t, 1, 0));
                assert_eq!(e.0, t, "step {step}: token of a re-acquire");
                e.2 = now + ttl as i64;
            }
            4 => {
                let n = int(&mut c, cmd!("LOCK.REENTER", "k", &o, ttl, "SHARED")).unwrap();
                let e = model.entry(o.clone()).or_insert((0, 0, 0));
                e.1 += 1;
                e.2 = now + ttl as i64;
                assert_eq!(n, e.1, "step {step}: reenter count");
                if e.0 == 0 {
                    let h = holders(&mut c, "k");
                    e.0 = h.iter().find(|(ow, _, _)| *ow == o).unwrap().1;
                }
            }
            5 | 6 => {
                let got = int(&mut c, cmd!("LOCK.RELEASE", "k", &o));
                let want = match model.get_mut(&o) {
                    None => None,
                    Some(e) => {
                        e.1 -= 1;
                        Some(e.1)
                    }
                };
                if want == Some(0) {
                    model.remove(&o);
                }
                assert_eq!(got, want, "step {step}: release");
            }
            7 | 8 => {
                let got = int(&mut c, cmd!("LOCK.RENEW", "k", &o, ttl));
                let want = model.get_mut(&o).map(|e| {
                    e.2 = now + ttl as i64;
                    e.0
                });
                assert_eq!(got, want, "step {step}: renew");
            }
            _ => {
                let got = int(&mut c, cmd!("LOCK.FORCERELEASE", "k", &o));
                let want = i64::from(model.remove(&o).is_some());
                assert_eq!(got, Some(want), "step {step}: forcerelease owner");
            }
        }
        if step % 500 == 0 || step == 5999 {
            let mut want: Vec<(Vec<u8>, i64, i64)> = model
                .iter()
                .map(|(o, (t, n, _))| (o.clone(), *t, *n))
                .collect();
            want.sort_by_key(|x| x.1);
            assert_eq!(holders(&mut c, "k"), want, "step {step}: holders");
            assert_eq!(
                info_field(&mut c, "holds"),
                model.len() as i64,
                "step {step}: holds"
            );
            if let Some(last) = model.values().map(|e| e.2).max() {
                let pttl: i64 = cmd!("PTTL", "k").query(&mut c).unwrap();
                let want = last - now_ms();
                assert!(
                    (pttl - want).abs() < 2000,
                    "step {step}: pttl {pttl}, latest lease in {want}"
                );
            }
        }
    }
    // Drain to empty and back: tombstones and shrinking.
    for o in model.keys().cloned().collect::<Vec<_>>() {
        assert_eq!(int(&mut c, cmd!("LOCK.FORCERELEASE", "k", &o)), Some(1));
    }
    assert_eq!(int(&mut c, cmd!("EXISTS", "k")), Some(0));
    assert_eq!(info_field(&mut c, "holds"), 0);
    eprintln!("churn took {:?}", start.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Hostile RESTORE payloads and hand-made effects
// ---------------------------------------------------------------------------------------------

#[test]
fn hostile_restore_payloads_and_effects() {
    let server = Server::start();
    let mut c = server.conn();
    let (format, _) = Format::of(&mut c);
    let far = now_ms() + 3_600_000;
    let t = 1u64 << 50;
    let restore = |c: &mut Connection, fields: &[Field]| -> bool {
        let p = format.payload(2, fields);
        let ok = cmd!("RESTORE", "bad", 0, &p, "REPLACE")
            .query::<Value>(c)
            .is_ok();
        let _: i64 = cmd!("DEL", "bad").query(c).unwrap();
        ok
    };
    let mut huge = vec![Field::Uint(1), Field::Uint(0), Field::Uint(99_999_999)];
    huge.extend(common::payload::holder_fields(b"a", t, 1, far));
    assert!(!restore(&mut c, &huge), "a huge count with short data");
    let mut lie = vec![Field::Uint(1), Field::Uint(0), Field::Uint(u64::MAX)];
    lie.extend(common::payload::holder_fields(b"a", t, 1, far));
    assert!(!restore(&mut c, &lie), "u64::MAX holders");
    assert!(
        !restore(&mut c, &shared_fields(0, &[(b"", t, 1, far)])),
        "empty owner"
    );
    assert!(
        !restore(&mut c, &shared_fields(0, &[(&[b'x'; 257], t, 1, far)])),
        "257-byte owner"
    );
    assert!(
        restore(&mut c, &shared_fields(0, &[(&[b'x'; 256], t, 1, far)])),
        "256-byte owner"
    );
    assert!(
        !restore(&mut c, &shared_fields(0, &[(b"a", 1 << 53, 1, far)])),
        "token 2^53"
    );
    assert!(
        !restore(&mut c, &shared_fields(0, &[(b"a", t, 1, -1)])),
        "lease end -1"
    );
    assert!(
        !restore(&mut c, &shared_fields(0, &[(b"a", t, 1, (1 << 62) + 1)])),
        "lease > 2^62"
    );
    assert!(
        !restore(&mut c, &shared_fields(0, &[(b"a", t, 0, far)])),
        "count 0"
    );
    // Lease end at the upper bound, and a lapsed one: both load; TTL capped; nothing odd.
    let p = format.payload(
        2,
        &shared_fields(0, &[(b"a", t, 1, 1 << 62), (b"b", t + 1, 1, 1)]),
    );
    let _: () = cmd!("RESTORE", "edge", 0, &p).query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(holders(&mut c, "edge"), vec![(b"a".to_vec(), t as i64, 1)]);
    assert_eq!(
        int(&mut c, cmd!("LOCK.RENEW", "edge", "b", 1000)),
        None,
        "lapsed b"
    );
    assert_eq!(
        int(&mut c, cmd!("LOCK.RENEW", "edge", "a", 1000)),
        Some(t as i64)
    );
    let pttl: i64 = cmd!("PTTL", "edge").query(&mut c).unwrap();
    assert!(pttl <= 1000 && pttl > 0, "pttl {pttl}");
    // Truncated at every byte of a real DUMP of a 3-holder semaphore.
    for o in ["a", "bb", "ccc"] {
        acq(&mut c, "s", o.as_bytes(), LONG, &["SHARED", "LIMIT", "5"]).unwrap();
    }
    let dump: Vec<u8> = cmd!("DUMP", "s").query(&mut c).unwrap();
    let body = &dump[..dump.len() - 10];
    for cut in 1..body.len() {
        let p = format.seal(body[..cut].to_vec());
        // A cut can leave bytes that parse as a valid shorter value (the RDB version bytes
        // read as the last lease end): acceptable when the result is consistent.
        if cmd!("RESTORE", "cut", 0, &p, "REPLACE")
            .query::<Value>(&mut c)
            .is_ok()
        {
            assert!(holders(&mut c, "cut").len() <= 3, "cut at {cut}");
        }
        let _: i64 = cmd!("DEL", "cut").query(&mut c).unwrap();
    }
    assert_eq!(info_field(&mut c, "holds"), 1 + 3, "edge: a; s: 3");
    // Hand-made effects.
    let err = |c: &mut Connection, cmd: redis::Cmd| cmd.query::<Value>(c).is_err();
    assert!(
        err(&mut c, cmd!("LOCK.APPLY", "s", "z", 5, 1, "SHARED")),
        "missing PXAT"
    );
    assert!(
        err(
            &mut c,
            cmd!(
                "LOCK.APPLY",
                "s",
                "z",
                5,
                1,
                "PXAT",
                far,
                "SHARED",
                "LIMIT",
                4
            )
        ),
        "wrong limit"
    );
    assert!(
        err(
            &mut c,
            cmd!("LOCK.APPLY", "s", "z", 5, 1, "PXAT", far, "SHARED")
        ),
        "no limit on a limited key"
    );
    let _: () = cmd!("SET", "str", "v").query(&mut c).unwrap();
    assert!(
        err(
            &mut c,
            cmd!("LOCK.APPLY", "str", "z", 5, 1, "PXAT", far, "SHARED")
        ),
        "another type"
    );
    assert!(
        err(&mut c, cmd!("LOCK.DROP", "str", "z")),
        "drop on another type"
    );
    let _: Value = cmd!("LOCK.DROP", "s", "nobody").query(&mut c).unwrap();
    acq(&mut c, "x", b"a", LONG, &[]).unwrap();
    let _: Value = cmd!("LOCK.DROP", "x", "a").query(&mut c).unwrap();
    assert_eq!(
        holders(&mut c, "x").len(),
        1,
        "LOCK.DROP leaves an exclusive hold"
    );
    let _: Value = cmd!("LOCK.APPLY", "x", "b", 9, 1, "PXAT", far, "SHARED")
        .query(&mut c)
        .unwrap();
    assert_eq!(holders(&mut c, "x"), vec![(b"b".to_vec(), 9, 1)]);
    let _: Value = cmd!("LOCK.APPLY", "x", "b", 9, 1, "PXAT", 1, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: Value = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    // x's only holder lapsed (lease end 1): gone, whatever prunes it.
    assert!(holders(&mut c, "x").is_empty());
    assert_eq!(int(&mut c, cmd!("LOCK.RENEW", "x", "b", 1000)), None);
    let pong: String = cmd!("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

// ---------------------------------------------------------------------------------------------
// Big keys
// ---------------------------------------------------------------------------------------------

/// 100k holders: single-holder commands stay fast; COPY, DEBUG RELOAD, UNLINK, FLUSHALL ASYNC
/// keep `relock_holds` true; many lapsed leases are pruned at once.
#[test]
fn a_big_key_stays_fast_and_counted() {
    let server = Server::start();
    let mut c = server.conn();
    let fill = "for i=1,tonumber(ARGV[1]) do redis.call('LOCK.ACQUIRE', KEYS[1], 'o'..i, ARGV[2], 'SHARED') end return 1";
    let _: i64 = cmd!("EVAL", fill, 1, "big", 100_000, 600_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(info_field(&mut c, "holds"), 100_000);
    for cmd in [
        cmd!("LOCK.RELEASE", "big", "o5"),
        cmd!("LOCK.RENEW", "big", "o6", 1),
        cmd!("LOCK.FORCERELEASE", "big", "o7"),
        cmd!("LOCK.HOLDERS", "big", "OWNER", "o8"),
        cmd!("LOCK.INFO", "big"),
    ] {
        let t = Instant::now();
        let _: Value = cmd.query(&mut c).unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{} took {:?}",
            common::show(&cmd),
            t.elapsed()
        );
    }
    let _: i64 = cmd!("COPY", "big", "big2").query(&mut c).unwrap();
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(holders(&mut c, "big2").len(), 99_997);
    // (A lease that lapsed meanwhile would be removed by the module, and not counted.)
    let _: i64 = cmd!("LOCK.ACQUIRE", "big", "x", 600_000, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "big2", "x", 600_000, "SHARED")
        .query(&mut c)
        .unwrap();
    assert_eq!(info_field(&mut c, "holds"), 2 * 99_998);
    let _: i64 = cmd!("UNLINK", "big").query(&mut c).unwrap();
    assert!(eventually(DUE, || info_field(&mut c, "holds") == 99_998));
    assert_eq!(holders(&mut c, "big2").len(), 99_998);
    let _: () = cmd!("FLUSHALL", "ASYNC").query(&mut c).unwrap();
    assert!(eventually(DUE, || info_field(&mut c, "holds") == 0));
    // 50k leases lapse together behind one long one; the module removes them by itself, in
    // bounded slices (tests/storms.rs checks the server stays responsive).
    acq(&mut c, "lapse", b"long", 600_000, &["SHARED"]).unwrap();
    let _: i64 = cmd!("EVAL", fill, 1, "lapse", 50_000, 3_000)
        .query(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(3_200));
    assert_eq!(holders(&mut c, "lapse").len(), 1);
    let t = Instant::now();
    acq(&mut c, "lapse", b"y", 60_000, &["SHARED"]).unwrap();
    assert!(
        eventually(DUE, || info_field(&mut c, "holds") == 2),
        "holds {}, lapse has {} holders",
        info_field(&mut c, "holds"),
        holders(&mut c, "lapse").len()
    );
    eprintln!("pruning 50k lapsed leases took {:?}", t.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Server states
// ---------------------------------------------------------------------------------------------

/// Leases lapse while writes are paused, with a writer queued: the hand-off waits for the
/// pause and comes promptly after it.
#[test]
fn a_write_pause_defers_the_hand_off() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"r", 300, &["SHARED"]).unwrap();
    let (mut w, _) = queue_wait(&server, &mut c, "k", "w", &[], 1);
    let _: () = cmd!("CLIENT", "PAUSE", 1000, "WRITE")
        .query(&mut c)
        .unwrap();
    assert!(
        w.read_within(Duration::from_millis(700)).is_none(),
        "granted during the pause"
    );
    let t = match w.read(DUE) {
        Reply::Int(t) => t,
        o => panic!("{o:?}"),
    };
    assert_eq!(holders(&mut c, "k"), vec![(b"w".to_vec(), t, 1)]);
}

/// maxmemory reached: new holders are refused with OOM, releases work, counts stay true.
#[test]
fn oom_refuses_new_holders_and_keeps_counts() {
    let server = Server::start();
    let mut c = server.conn();
    let fill = "for i=1,5000 do redis.call('LOCK.ACQUIRE', KEYS[1], 'o'..i, 600000, 'SHARED') end return 1";
    let _: i64 = cmd!("EVAL", fill, 1, "k").query(&mut c).unwrap();
    let used: String = cmd!("MEMORY", "STATS")
        .query::<Value>(&mut c)
        .map(|_| String::new())
        .unwrap();
    let _ = used;
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 1).query(&mut c).unwrap();
    let r = cmd!("LOCK.ACQUIRE", "k", "new", 1000, "SHARED").query::<Value>(&mut c);
    assert!(r.is_err(), "OOM: {r:?}");
    assert_eq!(int(&mut c, cmd!("LOCK.RELEASE", "k", "o1")), Some(0));
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "holds"), 4999);
    assert_eq!(holders(&mut c, "k").len(), 4999);
}

// ---------------------------------------------------------------------------------------------
// Replication
// ---------------------------------------------------------------------------------------------

/// Churn with reentry, renewals, lapses and force-releases: the replica equals the master after
/// WAIT (LOCK.HOLDERS and DEBUG DIGEST-VALUE).
#[test]
fn a_replica_equals_its_master_after_churn() {
    let master = Server::start();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut rng = Lcg(11);
    for step in 0..1500 {
        let o = format!("o{}", rng.below(60));
        let ttl = if rng.below(5) == 0 { 30 } else { LONG };
        let _: Value = match rng.below(6) {
            0 | 1 => cmd!("LOCK.ACQUIRE", "k", &o, ttl, "SHARED", "LIMIT", 40),
            2 => cmd!("LOCK.REENTER", "k", &o, ttl, "SHARED", "LIMIT", 40),
            3 => cmd!("LOCK.RELEASE", "k", &o),
            4 => cmd!("LOCK.RENEW", "k", &o, ttl),
            _ => cmd!("LOCK.FORCERELEASE", "k", &o),
        }
        .query(&mut m)
        .unwrap_or(Value::Nil);
        if step % 300 == 299 {
            let _: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
            // Let every 30 ms lease lapse on both sides before comparing what they list.
            std::thread::sleep(Duration::from_millis(100));
            if holders(&mut m, "k") != holders(&mut r, "k") {
                eprintln!("REPLICA LOG:\n{}", replica.log());
            }
            assert_eq!(holders(&mut m, "k"), holders(&mut r, "k"), "step {step}");
            let dm: Value = cmd!("DEBUG", "DIGEST-VALUE", "k").query(&mut m).unwrap();
            let dr: Value = cmd!("DEBUG", "DIGEST-VALUE", "k").query(&mut r).unwrap();
            assert_eq!(dm, dr, "digest at step {step}");
        }
    }
}

/// `relock_holds` counts a lapsed lease until the module removes it, which it does by itself
/// from the millisecond after the lapse (no command on the key needed), though the lease is
/// "gone for every command at once".
#[test]
fn holds_counts_lapsed_leases() {
    let server = Server::start();
    let mut c = server.conn();
    acq(&mut c, "k", b"long", LONG, &["SHARED"]).unwrap();
    acq(&mut c, "k", b"short", 50, &["SHARED"]).unwrap();
    assert_eq!(info_field(&mut c, "holds"), 2);
    assert!(
        eventually(DUE, || info_field(&mut c, "holds") == 1),
        "the lapsed lease was not ended without a command"
    );
    assert_eq!(holders(&mut c, "k").len(), 1);
    assert_eq!(info_field(&mut c, "expired_total"), 1);
}
