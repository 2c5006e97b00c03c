//! Cases 14 and 15: a shared key's growth and a grant over a million lapsed leases, each on a
//! master and a replica of their own, judged on the longest single step.
//!
//! - 14: `n` shared holders (2,000,000) join one key by pipelined `LOCK.ACQUIRE`s, crossing
//!   every growth of its owner table and arrays. The longest `LOCK.APPLY` the replica ran
//!   (`INFO relock` `longest_apply_us`, CPU time of its main thread) and the longest command on
//!   the master (`LATENCY LATEST`, wall clock, threshold 1 ms) say whether any step did O(H)
//!   work (before: the table's growth re-hashed every owner inside one acquire, 148-288 ms at
//!   1.5M holders).
//! - 15: a semaphore full of `n` leases that lapse together (and one that lives on), and a
//!   waiter that needs the room of all but one of them: the longest turn of master and replica
//!   (`longest_turn_us`) while the module ends them, and when the waiter is granted (before:
//!   its grant ended every lapsed lease in one turn, 246,866 µs with 200,000).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::resp::{Conn, Reply};
use crate::server::Server;
use crate::stats;
use crate::storm;

/// What case 14 measured.
pub struct GrowthResult {
    pub holders: usize,
    /// The longest `LOCK.APPLY` on the replica, µs of CPU.
    pub longest_apply_us: f64,
    /// The longest command on the master (`LATENCY LATEST`), ms of wall clock (0: none over 1).
    pub longest_command_ms: f64,
    /// Acquires per second, pipelined.
    pub acquires_per_s: f64,
}

/// What case 15 measured.
pub struct BigGrantResult {
    pub lapsed: usize,
    pub master_turn_us: f64,
    pub replica_turn_us: f64,
    pub replica_apply_us: f64,
    /// From the leases' end to the waiter's grant received, ms.
    pub granted_after_ms: f64,
}

/// A master and its replica, the replica's link up.
async fn pair(module: &Path) -> io::Result<(Server, Server, Conn, Conn)> {
    let master = Server::start(module).map_err(io::Error::other)?;
    let replica = Server::start(module).map_err(io::Error::other)?;
    let c = Conn::connect(master.port).await?;
    let mut r = Conn::connect(replica.port).await?;
    r.ok(&["REPLICAOF", "127.0.0.1", &master.port.to_string()])
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats::info_field(&mut r, "replication", "master_link_status").await? != "up" {
        if Instant::now() > deadline {
            return Err(io::Error::other("the replica did not connect"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((master, replica, c, r))
}

async fn field(conn: &mut Conn, name: &str) -> io::Result<f64> {
    let v = stats::info_field(conn, "relock", name).await?;
    v.parse()
        .map_err(|_| io::Error::other(format!("INFO relock {name}: {v:?}")))
}

/// Waits until the replica acknowledged everything the master sent.
async fn synced(c: &mut Conn) -> io::Result<()> {
    c.ok(&["WAIT", "1", "120000"]).await?;
    Ok(())
}

/// The longest `command` event of `LATENCY LATEST`, ms.
async fn latency_max_ms(c: &mut Conn) -> io::Result<f64> {
    let Reply::Array(events) = c.ok(&["LATENCY", "LATEST"]).await? else {
        return Ok(0.0);
    };
    Ok(events
        .iter()
        .filter_map(|e| match e {
            Reply::Array(f) if f.len() >= 4 && f[0].text().ends_with("command") => f[3].int(),
            _ => None,
        })
        .max()
        .unwrap_or(0) as f64)
}

/// Case 14: `n` holders joining one key.
pub async fn growth(module: &Path, n: usize) -> io::Result<GrowthResult> {
    let (_master, _replica, mut c, mut r) = pair(module).await?;
    c.ok(&["CONFIG", "SET", "latency-monitor-threshold", "1"])
        .await?;
    let mut p = Conn::connect(_master.port).await?;
    const BATCH: usize = 10_000;
    let started = Instant::now();
    for start in (0..n).step_by(BATCH) {
        let end = (start + BATCH).min(n);
        for i in start..end {
            p.push(&[
                "LOCK.ACQUIRE",
                "big",
                &format!("o{i:08}"),
                "600000",
                "SHARED",
            ]);
        }
        p.flush().await?;
        for _ in start..end {
            if !matches!(p.read().await?, Reply::Int(t) if t > 0) {
                return Err(io::Error::other("growth: an acquire was refused"));
            }
        }
    }
    let acquires_per_s = n as f64 / started.elapsed().as_secs_f64();
    let longest_command_ms = latency_max_ms(&mut c).await?;
    synced(&mut c).await?;
    Ok(GrowthResult {
        holders: n,
        longest_apply_us: field(&mut r, "relock_longest_apply_us").await?,
        longest_command_ms,
        acquires_per_s,
    })
}

/// Case 15: a grant that needs the room of `n - 1` of `n` lapsed leases.
pub async fn big_grant(module: &Path, n: usize) -> io::Result<BigGrantResult> {
    let n = n.min(storm::MAX_STORM);
    let (master, _replica, mut c, mut r) = pair(module).await?;
    let end = storm::restore_storm(&mut c, "sem", n).await?;
    let limit = (n + 1).to_string();
    let permits = (n - 1).to_string();
    let mut waiter = Conn::connect(master.port).await?;
    waiter.push(&[
        "LOCK.WAIT",
        "sem",
        "big",
        "600000",
        "0",
        "SHARED",
        "LIMIT",
        &limit,
        "PERMITS",
        &permits,
    ]);
    waiter.flush().await?;
    let reply = tokio::time::timeout(Duration::from_secs(300), waiter.read())
        .await
        .map_err(|_| io::Error::other("big grant: not granted within 300 s"))??;
    let granted_after_ms = storm::unix_ms() - end as f64;
    if !matches!(reply, Reply::Int(_)) {
        return Err(io::Error::other(format!("big grant: {reply:?}")));
    }
    synced(&mut c).await?;
    Ok(BigGrantResult {
        lapsed: n,
        master_turn_us: field(&mut c, "relock_longest_turn_us").await?,
        replica_turn_us: field(&mut r, "relock_longest_turn_us").await?,
        replica_apply_us: field(&mut r, "relock_longest_apply_us").await?,
        granted_after_ms,
    })
}
