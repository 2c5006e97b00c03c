//! Hostile `RESTORE` payloads and hand-made effects of shared holds.
//!
//! Found in the attack on shared holds (one test per attack class). Each test says what it attacks
//! and what must hold; those that failed when written say what was measured. All waits end on an
//! event within generous bounds: a busy two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::acq;
use common::ask::owner_token_count as holders;
use common::int_or_nil as int;
use common::payload::{shared_fields, Field, Format};
use common::{eventually, info_field, now_ms, Server};
use redis::{Connection, Value};

const LONG: u64 = 100_000;

/// Found in the attack on shared holds (one test per attack class).
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
    // b's lease ended long ago: the module hides it at once and removes it soon.
    assert!(eventually(Duration::from_secs(5), || holders(
        &mut c, "edge"
    ) == vec![(
        b"a".to_vec(),
        t as i64,
        1
    )]));
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
    // Long again: the truncation loop below takes more than a second on a busy machine, and
    // the count of holds after it must not depend on that.
    assert_eq!(
        int(&mut c, cmd!("LOCK.RENEW", "edge", "a", LONG)),
        Some(t as i64)
    );
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
