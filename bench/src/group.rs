//! Case 12: taking 8 locks together. relock's `LOCK.MACQUIRE` + `LOCK.MRELEASE` (all or nothing,
//! 2 round trips), 8 pipelined `LOCK.ACQUIRE`s + 8 `LOCK.RELEASE`s (2 round trips, not atomic:
//! a partial group is possible and must be given back), and a Redisson-style MultiLock: its
//! lock script on each key in turn, then its unlock script on each (16 round trips).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use relock_protocol::cmd::{MAcquire, MRelease};
use relock_protocol::Command;

use crate::recipes::{channel, Lock, Scripts};
use crate::resp::{ok, Conn};
use crate::throughput::Load;

/// Keys per group.
pub const KEYS: usize = 8;

/// How a group of keys is taken and given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Macquire,
    Pipelined,
    MultiLock,
}

/// Groups taken and given back per second, each connection its own owner, on random keys of
/// `lock:0..1e6` (8 distinct per group), hash-tagged so that a group shares a slot.
pub async fn groups(port: u16, way: Way, scripts: &Scripts, load: &Load) -> io::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for seed in 0..load.connections {
        let mut conn = Conn::connect(port).await?;
        let (done, stop, scripts) = (done.clone(), stop.clone(), scripts.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("bench-group-{seed:04}-0000-0000-000000000000");
            let mut rng = (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            while !stop.load(Ordering::Relaxed) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let base = rng % 1_000_000;
                let keys: Vec<String> =
                    (0..KEYS).map(|i| format!("{{g{base}}}:lock:{i}")).collect();
                run_group(&mut conn, way, &scripts, &keys, &owner).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), io::Error>(())
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

async fn run_group(
    conn: &mut Conn,
    way: Way,
    scripts: &Scripts,
    keys: &[String],
    owner: &str,
) -> io::Result<()> {
    match way {
        Way::Macquire => {
            let group: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
            conn.push(
                &MAcquire {
                    keys: group.clone(),
                    owner: owner.as_bytes(),
                    ttl_ms: 60_000,
                }
                .to_args(),
            );
            conn.push(
                &MRelease {
                    keys: group,
                    owner: owner.as_bytes(),
                    from: None,
                }
                .to_args(),
            );
            conn.flush().await?;
            ok(conn.read().await?)?;
            ok(conn.read().await?)?;
        }
        Way::Pipelined => {
            for key in keys {
                Lock::Relock.push_acquire(conn, scripts, key, owner, 60_000);
            }
            conn.flush().await?;
            for _ in keys {
                ok(conn.read().await?)?;
            }
            for key in keys {
                Lock::Relock.push_release(conn, scripts, key, owner, 60_000);
            }
            conn.flush().await?;
            for _ in keys {
                ok(conn.read().await?)?;
            }
        }
        Way::MultiLock => {
            for key in keys {
                conn.push(&["EVALSHA", &scripts.b_acquire, "1", key, "60000", owner]);
                conn.flush().await?;
                ok(conn.read().await?)?;
            }
            for key in keys {
                let ch = channel(key);
                conn.push(&[
                    "EVALSHA",
                    &scripts.b_release,
                    "2",
                    key,
                    &ch,
                    "0",
                    "60000",
                    owner,
                ]);
                conn.flush().await?;
                ok(conn.read().await?)?;
            }
        }
    }
    Ok(())
}
