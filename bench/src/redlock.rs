//! Case 5: a Redlock client over N relock masters: acquire + release latency, one client, one
//! lock at a time.
//!
//! Two clients are measured: `relock-client` (the workspace's Redlock crate, what users run) and
//! a minimal one written here over the bench's raw RESP connections (`LOCK.ACQUIRE` to all N
//! masters concurrently with `join_all`, quorum N / 2 + 1 with validity left, then
//! `LOCK.RELEASE` to all N concurrently), which shows what the protocol itself costs.

use std::io;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use relock_protocol::cmd::{Acquire, Release};
use relock_protocol::{Ask, Command};

use crate::resp::{Conn, Reply};

/// The Redlock clients case 5 measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// `relock_client::Relock::try_acquire` + `Lock::release`.
    Client,
    /// [`Redlock`] below.
    Minimal,
}

impl Implementation {
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Client => "relock-client",
            Implementation::Minimal => "minimal bench Redlock",
        }
    }
}

pub struct Redlock {
    masters: Vec<Conn>,
    owner: String,
}

impl Redlock {
    pub async fn connect(ports: &[u16]) -> io::Result<Redlock> {
        let mut masters = Vec::new();
        for &p in ports {
            masters.push(Conn::connect(p).await?);
        }
        Ok(Redlock {
            masters,
            owner: uuid::Uuid::new_v4().to_string(),
        })
    }

    /// Tries once to lock `key` for `ttl`; true when a quorum granted it with validity left.
    pub async fn lock(&mut self, key: &str, ttl: Duration) -> io::Result<bool> {
        let start = Instant::now();
        let args = Acquire {
            key: key.as_bytes(),
            owner: self.owner.as_bytes(),
            ttl_ms: ttl.as_millis() as u64,
            ask: Ask::Exclusive,
        }
        .to_args();
        let replies = join_all(self.masters.iter_mut().map(|m| m.cmd(&args))).await;
        let won = replies
            .iter()
            .filter(|r| matches!(r, Ok(Reply::Int(_))))
            .count();
        // Validity = ttl - elapsed - clock drift (1% + 2 ms), never negative.
        let drift = ttl / 100 + Duration::from_millis(2);
        let validity = ttl.saturating_sub(start.elapsed()).saturating_sub(drift);
        if won > self.masters.len() / 2 && !validity.is_zero() {
            return Ok(true);
        }
        self.unlock(key).await?;
        Ok(false)
    }

    pub async fn unlock(&mut self, key: &str) -> io::Result<()> {
        let args = Release {
            key: key.as_bytes(),
            owner: self.owner.as_bytes(),
            from: None,
        }
        .to_args();
        let replies = join_all(self.masters.iter_mut().map(|m| m.cmd(&args))).await;
        for r in replies {
            r?;
        }
        Ok(())
    }
}

/// Acquire + release latencies (ns) over `ports`, for `measure` after `warmup`.
pub async fn latency(
    implementation: Implementation,
    ports: &[u16],
    warmup: Duration,
    measure: Duration,
) -> io::Result<hdrhistogram::Histogram<u64>> {
    match implementation {
        Implementation::Client => client_latency(ports, warmup, measure).await,
        Implementation::Minimal => minimal_latency(ports, warmup, measure).await,
    }
}

async fn client_latency(
    ports: &[u16],
    warmup: Duration,
    measure: Duration,
) -> io::Result<hdrhistogram::Histogram<u64>> {
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    // The default options but a node timeout a busy machine does not reach (the default 100 ms
    // was, with builds running beside the bench): a round that times out would end the run.
    let options = relock_client::Options {
        node_timeout: Duration::from_secs(2),
        ..relock_client::Options::default()
    };
    let client = relock_client::Relock::with_options(&urls, options).map_err(io::Error::other)?;
    let mut hist = crate::stats::histogram();
    let ttl = Duration::from_secs(10);
    // Keys of their own per run: a key of an earlier run that still stands on some master
    // (released there in the background) must not meet this run.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < warmup + measure {
        let key = format!("redlock:c:{run}:{i}");
        i += 1;
        let t = Instant::now();
        let lock = client
            .try_acquire(&key, ttl)
            .await
            .map_err(io::Error::other)?;
        lock.release().await.map_err(io::Error::other)?;
        if start.elapsed() >= warmup {
            let _ = hist.record(t.elapsed().as_nanos().max(1) as u64);
        }
    }
    Ok(hist)
}

async fn minimal_latency(
    ports: &[u16],
    warmup: Duration,
    measure: Duration,
) -> io::Result<hdrhistogram::Histogram<u64>> {
    let mut client = Redlock::connect(ports).await?;
    let mut hist = crate::stats::histogram();
    let ttl = Duration::from_secs(10);
    let run = uuid::Uuid::new_v4().simple().to_string();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < warmup + measure {
        let key = format!("redlock:{run}:{i}");
        i += 1;
        let t = Instant::now();
        if !client.lock(&key, ttl).await? {
            return Err(io::Error::other("Redlock lost a quorum on a free key"));
        }
        client.unlock(&key).await?;
        if start.elapsed() >= warmup {
            let _ = hist.record(t.elapsed().as_nanos().max(1) as u64);
        }
    }
    Ok(hist)
}
