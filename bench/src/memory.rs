//! Case 4: memory per held lock. `n` locks on keys `lock:00000001`.., 36-byte UUID owners,
//! ttl 600000 ms, written with recipe A (a string), recipe B (a hash) and relock.

use std::io;

use crate::recipes::{Lock, Scripts};
use crate::resp::{ok, Conn};
use crate::stats;

pub struct MemoryResult {
    /// `MEMORY USAGE lock:00000001 SAMPLES 0`.
    pub usage_one: f64,
    /// `used_memory` after - before, divided by `n`.
    pub per_lock: f64,
}

pub async fn run(
    conn: &mut Conn,
    scripts: &Scripts,
    lock: Lock,
    n: usize,
) -> io::Result<MemoryResult> {
    const TTL: u64 = 600_000;
    const BATCH: usize = 1000;
    conn.ok(&["FLUSHALL", "SYNC"]).await?;
    let before = used_memory(conn).await?;
    let mut i = 1;
    while i <= n {
        let end = (i + BATCH).min(n + 1);
        for j in i..end {
            let owner = uuid::Uuid::new_v4().to_string();
            lock.push_acquire(conn, scripts, &format!("lock:{j:08}"), &owner, TTL);
        }
        conn.flush().await?;
        for _ in i..end {
            if !lock.won(&ok(conn.read().await?)?) {
                return Err(io::Error::other(
                    "memory case: acquire of a free key failed",
                ));
            }
        }
        i = end;
    }
    let after = used_memory(conn).await?;
    let usage_one = conn
        .ok(&["MEMORY", "USAGE", "lock:00000001", "SAMPLES", "0"])
        .await?
        .int()
        .unwrap_or(0) as f64;
    conn.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(MemoryResult {
        usage_one,
        per_lock: (after as f64 - before as f64) / n as f64,
    })
}

async fn used_memory(conn: &mut Conn) -> io::Result<i64> {
    stats::info_field(conn, "memory", "used_memory")
        .await?
        .parse()
        .map_err(|_| io::Error::other("INFO memory has no used_memory"))
}
