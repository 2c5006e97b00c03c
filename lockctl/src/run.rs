//! `lockctl run`: the job-control supervisor. It takes the lock (waiting when asked), runs
//! the command in a process group of its own with the lock's token in its environment, renews
//! the lock while the command runs, passes job control and signals on (SIGTSTP, SIGTTIN,
//! SIGTTOU, SIGCONT, SIGINT, SIGTERM, ...), kills the command's group when the lock is lost,
//! and releases the lock however the command ends.

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use relock_client::{Error, Leadership, Lock, LockGroup, LockGuard, Loss, Options, Relock};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::job::{self, Event, Job};
use crate::ops;
use crate::output::say;
use crate::signals::{self, Kind};
use crate::{describe, EXIT_LOST, EXIT_NOT_ACQUIRED, EXIT_PERMANENT, EXIT_USAGE, SETTLE_WITHIN};

/// How often lockctl looks at the command's process group when no signal woke it (a
/// SIGCHLD can be lost when thousands of signals fill the handlers' socket).
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How long processes of the command's group may outlive SIGKILL (uninterruptible sleep in
/// the kernel) before lockctl gives up waiting for them.
const KILLED_WITHIN: Duration = Duration::from_secs(5);

/// Says on stderr who holds `key`, master by master.
async fn report_holders(relock: &Relock, key: &str, prefix: &str) {
    for report in relock.info(key).await {
        match report.result {
            Ok(Some(info)) => say!(
                "{prefix}{} on {}: {}",
                ops::printable(key.as_bytes(), 0),
                report.node,
                describe(&info)
            ),
            Ok(None) => say!(
                "{prefix}{} on {}: not locked",
                ops::printable(key.as_bytes(), 0),
                report.node
            ),
            Err(e) => say!(
                "{prefix}{} on {}: {}",
                ops::printable(key.as_bytes(), 0),
                report.node,
                ops::shown_error(e)
            ),
        }
    }
}

/// What was acquired: one lock, every key of a run with several, or leadership of an
/// election (`lockctl elect`).
enum Taken {
    One(Lock),
    Group(LockGroup),
    Leader(Leadership),
}

impl Taken {
    fn owner(&self) -> &str {
        match self {
            Taken::One(l) => l.owner(),
            Taken::Group(g) => g.owner(),
            Taken::Leader(l) => l.owner(),
        }
    }

    fn token(&self) -> Option<u64> {
        match self {
            Taken::One(l) => l.token(),
            Taken::Group(g) => g.token(),
            Taken::Leader(l) => Some(l.term()),
        }
    }

    /// Per master (in `--servers` order), its token: for a group, the largest of its keys'
    /// there.
    fn tokens(&self, nodes: &[&str]) -> Vec<String> {
        let mut per_node: Vec<Option<u64>> = vec![None; nodes.len()];
        let mut note = |node: &str, t: u64| {
            if let Some(i) = nodes.iter().position(|n| *n == node) {
                per_node[i] = Some(per_node[i].map_or(t, |p| p.max(t)));
            }
        };
        match self {
            Taken::One(l) => l.tokens().into_iter().for_each(|(n, t)| note(n, t)),
            Taken::Group(g) => g
                .tokens()
                .into_iter()
                .flat_map(|(_, per)| per)
                .for_each(|(n, t)| note(n, t)),
            // One master (or a cluster, named as one): the term.
            Taken::Leader(l) => per_node.iter_mut().for_each(|t| *t = Some(l.term())),
        }
        per_node
            .into_iter()
            .map(|t| t.map(|t| t.to_string()).unwrap_or_default())
            .collect()
    }

    fn keep_alive(self) -> LockGuard {
        match self {
            Taken::One(l) => l.keep_alive(),
            Taken::Group(g) => g.keep_alive(),
            // Kept alive since it was won.
            Taken::Leader(l) => l.into_guard(),
        }
    }
}

/// How the acquisition ended.
enum Acquired {
    Held(Taken),
    Failed(Error),
    /// A signal that ends a process came first; the acquisition was dropped (its grants are
    /// released in the background).
    Interrupted(i32),
}

