//! Hostile persistence input: `RESTORE` accepts any payload whose checksum is right, so a lock
//! value with missing, mistyped, out-of-range or random fields must be rejected with an error
//! that changes nothing, never abort Redis (as a short read inside the module's loader once
//! did, with `sanitize-dump-payload` yes or no).
//!
//! The payloads are built field by field in the DUMP format (value type, module id, the
//! module's fields with their opcodes, EOF, RDB version, CRC64), and the builder is first
//! checked against a real DUMP byte for byte.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::payload::{crc64, len, shared_fields, Field, Format, OP_EOF};
use common::{lock_info, Server};
use redis::Connection;

/// A good exclusive lock in encoding version 1 (before shared holds): owner, token, count.
fn good_v1() -> Vec<Field> {
    vec![
        Field::Str(b"owner".to_vec()),
        Field::Uint(1 << 52),
        Field::Uint(1),
    ]
}

/// The same lock in encoding version 2: the kind word (0, exclusive) first.
fn good() -> Vec<Field> {
    let mut f = vec![Field::Uint(0)];
    f.extend(good_v1());
    f
}

/// A good shared value in encoding version 2: limit 3, two holders.
fn good_shared() -> Vec<Field> {
    shared_fields(
        3,
        &[(b"r1", 1 << 50, 1, FAR), (b"r2", (1 << 50) + 1, 2, FAR)],
    )
}

/// A good shared value whose last field (the second holder's lease end, long lapsed) takes
/// two bytes.
fn good_shared_ending_short() -> Vec<Field> {
    shared_fields(
        3,
        &[(b"r1", 1 << 50, 1, FAR), (b"r2", (1 << 50) + 1, 2, 1000)],
    )
}

/// A lease end far in the future (Unix ms, year 2100).
const FAR: i64 = 4_102_444_800_000;

/// A grant time (Unix ms).
const GRANTED: i64 = 1_800_000_000_000;

/// The exclusive lock in encoding version 3: kind, owner, token, count, grant time.
fn good_v3() -> Vec<Field> {
    let mut f = good();
    f.push(Field::Sint(GRANTED));
    f
}

/// A shared value in encoding version 3: limit 5, holders with 1 and 3 permits.
fn good_shared_v3() -> Vec<Field> {
    shared_v3_fields(
        5,
        &[
            (b"r1", 1 << 50, 1, FAR, 1, GRANTED),
            (b"r2", (1 << 50) + 1, 2, FAR, 3, 0),
        ],
    )
}

/// A shared value in encoding version 3: kind, limit, holders, and per holder owner, token,
/// count, lease end, permits, grant time.
/// One holder of a version-3 value: owner, token, count, lease end, permits, grant time.
type HolderV3<'a> = (&'a [u8], u64, u64, i64, u64, i64);

