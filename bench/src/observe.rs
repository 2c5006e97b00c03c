//! Case 16: how soon `LOCK.OBSERVE`'s observers hear of a release. `n` observers (1, 100,
//! 10,000) block on one key, one `LOCK.RELEASE` ends the hold, and each observer's wake-up
//! latency is its nil reply received - the release sent (same process clock). The release
//! answers every observer in turns of at most `TURN_BUDGET`; the longest turn the module started
//! by itself (`INFO relock` `longest_turn_us`, CPU time of the server's main thread) is
//! reported beside the latencies. On a server of its own, so that the turn is the wake-ups'.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use relock_protocol::args::Listing;
use relock_protocol::cmd::{Acquire, Observe, Release, Stats};
use relock_protocol::{Ask, Command};

use crate::resp::{Conn, Reply};
use crate::server::Server;
use crate::stats;

const KEY: &[u8] = b"observed";
const HOLDER: &[u8] = b"holder";

/// What the rounds with `n` observers measured.
pub struct ObserveResult {
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The last observer's wake-up, the median over rounds, ms.
    pub last_ms: f64,
    pub longest_turn_us: f64,
    /// Wake-ups measured (observers × rounds).
    pub samples: u64,
}

/// `rounds` releases, each observed by `n` observers, on a server of its own.
pub async fn wake_ups(module: &Path, n: usize, rounds: usize) -> io::Result<ObserveResult> {
    let server = Server::start(module).map_err(io::Error::other)?;
    let mut control = Conn::connect(server.port).await?;
    let mut observers = Vec::with_capacity(n);
    for _ in 0..n {
        observers.push(Conn::connect(server.port).await?);
    }
    let mut hist = stats::histogram();
    let mut lasts = Vec::new();
    let reset = Stats {
        what: Some(Listing::Reset),
    };
    control.ok(&reset.to_args()).await?;
    let hold = Acquire {
        key: KEY,
        owner: HOLDER,
        ttl_ms: 600_000,
        ask: Ask::Exclusive,
    }
    .to_args();
    // Built once, outside the span measured (the release sent to the wake-ups).
    let release = Release {
        key: KEY,
        owner: HOLDER,
        from: None,
    }
    .to_args();
    for round in 0..rounds {
        let token = control
            .ok(&hold)
            .await?
            .int()
            .and_then(|t| u64::try_from(t).ok())
            .ok_or_else(|| io::Error::other("observe: LOCK.ACQUIRE gave no token"))?;
        let observe = Observe {
            key: KEY,
            known_token: token,
            timeout_ms: 0,
        }
        .to_args();
        let mut tasks = Vec::with_capacity(n);
        for mut conn in observers.drain(..) {
            let observe = observe.clone();
            tasks.push(tokio::spawn(async move {
                conn.push(&observe);
                conn.flush().await?;
                let reply = conn.read().await?;
                io::Result::Ok((conn, Instant::now(), reply))
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let want = n.to_string();
        while stats::info_field(&mut control, "relock", "relock_observers").await? != want {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "observe: {n} observers never all blocked (round {round})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let sent = Instant::now();
        control.ok(&release).await?;
        let mut last = Duration::ZERO;
        for task in tasks {
            let (conn, at, reply) = task.await.map_err(io::Error::other)??;
            if !matches!(reply, Reply::Nil) {
                return Err(io::Error::other(format!(
                    "observe: an observer was answered {reply:?}, not nil"
                )));
            }
            let took = at.saturating_duration_since(sent);
            last = last.max(took);
            let _ = hist.record(took.as_nanos().max(1) as u64);
            observers.push(conn);
        }
        lasts.push(last.as_secs_f64() * 1e3);
    }
    let longest_turn_us = stats::info_field(&mut control, "relock", "relock_longest_turn_us")
        .await?
        .parse()
        .unwrap_or(f64::NAN);
    Ok(ObserveResult {
        p50_ms: stats::quantile_ms(&hist, 0.50),
        p99_ms: stats::quantile_ms(&hist, 0.99),
        last_ms: stats::median(&lasts),
        longest_turn_us,
        samples: hist.len(),
    })
}
