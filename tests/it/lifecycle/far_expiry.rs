//! A lock whose key expires past 2^62 ms: its effects reach the replica and the AOF.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use common::ask::digest;
use common::ask::mode_of;
use common::ask::named_token_count_permits as holders;
use common::wait_replica;
use common::{acquire, attach_replica, Server};

/// A Unix time in ms past 2^62: Redis takes it for `PEXPIREAT` (its bound is `LLONG_MAX`),
/// `LOCK.APPLY ... PXAT` refuses it (`ERR invalid expiry` above 2^62).
const FAR: i64 = i64::MAX - 1;

/// Found in attack round 7.
///
/// Extreme integers / effects: a user sets an exclusive lock's key to expire past 2^62 ms
/// (`PEXPIREAT key 9223372036854775806`, which Redis accepts: its bound is `LLONG_MAX`), then
/// the owner (1) downgrades it, (2) releases one level of a reentrant hold. Both effects carry
/// the key's expiry as read (`LOCK.APPLY ... PXAT 9223372036854775806`), which `LOCK.APPLY`
/// refuses (`ERR invalid expiry`, bound 2^62): the replica logs `== CRITICAL == This replica is
/// sending an error to its master` and keeps the old hold, and an AOF replays the same refusal.
///
/// Must hold: after `WAIT`, the replica and the AOF (`DEBUG LOADAOF`) have what the master has
/// (`DEBUG DIGEST`, `LOCK.INFO`); a hold a replica acknowledged survives a failover.
///
/// Measured (Redis 7.0; the effect is the module's on every server): the master's key is shared
/// (or count 1), the replica's and the reloaded AOF's stay exclusive (count 2). A reader granted
/// next on the master reaches the replica as the key's only holder: the downgraded owner's hold,
/// acknowledged by `WAIT 1`, is gone there, so after a failover a writer gets the key while the
/// owner still holds it shared.
#[test]
fn far_expiry_effects_reach_the_replica_and_the_aof() {
    let master = Server::with_args(&["--appendonly", "yes"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut failures = Vec::new();

    // (1) A downgrade, then a reader joins.
    let token = acquire(&mut m, "down", "owner", 10_000);
    let _: i64 = cmd!("PEXPIREAT", "down", FAR).query(&mut m).unwrap();
    let down: Option<i64> = cmd!("LOCK.DOWNGRADE", "down", "owner")
        .query(&mut m)
        .unwrap();
    assert_eq!(down, Some(token));
    let _: i64 = cmd!("LOCK.ACQUIRE", "down", "reader", 60_000, "SHARED")
        .query(&mut m)
        .unwrap();
    wait_replica(&mut m);
    let on_master = holders(&mut m, "down");
    let on_replica = holders(&mut r, "down");
    if on_master != on_replica {
        failures.push(format!(
            "downgrade: master holders {on_master:?}, replica holders {on_replica:?}"
        ));
    }

    // (2) A partial release of a reentrant hold.
    let _: i64 = cmd!("LOCK.REENTER", "re", "owner", 10_000)
        .query(&mut m)
        .unwrap();
    let _: i64 = cmd!("LOCK.REENTER", "re", "owner", 10_000)
        .query(&mut m)
        .unwrap();
    let _: i64 = cmd!("PEXPIREAT", "re", FAR).query(&mut m).unwrap();
    let left: i64 = cmd!("LOCK.RELEASE", "re", "owner").query(&mut m).unwrap();
    assert_eq!(left, 1);
    wait_replica(&mut m);
    let (on_master, on_replica) = (mode_of(&mut m, "re"), mode_of(&mut r, "re"));
    if on_master != on_replica {
        failures.push(format!(
            "partial release: master {on_master:?}, replica {on_replica:?} (mode, count, holders)"
        ));
    }

    let (dm, dr) = (digest(&mut m), digest(&mut r));
    if dm != dr {
        failures.push(format!("DEBUG DIGEST master {dm}, replica {dr}"));
    }
    // The master's own AOF, replayed.
    let _: () = cmd!("DEBUG", "LOADAOF").query(&mut m).unwrap();
    let reloaded = digest(&mut m);
    if reloaded != dm {
        failures.push(format!(
            "the master's AOF replays to {reloaded}, not {dm}: down {:?}, re {:?}",
            mode_of(&mut m, "down"),
            mode_of(&mut m, "re")
        ));
    }
    if replica.log().contains("sending an error to its master") {
        failures.push("the replica refused a command of its master's stream".into());
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
