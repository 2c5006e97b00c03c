//! `lockctl`: run a command while holding a relock lock or leading an election, and inspect or
//! break locks.
//!
//! Exit codes of `lockctl run`: the command's own (128 + signal when it was killed by one);
//! 75 when the lock could not be acquired for now (held, no quorum, wait limit reached);
//! 76 when the lock was lost while the command ran (its process group then gets SIGTERM, and
//! SIGKILL after `--grace`, and lockctl exits once every process of it is gone); 78 when a
//! server's answer shows that retrying cannot help (the module is not loaded, the login was
//! refused, the key holds another type, an ACL forbids a command, the server is a cluster
//! node), at any step, renewals included; 127/126 when the command could not be started; 2
//! for usage errors (an invalid option or duration, a ttl below 5ms, one server named twice,
//! a key too long for the command's environment), found before any server is contacted. A
//! signal that would end a process, received before the command starts, makes lockctl give
//! up (releasing whatever it was granted) and die of that signal.
//!
//! The command's environment gets `RELOCK_KEY`, `RELOCK_OWNER`, `RELOCK_TOKEN` (with one
//! server its fencing token; with several, the token of the first master in `--servers`
//! order that granted) and `RELOCK_TOKENS` (every master's token in `--servers` order,
//! comma-separated, empty where a master did not grant).
//!
//! `run`, the job-control supervisor, is the module `run`; this file reads the command line
//! and dispatches. The command runs as a shell runs a job (see `job`): in a process group of its own, which
//! gets the terminal when a person runs lockctl at one. Every signal lockctl gets that is the
//! command's to decide on (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
//! SIGWINCH...) is passed on to that group, once (not when the terminal sent it to the
//! command's group already). Job control stops and continues the command's group with
//! lockctl: SIGTSTP, SIGTTIN and SIGTTOU stop the group and then lockctl; SIGCONT continues
//! the group once a renewal showed the lock is still held (if it was lost meanwhile, the group
//! is ended and lockctl exits 76). The lock stays held until every process of the group has
//! ended, and every process the command moved to another group of lockctl's session (lockctl
//! is the command's child subreaper, so they stay its descendants); a loss ends those too. A
//! watchdog process keeps the group stopped while lockctl is stopped by SIGSTOP, and kills
//! the command's processes if lockctl is killed.
//!
//! With `--cluster`, `--servers` are seed nodes of one Redis Cluster; `info` and
//! `force-release` then name the master that serves the key.
//!
//! `run --shared` takes a shared hold (the read side of a read-write lock: shared runs go on
//! together, an exclusive `run` waits for them); `run --limit N` a permit of a counting
//! semaphore: at most N commands run at once, on every machine, like `consul lock -n`. A limit
//! needs one server or `--cluster`: over several independent masters it is a usage error.
//!
//! `elect KEY [--id VALUE] -- command` campaigns for leadership of the election at KEY and
//! then runs the command as `run` does (the same supervisor, exit codes and job control), with
//! `RELOCK_TOKEN` = the term; `leader KEY [--watch] [--json]` prints the leader's value and
//! term (the module `leader`). Both need one server or `--cluster`.

mod job;
mod leader;
mod log;
mod metrics;
mod ops;
mod output;
mod procs;
mod run;
mod sample;
mod signals;
mod top;
mod waiters;
mod watchdog;

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use relock_client::limits::{parse_timeout, parse_ttl};
use relock_client::{
    parse_duration, proclaimed_value, HolderInfo, LockInfo, Mode, NodeReport, Options, Relock, Tls,
    MAX_KEYS, MAX_LIMIT,
};

use crate::output::{out, say};

/// The server used when neither `--servers` nor `RELOCK_SERVERS` names one.
const DEFAULT_SERVER: &str = "redis://127.0.0.1:6379";
/// How long one master may take to answer one command, unless `--node-timeout` says.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
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
    about = "Run a command under a relock lock or while leading an election; inspect and break locks"
)]
struct Cli {
    /// Comma-separated URLs of the relock masters (one for plain locking, N for Redlock with
    /// a quorum of N/2+1; each server at most once): redis://[user:password@]host:port[/db],
    /// rediss:// for TLS, redis+sentinel://[user:password@]host:port[,host:port...]/master-name
    /// for a master Redis Sentinel manages.
    #[arg(long, global = true, env = "RELOCK_SERVERS", default_value = DEFAULT_SERVER)]
    servers: String,

