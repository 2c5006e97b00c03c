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
use relock_protocol::cmd::{Fenced, Release, Renew, Wait};
use relock_protocol::{Ask, Command};

use crate::store::FencedStore;

/// Wall-clock microseconds since the Unix epoch: the one time base shared by every process of a
/// run (all of them run on this host).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `command` as redis-rs sends it: its whole argv, written by relock-protocol's type for it.
fn cmd<'a>(command: &impl Command<'a>) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for arg in command.to_args() {
        cmd.arg(arg.as_slice());
    }
    cmd
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
    /// Raw `LOCK.WAIT ... SHARED LIMIT n`: one of at most n holders of a semaphore.
    Shared(u32),
    /// relock-client's `campaign` (one master): leads for 1-4 ttl, kept alive by its guard,
    /// and stops the moment the guard signals the term lost.
    Elect,
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
    /// With `Mode::Wait`: after its store write, a holder writes its token to the fenced
    /// register and reads it back, both through `LOCK.FENCED`.
    pub register: bool,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "worker".into(),
            self.id.to_string(),
            match self.mode {
                Mode::Wait => "wait".into(),
                Mode::Client => "client".into(),
                Mode::Shared(n) => format!("shared:{n}"),
                Mode::Elect => "elect".into(),
            },
            self.urls_file.clone(),
            self.store.clone(),
            self.key.clone(),
            self.ttl_ms.to_string(),
            self.run_ms.to_string(),
            self.wait_replicas.to_string(),
            u8::from(self.register).to_string(),
        ]
    }

    pub fn from_args(args: &[String]) -> Option<WorkerArgs> {
        let [id, mode, urls_file, store, key, ttl, run, wait, register] = args else {
            return None;
        };
        Some(WorkerArgs {
            id: id.parse().ok()?,
            mode: match mode.as_str() {
                "wait" => Mode::Wait,
                "client" => Mode::Client,
                "elect" => Mode::Elect,
                // A semaphore's limit is 1 or more (`shared:0` would be read as no limit at
                // all, where the module refuses `LIMIT 0`).
                other => Mode::Shared(
                    other
                        .strip_prefix("shared:")?
                        .parse()
                        .ok()
                        .filter(|n| *n >= 1)?,
                ),
            },
            urls_file: urls_file.clone(),
            store: store.clone(),
            key: key.clone(),
            ttl_ms: ttl.parse().ok()?,
            run_ms: run.parse().ok()?,
            wait_replicas: wait.parse().ok()?,
            register: register == "1",
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

/// What a worker does with a hold: report it, check validity, work, write, report (the caller
/// then says it stopped, [`stop_holding`], and releases). Returns whether the hold was valid
/// when checked (and so used).
fn use_hold(args: &WorkerArgs, seq: u64, g: &Grant, store: &mut Option<FencedStore>) -> bool {
    let id = args.id;
    emit(format!(
        "G\t{id}\t{seq}\t{}\t{}\t{}\t{}\t{}",
        g.owner, g.token, g.t0, g.t1, g.valid_end_us
    ));
    let used = now_us() < g.valid_end_us;
    if !used {
        emit(format!("S\t{id}\t{seq}"));
    } else {
        // The work between the validity check and the write, up to a quarter of the ttl: a
        // pause here makes the write late.
        std::thread::sleep(Duration::from_millis(fastrand::u64(
            2..=(args.ttl_ms / 4).max(2),
        )));
        write_store(args, seq, g.token, store);
    }
    used
}

/// The worker stops acting as the holder (its release follows).
fn stop_holding(args: &WorkerArgs, seq: u64) {
    emit(format!("R\t{}\t{seq}\t{}", args.id, now_us()));
}

/// The hold's one write to the fenced store (retried while the store does not answer, up to
/// 5 s): `W id seq tw accepted`.
fn write_store(args: &WorkerArgs, seq: u64, token: u64, store: &mut Option<FencedStore>) {
    let id = args.id;
    let tw = now_us();
    let hold_id = format!("{id}:{seq}");
    let accepted = loop {
        if store.is_none() {
            *store = FencedStore::connect(&args.store).ok();
        }
        match store.as_mut().map(|s| s.write(token, &hold_id)) {
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

/// Runs a worker until `run_ms` passes.
pub fn run(args: WorkerArgs) {
    match args.mode {
        Mode::Wait => run_wait(&args, None),
        Mode::Shared(n) => run_wait(&args, Some(n)),
        Mode::Client => run_client(&args),
        Mode::Elect => run_elect(&args),
    }
}

fn run_wait(args: &WorkerArgs, shared: Option<u32>) {
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
        let wait = cmd(&Wait {
            key: args.key.as_bytes(),
            owner: owner.as_bytes(),
            ttl_ms: ttl,
            timeout_ms: ttl * 2,
            ask: shared.map_or(Ask::Exclusive, Ask::shared),
        });
        let granted: redis::RedisResult<Option<u64>> = wait.query(c);
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
        let renewed: redis::RedisResult<Option<u64>> = cmd(&Renew {
            key: args.key.as_bytes(),
            owner: owner.as_bytes(),
            ttl_ms: ttl,
        })
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
        // The register is written on the strength of the one validity check before the store
        // write, as a holder that checks once and then acts: a pause meanwhile makes it late,
        // and only LOCK.FENCED refuses it.
        if use_hold(args, seq, &g, &mut store) && args.register {
            use_register(args, seq, &g, c);
        }
        stop_holding(args, seq);
        let released: redis::RedisResult<Option<u64>> = cmd(&Release {
            key: args.key.as_bytes(),
            owner: owner.as_bytes(),
            from: None,
        })
        .query(c);
        if released.is_err() {
            conn = None;
        }
    }
}

/// The fenced register (`chaos:reg` on the lock server): the holder writes its token, then
/// reads the register, both through `LOCK.FENCED` so that each runs only while the hold is live
/// on that server. A write counts as acknowledged when the server said OK (and, with
/// `wait_replicas`, `WAIT` confirmed it); its outcome is unknown when no answer came or `WAIT`
/// fell short; `fenced` when the server refused it (it had no effect). Lines: `F id seq token
/// t_inv t_ret outcome`, `Q id seq t_inv t_ret value` (0 = nil).
fn use_register(args: &WorkerArgs, seq: u64, g: &Grant, c: &mut redis::Connection) {
    let id = args.id;
    // Work between the validity check and the write, as for the store: a pause here makes the
    // write late, and only the fence refuses it.
    std::thread::sleep(Duration::from_millis(fastrand::u64(
        2..=(args.ttl_ms / 4).max(2),
    )));
    let t_inv = now_us();
    let token = g.token.to_string();
    let wrote: redis::RedisResult<redis::Value> = cmd(&Fenced {
        key: args.key.as_bytes(),
        token: g.token,
        command: vec![
            b"SET",
            crate::run::REGISTER_KEY.as_bytes(),
            token.as_bytes(),
        ],
    })
    .query(c);
    let mut outcome = match &wrote {
        Ok(_) => "ok",
        Err(e) if e.code() == Some("FENCED") => "fenced",
        Err(_) => "unknown",
    };
    if outcome == "ok" && args.wait_replicas > 0 {
        let acked: redis::RedisResult<u64> = redis::cmd("WAIT")
            .arg(args.wait_replicas)
            .arg((args.ttl_ms / 4).max(1))
            .query(c);
        if !matches!(acked, Ok(n) if n >= u64::from(args.wait_replicas)) {
            outcome = "unknown";
        }
    }
    emit(format!(
        "F\t{id}\t{seq}\t{}\t{t_inv}\t{}\t{outcome}",
        g.token,
        now_us()
    ));
    if outcome == "fenced" || wrote.is_err() {
        return;
    }
    let t_inv = now_us();
    let read: redis::RedisResult<Option<u64>> = cmd(&Fenced {
        key: args.key.as_bytes(),
        token: g.token,
        command: vec![b"GET", crate::run::REGISTER_KEY.as_bytes()],
    })
    .query(c);
    if let Ok(value) = read {
        emit(format!(
            "Q\t{id}\t{seq}\t{t_inv}\t{}\t{}",
            now_us(),
            value.unwrap_or(0)
        ));
    }
}

/// A tokio instant as wall-clock µs (before now as well as after).
fn wall_us(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let (wall, ahead, behind) = (
        now_us(),
        at.saturating_duration_since(now),
        now.saturating_duration_since(at),
    );
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    wall.saturating_add(us(ahead)).saturating_sub(us(behind))
}

/// Campaigns, leads for 1-4 ttl (one fenced-store write per term, its validity reported after
/// every renewal), resigns; stops leading the moment the guard signals the term lost.
/// Runs `body` with a relock-client on the run's servers (50 ms node timeout) and the run's
/// deadline, on a runtime of its own; a worker that cannot make either says so (an `X` line).
fn with_client(args: &WorkerArgs, body: impl AsyncFnOnce(Relock, Instant)) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        emit(format!("X\t{}\tno runtime", args.id));
        return;
    };
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_millis(args.run_ms);
        let urls = read_urls(&args.urls_file);
        let options = Options {
            node_timeout: Duration::from_millis(50),
            ..Options::default()
        };
        match Relock::with_options(&urls, options) {
            Ok(relock) => body(relock, deadline).await,
            Err(e) => emit(format!("X\t{}\t{e}", args.id)),
        }
    });
}

fn run_elect(args: &WorkerArgs) {
    with_client(args, async |relock, deadline| {
        let (id, ttl) = (args.id, Duration::from_millis(args.ttl_ms));
        let mut store = None;
        let mut seq = 0u64;
        while Instant::now() < deadline {
            let t0 = now_us();
            let value = format!("w{id}");
            let leading = match relock.campaign(&args.key, &value, ttl, Some(ttl * 2)).await {
                Ok(l) => l,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            seq += 1;
            let t1 = now_us();
            let mut valid_end = wall_us(leading.guard().valid_until());
            emit(format!(
                "G\t{id}\t{seq}\t{}\t{}\t{t0}\t{t1}\t{valid_end}",
                leading.owner(),
                leading.term()
            ));
            let lost = leading.lost();
            if !lost.is_cancelled() && now_us() < valid_end {
                write_store(args, seq, leading.term(), &mut store);
            }
            let until = tokio::time::Instant::now() + ttl * fastrand::u32(1..=4);
            let mut lost_at = None;
            loop {
                tokio::select! {
                    biased;
                    _ = lost.cancelled() => {
                        lost_at = Some(now_us());
                        break;
                    }
                    _ = tokio::time::sleep(ttl / 5) => {}
                }
                let v = wall_us(leading.guard().valid_until());
                if v > valid_end {
                    valid_end = v;
                    emit(format!("V\t{id}\t{seq}\t{valid_end}"));
                }
                // The leader's work: it acts now, as the loss signal has not come.
                emit(format!("A\t{id}\t{seq}\t{}", now_us()));
                if tokio::time::Instant::now() >= until {
                    break;
                }
            }
            match lost_at {
                Some(t) => {
                    let v = wall_us(leading.guard().valid_until());
                    emit(format!("L\t{id}\t{seq}\t{t}\t{}", v.max(valid_end)));
                    emit(format!("R\t{id}\t{seq}\t{}", now_us()));
                }
                None => {
                    emit(format!("R\t{id}\t{seq}\t{}", now_us()));
                    let _ = leading.resign().await;
                }
            }
        }
    });
}

fn run_client(args: &WorkerArgs) {
    with_client(args, async |relock, deadline| {
        let mut store = None;
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
            stop_holding(args, seq);
            let _ = lock.release().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: &str) -> Vec<String> {
        ["1", mode, "urls", "store", "k", "1000", "2000", "0", "0"]
            .map(String::from)
            .to_vec()
    }

    /// Found by the attack on the protocol (2026-12-04): `shared:0` became a read lock with no
    /// limit, where the worker used to send `LIMIT 0` and be refused; a limit is 1 or more.
    #[test]
    fn a_semaphore_worker_needs_a_limit_of_one_or_more() {
        assert!(WorkerArgs::from_args(&args("shared:0")).is_none());
        assert!(WorkerArgs::from_args(&args("shared:x")).is_none());
        let w = WorkerArgs::from_args(&args("shared:2")).expect("a limit of 2");
        assert!(matches!(w.mode, Mode::Shared(2)));
        assert_eq!(
            WorkerArgs::from_args(&w.to_args()[1..]).map(|w| w.id),
            Some(1)
        );
    }
}
