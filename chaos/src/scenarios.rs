//! The scenarios: which servers, which workers, which faults.

use std::time::Duration;

use crate::common::{link_up, Server};
use crate::run::{Claim, Outcome, Run};
use crate::worker::{now_us, Mode};

/// How long each scenario runs.
#[derive(Debug, Clone, Copy)]
pub struct Length {
    pub run_ms: u64,
    /// Of a network scenario (`netscenarios.rs`): longer, as its faults last seconds.
    pub net_ms: u64,
}

/// Lock lifetime of the single-server scenarios.
const TTL: u64 = 400;
/// Lock lifetime of the Redlock scenarios (5 masters, so rounds take longer).
const REDLOCK_TTL: u64 = 600;

pub type Scenario = (&'static str, fn(Length) -> Outcome);

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    ("pause", pause),
    ("kill-client", kill_client),
    ("restart-aof", restart_aof),
    ("restart-nopersist", restart_nopersist),
    ("failover-async", failover_async),
    ("failover-wait", failover_wait),
    ("redlock-restart", redlock_restart),
    ("redlock-delayed-restart", redlock_delayed_restart),
    ("redlock-clock-jump", redlock_clock_jump),
];

fn mixed_workers(run: &mut Run, n: usize) {
    for i in 0..n {
        run.spawn(if i % 2 == 0 { Mode::Wait } else { Mode::Client });
    }
}

/// A holder SIGSTOPped for 2 x ttl (a GC pause), then continued: it writes late.
fn pause(len: Length) -> Outcome {
    let server = Server::start();
    let mut run = Run::new("pause", &[server.url()], TTL, len.run_ms);
    mixed_workers(&mut run, 4);
    let mut pauses = 0;
    while run.running() {
        run.sleep(TTL);
        if let Some(id) = run.wait_for_holder(TTL) {
            run.signal(id, libc::SIGSTOP);
            run.sleep(TTL * 2 + 100);
            run.signal(id, libc::SIGCONT);
            pauses += 1;
        }
    }
    run.finish(
        Claim::Safe,
        pauses,
        format!("{pauses} holders paused 2×ttl"),
    )
    .expecting_late_writes()
}

/// Clients SIGKILLed while holding (the lock expires) and while waiting (they leave the queue).
fn kill_client(len: Length) -> Outcome {
    let server = Server::start();
    let mut run = Run::new("kill-client", &[server.url()], TTL, len.run_ms);
    mixed_workers(&mut run, 5);
    let (mut holders, mut waiters) = (0, 0);
    let mut turn = 0;
    while run.running() {
        run.sleep(TTL / 2);
        turn += 1;
        let victim = if turn % 2 == 0 {
            run.wait_for_holder(TTL).inspect(|_| holders += 1)
        } else {
            run.waiter().inspect(|_| waiters += 1)
        };
        if let Some(id) = victim {
            run.kill(id);
            run.spawn(if turn % 4 < 2 {
                Mode::Wait
            } else {
                Mode::Client
            });
        }
    }
    run.finish(
        Claim::Safe,
        holders + waiters,
        format!("{holders} holders + {waiters} waiters SIGKILLed"),
    )
}

/// redis-server SIGKILLed and restarted, every lock change fsynced to the AOF.
fn restart_aof(len: Length) -> Outcome {
    let mut server = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut run = Run::new("restart-aof", &[server.url()], TTL, len.run_ms);
    mixed_workers(&mut run, 4);
    let mut restarts = 0;
    while run.running() {
        run.sleep(TTL * 2);
        if run.running() {
            server.restart();
            restarts += 1;
        }
    }
    run.finish(
        Claim::Safe,
        restarts,
        format!("{restarts} SIGKILL+restarts (appendfsync always)"),
    )
}

/// redis-server SIGKILLed and restarted with no persistence: every lock is forgotten.
fn restart_nopersist(len: Length) -> Outcome {
    let mut server = Server::start();
    let mut run = Run::new("restart-nopersist", &[server.url()], TTL, len.run_ms);
    mixed_workers(&mut run, 4);
    let mut restarts = 0;
    while run.running() {
        run.sleep(TTL * 2);
        if run.running() && run.wait_for_holder(TTL).is_some() {
            server.restart();
            restarts += 1;
        }
    }
    run.finish(
        Claim::NotClaimed,
        restarts,
        format!("{restarts} SIGKILL+restarts (no persistence)"),
    )
}

fn replica_of(master: &Server) -> Server {
    let port = master.port.to_string();
    let replica = Server::with_args(&["--replicaof", "127.0.0.1", &port]);
    let mut c = replica.conn();
    assert!(
        link_up(&mut c, Duration::from_secs(10)),
        "replica did not sync"
    );
    replica
}

/// Master + replica; the replica lags (SIGSTOP), the master is SIGKILLed, the replica is
/// promoted with `REPLICAOF NO ONE`, and a new replica is attached. With `wait_replicas`, a
/// worker uses a hold only after `WAIT` confirmed it on the replica.
fn failover(name: &'static str, len: Length, wait_replicas: u32) -> Outcome {
    let mut master = Server::start();
    let mut replica = replica_of(&master);
    let mut run = Run::new(name, &[master.url(), replica.url()], TTL, len.run_ms)
        .wait_replicas(wait_replicas);
    for _ in 0..4 {
        run.spawn(Mode::Wait);
    }
    let mut failovers = 0;
    while run.running() {
        run.sleep(TTL * 2);
        if !run.running() {
            break;
        }
        // The replica falls behind while grants go on; then the master dies.
        // Longer than the ttl, so that the holds it last saw have expired when it takes over.
        replica.signal("STOP");
        run.sleep(TTL + 100);
        let _ = run.wait_for_holder(TTL);
        master.kill();
        replica.signal("CONT");
        let mut c = replica.conn();
        let _: redis::RedisResult<()> = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut c);
        failovers += 1;
        master = replica;
        run.set_urls(&[master.url()]);
        replica = replica_of(&master);
        run.set_urls(&[master.url(), replica.url()]);
    }
    let what = if wait_replicas > 0 {
        "holds used only after WAIT 1"
    } else {
        "asynchronous replication"
    };
    run.finish(
        if wait_replicas > 0 {
            Claim::Safe
        } else {
            Claim::NotClaimed
        },
        failovers,
        format!("{failovers} failovers to a lagging replica ({what})"),
    )
}

