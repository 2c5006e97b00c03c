//! Mixed queues: limit conflicts brought by `RENAME`, churn against a model, and the holds
//! count with lapsed leases.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::acq;
use common::ask::owner_token_count as holders;
use common::int_or_nil as int;
use common::raw::queue_wait;
use common::raw::Reply;
use common::{eventually, info_field, now_ms, Server};

const LONG: u64 = 100_000;

const DUE: Duration = Duration::from_secs(5);

/// Found in the attack on shared holds (one test per attack class).
///
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

/// Found in the attack on shared holds (one test per attack class).
///
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

/// Found in the attack on shared holds (one test per attack class).
///
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
