//! Cases 2 and 3: waiting for a held lock. The ways to wait: relock's `LOCK.WAIT`, recipe C
//! (spin on recipe A with exponential back-off) and recipe D (recipe B plus a pub/sub channel).
//!
//! Case 2 (contended hand-off): K + 1 clients, each with its own connection(s), take turns on
//! one key and hold it for ~0 ms. So that a hand-off always goes to *another* client (a spinning
//! client that just released would otherwise win its own lock back at once), a client that
//! released rejoins the contest once the next holder is granted, and a holder releases once the
//! previous holder has rejoined (its `LOCK.WAIT` is sent; its first spin attempt failed; it is
//! subscribed and its first attempt failed). Hand-off latency = the holder sending its release
//! -> the next holder receiving its grant.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relock_protocol::cmd::Wait as LockWait;
use relock_protocol::{Ask, Command};
use tokio::sync::watch;

use crate::recipes::{channel, Lock, Scripts};
use crate::resp::{ok, Conn, Reply};
use crate::stats;

/// An approach to waiting for a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `LOCK.WAIT key owner ttl 0`, `LOCK.RELEASE`.
    Relock,
    /// C: recipe A retried with back-off 1, 2, 4, ... 128 ms.
    Spin,
    /// D: recipe B; on failure subscribe to the lock's channel and retry on each message, or
    /// when the PTTL the failed attempt returned has passed.
    PubSub,
}

impl Wait {
    pub fn lock(self) -> Lock {
        match self {
            Wait::Relock => Lock::Relock,
            Wait::Spin => Lock::SetNx,
            Wait::PubSub => Lock::Hash,
        }
    }
}

/// One waiting client: a command connection, and for D a subscriber connection.
pub struct Client {
    conn: Conn,
    sub: Option<Conn>,
    owner: String,
}

impl Client {
    pub async fn connect(port: u16, wait: Wait) -> io::Result<Client> {
        Ok(Client {
            conn: Conn::connect(port).await?,
            sub: match wait {
                Wait::PubSub => Some(Conn::connect(port).await?),
                _ => None,
            },
            owner: uuid::Uuid::new_v4().to_string(),
        })
    }

    /// Blocks until this client holds `key`. `waiting` is called once, as soon as the client
    /// is in line (the lock was not free).
    pub async fn acquire(
        &mut self,
        wait: Wait,
        s: &Scripts,
        key: &str,
        ttl_ms: u64,
        waiting: &mut (dyn FnMut() + Send),
    ) -> io::Result<()> {
        let lock = wait.lock();
        match wait {
            Wait::Relock => {
                self.conn.push(
                    &LockWait {
                        key: key.as_bytes(),
                        owner: self.owner.as_bytes(),
                        ttl_ms,
                        timeout_ms: 0,
                        ask: Ask::Exclusive,
                    }
                    .to_args(),
                );
                self.conn.flush().await?;
                waiting();
                match ok(self.conn.read().await?)? {
                    Reply::Int(_) => Ok(()),
                    other => Err(io::Error::other(format!("LOCK.WAIT replied {other:?}"))),
                }
            }
            Wait::Spin => {
                let mut backoff = Duration::from_millis(1);
                let mut first = true;
                loop {
                    lock.push_acquire(&mut self.conn, s, key, &self.owner, ttl_ms);
                    self.conn.flush().await?;
                    if lock.won(&ok(self.conn.read().await?)?) {
                        return Ok(());
                    }
                    if std::mem::take(&mut first) {
                        waiting();
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(128));
                }
            }
            Wait::PubSub => {
                lock.push_acquire(&mut self.conn, s, key, &self.owner, ttl_ms);
                self.conn.flush().await?;
                if lock.won(&ok(self.conn.read().await?)?) {
                    return Ok(());
                }
                let sub = self
                    .sub
                    .as_mut()
                    .ok_or_else(|| io::Error::other("no sub"))?;
                let chan = channel(key);
                sub.push(&["SUBSCRIBE", &chan]);
                sub.flush().await?;
                // Skip what is left of the previous wait: its UNSUBSCRIBE confirmation and
                // messages that arrived before it.
                loop {
                    if let Reply::Array(items) = ok(sub.read().await?)? {
                        if items.first().map(Reply::text).as_deref() == Some("subscribe") {
                            break;
                        }
                    }
                }
                waiting();
                loop {
                    lock.push_acquire(&mut self.conn, s, key, &self.owner, ttl_ms);
                    self.conn.flush().await?;
                    let now = ok(self.conn.read().await?)?;
                    if lock.won(&now) {
                        // Redisson unsubscribes without waiting for the confirmation.
                        sub.push(&["UNSUBSCRIBE", &chan]);
                        sub.flush().await?;
                        return Ok(());
                    }
                    let pttl = now.int().unwrap_or(-1);
                    let message = sub.read();
                    if pttl >= 0 {
                        let _ =
                            tokio::time::timeout(Duration::from_millis(pttl as u64), message).await;
                    } else {
                        message.await?;
                    }
                }
            }
        }
    }

    pub async fn release(
        &mut self,
        wait: Wait,
        s: &Scripts,
        key: &str,
        ttl_ms: u64,
    ) -> io::Result<()> {
        wait.lock()
            .push_release(&mut self.conn, s, key, &self.owner, ttl_ms);
        self.conn.flush().await?;
        ok(self.conn.read().await?)?;
        Ok(())
    }
}

