//! A replica equals its master after churn of shared holds.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::owner_token_count as holders;
use common::Server;
use redis::Value;
use relock_testkit::wait_out_ttl;

const LONG: u64 = 100_000;

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
            wait_out_ttl(Duration::from_millis(100));
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
