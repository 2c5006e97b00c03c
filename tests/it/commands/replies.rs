//! Every reply and every error of the LOCK.* commands, checked against a real server, as
//! docs/commands.md states them. LOCK.WAIT's blocking behaviour lives in `wait.rs`; here it is
//! only checked for argument errors.
use relock_testkit as common;
use relock_testkit::cmd;

use std::thread;
use std::time::Duration;

use common::ask::{exists, pttl};
use common::reply::error_reply;
use common::{
    decode_lock_info as decode_info, int_or_nil, lock_info as info, now_ms, show, LockInfo as Info,
    Server,
};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

/// Runs a command that must reply an integer; panics with the command on anything else.
fn query_int(c: &mut Connection, cmd: redis::Cmd) -> i64 {
    cmd.query(c)
        .unwrap_or_else(|e| panic!("{} failed: {e}", show(&cmd)))
}

/// `LOCK.INFO key` of the exclusive lock that must be there.
fn held_lock(c: &mut Connection, key: impl redis::ToRedisArgs) -> Info {
    info(c, key).expect("a lock at the key")
}

/// The key's Redis TTL and the lock's own ttl are one and the same: LOCK.INFO's ttl lies
/// between a PTTL read before it and one read after it (a few ms for the two clocks'
/// rounding). Comparing it with one PTTL read after it failed on a loaded machine, where the
/// two replies came 22-31 ms apart.
fn assert_ttl_matches(c: &mut Connection, key: &[u8]) {
    let before = pttl(c, key);
    let i = held_lock(c, key);
    let after = pttl(c, key);
    assert!(
        after - 5 <= i.ttl && i.ttl <= before + 5,
        "LOCK.INFO ttl {} not between PTTL {before} (before) and {after} (after) for {key:?}",
        i.ttl
    );
}

const ARITY: &str = "ERR wrong number of arguments";

#[test]
fn acquire_free_key_grants_a_new_hold() {
    let server = Server::start();
    let mut c = server.conn();
    let before = now_ms();
    let token = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000)).expect("token");
    assert!((1..1 << 53).contains(&token), "token {token} out of range");
    // Tokens are floored by the wall clock (now_ms * 1000).
    assert!(
        token >= before * 1000,
        "token {token} below the clock floor"
    );
    let i = held_lock(&mut c, "k");
    assert_eq!(i.owner, b"o");
    assert_eq!(i.token, token);
    assert_eq!(i.count, 1);
    assert_eq!(i.waiters, 0);
    assert!(i.ttl > 9_000 && i.ttl <= 10_000, "ttl {}", i.ttl);
    assert_ttl_matches(&mut c, b"k");
    let kind: String = cmd!("TYPE", "k").query(&mut c).unwrap();
    assert_eq!(kind, "relock-lk");
}

#[test]
fn acquire_by_holder_is_idempotent_and_resets_ttl() {
    let server = Server::start();
    let mut c = server.conn();
    let token = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 1_000)).unwrap();
    wait_out_ttl(Duration::from_millis(300));
    let low = pttl(&mut c, "k");
    assert!(
        low > 0 && low <= 750,
        "PTTL {low} after 300 ms of a 1000 ms lock"
    );
    let again = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000));
    assert_eq!(again, Some(token), "re-acquire keeps the token");
    let high = pttl(&mut c, "k");
    assert!(high > 9_000 && high <= 10_000, "PTTL {high} after reset");
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count), (token, 1));
    assert_ttl_matches(&mut c, b"k");

    // Re-acquiring a re-entered hold keeps the count as well.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 10_000)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 5_000)),
        Some(token)
    );
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count), (token, 2));
    assert!(i.ttl > 4_000 && i.ttl <= 5_000, "ttl {}", i.ttl);
}

#[test]
fn acquire_by_another_owner_gets_nil_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let token = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 2_000)).unwrap();
    wait_out_ttl(Duration::from_millis(200));
    let before = held_lock(&mut c, "k");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", 60_000)),
        None
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "x", 60_000)),
        None
    );
    let after = held_lock(&mut c, "k");
    assert_eq!(after.owner, b"o");
    assert_eq!((after.token, after.count), (token, 1));
    assert!(
        after.ttl <= before.ttl,
        "ttl must not be reset by another owner"
    );
    assert!(after.ttl < 1_900, "ttl {}", after.ttl);
}

#[test]
fn tokens_strictly_increase_across_keys_and_releases() {
    let server = Server::start();
    let mut c = server.conn();
    let mut last = 0;
    for key in ["a", "b", "c"] {
        let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", key, "o", 10_000)).unwrap();
        assert!(t > last, "token {t} after {last}");
        last = t;
    }
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "a", "o")), Some(0));
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "a", "o", 10_000)).unwrap();
    assert!(t > last, "re-acquire after release: {t} after {last}");
    last = t;
    assert_eq!(query_int(&mut c, cmd!("DEL", "a")), 1);
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "a", "p", 10_000)).unwrap();
    assert!(t > last, "acquire after DEL: {t} after {last}");
    last = t;
    // A reentrant acquire of a free key is a new hold too.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "d", "o", 10_000)),
        Some(1)
    );
    assert!(held_lock(&mut c, "d").token > last);
}

#[test]
fn reenter_counts_up_and_release_counts_down() {
    let server = Server::start();
    let mut c = server.conn();
    for n in 1..=3 {
        assert_eq!(
            int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 10_000)),
            Some(n)
        );
    }
    let i = held_lock(&mut c, "k");
    assert_eq!((i.owner.as_slice(), i.count), (&b"o"[..], 3));
    let token = i.token;
    for n in [2, 1] {
        assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(n));
        let i = held_lock(&mut c, "k");
        assert_eq!(
            (i.token, i.count),
            (token, n),
            "token kept while re-entered"
        );
        assert_ttl_matches(&mut c, b"k");
    }
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(0));
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), None);
}

#[test]
fn reenter_resets_ttl_and_keeps_token() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 1_000)),
        Some(1)
    );
    let token = held_lock(&mut c, "k").token;
    wait_out_ttl(Duration::from_millis(300));
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 20_000)),
        Some(2)
    );
    let i = held_lock(&mut c, "k");
    assert_eq!(i.token, token);
    assert!(i.ttl > 19_000 && i.ttl <= 20_000, "ttl {}", i.ttl);
    assert_ttl_matches(&mut c, b"k");
    // A hold taken with ACQUIRE can be re-entered by its owner.
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "j", "o", 10_000)).unwrap();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "j", "o", 10_000)),
        Some(2)
    );
    assert_eq!(held_lock(&mut c, "j").token, t);
}

