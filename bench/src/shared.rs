//! Cases 6 to 10: shared holds (read-write locks and counting semaphores).
//!
//! - 6: `LOCK.ACQUIRE ... SHARED` + `LOCK.RELEASE` pairs against exclusive pairs, same driver.
//! - 7: one key with many shared holders: the server's time per acquire, renew and release, and
//!   how soon a waiter is served when one short lease among them ends.
//! - 8: a read-write lock with many mixed waiters: hand-off latency.
//! - 9: a semaphore (LIMIT 10) under contention, against Redisson's RPermitExpirableSemaphore
//!   recipe (a permit counter and a zset of leases, in Lua, waiters woken over pub/sub).
//! - 10: memory per shared holder.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relock_protocol::cmd::{Acquire, Info, Release, Renew, Wait};
use relock_protocol::{Ask, Command};
use tokio::sync::watch;

use crate::resp::{ok, Conn, Reply};
use crate::stats;
use crate::throughput::Load;

/// Long enough that no hold of a measurement ends by itself.
const LONG_TTL: u64 = 600_000;

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `LOCK.ACQUIRE key owner ttl_ms [mode words]`.
fn acquire(key: &str, owner: &str, ttl_ms: u64, ask: Ask) -> Vec<Vec<u8>> {
    Acquire {
        key: key.as_bytes(),
        owner: owner.as_bytes(),
        ttl_ms,
        ask,
    }
    .to_args()
}

/// `LOCK.WAIT key owner ttl_ms 0 [mode words]`: no timeout.
fn wait(key: &str, owner: &str, ttl_ms: u64, ask: Ask) -> Vec<Vec<u8>> {
    Wait {
        key: key.as_bytes(),
        owner: owner.as_bytes(),
        ttl_ms,
        timeout_ms: 0,
        ask,
    }
    .to_args()
}

/// `LOCK.RELEASE key owner`.
fn release(key: &str, owner: &str) -> Vec<Vec<u8>> {
    Release {
        key: key.as_bytes(),
        owner: owner.as_bytes(),
        from: None,
    }
    .to_args()
}

/// A shared request of one permit, with `limit` (a semaphore) or without (a read lock).
fn shared_ask(limit: Option<usize>) -> Ask {
    Ask::shared(limit.map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX)))
}

// ---------------------------------------------------------------------------------------------
// Case 6: shared against exclusive acquire + release

/// Acquire+release pairs per second, `SHARED` or exclusive, on random keys (`lock:0..1e6`), each
/// connection its own owner. With pipeline P a batch holds P / 2 pairs.
pub async fn pairs(port: u16, shared: bool, load: &Load) -> io::Result<f64> {
    pairs_on(port, shared, 1_000_000, load).await
}