/// The keys `report_holders` speaks of while waiting: the first few of a group.
const REPORTED_KEYS: usize = 4;

async fn acquire(relock: &Relock, request: &RunRequest, signals: &mut signals::Pipe) -> Acquired {
    let (keys, ttl, wait) = (&request.keys, request.ttl, request.wait);
    let acquisition = async {
        match (keys.as_slice(), &request.elect) {
            ([key], Some(value)) => relock
                .campaign(key, value, ttl, wait)
                .await
                .map(Taken::Leader),
            ([key], None) => relock.acquire_wait(key, ttl, wait).await.map(Taken::One),
            _ => relock.wait_all(keys, ttl, wait).await.map(Taken::Group),
        }
    };
    tokio::pin!(acquisition);
    // Only say something when the lock is not free at once. A report is polled alongside the
    // acquisition, never awaited in its place: a starved acquisition holding a connection's
    // slot would make the report, and lockctl, wait for it forever.
    let mut next_report = Instant::now() + Duration::from_millis(150);
    let mut report: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
    loop {
        tokio::select! {
            biased;
            received = signals.recv() => match signals::kind(received.signal) {
                Kind::ForCommand if signals::ends_a_process(received.signal) => {
                    return Acquired::Interrupted(received.signal)
                }
                // Nothing runs yet: lockctl stops alone, and waits on once continued.
                Kind::Stop if !signals::is_stale_stop(received) => {
                    signals.stop_alone(received.signal)
                }
                Kind::Stop => {}
                Kind::ForCommand | Kind::Continue | Kind::Child => {}
            },
            result = &mut acquisition => return match result {
                Ok(taken) => Acquired::Held(taken),
                Err(e) => Acquired::Failed(e),
            },
            () = async {
                match report.as_mut() {
                    Some(r) => r.await,
                    None => std::future::pending().await,
                }
            } => report = None,
            _ = tokio::time::sleep_until(next_report), if report.is_none() => {
                report = Some(Box::pin(async move {
                    for key in keys.iter().take(REPORTED_KEYS) {
                        report_holders(relock, key, "waiting for ").await;
                    }
                }));
                next_report += Duration::from_secs(5);
            }
        }
    }
}

/// Whether `e`, from `tls` servers, may be a server refusing the client's certificate (or its
/// absence). With TLS 1.3 that happens after the handshake, and what the client then sees is
/// only a closed connection: possible, not certain, so it is not judged permanent.
fn tls_refused(tls: bool, e: &Error) -> bool {
    let text = e.to_string();
    tls && (text.contains("unexpectedly terminated") || text.contains("reset by peer"))
}

/// The exit status for an error that ended a hold or an acquisition: [`EXIT_PERMANENT`] when
/// retrying cannot help, `otherwise` else.
fn status_of(e: &Error, otherwise: u8) -> u8 {
    if e.is_permanent() {
        EXIT_PERMANENT
    } else {
        otherwise
    }
}

/// What `lockctl run` was asked to do.
pub(crate) struct RunRequest {
    /// The keys, as given (at least one; several only for an exclusive run).
    pub(crate) keys: Vec<String>,
    pub(crate) ttl: Duration,
    pub(crate) wait: Option<Duration>,
    /// After a loss, how long the command's group has between SIGTERM and SIGKILL.
    pub(crate) grace: Duration,
    /// The command and its arguments (at least the program).
    pub(crate) command: Vec<OsString>,
    /// Whether some server is reached over TLS (for the hint when one closes the connection).
    pub(crate) tls: bool,
    /// `lockctl elect`: the value to proclaim; the one key is then an election's, won by a
    /// campaign ([`Relock::campaign`]) rather than a plain wait.
    pub(crate) elect: Option<String>,
}

impl RunRequest {
    /// The messages' name for what is held: the key, or the first key and how many more.
    fn name(&self) -> String {
        match self.keys.as_slice() {
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} (+{} more keys)", rest.len()),
            [] => String::new(),
        }
    }

    /// The keys in sorted order, as `RELOCK_KEY` and `RELOCK_KEYS` give them.
    fn sorted_keys(&self) -> Vec<String> {
        let mut sorted = self.keys.clone();
        sorted.sort();
        sorted
    }
}