/// `owner` takes `key` and enters it again: count 1, then 2.
fn enter_twice(c: &mut Connection, key: &str, owner: &str) {
    assert_eq!(
        int_or_nil(c, cmd!("LOCK.REENTER", key, owner, 10_000)),
        Some(1)
    );
    assert_eq!(
        int_or_nil(c, cmd!("LOCK.REENTER", key, owner, 10_000)),
        Some(2)
    );
}

#[test]
fn release_by_non_owner_is_nil_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    enter_twice(&mut c, "k", "o");
    let before = held_lock(&mut c, "k");
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "x")), None);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "O")), None);
    let after = held_lock(&mut c, "k");
    assert_eq!(after.owner, before.owner);
    assert_eq!((after.token, after.count), (before.token, 2));
    // Never held.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "nokey", "o")), None);
    assert_eq!(exists(&mut c, "nokey"), 0);
    // Expired.
    int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "short", "o", 50)).unwrap();
    wait_out_ttl(Duration::from_millis(150));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "short", "o")), None);
    assert_eq!(exists(&mut c, "short"), 0);
}

#[test]
fn renew_sets_ttl_shorter_or_longer() {
    let server = Server::start();
    let mut c = server.conn();
    let token = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000)).unwrap();
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 60_000)),
        Some(token)
    );
    let p = pttl(&mut c, "k");
    assert!(p > 59_000 && p <= 60_000, "PTTL {p} after renew to 60 s");
    assert_ttl_matches(&mut c, b"k");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 2_000)),
        Some(token)
    );
    let p = pttl(&mut c, "k");
    assert!(p > 1_000 && p <= 2_000, "PTTL {p} after renew to 2 s");
    assert_ttl_matches(&mut c, b"k");
    assert_eq!(held_lock(&mut c, "k").count, 1);

    // A renew keeps a re-entered count.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 10_000)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 30_000)),
        Some(token)
    );
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count), (token, 2));

    // Anyone else: nil, nothing changes.
    let before = pttl(&mut c, "k");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "x", 90_000)),
        None
    );
    let after = pttl(&mut c, "k");
    assert!(
        after <= before && after > 25_000,
        "PTTL {before} -> {after}"
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "nokey", "o", 1_000)),
        None
    );
    assert_eq!(exists(&mut c, "nokey"), 0);
}

#[test]
fn renew_never_revives_an_expired_lock() {
    let server = Server::start();
    let mut c = server.conn();
    int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 50)).unwrap();
    wait_out_ttl(Duration::from_millis(150));
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 10_000)),
        None
    );
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(pttl(&mut c, "k"), -2);
}

#[test]
fn forcerelease_removes_any_hold_once() {
    let server = Server::start();
    let mut c = server.conn();
    enter_twice(&mut c, "k", "o");
    let old = held_lock(&mut c, "k").token;
    assert_eq!(query_int(&mut c, cmd!("LOCK.FORCERELEASE", "k")), 1);
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(query_int(&mut c, cmd!("LOCK.FORCERELEASE", "k")), 0);
    assert_eq!(query_int(&mut c, cmd!("LOCK.FORCERELEASE", "never")), 0);
    // The former holder no longer holds it; a new owner gets a new token.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), None);
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", 10_000)).unwrap();
    assert!(t > old);
}

#[test]
fn info_is_a_map_in_resp2_and_resp3() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(info(&mut c, "k"), None);
    let token = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "me", 30_000)).unwrap();

    // RESP2: the exact flat array.
    let raw: Value = cmd!("LOCK.INFO", "k").query(&mut c).unwrap();
    let Value::Array(items) = raw else {
        panic!("RESP2 LOCK.INFO: {raw:?}")
    };
    // Nine fields since permits: the five of old, then mode, holders, limit, permits_free.
    assert_eq!(items.len(), 18);
    assert_eq!(items[10], Value::BulkString(b"mode".to_vec()));
    assert_eq!(items[11], Value::BulkString(b"exclusive".to_vec()));
    assert_eq!(items[12], Value::BulkString(b"holders".to_vec()));
    assert_eq!(items[13], Value::Int(1));
    assert_eq!(items[14], Value::BulkString(b"limit".to_vec()));
    assert_eq!(items[15], Value::Int(1));
    assert_eq!(items[0], Value::BulkString(b"owner".to_vec()));
    assert_eq!(items[1], Value::BulkString(b"me".to_vec()));
    assert_eq!(items[2], Value::BulkString(b"token".to_vec()));
    assert_eq!(items[3], Value::Int(token));
    assert_eq!(items[4], Value::BulkString(b"count".to_vec()));
    assert_eq!(items[5], Value::Int(1));
    assert_eq!(items[6], Value::BulkString(b"ttl".to_vec()));
    assert!(matches!(items[7], Value::Int(t) if t > 29_000 && t <= 30_000));
    assert_eq!(items[8], Value::BulkString(b"waiters".to_vec()));
    assert_eq!(items[9], Value::Int(0));

    // RESP3: a native map with the same fields in the same order.
    let mut c3 = server.conn_resp3();
    let raw: Value = cmd!("LOCK.INFO", "k").query(&mut c3).unwrap();
    let Value::Map(pairs) = raw else {
        panic!("RESP3 LOCK.INFO is not a map: {raw:?}")
    };
    let i = decode_info(pairs);
    assert_eq!(i.owner, b"me");
    assert_eq!((i.token, i.count, i.waiters), (token, 1, 0));
    let raw: Value = cmd!("LOCK.INFO", "nokey").query(&mut c3).unwrap();
    assert_eq!(raw, Value::Nil);

    // No TTL on the key: ttl is -1.
    assert_eq!(query_int(&mut c, cmd!("PERSIST", "k")), 1);
    assert_eq!(held_lock(&mut c, "k").ttl, -1);
    assert_eq!(pttl(&mut c, "k"), -1);
}

#[test]
fn reentrancy_limit_is_an_error_and_keeps_the_count() {
    let server = Server::start();
    let mut c = server.conn();
    let at = now_ms() + 60_000;
    let ok: String = cmd!("LOCK.APPLY", "k", "owner", 1, 4_294_967_295u64, "PXAT", at)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count), (1, 4_294_967_295));
    assert_eq!(
        error_reply(&mut c, cmd!("LOCK.REENTER", "k", "owner", 1000)),
        "ERR reentrancy limit reached"
    );
    let after = held_lock(&mut c, "k");
    assert_eq!((after.token, after.count), (1, 4_294_967_295));
    assert!(after.ttl > 55_000, "ttl {} must not be reset", after.ttl);
    // The hold can still be released one step.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "owner")),
        Some(4_294_967_294)
    );
}

