//! Case 1: uncontended throughput. 50 connections, each with its own owner, lock random keys
//! (`lock:<0..1e6>`) as fast as the server answers, `pipeline` commands in flight per connection.
//! The refused rows instead try keys that [`hold_all`] gave to another owner beforehand
//! (`lock:<12-digit 0..keys>`, the names redis-benchmark's `__rand_int__` makes), so every
//! acquire is turned away.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relock_protocol::cmd::Acquire;
use relock_protocol::Ask;

use crate::recipes::{Lock, Scripts};
use crate::resp::{ok, words, Conn, Reply};
use crate::stats;

/// The owner of every lock [`hold_all`] takes; no measured client uses it, so theirs are refused.
/// A 36-byte UUID like the clients' own, so a refusal compares owner bytes as it does in use
/// (owners of different lengths would be told apart by their length alone).
const HOLDER: &str = "0b7e5a9c-2d4f-4e81-a3c6-9f1b2d3e4c5a";
/// The refused keys' lifetime: far longer than one measurement, so none frees up during it.
const HOLDER_TTL: u64 = 600_000;
/// The owner of redis-benchmark's acquires.
const OWNER: &str = "6f1c2a4e-3b8d-4f5a-9c7e-1d2b3a4c5d6e";

/// What one operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// One acquire of a (most likely free) key.
    Acquire,
    /// One acquire and one release of the same key. With pipeline P > 1 a batch holds P / 2
    /// such pairs, acquire then release adjacent, so P commands are in flight.
    Pair,
    /// One acquire of a key another owner holds, out of `keys` held by [`hold_all`]: relock
    /// and `SET NX` answer nil, Redisson's script the holder's PTTL.
    Refused { keys: usize },
}

/// The name of refused key `i`: what redis-benchmark makes of `lock:__rand_int__` (`%012`).
pub fn refused_key(i: usize) -> String {
    format!("lock:{i:012}")
}

/// Gives keys `0..keys` (see [`refused_key`]) to [`HOLDER`] with `lock`, on an empty db, and
/// checks that an acquire by another owner is then refused, so a refused-acquire run measures
/// nothing but refusals.
pub async fn hold_all(
    conn: &mut Conn,
    scripts: &Scripts,
    lock: Lock,
    keys: usize,
) -> io::Result<()> {
    const BATCH: usize = 1000;
    conn.ok(&["FLUSHALL", "SYNC"]).await?;
    for start in (0..keys).step_by(BATCH) {
        let end = (start + BATCH).min(keys);
        for i in start..end {
            lock.push_acquire(conn, scripts, &refused_key(i), HOLDER, HOLDER_TTL);
        }
        conn.flush().await?;
        for _ in start..end {
            if !lock.won(&ok(conn.read().await?)?) {
                return Err(io::Error::other(format!(
                    "refused rows, {lock:?}: taking a free key for the holder failed"
                )));
            }
        }
    }
    lock.push_acquire(conn, scripts, &refused_key(0), OWNER, 60_000);
    conn.flush().await?;
    let probe = ok(conn.read().await?)?;
    if !lock.refused(&probe) {
        return Err(io::Error::other(format!(
            "refused rows, {lock:?}: an acquire of a held key answered {probe:?}"
        )));
    }
    Ok(())
}

/// Checks after a refused-acquire run that the db still holds exactly the `keys` locks
/// [`hold_all`] took: an acquire that was not refused (a key outside the held range) would have
/// added one.
pub async fn check_all_refused(conn: &mut Conn, lock: Lock, keys: usize) -> io::Result<()> {
    let n = conn.ok(&["DBSIZE"]).await?.int();
    if n != Some(keys as i64) {
        return Err(io::Error::other(format!(
            "refused rows, {lock:?}: {n:?} keys after the run, expected the {keys} held ones"
        )));
    }
    Ok(())
}

pub struct Load {
    pub connections: usize,
    pub pipeline: usize,
    pub warmup: Duration,
    pub measure: Duration,
}

