//! `lockctl`: run a command while holding a relock lock, and inspect or break locks.
//!
//! Exit codes of `lockctl run`: the command's own (128 + signal when it was killed by one);
//! 75 when the lock could not be acquired; 76 when the lock was lost while the command ran
//! (the command then gets SIGTERM, and SIGKILL after `--grace`); 127/126 when the command
//! could not be started; 2 for usage errors.
//!
//! The command's environment gets `RELOCK_KEY`, `RELOCK_OWNER`, `RELOCK_TOKEN` (with one
//! server its fencing token; with several, the token of the first master in `--servers`
//! order that granted) and `RELOCK_TOKENS` (every master's token in `--servers` order,
//! comma-separated, empty where a master did not grant).
//!
//! With `--cluster`, `--servers` are seed nodes of one Redis Cluster; `info` and
//! `force-release` then name the master that serves the key.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use relock_client::{parse_duration, Error, Lock, LockInfo, NodeReport, Options, Relock};
use tokio::signal::unix::{signal, SignalKind};

/// The server used when neither `--servers` nor `RELOCK_SERVERS` names one.
const DEFAULT_SERVER: &str = "redis://127.0.0.1:6379";
/// Exit status when the lock could not be acquired (EX_TEMPFAIL).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lock was lost while the command ran.
const EXIT_LOST: u8 = 76;

#[derive(Parser)]
#[command(
    name = "lockctl",
    version,
    about = "Run a command under a relock lock; inspect and break locks"
)]
struct Cli {
    /// Comma-separated redis:// URLs of the relock masters (one for plain locking, N for
    /// Redlock with a quorum of N/2+1).
    #[arg(
        long,
        global = true,
        env = "RELOCK_SERVERS",
        default_value = DEFAULT_SERVER,
        value_delimiter = ','
    )]
    servers: Vec<String>,

    /// How long one master may take to answer one command.
    #[arg(long, global = true, default_value = "100ms", value_parser = parse_duration)]
    node_timeout: Duration,

    /// Treat `--servers` as seed nodes of one Redis Cluster: each lock lives on the master of
    /// its key's hash slot (no Redlock quorum), and redirections are followed.
    #[arg(long, global = true, env = "RELOCK_CLUSTER")]
    cluster: bool,

    /// How many replicas of a master must acknowledge each acquire and renewal (WAIT) before
    /// it counts; if fewer do, the acquisition is released again. 0 turns it off.
    #[arg(long, global = true, env = "RELOCK_REPLICA_ACKS", default_value_t = 0)]
    replica_acks: u32,

    /// How long a master waits for those acknowledgements.
    #[arg(long, global = true, default_value = "500ms", value_parser = parse_duration)]
    replica_ack_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire KEY, run COMMAND with the lock kept alive, release it when COMMAND exits, and
    /// exit with COMMAND's status (75: not acquired, 76: lock lost while running).
    Run {
        /// Lock lifetime; the lock is renewed every ttl/3 while the command runs.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// How long to wait for the lock (default: without limit; 0: try once).
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// After the lock is lost, how long the command has between SIGTERM and SIGKILL.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        grace: Duration,
        /// The lock's key.
        key: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Show who holds KEY on each master (LOCK.INFO).
    Info {
        /// The lock's key.
        key: String,
    },
    /// Break the lock at KEY on every master, whoever holds it (LOCK.FORCERELEASE).
    ForceRelease {
        /// The lock's key.
        key: String,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockctl: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async_main(cli))
}

async fn async_main(cli: Cli) -> ExitCode {
    let options = Options {
        node_timeout: cli.node_timeout,
        replica_acks: cli.replica_acks,
        replica_ack_timeout: cli.replica_ack_timeout,
        ..Options::default()
    };
    let mut servers: Vec<&str> = cli
        .servers
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if servers.is_empty() {
        // RELOCK_SERVERS set but empty: same as unset.
        servers.push(DEFAULT_SERVER);
    }
    let relock = if cli.cluster {
        Relock::cluster(&servers, options)
    } else {
        Relock::with_options(&servers, options)
    };
    let relock = match relock {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lockctl: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Run {
            ttl,
            wait,
            grace,
            key,
            command,
        } => run(&relock, &key, ttl, wait, grace, &command).await,
        Command::Info { key } => info(&relock, &key).await,
        Command::ForceRelease { key } => force_release(&relock, &key).await,
    }
}

fn describe(info: &LockInfo) -> String {
    format!(
        "held by {} (token {}, count {}, expires in {:.1}s, {} waiting)",
        info.owner,
        info.token,
        info.count,
        info.ttl.as_secs_f64(),
        info.waiters
    )
}