#[test]
fn pttl_always_equals_info_ttl() {
    let server = Server::start();
    let mut c = server.conn();
    int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 5_000)).unwrap();
    assert_ttl_matches(&mut c, b"k");
    int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 40_000)).unwrap();
    assert_ttl_matches(&mut c, b"k");
    int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 1_000)).unwrap();
    assert_ttl_matches(&mut c, b"k");
    int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 700_000)).unwrap();
    assert_ttl_matches(&mut c, b"k");
    int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")).unwrap();
    assert_ttl_matches(&mut c, b"k");
    // The largest ttl is kept exactly too.
    int_or_nil(
        &mut c,
        cmd!("LOCK.ACQUIRE", "big", "o", 1_000_000_000_000i64),
    )
    .unwrap();
    assert_ttl_matches(&mut c, b"big");
    assert!(pttl(&mut c, "big") > 999_999_990_000);
    // A PEXPIRE on the key is the lock's ttl as well.
    assert_eq!(query_int(&mut c, cmd!("PEXPIRE", "k", 3_000)), 1);
    let i = held_lock(&mut c, "k");
    assert!(i.ttl > 2_900 && i.ttl <= 3_000, "ttl {}", i.ttl);
}

#[test]
fn keys_and_owners_are_binary_safe() {
    let server = Server::start();
    let mut c = server.conn();
    let key: &[u8] = b"k\x00\xff\r\nkey";
    let owner: &[u8] = b"\x00o\xff\r\n\x00";
    let near: &[u8] = b"\x00o\xff\r\n"; // a prefix of owner
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", key, owner, 10_000)).unwrap();
    let i = held_lock(&mut c, key);
    assert_eq!(i.owner, owner);
    assert_eq!(i.token, t);
    assert_ttl_matches(&mut c, key);
    assert_eq!(exists(&mut c, key), 1);
    assert_eq!(
        exists(&mut c, b"k"),
        0,
        "the key is not cut at the NUL byte"
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", key, near, 10_000)),
        None
    );
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", key, near)), None);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", key, near, 10_000)),
        None
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", key, owner, 10_000)),
        Some(t)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", key, owner, 10_000)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", key, owner, 20_000)),
        Some(t)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", key, owner)),
        Some(1)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", key, owner)),
        Some(0)
    );
    assert_eq!(exists(&mut c, key), 0);
    // Owner of only 0xff bytes.
    let ff = [0xffu8; 3];
    int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", &ff[..], &ff[..], 10_000)).unwrap();
    assert_eq!(held_lock(&mut c, &ff[..]).owner, ff);
}

#[test]
fn owner_length_is_checked() {
    let server = Server::start();
    let mut c = server.conn();
    let max = vec![b'a'; 256];
    let long = vec![b'a'; 257];
    let empty: &[u8] = b"";
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", &max, 10_000)).unwrap();
    assert_eq!(held_lock(&mut c, "k").owner, max);
    // A 257-byte owner whose first 256 bytes match the holder must not be taken for it.
    for bad in [&long[..], empty] {
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.ACQUIRE", "k", bad, 10_000)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.REENTER", "k", bad, 10_000)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.RENEW", "k", bad, 10_000)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.RELEASE", "k", bad)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.WAIT", "k", bad, 10_000, 100)),
            "ERR invalid owner"
        );
        // On a free key nothing gets created either.
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.ACQUIRE", "free", bad, 10_000)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.REENTER", "free", bad, 10_000)),
            "ERR invalid owner"
        );
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.WAIT", "free", bad, 10_000, 0)),
            "ERR invalid owner"
        );
        assert_eq!(exists(&mut c, "free"), 0);
    }
    let i = held_lock(&mut c, "k");
    assert_eq!((i.owner, i.token, i.count), (max.clone(), t, 1));
    // The 256-byte owner works with every command.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", &max, 10_000)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", &max, 10_000)),
        Some(t)
    );
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", &max)), Some(1));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", &max)), Some(0));
    assert!(int_or_nil(&mut c, cmd!("LOCK.WAIT", "w", &max, 10_000, 0)).is_some());
    // A one-byte owner is the shortest valid one.
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "one", "x", 10_000)).is_some());
}

const BAD_TTLS: [&str; 11] = [
    "0",
    "-1",
    "-100",
    "abc",
    "1.5",
    "+5",
    "01",
    "",
    " 5",
    "1000000000001",
    "99999999999999999999999",
];

#[test]
fn ttl_ms_is_checked() {
    let server = Server::start();
    let mut c = server.conn();
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000)).unwrap();
    for bad in BAD_TTLS {
        for (name, key) in [("LOCK.ACQUIRE", "k"), ("LOCK.ACQUIRE", "free")] {
            assert_eq!(
                error_reply(&mut c, cmd!(name, key, "o", bad)),
                "ERR invalid ttl_ms",
                "{name} {key} o {bad:?}"
            );
        }
        for key in ["k", "free"] {
            assert_eq!(
                error_reply(&mut c, cmd!("LOCK.REENTER", key, "o", bad)),
                "ERR invalid ttl_ms",
                "LOCK.REENTER {key} o {bad:?}"
            );
            assert_eq!(
                error_reply(&mut c, cmd!("LOCK.RENEW", key, "o", bad)),
                "ERR invalid ttl_ms",
                "LOCK.RENEW {key} o {bad:?}"
            );
            assert_eq!(
                error_reply(&mut c, cmd!("LOCK.WAIT", key, "o", bad, 100)),
                "ERR invalid ttl_ms",
                "LOCK.WAIT {key} o {bad:?} 100"
            );
        }
    }
    // Nothing changed.
    assert_eq!(exists(&mut c, "free"), 0);
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count), (t, 1));
    assert!(i.ttl > 5_000 && i.ttl <= 10_000, "ttl {}", i.ttl);
    // The bounds themselves are valid.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 1_000_000_000_000i64)),
        Some(t)
    );
    assert!(pttl(&mut c, "k") > 999_999_990_000);
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "one", "o", 1)).is_some());
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "max", "o", "1000000000000")).is_some());
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "max2", "o", "1000000000000")),
        Some(1)
    );
}