/// `lockctl run`: acquires, starts the command under the lock, supervises it until its group
/// ends or the lock is lost, and releases; the exit status (see the crate's documentation).
pub(crate) async fn run(relock: &Relock, request: &RunRequest) -> ExitCode {
    let key = request.name();
    let sorted = request.sorted_keys();
    let keys_var = sorted.join("\n");
    // exec(2) would refuse a key too long for the environment only once the lock is held.
    if let Err(why) = job::check_exec_size(
        &request.command,
        sorted.first().map_or(0, String::len),
        keys_var.len(),
        relock.nodes().len(),
    ) {
        say!("{why}");
        return ExitCode::from(EXIT_USAGE);
    }
    // Two names of one server (a LAN address and 127.0.0.1, a proxy) would vote twice.
    if let Err(e) = relock.check_distinct_servers().await {
        say!("{e}");
        return ExitCode::from(EXIT_USAGE);
    }
    // Before anything is acquired: a signal from now on is ours to handle, so none can leave
    // the lock held until its ttl.
    let mut signals = match signals::Pipe::install() {
        Ok(s) => s,
        Err(e) => {
            say!("cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    warn_if_renewals_cannot_keep_up(relock.options(), request.ttl);
    let taken = match acquire(relock, request, &mut signals).await {
        Acquired::Held(taken) => taken,
        Acquired::Failed(e) => return not_acquired(relock, request, &e).await,
        Acquired::Interrupted(sig) => {
            say!("{} while acquiring {key}; giving up", signals::name(sig));
            let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
            signals::die_of(sig);
        }
    };
    let env = command_env(&taken, relock, &sorted, keys_var);
    // Renewed from the grant on, however long starting the command takes.
    let guard = match still_held_at_the_start(relock, taken.keep_alive(), &mut signals, &key).await
    {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let job = match Job::start(&request.command, &env) {
        Ok(job) => job,
        Err(e) => return not_started(guard, &request.command[0], &e).await,
    };
    let mut supervisor = Supervisor {
        job,
        lost: guard.lost(),
        guard: &guard,
        signals: &mut signals,
        ttl: request.ttl,
    };
    match supervisor.until_the_group_ends().await {
        Ending::Exited(code) => {
            release_after_the_command(guard, &key, request.ttl).await;
            ExitCode::from(code)
        }
        Ending::Lost => {
            let explained = supervisor
                .end_after_a_loss(relock, &key, request.grace)
                .await;
            ExitCode::from(release_after_a_loss(guard, &key, explained.as_deref()).await)
        }
    }
}

/// Warns when `ttl` leaves less than three renewals' worst time (`--node-timeout`, plus
/// `--replica-ack-timeout` with acknowledgements): the lock would likely be lost.
fn warn_if_renewals_cannot_keep_up(options: &Options, ttl: Duration) {
    let renewal_bound = if options.replica_acks > 0 {
        options.node_timeout + options.replica_ack_timeout
    } else {
        options.node_timeout
    };
    if ttl < renewal_bound * 3 {
        say!(
            "warning: --ttl {ttl:?} is less than 3 x {renewal_bound:?}, the time one renewal may \
             take (--node-timeout{}); the lock is renewed every ttl/3 and will likely be lost \
             (exit 76) before the command ends",
            if options.replica_acks > 0 {
                " + --replica-ack-timeout"
            } else {
                ""
            }
        );
    }
}

/// Says why the acquisition failed (and who holds the keys, when they are held); the exit
/// status: [`EXIT_PERMANENT`] or [`EXIT_NOT_ACQUIRED`].
async fn not_acquired(relock: &Relock, request: &RunRequest, e: &Error) -> ExitCode {
    let what = if request.elect.is_some() {
        "lead"
    } else {
        "acquire"
    };
    say!("could not {what} {}: {e}", request.name());
    if tls_refused(request.tls, e) {
        say!(
            "a TLS server that closes the connection as soon as it is made usually wants a \
             client certificate, or refuses ours: see --tls-cert and --tls-key"
        );
    }
    if matches!(e, Error::NoQuorum { .. } | Error::WaitTimeout { .. }) {
        for k in request.keys.iter().take(REPORTED_KEYS) {
            report_holders(relock, k, "").await;
        }
    }
    ExitCode::from(status_of(e, EXIT_NOT_ACQUIRED))
}

/// The variables lockctl adds to the command's environment: the keys (`sorted`, and
/// `keys_var`, one per line), the owner and the fencing tokens.
fn command_env(
    taken: &Taken,
    relock: &Relock,
    sorted: &[String],
    keys_var: String,
) -> [(&'static str, String); 5] {
    let token = taken.token().map(|t| t.to_string()).unwrap_or_default();
    [
        ("RELOCK_KEY", sorted.first().cloned().unwrap_or_default()),
        ("RELOCK_KEYS", keys_var),
        ("RELOCK_OWNER", taken.owner().to_string()),
        ("RELOCK_TOKEN", token),
        ("RELOCK_TOKENS", taken.tokens(&relock.nodes()).join(",")),
    ]
}

/// Between the grant and the command's start: acts on the signals that came meanwhile (one
/// that ends a process releases and ends lockctl with it; a stop stops lockctl), and makes
/// sure the lock is still held. `Err` is lockctl's exit status when the command must not start
/// (the lock released).
async fn still_held_at_the_start(
    relock: &Relock,
    guard: LockGuard,
    signals: &mut signals::Pipe,
    key: &str,
) -> Result<LockGuard, ExitCode> {
    while let Some(received) = signals.try_recv() {
        match signals::kind(received.signal) {
            Kind::ForCommand if signals::ends_a_process(received.signal) => {
                say!(
                    "{} before {key}'s command started; releasing",
                    signals::name(received.signal)
                );
                let _ = guard.release().await;
                let _ = tokio::time::timeout(SETTLE_WITHIN, relock.settle()).await;
                signals::die_of(received.signal);
            }
            Kind::Stop if !signals::is_stale_stop(received) => signals.stop_alone(received.signal),
            Kind::Stop | Kind::ForCommand | Kind::Continue | Kind::Child => {}
        }
    }
    if guard.is_lost() || guard.valid_until() <= Instant::now() {
        say!("lock {key} was lost before the command started");
        let _ = guard.release().await;
        return Err(ExitCode::from(EXIT_NOT_ACQUIRED));
    }
    Ok(guard)
}

/// The command could not be started (`e`): releases, and returns 127 when `program` was not
/// found, 126 else, as a shell does.
async fn not_started(guard: LockGuard, program: &OsStr, e: &std::io::Error) -> ExitCode {
    say!("cannot run {program:?}: {e}");
    let _ = guard.release().await;
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// Releases once the command's whole group has ended; a release that fails is only said (the
/// command's status stands).
async fn release_after_the_command(guard: LockGuard, key: &str, ttl: Duration) {
    match guard.release().await {
        Ok(()) => {}
        Err(Error::Lost { .. }) => say!("lock {key} was lost as the command ended"),
        Err(e) => say!("releasing {key}: {e} (it will expire within {ttl:?})"),
    }
}

/// After a loss and the end of the command's group: releases what the masters may still
/// hold, says why the lock was lost (`explained`, from the masters' journals, if they said),
/// and returns the exit status, [`EXIT_LOST`] or, when a renewal was refused for good,
/// [`EXIT_PERMANENT`].
async fn release_after_a_loss(guard: LockGuard, key: &str, explained: Option<&Loss>) -> u8 {
    let code = match guard.release().await {
        Err(e) if e.is_permanent() => {
            say!("renewing {key}: {e}");
            EXIT_PERMANENT
        }
        _ => EXIT_LOST,
    };
    let reason = explained.map_or("unknown".to_string(), |l| l.reason.to_string());
    say!("exit {code}: lock {key:?} lost, reason={reason}");
    code
}

/// How the command's group ended.
enum Ending {
    /// Every process of it ended; the leader with this status.
    Exited(u8),
    /// The lock was lost while some still ran.
    Lost,
}

/// The lock was lost while lockctl stopped or continued the command.
struct Lost;

/// Runs the command's group under the lock: passes signals on, stops and continues it with
/// lockctl, and notices when it ends or the lock is lost.
struct Supervisor<'a> {
    job: Job,
    guard: &'a LockGuard,
    lost: CancellationToken,
    signals: &'a mut signals::Pipe,
    ttl: Duration,
}

impl Supervisor<'_> {
    /// The lock was lost while the command's group ran: SIGTERM to the group at once, then
    /// why the lock was lost (from the masters' journals, one round trip later), and SIGKILL
    /// after `grace`. Returns once no process of the group is left, with the loss's
    /// explanation if the masters gave one in time.
    async fn end_after_a_loss(
        &mut self,
        relock: &Relock,
        key: &str,
        grace: Duration,
    ) -> Option<Arc<Loss>> {
        self.job.terminate();
        let explained = tokio::time::timeout(
            relock.options().node_timeout * 2 + Duration::from_millis(100),
            self.guard.hold().loss.explained(),
        )
        .await
        .ok()
        .flatten();
        let why = match &explained {
            Some(loss) => loss.to_string(),
            None => format!("lock {key:?} was lost"),
        };
        say!("{why}; stopping the command's process group (SIGTERM, SIGKILL after {grace:?})");
        self.end_the_group(grace).await;
        explained
    }

    /// Until every process of the command's group has ended (the lock is released only then:
    /// a process the command left behind still works under it), or the lock is lost.
    async fn until_the_group_ends(&mut self) -> Ending {
        let mut said = false;
        loop {
            if let Some(code) = self.job.exited() {
                if !self.job.alive() {
                    return Ending::Exited(code);
                }
                if !said {
                    say!(
                        "the command exited ({code}), but processes it started still run: the \
                         lock stays held until they end"
                    );
                    said = true;
                }
            }
            let outcome = tokio::select! {
                biased;
                _ = self.lost.cancelled() => Err(Lost),
                received = self.signals.recv() => self.on_signal(received).await,
                _ = tokio::time::sleep(LOOK_EVERY) => {
                    let events = self.job.poll();
                    self.on_events(events).await
                }
            };
            if outcome.is_err() {
                return Ending::Lost;
            }
        }
    }

    async fn on_signal(&mut self, received: signals::Received) -> Result<(), Lost> {
        let sig = received.signal;
        // A terminal's signal reached the command's group itself when the group has the
        // terminal; one the kernel sends lockctl then (SIGTTOU for a write of its own with
        // `stty tostop`, SIGHUP to a session leader) is not the command's business twice.
        let from_terminal = received.from_kernel && self.job.has_terminal();
        match signals::kind(sig) {
            Kind::Child => {
                let events = self.job.poll();
                self.on_events(events).await
            }
            Kind::ForCommand => {
                if !from_terminal {
                    self.job.send(sig);
                }
                Ok(())
            }
            Kind::Stop if from_terminal || signals::is_stale_stop(received) => Ok(()),
            Kind::Stop => self.stop_the_job(sig, true).await,
            Kind::Continue => self.resume().await,
        }
    }

    /// Stops the job with lockctl ([`Job::stop_with_lockctl`]) for `sig`, and continues it once
    /// lockctl is continued and the lock is known to be held ([`Supervisor::resume`]). A stop
    /// lockctl received (`pass_on`) goes to the command first, which gets up to
    /// [`job::STOP_WITHIN`] to obey while the lock is still watched: a loss then ends it at
    /// once ([`Lost`]), not after the wait. A SIGCONT at any point before lockctl is stopped
    /// wins: lockctl does not stop, and the command goes on.
    async fn stop_the_job(&mut self, sig: libc::c_int, pass_on: bool) -> Result<(), Lost> {
        let continued_before = signals::continued_count();
        if pass_on {
            self.job.ask_to_stop(sig);
            if self.until_the_command_stops().await? {
                return self.resume().await;
            }
        }
        if self.lost.is_cancelled() {
            return Err(Lost);
        }
        if !self.signals.continue_pending() {
            let events = self.job.stop_with_lockctl(sig, continued_before);
            self.on_events_after_stop(events);
        }
        self.resume().await
    }

    /// After a stop was passed on to the command: until its leader stopped (or ended), at
    /// most [`job::STOP_WITHIN`]. `Ok(true)` when a SIGCONT came first, [`Lost`] when the lock
    /// was lost meanwhile.
    async fn until_the_command_stops(&mut self) -> Result<bool, Lost> {
        let deadline = Instant::now() + job::STOP_WITHIN;
        loop {
            let events = self.job.poll();
            let stopped = Job::stopped(&events);
            self.on_events_after_stop(events);
            if stopped {
                return Ok(false);
            }
            tokio::select! {
                biased;
                _ = self.lost.cancelled() => return Err(Lost),
                received = self.signals.recv() => {
                    if self.while_stopping(received) {
                        return Ok(true);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Ok(false),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
    }

    /// A signal received while the command is asked to stop: a SIGCONT ends the stop (true);
    /// one meant for the command is passed on; another stop, or a child's change, changes
    /// nothing (the command itself is looked at).
    fn while_stopping(&self, received: signals::Received) -> bool {
        match signals::kind(received.signal) {
            Kind::Continue => true,
            Kind::ForCommand => {
                if !(received.from_kernel && self.job.has_terminal()) {
                    self.job.send(received.signal);
                }
                false
            }
            Kind::Stop | Kind::Child => false,
        }
    }

    /// The command's own changes: a job-control stop of it (a terminal's Ctrl-Z, or reading
    /// the terminal from the background) stops lockctl too, as a shell's job.
    async fn on_events(&mut self, events: Vec<Event>) -> Result<(), Lost> {
        for event in events {
            if let Event::Stopped(sig) = event {
                if self.job.stops_the_job(sig) {
                    self.stop_the_job(sig, false).await?;
                }
            }
        }
        Ok(())
    }

    /// Changes seen while stopping: only an end matters, and [`Job`] kept it.
    fn on_events_after_stop(&self, events: Vec<Event>) {
        for event in events {
            tracing::debug!(?event, "while stopping");
        }
    }

    /// lockctl goes on (after SIGCONT, or a stop that did not happen): the command goes on too,
    /// once the lock is known to be still held. A stop that may have outlasted half the ttl
    /// is followed by a renewal first; a lock lost meanwhile is [`Lost`], and the command is
    /// not continued.
    async fn resume(&mut self) -> Result<(), Lost> {
        let left = self
            .guard
            .valid_until()
            .saturating_duration_since(Instant::now());
        if left < self.ttl / 2 {
            tokio::select! {
                biased;
                _ = self.lost.cancelled() => return Err(Lost),
                renewed = self.guard.renew_now() => {
                    if renewed.is_err() {
                        return Err(Lost);
                    }
                }
            }
        }
        self.job.resume();
        Ok(())
    }

    /// After a loss and the group's SIGTERM ([`Job::terminate`]): SIGKILL after `grace`, and
    /// returns once no process of it is left (or [`KILLED_WITHIN`] after SIGKILL). Signals
    /// meant for the command still reach it meanwhile; job control no longer stops it.
    async fn end_the_group(&mut self, grace: Duration) {
        // (`--grace` is at most 10^12 ms; saturate all the same rather than panic.)
        let kill_at = Instant::now()
            .checked_add(grace)
            .unwrap_or_else(|| Instant::now() + relock_client::limits::MAX);
        let mut give_up_at = None;
        loop {
            self.job.poll();
            if self.job.exited().is_some() && !self.job.alive() {
                return;
            }
            tokio::select! {
                biased;
                received = self.signals.recv() => {
                    let sig = received.signal;
                    match signals::kind(sig) {
                        Kind::ForCommand if !(received.from_kernel && self.job.has_terminal()) => {
                            self.job.send(sig);
                        }
                        // Keep it going, to its end.
                        Kind::Continue => self.job.send_all(libc::SIGCONT),
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(kill_at), if give_up_at.is_none() => {
                    self.job.send_all(libc::SIGKILL);
                    give_up_at = Some(Instant::now() + KILLED_WITHIN);
                }
                _ = tokio::time::sleep_until(give_up_at.unwrap_or(kill_at)), if give_up_at.is_some() => {
                    say!("processes of the command's group outlived SIGKILL by {KILLED_WITHIN:?}; exiting without them");
                    return;
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }
}
