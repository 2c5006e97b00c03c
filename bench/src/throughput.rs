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
    let mut next_key = move || {
        // xorshift64: cheap, and the same key sequence shape for every approach.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        format!("lock:{}", rng % 1_000_000)
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