fn shared_v3_fields(limit: u64, holders: &[HolderV3<'_>]) -> Vec<Field> {
    let mut f = vec![
        Field::Uint(1),
        Field::Uint(limit),
        Field::Uint(holders.len() as u64),
    ];
    for &(owner, token, count, lease_end, permits, granted) in holders {
        f.extend([
            Field::Str(owner.to_vec()),
            Field::Uint(token),
            Field::Uint(count),
            Field::Sint(lease_end),
            Field::Uint(permits),
            Field::Sint(granted),
        ]);
    }
    f
}

/// Payloads that must be refused, each with what is wrong with it.
fn bad_payloads(format: &Format) -> Vec<(String, Vec<u8>)> {
    use Field::*;
    let owner = || Str(b"owner".to_vec());
    let cases: Vec<(&str, u64, Vec<Field>)> = vec![
        ("count dropped", 1, vec![owner(), Uint(1 << 52)]),
        ("token and count dropped", 1, vec![owner()]),
        ("no fields", 1, vec![]),
        (
            "count as a string",
            1,
            vec![owner(), Uint(1 << 52), Str(b"1".to_vec())],
        ),
        (
            "token as a string",
            1,
            vec![owner(), Str(b"5".to_vec()), Uint(1)],
        ),
        (
            "owner as a number",
            1,
            vec![Uint(7), Uint(1 << 52), Uint(1)],
        ),
        ("owner cut short", 1, vec![ShortStr(5)]),
        ("owner of 2^40 bytes", 1, vec![ShortStr(1 << 40)]),
        ("owner of 2^62 bytes", 1, vec![ShortStr(1 << 62)]),
        ("an extra field", 1, {
            let mut f = good_v1();
            f.push(Uint(9));
            f
        }),
        ("token 0", 1, vec![owner(), Uint(0), Uint(1)]),
        ("token 2^53", 1, vec![owner(), Uint(1 << 53), Uint(1)]),
        ("token 2^64-1", 1, vec![owner(), Uint(u64::MAX), Uint(1)]),
        ("count 0", 1, vec![owner(), Uint(1 << 52), Uint(0)]),
        ("count 2^32", 1, vec![owner(), Uint(1 << 52), Uint(1 << 32)]),
        ("empty owner", 1, vec![Str(vec![]), Uint(1 << 52), Uint(1)]),
        (
            "owner of 257 bytes",
            1,
            vec![Str(vec![b'x'; 257]), Uint(1 << 52), Uint(1)],
        ),
        ("unknown encoding version 5", 5, good_v3()),
        ("unknown encoding version 1023", 1023, good()),
        ("encoding version 0", 0, good()),
        ("encoding version 0 with v1 fields", 0, good_v1()),
    ];
    // The same faults in encoding version 2 (kind word 0 first), and what only version 2 has:
    // the kind word, and shared values.
    let v2 = |fields: Vec<Field>| {
        let mut f = vec![Uint(0)];
        f.extend(fields);
        f
    };
    let v2_exclusive: Vec<(String, u64, Vec<Field>)> = cases
        .iter()
        .filter(|(_, encver, _)| *encver == 1)
        .map(|(what, _, fields)| (format!("v2 {what}"), 2, v2(fields.clone())))
        .collect();
    let holder = |o: &[u8], t: u64, c: u64, l: i64| (o.to_vec(), t, c, l);
    let shared = |limit: u64, hs: Vec<(Vec<u8>, u64, u64, i64)>| {
        let refs: Vec<(&[u8], u64, u64, i64)> = hs
            .iter()
            .map(|(o, t, c, l)| (o.as_slice(), *t, *c, *l))
            .collect();
        shared_fields(limit, &refs)
    };
    let t = 1u64 << 50;
    let shared_cases: Vec<(&str, Vec<Field>)> = vec![
        ("kind 2", vec![Uint(2), Uint(0), Uint(1)]),
        ("kind 2^64-1", vec![Uint(u64::MAX)]),
        ("kind only", vec![Uint(0)]),
        ("shared kind only", vec![Uint(1)]),
        (
            "kind as a string",
            vec![Str(b"0".to_vec()), Str(b"owner".to_vec()), Uint(t), Uint(1)],
        ),
        ("shared with zero holders", shared(0, vec![])),
        ("shared with zero holders and a limit", shared(3, vec![])),
        (
            "shared with duplicate owners",
            shared(
                0,
                vec![holder(b"a", t, 1, FAR), holder(b"a", t + 1, 1, FAR)],
            ),
        ),
        (
            "shared with more holders than its limit",
            shared(
                1,
                vec![holder(b"a", t, 1, FAR), holder(b"b", t + 1, 1, FAR)],
            ),
        ),
        (
            "shared with limit 10^6+1",
            shared(1_000_001, vec![holder(b"a", t, 1, FAR)]),
        ),
        (
            "shared with limit 2^64-1",
            shared(u64::MAX, vec![holder(b"a", t, 1, FAR)]),
        ),
        (
            "shared with lease end 0",
            shared(0, vec![holder(b"a", t, 1, 0)]),
        ),
        (
            "shared with lease end -1",
            shared(0, vec![holder(b"a", t, 1, -1)]),
        ),
        (
            "shared with lease end 2^62+1",
            shared(0, vec![holder(b"a", t, 1, (1 << 62) + 1)]),
        ),
        (
            "shared with token 0",
            shared(0, vec![holder(b"a", 0, 1, FAR)]),
        ),
        (
            "shared with token 2^53",
            shared(0, vec![holder(b"a", 1 << 53, 1, FAR)]),
        ),
        (
            "shared with count 0",
            shared(0, vec![holder(b"a", t, 0, FAR)]),
        ),
        (
            "shared with count 2^32",
            shared(0, vec![holder(b"a", t, 1 << 32, FAR)]),
        ),
        (
            "shared with an empty owner",
            shared(0, vec![holder(b"", t, 1, FAR)]),
        ),
        (
            "shared with an owner of 257 bytes",
            shared(0, vec![holder(&[b'x'; 257], t, 1, FAR)]),
        ),
        ("shared claiming 2 holders, giving 1", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f[2] = Uint(2);
            f
        }),
        ("shared claiming 2^40 holders", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f[2] = Uint(1 << 40);
            f
        }),
        ("shared with an extra field", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f.push(Uint(9));
            f
        }),
        ("shared lease end as a string", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f[6] = Str(FAR.to_string().into_bytes());
            f
        }),
        ("shared lease end dropped", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f.pop();
            f
        }),
        (
            "shared owner cut short",
            vec![Uint(1), Uint(0), Uint(1), ShortStr(5)],
        ),
        (
            "shared owner of 2^62 bytes",
            vec![Uint(1), Uint(0), Uint(1), ShortStr(1 << 62)],
        ),
        ("shared value in encoding version 1", {
            let mut f = shared(0, vec![holder(b"a", t, 1, FAR)]);
            f.insert(0, Uint(1)); // version 1 has no kind word: whatever follows is wrong
            f
        }),
    ];

    let r = |o: &'static [u8], permits: u64, granted: i64| (o, t, 1u64, FAR, permits, granted);
    let v3_cases: Vec<(&str, Vec<Field>)> = vec![
        ("v3 exclusive without its grant time", good()),
        ("v3 exclusive grant time -1", {
            let mut f = good();
            f.push(Sint(-1));
            f
        }),
        ("v3 exclusive grant time 2^44", {
            let mut f = good();
            f.push(Sint(1 << 44));
            f
        }),
        ("v3 exclusive grant time as a string", {
            let mut f = good();
            f.push(Str(b"5".to_vec()));
            f
        }),
        ("v3 shared permits 0", shared_v3_fields(5, &[r(b"a", 0, 0)])),
        (
            "v3 shared permits above the limit",
            shared_v3_fields(5, &[r(b"a", 6, 0)]),
        ),
        (
            "v3 shared permits summing above the limit",
            shared_v3_fields(5, &[r(b"a", 3, 0), r(b"b", 3, 0)]),
        ),
        (
            "v3 reader with 2 permits",
            shared_v3_fields(0, &[r(b"a", 2, 0)]),
        ),
        (
            "v3 shared grant time -1",
            shared_v3_fields(5, &[r(b"a", 1, -1)]),
        ),
        ("v3 shared without permits and grant time", good_shared()),
        ("v3 shared grant time dropped", {
            let mut f = shared_v3_fields(5, &[r(b"a", 1, 0)]);
            f.pop();
            f
        }),
    ];

    let mut payloads: Vec<(String, Vec<u8>)> = cases
        .into_iter()
        .map(|(what, encver, fields)| (what.to_string(), format.payload(encver, &fields)))
        .collect();
    payloads.extend(
        v2_exclusive
            .into_iter()
            .map(|(what, encver, fields)| (what, format.payload(encver, &fields))),
    );
    payloads.extend(
        shared_cases
            .into_iter()
            .map(|(what, fields)| (what.to_string(), format.payload(2, &fields))),
    );
    payloads.extend(
        v3_cases
            .into_iter()
            .map(|(what, fields)| (what.to_string(), format.payload(3, &fields))),
    );
    // Good payloads of both versions and kinds cut at every length, EOF and checksum redone:
    // every short read.
    for (name, whole) in [
        ("v1", format.payload(1, &good_v1())),
        ("v2", format.payload(2, &good())),
        // Its last field short: a payload cut inside an 8-byte field and sealed again reads
        // the EOF and the RDB version as the field's last bytes, which can make a valid value.
        ("v2 shared", format.payload(2, &good_shared_ending_short())),
        (
            "v3",
            format.payload(3, &{
                let mut f = good();
                f.push(Field::Sint(1000)); // a short last field, as for "v2 shared"
                f
            }),
        ),
        ("v3 shared", format.payload(3, &good_shared_v3())),
    ] {
        let body = &whole[..whole.len() - 11]; // without EOF, version, checksum
        for cut in 10..body.len() {
            let mut b = body[..cut].to_vec();
            len(&mut b, OP_EOF);
            payloads.push((format!("{name} cut after {cut} bytes"), format.seal(b)));
        }
    }
    let whole = format.payload(2, &good());
    let body = &whole[..whole.len() - 11];
    // Random bytes in place of the fields (a fixed generator: the same cases every run).
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..200 {
        let mut b = body[..10].to_vec();
        let n = (i % 40) + 1;
        for _ in 0..n {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            b.push(seed as u8);
        }
        payloads.push((format!("random fields #{i}"), format.seal(b)));
    }
    payloads
}