/// Operations per second of `lock` doing `op` under `load`.
pub async fn run(port: u16, scripts: &Scripts, lock: Lock, op: Op, load: &Load) -> io::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut conns = Vec::new();
    for _ in 0..load.connections {
        conns.push(Conn::connect(port).await?);
    }
    let mut tasks = Vec::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let (done, stop, scripts) = (done.clone(), stop.clone(), scripts.clone());
        let pipeline = load.pipeline;
        tasks.push(tokio::spawn(async move {
            drive(conn, i as u64, &scripts, lock, op, pipeline, &done, &stop).await
        }));
    }
    tokio::time::sleep(load.warmup).await;
    let (n0, t0) = (done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(load.measure).await;
    let (n1, t1) = (done.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.map_err(io::Error::other)??;
    }
    Ok((n1 - n0) as f64 / (t1 - t0).as_secs_f64())
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    mut conn: Conn,
    seed: u64,
    scripts: &Scripts,
    lock: Lock,
    op: Op,
    pipeline: usize,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> io::Result<()> {
    const TTL: u64 = 60_000;
    let owner = uuid::Uuid::new_v4().to_string();
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut key = String::with_capacity(20);
    let mut next_key = move || {
        use std::fmt::Write as _;
        // xorshift64: cheap, and the same key sequence shape for every approach.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        key.clear();
        let _ = match op {
            Op::Refused { keys } => write!(key, "lock:{:012}", rng % keys.max(1) as u64),
            _ => write!(key, "lock:{}", rng % 1_000_000),
        };
        key.clone()
    };
    while !stop.load(Ordering::Relaxed) {
        match (op, pipeline) {
            (Op::Acquire, p) => {
                for _ in 0..p {
                    lock.push_acquire(&mut conn, scripts, &next_key(), &owner, TTL);
                }
                conn.flush().await?;
                for _ in 0..p {
                    ok(conn.read().await?)?;
                }
                done.fetch_add(p as u64, Ordering::Relaxed);
            }
            (Op::Refused { .. }, p) => {
                for _ in 0..p {
                    lock.push_acquire(&mut conn, scripts, &next_key(), &owner, TTL);
                }
                conn.flush().await?;
                for _ in 0..p {
                    let reply = ok(conn.read().await?)?;
                    if !lock.refused(&reply) {
                        return Err(not_refused(lock, &reply));
                    }
                }
                done.fetch_add(p as u64, Ordering::Relaxed);
            }
            (Op::Pair, 1) => {
                let key = next_key();
                lock.push_acquire(&mut conn, scripts, &key, &owner, TTL);
                conn.flush().await?;
                ok(conn.read().await?)?;
                lock.push_release(&mut conn, scripts, &key, &owner, TTL);
                conn.flush().await?;
                ok(conn.read().await?)?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            (Op::Pair, p) => {
                let pairs = p / 2;
                for _ in 0..pairs {
                    let key = next_key();
                    lock.push_acquire(&mut conn, scripts, &key, &owner, TTL);
                    lock.push_release(&mut conn, scripts, &key, &owner, TTL);
                }
                conn.flush().await?;
                for _ in 0..pairs * 2 {
                    ok(conn.read().await?)?;
                }
                done.fetch_add(pairs as u64, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

fn not_refused(lock: Lock, reply: &Reply) -> io::Error {
    io::Error::other(format!(
        "refused rows, {lock:?}: an acquire of a held key answered {reply:?}"
    ))
}

/// Acquires per second of `lock` measured by `redis-benchmark` (its command-line form, keys
/// `lock:__rand_int__` over `keyspace`, one 36-byte owner), with the server's CPU per request
/// ([`redis_benchmark_cpu`]), or None when it is not installed.
pub async fn redis_benchmark(
    port: u16,
    control: &mut Conn,
    scripts: &Scripts,
    lock: Lock,
    pipeline: usize,
    requests: usize,
    keyspace: usize,
) -> io::Result<Option<Run>> {
    const KEY: &str = "lock:__rand_int__";
    let text = |words: &[&str]| words.iter().map(|w| w.to_string()).collect();
    let command: Vec<String> = match lock {
        Lock::Relock => words(&Acquire {
            key: KEY.as_bytes(),
            owner: OWNER.as_bytes(),
            ttl_ms: 60_000,
            ask: Ask::Exclusive,
        }),
        Lock::SetNx => text(&["SET", KEY, OWNER, "NX", "PX", "60000"]),
        Lock::Hash => text(&["EVALSHA", &scripts.b_acquire, "1", KEY, "60000", OWNER]),
    };
    redis_benchmark_cpu(port, control, &command, pipeline, requests, keyspace).await
}

/// One redis-benchmark run: requests per second and the server's CPU µs per request.
pub struct Run {
    pub per_s: f64,
    pub cpu_us: f64,
}

/// How many requests make a redis-benchmark run of about `measure` with `pipeline` in flight
/// (single commands: some 100,000 a second unpipelined, 350,000 pipelined).
pub fn benchmark_requests(measure: Duration, pipeline: usize) -> usize {
    let per_s = if pipeline == 1 { 100_000.0 } else { 350_000.0 };
    (measure.as_secs_f64() * per_s) as usize
}

/// [`redis_benchmark_command`], with the server's CPU time over the run (`INFO cpu` read on
/// `control` before and after) per request; None when redis-benchmark is not installed or
/// fails.
pub async fn redis_benchmark_cpu(
    port: u16,
    control: &mut Conn,
    command: &[String],
    pipeline: usize,
    requests: usize,
    keyspace: usize,
) -> io::Result<Option<Run>> {
    let cpu_before = stats::server_cpu_seconds(control).await?;
    let per_s = redis_benchmark_command(port, command, pipeline, requests, keyspace).await?;
    let Some(per_s) = per_s else {
        return Ok(None);
    };
    let cpu = stats::server_cpu_seconds(control).await? - cpu_before;
    Ok(Some(Run {
        per_s,
        cpu_us: cpu * 1e6 / requests as f64,
    }))
}

/// Requests per second of `command` (one request, `__rand_int__` replaced in each by a random
/// number below `keyspace`) sent by `redis-benchmark -c 50 -P pipeline -n requests`, or None
/// when it is not installed or fails.
pub async fn redis_benchmark_command(
    port: u16,
    command: &[String],
    pipeline: usize,
    requests: usize,
    keyspace: usize,
) -> io::Result<Option<f64>> {
    let command = command.to_vec();
    let bin = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "50"])
            .args(["-P", &pipeline.to_string(), "-n", &requests.to_string()])
            .args(["-r", &keyspace.to_string(), "--csv"])
            .args(&command)
            .output()
    })
    .await
    .map_err(io::Error::other)?;
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(_) | Err(_) => return Ok(None),
    };
    let text = String::from_utf8_lossy(&output.stdout);
    // The last CSV line is `"<command>","<rps>",...`.
    let rps = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.split("\",\"").nth(1))
        .and_then(|v| v.trim_matches('"').parse::<f64>().ok());
    Ok(rps)
}