    /// How long one master may take to answer one command (at least 1ms; default 100ms, and
    /// 2s for info, force-release, waiters, log, top and metrics: an operator's commands,
    /// whose answers may be long and which no lease is waiting on).
    #[arg(long, global = true, value_parser = parse_timeout)]
    node_timeout: Option<Duration>,

    /// Treat `--servers` as seed nodes of one Redis Cluster: each lock lives on the master of
    /// its key's hash slot (no Redlock quorum), and redirections and failovers are followed.
    #[arg(long, global = true, env = "RELOCK_CLUSTER")]
    cluster: bool,

    /// How many replicas of a master must acknowledge each acquire and renewal (WAIT) before
    /// it counts; if fewer do, the acquisition is released again. 0 turns it off.
    #[arg(long, global = true, env = "RELOCK_REPLICA_ACKS", default_value_t = 0)]
    replica_acks: u32,

    /// How long a master waits for those acknowledgements.
    #[arg(long, global = true, default_value = "500ms", value_parser = parse_timeout)]
    replica_ack_timeout: Duration,

    /// For rediss:// servers: a PEM file of the CA certificates to trust instead of the
    /// system's.
    #[arg(long, global = true, env = "RELOCK_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// For rediss:// servers that ask for a client certificate: a PEM file of it (with
    /// --tls-key).
    #[arg(
        long,
        global = true,
        env = "RELOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,

    /// The client certificate's private key, a PEM file (with --tls-cert).
    #[arg(
        long,
        global = true,
        env = "RELOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,