/// [`pairs`] on `keys` random keys (`lock:0..keys`): with few keys, some acquires find the key
/// taken by another connection's pair and are refused (its release then answers nil).
pub async fn pairs_on(port: u16, shared: bool, keys: u64, load: &Load) -> io::Result<f64> {
    let ask = if shared {
        Ask::shared(0)
    } else {
        Ask::Exclusive
    };
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for seed in 0..load.connections {
        let mut conn = Conn::connect(port).await?;
        let (done, stop) = (done.clone(), stop.clone());
        let pairs = (load.pipeline / 2).max(1);
        tasks.push(tokio::spawn(async move {
            let owner = uuid();
            let mut rng = (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..pairs {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = format!("lock:{}", rng % keys);
                    conn.push(&acquire(&key, &owner, 60_000, ask));
                    conn.push(&release(&key, &owner));
                }
                conn.flush().await?;
                for _ in 0..pairs * 2 {
                    ok(conn.read().await?)?;
                }
                done.fetch_add(pairs as u64, Ordering::Relaxed);
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

// ---------------------------------------------------------------------------------------------
// Case 7: a key with many holders

/// Gives `key` `n` shared holders (36-byte UUID owners, long leases), with `LIMIT limit` when
/// given, pipelined in batches. Returns the owners.
async fn fill(conn: &mut Conn, key: &str, n: usize, limit: Option<usize>) -> io::Result<()> {
    const BATCH: usize = 1000;
    let ask = shared_ask(limit);
    let mut i = 0;
    while i < n {
        let end = (i + BATCH).min(n);
        for _ in i..end {
            let owner = uuid();
            conn.push(&acquire(key, &owner, LONG_TTL, ask));
        }
        conn.flush().await?;
        for _ in i..end {
            if !matches!(ok(conn.read().await?)?, Reply::Int(_)) {
                return Err(io::Error::other(
                    "shared fill: a shared acquire was refused",
                ));
            }
        }
        i = end;
    }
    Ok(())
}

/// The server's time per call (µs) of each command since the last `CONFIG RESETSTAT`.
pub async fn usec_per_call(conn: &mut Conn, command: &str) -> io::Result<f64> {
    let info = conn.ok(&["INFO", "commandstats"]).await?.text();
    // Redis 7.0 names module commands as registered (upper case); later versions may not.
    let want = format!("cmdstat_{command}:").to_lowercase();
    let line = info
        .lines()
        .map(str::trim)
        .find(|l| l.to_lowercase().starts_with(want.as_str()))
        .map(|l| &l[want.len()..])
        .ok_or_else(|| io::Error::other(format!("INFO commandstats has no {command}")))?;
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
    };
    match (field("calls="), field("usec=")) {
        (Some(calls), Some(usec)) if calls > 0.0 => Ok(usec / calls),
        _ => Err(io::Error::other(format!("no calls of {command}"))),
    }
}

/// Server µs per call of acquire, renew and release on a key with `holders` shared holders, and
/// the client-side rate of acquire + renew + release triples.
pub struct HolderCost {
    pub acquire_us: f64,
    pub renew_us: f64,
    pub release_us: f64,
    pub triples_per_s: f64,
}

/// On a key with `holders` long-lived shared holders, 8 connections each add a holder (a new
/// owner), renew it and release it, 8 triples in flight per connection, for `measure`.
pub async fn holder_cost(
    port: u16,
    control: &mut Conn,
    holders: usize,
    measure: Duration,
) -> io::Result<HolderCost> {
    const KEY: &str = "shared:many";
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    fill(control, KEY, holders, None).await?;
    control.ok(&["CONFIG", "RESETSTAT"]).await?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut conn = Conn::connect(port).await?;
        let (done, stop) = (done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let owners: Vec<String> = (0..8).map(|_| uuid()).collect();
                for o in &owners {
                    conn.push(&acquire(KEY, o, LONG_TTL, shared_ask(None)));
                    conn.push(
                        &Renew {
                            key: KEY.as_bytes(),
                            owner: o.as_bytes(),
                            ttl_ms: 300_000,
                        }
                        .to_args(),
                    );
                    conn.push(&release(KEY, o));
                }
                conn.flush().await?;
                for _ in 0..owners.len() {
                    for _ in 0..3 {
                        if !matches!(ok(conn.read().await?)?, Reply::Int(_)) {
                            return Err(io::Error::other("holder cost: a command was refused"));
                        }
                    }
                }
                done.fetch_add(owners.len() as u64, Ordering::Relaxed);
            }
            Ok::<(), io::Error>(())
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    let n = done.load(Ordering::Relaxed);
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.map_err(io::Error::other)??;
    }
    let cost = HolderCost {
        acquire_us: usec_per_call(control, "lock.acquire").await?,
        renew_us: usec_per_call(control, "lock.renew").await?,
        release_us: usec_per_call(control, "lock.release").await?,
        triples_per_s: n as f64 / elapsed.as_secs_f64(),
    };
    let left = control
        .ok(&Info {
            key: KEY.as_bytes(),
        }
        .to_args())
        .await?;
    if let Reply::Array(items) = &left {
        let holders_left = items.get(13).and_then(Reply::int);
        if holders_left != Some(holders as i64) {
            return Err(io::Error::other(format!(
                "holder cost: {holders_left:?} holders left, expected {holders}"
            )));
        }
    }
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(cost)
}

/// A semaphore with `LIMIT holders` is full: `holders - 1` long leases and one of `ttl_ms`,
/// taken last; a waiter queues. Returns, per trial, the ms from the short lease's end (its
/// acquire *sent* + ttl_ms, so never understated) to the waiter's grant received.
pub async fn lease_expiry(
    port: u16,
    control: &mut Conn,
    holders: usize,
    ttl_ms: u64,
    trials: usize,
) -> io::Result<Vec<f64>> {
    const KEY: &str = "shared:expiry";
    let ask = shared_ask(Some(holders));
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    fill(control, KEY, holders - 1, Some(holders)).await?;
    let mut short = Conn::connect(port).await?;
    let mut waiter = Conn::connect(port).await?;
    let mut delays = Vec::new();
    for _ in 0..trials {
        let (s, w) = (uuid(), uuid());
        let sent = Instant::now();
        let reply = short.ok(&acquire(KEY, &s, ttl_ms, ask)).await?;
        if !matches!(reply, Reply::Int(_)) {
            return Err(io::Error::other(
                "lease expiry: the short lease was refused",
            ));
        }
        let reply = waiter.ok(&wait(KEY, &w, LONG_TTL, ask)).await?;
        if !matches!(reply, Reply::Int(_)) {
            return Err(io::Error::other(format!(
                "lease expiry: LOCK.WAIT replied {reply:?}"
            )));
        }
        let end = sent + Duration::from_millis(ttl_ms);
        let now = Instant::now();
        delays.push(if now >= end {
            (now - end).as_secs_f64() * 1e3
        } else {
            // Granted before the lease could have ended: the waiter did not wait for it.
            return Err(io::Error::other(
                "lease expiry: granted before the lease ended",
            ));
        });
        waiter.ok(&release(KEY, &w)).await?;
    }
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(delays)
}

// ---------------------------------------------------------------------------------------------
// Case 8: a read-write lock with mixed waiters

pub struct RwResult {
    pub grants_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub writer_p99_ms: f64,
    pub reader_p99_ms: f64,
    pub readers_per_writer: f64,
}

struct RwState {
    last_release: Option<Instant>,
    last_writer_release: Option<Instant>,
    all: hdrhistogram::Histogram<u64>,
    writers: hdrhistogram::Histogram<u64>,
    readers: hdrhistogram::Histogram<u64>,
    writer_grants: u64,
    reader_grants: u64,
}

/// `clients` clients (every `writer_every`-th one a writer) take turns on one read-write lock:
/// `LOCK.WAIT` (with `SHARED` for readers), release at once, wait again. With no limit a reader
/// waits only behind a writer, so a reader's grant follows the last writer's release, and a
/// writer's grant the last release of all (the one that left the key without holds): latency
/// is measured from that release sent to the grant received.
pub async fn rw_handoff(
    port: u16,
    clients: usize,
    writer_every: usize,
    warmup: Duration,
    measure: Duration,
) -> io::Result<RwResult> {
    const KEY: &str = "shared:rw";
    let state = Arc::new(Mutex::new(RwState {
        last_release: None,
        last_writer_release: None,
        all: stats::histogram(),
        writers: stats::histogram(),
        readers: stats::histogram(),
        writer_grants: 0,
        reader_grants: 0,
    }));
    let recording = Arc::new(AtomicBool::new(false));
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(Conn::connect(port).await?);
    }
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (state, recording) = (state.clone(), recording.clone());
        let writer = i % writer_every == 0;
        tasks.push(tokio::spawn(async move {
            let owner = uuid();
            loop {
                let ask = if writer {
                    Ask::Exclusive
                } else {
                    shared_ask(None)
                };
                conn.push(&wait(KEY, &owner, 30_000, ask));
                conn.flush().await?;
                let reply = ok(conn.read().await?)?;
                if !matches!(reply, Reply::Int(_)) {
                    return Err(io::Error::other(format!("LOCK.WAIT replied {reply:?}")));
                }
                let now = Instant::now();
                {
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    let from = if writer {
                        st.last_release
                    } else {
                        st.last_writer_release
                    };
                    if let (Some(from), true) = (from, recording.load(Ordering::Relaxed)) {
                        let ns = (now - from).as_nanos().max(1) as u64;
                        let _ = st.all.record(ns);
                        if writer {
                            let _ = st.writers.record(ns);
                            st.writer_grants += 1;
                        } else {
                            let _ = st.readers.record(ns);
                            st.reader_grants += 1;
                        }
                    }
                    let sent = Instant::now();
                    st.last_release = Some(sent);
                    if writer {
                        st.last_writer_release = Some(sent);
                    }
                }
                conn.push(&release(KEY, &owner));
                conn.flush().await?;
                ok(conn.read().await?)?;
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        }));
    }
    tokio::time::sleep(warmup).await;
    recording.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    recording.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    for t in tasks {
        t.abort();
        if let Ok(Err(e)) = t.await {
            return Err(e);
        }
    }
    let st = state.lock().unwrap_or_else(|e| e.into_inner());
    Ok(RwResult {
        grants_per_s: (st.writer_grants + st.reader_grants) as f64 / elapsed.as_secs_f64(),
        p50_ms: stats::quantile_ms(&st.all, 0.5),
        p99_ms: stats::quantile_ms(&st.all, 0.99),
        writer_p99_ms: stats::quantile_ms(&st.writers, 0.99),
        reader_p99_ms: stats::quantile_ms(&st.readers, 0.99),
        readers_per_writer: st.reader_grants as f64 / st.writer_grants.max(1) as f64,
    })
}

// ---------------------------------------------------------------------------------------------
// Case 9: a semaphore against Redisson's RPermitExpirableSemaphore recipe

/// Redisson's `RPermitExpirableSemaphore.tryAcquire(leaseTime)` as one script: return expired
/// leases to the counter (and publish), then take a permit if one is left and record its lease
/// in the zset; else answer the ms until the earliest lease ends. KEYS[1] = permit counter,
/// KEYS[2] = lease zset, KEYS[3] = channel; ARGV[1] = permit id, ARGV[2] = now (client ms),
/// ARGV[3] = lease ms.
pub const SEM_ACQUIRE: &str = "local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[2], 'limit', 0, 1000); if #expired > 0 then redis.call('zrem', KEYS[2], unpack(expired)); local v = redis.call('incrby', KEYS[1], #expired); if tonumber(v) > 0 then redis.call('publish', KEYS[3], v); end; end; local value = redis.call('get', KEYS[1]); if value ~= false and tonumber(value) >= 1 then redis.call('decrby', KEYS[1], 1); redis.call('zadd', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1]); return ARGV[1]; end; local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); if first[1] ~= nil then return tonumber(first[2]) - tonumber(ARGV[2]); end; return -1;";

/// Redisson's `RPermitExpirableSemaphore.release(permitId)`: the lease leaves the zset, the
/// permit goes back to the counter, waiters are told on the channel. KEYS as above; ARGV[1] =
/// permit id.
pub const SEM_RELEASE: &str = "local removed = redis.call('zrem', KEYS[2], ARGV[1]); if tonumber(removed) ~= 1 then return 0; end; local v = redis.call('incrby', KEYS[1], 1); redis.call('publish', KEYS[3], v); return 1;";

/// How the semaphore clients wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Semaphore {
    /// `LOCK.WAIT key owner lease 0 SHARED LIMIT n`, `LOCK.RELEASE`.
    Relock,
    /// The Redisson recipe: try; on failure subscribe, retry on each message or when the
    /// earliest lease ends.
    Redisson,
}

pub struct SemResult {
    pub grants_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

struct SemState {
    /// Releases sent and not yet followed by a grant, oldest first.
    releases: VecDeque<Instant>,
    latency: hdrhistogram::Histogram<u64>,
    grants: u64,
}

/// One try of the Redisson recipe's acquire: the permit id when won.
async fn redisson_try(conn: &mut Conn, sha: &str, owner: &str) -> io::Result<Reply> {
    let now = now_ms();
    conn.ok(&[
        "EVALSHA",
        sha,
        "3",
        SEM_KEY,
        SEM_ZSET,
        SEM_CHANNEL,
        owner,
        &now,
        &SEM_LEASE_MS.to_string(),
    ])
    .await
}

const SEM_KEY: &str = "sem";
const SEM_ZSET: &str = "sem:timeout";
const SEM_CHANNEL: &str = "redisson_sc:{sem}";
const SEM_LEASE_MS: u64 = 30_000;

fn now_ms() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
        .to_string()
}

/// `clients` clients share a semaphore of `limit` permits, hold each permit ~0 ms and rejoin
/// once someone else was granted after their release (so a freed permit goes to another
/// client, as in case 2). Latency = a grant received - the oldest release not yet matched by a
/// grant.
pub async fn semaphore(
    port: u16,
    control: &mut Conn,
    how: Semaphore,
    clients: usize,
    limit: usize,
    warmup: Duration,
    measure: Duration,
) -> io::Result<SemResult> {
    const KEY: &str = SEM_KEY;
    const ZSET: &str = SEM_ZSET;
    const CHANNEL: &str = SEM_CHANNEL;
    const LEASE_MS: u64 = SEM_LEASE_MS;
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    let acquire_sha = control.ok(&["SCRIPT", "LOAD", SEM_ACQUIRE]).await?.text();
    let release_sha = control.ok(&["SCRIPT", "LOAD", SEM_RELEASE]).await?.text();
    if how == Semaphore::Redisson {
        // Redisson's trySetPermits.
        control.ok(&["SET", KEY, &limit.to_string()]).await?;
    }
    let ask = shared_ask(Some(limit));
    let state = Arc::new(Mutex::new(SemState {
        releases: VecDeque::new(),
        latency: stats::histogram(),
        grants: 0,
    }));
    let granted = Arc::new(watch::channel(0u64).0);
    let recording = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut conn = Conn::connect(port).await?;
        let mut sub = match how {
            Semaphore::Redisson => Some(Conn::connect(port).await?),
            Semaphore::Relock => None,
        };
        let (state, granted, recording) = (state.clone(), granted.clone(), recording.clone());
        let (acquire_sha, release_sha) = (acquire_sha.clone(), release_sha.clone());
        tasks.push(tokio::spawn(async move {
            let owner = uuid();
            loop {
                match (how, sub.as_mut()) {
                    (Semaphore::Redisson, Some(sub)) => {
                        let first = redisson_try(&mut conn, &acquire_sha, &owner).await?;
                        if !matches!(first, Reply::Bulk(_)) {
                            sub.push(&["SUBSCRIBE", CHANNEL]);
                            sub.flush().await?;
                            loop {
                                if let Reply::Array(items) = ok(sub.read().await?)? {
                                    if items.first().map(Reply::text).as_deref()
                                        == Some("subscribe")
                                    {
                                        break;
                                    }
                                }
                            }
                            loop {
                                let now = redisson_try(&mut conn, &acquire_sha, &owner).await?;
                                if matches!(now, Reply::Bulk(_)) {
                                    sub.push(&["UNSUBSCRIBE", CHANNEL]);
                                    sub.flush().await?;
                                    break;
                                }
                                let wait = now.int().unwrap_or(-1);
                                let message = sub.read();
                                if wait >= 0 {
                                    let _ = tokio::time::timeout(
                                        Duration::from_millis(wait as u64),
                                        message,
                                    )
                                    .await;
                                } else {
                                    message.await?;
                                }
                            }
                        }
                    }
                    _ => {
                        let reply = conn.ok(&wait(KEY, &owner, LEASE_MS, ask)).await?;
                        if !matches!(reply, Reply::Int(_)) {
                            return Err(io::Error::other(format!("LOCK.WAIT replied {reply:?}")));
                        }
                    }
                }
                let now = Instant::now();
                let generation = {
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(from) = st.releases.pop_front() {
                        if recording.load(Ordering::Relaxed) {
                            let _ = st.latency.record((now - from).as_nanos().max(1) as u64);
                            st.grants += 1;
                        }
                    }
                    let mut g = 0;
                    granted.send_modify(|n| {
                        *n += 1;
                        g = *n;
                    });
                    st.releases.push_back(Instant::now());
                    g
                };
                match how {
                    Semaphore::Relock => {
                        conn.push(&release(KEY, &owner));
                    }
                    Semaphore::Redisson => {
                        conn.push(&["EVALSHA", &release_sha, "3", KEY, ZSET, CHANNEL, &owner]);
                    }
                }
                conn.flush().await?;
                ok(conn.read().await?)?;
                let mut rx = granted.subscribe();
                rx.wait_for(|n| *n > generation)
                    .await
                    .map_err(io::Error::other)?;
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        }));
    }
    tokio::time::sleep(warmup).await;
    recording.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    recording.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    for t in tasks {
        t.abort();
        if let Ok(Err(e)) = t.await {
            return Err(e);
        }
    }
    let st = state.lock().unwrap_or_else(|e| e.into_inner());
    Ok(SemResult {
        grants_per_s: st.grants as f64 / elapsed.as_secs_f64(),
        p50_ms: stats::quantile_ms(&st.latency, 0.5),
        p99_ms: stats::quantile_ms(&st.latency, 0.99),
    })
}

// ---------------------------------------------------------------------------------------------
// Case 10: memory per shared holder

pub struct HolderMemory {
    /// `used_memory` after - before, divided by the holders.
    pub per_holder: f64,
    /// `MEMORY USAGE key SAMPLES 0` divided by the holders.
    pub usage_per_holder: f64,
}

/// One key with `n` shared holders, 36-byte UUID owners.
pub async fn memory(control: &mut Conn, n: usize) -> io::Result<HolderMemory> {
    const KEY: &str = "shared:memory";
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    let before: i64 = stats::info_field(control, "memory", "used_memory")
        .await?
        .parse()
        .map_err(|_| io::Error::other("INFO memory has no used_memory"))?;
    fill(control, KEY, n, None).await?;
    let after: i64 = stats::info_field(control, "memory", "used_memory")
        .await?
        .parse()
        .map_err(|_| io::Error::other("INFO memory has no used_memory"))?;
    let usage = control
        .ok(&["MEMORY", "USAGE", KEY, "SAMPLES", "0"])
        .await?
        .int()
        .unwrap_or(0) as f64;
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(HolderMemory {
        per_holder: (after - before) as f64 / n as f64,
        usage_per_holder: usage / n as f64,
    })
}