#[test]
fn wait_timeout_ms_is_checked() {
    let server = Server::start();
    let mut c = server.conn();
    for bad in ["-1", "abc", "1000000000001", "1.5", "+5", "01", ""] {
        assert_eq!(
            error_reply(&mut c, cmd!("LOCK.WAIT", "k", "o", 1_000, bad)),
            "ERR invalid timeout_ms",
            "LOCK.WAIT k o 1000 {bad:?}"
        );
    }
    assert_eq!(exists(&mut c, "k"), 0);
    // 0 (no limit) and 10^12 are valid; the key is free so both reply at once.
    let a = int_or_nil(&mut c, cmd!("LOCK.WAIT", "k", "o", 10_000, 0)).expect("token");
    let i = held_lock(&mut c, "k");
    assert_eq!((i.owner.as_slice(), i.token), (&b"o"[..], a));
    let b = int_or_nil(
        &mut c,
        cmd!("LOCK.WAIT", "k2", "o", 10_000, "1000000000000"),
    )
    .expect("token");
    assert!(b > a);
}

#[test]
fn every_command_gives_wrongtype_on_a_string_and_leaves_it_alone() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("SET", "s", "value", "PX", 100_000)
        .query(&mut c)
        .unwrap();
    let cmds = [
        cmd!("LOCK.ACQUIRE", "s", "o", 1_000),
        cmd!("LOCK.REENTER", "s", "o", 1_000),
        cmd!("LOCK.RELEASE", "s", "o"),
        cmd!("LOCK.RENEW", "s", "o", 1_000),
        cmd!("LOCK.INFO", "s"),
        cmd!("LOCK.FORCERELEASE", "s"),
        cmd!("LOCK.WAIT", "s", "o", 1_000, 100),
    ];
    for cmd in cmds {
        let e = error_reply(&mut c, cmd.clone());
        assert!(e.starts_with("WRONGTYPE"), "{} replied {e}", show(&cmd));
        let v: String = cmd!("GET", "s").query(&mut c).unwrap();
        assert_eq!(v, "value", "after {}", show(&cmd));
        let p = pttl(&mut c, "s");
        assert!(p > 90_000 && p <= 100_000, "PTTL {p} after {}", show(&cmd));
    }
    let kind: String = cmd!("TYPE", "s").query(&mut c).unwrap();
    assert_eq!(kind, "string");
    // And another type without a TTL.
    let _: i64 = cmd!("LPUSH", "l", "x").query(&mut c).unwrap();
    let e = error_reply(&mut c, cmd!("LOCK.ACQUIRE", "l", "o", 1_000));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(pttl(&mut c, "l"), -1);
}

/// Arguments are checked before the key is looked at: a bad argument on a key of another type
/// is an argument error, not WRONGTYPE (and the key is untouched either way).
#[test]
fn arguments_are_checked_before_the_key() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("SET", "s", "value").query(&mut c).unwrap();
    let cases = [
        (cmd!("LOCK.ACQUIRE", "s", "o", 0), "ERR invalid ttl_ms"),
        (cmd!("LOCK.REENTER", "s", "", 1000), "ERR invalid owner"),
        (cmd!("LOCK.RELEASE", "s", ""), "ERR invalid owner"),
        (cmd!("LOCK.RENEW", "s", "o", "x"), "ERR invalid ttl_ms"),
        (
            cmd!("LOCK.WAIT", "s", "o", 1000, -1),
            "ERR invalid timeout_ms",
        ),
        (cmd!("LOCK.APPLY", "s", "o", 0, 1), "ERR invalid token"),
    ];
    for (command, expected) in cases {
        let e = error_reply(&mut c, command.clone());
        assert_eq!(e, expected, "{}", show(&command));
    }
    let v: String = cmd!("GET", "s").query(&mut c).unwrap();
    assert_eq!(v, "value");
}

/// `LOCK.COUNTER token` raises the token counter (never lowers it): the next token is above it.
#[test]
fn counter_raises_the_token_counter_only() {
    let server = Server::start();
    let mut c = server.conn();
    let seed: i64 = 1 << 52;
    let _: () = cmd!("LOCK.COUNTER", seed).query(&mut c).unwrap();
    let t = query_int(&mut c, cmd!("LOCK.ACQUIRE", "a", "o", 1000));
    assert_eq!(t, seed + 1);
    let _: () = cmd!("LOCK.COUNTER", 5).query(&mut c).unwrap();
    let u = query_int(&mut c, cmd!("LOCK.ACQUIRE", "b", "o", 1000));
    assert_eq!(u, seed + 2, "a lower counter is ignored");
    for bad in ["0", "-1", "x", "9007199254740992"] {
        let e = error_reply(&mut c, cmd!("LOCK.COUNTER", bad));
        assert_eq!(e, "ERR invalid token", "LOCK.COUNTER {bad}");
    }
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.ACQUIRE", "c", "o", 1000)),
        seed + 3
    );
}

#[test]
fn wrong_arity_is_the_standard_error() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        cmd!("LOCK.ACQUIRE"),
        cmd!("LOCK.ACQUIRE", "k"),
        cmd!("LOCK.ACQUIRE", "k", "o"),
        cmd!("LOCK.REENTER", "k", "o"),
        cmd!("LOCK.RELEASE", "k"),
        cmd!("LOCK.RENEW", "k", "o"),
        cmd!("LOCK.RENEW", "k", "o", 100, 1),
        cmd!("LOCK.WAIT", "k", "o", 100),
        cmd!("LOCK.INFO"),
        cmd!("LOCK.INFO", "k", "x"),
        cmd!("LOCK.FORCERELEASE"),
        cmd!("LOCK.FORCERELEASE", "k", "x", "y"),
    ];
    for cmd in cases {
        let e = error_reply(&mut c, cmd.clone());
        assert!(e.starts_with(ARITY), "{} replied {e}", show(&cmd));
    }
    // Since shared holds the acquiring commands take optional mode words (arity -4/-5), so a
    // word past the fixed arguments that is not a mode is a syntax error, not an arity error;
    // so is one that is not `FROM c` after a release's owner (arity -3 since `FROM`).
    for cmd in [
        cmd!("LOCK.ACQUIRE", "k", "o", 100, "extra"),
        cmd!("LOCK.REENTER", "k", "o", 100, 1),
        cmd!("LOCK.RELEASE", "k", "o", "x"),
        cmd!("LOCK.WAIT", "k", "o", 100, 100, 1),
    ] {
        let e = error_reply(&mut c, cmd.clone());
        assert_eq!(e, "ERR syntax error", "{}", show(&cmd));
    }
    assert_eq!(exists(&mut c, "k"), 0, "no arity error creates the key");
    let e = error_reply(&mut c, cmd!("LOCK.ACQUIRE", "k", "o"));
    assert!(e.to_lowercase().contains("'lock.acquire'"), "{e}");
}