    /// What comes before the random part of the owners lockctl makes
    /// (`<prefix>/<32 hex digits>`), so that LOCK.INFO, LOCK.HOLDERS, LOCK.WAITERS and
    /// LOCK.LOG name the holder in your words; an empty prefix gives the random part alone.
    /// Default: `<host>/<pid>` of lockctl. Cut to fit 256 bytes, never the random part.
    #[arg(
        long,
        global = true,
        env = "RELOCK_OWNER_PREFIX",
        value_name = "PREFIX"
    )]
    owner_prefix: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire KEY, run COMMAND with the lock kept alive, release it when COMMAND exits, and
    /// exit with COMMAND's status (75: not acquired, 76: lock lost while running, 78: a
    /// server refused for good).
    Run {
        /// Lock lifetime (5ms, the smallest usable, to 1000000000s); the lock is renewed every
        /// ttl/3 while the command runs.
        #[arg(long, default_value = "30s", value_parser = parse_ttl)]
        ttl: Duration,
        /// How long to wait for the lock (default: without limit; 0: try once; above
        /// 1000000000s: 1000000000s).
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// After the lock is lost, how long the command has between SIGTERM and SIGKILL (at
        /// most 1000000000s).
        #[arg(long, default_value = "10s", value_parser = parse_timeout)]
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
        /// Take P of the semaphore's N permits at once (1 to N; needs --limit). The permits of
        /// the commands holding KEY sum to at most N; a run asking for more than are free waits
        /// its turn, and runs queued behind it wait for it.
        #[arg(long, value_name = "P", requires = "limit", value_parser = parse_limit)]
        permits: Option<u32>,
        /// One more key to hold (repeat it): the command runs once every key is held, under
        /// one owner (all at once with one token when they are free, else waited for one by
        /// one in sorted order, which never deadlocks). Exclusive only; at most 256 keys.
        #[arg(long = "key", value_name = "KEY")]
        keys: Vec<String>,
        /// The lock's key (or give every key with --key).
        key: Option<String>,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Campaign for leadership of the election at KEY and run COMMAND while this process
    /// leads, with RELOCK_TOKEN = the term (and the environment of `run`); when leadership is
    /// lost the command is stopped as `run` stops it. Same exit codes and job control as
    /// `run` (75: did not lead within --wait, 76: leadership lost while running, 78: a server
    /// refused for good). One server or --cluster only.
    Elect {
        /// Leadership's lifetime (5ms to 1000000000s), renewed every ttl/3 while the command
        /// runs. A candidate that hangs while queued leads, without working, until it ends.
        #[arg(long, default_value = "30s", value_parser = parse_ttl)]
        ttl: Duration,
        /// How long to wait to lead (default: without limit; 0: lead only if nobody does).
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// After leadership is lost, how long the command has between SIGTERM and SIGKILL.
        #[arg(long, default_value = "10s", value_parser = parse_timeout)]
        grace: Duration,
        /// The value this candidate proclaims (a name, an address), as `lockctl leader`
        /// shows it. Default: `--owner-prefix`, else `<host>/<pid>`.
        #[arg(long, value_name = "VALUE")]
        id: Option<String>,
        /// The election's key.
        key: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Show the leader of the election at KEY: its value and term (`value=... term=...
    /// ttl_ms=...`, or `no leader`); with --watch, one line per change seen (` regressed`
    /// after a term lower than the last one seen: the server lost history).
    Leader {
        /// The election's key.
        key: String,
        /// Go on, printing a line at each change seen (LOCK.OBSERVE), until killed.
        #[arg(long)]
        watch: bool,
        /// One JSON document per line: {"key", "leader": {"value", "term", "ttl_ms",
        /// "owner"} or null, "regressed"}.
        #[arg(long)]
        json: bool,
    },
    /// Show who holds KEY on each master: its mode and limit, and every holder of a shared
    /// lock (LOCK.INFO, LOCK.HOLDERS).
    Info {
        /// The lock's key.
        key: String,
        /// At most this many holders of a shared lock per master (0: all; a list of 100,000
        /// may take longer than `--node-timeout` to send).
        #[arg(long, default_value_t = INFO_HOLDERS)]
        count: u32,
    },
    /// Break the lock at KEY on every master, whoever holds it, or only OWNER's hold
    /// (LOCK.FORCERELEASE).
    ForceRelease {
        /// The lock's key.
        key: String,
        /// Remove only this holder's hold (one of a shared lock's holders).
        owner: Option<String>,
    },
    #[command(flatten)]
    Ops(ops::Ops),
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

/// The keys of `run`: the positional KEY and every `--key`, at least one, at most
/// [`MAX_KEYS`], none twice, and several only for an exclusive run.
fn run_keys(key: Option<String>, more: Vec<String>, shared: bool) -> Result<Vec<String>, String> {
    let keys: Vec<String> = key.into_iter().chain(more).collect();
    if keys.is_empty() {
        return Err("run needs a KEY (or --key KEY, repeated for several)".into());
    }
    if keys.len() > MAX_KEYS {
        return Err(format!(
            "{} keys: at most {MAX_KEYS} in one run",
            keys.len()
        ));
    }
    let mut sorted = keys.clone();
    sorted.sort();
    if let Some(twice) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("{:?} is given twice", twice[0]));
    }
    if keys.len() > 1 && shared {
        return Err("several keys are held exclusively: not with --shared or --limit".into());
    }
    Ok(keys)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(OsStr::new(watchdog::ARG)) {
        let rest: Vec<String> = args.filter_map(|a| a.into_string().ok()).collect();
        return watchdog::main(&rest);
    }
    // Before anything is said: from here on no message can block the thread that says it.
    output::start();
    // Colour only for a person at a terminal, and not for one who asked for none
    // (https://no-color.org: NO_COLOR set and not empty).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(|| output::Stderr)
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
            say!("cannot start the runtime: {e}");
            output::flush();
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async_main(cli));
    output::flush();
    code
}

/// The URLs of `--servers`: split at commas, except those within a URL (the sentinels of a
/// `redis+sentinel://` URL): a part without `://` continues the URL before it.
fn split_servers(list: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match urls.last_mut() {
            Some(last) if !part.contains("://") => {
                last.push(',');
                last.push_str(part);
            }
            _ => urls.push(part.to_string()),
        }
    }
    urls
}

/// The most a PEM file of lockctl's may hold (a system's whole CA bundle is ~200 KiB).
const MAX_PEM_FILE: u64 = 16 << 20;

