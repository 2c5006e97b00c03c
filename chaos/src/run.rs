//! One run of a scenario: the fenced store, the worker processes (spawned from this very
//! binary), their history, and the check at the end.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::Server;
use crate::history::{self, Verdict};
use crate::net::{Host, Net, NetServer};

/// Where a run's fenced store runs (kept for the run's lifetime).
enum Store {
    Local(#[allow(dead_code)] Server),
    Host(#[allow(dead_code)] NetServer),
}
use crate::register::{self, RegisterVerdict};
use crate::store::FencedStore;
use crate::worker::{now_us, Mode, WorkerArgs};

/// Whether relock claims mutual exclusion under a scenario's faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Violations must be 0.
    Safe,
    /// Violations are reported, not asserted; fencing and token order must still hold.
    NotClaimed,
    /// Two masters serve at once (a split with asynchronous replication): neither exclusion
    /// nor token order is promised, as the docs say; the run shows what happens. Only the
    /// store's own replay must agree, and the run must have done work.
    SplitBrain,
}

/// A scenario's outcome: one row of the results table.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: &'static str,
    pub claim: Claim,
    /// How many faults the nemesis injected: a run with none proves nothing.
    pub injected: usize,
    pub faults: String,
    /// The scenario's faults make holders write after their validity (paused holders): the
    /// fenced store must have been put to use, not just never asked.
    pub expects_late_writes: bool,
    pub verdict: Verdict,
    /// The fenced register's check, when the run's holders wrote it.
    pub register: Option<RegisterVerdict>,
    pub errors: usize,
}

impl Outcome {
    /// Marks a scenario whose faults must produce late writes (see `expects_late_writes`).
    pub fn expecting_late_writes(mut self) -> Outcome {
        self.expects_late_writes = true;
        self
    }

