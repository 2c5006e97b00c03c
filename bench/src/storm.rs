//! Case 13: a lease storm. A semaphore is full with `n` shared leases that end in the same
//! millisecond and one that lives on, and one waiter is queued for a permit. When the leases end,
//! the waiter must be granted within a few ms of the end (not after every lapsed lease is
//! removed), and the module removes the lapsed ones in bounded turns: the longest turn it starts
//! by itself (`INFO relock` `longest_turn_us`, CPU time of the server's main thread) stays small.
//!
//! The value is put in place by one `RESTORE` of a payload built here (quicker than `n`
//! commands, and the only way to make `n` leases end in the same millisecond), on a server of
//! its own, so that `longest_turn_us` counts the storm's turns only.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relock_protocol::cmd::{Acquire, Wait};
use relock_protocol::{Ask, Command};

use crate::resp::{Conn, Reply};
use crate::server::Server;
use crate::stats;

/// What one storm measured.
pub struct StormResult {
    /// `longest_turn_us` once every lapsed lease was removed.
    pub longest_turn_us: f64,
    /// From the leases' end (the last ms they count) to the waiter's grant received, ms.
    pub grant_delay_ms: f64,
    /// From the leases' end until every lapsed lease was removed, ms.
    pub removed_after_ms: f64,
    /// The longest `PING` round trip while the storm was removed, ms.
    pub worst_ping_ms: f64,
}

/// Unix time in ms, with the µs as a fraction.
pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Leases that may end in a storm: a semaphore's limit is at most 10^6, and one lease lives on.
pub const MAX_STORM: usize = 999_999;

/// The limit of the semaphore of a storm of `n` leases (at most [`MAX_STORM`]): room for them
/// and the one that lives on.
pub fn semaphore_limit(n: usize) -> u32 {
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

/// One storm of `n` lease ends (at most [`MAX_STORM`]) on a server of its own.
pub async fn lease_storm(module: &Path, n: usize) -> io::Result<StormResult> {
    const KEY: &str = "storm";
    let n = n.min(MAX_STORM);
    let server = Server::start(module).map_err(io::Error::other)?;
    let mut control = Conn::connect(server.port).await?;
    let end = restore_storm(&mut control, KEY, n).await?;
    let mut waiter = Conn::connect(server.port).await?;
    waiter.push(
        &Wait {
            key: KEY.as_bytes(),
            owner: b"waiter",
            ttl_ms: 600_000,
            timeout_ms: 0,
            ask: Ask::shared(semaphore_limit(n)),
        }
        .to_args(),
    );
    waiter.flush().await?;
    while stats::info_field(&mut control, "relock", "relock_waiters").await? != "1" {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let reply = tokio::time::timeout(Duration::from_secs(60), waiter.read())
        .await
        .map_err(|_| io::Error::other("lease storm: the waiter was not granted within 60 s"))??;
    let granted_at = unix_ms();
    if !matches!(reply, Reply::Int(_)) {
        return Err(io::Error::other(format!(
            "lease storm: LOCK.WAIT replied {reply:?}"
        )));
    }
    // The rest of the storm: ping until only the long lease and the waiter's are left.
    let mut worst_ping = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let sent = Instant::now();
        control.ok(&["PING"]).await?;
        worst_ping = worst_ping.max(sent.elapsed());
        let holds = stats::info_field(&mut control, "relock", "relock_holds").await?;
        if holds == "2" {
            break;
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "lease storm: {holds} holds left after 120 s"
            )));
        }
        // Not much more often: on a small machine the pings take CPU from the server.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let removed_at = unix_ms();
    let turn = stats::info_field(&mut control, "relock", "relock_longest_turn_us").await?;
    let longest_turn_us = turn
        .parse()
        .map_err(|_| io::Error::other(format!("INFO relock longest_turn_us: {turn:?}")))?;
    Ok(StormResult {
        longest_turn_us,
        grant_delay_ms: granted_at - end as f64,
        removed_after_ms: removed_at - end as f64,
        worst_ping_ms: worst_ping.as_secs_f64() * 1e3,
    })
}

