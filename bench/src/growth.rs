//! Cases 14 and 15: a shared key's growth and a grant over a million lapsed leases, each on a
//! master and a replica of their own, judged on the longest single step.
//!
//! - 14: `n` shared holders (2,000,000) join one key by pipelined `LOCK.ACQUIRE`s, crossing
//!   every growth of its owner table and arrays, then every 50th leaves (`LOCK.RELEASE`). Each
//!   step is judged on CPU time, which a busy machine does not blur: on the master, the CPU time
//!   its main thread spent on each batch of [`CPU_BATCH`] commands (`/proc/<pid>/schedstat`),
//!   which bounds every single command of the batch; on the replica, the longest `LOCK.APPLY` or
//!   `LOCK.DROP` (`INFO relock` `longest_apply_us`, one command each). The wall-clock figures
//!   (`SLOWLOG`, `LATENCY LATEST`) are reported beside them: they count the time the server
//!   waited for a CPU (before: the table's growth re-hashed every owner inside one acquire,
//!   148-288 ms at 1.5M holders).
//! - 15: a semaphore full of `n` leases that lapse together (and one that lives on), a waiter
//!   that needs the room of all but one of them and one queued behind it: the longest turn of
//!   master and replica (`longest_turn_us`) while the module ends them, when the head is
//!   granted, and whether the two were granted in queue order (before: the head's grant ended
//!   every lapsed lease in one turn, 246,866 µs with 200,000).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use relock_protocol::cmd::{Acquire, Release, Wait};
use relock_protocol::{Ask, Command};

use crate::resp::{Conn, Reply};
use crate::server::Server;
use crate::stats;
use crate::storm;

/// What case 14 measured.
pub struct GrowthResult {
    pub holders: usize,
    /// The most CPU time the master's main thread spent on [`CPU_BATCH`] acquires, µs, and the
    /// holders there were before them (`None`: no `/proc/<pid>/schedstat` here).
    pub acquire_batch_cpu_us: Worst,
    /// The same for [`CPU_BATCH`] releases (the index of the first release of the batch).
    pub release_batch_cpu_us: Worst,
    /// The longest `LOCK.APPLY` or `LOCK.DROP` on the replica, µs of CPU.
    pub longest_apply_us: f64,
    /// The longest command on the master (`LATENCY LATEST`), ms of wall clock (0: none over 1).
    pub longest_command_ms: f64,
    /// The slowest entry of each server's `SLOWLOG` (wall clock, µs): (command, µs), master then
    /// replica.
    pub slowest: [(String, f64); 2],
    /// `INFO commandstats` `usec_per_call` of `LOCK.ACQUIRE` (master) and `LOCK.APPLY`
    /// (replica), wall clock.
    pub usec_per_call: [f64; 2],
    /// Acquires per second, pipelined in batches of [`CPU_BATCH`].
    pub acquires_per_s: f64,
}

/// Commands a CPU-timed batch of case 14 sends: few, so that the most a batch took is close to
/// the most one command took (the first commands after the owner table starts growing each
/// fault in up to 16 fresh pages of the new table, ~0.5 ms), many enough to keep the run short.
pub const CPU_BATCH: usize = 20;

/// What case 15 measured.
pub struct BigGrantResult {
    pub lapsed: usize,
    pub master_turn_us: f64,
    pub replica_turn_us: f64,
    pub replica_apply_us: f64,
    /// From the leases' end to the waiter's grant received, ms.
    pub granted_after_ms: f64,
    /// Whether the head and the waiter behind it were granted in queue order (their tokens).
    pub in_order: bool,
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

/// The server's process id.
async fn pid(conn: &mut Conn) -> io::Result<u32> {
    stats::info_field(conn, "server", "process_id")
        .await?
        .parse()
        .map_err(|_| io::Error::other("INFO server: no process_id"))
}

/// CPU time the main thread of process `pid` has run, µs (`/proc/<pid>/schedstat`, ns on a
/// CPU: the time it waited for one does not count). `None` where the kernel does not say.
fn main_thread_cpu_us(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e3)
}

/// The most CPU time the master spent on one batch of commands, µs, and the index of that
/// batch's first command.
pub type Worst = Option<(f64, usize)>;

/// Sends `commands` in batches of [`CPU_BATCH`], each waited for and each reply checked by
/// `ok`; returns the most CPU time the main thread of `pid` spent on one batch.
async fn timed_batches(
    p: &mut Conn,
    pid: u32,
    commands: impl Iterator<Item = Vec<Vec<u8>>>,
    ok: impl Fn(&Reply) -> bool,
) -> io::Result<Worst> {
    let mut commands = commands.peekable();
    let mut most = Some((0.0f64, 0));
    let mut at = 0;
    while commands.peek().is_some() {
        let before = main_thread_cpu_us(pid);
        let mut sent = 0;
        for args in commands.by_ref().take(CPU_BATCH) {
            p.push(&args);
            sent += 1;
        }
        p.flush().await?;
        for _ in 0..sent {
            let reply = p.read().await?;
            if !ok(&reply) {
                return Err(io::Error::other(format!("growth: {reply:?}")));
            }
        }
        let spent = main_thread_cpu_us(pid).zip(before).map(|(a, b)| a - b);
        most = most
            .zip(spent)
            .map(|(m, s)| if s > m.0 { (s, at) } else { m });
        at += sent;
    }
    Ok(most)
}