#[test]
fn lock_keys_behave_like_any_other_type() {
    let server = Server::start();
    let mut c = server.conn();
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 60_000)).unwrap();
    let _: () = cmd!("SET", "plain", "v").query(&mut c).unwrap();
    let kind: String = cmd!("TYPE", "k").query(&mut c).unwrap();
    assert_eq!(kind, "relock-lk");
    assert_eq!(exists(&mut c, "k"), 1);

    // SCAN ... TYPE finds only locks.
    let (_, keys): (String, Vec<String>) = cmd!("SCAN", 0, "TYPE", "relock-lk", "COUNT", 1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, vec!["k".to_string()]);

    // OBJECT, MEMORY USAGE.
    let enc: String = cmd!("OBJECT", "ENCODING", "k").query(&mut c).unwrap();
    assert!(!enc.is_empty());
    let idle: i64 = cmd!("OBJECT", "IDLETIME", "k").query(&mut c).unwrap();
    assert!(idle >= 0);
    let usage: i64 = cmd!("MEMORY", "USAGE", "k").query(&mut c).unwrap();
    assert!(usage > 0, "MEMORY USAGE {usage}");
    let _: () = cmd!("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
        .query(&mut c)
        .unwrap();
    let freq: i64 = cmd!("OBJECT", "FREQ", "k").query(&mut c).unwrap();
    assert!(freq >= 0);

    // COPY duplicates the hold: same owner and token, and its TTL.
    assert_eq!(query_int(&mut c, cmd!("COPY", "k", "k2")), 1);
    let a = held_lock(&mut c, "k");
    let b = held_lock(&mut c, "k2");
    assert_eq!((&b.owner, b.token, b.count), (&a.owner, t, a.count));
    assert!(b.ttl > 50_000, "copy ttl {}", b.ttl);
    assert_ttl_matches(&mut c, b"k2");
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k2", "o")), Some(0));
    assert_eq!(
        held_lock(&mut c, "k").token,
        t,
        "the original is independent"
    );

    // RENAME moves the hold.
    let _: () = cmd!("RENAME", "k", "r").query(&mut c).unwrap();
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(info(&mut c, "k"), None);
    let r = held_lock(&mut c, "r");
    assert_eq!((r.owner.as_slice(), r.token, r.count), (&b"o"[..], t, 1));
    assert_ttl_matches(&mut c, b"r");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "r", "o", 60_000)),
        Some(t)
    );
    let fresh = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", 60_000)).unwrap();
    assert!(fresh > t);

    // DEBUG RELOAD keeps everything.
    let before = (held_lock(&mut c, "r"), held_lock(&mut c, "k"));
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    let after = (held_lock(&mut c, "r"), held_lock(&mut c, "k"));
    assert_eq!(after.0.owner, before.0.owner);
    assert_eq!(after.0.token, before.0.token);
    assert_eq!(after.1.token, before.1.token);
    assert!(after.0.ttl > 50_000 && after.0.ttl <= before.0.ttl);
    assert_ttl_matches(&mut c, b"r");
    let kind: String = cmd!("TYPE", "r").query(&mut c).unwrap();
    assert_eq!(kind, "relock-lk");

    // DEL and UNLINK remove it; the lock is gone for its owner.
    assert_eq!(query_int(&mut c, cmd!("DEL", "r")), 1);
    assert_eq!(info(&mut c, "r"), None);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "r", "o")), None);
    assert_eq!(query_int(&mut c, cmd!("UNLINK", "k")), 1);
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "x", 1_000)),
        None
    );
    assert_eq!(exists(&mut c, "k"), 0);
    let t2 = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "r", "z", 60_000)).unwrap();
    assert!(t2 > fresh);
}

#[test]
fn holder_keeps_its_hold_while_waiters_are_queued() {
    let server = Server::start();
    let mut c = server.conn();
    let t = int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000)).unwrap();
    let mut w = server.conn();
    let waiter = thread::spawn(move || {
        let r: Option<i64> = cmd!("LOCK.WAIT", "k", "w", 10_000, 5_000)
            .query(&mut w)
            .expect("LOCK.WAIT");
        r
    });
    assert!(common::eventually(Duration::from_secs(5), || {
        info(&mut c, "k").is_some_and(|i| i.waiters == 1)
    }));
    // The holder may refresh and re-enter; others are refused.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 10_000)),
        Some(t)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 10_000)),
        Some(2)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 10_000)),
        Some(t)
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", 10_000)),
        None
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "x", 10_000)),
        None
    );
    let i = held_lock(&mut c, "k");
    assert_eq!((i.token, i.count, i.waiters), (t, 2, 1));
    // The hand-off happens only when the count reaches 0.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(1));
    assert_eq!(held_lock(&mut c, "k").owner, b"o");
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(0));
    let granted = waiter.join().unwrap().expect("the waiter gets the lock");
    assert!(granted > t);
    let i = held_lock(&mut c, "k");
    assert_eq!(
        (i.owner.as_slice(), i.token, i.count, i.waiters),
        (&b"w"[..], granted, 1, 0)
    );
}

// --- Commands a client may send twice: FROM c ---------------------------------------------------

/// Everything a step could change at `keys`, as the master and (after `WAIT`) a replica show
/// it: the lock (its TTL as the absolute `PEXPIRETIME`, so that a reset lease shows), its
/// holders, its journal; and the server's counters and replication offset.
#[derive(Debug, PartialEq)]
struct Snapshot {
    keys: Vec<(Value, Value, i64, Value)>,
    counters: Vec<i64>,
    repl_offset: i64,
}

/// A reply without its `ttl` pairs (a flat RESP2 map, or a list of them): what stays the same
/// while time passes.
fn without_ttl(v: Value) -> Value {
    match v {
        Value::Array(items) if items.iter().all(|i| matches!(i, Value::Array(_))) => {
            Value::Array(items.into_iter().map(without_ttl).collect())
        }
        Value::Array(items) => Value::Array(
            items
                .chunks(2)
                .filter(|p| p[0] != Value::BulkString(b"ttl".to_vec()))
                .flatten()
                .cloned()
                .collect(),
        ),
        other => other,
    }
}

fn lock_state(c: &mut Connection, key: &str) -> (Value, Value, i64, Value) {
    let info: Value = cmd!("LOCK.INFO", key).query(c).unwrap();
    let holders: Value = cmd!("LOCK.HOLDERS", key).query(c).unwrap_or(Value::Nil);
    let history: Value = cmd!("LOCK.HISTORY", key, 100).query(c).unwrap();
    (
        without_ttl(info),
        without_ttl(holders),
        query_int(c, cmd!("PEXPIRETIME", key)),
        history,
    )
}