/// Puts at `key` a semaphore (LIMIT n + 1) full with `n` leases (at most [`MAX_STORM`]) that
/// end in the same millisecond and one that ends ten minutes later, by one `RESTORE`; returns
/// when the `n` end (Unix ms).
pub async fn restore_storm(control: &mut Conn, key: &str, n: usize) -> io::Result<i64> {
    let format = Format::of(control).await?;
    let limit = u64::from(semaphore_limit(n));
    // Leases end far enough out to build and restore the value (well under 1 s per million in a
    // release build); a slower machine builds it again with twice the time.
    let mut lead_ms = 1_000 + (n / 1_000) as i64;
    loop {
        let end = unix_ms() as i64 + lead_ms;
        let payload = format.shared(limit, n, end);
        let reply = control
            .cmd(&[b"RESTORE".as_slice(), key.as_bytes(), b"0", &payload])
            .await?;
        if reply != Reply::Status("OK".into()) {
            return Err(io::Error::other(format!("lease storm: RESTORE: {reply:?}")));
        }
        if end as f64 - unix_ms() > 300.0 {
            return Ok(end);
        }
        control.ok(&["DEL", key]).await?;
        lead_ms *= 2;
        if lead_ms > 120_000 {
            return Err(io::Error::other(
                "lease storm: the value took too long to build",
            ));
        }
    }
}

/// What a real `DUMP` of a lock says about the server: the module id and the RDB version.
struct Format {
    module_id: u64,
    rdb_version: [u8; 2],
}

/// RDB value type of a module value (`RDB_TYPE_MODULE_2`) and the opcodes inside one.
const TYPE_MODULE_2: u8 = 7;
const OP_EOF: u64 = 0;
const OP_UINT: u64 = 2;
const OP_STRING: u64 = 5;
/// A shared value in encoding version 2: kind 1, limit, holders, then per holder its owner,
/// token, count and lease end.
const ENCODING: u64 = 2;
const KIND_SHARED: u64 = 1;

impl Format {
    /// Learns the format from a `DUMP` of a throw-away lock.
    async fn of(c: &mut Conn) -> io::Result<Format> {
        let sample = Acquire {
            key: b"storm:sample",
            owner: b"o",
            ttl_ms: 100_000,
            ask: Ask::Exclusive,
        };
        c.ok(&sample.to_args()).await?;
        let dump = match c.ok(&["DUMP", "storm:sample"]).await? {
            Reply::Bulk(b) => b,
            other => return Err(io::Error::other(format!("DUMP of a lock: {other:?}"))),
        };
        c.ok(&["DEL", "storm:sample"]).await?;
        let n = dump.len();
        if n < 20 || dump[0] != TYPE_MODULE_2 || dump[1] != 0x81 {
            return Err(io::Error::other(format!("DUMP of a lock: {dump:?}")));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&dump[2..10]);
        Ok(Format {
            module_id: u64::from_be_bytes(id),
            rdb_version: [dump[n - 10], dump[n - 9]],
        })
    }

    /// A shared value of limit `limit` with `n` holders whose leases end at `end` (Unix ms)
    /// and one more whose lease ends ten minutes later.
    fn shared(&self, limit: u64, n: usize, end: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 * (n + 1) + 64);
        out.push(TYPE_MODULE_2);
        len(&mut out, (self.module_id & !1023) | ENCODING);
        for v in [KIND_SHARED, limit, n as u64 + 1] {
            uint(&mut out, v);
        }
        let mut owner = Vec::with_capacity(16);
        for i in 0..=n {
            owner.clear();
            let lease_end = if i < n {
                owner.extend_from_slice(format!("o{i:07}").as_bytes());
                end
            } else {
                owner.extend_from_slice(b"long");
                end + 600_000
            };
            len(&mut out, OP_STRING);
            len(&mut out, owner.len() as u64);
            out.extend_from_slice(&owner);
            uint(&mut out, 1_000_000 + i as u64);
            uint(&mut out, 1);
            // RedisModule_SaveSigned stores the bits as an unsigned field.
            uint(&mut out, lease_end as u64);
        }
        len(&mut out, OP_EOF);
        out.extend_from_slice(&self.rdb_version);
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

fn uint(out: &mut Vec<u8>, v: u64) {
    len(out, OP_UINT);
    len(out, v);
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

/// CRC-64/Jones, reflected, as Redis computes `DUMP` checksums (a table, a byte at a time: a
/// million holders make a payload of tens of MB).
fn crc64(data: &[u8]) -> u64 {
    let mut table = [0u64; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut crc = i as u64;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
        *slot = crc;
    }
    data.iter().fold(0u64, |crc, &b| {
        table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_redis() {
        // Redis's own check value for "123456789" (src/crc64.c).
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }
}