/// The slowest `SLOWLOG` entry (command name, µs of wall clock), ("-", 0) if none.
async fn slowest(c: &mut Conn) -> io::Result<(String, f64)> {
    let Reply::Array(entries) = c.ok(&["SLOWLOG", "GET", "1000"]).await? else {
        return Ok(("-".into(), 0.0));
    };
    Ok(entries
        .iter()
        .filter_map(|e| match e {
            Reply::Array(f) if f.len() >= 4 => {
                // The command and its owner (`LOCK.ACQUIRE big o01572900 ...`).
                let name = match &f[3] {
                    Reply::Array(args) => args
                        .iter()
                        .take(3)
                        .map(Reply::text)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                Some((name, f[2].int()? as f64))
            }
            _ => None,
        })
        .fold(("-".into(), 0.0), |a, b| if b.1 > a.1 { b } else { a }))
}

/// `usec_per_call` of `command` in `INFO commandstats`.
async fn usec_per_call(c: &mut Conn, command: &str) -> io::Result<f64> {
    let stats = stats::info_field(c, "commandstats", &format!("cmdstat_{command}")).await?;
    Ok(stats
        .split(',')
        .find_map(|kv| kv.strip_prefix("usec_per_call=")?.parse().ok())
        .unwrap_or(0.0))
}

/// Case 14: `n` holders joining one key, then every 50th leaving.
pub async fn growth(module: &Path, n: usize) -> io::Result<GrowthResult> {
    let (master, _replica, mut c, mut r) = pair(module).await?;
    for conn in [&mut c, &mut r] {
        for (name, value) in [
            ("latency-monitor-threshold", "1"),
            ("slowlog-log-slower-than", "1000"),
            ("slowlog-max-len", "1000"),
        ] {
            conn.ok(&["CONFIG", "SET", name, value]).await?;
        }
    }
    let master_pid = pid(&mut c).await?;
    let mut p = Conn::connect(master.port).await?;
    let owner = |i: usize| format!("o{i:08}");
    let started = Instant::now();
    let acquire_batch_cpu_us = timed_batches(
        &mut p,
        master_pid,
        (0..n).map(|i| {
            Acquire {
                key: b"big",
                owner: owner(i).as_bytes(),
                ttl_ms: 600_000,
                ask: Ask::shared(0),
            }
            .to_args()
        }),
        |reply| matches!(reply, Reply::Int(t) if *t > 0),
    )
    .await?;
    let acquires_per_s = n as f64 / started.elapsed().as_secs_f64();
    let release_batch_cpu_us = timed_batches(
        &mut p,
        master_pid,
        (0..n).step_by(50).map(|i| {
            Release {
                key: b"big",
                owner: owner(i).as_bytes(),
                from: None,
            }
            .to_args()
        }),
        |reply| *reply == Reply::Int(0),
    )
    .await?;
    let longest_command_ms = latency_max_ms(&mut c).await?;
    synced(&mut c).await?;
    Ok(GrowthResult {
        holders: n,
        acquire_batch_cpu_us,
        release_batch_cpu_us,
        longest_apply_us: field(&mut r, "relock_longest_apply_us").await?,
        longest_command_ms,
        slowest: [slowest(&mut c).await?, slowest(&mut r).await?],
        usec_per_call: [
            usec_per_call(&mut c, "LOCK.ACQUIRE").await?,
            usec_per_call(&mut r, "LOCK.APPLY").await?,
        ],
        acquires_per_s,
    })
}

/// Case 15: a grant that needs the room of `n - 1` of `n` lapsed leases.
pub async fn big_grant(module: &Path, n: usize) -> io::Result<BigGrantResult> {
    let n = n.min(storm::MAX_STORM);
    let (master, _replica, mut c, mut r) = pair(module).await?;
    let end = storm::restore_storm(&mut c, "sem", n).await?;
    let limit = storm::semaphore_limit(n);
    let wait = |owner: &'static [u8], permits: usize| {
        Wait {
            key: b"sem",
            owner,
            ttl_ms: 600_000,
            timeout_ms: 0,
            ask: Ask::Shared {
                limit,
                permits: u32::try_from(permits).unwrap_or(u32::MAX),
            },
        }
        .to_args()
    };
    let mut waiter = Conn::connect(master.port).await?;
    waiter.push(&wait(b"big", n - 1));
    waiter.flush().await?;
    // One more behind it, queued once the head is (one permit: it would fit at once, were it
    // not for the queue).
    while field(&mut c, "relock_waiters").await? < 1.0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut behind = Conn::connect(master.port).await?;
    behind.push(&wait(b"small", 1));
    behind.flush().await?;
    let reply = tokio::time::timeout(Duration::from_secs(300), waiter.read())
        .await
        .map_err(|_| io::Error::other("big grant: not granted within 300 s"))??;
    let granted_after_ms = storm::unix_ms() - end as f64;
    let Reply::Int(first) = reply else {
        return Err(io::Error::other(format!("big grant: {reply:?}")));
    };
    let second = tokio::time::timeout(Duration::from_secs(300), behind.read())
        .await
        .map_err(|_| io::Error::other("big grant: the second not granted within 300 s"))??;
    let Reply::Int(second) = second else {
        return Err(io::Error::other(format!(
            "big grant, the second: {second:?}"
        )));
    };
    synced(&mut c).await?;
    Ok(BigGrantResult {
        lapsed: n,
        master_turn_us: field(&mut c, "relock_longest_turn_us").await?,
        replica_turn_us: field(&mut r, "relock_longest_turn_us").await?,
        replica_apply_us: field(&mut r, "relock_longest_apply_us").await?,
        granted_after_ms,
        in_order: first < second,
    })
}
