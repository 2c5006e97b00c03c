//! A group of 256 keys, half held already.
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
use common::{attach_replica, info_field, Server};
use redis::Value;

const LONG: i64 = 600_000;

/// Found in attack round 7.
///
/// Groups / `LOCK.MACQUIRE` of 256 keys (the most) with a replica: 128 of them held already by the
/// same owner with a reentrancy count of 3, the other 128 free. docs: "A key the owner holds
/// already counts as granted: it gets the new lease and keeps its own token"; the new holds share
/// one new token above every token before; `LOCK.MRELEASE` takes one count off each;
/// `LOCK.MRENEW` replies how many the owner holds.
///
/// Must hold: the reply has 256 tokens in argument order (the held keys' own, then one new
/// token, greater than all); the counts stay 3; the replica has the same keyspace after `WAIT`;
/// `LOCK.MRELEASE` answers 256 and leaves the 128 held keys at count 2; `LOCK.MRENEW` then
/// answers 128; 257 keys are refused.
#[test]
fn groups_of_256_keys_half_held() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let keys: Vec<String> = (0..256).map(|i| format!("{{grp}}{i:03}")).collect();
    let mut held = Vec::new();
    for k in keys.iter().step_by(2) {
        for _ in 0..3 {
            let _: i64 = cmd!("LOCK.REENTER", k, "o", LONG).query(&mut m).unwrap();
        }
        held.push(holders(&mut m, k)[0].1);
    }
    let before = info_field(&mut m, "last_token");
    let tokens: Vec<i64> = cmd!("LOCK.MACQUIRE", 256, &keys, "o", LONG)
        .query(&mut m)
        .unwrap();
    assert_eq!(tokens.len(), 256);
    let fresh = tokens[1];
    assert!(
        fresh > before,
        "the group's token {fresh} not above {before}"
    );
    for (i, t) in tokens.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(*t, held[i / 2], "key {i} held already keeps its token");
            assert_eq!(mode_of(&mut m, &keys[i]).unwrap().1, 3);
        } else {
            assert_eq!(*t, fresh, "key {i}: one token for the new holds");
        }
    }
    wait_replica(&mut m);
    assert_eq!(digest(&mut m), digest(&mut r));
    let released: i64 = cmd!("LOCK.MRELEASE", 256, &keys, "o")
        .query(&mut m)
        .unwrap();
    assert_eq!(released, 256);
    assert_eq!(mode_of(&mut m, &keys[0]).unwrap().1, 2);
    assert_eq!(mode_of(&mut m, &keys[1]), None);
    let renewed: i64 = cmd!("LOCK.MRENEW", 256, &keys, "o", LONG)
        .query(&mut m)
        .unwrap();
    assert_eq!(renewed, 128);
    let mut more = keys.clone();
    more.push("{grp}x".into());
    let refused: redis::RedisResult<Value> =
        cmd!("LOCK.MACQUIRE", 257, &more, "o", LONG).query(&mut m);
    assert!(refused.is_err());
    wait_replica(&mut m);
    assert_eq!(digest(&mut m), digest(&mut r));
}
