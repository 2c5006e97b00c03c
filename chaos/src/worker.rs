//! A worker process: takes the one lock over and over, makes one fenced write per hold, and
//! reports every step on stdout as a tab-separated line (see [`crate::history`]).
//!
//! It behaves like a careful but ordinary client: it checks the lock's validity before it
//! works, then works, then writes. A pause between the check and the write (a SIGSTOP from the
//! nemesis, standing in for a GC pause) makes the write late; only the fencing token can catch
//! that, which is what the chaos suite demonstrates.

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relock_client::{Options, Relock};

use crate::store::FencedStore;

/// Wall-clock microseconds since the Unix epoch: the one time base shared by every process of a
/// run (all of them run on this host).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The clock drift allowance of the validity, as the client computes it: 1 % of ttl + 2 ms.
pub fn drift_us(ttl_ms: u64) -> u64 {
    ttl_ms * 10 + 2_000
}

/// How a worker takes the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Raw `LOCK.WAIT` + `LOCK.RENEW` (+ `WAIT n` if asked) on one server at a time.
    Wait,
    /// relock-client's `acquire_wait` over every URL (one URL: plain; several: Redlock).
    Client,
}

/// A worker's settings (its command line).
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub id: u32,
    pub mode: Mode,
    /// A file with the lock servers' URLs, one a line; re-read after every error, so the
    /// orchestrator can fail over.
    pub urls_file: String,
    pub store: String,
    pub key: String,
    pub ttl_ms: u64,
    pub run_ms: u64,
    /// With `Mode::Wait`: use a hold only after `WAIT <n>` confirmed it on n replicas.
    pub wait_replicas: u32,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "worker".into(),
            self.id.to_string(),
            match self.mode {
                Mode::Wait => "wait".into(),
                Mode::Client => "client".into(),
            },
            self.urls_file.clone(),
            self.store.clone(),
            self.key.clone(),
            self.ttl_ms.to_string(),
            self.run_ms.to_string(),
            self.wait_replicas.to_string(),
        ]
    }

    pub fn from_args(args: &[String]) -> Option<WorkerArgs> {
        let [id, mode, urls_file, store, key, ttl, run, wait] = args else {
            return None;
        };
        Some(WorkerArgs {
            id: id.parse().ok()?,
            mode: match mode.as_str() {
                "wait" => Mode::Wait,
                "client" => Mode::Client,
                _ => return None,
            },
            urls_file: urls_file.clone(),
            store: store.clone(),
            key: key.clone(),
            ttl_ms: ttl.parse().ok()?,
            run_ms: run.parse().ok()?,
            wait_replicas: wait.parse().ok()?,
        })
    }
}