/// The PEM files `--tls-ca`, `--tls-cert` and `--tls-key` name, read; `--tls-ca` must hold a
/// certificate (redis-rs would take a file without one for an empty trust store, and blame
/// every server's certificate).
fn read_tls(cli: &Cli) -> Result<Tls, String> {
    let read = |flag: &str, path: &Option<PathBuf>| {
        path.as_ref()
            .map(|p| {
                read_pem_file(p).map_err(|e| format!("cannot read {flag} {}: {e}", p.display()))
            })
            .transpose()
    };
    let ca = read("--tls-ca", &cli.tls_ca)?;
    if let (Some(ca), Some(path)) = (&ca, &cli.tls_ca) {
        Tls::count_ca_certificates(ca).map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
    }
    Ok(Tls {
        ca,
        client_cert: read("--tls-cert", &cli.tls_cert)?,
        client_key: read("--tls-key", &cli.tls_key)?,
    })
}

/// A PEM file's bytes. Only a regular file (or a link to one) is read: a FIFO would block the
/// open until a writer comes, and a device such as /dev/zero would be read forever.
fn read_pem_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file (a PEM file is expected)".into());
    }
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_PEM_FILE {
        return Err(format!(
            "larger than {} MiB: not a PEM file",
            MAX_PEM_FILE >> 20
        ));
    }
    Ok(bytes)
}

/// The client `cli` asks for, and the URLs of its servers; a usage error says why not.
fn client_of(cli: &Cli) -> Result<(Relock, Vec<String>), String> {
    let options = Options {
        // An operator's command (info, force-release and the operators' subcommands) gets the
        // operators' 2s: 100ms is a lock round's budget, which a loaded server (or one of the
        // test machine's runs, at a load of 30) misses, and nothing here waits on a lease.
        node_timeout: cli.node_timeout.unwrap_or(match cli.command {
            Command::Ops(_) | Command::Info { .. } | Command::ForceRelease { .. } => {
                ops::NODE_TIMEOUT
            }
            _ => DEFAULT_NODE_TIMEOUT,
        }),
        replica_acks: cli.replica_acks,
        replica_ack_timeout: cli.replica_ack_timeout,
        tls: read_tls(cli)?,
        owner_prefix: cli.owner_prefix.clone(),
        ..Options::default()
    };
    let mut servers = split_servers(&cli.servers);
    if servers.is_empty() {
        // RELOCK_SERVERS set but empty: same as unset.
        servers.push(DEFAULT_SERVER.to_string());
    }
    let relock = if cli.cluster {
        Relock::cluster(&servers, options)
    } else {
        Relock::with_options(&servers, options)
    };
    relock.map(|r| (r, servers)).map_err(|e| e.to_string())
}

