//! Case 1: uncontended throughput. 50 connections, each with its own owner, lock random keys
//! (`lock:<0..1e6>`) as fast as the server answers, `pipeline` commands in flight per connection.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::recipes::{Lock, Scripts};
use crate::resp::{ok, Conn};

/// What one operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// One acquire of a (most likely free) key.
    Acquire,
    /// One acquire and one release of the same key. With pipeline P > 1 a batch holds P / 2
    /// such pairs, acquire then release adjacent, so P commands are in flight.
    Pair,
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
    const TTL: &str = "60000";
    let owner = uuid::Uuid::new_v4().to_string();
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut key = String::with_capacity(16);
    let mut next_key = move || {
        use std::fmt::Write as _;
        // xorshift64: cheap, and the same key sequence shape for every approach.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        key.clear();
        let _ = write!(key, "lock:{}", rng % 1_000_000);
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

/// Acquires per second of `lock` measured by `redis-benchmark` (its command-line form, keys
/// `lock:__rand_int__` over 1e6, one 36-byte owner), or None when it is not installed.
pub async fn redis_benchmark(
    port: u16,
    scripts: &Scripts,
    lock: Lock,
    pipeline: usize,
    requests: usize,
) -> io::Result<Option<f64>> {
    const OWNER: &str = "6f1c2a4e-3b8d-4f5a-9c7e-1d2b3a4c5d6e";
    const KEY: &str = "lock:__rand_int__";
    let command: Vec<String> = match lock {
        Lock::Relock => vec!["LOCK.ACQUIRE", KEY, OWNER, "60000"],
        Lock::SetNx => vec!["SET", KEY, OWNER, "NX", "PX", "60000"],
        Lock::Hash => vec!["EVALSHA", &scripts.b_acquire, "1", KEY, "60000", OWNER],
    }
    .into_iter()
    .map(String::from)
    .collect();
    let bin = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "50"])
            .args(["-P", &pipeline.to_string(), "-n", &requests.to_string()])
            .args(["-r", "1000000", "--csv"])
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