fn restore(c: &mut Connection, key: &str, payload: &[u8], replace: bool) -> redis::RedisResult<()> {
    let mut command = cmd!("RESTORE", key, 0, payload);
    if replace {
        command.arg("REPLACE");
    }
    command.query(c)
}

fn refuses_bad_payloads(sanitize: &str) {
    let server = Server::with_args(&["--sanitize-dump-payload", sanitize]);
    let mut c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (format, dump) = Format::of(&mut c);
    assert_eq!(
        format.encver(),
        4,
        "the saved token lead brought encoding version 4 (values encoded as in 3)"
    );
    assert_eq!(format.payload(4, &good_v3())[..10], dump[..10]);
    // The builder reproduces a real DUMP (same owner, token, count and grant time) byte for byte.
    let info_token = {
        let token = 1u64 << 51;
        let _: String = cmd!(
            "LOCK.APPLY",
            "probe",
            "owner",
            token,
            1,
            "PXAT",
            FAR,
            "GRANTED",
            GRANTED
        )
        .query(&mut c)
        .unwrap();
        let _: i64 = cmd!("PERSIST", "probe").query(&mut c).unwrap();
        let d: Vec<u8> = cmd!("DUMP", "probe").query(&mut c).unwrap();
        let rebuilt = format.payload(
            4,
            &[
                Field::Uint(0),
                Field::Str(b"owner".to_vec()),
                Field::Uint(token),
                Field::Uint(1),
                Field::Sint(GRANTED),
            ],
        );
        assert_eq!(rebuilt, d, "the payload builder drifted from DUMP");
        token
    };
    // And a payload it builds is accepted when it is right: version 3 of both kinds, and
    // versions 2 and 1 (written before permits and grant times, and before shared holds)
    // still load.
    restore(&mut c, "restored-v3", &format.payload(3, &good_v3()), false)
        .expect("a good version-3 payload");
    restore(
        &mut c,
        "restored-shared-v3",
        &format.payload(3, &good_shared_v3()),
        false,
    )
    .expect("a good version-3 shared payload");
    restore(&mut c, "restored", &format.payload(2, &good()), false).expect("a good payload");
    assert_eq!(lock_info(&mut c, "restored").unwrap().owner, b"owner");
    restore(&mut c, "restored-v1", &format.payload(1, &good_v1()), false)
        .expect("a good version-1 payload");
    assert_eq!(lock_info(&mut c, "restored-v1").unwrap().owner, b"owner");
    restore(
        &mut c,
        "restored-shared",
        &format.payload(2, &good_shared()),
        false,
    )
    .expect("a good shared payload");
    let holders: redis::Value = cmd!("LOCK.HOLDERS", "restored-shared")
        .query(&mut c)
        .unwrap();
    assert!(
        matches!(&holders, redis::Value::Array(h) if h.len() == 2),
        "restored shared holders: {holders:?}"
    );
    assert!(info_token > 0);

    let held = lock_info(&mut c, "probe").unwrap();
    let mut refused = 0;
    for (what, payload) in bad_payloads(&format) {
        let fresh = restore(&mut c, "bad", &payload, false);
        assert!(
            fresh.is_err(),
            "sanitize {sanitize}: RESTORE of a payload with {what} was accepted"
        );
        let exists: i64 = cmd!("EXISTS", "bad").query(&mut c).unwrap_or_else(|e| {
            panic!(
                "sanitize {sanitize}: server gone after a payload with {what}: {e}\n{}",
                server.log()
            )
        });
        assert_eq!(exists, 0, "{what}: a key was created");
        // REPLACE over a live lock: refused, and the lock is untouched.
        assert!(
            restore(&mut c, "probe", &payload, true).is_err(),
            "{what} REPLACE"
        );
        let now = lock_info(&mut c, "probe").expect("the lock survives");
        assert_eq!(
            (now.owner.as_slice(), now.token, now.count),
            (held.owner.as_slice(), held.token, held.count),
            "{what}"
        );
        refused += 1;
    }
    assert!(refused >= 350, "only {refused} payloads tried");
    let pong: String = cmd!("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    // Nothing leaked into the module's view of the keyspace.
    // probe and the five restored
    assert_eq!(common::info_field(&mut c, "locks"), 6);
    assert_eq!(common::info_field(&mut c, "holds"), 8);
}

#[test]
fn restore_refuses_bad_lock_payloads_with_sanitizing() {
    refuses_bad_payloads("yes");
}

#[test]
fn restore_refuses_bad_lock_payloads_without_sanitizing() {
    refuses_bad_payloads("no");
}

#[test]
fn crc64_matches_redis() {
    // Redis's own test vector (src/crc64.c).
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}