fn repl_offset(c: &mut Connection) -> i64 {
    let info: String = cmd!("INFO", "replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.trim().strip_prefix("master_repl_offset:")?.parse().ok())
        .expect("master_repl_offset")
}

fn snapshot(c: &mut Connection, keys: &[&str]) -> Snapshot {
    Snapshot {
        keys: keys.iter().map(|k| lock_state(c, k)).collect(),
        counters: [
            "acquired_total",
            "released_total",
            "renewed_total",
            "contended_total",
            "granted_total",
            "last_token",
        ]
        .iter()
        .map(|f| common::info_field(c, f))
        .collect(),
        repl_offset: repl_offset(c),
    }
}

/// A master with a replica attached, for the replication effects of steps and their repeats.
fn master_and_replica() -> (Server, Server) {
    let master = Server::start();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    // No replication ping moves the offset while a test compares it.
    let _: () = cmd!("CONFIG", "SET", "repl-ping-replica-period", 3600)
        .query(&mut master.conn())
        .unwrap();
    (master, replica)
}

/// The replica has everything the master wrote, and shows the same locks at `keys`.
fn assert_replica_agrees(m: &mut Connection, r: &mut Connection, keys: &[&str], what: &str) {
    assert_eq!(query_int(m, cmd!("WAIT", 1, 5000)), 1, "{what}: WAIT");
    for key in keys {
        let (mi, mh, mx, _) = lock_state(m, key);
        let (ri, rh, rx, _) = lock_state(r, key);
        assert_eq!((ri, rh, rx), (mi, mh, mx), "{what}: the replica's {key}");
    }
}

/// Runs `step`, which must answer `answer`, then runs it again: the repeat answers the same and
/// changes nothing, on the master or its replica (nothing replicated: the offset stays).
fn step_then_repeat(
    m: &mut Connection,
    r: &mut Connection,
    keys: &[&str],
    step: redis::Cmd,
    answer: Value,
) {
    let what = show(&step);
    assert_eq!(step.query::<Value>(m).unwrap(), answer, "{what}");
    assert_replica_agrees(m, r, keys, &what);
    let before = snapshot(m, keys);
    // Time passes, so that a lease reset by the repeat would show in PEXPIRETIME.
    wait_out_ttl(Duration::from_millis(3));
    assert_eq!(
        step.query::<Value>(m).unwrap(),
        answer,
        "{what}, sent again"
    );
    assert_eq!(
        snapshot(m, keys),
        before,
        "{what}, sent again, changed something"
    );
    assert_replica_agrees(m, r, keys, &format!("{what}, sent again"));
}

#[test]
fn a_step_sent_twice_changes_the_hold_once() {
    let (master, replica) = master_and_replica();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let n = Value::Int;
    let k = ["k"];
    step_then_repeat(
        &mut m,
        &mut r,
        &k,
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0),
        n(1),
    );
    step_then_repeat(
        &mut m,
        &mut r,
        &k,
        cmd!("LOCK.REENTER", "k", "o", 60_000, "from", 1),
        n(2),
    );
    step_then_repeat(
        &mut m,
        &mut r,
        &k,
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 2),
        n(3),
    );
    assert_eq!(held_lock(&mut m, "k").count, 3);
    step_then_repeat(
        &mut m,
        &mut r,
        &k,
        cmd!("LOCK.RELEASE", "k", "o", "FROM", 3),
        n(2),
    );
    step_then_repeat(
        &mut m,
        &mut r,
        &k,
        cmd!("LOCK.RELEASE", "k", "o", "FROM", 2),
        n(1),
    );
    // The last level hands the lock to a waiter; its repeat finds the hold gone (nil) and
    // touches nothing of the waiter's new hold.
    let mut w = master.conn();
    let waiter =
        thread::spawn(move || query_int(&mut w, cmd!("LOCK.WAIT", "k", "w", 60_000, 10_000)));
    assert!(
        common::eventually(Duration::from_secs(10), || held_lock(&mut m, "k").waiters
            == 1),
        "the waiter queued"
    );
    assert_eq!(
        query_int(&mut m, cmd!("LOCK.RELEASE", "k", "o", "FROM", 1)),
        0
    );
    let token = waiter.join().unwrap();
    step_then_repeat_nil(
        &mut m,
        &mut r,
        "k",
        cmd!("LOCK.RELEASE", "k", "o", "FROM", 1),
    );
    assert_eq!(
        (held_lock(&mut m, "k").owner, held_lock(&mut m, "k").token),
        (b"w".to_vec(), token)
    );

    // A shared hold: the same rule on the holder's own count.
    let s = ["s"];
    let shared = |from: i64| {
        cmd!(
            "LOCK.REENTER",
            "s",
            "o",
            60_000,
            "SHARED",
            "LIMIT",
            3,
            "FROM",
            from
        )
    };
    query_int(
        &mut m,
        cmd!("LOCK.ACQUIRE", "s", "other", 60_000, "SHARED", "LIMIT", 3),
    );
    step_then_repeat(&mut m, &mut r, &s, shared(0), n(1));
    step_then_repeat(&mut m, &mut r, &s, shared(1), n(2));
    step_then_repeat(
        &mut m,
        &mut r,
        &s,
        cmd!("LOCK.RELEASE", "s", "o", "FROM", 2),
        n(1),
    );

    // A group: each key by the RELEASE rule.
    let g = ["{g}a", "{g}b"];
    for key in g {
        assert_eq!(
            query_int(&mut m, cmd!("LOCK.REENTER", key, "o", 60_000, "FROM", 0)),
            1
        );
        assert_eq!(
            query_int(&mut m, cmd!("LOCK.REENTER", key, "o", 60_000, "FROM", 1)),
            2
        );
    }
    let mrelease = |from: i64| cmd!("LOCK.MRELEASE", 2, g[0], g[1], "o", "FROM", from);
    step_then_repeat(&mut m, &mut r, &g, mrelease(2), n(2));
    assert_eq!(query_int(&mut m, mrelease(1)), 2);
    // Both holds are gone: the repeat releases nothing and says so.
    step_then_repeat(&mut m, &mut r, &g, mrelease(1), n(0));
}

/// `step`, which finds nothing of its owner's left, answers nil and changes nothing.
fn step_then_repeat_nil(m: &mut Connection, r: &mut Connection, key: &str, step: redis::Cmd) {
    assert_replica_agrees(m, r, &[key], "before");
    let before = snapshot(m, &[key]);
    assert_eq!(
        step.query::<Value>(m).unwrap(),
        Value::Nil,
        "{}",
        show(&step)
    );
    assert_eq!(
        snapshot(m, &[key]),
        before,
        "{} changed something",
        show(&step)
    );
}

