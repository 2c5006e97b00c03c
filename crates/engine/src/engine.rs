//! The lock engine: applies the decisions of [`super::decide`] to keys, queues and timers. It
//! owns three parts that keep their own state and invariants: [`Waiters`] (every key's FIFO
//! queue, every blocked client's ticket, the answers in flight), [`Schedule`] (every timer and
//! deferred job, behind one host timer) and the token counter; plus the counters of `INFO`.
//!
//! It talks to the server only through a [`Host`] and the [`Key`]s the host opens, so the same
//! code runs inside Redis (`src/redis/`) and on the in-memory host of the tests.
//!
//! How a lock passes from one holder to the next:
//! - A hold that ends by a command (`LOCK.RELEASE` of the last level, `LOCK.FORCERELEASE`) goes
//!   to the head waiter in the same step: one atomic change, replicated as one effect.
//! - A hold that ends behind the engine's back (DEL, expiry, FLUSHALL, a type change) is noticed
//!   by the host ([`Engine::key_changed`]) and the key is *served* by a job after the current
//!   command (Redis 7.0 forbids writes inside keyspace notifications). Until then the key is
//!   free but queued, and nobody but the head may take it (no barging).
//! - A key with waiters has a deadline timer at the moment its head may be let in (its lock's
//!   expiry; for a shared key, the lease end that makes room), so the head gets the lock within a
//!   few ms rather than whenever Redis gets to the key.
//! - A lapsed shared lease counts for nothing from the millisecond after its end: decisions never
//!   wait for its removal, which runs in slices of at most [`PRUNE_SLICE`] a job and
//!   [`LAPSED_PER_TURN`] a turn over every key, set off by the key's lapse timer (or a command
//!   on the key). A semaphore grant that needs the room of
//!   more lapsed leases than [`MAKE_ROOM_INLINE`] waits for those slices rather than ending
//!   them inline.
//! - A hold granted through answers that all got lost (their clients hung up before delivery) is
//!   revoked and passes on; one delivered answer, or a command of its owner, keeps it.
//! - Every turn the engine starts by itself (its timers and jobs) does at most [`TURN_BUDGET`]
//!   units of work and leaves the rest to the next turn, so no storm freezes the server.
//! - While the server may not write (loading, writes paused) the engine's own work waits and is
//!   retried; on a replica the waiters fail with `READONLY`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use super::decide::{self, Downgrade, Kind, Next, Release, Seen, Take};
use super::edit::{self, end_hold, ended_hold, ended_holder, expiry, next_deadline, refresh};
use super::errors::{LockError, Refusal};
use super::grace::Grace;
use super::host::{Blocked, Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
use super::journal::Reason;
use super::observers::Observers;
use super::packed::{Hold, LockRef};
use super::queue::WaiterId;
use super::schedule::{Due, Job, Schedule, TimerId, Work};
use super::shared::{Holder, Mode};
use super::stats::Stats;
use super::tokens::{self, Clock, Tokens};
use super::waiters::{Deadline, Removed, Waiter, Waiters};
use super::watch::{EndedHold, Watch};

mod fenced;
pub use fenced::{Current, Fence};
mod group;
mod lapsed;
mod observe;
mod reads;

pub use super::schedule::{MAX_TIMER_MS, RETRY_MS};

/// Units of work one turn the engine starts by itself may do (a job, a timer, a grant, a lapsed
/// lease removed: each a unit, from a few hundred ns to a few µs): about a millisecond or two.
pub const TURN_BUDGET: usize = 256;

/// Waiters one grant pass hands the lock to at most (a batch of readers at a writer's end):
/// the rest are served by the next turn.
pub const GRANT_BATCH: usize = TURN_BUDGET;

/// Lapsed leases one prune job removes at most (each one effect for replicas and the AOF).
pub const PRUNE_SLICE: usize = 128;

/// Lapsed leases a new shared hold ends at most in its own command or grant to make room in a
/// semaphore; one that needs more waits (queued, or nil for `LOCK.ACQUIRE`) while the prune
/// jobs end them, [`PRUNE_SLICE`] a turn, and is served in queue order once the rest fits.
pub const MAKE_ROOM_INLINE: usize = PRUNE_SLICE;

/// Lapsed leases one turn the engine starts by itself ends at most, over every key: its
/// prune slices and the grants that make room share it (each lapsed lease a unit of the
/// turn's [`TURN_BUDGET`], which is the same figure), and what is left waits for the next turn
/// (a grant too: it waits in the queue). A command ends at most [`MAKE_ROOM_INLINE`]. A key
/// whose every lease lapsed is replaced whole by a new hold and counts as one removal.
pub const LAPSED_PER_TURN: usize = TURN_BUDGET;

pub use super::reply::{HolderInfo, Info, Reply, Request, Wait, WaiterInfo};
pub use super::shared::QUICK_TIDY_HOLDERS;

/// The token of `owner`'s hold on `key`, if it has one (lapsed or not).
fn own_token<K: Key>(key: &K, owner: &[u8]) -> Option<u64> {
    match key.lock()? {
        LockRef::Exclusive(hold) => hold.is_held_by(owner).then(|| hold.token()),
        LockRef::Shared(shared) => shared.get(owner).map(|h| h.token),
    }
}

/// The lapse timers of one db's shared keys, by name: when each fires, and the timer.
type Lapses = HashMap<Rc<[u8]>, (i64, TimerId)>;

/// Whether a new shared hold of `mode` at `key` would first have to end more lapsed leases than
/// [`MAKE_ROOM_INLINE`] (or `inline`) to fit its semaphore's limit. O(log H).
/// `inline`: what the command or turn may still end.
fn room_waits<K: Key>(key: &K, mode: Mode, now: i64, inline: usize) -> bool {
    let Mode::Shared { limit, permits } = mode else {
        return false;
    };
    let Some(shared) = key.shared().filter(|_| limit > 0) else {
        return false;
    };
    let need = (shared.permits_total() + u64::from(permits)).saturating_sub(u64::from(limit));
    // A key whose every lease lapsed is replaced whole (one removal, whatever its size).
    need > 0 && shared.live(now) > 0 && shared.leases_covering(need) > inline.min(MAKE_ROOM_INLINE)
}

/// The time the host reports, as the token counter's clock.
struct Now(i64);

impl Clock for Now {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.0).unwrap_or(0)
    }
}