async fn async_main(cli: Cli) -> ExitCode {
    let (relock, servers) = match client_of(&cli) {
        Ok(client) => client,
        Err(why) => {
            say!("{why}");
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
            permits,
            keys,
            key,
            command,
        } => {
            let keys = match run_keys(key, keys, shared || limit.is_some()) {
                Ok(keys) => keys,
                Err(why) => {
                    say!("{why}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            let relock = match relock
                .with_mode(run_mode(shared, limit))
                .and_then(|r| r.with_permits(permits.unwrap_or(1)))
            {
                Ok(r) => r,
                Err(e) => {
                    say!("{e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            let request = run::RunRequest {
                keys,
                ttl,
                wait,
                grace,
                command,
                tls: servers.iter().any(|s| s.starts_with("rediss")),
                elect: None,
            };
            let code = run::run(&relock, &request).await;
            // Releases of failed or abandoned rounds must not be cut off by the exit.
            let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
            code
        }
        Command::Elect {
            ttl,
            wait,
            grace,
            id,
            key,
            command,
        } => {
            if relock.nodes().len() > 1 && !relock.is_cluster() {
                say!(
                    "elect needs one server or --cluster: a term must come from one sequence \
                     of tokens, and FIFO order does not compose across independent masters"
                );
                return ExitCode::from(EXIT_USAGE);
            }
            // By default the owners' prefix: `--owner-prefix`, or `<host>/<pid>`.
            let value = id.unwrap_or_else(|| proclaimed_value(&relock.make_owner()).to_string());
            let request = run::RunRequest {
                keys: vec![key],
                ttl,
                wait,
                grace,
                command,
                tls: servers.iter().any(|s| s.starts_with("rediss")),
                elect: Some(value),
            };
            let code = run::run(&relock, &request).await;
            let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
            code
        }
        Command::Leader { key, watch, json } => leader::show(&relock, &key, watch, json).await,
        Command::Info { key, count } => info(&relock, &key, count).await,
        Command::ForceRelease { key, owner } => {
            force_release(&relock, &key, owner.as_deref()).await
        }
        Command::Ops(command) => {
            let db = relock.db();
            ops::run(relock, cli.cluster, db, command).await
        }
    }
}

fn describe(info: &LockInfo) -> String {
    match info.mode {
        Mode::Shared { limit } => format!(
            "shared by {} holder{}{} ({}, {} waiting)",
            info.holders,
            if info.holders == 1 { "" } else { "s" },
            limit
                .map(|n| format!(" of at most {n}"))
                .unwrap_or_default(),
            info.ttl.map_or_else(
                || "the last lease never ends".to_string(),
                |t| format!("the last lease ends in {:.1}s", t.as_secs_f64())
            ),
            info.waiters
        ),
        Mode::Exclusive => format!(
            "held by {} (token {}, count {}, {}, {} waiting)",
            shown_owner(info.owner.as_deref()),
            known(info.token),
            known(info.count),
            info.ttl.map_or_else(
                || "never expires".to_string(),
                |t| format!("expires in {:.1}s", t.as_secs_f64())
            ),
            info.waiters
        ),
    }
}

/// An owner as lockctl shows it: any other client chose its bytes, so its control characters
/// are escaped ([`ops::printable`], as `waiters`, `log` and `top` show owners): one with
/// terminal escapes or a newline must not take over the screen or forge a line of lockctl's.
fn shown_owner(owner: Option<&str>) -> String {
    owner.map_or_else(|| "?".to_string(), |o| ops::printable(o.as_bytes(), 0))
}

/// A ttl as `lockctl info` prints it: ms left, or -1 for no expiry (as the module says it).
fn ttl_ms(ttl: Option<Duration>) -> String {
    ttl.map_or_else(|| "-1".to_string(), |t| t.as_millis().to_string())
}

/// A number a reply may leave out, as text.
fn known(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_string(), |n| n.to_string())
}

/// One line per master (`node<TAB>what LOCK.INFO said`), and below a shared lock's line one
/// line per holder (`node<TAB>holder owner=... token=... count=... ttl_ms=...`).
async fn info(relock: &Relock, key: &str, count: u32) -> ExitCode {
    let reports = relock.info(key).await;
    let shared = reports
        .iter()
        .any(|r| matches!(&r.result, Ok(Some(i)) if i.mode.is_shared()));
    let holders = if shared {
        relock.holders(key, count).await
    } else {
        Vec::new()
    };
    let mut failed = false;
    for report in reports {
        let info = match report.result {
            Ok(info) => info,
            Err(e) => {
                failed = true;
                out!("{}\terror: {}", report.node, ops::shown_error(e));
                continue;
            }
        };
        out!("{}\t{}", report.node, info_line(info.as_ref()));
        if !info.as_ref().is_some_and(|i| i.mode.is_shared()) {
            continue;
        }
        // The holders the same master listed (a cluster names the key's master in both).
        let listed = holders.iter().find(|h| h.node == report.node);
        match listed.map(|h| &h.result) {
            Some(Ok(Some(holders))) => {
                for h in holders {
                    out!("{}\t{}", report.node, holder_line(h));
                }
                let all = info.as_ref().map_or(0, |i| i.holders);
                if count > 0 && holders.len() == count as usize && all > u64::from(count) {
                    say!(
                        "{}: the first {count} of {all} holders (--count 0 lists all)",
                        report.node
                    );
                }
            }
            Some(Ok(None)) => {}
            Some(Err(e)) => {
                failed = true;
                out!("{}\terror: {}", report.node, ops::shown_error(e));
            }
            None => {
                failed = true;
                out!("{}\terror: no list of holders", report.node);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// How many holders of a shared lock `lockctl info` lists per master unless `--count` says.
const INFO_HOLDERS: u32 = 100;

/// What `lockctl info` prints for a lock on one master.
fn info_line(info: Option<&LockInfo>) -> String {
    let Some(i) = info else {
        return "not locked".to_string();
    };
    match i.mode {
        Mode::Exclusive => format!(
            "owner={} token={} count={} ttl_ms={} waiters={} mode=exclusive",
            shown_owner(i.owner.as_deref()),
            known(i.token),
            known(i.count),
            ttl_ms(i.ttl),
            i.waiters
        ),
        Mode::Shared { limit } => format!(
            "mode=shared limit={} holders={} ttl_ms={} waiters={}",
            limit.map_or_else(|| "none".to_string(), |n| n.to_string()),
            i.holders,
            ttl_ms(i.ttl),
            i.waiters
        ),
    }
}

fn holder_line(h: &HolderInfo) -> String {
    format!(
        "holder owner={} token={} count={} ttl_ms={}",
        shown_owner(Some(&h.owner)),
        h.token,
        h.count,
        ttl_ms(h.ttl)
    )
}

async fn force_release(relock: &Relock, key: &str, owner: Option<&str>) -> ExitCode {
    let reports = relock.force_release_holds(key, owner).await;
    print_reports(reports, |removed| match (owner, *removed) {
        (None, 0) => "not locked".to_string(),
        (None, 1) => "released".to_string(),
        (None, n) => format!("released {n} holds"),
        (Some(o), 0) => format!("{} holds nothing", shown_owner(Some(o))),
        (Some(o), _) => format!("released {}'s hold", shown_owner(Some(o))),
    })
}

/// Prints one line per master (`node<TAB>what it said`); fails if any master failed.
fn print_reports<T>(reports: Vec<NodeReport<T>>, describe: impl Fn(&T) -> String) -> ExitCode {
    let mut failed = false;
    for report in reports {
        match &report.result {
            Ok(answer) => out!("{}\t{}", report.node, describe(answer)),
            Err(e) => {
                failed = true;
                out!("{}\terror: {}", report.node, ops::shown_error(e));
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
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
    fn server_lists() {
        assert_eq!(
            split_servers("redis://a:1, redis://b:2,,rediss://c:3"),
            ["redis://a:1", "redis://b:2", "rediss://c:3"]
        );
        assert_eq!(
            split_servers("redis+sentinel://s1:26379,s2,s3:5000/orders,redis://d"),
            ["redis+sentinel://s1:26379,s2,s3:5000/orders", "redis://d"]
        );
        assert!(split_servers(" , ").is_empty());
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
            ttl: Some(ms(1500)),
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
            ttl: Some(ms(800)),
        };
        assert_eq!(
            holder_line(&holder),
            "holder owner=r1 token=7 count=2 ttl_ms=800"
        );
        let hostile = LockInfo {
            owner: Some("evil\x1b[2J\nlockctl: exit 0".into()),
            ..exclusive.clone()
        };
        assert!(info_line(Some(&hostile)).starts_with("owner=evil\\x1b[2J\\nlockctl: exit 0 "));
        assert!(describe(&hostile).starts_with("held by evil\\x1b[2J\\nlockctl"));
        // A PERSISTed lock (ttl -1) has no expiry: never shown as expiring now.
        let persisted = LockInfo {
            ttl: None,
            ..exclusive.clone()
        };
        assert_eq!(
            info_line(Some(&persisted)),
            "owner=w token=9 count=1 ttl_ms=-1 waiters=2 mode=exclusive"
        );
        assert!(
            describe(&persisted).contains("never expires"),
            "{}",
            describe(&persisted)
        );
        let persisted_holder = HolderInfo {
            ttl: None,
            ..holder.clone()
        };
        assert_eq!(
            holder_line(&persisted_holder),
            "holder owner=r1 token=7 count=2 ttl_ms=-1"
        );
    }
}