#[test]
fn a_step_from_another_count_is_an_error_that_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0)),
        1
    );
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1)),
        2
    );
    let before = snapshot(&mut c, &["k"]);
    #[rustfmt::skip]
    let wrong = [
        (cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0), "ERR hold count is 2, not 0"),
        (cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 3), "ERR hold count is 2, not 3"),
        (cmd!("LOCK.RELEASE", "k", "o", "FROM", 1),         "ERR hold count is 2, not 1"),
        (cmd!("LOCK.RELEASE", "k", "o", "FROM", 4),         "ERR hold count is 2, not 4"),
        // One key of a group off: the whole group is refused before anything changes.
        (cmd!("LOCK.MRELEASE", 2, "{k}free", "k", "o", "FROM", 1), "ERR hold count is 2, not 1"),
    ];
    for (cmd, expected) in wrong {
        assert_eq!(error_reply(&mut c, cmd.clone()), expected, "{}", show(&cmd));
    }
    assert_eq!(
        snapshot(&mut c, &["k"]),
        before,
        "a mismatch changed something"
    );
    // MRELEASE on a key in step and one off: nothing released on either.
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "{k}x", "o", 60_000, "FROM", 0)),
        1
    );
    assert_eq!(
        error_reply(
            &mut c,
            cmd!("LOCK.MRELEASE", 2, "{k}x", "k", "o", "FROM", 1)
        ),
        "ERR hold count is 2, not 1"
    );
    assert_eq!(
        held_lock(&mut c, "{k}x").count,
        1,
        "the key in step was not released"
    );
}

/// Out of memory (`maxmemory` below what is used, `noeviction`), a step sent twice still
/// answers its repeat as the first one was answered: a repeat adds nothing, so it needs no
/// memory (a driver's retry of a re-entry that ran must not turn into an error that leaves the
/// caller believing it never ran). A step that would add a level or a hold is refused with OOM
/// and changes nothing.
#[test]
fn out_of_memory_a_repeat_is_still_answered() {
    let server = Server::with_args(&["--maxmemory-policy", "noeviction"]);
    let mut c = server.conn();
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0)),
        1
    );
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1)),
        2
    );
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 1).query(&mut c).unwrap();
    let before = snapshot(&mut c, &["k", "new"]);
    // The repeat of FROM 1 (the hold is at 2), and a FROM 0 now the hold is ours: answered.
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1)),
        2
    );
    assert_eq!(
        error_reply(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0)),
        "ERR hold count is 2, not 0"
    );
    // A hold that is gone: nil, as with memory.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "gone", "o", 60_000, "FROM", 1)),
        None
    );
    // A step that adds: OOM, nothing changes.
    for step in [
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 2),
        cmd!("LOCK.REENTER", "k", "o", 60_000),
        cmd!("LOCK.REENTER", "new", "o", 60_000, "FROM", 0),
        cmd!("LOCK.REENTER", "new", "o", 60_000),
    ] {
        let e = error_reply(&mut c, step.clone());
        assert!(e.starts_with("OOM "), "{}: {e}", show(&step));
    }
    assert_eq!(snapshot(&mut c, &["k", "new"]), before);
    // Releases need no memory.
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.RELEASE", "k", "o", "FROM", 2)),
        1
    );
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.RELEASE", "k", "o", "FROM", 2)),
        1
    );
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1)),
        2
    );
}

#[test]
fn from_counts_are_checked() {
    let server = Server::start();
    let mut c = server.conn();
    query_int(&mut c, cmd!("LOCK.ACQUIRE", "k", "o", 60_000));
    let before = snapshot(&mut c, &["k"]);
    for bad in ["-1", "x", "4294967296", "01", "1.0", ""] {
        for cmd in [
            cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", bad),
            cmd!("LOCK.REENTER", "k", "o", 60_000, "SHARED", "FROM", bad),
            cmd!("LOCK.RELEASE", "k", "o", "FROM", bad),
            cmd!("LOCK.MRELEASE", 1, "k", "o", "FROM", bad),
        ] {
            assert_eq!(
                error_reply(&mut c, cmd.clone()),
                "ERR invalid count",
                "{}",
                show(&cmd)
            );
        }
    }
    // 0 is "I hold nothing yet" for a re-entry, and no step at all for a release.
    for cmd in [
        cmd!("LOCK.RELEASE", "k", "o", "FROM", 0),
        cmd!("LOCK.MRELEASE", 1, "k", "o", "FROM", 0),
    ] {
        assert_eq!(
            error_reply(&mut c, cmd.clone()),
            "ERR invalid count",
            "{}",
            show(&cmd)
        );
    }
    #[rustfmt::skip]
    let syntax = [
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1, "FROM", 1),
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM"),
        cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1, "SHARED"),
        cmd!("LOCK.RELEASE", "k", "o", "FROM", 1, "FROM", 1),
        cmd!("LOCK.RELEASE", "k", "o", "FROM"),
        cmd!("LOCK.RELEASE", "k", "o", "UNTIL", 1),
        cmd!("LOCK.MRELEASE", 1, "k", "o", "FROM", 1, "FROM", 1),
        cmd!("LOCK.MRELEASE", 1, "k", "o", "FROM"),
        cmd!("LOCK.MRELEASE", 1, "k", "o", "UNTIL", 1),
    ];
    for cmd in syntax {
        assert_eq!(
            error_reply(&mut c, cmd.clone()),
            "ERR syntax error",
            "{}",
            show(&cmd)
        );
    }
    // The words before FROM are checked first, in their order.
    assert_eq!(
        error_reply(&mut c, cmd!("LOCK.REENTER", "k", "o", 0, "FROM", "x")),
        "ERR invalid ttl_ms"
    );
    assert_eq!(
        error_reply(
            &mut c,
            cmd!(
                "LOCK.REENTER",
                "k",
                "o",
                1,
                "SHARED",
                "LIMIT",
                0,
                "FROM",
                "x"
            )
        ),
        "ERR invalid limit"
    );
    assert_eq!(
        error_reply(&mut c, cmd!("LOCK.RELEASE", "k", "", "FROM", "x")),
        "ERR invalid owner"
    );
    assert_eq!(
        snapshot(&mut c, &["k"]),
        before,
        "a refused command changed something"
    );
    // The largest count is a count (this hold's is another).
    assert_eq!(
        error_reply(
            &mut c,
            cmd!("LOCK.RELEASE", "k", "o", "FROM", 4_294_967_295u64)
        ),
        "ERR hold count is 1, not 4294967295"
    );
}

