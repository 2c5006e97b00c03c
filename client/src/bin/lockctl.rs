//! `lockctl`: run a command while holding a relock lock, and inspect or break locks.
//!
//! Exit codes of `lockctl run`: the command's own (128 + signal when it was killed by one);
//! 75 when the lock could not be acquired for now (held, no quorum, wait limit reached);
//! 76 when the lock was lost while the command ran (the command then gets SIGTERM, and SIGKILL
//! after `--grace`); 78 when a server's answer shows that retrying cannot help (the module is
//! not loaded, the login was refused, the key holds another type); 127/126 when the command
//! could not be started; 2 for usage errors (an invalid option or duration, one server named
//! twice), found before any server is contacted. A SIGINT, SIGTERM or SIGHUP before the
//! command starts makes lockctl give up (releasing whatever it was granted) and die of that
//! signal.
//!
//! The command's environment gets `RELOCK_KEY`, `RELOCK_OWNER`, `RELOCK_TOKEN` (with one
//! server its fencing token; with several, the token of the first master in `--servers`
//! order that granted) and `RELOCK_TOKENS` (every master's token in `--servers` order,
//! comma-separated, empty where a master did not grant).
//!
//! Signals: when lockctl runs in the foreground of a terminal, the command shares its process
//! group (and so the terminal): a Ctrl-C or hang-up reaches the command from the terminal, and
//! lockctl passes on only the signals sent to lockctl alone. Otherwise the command runs in a
//! process group of its own, and lockctl passes every SIGINT, SIGTERM and SIGHUP it gets to
//! that group. Either way the command gets each signal once. If lockctl itself dies, the
//! command is killed (SIGKILL): nothing would renew the lock any more.
//!
//! With `--cluster`, `--servers` are seed nodes of one Redis Cluster; `info` and
//! `force-release` then name the master that serves the key.
//!
//! `run --shared` takes a shared hold (the read side of a read-write lock: shared runs go on
//! together, an exclusive `run` waits for them); `run --limit N` a permit of a counting
//! semaphore: at most N commands run at once, on every machine, like `consul lock -n`. A limit
//! needs one server or `--cluster`: over several independent masters it is a usage error.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use relock_client::limits::parse_ttl;
use relock_client::{
    parse_duration, Error, HolderInfo, Lock, LockInfo, Mode, NodeReport, Options, Relock, MAX_LIMIT,
};

/// The server used when neither `--servers` nor `RELOCK_SERVERS` names one.
const DEFAULT_SERVER: &str = "redis://127.0.0.1:6379";
/// Exit status when the lock could not be acquired for now (EX_TEMPFAIL).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lock was lost while the command ran.
const EXIT_LOST: u8 = 76;
/// Exit status when a server's answer shows that retrying cannot help (EX_CONFIG).
const EXIT_PERMANENT: u8 = 78;
/// Exit status for usage errors.
const EXIT_USAGE: u8 = 2;
/// The most lockctl waits, before exiting, for releases still under way in the background.
const SETTLE_WITHIN: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(
    name = "lockctl",
    version,
    about = "Run a command under a relock lock; inspect and break locks"
)]
struct Cli {
    /// Comma-separated redis:// URLs of the relock masters (one for plain locking, N for
    /// Redlock with a quorum of N/2+1; each server at most once).
    #[arg(
        long,
        global = true,
        env = "RELOCK_SERVERS",
        default_value = DEFAULT_SERVER,
        value_delimiter = ','
    )]
    servers: Vec<String>,

    /// How long one master may take to answer one command (at least 1ms).
    #[arg(long, global = true, default_value = "100ms", value_parser = parse_duration)]
    node_timeout: Duration,

    /// Treat `--servers` as seed nodes of one Redis Cluster: each lock lives on the master of
    /// its key's hash slot (no Redlock quorum), and redirections and failovers are followed.
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
    /// exit with COMMAND's status (75: not acquired, 76: lock lost while running, 78: a
    /// server refused for good).
    Run {
        /// Lock lifetime (1ms to 1000000000s); the lock is renewed every ttl/3 while the
        /// command runs.
        #[arg(long, default_value = "30s", value_parser = parse_ttl)]
        ttl: Duration,
        /// How long to wait for the lock (default: without limit; 0: try once; above
        /// 1000000000s: 1000000000s).
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// After the lock is lost, how long the command has between SIGTERM and SIGKILL.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        grace: Duration,
        /// Share KEY with other shared runs (a read lock): they run together, while an
        /// exclusive run (the default) waits for all of them, and shared runs that come after
        /// a waiting exclusive one wait for it.
        #[arg(long)]
        shared: bool,
        /// At most N commands hold KEY at once (a counting semaphore, 1 to 1000000; implies
        /// --shared). Every run on KEY must give the same N. Needs one server or --cluster.
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<u32>,
        /// The lock's key.
        key: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Show who holds KEY on each master: its mode and limit, and every holder of a shared
    /// lock (LOCK.INFO, LOCK.HOLDERS).
    Info {
        /// The lock's key.
        key: String,
    },
    /// Break the lock at KEY on every master, whoever holds it, or only OWNER's hold
    /// (LOCK.FORCERELEASE).
    ForceRelease {
        /// The lock's key.
        key: String,
        /// Remove only this holder's hold (one of a shared lock's holders).
        owner: Option<String>,
    },
}

