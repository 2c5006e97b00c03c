//! The engine's clock work: every timer it needs (a lock's deadline, a wait's end) and the jobs it
//! runs after the current command, all behind **one** host timer.
//!
//! Redis runs every module timer that is due in one event-loop turn, however many there are; one
//! host timer and this queue let the engine take its due work a piece at a time instead
//! ([`Schedule::next`]), stop when the turn's budget is spent, and come back in the next turn
//! (a 0 ms host timer fires after the server has served its clients once more). That is what
//! keeps a storm of lease ends or wake-ups from freezing the server.
//!
//! Invariants, kept by every method here:
//! - the host timer is armed exactly when there is something to wait for (a timer or a job),
//!   and fires no later than the earliest of them (a job: at once; a delay longer than
//!   [`MAX_TIMER_MS`] is cut and the timer armed again when it fires early);
//! - a job is queued at most once (a key has at most one `Serve`, `Prune` and `Leases` job;
//!   there is at most one `Rearm`);
//! - hand-offs and revokes (`Serve`, `Revoke`) and due timers go before housekeeping
//!   (`Leases`, `Prune`): no flood of TTL changes or lease ends delays a waiter.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::host::{Handles, Host, KeyId};
use super::queue::WaiterId;

/// Longest delay of the host timer: 30 minutes. Redis keeps every module timer behind one
/// event-loop timer whose handler returns the period to the next module timer in ms, and Redis
/// 7.0 multiplies that by 1000 in an `int`: a next timer more than about 35 minutes out wraps
/// into the past and the event loop spins at 100 % CPU. A later due time is reached by arming
/// the host timer again each time it fires early.
pub const MAX_TIMER_MS: i64 = 30 * 60 * 1000;

/// How often deferred jobs look again while writes are paused or the server is loading.
pub const RETRY_MS: i64 = 10;

/// An engine timer's number.
pub type TimerId = u64;

/// What a timer is for.
#[derive(Debug)]
pub enum Due<C> {
    /// The lock at this key may let its head waiter in now: serve it.
    Deadline(KeyId),
    /// A wait ends, unless the waiter was served first.
    WaitEnds { client: C, waiter: WaiterId },
    /// The restart grace ends, or the clock caught up with the token counter: every queue is
    /// served (unless new holds must still wait, then it is armed again).
    GraceEnds,
    /// The hold of an observed key may have expired: the key is looked at.
    ObserveDeadline(KeyId),
    /// Observers' timeouts may have passed: those observers are answered.
    ObserveTimeouts,
    /// The timeout of an observer too far ahead to be kept in its entry passed.
    ObserveEnds(C),
    /// The first lease of this shared key has lapsed: its lapsed leases are removed, a slice a
    /// turn, whether or not a command touches the key.
    Lapse(KeyId),
}

/// Work for after the current command (Redis 7.0 forbids writes inside keyspace
/// notifications, and a command's own work must not grow with what it set off).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Job {
    /// Look at a key with waiters and do what its state calls for.
    Serve(KeyId),
    /// Revoke the unconfirmed hold with this token.
    Revoke(u64),
    /// A user changed the key's TTL: a shared key's TTL must not outlive its latest lease.
    Leases(KeyId),
    /// Remove the lapsed leases of a shared key, a slice at a time.
    Prune(KeyId),
    /// Answer the observers of a key whose hold may have changed, a slice a turn.
    Observe(KeyId),
    /// Arm the lapse timers of shared keys this server did not see written (loaded, or sent by
    /// its master while it was a replica), a slice of keys at a time.
    Rearm,
}

impl Job {
    /// Whether a waiter waits on it (a hand-off, a revoke), rather than housekeeping.
    fn urgent(&self) -> bool {
        matches!(self, Job::Serve(_) | Job::Revoke(_) | Job::Observe(_))
    }
}

/// The next piece of work [`Schedule::next`] hands out.
#[derive(Debug)]
pub enum Work<C> {
    Job(Job),
    Due(Due<C>),
}

/// The host timer the schedule keeps armed.
struct HostTimer<H> {
    handle: H,
    fires_at: i64,
    /// What it carries: a fire of an older generation (stopped too late) is ignored.
    generation: u64,
}

/// Timers and jobs of one engine.
pub struct Schedule<T: Handles> {
    timers: BTreeMap<(i64, TimerId), Due<T::Client>>,
    due_at: HashMap<TimerId, i64>,
    next_id: TimerId,
    /// Hand-offs and revokes, then housekeeping.
    urgent: VecDeque<Job>,
    background: VecDeque<Job>,
    /// Jobs put off because the server could not write; back in line at the next turn.
    deferred: VecDeque<Job>,
    /// Jobs put off to the next turn (this one spent its share of their kind of work); the next
    /// turn comes at once.
    next_turn: VecDeque<Job>,
    /// Every job queued or deferred.
    queued: HashSet<Job>,
    host_timer: Option<HostTimer<T::Timer>>,
    generation: u64,
}

impl<T: Handles> Default for Schedule<T> {
    fn default() -> Self {
        Schedule {
            timers: BTreeMap::new(),
            due_at: HashMap::new(),
            next_id: 0,
            urgent: VecDeque::new(),
            background: VecDeque::new(),
            deferred: VecDeque::new(),
            next_turn: VecDeque::new(),
            queued: HashSet::new(),
            host_timer: None,
            generation: 0,
        }
    }
}

