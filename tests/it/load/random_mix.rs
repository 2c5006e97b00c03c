//! The invariants of every key hold under a random mix of groups, permits, downgrades, the
//! journal and the statistics.
//!
//! Found in attack round 5. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::raw::{Raw, Reply};
use common::reply::{fields, int, text};
use common::{eventually, info_field, Server};
use redis::{Connection, Value};

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every holder of `key` as (owner, token, count, permits), in the listing's order.
fn holder_rows(c: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64)> {
    let v: Value = cmd!("LOCK.HOLDERS", key, "COUNT", 0).query(c).unwrap();
    let Value::Array(items) = v else {
        return vec![];
    };
    items
        .iter()
        .map(fields)
        .map(|e| {
            (
                text(&e["owner"]),
                int(&e["token"]),
                int(&e["count"]),
                int(&e["permits"]),
            )
        })
        .collect()
}

/// Checks one key's invariants on `c`: the listing agrees with `LOCK.INFO`, an exclusive key
/// has one holder, a semaphore's permits never exceed its limit, tokens ascend. Returns the
/// holders' tokens.
fn check_key(c: &mut Connection, key: &str, step: &str) -> Vec<i64> {
    // In one transaction, though the module's clock runs on inside it: a lease may lapse
    // between two reads, so the listing before `LOCK.INFO` may only be longer than the one
    // after it.
    let (before, v, after): (Value, Value, Value) = redis::pipe()
        .atomic()
        .cmd("LOCK.HOLDERS")
        .arg(key)
        .arg("COUNT")
        .arg(0)
        .cmd("LOCK.INFO")
        .arg(key)
        .cmd("LOCK.HOLDERS")
        .arg(key)
        .arg("COUNT")
        .arg(1000)
        .query(c)
        .unwrap();
    let rows = |v: &Value| -> Vec<(String, i64, i64, i64)> {
        let Value::Array(items) = v else {
            return vec![];
        };
        items
            .iter()
            .map(fields)
            .map(|e| {
                (
                    text(&e["owner"]),
                    int(&e["token"]),
                    int(&e["count"]),
                    int(&e["permits"]),
                )
            })
            .collect()
    };
    let (before, after) = (rows(&before), rows(&after));
    assert!(
        after.iter().all(|r| before.contains(r)),
        "{step}: {key}: a holder appeared between two reads: {before:?} then {after:?}"
    );
    if v == Value::Nil {
        assert!(
            after.is_empty(),
            "{step}: {key}: no lock but holders {after:?}"
        );
        return before.iter().map(|r| r.1).collect();
    }
    let info = fields(&v);
    let mode = text(&info["mode"]);
    let (holders, limit) = (int(&info["holders"]), int(&info["limit"]));
    assert!(
        before.len() as i64 >= holders && holders >= after.len() as i64,
        "{step}: {key}: LOCK.INFO {info:?} but holders {before:?} then {after:?}"
    );
    if mode == "exclusive" {
        assert_eq!(holders, 1, "{step}: {key} {info:?}");
    } else if limit > 0 {
        let used = |rows: &[(String, i64, i64, i64)]| rows.iter().map(|r| r.3).sum::<i64>();
        assert!(
            used(&before) <= limit,
            "{step}: {key} permits {} > limit {limit}: {before:?}",
            used(&before)
        );
        let free = int(&info["permits_free"]);
        assert!(
            limit - used(&before) <= free && free <= limit - used(&after),
            "{step}: {key}: permits_free {free} but holders {before:?} then {after:?}"
        );
    }
    for r in &before {
        assert!(r.2 >= 1, "{step}: {key} count {r:?}");
    }
    let tokens: Vec<i64> = before.iter().map(|r| r.1).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "{step}: {key} holders not in token order {before:?}"
    );
    tokens
}

/// One worker connection of the random mix: whether a `LOCK.WAIT` of it is still blocked.
struct Worker {
    raw: Raw,
    blocked: bool,
}

/// The tokens in a reply: integers above any count or ttl (ttls reach 10^12 ms: a downgraded
/// lock whose TTL was removed keeps a lease of 10^12 ms); tokens are Unix µs, about 1.8 * 10^15.
fn reply_tokens(r: &Reply) -> Vec<i64> {
    match r {
        Reply::Int(t) if *t > 100_000_000_000_000 => vec![*t],
        Reply::Array(items) => items.iter().flat_map(reply_tokens).collect(),
        _ => vec![],
    }
}