/// A `--limit`: an integer in 1 ..= MAX_LIMIT.
fn parse_limit(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a limit (an integer from 1 to {MAX_LIMIT})"
        )),
    }
}

/// The mode of `run --shared` / `run --limit N` (a limit implies shared).
fn run_mode(shared: bool, limit: Option<u32>) -> Mode {
    match (shared, limit) {
        (_, Some(n)) => Mode::limited(n),
        (true, None) => Mode::shared(),
        (false, None) => Mode::Exclusive,
    }
}

fn main() -> ExitCode {
    // Colour only for a person at a terminal, and not for one who asked for none
    // (https://no-color.org: NO_COLOR set and not empty).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
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
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match cli.command {
        Command::Run {
            ttl,
            wait,
            grace,
            shared,
            limit,
            key,
            command,
        } => {
            let relock = match relock.with_mode(run_mode(shared, limit)) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("lockctl: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            let code = run(&relock, &key, ttl, wait, grace, &command).await;
            // Releases of failed or abandoned rounds must not be cut off by the exit.
            let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
            code
        }
        Command::Info { key } => info(&relock, &key).await,
        Command::ForceRelease { key, owner } => {
            force_release(&relock, &key, owner.as_deref()).await
        }
    }
}

fn describe(info: &LockInfo) -> String {
    match info.mode {
        Mode::Shared { limit } => format!(
            "shared by {} holder{}{} (the last lease ends in {:.1}s, {} waiting)",
            info.holders,
            if info.holders == 1 { "" } else { "s" },
            limit
                .map(|n| format!(" of at most {n}"))
                .unwrap_or_default(),
            info.ttl.as_secs_f64(),
            info.waiters
        ),
        Mode::Exclusive => format!(
            "held by {} (token {}, count {}, expires in {:.1}s, {} waiting)",
            info.owner.as_deref().unwrap_or("?"),
            known(info.token),
            known(info.count),
            info.ttl.as_secs_f64(),
            info.waiters
        ),
    }
}

/// A number a reply may leave out, as text.
fn known(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_string(), |n| n.to_string())
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

/// How the acquisition ended.
enum Acquired {
    Lock(Lock),
    Failed(Error),
    /// A signal came first; the acquisition was dropped (its grants are released in the
    /// background).
    Interrupted(i32),
}

async fn acquire(
    relock: &Relock,
    key: &str,
    ttl: Duration,
    wait: Option<Duration>,
    signals: &mut signals::Pipe,
) -> Acquired {
    let acquisition = relock.acquire_wait(key, ttl, wait);
    tokio::pin!(acquisition);
    // Only say something when the lock is not free at once.
    let mut next_report = tokio::time::Instant::now() + Duration::from_millis(150);
    loop {
        tokio::select! {
            biased;
            received = signals.recv() => return Acquired::Interrupted(received.signal),
            result = &mut acquisition => return match result {
                Ok(lock) => Acquired::Lock(lock),
                Err(e) => Acquired::Failed(e),
            },
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
    // Before anything is acquired: a signal from now on is ours to handle, so none can leave
    // the lock held until its ttl.
    let mut signals = match signals::Pipe::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lockctl: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = relock.options();
    let renewal_bound = if options.replica_acks > 0 {
        options.node_timeout + options.replica_ack_timeout
    } else {
        options.node_timeout
    };
    if ttl < renewal_bound * 3 {
        eprintln!(
            "lockctl: warning: --ttl {ttl:?} is less than 3 x {renewal_bound:?}, the time one \
             renewal may take (--node-timeout{}); the lock is renewed every ttl/3 and will \
             likely be lost (exit 76) before the command ends",
            if options.replica_acks > 0 {
                " + --replica-ack-timeout"
            } else {
                ""
            }
        );
    }
    let lock = match acquire(relock, key, ttl, wait, &mut signals).await {
        Acquired::Lock(lock) => lock,
        Acquired::Failed(e) => {
            eprintln!("lockctl: could not acquire {key}: {e}");
            if matches!(e, Error::NoQuorum { .. } | Error::WaitTimeout { .. }) {
                report_holders(relock, key, "").await;
            }
            return ExitCode::from(if e.is_permanent() {
                EXIT_PERMANENT
            } else {
                EXIT_NOT_ACQUIRED
            });
        }
        Acquired::Interrupted(sig) => {
            eprintln!(
                "lockctl: {} while acquiring {key}; giving up",
                signals::name(sig)
            );
            let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
            signals::die_of(sig);
        }
    };
    let token = lock.token().map(|t| t.to_string()).unwrap_or_default();
    let mut per_node = vec![String::new(); relock.nodes().len()];
    for (node, t) in lock.tokens() {
        if let Some(i) = relock.nodes().iter().position(|n| *n == node) {
            per_node[i] = t.to_string();
        }
    }
    let owner = lock.owner().to_string();
    // Renewed from the grant on, however long starting the command takes.
    let guard = lock.keep_alive();
    let lost = guard.lost();
    if let Some(received) = signals.try_recv() {
        eprintln!(
            "lockctl: {} before {key}'s command started; releasing",
            signals::name(received.signal)
        );
        let _ = guard.release().await;
        let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
        signals::die_of(received.signal);
    }
    let shares_terminal = signals::in_terminal_foreground();
    let mut child = match signals::spawn(command, shares_terminal, |cmd| {
        cmd.env("RELOCK_KEY", key)
            .env("RELOCK_OWNER", &owner)
            .env("RELOCK_TOKEN", &token)
            .env("RELOCK_TOKENS", per_node.join(","));
    }) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("lockctl: cannot run {:?}: {e}", command[0]);
            let _ = guard.release().await;
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let target = signals::Target::new(&child, shares_terminal);
    loop {
        tokio::select! {
            biased;
            status = child.wait() => {
                let code = exit_code(status);
                match guard.release().await {
                    Ok(()) => {}
                    Err(Error::Lost { .. }) => eprintln!("lockctl: lock {key} was lost as the command ended"),
                    Err(e) => eprintln!("lockctl: releasing {key}: {e} (it will expire within {ttl:?})"),
                }
                return ExitCode::from(code);
            }
            _ = lost.cancelled() => break,
            received = signals.recv() => target.pass_on(received),
        }
    }
    eprintln!(
        "lockctl: lock {key} was lost; stopping the command (SIGTERM, SIGKILL after {grace:?})"
    );
    target.send(libc::SIGTERM);
    let kill_at = tokio::time::sleep(grace);
    tokio::pin!(kill_at);
    loop {
        tokio::select! {
            biased;
            _ = child.wait() => break,
            // Signals meant for the command during the grace period still reach it.
            received = signals.recv() => target.pass_on(received),
            _ = &mut kill_at => {
                target.send(libc::SIGKILL);
                let _ = child.wait().await;
                break;
            }
        }
    }
    let _ = guard.release().await;
    ExitCode::from(EXIT_LOST)
}

fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lockctl: waiting for the command failed: {e}");
            return 1;
        }
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        _ => 1,
    }
}