/// Says on stderr who holds `key`, master by master.
async fn report_holders(relock: &Relock, key: &str, prefix: &str) {
    for report in relock.info(key).await {
        match report.result {
            Ok(Some(info)) => eprintln!(
                "lockctl: {prefix}{key} on {}: {}",
                report.node,
                describe(&info)
            ),
            Ok(None) => eprintln!("lockctl: {prefix}{key} on {}: not locked", report.node),
            Err(e) => eprintln!("lockctl: {prefix}{key} on {}: {e}", report.node),
        }
    }
}

async fn acquire(
    relock: &Relock,
    key: &str,
    ttl: Duration,
    wait: Option<Duration>,
) -> Result<Lock, Error> {
    let acquisition = relock.acquire_wait(key, ttl, wait);
    tokio::pin!(acquisition);
    // Only say something when the lock is not free at once.
    let mut next_report = tokio::time::Instant::now() + Duration::from_millis(150);
    loop {
        tokio::select! {
            result = &mut acquisition => return result,
            _ = tokio::time::sleep_until(next_report) => {
                report_holders(relock, key, "waiting for ").await;
                next_report += Duration::from_secs(5);
            }
        }
    }
}

async fn run(
    relock: &Relock,
    key: &str,
    ttl: Duration,
    wait: Option<Duration>,
    grace: Duration,
    command: &[OsString],
) -> ExitCode {
    let lock = match acquire(relock, key, ttl, wait).await {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("lockctl: could not acquire {key}: {e}");
            if matches!(e, Error::NoQuorum { .. } | Error::WaitTimeout { .. }) {
                report_holders(relock, key, "").await;
            }
            return ExitCode::from(EXIT_NOT_ACQUIRED);
        }
    };
    let token = lock.token().map(|t| t.to_string()).unwrap_or_default();
    let mut per_node = vec![String::new(); relock.nodes().len()];
    for (node, t) in lock.tokens() {
        if let Some(i) = relock.nodes().iter().position(|n| *n == node) {
            per_node[i] = t.to_string();
        }
    }
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("RELOCK_KEY", key)
        .env("RELOCK_OWNER", lock.owner())
        .env("RELOCK_TOKEN", &token)
        .env("RELOCK_TOKENS", per_node.join(","))
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("lockctl: cannot run {:?}: {e}", command[0]);
            let _ = lock.release().await;
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let guard = lock.keep_alive();
    let lost = guard.lost();
    let (Ok(mut sigterm), Ok(mut sigint), Ok(mut sighup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        eprintln!("lockctl: cannot install signal handlers");
        let _ = child.start_kill();
        let _ = child.wait().await;
        let _ = guard.release().await;
        return ExitCode::FAILURE;
    };
    let forward = |child: &tokio::process::Child, sig: i32| {
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
            unsafe {
                libc::kill(pid as libc::pid_t, sig);
            }
        }
    };
    loop {
        tokio::select! {
            biased;
            status = child.wait() => {
                let code = match status {
                    Ok(status) => exit_code(status),
                    Err(e) => {
                        eprintln!("lockctl: waiting for the command failed: {e}");
                        1
                    }
                };
                match guard.release().await {
                    Ok(()) => {}
                    Err(Error::Lost { .. }) => eprintln!("lockctl: lock {key} was lost as the command ended"),
                    Err(e) => eprintln!("lockctl: releasing {key}: {e} (it will expire within {ttl:?})"),
                }
                return ExitCode::from(code);
            }
            _ = lost.cancelled() => break,
            _ = sigterm.recv() => forward(&child, libc::SIGTERM),
            _ = sigint.recv() => forward(&child, libc::SIGINT),
            _ = sighup.recv() => forward(&child, libc::SIGHUP),
        }
    }
    eprintln!(
        "lockctl: lock {key} was lost; stopping the command (SIGTERM, SIGKILL after {grace:?})"
    );
    forward(&child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let _ = guard.release().await;
    ExitCode::from(EXIT_LOST)
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        _ => 1,
    }
}

async fn info(relock: &Relock, key: &str) -> ExitCode {
    print_reports(relock.info(key).await, |info| match info {
        Some(i) => format!(
            "owner={} token={} count={} ttl_ms={} waiters={}",
            i.owner,
            i.token,
            i.count,
            i.ttl.as_millis(),
            i.waiters
        ),
        None => "not locked".to_string(),
    })
}

async fn force_release(relock: &Relock, key: &str) -> ExitCode {
    print_reports(relock.force_release(key).await, |released| {
        if *released { "released" } else { "not locked" }.to_string()
    })
}

/// Prints one line per master (`node<TAB>what it said`); fails if any master failed.
fn print_reports<T>(reports: Vec<NodeReport<T>>, describe: impl Fn(&T) -> String) -> ExitCode {
    let mut failed = false;
    for report in reports {
        match &report.result {
            Ok(answer) => println!("{}\t{}", report.node, describe(answer)),
            Err(e) => {
                failed = true;
                println!("{}\terror: {e}", report.node);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