    /// The verdict column: ok, or why not.
    pub fn verdict_text(&self) -> &'static str {
        if self.injected == 0 {
            "FAILED (no fault injected)"
        } else if self.expects_late_writes && self.verdict.late == 0 {
            "FAILED (no late write: fencing not exercised)"
        } else if self.passed() {
            "ok"
        } else {
            "FAILED"
        }
    }

    /// Whether the scenario met what relock claims for it.
    pub fn passed(&self) -> bool {
        let v = &self.verdict;
        let fencing = v.backwards == 0
            && v.duplicates == 0
            && v.store_errors == 0
            && v.stale == v.stale_rejected;
        let losses_in_time = v.late_losses == 0 && v.late_acts == 0;
        let live = v.holds > 0 && v.accepted > 0;
        let exercised = self.injected > 0 && (!self.expects_late_writes || v.late > 0);
        if !exercised {
            return false;
        }
        let register_live = self.register.as_ref().is_none_or(|r| r.writes > 0);
        let linearizable = self.register.as_ref().is_none_or(|r| r.violations == 0);
        match self.claim {
            Claim::Safe => {
                fencing
                    && live
                    && register_live
                    && linearizable
                    && losses_in_time
                    && v.violations == 0
            }
            Claim::NotClaimed => fencing && live && register_live,
            Claim::SplitBrain => v.store_errors == 0 && live && register_live,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Holding,
}

/// The workers of a run and what they report.
pub struct Run {
    pub name: &'static str,
    pub ttl_ms: u64,
    deadline: Instant,
    /// The fenced store: a local server, or one in the test network's store host.
    _store: Store,
    /// The store's URL as the workers (and the check) reach it.
    store_url: String,
    dir: tempfile::TempDir,
    urls_file: PathBuf,
    wait_replicas: u32,
    /// Holders also write and read the fenced register (`LOCK.FENCED ... SET/GET chaos:reg`).
    register: bool,
    /// How many holders the key allows at once (a semaphore's limit; 1 for a lock).
    limit: usize,
    procs: HashMap<u32, Child>,
    /// The test host of each worker started in one, by worker id.
    hosts: HashMap<u32, usize>,
    next_id: u32,
    lines: Arc<Mutex<Vec<(u64, String)>>>,
    phase: Arc<Mutex<HashMap<u32, Phase>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Run {
    /// A run of `run_ms` against the servers in `urls`.
    pub fn new(name: &'static str, urls: &[String], ttl_ms: u64, run_ms: u64) -> Run {
        let store = Server::without_module(&[]);
        let url = store.url();
        Run::with_store(name, urls, ttl_ms, run_ms, Store::Local(store), url)
    }

    /// A run whose workers live in test hosts of `net`: the store runs in the network's store
    /// host, which no fault cuts.
    pub fn on_net(name: &'static str, net: &Net, urls: &[String], ttl_ms: u64, run_ms: u64) -> Run {
        let store = NetServer::plain(&net.store_host);
        let url = store.url();
        Run::with_store(name, urls, ttl_ms, run_ms, Store::Host(store), url)
    }

    fn with_store(
        name: &'static str,
        urls: &[String],
        ttl_ms: u64,
        run_ms: u64,
        store: Store,
        store_url: String,
    ) -> Run {
        let dir = tempfile::Builder::new()
            .prefix("relock-chaos-")
            .tempdir()
            .expect("temp dir");
        let urls_file = dir.path().join("urls");
        let run = Run {
            name,
            ttl_ms,
            deadline: Instant::now() + Duration::from_millis(run_ms),
            _store: store,
            store_url,
            dir,
            urls_file,
            wait_replicas: 0,
            register: false,
            limit: 1,
            procs: HashMap::new(),
            hosts: HashMap::new(),
            next_id: 1,
            lines: Arc::default(),
            phase: Arc::default(),
            readers: Vec::new(),
        };
        run.set_urls(urls);
        run
    }

    /// Workers of this run use a hold only after `WAIT n` confirmed it.
    pub fn wait_replicas(mut self, n: u32) -> Run {
        self.wait_replicas = n;
        self
    }

    /// Holders of this run also write and read the fenced register through `LOCK.FENCED`,
    /// and the run checks its history for linearizability (see `register.rs`).
    pub fn with_register(mut self) -> Run {
        self.register = true;
        self
    }

    /// The key is a semaphore of `limit` permits (workers in `Mode::Shared(limit)`).
    pub fn limit(mut self, limit: usize) -> Run {
        self.limit = limit;
        self
    }

    /// Tells the workers (on their next error) which servers to use.
    pub fn set_urls(&self, urls: &[String]) {
        let tmp = self.dir.path().join("urls.tmp");
        let _ = std::fs::write(&tmp, urls.join("\n"));
        let _ = std::fs::rename(&tmp, &self.urls_file);
    }

    /// Whether the run's time is not up yet.
    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Sleeps `ms`, but not past the end of the run.
    pub fn sleep(&self, ms: u64) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        thread::sleep(left.min(Duration::from_millis(ms)));
    }

    /// Starts a worker process; its lifetime ends with the run.
    pub fn spawn(&mut self, mode: Mode) -> u32 {
        self.spawn_in(None, mode)
    }

    /// Starts a worker process in test host `host`.
    pub fn spawn_on(&mut self, host: &Host, mode: Mode) -> u32 {
        self.spawn_in(Some(host), mode)
    }

    fn spawn_in(&mut self, host: Option<&Host>, mode: Mode) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let args = WorkerArgs {
            id,
            mode,
            urls_file: self.urls_file.display().to_string(),
            store: self.store_url.clone(),
            key: "chaos:lock".into(),
            ttl_ms: self.ttl_ms,
            run_ms: u64::try_from(left.as_millis()).unwrap_or(0),
            wait_replicas: self.wait_replicas,
            register: self.register,
        };
        let exe = std::env::current_exe().expect("current exe");
        let mut cmd = match host {
            Some(h) => h.command(exe),
            None => Command::new(exe),
        };
        let mut child = cmd
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        let stdout = child.stdout.take().expect("worker stdout");
        let lines = Arc::clone(&self.lines);
        let phase = Arc::clone(&self.phase);
        phase.lock().expect("phase").insert(id, Phase::Idle);
        self.readers.push(thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let now = now_us();
                match line.split('\t').next() {
                    Some("G") => {
                        phase.lock().expect("phase").insert(id, Phase::Holding);
                    }
                    Some("R") => {
                        phase.lock().expect("phase").insert(id, Phase::Idle);
                    }
                    _ => {}
                }
                lines.lock().expect("lines").push((now, line));
            }
        }));
        self.procs.insert(id, child);
        if let Some(h) = host {
            self.hosts.insert(id, h.index);
        }
        id
    }

    /// The index of the test host worker `id` runs in.
    pub fn host_of(&self, id: u32) -> Option<usize> {
        self.hosts.get(&id).copied()
    }

    fn pick(&self, wanted: Phase) -> Option<u32> {
        let phase = self.phase.lock().expect("phase");
        let mut ids: Vec<u32> = phase
            .iter()
            .filter(|(id, p)| **p == wanted && self.procs.contains_key(id))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        (!ids.is_empty()).then(|| ids[fastrand::usize(..ids.len())])
    }

    /// A worker that currently holds the lock (as far as its reports say).
    pub fn holder(&self) -> Option<u32> {
        self.pick(Phase::Holding)
    }

    /// A worker that does not hold the lock (so it is waiting for it, or about to).
    pub fn waiter(&self) -> Option<u32> {
        self.pick(Phase::Idle)
    }

    /// Waits up to `ms` for a worker to hold the lock.
    pub fn wait_for_holder(&self, ms: u64) -> Option<u32> {
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until && self.running() {
            if let Some(id) = self.holder() {
                return Some(id);
            }
            thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// Waits up to `ms` for a hold granted (reply received) after `since_us`.
    pub fn wait_for_grant_after(&self, since_us: u64, ms: u64) -> bool {
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until && self.running() {
            let lines = self.lines.lock().expect("lines");
            let seen = lines.iter().rev().any(|(_, l)| {
                l.starts_with("G\t")
                    && l.split('\t')
                        .nth(6)
                        .and_then(|t| t.parse::<u64>().ok())
                        .is_some_and(|t1| t1 > since_us)
            });
            drop(lines);
            if seen {
                return true;
            }
            thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Sends `sig` ("STOP", "CONT", "KILL") to worker `id`.
    pub fn signal(&self, id: u32, sig: i32) {
        if let Some(child) = self.procs.get(&id) {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) on a child we spawned and have not reaped.
                unsafe { libc::kill(pid, sig) };
            }
        }
    }

    /// SIGKILLs worker `id` and reaps it.
    pub fn kill(&mut self, id: u32) {
        if let Some(mut child) = self.procs.remove(&id) {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.phase.lock().expect("phase").remove(&id);
    }

    /// Waits for the workers to end, reads the store's log and checks the history.
    pub fn finish(mut self, claim: Claim, injected: usize, faults: String) -> Outcome {
        for id in self.procs.keys().copied().collect::<Vec<_>>() {
            self.signal(id, libc::SIGCONT);
        }
        let hard_stop = Instant::now() + Duration::from_millis(self.ttl_ms * 4 + 5_000);
        for (_, mut child) in self.procs.drain() {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > hard_stop => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let lines: Vec<String> = std::mem::take(&mut *self.lines.lock().expect("lines"))
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        let (holds, errors) = history::parse(&lines);
        let log = FencedStore::connect(&self.store_url)
            .and_then(|mut s| s.log())
            .unwrap_or_default();
        let verdict = history::check(&holds, &log, self.limit);
        let register = self.register.then(|| {
            let mut ops = register_ops(&lines);
            // The register as the run leaves it: a read after every operation returned.
            let invoked_us = now_us();
            let last = std::fs::read_to_string(&self.urls_file).unwrap_or_default();
            let last = last.lines().next().unwrap_or_default().to_string();
            let value: redis::RedisResult<Option<u64>> = redis::Client::open(last.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
                .and_then(|mut c| {
                    c.set_read_timeout(Some(Duration::from_secs(5)))?;
                    redis::cmd("GET").arg(REGISTER_KEY).query(&mut c)
                });
            if let Ok(value) = value {
                ops.push(register::Op::Read {
                    value: value.unwrap_or(0),
                    invoked_us,
                    returned_us: now_us(),
                });
            }
            register::check(&ops)
        });
        Outcome {
            name: self.name,
            claim,
            injected,
            faults,
            expects_late_writes: false,
            verdict,
            register,
            errors,
        }
    }
}

/// The register's key (on the lock server, beside the lock).
pub const REGISTER_KEY: &str = "chaos:reg";

/// The fenced register's operations from the workers' lines (see `history.rs`): `F id seq
/// token t_inv t_ret ok|fenced|unknown` and `Q id seq t_inv t_ret value`. Refused writes had no
/// effect and are left out.
fn register_ops(lines: &[String]) -> Vec<register::Op> {
    let mut ops = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        match (f.first().copied(), f.len()) {
            (Some("F"), 7) => match f[6] {
                "ok" => ops.push(register::Op::Write {
                    token: num(3),
                    invoked_us: num(4),
                    returned_us: Some(num(5)),
                }),
                "unknown" => ops.push(register::Op::Write {
                    token: num(3),
                    invoked_us: num(4),
                    returned_us: None,
                }),
                _ => {}
            },
            (Some("Q"), 6) => ops.push(register::Op::Read {
                value: num(5),
                invoked_us: num(3),
                returned_us: num(4),
            }),
            _ => {}
        }
    }
    ops
}

impl Drop for Run {
    fn drop(&mut self) {
        for (_, mut child) in self.procs.drain() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(injected: usize, late: usize, expects_late_writes: bool) -> Outcome {
        Outcome {
            name: "t",
            claim: Claim::Safe,
            injected,
            faults: String::new(),
            expects_late_writes,
            register: None,
            verdict: Verdict {
                holds: 10,
                used: 10,
                writes: 10,
                accepted: 10 - late,
                late,
                late_rejected: late,
                stale: late,
                stale_rejected: late,
                ..Verdict::default()
            },
            errors: 0,
        }
    }

    #[test]
    fn a_run_without_faults_or_without_the_writes_it_exists_for_fails() {
        assert!(outcome(3, 0, false).passed());
        assert!(!outcome(0, 0, false).passed(), "no fault injected");
        assert!(!outcome(2, 0, true).passed(), "fencing never exercised");
        assert!(outcome(2, 1, true).passed());
        assert_eq!(
            outcome(0, 0, false).verdict_text(),
            "FAILED (no fault injected)"
        );
    }
}