/// One line per master (`node<TAB>what LOCK.INFO said`), and below a shared lock's line one
/// line per holder (`node<TAB>holder owner=... token=... count=... ttl_ms=...`).
async fn info(relock: &Relock, key: &str) -> ExitCode {
    let reports = relock.info(key).await;
    let shared = reports
        .iter()
        .any(|r| matches!(&r.result, Ok(Some(i)) if i.mode.is_shared()));
    let holders = if shared {
        relock.holders(key, 0).await
    } else {
        Vec::new()
    };
    let mut failed = false;
    for report in reports {
        let info = match report.result {
            Ok(info) => info,
            Err(e) => {
                failed = true;
                println!("{}\terror: {e}", report.node);
                continue;
            }
        };
        println!("{}\t{}", report.node, info_line(info.as_ref()));
        if !info.is_some_and(|i| i.mode.is_shared()) {
            continue;
        }
        // The holders the same master listed (a cluster names the key's master in both).
        let listed = holders.iter().find(|h| h.node == report.node);
        match listed.map(|h| &h.result) {
            Some(Ok(Some(holders))) => {
                for h in holders {
                    println!("{}\t{}", report.node, holder_line(h));
                }
            }
            Some(Ok(None)) => {}
            Some(Err(e)) => {
                failed = true;
                println!("{}\terror: {e}", report.node);
            }
            None => {
                failed = true;
                println!("{}\terror: no list of holders", report.node);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// What `lockctl info` prints for a lock on one master.
fn info_line(info: Option<&LockInfo>) -> String {
    let Some(i) = info else {
        return "not locked".to_string();
    };
    match i.mode {
        Mode::Exclusive => format!(
            "owner={} token={} count={} ttl_ms={} waiters={} mode=exclusive",
            i.owner.as_deref().unwrap_or("?"),
            known(i.token),
            known(i.count),
            i.ttl.as_millis(),
            i.waiters
        ),
        Mode::Shared { limit } => format!(
            "mode=shared limit={} holders={} ttl_ms={} waiters={}",
            limit.map_or_else(|| "none".to_string(), |n| n.to_string()),
            i.holders,
            i.ttl.as_millis(),
            i.waiters
        ),
    }
}

fn holder_line(h: &HolderInfo) -> String {
    format!(
        "holder owner={} token={} count={} ttl_ms={}",
        h.owner,
        h.token,
        h.count,
        h.ttl.as_millis()
    )
}

async fn force_release(relock: &Relock, key: &str, owner: Option<&str>) -> ExitCode {
    let reports = relock.force_release_holds(key, owner).await;
    print_reports(reports, |removed| match (owner, *removed) {
        (None, 0) => "not locked".to_string(),
        (None, 1) => "released".to_string(),
        (None, n) => format!("released {n} holds"),
        (Some(o), 0) => format!("{o} holds nothing"),
        (Some(o), _) => format!("released {o}'s hold"),
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

/// Signals: who sent them, who else got them, and passing each on to the command once.
mod signals {
    use std::ffi::OsString;
    use std::io;
    use std::os::fd::IntoRawFd;

    use tokio::process::{Child, Command};

    /// The signals lockctl handles (and passes on to the command).
    const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    /// Marks a signal the kernel sent (a terminal's Ctrl-C or hang-up), not a process.
    const FROM_KERNEL: u8 = 0x80;

    /// One signal lockctl received.
    #[derive(Debug, Clone, Copy)]
    pub struct Received {
        pub signal: libc::c_int,
        /// Sent by the kernel (`si_code > 0`, e.g. `SI_KERNEL` for a terminal's Ctrl-C, which
        /// goes to the whole foreground process group), not by a process with kill(2).
        pub from_kernel: bool,
    }

    /// Signals as they arrive: the handler writes one byte per signal to a socket pair (the
    /// only thing it does, and async-signal-safe), read here.
    pub struct Pipe {
        rx: tokio::net::UnixStream,
    }

    impl Pipe {
        /// Installs the handlers; from now on SIGINT, SIGTERM and SIGHUP no longer end
        /// lockctl by themselves.
        pub fn install() -> io::Result<Pipe> {
            let (rx, tx) = std::os::unix::net::UnixStream::pair()?;
            rx.set_nonblocking(true)?;
            tx.set_nonblocking(true)?;
            // Kept open for the life of the process: the handlers write to it.
            let fd = tx.into_raw_fd();
            for sig in HANDLED {
                let action = move |info: &libc::siginfo_t| {
                    let from_kernel = if info.si_code > 0 { FROM_KERNEL } else { 0 };
                    let byte = (sig as u8) | from_kernel;
                    // SAFETY: write(2) on a non-blocking socket is async-signal-safe; a full
                    // buffer (thousands of pending signals) drops the byte, nothing worse.
                    unsafe {
                        libc::write(fd, (&byte as *const u8).cast(), 1);
                    }
                };
                // SAFETY: the action only calls write(2) (see above), as a signal handler must.
                unsafe { signal_hook_registry::register_sigaction(sig, action) }?;
            }
            Ok(Pipe {
                rx: tokio::net::UnixStream::from_std(rx)?,
            })
        }

        /// The next signal.
        pub async fn recv(&mut self) -> Received {
            loop {
                if self.rx.readable().await.is_err() {
                    // Cannot happen with a socket we own; never report a signal we did not get.
                    std::future::pending::<()>().await;
                }
                if let Some(r) = self.try_recv() {
                    return r;
                }
            }
        }

        /// A signal received already, if any.
        pub fn try_recv(&mut self) -> Option<Received> {
            let mut byte = [0u8; 1];
            match self.rx.try_read(&mut byte) {
                Ok(1) => Some(Received {
                    signal: libc::c_int::from(byte[0] & !FROM_KERNEL),
                    from_kernel: byte[0] & FROM_KERNEL != 0,
                }),
                _ => None,
            }
        }
    }

    /// Whether lockctl runs in the foreground process group of its controlling terminal
    /// (where a Ctrl-C goes).
    pub fn in_terminal_foreground() -> bool {
        // SAFETY: plain syscalls on a descriptor we open and close here.
        unsafe {
            let fd = libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return false;
            }
            let foreground = libc::tcgetpgrp(fd);
            libc::close(fd);
            foreground > 0 && foreground == libc::getpgrp()
        }
    }

    /// Starts the command: in lockctl's process group when it `shares_terminal` (so that it
    /// reads the terminal and gets its Ctrl-C like any foreground program), else in a group of
    /// its own (so that a signal to lockctl's group reaches it only through lockctl). Either
    /// way, on Linux, it is killed if lockctl dies.
    pub fn spawn(
        command: &[OsString],
        shares_terminal: bool,
        env: impl FnOnce(&mut Command),
    ) -> io::Result<Child> {
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]);
        env(&mut cmd);
        if !shares_terminal {
            cmd.process_group(0);
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: getpid before the fork; between fork and exec the closure only makes
            // async-signal-safe calls (prctl, getppid, kill).
            let parent = unsafe { libc::getpid() };
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // lockctl died before the line above took effect.
                    if libc::getppid() != parent {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                    Ok(())
                });
            }
        }
        cmd.spawn()
    }

    /// Where signals for the command go.
    pub struct Target {
        pid: Option<libc::pid_t>,
        shares_terminal: bool,
    }

    impl Target {
        pub fn new(child: &Child, shares_terminal: bool) -> Target {
            Target {
                pid: child.id().and_then(|p| libc::pid_t::try_from(p).ok()),
                shares_terminal,
            }
        }

        /// Passes a signal lockctl received on to the command, unless the command got it
        /// already: a signal from the kernel (a terminal's Ctrl-C, hang-up) went to the whole
        /// foreground group, which the command shares with lockctl at a terminal.
        pub fn pass_on(&self, received: Received) {
            if self.shares_terminal && received.from_kernel {
                return;
            }
            self.send(received.signal);
        }

        /// Sends `sig` to the command (to its whole process group when it has its own).
        pub fn send(&self, sig: libc::c_int) {
            let Some(pid) = self.pid else { return };
            let to = if self.shares_terminal { pid } else { -pid };
            // SAFETY: kill(2) on a child we have not reaped (or its process group).
            unsafe {
                libc::kill(to, sig);
            }
        }
    }

    /// Ends lockctl the way `sig` would have without a handler, so that whoever started it
    /// sees "killed by SIGINT" and acts on it (a shell script stops, for instance).
    pub fn die_of(sig: libc::c_int) -> ! {
        // SAFETY: restoring the default action and raising the signal; nothing runs after.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        std::process::exit(128 + sig)
    }

    pub fn name(sig: libc::c_int) -> &'static str {
        match sig {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lockctl").chain(args.iter().copied()))
    }

    /// The mode `run` was asked for, or the parse error's kind.
    fn run_mode_of(args: &[&str]) -> Result<Mode, clap::error::ErrorKind> {
        match parse(args).map_err(|e| e.kind())?.command {
            Command::Run { shared, limit, .. } => Ok(run_mode(shared, limit)),
            _ => panic!("not run: {args:?}"),
        }
    }

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_modes() {
        assert_eq!(
            run_mode_of(&["run", "k", "--", "true"]),
            Ok(Mode::Exclusive)
        );
        assert_eq!(
            run_mode_of(&["run", "--shared", "k", "--", "true"]),
            Ok(Mode::shared())
        );
        // --limit implies --shared; saying both is the same.
        assert_eq!(
            run_mode_of(&["run", "--limit", "3", "k", "--", "true"]),
            Ok(Mode::limited(3))
        );
        assert_eq!(
            run_mode_of(&["run", "--shared", "--limit=3", "k", "--", "true"]),
            Ok(Mode::limited(3))
        );
        assert_eq!(
            run_mode_of(&["run", "--limit", "1000000", "k", "--", "true"]),
            Ok(Mode::limited(MAX_LIMIT))
        );
    }

    #[test]
    fn bad_limits_are_usage_errors() {
        for bad in ["0", "-1", "1000001", "3.5", "three", ""] {
            let arg = format!("--limit={bad}");
            assert_eq!(
                run_mode_of(&["run", &arg, "k", "--", "true"]),
                Err(clap::error::ErrorKind::ValueValidation),
                "--limit {bad:?}"
            );
        }
    }

    #[test]
    fn force_release_takes_an_optional_owner() {
        let owner_of = |args: &[&str]| match parse(args).expect("parses").command {
            Command::ForceRelease { key, owner } => (key, owner),
            _ => panic!("not force-release"),
        };
        assert_eq!(owner_of(&["force-release", "k"]), ("k".to_string(), None));
        assert_eq!(
            owner_of(&["force-release", "k", "worker-7"]),
            ("k".to_string(), Some("worker-7".to_string()))
        );
        assert!(parse(&["force-release", "k", "a", "b"]).is_err());
    }

    #[test]
    fn info_lines() {
        let ms = Duration::from_millis;
        let exclusive = LockInfo {
            owner: Some("w".into()),
            token: Some(9),
            count: Some(1),
            ttl: ms(1500),
            waiters: 2,
            mode: Mode::Exclusive,
            holders: 1,
        };
        assert_eq!(
            info_line(Some(&exclusive)),
            "owner=w token=9 count=1 ttl_ms=1500 waiters=2 mode=exclusive"
        );
        let semaphore = LockInfo {
            owner: None,
            token: None,
            count: None,
            mode: Mode::limited(3),
            holders: 2,
            ..exclusive.clone()
        };
        assert_eq!(
            info_line(Some(&semaphore)),
            "mode=shared limit=3 holders=2 ttl_ms=1500 waiters=2"
        );
        let read = LockInfo {
            mode: Mode::shared(),
            ..semaphore.clone()
        };
        assert!(info_line(Some(&read)).starts_with("mode=shared limit=none "));
        assert_eq!(info_line(None), "not locked");
        assert!(describe(&semaphore).starts_with("shared by 2 holders of at most 3 "));
        let holder = HolderInfo {
            owner: "r1".into(),
            token: 7,
            count: 2,
            ttl: ms(800),
        };
        assert_eq!(
            holder_line(&holder),
            "holder owner=r1 token=7 count=2 ttl_ms=800"
        );
    }
}