/// The turn-taking state shared by the clients of one case-2 run.
struct Turns {
    state: Mutex<TurnState>,
    /// Grants so far (the generation of the current hold).
    granted: watch::Sender<u64>,
    /// The highest generation whose holder has rejoined the contest after its release.
    rejoined: watch::Sender<u64>,
    recording: AtomicBool,
}

struct TurnState {
    release_sent: Option<Instant>,
    latency: hdrhistogram::Histogram<u64>,
    handoffs: u64,
}

impl Turns {
    /// Records a grant; returns its generation.
    fn grant(&self) -> u64 {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sent) = st.release_sent.take() {
            if self.recording.load(Ordering::Relaxed) {
                let ns = (now - sent).as_nanos().max(1) as u64;
                let _ = st.latency.record(ns);
                st.handoffs += 1;
            }
        }
        let mut generation = 0;
        self.granted.send_modify(|g| {
            *g += 1;
            generation = *g;
        });
        generation
    }
}

/// The outcome of one case-2 run.
pub struct HandoffResult {
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub commands_per_handoff: f64,
    pub handoffs: u64,
}

/// Case 2 with `k` waiters behind the holder.
pub async fn contended(
    port: u16,
    control: &mut Conn,
    scripts: &Scripts,
    wait: Wait,
    k: usize,
    warmup: Duration,
    measure: Duration,
) -> io::Result<HandoffResult> {
    const TTL: u64 = 30_000;
    let key = format!("handoff:{}:{k}", wait_name(wait));
    let turns = Arc::new(Turns {
        state: Mutex::new(TurnState {
            release_sent: None,
            latency: stats::histogram(),
            handoffs: 0,
        }),
        granted: watch::channel(0).0,
        rejoined: watch::channel(0).0,
        recording: AtomicBool::new(false),
    });
    let mut clients = Vec::new();
    for _ in 0..=k {
        clients.push(Client::connect(port, wait).await?);
    }
    let mut tasks = Vec::new();
    for mut client in clients {
        let (turns, scripts, key) = (turns.clone(), scripts.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut last: Option<u64> = None;
            loop {
                if let Some(g) = last {
                    // Rejoin only after someone else got the lock.
                    let mut rx = turns.granted.subscribe();
                    rx.wait_for(|now| *now > g)
                        .await
                        .map_err(io::Error::other)?;
                }
                let rejoined = &turns.rejoined;
                let mut waiting = || {
                    if let Some(g) = last {
                        rejoined.send_modify(|r| *r = (*r).max(g));
                    }
                };
                client
                    .acquire(wait, &scripts, &key, TTL, &mut waiting)
                    .await?;
                let g = turns.grant();
                let mut rx = turns.rejoined.subscribe();
                rx.wait_for(|r| *r + 1 >= g)
                    .await
                    .map_err(io::Error::other)?;
                turns
                    .state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .release_sent = Some(Instant::now());
                client.release(wait, &scripts, &key, TTL).await?;
                last = Some(g);
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        }));
    }
    tokio::time::sleep(warmup).await;
    let before = stats::command_calls(control).await?;
    turns.recording.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    turns.recording.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let after = stats::command_calls(control).await?;
    for t in tasks {
        t.abort();
        if let Ok(Err(e)) = t.await {
            return Err(e);
        }
    }
    let st = turns.state.lock().unwrap_or_else(|e| e.into_inner());
    let handoffs = st.handoffs;
    Ok(HandoffResult {
        per_second: handoffs as f64 / elapsed.as_secs_f64(),
        p50_ms: stats::quantile_ms(&st.latency, 0.5),
        p99_ms: stats::quantile_ms(&st.latency, 0.99),
        commands_per_handoff: if handoffs == 0 {
            f64::NAN
        } else {
            stats::calls_between(&before, &after) as f64 / handoffs as f64
        },
        handoffs,
    })
}

pub fn wait_name(wait: Wait) -> &'static str {
    match wait {
        Wait::Relock => "relock",
        Wait::Spin => "C",
        Wait::PubSub => "D",
    }
}

/// Case 3: a holder takes the lock with a `ttl_ms` TTL and vanishes; one client waits. Returns
/// the delays (ms) from the TTL's end to the waiter's grant, one per trial. The TTL's end is
/// taken as the holder's acquire *sent* + ttl, so the delay is never under-stated.
pub async fn expiry(
    port: u16,
    scripts: &Scripts,
    wait: Wait,
    ttl_ms: u64,
    trials: usize,
) -> io::Result<Vec<f64>> {
    let key = format!("expiry:{}", wait_name(wait));
    let mut waiter = Client::connect(port, wait).await?;
    let mut delays = Vec::new();
    for _ in 0..trials {
        let mut holder = Client::connect(port, wait).await?;
        holder.conn.ok(&["DEL", &key]).await?;
        let sent = Instant::now();
        wait.lock()
            .push_acquire(&mut holder.conn, scripts, &key, &holder.owner, ttl_ms);
        holder.conn.flush().await?;
        if !wait.lock().won(&ok(holder.conn.read().await?)?) {
            return Err(io::Error::other(
                "expiry holder could not acquire a free key",
            ));
        }
        drop(holder);
        waiter
            .acquire(wait, scripts, &key, 30_000, &mut || {})
            .await?;
        let end = sent + Duration::from_millis(ttl_ms);
        let now = Instant::now();
        delays.push(if now >= end {
            (now - end).as_secs_f64() * 1e3
        } else {
            -((end - now).as_secs_f64() * 1e3)
        });
        waiter.release(wait, scripts, &key, 30_000).await?;
    }
    Ok(delays)
}