/// Found in attack round 5.
///
/// Invariants / random mix: many clients running every command of this round (`PERMITS`,
/// `LOCK.DOWNGRADE`, `LOCK.MACQUIRE`/`MRELEASE`/`MRENEW`, blocked `LOCK.WAIT`s killed with
/// `CLIENT KILL`, short leases, `DEL`, `PEXPIRE`, `PERSIST`, `RENAME`, `DEBUG RELOAD`) on four
/// keys of one slot, with a replica and an AOF. After every step, on the master: an exclusive
/// key has one holder, a semaphore's permits never exceed its limit and `permits_free` agrees,
/// `LOCK.HOLDERS` agrees with `LOCK.INFO` and is in token order, and every token never seen
/// before is above `last_token` as read before the previous step. At the end: the replica's and
/// the reloaded AOF's holders equal the master's, and the server log has no panic.
/// `RELOCK_MIX_SEED` and `RELOCK_MIX_STEPS` change the seed and the length.
#[test]
fn invariants_hold_under_a_random_mix_of_this_rounds_commands() {
    let seed = std::env::var("RELOCK_MIX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    let steps: usize = std::env::var("RELOCK_MIX_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    eprintln!("RELOCK_MIX_SEED={seed} RELOCK_MIX_STEPS={steps}");
    let master = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut c = master.conn();
    let mut rng = Rng(seed);
    let keys = ["{m}k0", "{m}k1", "{m}k2", "{m}k3"];
    let owners = ["o0", "o1", "o2", "o3", "o4"];
    let mut workers: Vec<Worker> = (0..6)
        .map(|_| Worker {
            raw: Raw::connect(&master),
            blocked: false,
        })
        .collect();
    let mut known: std::collections::HashSet<i64> = Default::default();
    let mut last_before = info_field(&mut c, "last_token");
    let check_new =
        |tokens: Vec<i64>, known: &mut std::collections::HashSet<i64>, floor: i64, step: &str| {
            for t in tokens {
                if known.insert(t) {
                    assert!(
                        t > floor,
                        "{step}: new token {t} not above last_token {floor} read before"
                    );
                }
            }
        };
    for step in 0..steps {
        let w = rng.below(workers.len() as u64) as usize;
        if workers[w].blocked {
            if let Some(r) = workers[w].raw.read_within(Duration::from_millis(1)) {
                workers[w].blocked = false;
                check_new(reply_tokens(&r), &mut known, i64::MIN, "late reply");
            } else if rng.below(4) == 0 {
                let id: i64 = {
                    // The worker's id: its own CLIENT ID is blocked, so find it by port.
                    let port = workers[w].raw.stream.local_addr().unwrap().port();
                    let list: String = cmd!("CLIENT", "LIST").query(&mut c).unwrap();
                    list.lines()
                        .find(|l| l.contains(&format!("addr=127.0.0.1:{port} ")))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|f| f.strip_prefix("id="))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(-1)
                };
                let _: redis::RedisResult<i64> = cmd!("CLIENT", "KILL", "ID", id).query(&mut c);
                workers[w] = Worker {
                    raw: Raw::connect(&master),
                    blocked: false,
                };
                continue;
            } else {
                continue;
            }
        }
        let key = keys[rng.below(4) as usize];
        let owner = owners[rng.below(5) as usize];
        let ttl = if rng.below(10) < 6 {
            30 + rng.below(300)
        } else {
            5000
        }
        .to_string();
        let permits = (1 + rng.below(3)).to_string();
        let mode: Vec<&[u8]> = match rng.below(10) {
            0..=3 => vec![],
            4..=6 => vec![b"SHARED"],
            _ => vec![b"SHARED", b"LIMIT", b"3", b"PERMITS", permits.as_bytes()],
        };
        let n = 1 + rng.below(3) as usize;
        let group: Vec<&str> = {
            let start = rng.below(4) as usize;
            (0..n).map(|i| keys[(start + i) % 4]).collect()
        };
        let n_text = n.to_string();
        let timeout = if rng.below(3) == 0 {
            0
        } else {
            20 + rng.below(400)
        }
        .to_string();
        let mut words: Vec<&[u8]> = Vec::new();
        let other = keys[rng.below(4) as usize];
        match rng.below(100) {
            0..=14 => {
                words.extend([
                    &b"LOCK.ACQUIRE"[..],
                    key.as_bytes(),
                    owner.as_bytes(),
                    ttl.as_bytes(),
                ]);
                words.extend(&mode);
            }
            15..=22 => {
                words.extend([
                    &b"LOCK.REENTER"[..],
                    key.as_bytes(),
                    owner.as_bytes(),
                    ttl.as_bytes(),
                ]);
                words.extend(&mode);
            }
            23..=39 => {
                words.extend([
                    &b"LOCK.WAIT"[..],
                    key.as_bytes(),
                    owner.as_bytes(),
                    ttl.as_bytes(),
                    timeout.as_bytes(),
                ]);
                words.extend(&mode);
            }
            40..=51 => words.extend([&b"LOCK.RELEASE"[..], key.as_bytes(), owner.as_bytes()]),
            52..=55 => words.extend([
                &b"LOCK.RENEW"[..],
                key.as_bytes(),
                owner.as_bytes(),
                ttl.as_bytes(),
            ]),
            56..=63 => words.extend([&b"LOCK.DOWNGRADE"[..], key.as_bytes(), owner.as_bytes()]),
            64..=66 => {
                words.extend([&b"LOCK.FORCERELEASE"[..], key.as_bytes()]);
                if rng.below(2) == 0 {
                    words.push(owner.as_bytes());
                }
            }
            67..=74 => {
                words.extend([&b"LOCK.MACQUIRE"[..], n_text.as_bytes()]);
                words.extend(group.iter().map(|k| k.as_bytes()));
                words.extend([owner.as_bytes(), ttl.as_bytes()]);
            }
            75..=81 => {
                words.extend([&b"LOCK.MRELEASE"[..], n_text.as_bytes()]);
                words.extend(group.iter().map(|k| k.as_bytes()));
                words.push(owner.as_bytes());
            }
            82..=85 => {
                words.extend([&b"LOCK.MRENEW"[..], n_text.as_bytes()]);
                words.extend(group.iter().map(|k| k.as_bytes()));
                words.extend([owner.as_bytes(), ttl.as_bytes()]);
            }
            86..=88 => words.extend([&b"DEL"[..], key.as_bytes()]),
            89..=91 => words.extend([&b"PEXPIRE"[..], key.as_bytes(), b"20"]),
            92..=93 => words.extend([&b"PERSIST"[..], key.as_bytes()]),
            94..=96 if other != key => {
                words.extend([&b"RENAME"[..], key.as_bytes(), other.as_bytes()])
            }
            97 => words.extend([&b"DEBUG"[..], b"RELOAD"]),
            _ => words.extend([&b"LOCK.INFO"[..], key.as_bytes()]),
        }
        let what = words
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let label = format!("step {step} ({what})");
        workers[w].raw.send(&words);
        let reply = if words[0] == b"LOCK.WAIT" {
            workers[w].raw.read_within(Duration::from_millis(5))
        } else {
            Some(workers[w].raw.read(Duration::from_secs(30)))
        };
        match reply {
            None => workers[w].blocked = true,
            Some(r) => {
                if let Reply::Error(e) = &r {
                    assert!(!e.contains("panic") && !e.contains("busy"), "{label}: {e}");
                }
                check_new(reply_tokens(&r), &mut known, last_before, &label);
            }
        }
        let now_last = info_field(&mut c, "last_token");
        for k in keys {
            let tokens = check_key(&mut c, k, &label);
            check_new(tokens, &mut known, last_before, &label);
        }
        last_before = now_last;
    }
    drop(workers);
    assert!(
        eventually(Duration::from_secs(30), || info_field(&mut c, "waiters")
            == 0),
        "the waiters left"
    );
    let listing = |c: &mut Connection| -> Vec<Vec<(String, i64, i64, i64)>> {
        keys.iter().map(|k| holder_rows(c, k)).collect()
    };
    let mut r = replica.conn();
    let same = eventually(Duration::from_secs(20), || {
        let _: i64 = cmd!("WAIT", 1, 5000).query(&mut c).unwrap();
        listing(&mut c) == listing(&mut r)
    });
    assert!(
        same,
        "replica differs: master {:?}, replica {:?}",
        listing(&mut c),
        listing(&mut r)
    );
    let same_aof = eventually(Duration::from_secs(20), || {
        let before = listing(&mut c);
        let _: () = cmd!("DEBUG", "LOADAOF").query(&mut c).unwrap();
        listing(&mut c) == before
    });
    assert!(same_aof, "the AOF reloaded differs");
    for (name, server) in [("master", &master), ("replica", &replica)] {
        let log = server.log();
        assert!(
            !log.contains("panic") && !log.contains("ASSERTION") && !log.contains("crashed"),
            "{name} log:\n{log}"
        );
    }
}