/// The lock engine of one server.
pub struct Engine<T: Handles> {
    waiters: Waiters<T>,
    schedule: Schedule<T>,
    tokens: Tokens,
    stats: Stats,
    watch: Watch,
    grace: Grace,
    /// Whether a [`Due::GraceEnds`] timer is armed for the clock catching up with the token
    /// counter.
    catch_up_armed: bool,
    /// Units of work done in the current turn the engine started by itself.
    work: usize,
    /// Lapsed leases the current command or turn may still end (at its start
    /// [`MAKE_ROOM_INLINE`] for a command, [`LAPSED_PER_TURN`] for a turn).
    lapse_left: usize,
    /// The lapse timer of each shared key that has one (db, name: when it fires, the timer).
    lapses: HashMap<i32, Lapses>,
    /// Keys whose lapse timer is to be armed (or their lapsed leases removed) once this server
    /// is a master, by the [`Job::Rearm`] job, a slice a turn: the shared keys it loaded (RDB,
    /// a full sync), and the keys whose lease lapsed while it was a replica (a replica ends no
    /// lease: its master does, or it does once promoted). Any entry may be stale (the key gone
    /// or no longer shared since): checking it costs one open.
    unarmed: VecDeque<KeyId>,
    /// The keys of `unarmed` that a replica added (each once).
    unarmed_seen: HashSet<KeyId>,
    /// Blocked `LOCK.OBSERVE`s.
    observers: Observers<T>,
}

impl<T: Handles> Default for Engine<T> {
    fn default() -> Self {
        Engine {
            waiters: Waiters::default(),
            schedule: Schedule::default(),
            tokens: Tokens::new(),
            stats: Stats::default(),
            watch: Watch::default(),
            grace: Grace::default(),
            catch_up_armed: false,
            work: 0,
            lapse_left: LAPSED_PER_TURN,
            lapses: HashMap::new(),
            unarmed: VecDeque::new(),
            unarmed_seen: HashSet::new(),
            observers: Observers::default(),
        }
    }
}

impl<T: Handles> Engine<T> {
    /// An engine with no locks, waiters or tokens yet.
    pub fn new() -> Engine<T> {
        Engine::default()
    }

    // --- Commands -----------------------------------------------------------------------------