fn failover_async(len: Length) -> Outcome {
    failover("failover-async", len, 0)
}

fn failover_wait(len: Length) -> Outcome {
    failover("failover-wait", len, 1)
}

fn masters(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

fn two_of(n: usize) -> (usize, usize) {
    let a = fastrand::usize(..n);
    let b = (a + 1 + fastrand::usize(..n - 1)) % n;
    (a, b)
}

/// Redlock over 5 masters without persistence; a random minority (2) is SIGKILLed and restarted
/// at once, again and again: a restarted master forgets the holds it granted.
fn redlock_restart(len: Length) -> Outcome {
    let mut ms = masters(5);
    let urls: Vec<String> = ms.iter().map(Server::url).collect();
    let mut run = Run::new("redlock-restart", &urls, REDLOCK_TTL, len.run_ms);
    for _ in 0..4 {
        run.spawn(Mode::Client);
    }
    let mut restarts = 0;
    while run.running() {
        run.sleep(REDLOCK_TTL / 3 + fastrand::u64(..REDLOCK_TTL / 3));
        let (a, b) = two_of(ms.len());
        ms[a].kill();
        ms[b].kill();
        run.sleep(20);
        ms[a].restart();
        ms[b].restart();
        restarts += 2;
    }
    run.finish(
        Claim::NotClaimed,
        restarts,
        format!("{restarts} master restarts, 2 at a time, immediate, no persistence"),
    )
}

/// As above, but a killed master stays down longer than the ttl before it restarts (Redlock's
/// rule for masters without persistence).
fn redlock_delayed_restart(len: Length) -> Outcome {
    let mut ms = masters(5);
    let urls: Vec<String> = ms.iter().map(Server::url).collect();
    let mut run = Run::new("redlock-delayed-restart", &urls, REDLOCK_TTL, len.run_ms);
    for _ in 0..4 {
        run.spawn(Mode::Client);
    }
    let mut restarts = 0;
    while run.running() {
        run.sleep(REDLOCK_TTL / 3 + fastrand::u64(..REDLOCK_TTL / 3));
        let (a, b) = two_of(ms.len());
        ms[a].kill();
        ms[b].kill();
        // Down for longer than the ttl even if the run ends meanwhile.
        std::thread::sleep(Duration::from_millis(REDLOCK_TTL * 3 / 2 + 100));
        ms[a].restart();
        ms[b].restart();
        restarts += 2;
    }
    run.finish(
        Claim::Safe,
        restarts,
        format!("{restarts} master restarts, 2 at a time, each after 1.5×ttl down"),
    )
}

/// What a forward clock jump of `by_ms` does to a server's keys: every key's remaining TTL
/// shrinks by the jump (Redis's expiries are absolute), at least to 1 ms.
pub fn jump_clock(c: &mut redis::Connection, by_ms: u64) {
    let jump = redis::Script::new(
        r"
        local n = 0
        for _, k in ipairs(redis.call('KEYS', '*')) do
          local t = redis.call('PTTL', k)
          if t > 0 then
            redis.call('PEXPIRE', k, math.max(1, t - tonumber(ARGV[1])))
            n = n + 1
          end
        end
        return n",
    );
    let _: redis::RedisResult<i64> = jump.arg(by_ms).invoke(c);
}

/// A forward clock jump on one master, simulated: every key's remaining TTL on that master
/// shrinks by the jump, which is exactly what a jump does to Redis's absolute expiries
/// (libfaketime cannot be preloaded into Debian's jemalloc redis-server: see the Safety section of the README). The
/// jump comes while two other masters are SIGSTOPped (a minority partition), so the current
/// hold sits on a bare quorum that includes the jumping master.
fn redlock_clock_jump(len: Length) -> Outcome {
    let ms = masters(5);
    let urls: Vec<String> = ms.iter().map(Server::url).collect();
    let mut run = Run::new("redlock-clock-jump", &urls, REDLOCK_TTL, len.run_ms);
    for _ in 0..4 {
        run.spawn(Mode::Client);
    }
    let mut jumps = 0;
    let mut jumper = ms[0].conn();
    while run.running() {
        run.sleep(REDLOCK_TTL);
        if !run.running() {
            break;
        }
        ms[3].signal("STOP");
        ms[4].signal("STOP");
        let since = now_us();
        if run.wait_for_grant_after(since, REDLOCK_TTL * 2) {
            jump_clock(&mut jumper, REDLOCK_TTL * 10);
            jumps += 1;
        }
        ms[3].signal("CONT");
        ms[4].signal("CONT");
        run.sleep(REDLOCK_TTL * 2);
    }
    run.finish(
        Claim::NotClaimed,
        jumps,
        format!("{jumps} jumps of +10×ttl on 1 master, 2 others SIGSTOPped"),
    )
}
