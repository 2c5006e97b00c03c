//! Hostile persistence input: `RESTORE` accepts any payload whose checksum is right, so a lock
//! value with missing, mistyped, out-of-range or random fields must be rejected with an error
//! that changes nothing, never abort Redis (as a short read inside the module's loader once
//! did, with `sanitize-dump-payload` yes or no).
//!
//! The payloads are built field by field in the DUMP format (value type, module id, the
//! module's fields with their opcodes, EOF, RDB version, CRC64), and the builder is first
//! checked against a real DUMP byte for byte.
#[macro_use]
mod common;

use std::time::Duration;

use common::{acquire, lock_info, Server};
use redis::Connection;

/// RDB value type of a module value (`RDB_TYPE_MODULE_2`).
const TYPE_MODULE_2: u8 = 7;
/// Opcodes inside a module value.
const OP_EOF: u64 = 0;
const OP_UINT: u64 = 2;
const OP_STRING: u64 = 5;

#[derive(Clone, Debug)]
enum Field {
    Uint(u64),
    Str(Vec<u8>),
    /// A string whose length says `len` but whose bytes are missing.
    ShortStr(u64),
}

/// RDB length encoding.
fn len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// CRC-64/Jones, reflected, as Redis computes DUMP checksums.
fn crc64(data: &[u8]) -> u64 {
    let mut crc: u64 = 0;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// What a real DUMP of a lock says about the server: the module id and the RDB version.
struct Format {
    module_id: u64,
    rdb_version: [u8; 2],
}

impl Format {
    fn of(c: &mut Connection) -> (Format, Vec<u8>) {
        acquire(c, "sample", "owner", 100_000);
        let dump: Vec<u8> = cmd!("DUMP", "sample").query(c).expect("DUMP");
        let _: i64 = cmd!("DEL", "sample").query(c).unwrap();
        assert_eq!(dump[0], TYPE_MODULE_2, "DUMP of a lock: {dump:?}");
        assert_eq!(dump[1], 0x81, "module ids are 64-bit lengths");
        let module_id = u64::from_be_bytes(dump[2..10].try_into().unwrap());
        let n = dump.len();
        let rdb_version = [dump[n - 10], dump[n - 9]];
        (
            Format {
                module_id,
                rdb_version,
            },
            dump,
        )
    }

    /// A payload with `fields`, for encoding version `encver` (the low 10 bits of the id).
    fn payload(&self, encver: u64, fields: &[Field]) -> Vec<u8> {
        let mut out = vec![TYPE_MODULE_2];
        len(&mut out, (self.module_id & !1023) | encver);
        for field in fields {
            match field {
                Field::Uint(v) => {
                    len(&mut out, OP_UINT);
                    len(&mut out, *v);
                }
                Field::Str(bytes) => {
                    len(&mut out, OP_STRING);
                    len(&mut out, bytes.len() as u64);
                    out.extend_from_slice(bytes);
                }
                Field::ShortStr(n) => {
                    len(&mut out, OP_STRING);
                    len(&mut out, *n);
                }
            }
        }
        len(&mut out, OP_EOF);
        self.seal(out)
    }

    /// Appends the RDB version and the checksum.
    fn seal(&self, mut body: Vec<u8>) -> Vec<u8> {
        body.extend_from_slice(&self.rdb_version);
        let crc = crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }
}

fn good() -> Vec<Field> {
    vec![
        Field::Str(b"owner".to_vec()),
        Field::Uint(1 << 52),
        Field::Uint(1),
    ]
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
            let mut f = good();
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
        ("unknown encoding version 2", 2, good()),
        ("unknown encoding version 1023", 1023, good()),
        ("encoding version 0", 0, good()),
    ];
    let mut payloads: Vec<(String, Vec<u8>)> = cases
        .into_iter()
        .map(|(what, encver, fields)| (what.to_string(), format.payload(encver, &fields)))
        .collect();
    // A good payload cut at every length, EOF and checksum redone: every short read.
    let whole = format.payload(1, &good());
    let body = &whole[..whole.len() - 11]; // without EOF, version, checksum
    for cut in 10..body.len() {
        let mut b = body[..cut].to_vec();
        len(&mut b, OP_EOF);
        payloads.push((format!("cut after {cut} bytes"), format.seal(b)));
    }
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
        format.payload(
            1,
            &[
                Field::Str(b"owner".to_vec()),
                Field::Uint(0),
                Field::Uint(1)
            ]
        )[..2],
        dump[..2]
    );
    // The builder reproduces a real DUMP (same owner, token and count) byte for byte.
    let info_token = {
        acquire(&mut c, "probe", "owner", 100_000);
        let d: Vec<u8> = cmd!("DUMP", "probe").query(&mut c).unwrap();
        let token = lock_info(&mut c, "probe").unwrap().token as u64;
        let rebuilt = format.payload(
            1,
            &[
                Field::Str(b"owner".to_vec()),
                Field::Uint(token),
                Field::Uint(1),
            ],
        );
        assert_eq!(rebuilt, d, "the payload builder drifted from DUMP");
        token
    };
    // And a payload it builds is accepted when it is right.
    restore(&mut c, "restored", &format.payload(1, &good()), false).expect("a good payload");
    assert_eq!(lock_info(&mut c, "restored").unwrap().owner, b"owner");
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
    assert!(refused >= 230, "only {refused} payloads tried");
    let pong: String = cmd!("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    // Nothing leaked into the module's view of the keyspace.
    assert_eq!(common::info_field(&mut c, "locks"), 2); // probe and restored
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