    /// `LOCK.ACQUIRE`: a new hold on a free key nobody waits for; idempotent for the holder.
    pub fn acquire<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        request: Request<'_>,
    ) -> Reply {
        self.take(host, key, request, Kind::Acquire)
    }

    /// `LOCK.REENTER`: a reentrant acquire; replies the new count. With `from` (`FROM c`, the
    /// count the caller expects before the step), a repeat of the step answers the same and
    /// changes nothing, and a hold that is gone is not taken afresh (c >= 1).
    pub fn reenter<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        request: Request<'_>,
        from: Option<u32>,
    ) -> Reply {
        self.take(host, key, request, Kind::Reenter(from))
    }

    /// `LOCK.WAIT`: acquires, or queues the caller until the lock is handed to it or
    /// `timeout_ms` passes (0: no limit). A caller the host will not block (MULTI, scripts, the
    /// master's stream, the AOF) gets nil at once.
    pub fn wait<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key, wait: Wait<'_>) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        let request = wait.request;
        if !self.grace.allows_ttl(request.ttl_ms) {
            return Reply::Error(Refusal::TtlAboveGrace.into());
        }
        let mut decision = self.decide_take(host, key, &request, Kind::Acquire);
        // In the restart grace, or while the token counter is ahead of the clock, a grantable
        // request waits: the grace's end (the clock catching up) serves the queue.
        let mut grace = None;
        if decision == Take::Grant {
            grace = self.no_new_holds(host);
            if grace.is_some() {
                decision = Take::Wait;
            }
        }
        if decision != Take::Wait {
            let reply = self.apply_take(host, key, &request, Kind::Acquire, decision);
            self.note_lapsed(host, key);
            return reply;
        }
        let Some(Blocked {
            client,
            caller,
            id: connection,
        }) = host.block()
        else {
            // The server will not block this client: it gets what `LOCK.ACQUIRE` answers, nil
            // for a taken lock (as a wait that timed out), TRYAGAIN in the grace.
            if let Some(refusal) = grace {
                return Reply::Error(refusal.into());
            }
            self.stats.contended += 1;
            self.watch.contended(key.id(), || host.now_ms());
            return Reply::Nil;
        };
        match grace {
            None => self.stats.contended += 1,
            Some(refusal) => self.resume_after(host, refusal),
        }
        self.watch.queued(key.id());
        let now = host.now_ms();
        let id = key.id().to_id();
        let times_out_at = (wait.timeout_ms > 0)
            .then(|| now.saturating_add(i64::try_from(wait.timeout_ms).unwrap_or(i64::MAX)));
        let waiter = self.waiters.join(
            &id,
            Waiter {
                client,
                owner: request.owner.into(),
                mode: request.mode,
                ttl_ms: request.ttl_ms,
                caller,
                timeout: None,
                since_us: host.now_us(),
                connection,
                times_out_at,
            },
        );
        if let Some(ends_at) = times_out_at {
            let timer = self
                .schedule
                .start(host, ends_at, Due::WaitEnds { client, waiter });
            self.waiters.set_timeout(&id, waiter, timer);
        }
        if !self.arm_deadline(host, key, &id) {
            // Free but queued (a wake-up is due), or held without an expiry: look again soon.
            self.schedule.push(host, Job::Serve(id));
        }
        self.note_lapsed(host, key);
        Reply::Blocked
    }

    /// `LOCK.RELEASE`: one level of the caller's hold; the last level hands the lock on. With
    /// `from` (`FROM c`, the count the caller expects before the step), a repeat of the step
    /// answers the same and changes nothing.
    pub fn release<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
        from: Option<u32>,
    ) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        self.release_step(host, key, owner, from)
    }

    /// [`Engine::release`] within a command that started already (`LOCK.MRELEASE`).
    pub(super) fn release_step<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
        from: Option<u32>,
    ) -> Reply {
        let seen = Seen::of(key, owner, || host.now_ms());
        let reply = match decide::release(seen, owner, from) {
            Release::NotHeld => {
                self.end_own_lapsed(key, owner, host.now_ms());
                Reply::Nil
            }
            Release::Refuse(refusal) => Reply::Error(refusal.into()),
            Release::Repeat { count } => {
                // The owner acted on its hold: a lost answer that granted it revokes nothing.
                if let Some(token) = own_token(key, owner) {
                    self.waiters.confirm(token);
                }
                Reply::Integer(u64::from(count))
            }
            Release::Decrement { count } => {
                let token = edit::set_count(key, owner, count);
                self.waiters.confirm(token);
                Reply::Integer(u64::from(count))
            }
            Release::End => {
                if let Some((token, granted_at)) = edit::end_own_hold(key, owner) {
                    self.waiters.confirm(token);
                    self.watch.held(host.now_ms(), granted_at);
                }
                key.notify(Event::Released);
                self.stats.released += 1;
                self.hand_off(host, key);
                Reply::Integer(0)
            }
        };
        self.note_lapsed(host, key);
        reply
    }

    /// `LOCK.RENEW`: resets the caller's lease; never revives a lock that is gone.
    pub fn renew<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        if !self.grace.allows_ttl(ttl_ms) {
            return Reply::Error(Refusal::TtlAboveGrace.into());
        }
        let now = host.now_ms();
        let seen = Seen::of(key, owner, || now);
        // An exclusive hold stays one whether it is renewed or not.
        let exclusive = matches!(seen, Seen::Exclusive(_));
        let reply = if decide::renew(seen, owner) {
            let token = refresh(key, owner, None, expiry(now, ttl_ms));
            self.waiters.confirm(token);
            key.notify(Event::Renewed);
            self.stats.renewed += 1;
            self.expiry_moved(host, key);
            Reply::Integer(token)
        } else {
            self.end_own_lapsed(key, owner, now);
            Reply::Nil
        };
        if exclusive {
            self.note_lapsed_exclusive(host, key);
        } else {
            self.note_lapsed(host, key);
        }
        reply
    }

    /// `LOCK.DOWNGRADE key owner`: the owner's exclusive hold becomes a shared hold of the same
    /// key (same token, lease, count and grant time; no limit), and the shared waiters at the
    /// head of the queue are granted with it, in the same step. Replies the token; nil if the
    /// owner holds nothing.
    pub fn downgrade<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key, owner: &[u8]) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        let now = host.now_ms();
        let queued = self.waiters.facts(key.id());
        let reply = match decide::downgrade(Seen::of(key, owner, || now), queued, owner) {
            Downgrade::NotHeld => Reply::Nil,
            Downgrade::Already { token } => {
                // The owner acted on its hold: it knows of it, a lost answer revokes nothing.
                self.waiters.confirm(token);
                Reply::Integer(token)
            }
            Downgrade::Refuse(refusal) => Reply::Error(refusal.into()),
            Downgrade::Go => {
                let Some(hold) = key.hold() else {
                    return Reply::Nil;
                };
                // A lock whose TTL a user removed keeps the longest lease a ttl can give; one a
                // user made expire past what a holder record keeps, the latest it keeps (the
                // key's TTL, and the effect replicas receive, then say the same).
                let lease_end = key
                    .expires_at()
                    .unwrap_or_else(|| expiry(now, super::args::MAX_TTL_MS));
                let lease_end = super::bounds::lease_end(lease_end);
                let holder = Holder {
                    token: hold.token(),
                    count: hold.count(),
                    lease_end,
                    permits: 1,
                    granted_at: hold.granted_at(),
                };
                if !key.put_holder(0, owner, holder) {
                    return Reply::Error(Refusal::TooManyHolders.into());
                }
                self.waiters.confirm(holder.token);
                key.notify(Event::Downgraded);
                self.stats.downgraded += 1;
                self.hand_off(host, key);
                Reply::Integer(holder.token)
            }
        };
        self.note_lapsed(host, key);
        reply
    }

    /// `LOCK.FORCERELEASE key [owner]`: ends every live hold of the key (replies how many), or
    /// only `owner`'s (replies 1 or 0), and hands the lock on. The journal learns who did it.
    pub fn force_release<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: Option<&[u8]>,
    ) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        let now = host.now_ms();
        let mut ended_holds = Vec::new();
        let ended = match (key.lock(), owner) {
            (None, _) => 0,
            (Some(LockRef::Exclusive(hold)), Some(owner)) if !hold.is_held_by(owner) => 0,
            (Some(LockRef::Exclusive(hold)), _) => {
                ended_holds.push(ended_hold(hold));
                key.remove();
                1
            }
            (Some(LockRef::Shared(shared)), None) => {
                let live = shared.live(now);
                self.stats.expired += (shared.len() - live) as u64;
                // Described in part when many end at once: what the journal and the hold
                // distribution can use.
                ended_holds.extend(
                    shared
                        .first_alive(self.watch.bulk(), now)
                        .into_iter()
                        .map(|(o, h)| ended_holder(o, h)),
                );
                key.remove();
                live
            }
            (Some(LockRef::Shared(shared)), Some(owner)) => match shared.get_alive(owner, now) {
                Some(holder) => {
                    ended_holds.push(ended_holder(owner, holder));
                    key.remove_holder(owner);
                    1
                }
                None => 0,
            },
        };
        if ended > 0 {
            let client = if self.watch.records(Reason::ForceReleased) {
                host.caller_info()
            } else {
                String::new()
            };
            let at = self.watch.at(key.id(), now, self.waiters.queued(key.id()));
            for hold in &ended_holds {
                self.watch.lost(at, hold, Reason::ForceReleased, &client);
            }
            key.notify(Event::ForceReleased);
            self.stats.forcereleased += ended as u64;
            self.hand_off(host, key);
        }
        self.note_lapsed(host, key);
        Reply::Integer(ended as u64)
    }

    /// `LOCK.APPLY`: sets a hold exactly as given (the effect replicas and the AOF receive).
    pub fn apply<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        hold: Box<Hold>,
        expires_at: Option<i64>,
    ) -> Reply {
        self.tokens.observe(hold.token());
        key.put(hold, expires_at);
        self.expiry_moved(host, key);
        // A shared value replaced drops its lapse timer.
        self.note_lapsed(host, key);
        Reply::Ok
    }

    /// `LOCK.APPLY ... SHARED [LIMIT n]`: sets one shared holder exactly as given (the effect
    /// replicas and the AOF receive for a shared key).
    pub fn apply_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        limit: u32,
        owner: &[u8],
        holder: Holder,
    ) -> Reply {
        // Only what a consistent master sends: the key's limit, room for a new holder. (RDB
        // loading refuses nothing else a holder set can contain.)
        if let Some(shared) = key.shared() {
            if shared.limit() != limit {
                return Reply::Error(Refusal::OtherLimit(shared.limit()).into());
            }
            let before = shared.get(owner).map_or(0, |h| u64::from(h.permits));
            let after = shared.permits_total() - before + u64::from(holder.permits);
            if limit != 0 && after > u64::from(limit) {
                return Reply::Error(Refusal::OtherLimit(limit).into());
            }
        }
        self.tokens.observe(holder.token);
        if key.hold().is_some() {
            key.remove();
        }
        if !key.put_holder(limit, owner, holder) {
            return Reply::Error(Refusal::TooManyHolders.into());
        }
        self.expiry_moved(host, key);
        // Lapse timers on replicas and while the AOF loads too: a replica remembers the key
        // when its lease lapses, for its promotion (see `Job::Rearm`).
        self.note_lapsed(host, key);
        Reply::Ok
    }

    /// `LOCK.DROP key owner`: removes one shared holder exactly (the effect of a release, an
    /// expiry or a force-release of one shared hold).
    pub fn drop_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
    ) -> Reply {
        if key.shared().is_some_and(|s| s.get(owner).is_some()) {
            key.remove_holder(owner);
            self.expiry_moved(host, key);
            self.note_lapsed(host, key);
        }
        Reply::Ok
    }

    /// Records a token that exists elsewhere (RDB, AOF, `LOCK.COUNTER`), so that every later
    /// token is above it.
    pub fn observe_token(&mut self, token: u64) {
        self.tokens.observe(token);
    }

    /// Restores the counter and accepted lead from this server's own RDB (see
    /// [`crate::tokens::Tokens::restore`]).
    pub fn restore_tokens(&mut self, last: u64, accepted_ms: u64) {
        self.tokens.restore(last, accepted_ms);
    }

    /// The token lead accepted by the last tokens issued (saved with the counter).
    pub fn accepted_token_lead_ms(&self) -> u64 {
        self.tokens.accepted_ms()
    }

    // --- What the host reports ---------------------------------------------------------------

    /// A key changed behind the engine's back (DEL, expiry, overwrite, RENAME...): if anyone
    /// waits for it, it is served after the current command.
    pub fn key_changed<H: Host<T>>(&mut self, host: &mut H, key: KeyRef<'_>) {
        if self.lapse_armed(key) {
            // Checked after the command: a key gone (or no longer shared) drops its timer.
            self.schedule.push(host, Job::Leases(key.to_id()));
        }
        if self.waiters.queued(key) > 0 {
            self.schedule.push(host, Job::Serve(key.to_id()));
        }
        self.observed_changed(host, key);
    }

    /// A value arrived at `key` behind the engine's back (`RESTORE`, `COPY`, `RENAME`,
    /// `MOVE`): if anyone waits for it, its whole queue is checked against the new value after
    /// the current command. Only arrivals: a key that was deleted or expired brings no value
    /// that could refuse a waiter, and by the time the check ran the key could hold what the
    /// engine itself granted since (a waiter behind the head would be failed for a hold its own
    /// owner was just granted on another connection).
    pub fn value_arrived<H: Host<T>>(&mut self, host: &mut H, key: KeyRef<'_>) {
        if self.waiters.queued(key) > 0 {
            self.value_changed(host, key.to_id());
        }
        self.observed_changed(host, key);
    }

    /// A user set or removed the key's TTL, or a value arrived (`RESTORE`, `COPY`, `RENAME`,
    /// `MOVE`): a shared key is capped at its latest lease end after the current command
    /// (`PERSIST` or a longer TTL extends no lease).
    pub fn ttl_changed<H: Host<T>>(&mut self, host: &mut H, key: KeyRef<'_>) {
        self.schedule.push(host, Job::Leases(key.to_id()));
        self.key_changed(host, key);
    }

    /// Every key of `db` (all dbs if `None`) may have changed (FLUSHDB, SWAPDB, end of loading).
    pub fn db_changed<H: Host<T>>(&mut self, host: &mut H, db: Option<i32>) {
        // Each lapse timer of those dbs is checked against what the key holds now (FLUSHALL
        // leaves none; SWAPDB re-arms each key for what it holds).
        let dbs: Vec<i32> = self
            .lapses
            .keys()
            .copied()
            .filter(|d| db.is_none_or(|db| db == *d))
            .collect();
        for d in dbs {
            for name in self
                .lapses
                .get(&d)
                .map(|k| k.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                self.disarm_lapse(host, KeyRef { db: d, name: &name });
                self.schedule.push(host, Job::Leases(KeyId { db: d, name }));
            }
        }
        for key in self.waiters.keys(db) {
            self.value_changed(host, key);
        }
        self.observed_db_changed(host, db);
    }

    /// Holds ended behind the engine's back, for `reason` (their key expired, was deleted,
    /// evicted, overwritten, moved...): the journal and the hold distribution learn of them.
    /// `holds` describes them, at most [`Engine::describes`] of them.
    pub fn holds_lost(&mut self, key: KeyRef<'_>, now: i64, reason: Reason, holds: &[EndedHold]) {
        let at = self.watch.at(key, now, self.waiters.queued(key));
        for hold in holds {
            self.watch.lost(at, hold, reason, "");
        }
    }

    /// Every hold of `dbs` (all if `None`) ended at once (`flushed`, `swapped`): one entry.
    pub fn all_lost(&mut self, now: i64, dbs: Option<(i32, i32)>, reason: Reason) {
        self.watch.all_ended(now, dbs, reason);
    }

    /// `holds` holds ended because their lock's TTL ran out (counted for `INFO`).
    pub fn count_expired(&mut self, holds: u64) {
        self.stats.expired += holds;
    }

    /// Sets `relock.restart-grace-ms`.
    pub fn configure_grace(&mut self, ms: u64) {
        self.grace.configure(ms);
    }

    /// The server started as a master, or was promoted: the restart grace starts, if one is
    /// configured; when it ends, every queue is served in order.
    pub fn start_grace<H: Host<T>>(&mut self, host: &mut H) {
        // The shared keys it loaded or received as a replica get their lapse timers now.
        self.rearm_unarmed(host);
        if let Some(ms) = self.grace.start(host.now_us()) {
            let ends_at = host.now_ms().saturating_add(ms as i64).saturating_add(1);
            self.schedule.start(host, ends_at, Due::GraceEnds);
        }
    }

    /// Why no new hold may be made now, if so: the restart grace is under way, or the token
    /// counter is ahead of this server's clock (see [`tokens::SLACK`]); either says for how
    /// many more ms.
    fn no_new_holds<H: Host<T>>(&self, host: &H) -> Option<Refusal> {
        if let Some(ms) = self
            .grace
            .started()
            .then(|| self.grace.left_ms(host.now_us()))
            .flatten()
        {
            return Some(Refusal::Grace(ms));
        }
        self.tokens
            .ahead_ms(&Now(host.now_ms()))
            .map(Refusal::Clock)
    }

    /// New holds wait for `refusal` (a grace or the clock) to pass: a timer serves every queue
    /// then. The grace has its own from its start; the clock's is armed once.
    fn resume_after<H: Host<T>>(&mut self, host: &mut H, refusal: Refusal) {
        let ms = match refusal {
            Refusal::Grace(ms) => ms,
            Refusal::Clock(ms) if !self.catch_up_armed => {
                self.catch_up_armed = true;
                ms
            }
            _ => return,
        };
        let at = host
            .now_ms()
            .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
            .saturating_add(1);
        self.schedule.start(host, at, Due::GraceEnds);
    }

    /// The restart grace at `now_us` (the host's monotonic clock): its setting, and the ms left
    /// of the one under way (0 outside one).
    pub fn grace_ms(&self, now_us: u64) -> (u64, u64) {
        let left = self.grace.left_ms(now_us).unwrap_or(0);
        (self.grace.configured_ms(), left)
    }

    /// `relock.restart-grace-ms`.
    pub fn grace_configured_ms(&self) -> u64 {
        self.grace.configured_ms()
    }

    /// Whether a hold of `ttl_ms` may be asked for: not longer than a configured restart grace.
    pub fn allows_ttl(&self, ttl_ms: u64) -> bool {
        self.grace.allows_ttl(ttl_ms)
    }

    /// This server became a replica: every waiter fails with `READONLY`.
    pub fn became_replica<H: Host<T>>(&mut self, host: &mut H) {
        self.grace.end();
        for key in self.waiters.keys(None) {
            self.fail_all(host, &key, LockError::ReadOnly);
        }
        self.observers_demoted(host);
    }

    /// The host timer the engine armed with `generation` fired: one turn of due work, at most
    /// [`TURN_BUDGET`] units; the rest waits for the next turn.
    pub fn on_timer<H: Host<T>>(&mut self, host: &mut H, generation: u64) {
        if !self.schedule.fired(generation) {
            // Stopped after it was already on its way: nothing to do.
            return;
        }
        self.work = 0;
        self.lapse_left = LAPSED_PER_TURN;
        let now = host.now_ms();
        while self.work < TURN_BUDGET {
            let Some(work) = self.schedule.next(now) else {
                break;
            };
            self.work += 1;
            match work {
                Work::Due(Due::Deadline(key)) => {
                    self.waiters.deadline_fired(&key);
                    self.schedule.push(host, Job::Serve(key));
                }
                Work::Due(Due::WaitEnds { client, waiter }) => self.wait_ends(host, client, waiter),
                Work::Due(Due::ObserveDeadline(key)) => self.observed_deadline(host, key),
                Work::Due(Due::ObserveTimeouts) => self.observe_timeouts_due(host),
                Work::Due(Due::ObserveEnds(client)) => self.observe_ends(host, client),
                Work::Due(Due::Lapse(key)) => {
                    if let Some(keys) = self.lapses.get_mut(&key.db) {
                        keys.remove(&key.name);
                        if keys.is_empty() {
                            self.lapses.remove(&key.db);
                        }
                    }
                    self.schedule.push(host, Job::Prune(key));
                }
                Work::Due(Due::GraceEnds) => {
                    self.catch_up_armed = false;
                    match self.no_new_holds(host) {
                        // The wall clock the timer runs on was ahead of the monotonic one; or
                        // the grace ended and the clock has yet to catch up with the tokens.
                        Some(refusal) => self.resume_after(host, refusal),
                        None => {
                            for key in self.waiters.keys(None) {
                                self.schedule.push(host, Job::Serve(key));
                            }
                        }
                    }
                }
                Work::Job(job) => self.run(host, job),
            }
        }
        self.schedule.rearm(host);
    }

    /// A blocked client's answer was delivered.
    pub fn replied(&mut self, client: T::Client) {
        self.waiters.delivered(client);
    }

    /// A blocked client hung up: a waiter leaves its queue (and is unblocked, as the host
    /// requires of every blocked client); a client answered a hold nobody knows of yet loses
    /// that answer, and the hold is revoked once every answer carrying it is lost.
    pub fn client_gone<H: Host<T>>(&mut self, host: &mut H, client: T::Client) {
        if let Some(token) = self.waiters.answer_lost(client) {
            self.schedule.push(host, Job::Revoke(token));
        } else if self.leave_queue(host, client).is_some() {
            host.unblock(client, Outcome::TimedOut);
        } else {
            self.observer_gone(host, client);
        }
    }

    // --- What the host asks ------------------------------------------------------------------

    /// Live waiters over all keys.
    pub fn waiters(&self) -> usize {
        self.waiters.len()
    }

    /// Live waiters queued for `key`.
    pub fn queued(&self, key: KeyRef<'_>) -> usize {
        self.waiters.queued(key)
    }

    /// Lock-deadline and wait-timeout timers armed and not yet fired or stopped (must come back
    /// to 0 when nobody waits, or timers leak).
    pub fn armed_timers(&self) -> usize {
        self.schedule.armed() - self.lapses.values().map(HashMap::len).sum::<usize>()
    }

    /// Lapse timers armed (one at most per shared key with holders).
    pub fn lapse_timers(&self) -> usize {
        self.lapses.values().map(HashMap::len).sum()
    }

    /// When `name`'s lapse timer (db `db`) fires, if one is armed.
    #[cfg(test)]
    pub(crate) fn lapse_timer_at(&self, db: i32, name: &[u8]) -> Option<i64> {
        self.lapses.get(&db)?.get(name).map(|(at, _)| *at)
    }

    /// Whether a change to `key` behind the engine's back concerns it: the key has waiters or
    /// a lapse timer (two lookups, no allocation; what [`Engine::key_changed`] and
    /// [`Engine::value_arrived`] would act on).
    pub fn watches(&self, key: KeyRef<'_>) -> bool {
        (self.waiters() > 0 && self.waiters.queued(key) > 0)
            || self.lapse_armed(key)
            || (!self.observers.is_empty() && self.observers.watched(key))
    }

    /// The largest token issued or observed.
    pub fn last_token(&self) -> u64 {
        self.tokens.last()
    }

    /// How many of the holds of a key ending behind its back (deleted, expired...) the engine
    /// wants described to [`Engine::holds_lost`]: 0 when neither the journal nor the
    /// statistics keep anything of them, at most [`super::watch::MASS_END`].
    pub fn describes(&self) -> usize {
        self.watch.unlinked()
    }

    /// The journal and the statistics.
    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// The journal and the statistics, to configure or reset.
    pub fn watch_mut(&mut self) -> &mut Watch {
        &mut self.watch
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    // --- Acquiring -----------------------------------------------------------------------------

    /// `LOCK.ACQUIRE` or `LOCK.REENTER`.
    fn take<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        request: Request<'_>,
        kind: Kind,
    ) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        if !self.grace.allows_ttl(request.ttl_ms) {
            return Reply::Error(Refusal::TtlAboveGrace.into());
        }
        let (mut decision, at_hold) = self.decide_take_at(host, key, &request, kind);
        if decision == Take::Grant {
            if let Some(refusal) = self.no_new_holds(host) {
                decision = Take::Refuse(refusal);
            }
        }
        // Out of memory, a re-entry that adds is refused; a repeat, a nil or an error is
        // answered still. (The other acquiring commands are deny-oom: Redis refuses them first,
        // except in a script flagged allow-oom, which they keep.)
        if matches!(kind, Kind::Reenter(_))
            && matches!(decision, Take::Grant | Take::Refresh { .. })
            && host.out_of_memory()
        {
            decision = Take::Refuse(Refusal::OutOfMemory);
        }
        let reply = self.apply_take(host, key, &request, kind, decision);
        if at_hold {
            self.note_lapsed_exclusive(host, key);
        } else {
            self.note_lapsed(host, key);
        }
        reply
    }

    /// What an acquiring request comes to at `key` now.
    fn decide_take<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &H::Key,
        request: &Request<'_>,
        kind: Kind,
    ) -> Take {
        self.decide_take_at(host, key, request, kind).0
    }

    /// [`Engine::decide_take`], and whether the request is exclusive and the key held
    /// exclusively: then the key stays an exclusive hold whatever is decided (a refusal, a
    /// repeat or a refresh of the owner's hold), and the queue cannot change the decision (it
    /// matters to a free or shared key only: `decide::take` grants nothing at an exclusive
    /// hold), so it is not looked up: the common refusal's fast path.
    fn decide_take_at<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &H::Key,
        request: &Request<'_>,
        kind: Kind,
    ) -> (Take, bool) {
        let lock = key.lock();
        if let (Mode::Exclusive, Some(LockRef::Exclusive(hold))) = (request.mode, lock) {
            return (decide::take_at_hold(hold, request.owner, kind), true);
        }
        let seen = Seen::of_lock(lock, request.owner, || host.now_ms());
        let queued = self.waiters.facts(key.id());
        if queued.any && matches!(seen, Seen::Free) {
            // A free key with waiters means a wake-up is due; make sure one is scheduled.
            self.schedule.push(host, Job::Serve(key.id().to_id()));
        }
        let take = decide::take(seen, queued, request.owner, request.mode, kind);
        let shared = matches!(request.mode, Mode::Shared { .. });
        if take == Take::Grant
            && shared
            && room_waits(key, request.mode, host.now_ms(), self.lapse_left)
        {
            // More lapsed leases in the way than one command may end: the schedule ends them.
            self.schedule.push(host, Job::Prune(key.id().to_id()));
            return (Take::Wait, false);
        }
        (take, false)
    }

    /// [`Engine::note_lapsed`] for a key a command found held exclusively and left so: no
    /// value to read again, and no lapse timer to look up while none is armed anywhere.
    #[inline]
    fn note_lapsed_exclusive<H: Host<T>>(&mut self, host: &mut H, key: &H::Key) {
        if !self.lapses.is_empty() {
            self.disarm_lapse(host, key.id());
        }
    }

    /// Applies an acquiring decision; the reply.
    fn apply_take<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        request: &Request<'_>,
        kind: Kind,
        decision: Take,
    ) -> Reply {
        let reply = |token: u64, count: u32| match kind {
            Kind::Acquire => Reply::Integer(token),
            Kind::Reenter(_) => Reply::Integer(u64::from(count)),
        };
        match decision {
            Take::Refuse(refusal) => Reply::Error(refusal.into()),
            Take::Wait => {
                self.stats.contended += 1;
                self.watch.contended(key.id(), || host.now_ms());
                Reply::Nil
            }
            Take::Gone => Reply::Nil,
            Take::Repeat { count } => {
                // The owner acted on its hold: a lost answer that granted it revokes nothing.
                if let Some(token) = own_token(key, request.owner) {
                    self.waiters.confirm(token);
                }
                reply(0, count)
            }
            Take::Refresh { count } => {
                let lease_end = expiry(host.now_ms(), request.ttl_ms);
                let token = refresh(key, request.owner, Some(count), lease_end);
                self.waiters.confirm(token);
                key.notify(Event::Acquired);
                self.expiry_moved(host, key);
                reply(token, count)
            }
            Take::Grant => {
                match self.grant(host, key, request.owner, request.mode, request.ttl_ms) {
                    Err(refusal) => Reply::Error(refusal.into()),
                    Ok(token) => {
                        key.notify(Event::Acquired);
                        self.stats.acquired += 1;
                        reply(token, 1)
                    }
                }
            }
        }
    }

    /// A new hold for `owner` in `mode` with a fresh token, replacing what lapsed leases are in
    /// the way; nothing changes when it is refused.
    fn grant<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
        mode: Mode,
        ttl_ms: u64,
    ) -> Result<u64, Refusal> {
        let now = host.now_ms();
        let lease_end = expiry(now, ttl_ms);
        match mode {
            Mode::Exclusive => {
                let token = self.issue(now)?;
                self.put_exclusive(key, owner, token, now, lease_end);
                Ok(token)
            }
            Mode::Shared { limit, permits } => {
                if let Some(ms) = self.tokens.ahead_ms(&Now(now)) {
                    return Err(Refusal::Clock(ms));
                }
                self.make_room(key, limit, permits, now);
                let token = self.issue(now)?;
                let holder = Holder {
                    permits,
                    ..Holder::new(token, lease_end, now)
                };
                if key.put_holder(limit, owner, holder) {
                    Ok(token)
                } else {
                    Err(Refusal::TooManyHolders)
                }
            }
        }
    }

    /// A new token at `now`.
    fn issue(&mut self, now: i64) -> Result<u64, Refusal> {
        self.tokens
            .issue(&Now(now))
            .map_err(|refused| match refused {
                tokens::Refused::Exhausted => Refusal::NoTokens,
                tokens::Refused::AheadMs(ms) => Refusal::Clock(ms),
            })
    }

    /// A new exclusive hold with `token` on a key free for it (a shared value left with lapsed
    /// leases only is replaced whole).
    fn put_exclusive<K: Key>(&mut self, key: &mut K, owner: &[u8], token: u64, now: i64, end: i64) {
        if let Some(shared) = key.shared() {
            let holders = shared.len() as u64;
            self.journal_lapsed(key);
            self.lapsed_ended(key, holders);
        }
        key.put(Hold::new(owner, token, 1, now), Some(end));
    }

    /// Before a new shared hold of `permits` with `limit`: a key whose every lease lapsed starts
    /// afresh (one removal, whatever its old limit); a semaphore whose lapsed leases still take
    /// the room drops the first of them until the new one fits (so that replicas, which count
    /// every holder they were sent, find room too, and a semaphore's holders, lapsed or not,
    /// never hold more than its limit).
    fn make_room<K: Key>(&mut self, key: &mut K, limit: u32, permits: u32, now: i64) {
        let Some(shared) = key.shared() else {
            return;
        };
        if shared.live(now) == 0 {
            let holders = shared.len() as u64;
            self.journal_lapsed(key);
            key.remove();
            self.lapsed_ended(key, holders);
            return;
        }
        if limit == 0 {
            return;
        }
        let first_lapsed_in_the_way = |key: &K| {
            key.shared()
                .filter(|s| s.permits_total() + u64::from(permits) > u64::from(limit))
                .and_then(|s| s.first_lease_end())
                .filter(|(end, _)| *end < now)
                .map(|(_, owner)| owner.to_vec())
        };
        let mut ended = 0;
        while let Some(owner) = first_lapsed_in_the_way(key) {
            self.journal_one_lapsed(key, &owner);
            key.end_lapsed(&owner);
            ended += 1;
        }
        // At most what is left (`room_waits` made sure before the grant).
        self.lapse_left = self.lapse_left.saturating_sub(ended as usize);
        self.lapsed_ended(key, ended);
    }

    // --- Queues and hand-off ---------------------------------------------------------------------

    /// Hands the free lock at `key` to its head waiter, if anyone waits.
    fn hand_off<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key) -> bool {
        // The common case, nobody waiting, costs one lookup and no allocation.
        if self.waiters.queued(key.id()) == 0 {
            return false;
        }
        let id = key.id().to_id();
        self.grant_pass(host, key, &id)
    }

    /// The grant pass: grants waiters strictly in queue order while the key allows, in the same
    /// atomic step. A head whose owner holds the key already is answered as a re-acquire; one
    /// that can never be granted as asked gets the error; one that cannot be granted yet blocks
    /// everyone behind it. Returns whether anyone was granted.
    fn grant_pass<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key, id: &KeyId) -> bool {
        let mut granted = false;
        let mut grants = 0;
        loop {
            // No new hold in the restart grace, nor while the tokens are ahead of the clock:
            // their end serves every queue. (Looked at for each grant: a batch can use up the
            // millisecond's tokens.)
            if let Some(refusal) = self.no_new_holds(host) {
                if let Refusal::Clock(_) = refusal {
                    self.resume_after(host, refusal);
                }
                break;
            }
            if grants >= GRANT_BATCH {
                // A long batch of readers goes on in the next turn, in queue order: no other
                // request passes them meanwhile (they are queued), and no turn grows with it.
                self.schedule.push(host, Job::Serve(id.clone()));
                break;
            }
            let now = host.now_ms();
            let (next, mode) = match self.waiters.head(id) {
                None => break,
                Some(head) => {
                    let next = decide::next_for(
                        Seen::of(key, &head.owner, || now),
                        &head.owner,
                        head.mode,
                    );
                    (
                        decide::at_turn(next, self.grace.allows_ttl(head.ttl_ms)),
                        head.mode,
                    )
                }
            };
            if next == Next::Stop {
                break;
            }
            if next == Next::Grant && room_waits(key, mode, now, self.lapse_left) {
                // The head waits, and everyone behind it, while the schedule ends the lapsed
                // leases in its way; the prune job serves the key after each slice.
                self.schedule.push(host, Job::Prune(id.clone()));
                break;
            }
            let Some(Removed { waiter, deadline }) = self.waiters.pop_head(id) else {
                break;
            };
            self.stop_timers(host, waiter.timeout, deadline);
            let permitted = waiter.caller.as_ref().is_none_or(|c| host.permitted(c));
            let token = match next {
                Next::Fail(refusal) => Err(refusal.into()),
                _ if !permitted => Err(LockError::NoPerm),
                Next::Reacquire => Ok(refresh(
                    key,
                    &waiter.owner,
                    None,
                    expiry(now, waiter.ttl_ms),
                )),
                _ => self
                    .grant(host, key, &waiter.owner, waiter.mode, waiter.ttl_ms)
                    .map_err(LockError::from),
            };
            match token {
                Err(error) => host.unblock(waiter.client, Outcome::Error(error)),
                Ok(token) => {
                    self.stats.granted += 1;
                    self.work += 1;
                    grants += 1;
                    let waited = host.now_us().saturating_sub(waiter.since_us);
                    self.watch.waited(id.as_ref(), waited, true);
                    let new = next == Next::Grant;
                    self.waiters
                        .answered(waiter.client, token, id, &waiter.owner, new);
                    host.unblock(waiter.client, Outcome::Token(token));
                    granted = true;
                }
            }
        }
        if granted {
            // One event per key per operation, however many waiters a pass grants.
            key.notify(Event::Granted);
        }
        self.arm_deadline(host, key, id);
        granted
    }

    /// Arms `id`'s deadline timer for when a hold of the key next ends (and its head may be let
    /// in); false if no such moment is known (the key is free, or held without an expiry).
    fn arm_deadline<H: Host<T>>(&mut self, host: &mut H, key: &H::Key, id: &KeyId) -> bool {
        if self.waiters.queued(id.as_ref()) == 0 {
            return true;
        }
        let Some(ends_at) = next_deadline(key, host.now_ms()) else {
            return false;
        };
        // A key counts as expired once now > its expiry, hence the extra millisecond.
        let fires_at = ends_at.saturating_add(1);
        if self
            .waiters
            .deadline(id.as_ref())
            .is_some_and(|d| d.fires_at <= fires_at)
        {
            return true;
        }
        let timer = self
            .schedule
            .start(host, fires_at, Due::Deadline(id.clone()));
        let deadline = Deadline { timer, fires_at };
        match self.waiters.set_deadline(id, deadline) {
            Ok(old) => self.stop_timers(host, old.map(|d| d.timer), None),
            Err(unused) => self.stop_timers(host, Some(unused.timer), None),
        }
        true
    }

    /// Looks at a key with waiters and does what its state calls for: a free lock goes to the
    /// head waiter, a held one gets its deadline, another type fails the waiters with
    /// WRONGTYPE, a key whose slot this node no longer serves redirects them.
    fn serve<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        if self.waiters.queued(id.as_ref()) == 0 {
            return;
        }
        match host.open(id) {
            Err(OpenError::WrongType) => self.fail_all(host, id, LockError::WrongType),
            Err(OpenError::Unavailable) => {}
            Ok(mut key) => {
                if key.lock().is_none() {
                    if let Some(redirect) = host.redirect(&id.name) {
                        self.fail_all(host, id, LockError::Redirect(redirect));
                        return;
                    }
                }
                if self.waiters.take_arrived(id) {
                    self.fail_conflicting(host, &key, id);
                }
                self.grant_pass(host, &mut key, id);
                self.note_lapsed(host, &key);
            }
        }
    }

    /// A value that arrived behind the engine's back (`RENAME`, `RESTORE`, `SWAPDB`...) may
    /// make any queued request impossible, not only the head's: each waiter whose request can
    /// never be granted as asked (another limit, or its owner holding the key in the other mode)
    /// gets the error now. A scan of the queue, only when a value arrives.
    fn fail_conflicting<H: Host<T>>(&mut self, host: &mut H, key: &H::Key, id: &KeyId) {
        let now = host.now_ms();
        let failing: Vec<(WaiterId, Refusal)> = self
            .waiters
            .iter(id.as_ref())
            .filter_map(|(wid, w)| {
                match decide::next_for(Seen::of(key, &w.owner, || now), &w.owner, w.mode) {
                    Next::Fail(refusal) => Some((wid, refusal)),
                    _ => None,
                }
            })
            .collect();
        for (wid, refusal) in failing {
            if let Some(Removed { waiter, deadline }) = self.waiters.remove(id, wid) {
                self.stop_timers(host, waiter.timeout, deadline);
                host.unblock(waiter.client, Outcome::Error(refusal.into()));
            }
        }
        if let Some(shared) = key.shared().filter(|s| s.live(now) > 0) {
            self.waiters.set_limit(id, shared.limit());
        }
    }

    /// Takes a waiting client out of its queue (the caller unblocks it); the head leaving may let
    /// those behind it in. Returns its key and when it queued; none if it was not waiting.
    fn leave_queue<H: Host<T>>(&mut self, host: &mut H, client: T::Client) -> Option<(KeyId, u64)> {
        let (key, was_head, removed) = self.waiters.leave(client)?;
        self.stop_timers(host, removed.waiter.timeout, removed.deadline);
        if was_head && self.waiters.queued(key.as_ref()) > 0 {
            self.schedule.push(host, Job::Serve(key.clone()));
        }
        Some((key, removed.waiter.since_us))
    }

    /// A wait's timer fired: the waiter leaves with nil, unless it was served first.
    fn wait_ends<H: Host<T>>(&mut self, host: &mut H, client: T::Client, waiter: WaiterId) {
        if self
            .waiters
            .waiting(client)
            .is_none_or(|(_, waiting)| waiting != waiter)
        {
            return;
        }
        if let Some((key, since_us)) = self.leave_queue(host, client) {
            self.stats.wait_timeouts += 1;
            let waited = host.now_us().saturating_sub(since_us);
            self.watch.waited(key.as_ref(), waited, false);
            host.unblock(client, Outcome::TimedOut);
        }
    }

    /// Fails every waiter of `key` with `error`.
    fn fail_all<H: Host<T>>(&mut self, host: &mut H, key: &KeyId, error: LockError) {
        let (waiters, deadline) = self.waiters.take_all(key);
        self.stop_timers(host, None, deadline);
        for waiter in waiters {
            self.stop_timers(host, waiter.timeout, None);
            host.unblock(waiter.client, Outcome::Error(error.clone()));
        }
    }

    /// The value at `key`, which has waiters, may have been replaced by any other: its whole
    /// queue is checked against it, then it is served. Every way a value arrives comes here.
    fn value_changed<H: Host<T>>(&mut self, host: &mut H, key: KeyId) {
        self.waiters.mark_arrived(&key);
        self.schedule.push(host, Job::Serve(key));
    }

    /// The lock's expiry moved: waiters behind it (if any) need their deadline at the new time.
    fn expiry_moved<H: Host<T>>(&mut self, host: &mut H, key: &H::Key) {
        if self.waiters.queued(key.id()) > 0 {
            self.schedule.push(host, Job::Serve(key.id().to_id()));
        }
    }

    // --- Jobs ------------------------------------------------------------------------------------

    /// Runs a job if the server's state lets the engine write now; otherwise defers it
    /// (paused, loading) or drops it (a replica fails its waiters instead).
    fn run<H: Host<T>>(&mut self, host: &mut H, job: Job) {
        // Observers only read: they are answered in every state (the job defers itself while
        // loading).
        if let Job::Observe(key) = &job {
            return self.observe_job(host, key);
        }
        match host.state() {
            State::Master => match job {
                Job::Serve(key) => self.serve(host, &key),
                Job::Revoke(token) => self.revoke(host, token),
                Job::Leases(key) => self.cap_to_leases(host, &key),
                Job::Prune(key) => self.prune(host, &key),
                Job::Rearm => self.rearm_slice(host),
                Job::Observe(_) => {}
            },
            // While writes are paused Redis does not expire keys either: a key past its expiry
            // is still there, and writing it would corrupt the db. Hand-offs wait for the pause.
            State::Paused | State::Loading => self.schedule.defer(job),
            State::Replica => match job {
                Job::Serve(key) => self.fail_all(host, &key, LockError::ReadOnly),
                // The master decides now; nothing is revoked here.
                Job::Revoke(token) => self.waiters.confirm(token),
                // The master caps its keys and ends leases; both reach replicas as effects. A
                // lapsed lease is remembered, to be ended if this server is promoted first.
                Job::Leases(key) => self.leases_on_replica(host, &key),
                Job::Prune(key) => self.unarmed_on_replica(key),
                // Kept for the promotion.
                Job::Rearm => {}
                Job::Observe(_) => {}
            },
        }
    }

    /// Ends a hold granted through answers that were all lost (their clients hung up before
    /// delivery), unless an answer or a command of its owner confirmed it since.
    fn revoke<H: Host<T>>(&mut self, host: &mut H, token: u64) {
        let Some((id, owner)) = self.waiters.take_lost(token) else {
            return;
        };
        let Ok(mut key) = host.open(&id) else {
            return;
        };
        let held = match key.lock() {
            Some(LockRef::Exclusive(hold)) => hold.token() == token,
            Some(LockRef::Shared(shared)) => shared.get(&owner).is_some_and(|h| h.token == token),
            None => false,
        };
        if !held {
            return;
        }
        if let Some(hold) = end_hold(&mut key, &owner) {
            let waiters = self.waiters.queued(id.as_ref());
            let at = self.watch.at(id.as_ref(), host.now_ms(), waiters);
            self.watch.lost(at, &hold, Reason::Revoked, "");
        }
        key.notify(Event::Released);
        self.stats.released += 1;
        self.grant_pass(host, &mut key, &id);
        // The leases granted may end after those left: the earlier ones need their timer.
        self.note_lapsed(host, &key);
    }

    fn stop_timers<H: Host<T>>(
        &mut self,
        host: &mut H,
        timeout: Option<TimerId>,
        deadline: Option<TimerId>,
    ) {
        for timer in [timeout, deadline].into_iter().flatten() {
            self.schedule.stop(host, timer);
        }
    }
}
