//! `DUMP` payloads of lock values built field by field (value type, module id with the encoding
//! version, the module's fields with their opcodes, EOF, RDB version, CRC64), so tests can hand
//! `RESTORE` exactly the bytes they mean: old encodings, corrupt values.
#![allow(dead_code)]

use redis::Connection;

/// RDB value type of a module value (`RDB_TYPE_MODULE_2`).
pub const TYPE_MODULE_2: u8 = 7;
/// Opcodes inside a module value.
pub const OP_EOF: u64 = 0;
pub const OP_UINT: u64 = 2;
pub const OP_STRING: u64 = 5;

/// Kinds of lock value in encoding version 2.
pub const KIND_EXCLUSIVE: u64 = 0;
pub const KIND_SHARED: u64 = 1;

#[derive(Clone, Debug)]
pub enum Field {
    Uint(u64),
    Sint(i64),
    Str(Vec<u8>),
    /// A string whose length says `len` but whose bytes are missing.
    ShortStr(u64),
}

/// RDB length encoding.
pub fn len(out: &mut Vec<u8>, n: u64) {
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
pub fn crc64(data: &[u8]) -> u64 {
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
pub struct Format {
    pub module_id: u64,
    pub rdb_version: [u8; 2],
}

impl Format {
    /// Learns the format from a DUMP of a throw-away lock at `sample`; also returns that DUMP.
    pub fn of(c: &mut Connection) -> (Format, Vec<u8>) {
        let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
            .arg("sample")
            .arg("owner")
            .arg(100_000)
            .query(c)
            .expect("LOCK.ACQUIRE sample");
        let dump: Vec<u8> = redis::cmd("DUMP").arg("sample").query(c).expect("DUMP");
        let _: i64 = redis::cmd("DEL").arg("sample").query(c).unwrap();
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

    /// The encoding version a DUMP was written with (the low 10 bits of the module id).
    pub fn encver(&self) -> u64 {
        self.module_id & 1023
    }

    /// A payload with `fields`, for encoding version `encver`.
    pub fn payload(&self, encver: u64, fields: &[Field]) -> Vec<u8> {
        let mut out = vec![TYPE_MODULE_2];
        len(&mut out, (self.module_id & !1023) | encver);
        for field in fields {
            match field {
                Field::Uint(v) => {
                    len(&mut out, OP_UINT);
                    len(&mut out, *v);
                }
                Field::Sint(v) => {
                    // RedisModule_SaveSigned stores the bits as an unsigned field.
                    len(&mut out, OP_UINT);
                    len(&mut out, *v as u64);
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
    pub fn seal(&self, mut body: Vec<u8>) -> Vec<u8> {
        body.extend_from_slice(&self.rdb_version);
        let crc = crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }
}

/// One shared holder's fields in encoding version 2: owner, token, count, lease end.
pub fn holder_fields(owner: &[u8], token: u64, count: u64, lease_end: i64) -> Vec<Field> {
    vec![
        Field::Str(owner.to_vec()),
        Field::Uint(token),
        Field::Uint(count),
        Field::Sint(lease_end),
    ]
}

/// A whole shared value in encoding version 2: kind, limit, number of holders, the holders.
pub fn shared_fields(limit: u64, holders: &[(&[u8], u64, u64, i64)]) -> Vec<Field> {
    let mut f = vec![
        Field::Uint(KIND_SHARED),
        Field::Uint(limit),
        Field::Uint(holders.len() as u64),
    ];
    for &(owner, token, count, lease_end) in holders {
        f.extend(holder_fields(owner, token, count, lease_end));
    }
    f
}