impl<T: Handles> Schedule<T> {
    /// A timer for `due` at `at` (Unix ms; any time, near or far).
    pub fn start<H: Host<T>>(&mut self, host: &mut H, at: i64, due: Due<T::Client>) -> TimerId {
        self.next_id += 1;
        let id = self.next_id;
        self.timers.insert((at, id), due);
        self.due_at.insert(id, at);
        self.arm(host, at);
        id
    }

    /// Stops timer `id` (nothing if it already came due).
    pub fn stop<H: Host<T>>(&mut self, host: &mut H, id: TimerId) {
        if let Some(at) = self.due_at.remove(&id) {
            self.timers.remove(&(at, id));
            if self.is_idle() {
                self.disarm(host);
            }
        }
    }

    /// When timer `id` comes due, if it is armed.
    pub fn due_at(&self, id: TimerId) -> Option<i64> {
        self.due_at.get(&id).copied()
    }

    /// Queues `job` to run after the current command, unless it is queued already.
    pub fn push<H: Host<T>>(&mut self, host: &mut H, job: Job) {
        // A job queued already is armed for; one put off retries on its own.
        if self.queued.insert(job.clone()) {
            if job.urgent() {
                self.urgent.push_back(job);
            } else {
                self.background.push_back(job);
            }
            let now = host.now_ms();
            self.arm(host, now);
        }
    }

    /// Puts off `job` (handed out by [`Schedule::next`]) until the next turn: the server cannot
    /// write now.
    pub fn defer(&mut self, job: Job) {
        if self.queued.insert(job.clone()) {
            self.deferred.push_back(job);
        }
    }

    /// Puts off `job` (handed out by [`Schedule::next`]) to the next turn, which comes at once:
    /// this turn spent its share of what the job does.
    pub fn next_turn(&mut self, job: Job) {
        if self.queued.insert(job.clone()) {
            self.next_turn.push_back(job);
        }
    }

    /// The host timer carrying `generation` fired; false if it is one the schedule gave up.
    pub fn fired(&mut self, generation: u64) -> bool {
        if self
            .host_timer
            .as_ref()
            .is_some_and(|t| t.generation == generation)
        {
            self.host_timer = None;
            // Jobs put off in an earlier turn get their turn again, first in their line.
            let mut later = std::mem::take(&mut self.next_turn);
            later.append(&mut self.deferred);
            while let Some(job) = later.pop_back() {
                if job.urgent() {
                    self.urgent.push_front(job);
                } else {
                    self.background.push_front(job);
                }
            }
            true
        } else {
            false
        }
    }

    /// The next piece of work due at `now`: hand-offs and revokes, then timers in time order,
    /// then housekeeping.
    pub fn next(&mut self, now: i64) -> Option<Work<T::Client>> {
        if let Some(job) = self.urgent.pop_front() {
            self.queued.remove(&job);
            return Some(Work::Job(job));
        }
        if let Some((&(at, id), _)) = self.timers.first_key_value() {
            if at <= now {
                self.due_at.remove(&id);
                return self.timers.remove(&(at, id)).map(Work::Due);
            }
        }
        let job = self.background.pop_front()?;
        self.queued.remove(&job);
        Some(Work::Job(job))
    }

    /// After a turn: arms the host timer for what is left (at once for queued jobs, after
    /// [`RETRY_MS`] for deferred ones, else at the earliest timer).
    pub fn rearm<H: Host<T>>(&mut self, host: &mut H) {
        let now = host.now_ms();
        let mut at = self.timers.first_key_value().map(|(&(at, _), _)| at);
        if self.has_queued() || !self.next_turn.is_empty() {
            at = Some(now);
        } else if !self.deferred.is_empty() {
            let retry = now.saturating_add(RETRY_MS);
            at = Some(at.map_or(retry, |at| at.min(retry)));
        }
        match at {
            Some(at) => self.arm(host, at),
            None => self.disarm(host),
        }
        // A flood's queues give their memory back once drained.
        if !self.has_queued()
            && self.deferred.is_empty()
            && self.next_turn.is_empty()
            && self.queued.capacity() > 1024
        {
            self.urgent = VecDeque::new();
            self.background = VecDeque::new();
            self.queued = HashSet::new();
        }
    }

    /// Lock-deadline and wait-end timers armed (they must all be gone when nobody waits).
    pub fn armed(&self) -> usize {
        self.timers.len()
    }

    /// Whether any work is queued or put off.
    pub fn has_jobs(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether jobs wait in line (not put off).
    fn has_queued(&self) -> bool {
        !self.urgent.is_empty() || !self.background.is_empty()
    }

    fn is_idle(&self) -> bool {
        self.timers.is_empty() && self.queued.is_empty()
    }

    /// Makes the host timer fire no later than `at`.
    fn arm<H: Host<T>>(&mut self, host: &mut H, at: i64) {
        let now = host.now_ms();
        let delay = at.saturating_sub(now).clamp(0, MAX_TIMER_MS);
        let fires_at = now.saturating_add(delay);
        if self
            .host_timer
            .as_ref()
            .is_some_and(|t| t.fires_at <= fires_at)
        {
            return;
        }
        self.disarm(host);
        self.generation += 1;
        let handle = host.start_timer(delay, self.generation);
        self.host_timer = Some(HostTimer {
            handle,
            fires_at,
            generation: self.generation,
        });
    }

    fn disarm<H: Host<T>>(&mut self, host: &mut H) {
        if let Some(timer) = self.host_timer.take() {
            host.stop_timer(timer.handle);
        }
    }
}