fn emit(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn read_urls(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A hold as the worker saw it; `valid_end_us` 0 means "not usable".
struct Grant {
    owner: String,
    token: u64,
    t0: u64,
    t1: u64,
    valid_end_us: u64,
}

/// What a worker does with a hold: report it, check validity, work, write, report, release.
fn use_hold(args: &WorkerArgs, seq: u64, g: &Grant, store: &mut Option<FencedStore>) {
    let id = args.id;
    emit(format!(
        "G\t{id}\t{seq}\t{}\t{}\t{}\t{}\t{}",
        g.owner, g.token, g.t0, g.t1, g.valid_end_us
    ));
    if now_us() >= g.valid_end_us {
        emit(format!("S\t{id}\t{seq}"));
    } else {
        // The work between the validity check and the write, up to a quarter of the ttl: a
        // pause here makes the write late.
        std::thread::sleep(Duration::from_millis(fastrand::u64(
            2..=(args.ttl_ms / 4).max(2),
        )));
        let tw = now_us();
        let hold_id = format!("{id}:{seq}");
        let accepted = loop {
            if store.is_none() {
                *store = FencedStore::connect(&args.store).ok();
            }
            match store.as_mut().map(|s| s.write(g.token, &hold_id)) {
                Some(Ok(accepted)) => break Some(accepted),
                Some(Err(_)) => *store = None,
                None => {}
            }
            if now_us() > tw + 5_000_000 {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        match accepted {
            Some(a) => emit(format!("W\t{id}\t{seq}\t{tw}\t{}", u8::from(a))),
            None => emit(format!("X\t{id}\tstore unreachable")),
        }
    }
    emit(format!("R\t{id}\t{seq}\t{}", now_us()));
}

/// Runs a worker until `run_ms` passes.
pub fn run(args: WorkerArgs) {
    match args.mode {
        Mode::Wait => run_wait(&args),
        Mode::Client => run_client(&args),
    }
}

fn run_wait(args: &WorkerArgs) {
    let deadline = Instant::now() + Duration::from_millis(args.run_ms);
    let mut store = None;
    let mut conn: Option<redis::Connection> = None;
    let mut next_url = 0usize;
    let mut seq = 0u64;
    let ttl = args.ttl_ms;
    while Instant::now() < deadline {
        let Some(c) = conn.as_mut() else {
            let urls = read_urls(&args.urls_file);
            if urls.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let url = &urls[next_url % urls.len()];
            next_url += 1;
            conn = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .ok();
            if let Some(c) = conn.as_mut() {
                let _ = c.set_read_timeout(Some(Duration::from_millis(ttl * 4 + 1000)));
                let _ = c.set_write_timeout(Some(Duration::from_millis(1000)));
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        seq += 1;
        let owner = format!("w{}-{seq}-{:08x}", args.id, fastrand::u32(..));
        let t0 = now_us();
        let granted: redis::RedisResult<Option<u64>> = redis::cmd("LOCK.WAIT")
            .arg(&args.key)
            .arg(&owner)
            .arg(ttl)
            .arg(ttl * 2)
            .query(c);
        let token = match granted {
            Ok(Some(token)) => token,
            Ok(None) => continue,
            Err(e) => {
                emit(format!("X\t{}\t{e}", args.id));
                conn = None;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let t1 = now_us();
        // LOCK.WAIT's ttl counts from the grant, which we cannot see: measure validity from a
        // renewal made now, as relock-client does.
        let tr = now_us();
        let renewed: redis::RedisResult<Option<u64>> = redis::cmd("LOCK.RENEW")
            .arg(&args.key)
            .arg(&owner)
            .arg(ttl)
            .query(c);
        let mut valid_end_us = match renewed {
            Ok(Some(_)) => (tr + ttl * 1000).saturating_sub(drift_us(ttl)),
            _ => 0,
        };
        if args.wait_replicas > 0 && valid_end_us > 0 {
            let acked: redis::RedisResult<u64> = redis::cmd("WAIT")
                .arg(args.wait_replicas)
                .arg((ttl / 4).max(1))
                .query(c);
            if !matches!(acked, Ok(n) if n >= u64::from(args.wait_replicas)) {
                valid_end_us = 0;
            }
        }
        let g = Grant {
            owner: owner.clone(),
            token,
            t0,
            t1,
            valid_end_us,
        };
        use_hold(args, seq, &g, &mut store);
        let released: redis::RedisResult<Option<u64>> = redis::cmd("LOCK.RELEASE")
            .arg(&args.key)
            .arg(&owner)
            .query(c);
        if released.is_err() {
            conn = None;
        }
    }
}

fn run_client(args: &WorkerArgs) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        emit(format!("X\t{}\tno runtime", args.id));
        return;
    };
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_millis(args.run_ms);
        let mut store = None;
        let urls = read_urls(&args.urls_file);
        let options = Options {
            node_timeout: Duration::from_millis(50),
            ..Options::default()
        };
        let relock = match Relock::with_options(&urls, options) {
            Ok(r) => r,
            Err(e) => {
                emit(format!("X\t{}\t{e}", args.id));
                return;
            }
        };
        let ttl = Duration::from_millis(args.ttl_ms);
        let mut seq = 0u64;
        while Instant::now() < deadline {
            let t0 = now_us();
            let lock = match relock.acquire_wait(&args.key, ttl, Some(ttl * 2)).await {
                Ok(lock) => lock,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            seq += 1;
            let t1 = now_us();
            // With several masters, the tokens of different masters are unrelated counters that
            // share the wall-clock floor; the fenced store compares their maximum.
            let token = lock.tokens().iter().map(|(_, t)| *t).max().unwrap_or(0);
            let left = lock
                .valid_until()
                .saturating_duration_since(tokio::time::Instant::now());
            let valid_end_us = now_us() + u64::try_from(left.as_micros()).unwrap_or(0);
            let g = Grant {
                owner: lock.owner().to_string(),
                token,
                t0,
                t1,
                valid_end_us,
            };
            // The store write is a blocking call; this runtime has nothing else to run.
            use_hold(args, seq, &g, &mut store);
            let _ = lock.release().await;
        }
    });
}