/// An inner re-entry (FROM c >= 1) whose outer hold is gone (expired, deleted, force-released,
/// taken by another) answers nil: never a fresh hold the caller would believe nested.
#[test]
fn an_inner_reentry_into_a_lost_hold_is_nil() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(
        query_int(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 0)),
        1
    );
    let _: i64 = cmd!("DEL", "k").query(&mut c).unwrap();
    let before = snapshot(&mut c, &["k"]);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 1)),
        None
    );
    assert_eq!(exists(&mut c, "k"), 0, "no fresh hold");
    assert_eq!(snapshot(&mut c, &["k"]), before);
    // Another holds it now.
    let token = query_int(&mut c, cmd!("LOCK.ACQUIRE", "k", "b", 60_000));
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", 2)),
        None
    );
    assert_eq!(
        (held_lock(&mut c, "k").owner, held_lock(&mut c, "k").token),
        (b"b".to_vec(), token)
    );
    // A shared key where the caller holds nothing any more.
    assert_eq!(
        int_or_nil(
            &mut c,
            cmd!("LOCK.REENTER", "s", "r", 60_000, "SHARED", "FROM", 0)
        ),
        Some(1)
    );
    let _: i64 = cmd!("LOCK.FORCERELEASE", "s", "r").query(&mut c).unwrap();
    assert_eq!(
        int_or_nil(
            &mut c,
            cmd!("LOCK.REENTER", "s", "r", 60_000, "SHARED", "FROM", 1)
        ),
        None
    );
    assert_eq!(exists(&mut c, "s"), 0);
    // Without FROM, a re-entry takes a free key as it always did.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "s", "r", 60_000)),
        Some(1)
    );
}

/// A re-send staged for real: the command reaches the server and runs, its reply is lost with
/// the connection (reset by a proxy), and the client sends it again on a new connection, as a
/// driver's retry does. With FROM the hold moves once; without, twice (the hazard it fixes).
#[test]
fn a_command_resent_after_a_lost_reply_applies_once() {
    let server = Server::start();
    let proxy = common::cut::CutProxy::start(server.port);
    let mut direct = server.conn();
    // Sends `cmd` through the proxy losing its reply, then again on a new connection: the
    // second answer.
    let lost_then_resent = |cmd: redis::Cmd| -> Value {
        let mut first = proxy.conn();
        let _: String = cmd!("PING").query(&mut first).unwrap();
        let cuts = proxy.cuts();
        proxy.cut_next_reply();
        let lost = cmd.query::<Value>(&mut first);
        assert!(
            lost.is_err(),
            "{}: the reply was not lost: {lost:?}",
            show(&cmd)
        );
        assert_eq!(proxy.cuts(), cuts + 1, "{}", show(&cmd));
        let mut again = proxy.conn();
        cmd.query::<Value>(&mut again).unwrap()
    };
    let n = Value::Int;
    let reenter = |from: i64| cmd!("LOCK.REENTER", "k", "o", 60_000, "FROM", from);
    assert_eq!(lost_then_resent(reenter(0)), n(1));
    assert_eq!(held_lock(&mut direct, "k").count, 1);
    assert_eq!(lost_then_resent(reenter(1)), n(2));
    assert_eq!(held_lock(&mut direct, "k").count, 2);
    assert_eq!(
        lost_then_resent(cmd!("LOCK.RELEASE", "k", "o", "FROM", 2)),
        n(1)
    );
    assert_eq!(held_lock(&mut direct, "k").count, 1);
    // The last level: the hold ended once; the re-send finds it gone.
    assert_eq!(
        lost_then_resent(cmd!("LOCK.RELEASE", "k", "o", "FROM", 1)),
        Value::Nil
    );
    assert_eq!(exists(&mut direct, "k"), 0);
    // A group.
    for key in ["{g}a", "{g}b"] {
        assert_eq!(
            query_int(
                &mut direct,
                cmd!("LOCK.REENTER", key, "o", 60_000, "FROM", 0)
            ),
            1
        );
        assert_eq!(
            query_int(
                &mut direct,
                cmd!("LOCK.REENTER", key, "o", 60_000, "FROM", 1)
            ),
            2
        );
    }
    let mrelease = cmd!("LOCK.MRELEASE", 2, "{g}a", "{g}b", "o", "FROM", 2);
    assert_eq!(lost_then_resent(mrelease), n(2));
    assert_eq!(held_lock(&mut direct, "{g}a").count, 1);
    assert_eq!(held_lock(&mut direct, "{g}b").count, 1);
    // Without FROM a re-sent step counts twice: what a client must not do.
    assert_eq!(
        query_int(&mut direct, cmd!("LOCK.REENTER", "old", "o", 60_000)),
        1
    );
    assert_eq!(
        lost_then_resent(cmd!("LOCK.REENTER", "old", "o", 60_000)),
        n(3)
    );
}

/// The AOF gets what replicas get: each applied step once, nothing for a repeat (the file does
/// not grow), and a restart from it finds the hold as the steps left it.
#[test]
fn the_aof_has_each_step_once() {
    let mut server = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    let aof_size = |c: &mut Connection| -> i64 {
        let info: String = cmd!("INFO", "persistence").query(c).unwrap();
        info.lines()
            .find_map(|l| l.trim().strip_prefix("aof_current_size:")?.parse().ok())
            .expect("aof_current_size")
    };
    let steps = [
        (
            cmd!("LOCK.REENTER", "k", "o", 600_000, "FROM", 0),
            Value::Int(1),
        ),
        (
            cmd!("LOCK.REENTER", "k", "o", 600_000, "FROM", 1),
            Value::Int(2),
        ),
        (
            cmd!("LOCK.REENTER", "k", "o", 600_000, "FROM", 2),
            Value::Int(3),
        ),
        (cmd!("LOCK.RELEASE", "k", "o", "FROM", 3), Value::Int(2)),
    ];
    for (step, answer) in steps {
        assert_eq!(
            step.query::<Value>(&mut c).unwrap(),
            answer,
            "{}",
            show(&step)
        );
        let size = aof_size(&mut c);
        assert_eq!(
            step.query::<Value>(&mut c).unwrap(),
            answer,
            "{} again",
            show(&step)
        );
        assert_eq!(
            aof_size(&mut c),
            size,
            "{} again wrote to the AOF",
            show(&step)
        );
    }
    let before = held_lock(&mut c, "k");
    server.restart();
    let mut c = server.conn();
    let after = held_lock(&mut c, "k");
    assert_eq!(
        (after.owner, after.token, after.count),
        (before.owner, before.token, 2)
    );
}
