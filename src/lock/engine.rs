//! The lock engine: every decision and its application. Grants, releases, renewals, the FIFO
//! queue of each key and the hand-off to its head, serving and revoking waiters, lease-expiry
//! timers, wait timeouts, the fencing-token counter and the counters of `INFO`.
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
//! - A held key with waiters has a timer at its lease's end, so the head gets the lock within a
//!   few ms of the TTL running out rather than whenever Redis gets to the key.
//! - A waiter granted the lock who hangs up before its reply is delivered never learns of its
//!   hold: the hold is revoked and passes on.
//! - While the server may not write (loading, writes paused) the engine's own work waits and is
//!   retried; on a replica the waiters fail with `READONLY`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::errors::{
    other_limit, NOPERM, NO_TOKENS, OTHER_MODE, READONLY, REENTRANCY_LIMIT, WRONGTYPE,
};
use super::hold::{self, Decision, Found, Step};
use super::host::{Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
use super::packed::{Hold, LockRef};
use super::queue::{Queue, WaiterId};
use super::shared::{Holder, Mode};
use super::stats::Stats;
use super::tokens::{Clock, Tokens};

/// Longest delay of one timer: 30 minutes. Redis keeps every module timer behind one
/// event-loop timer whose handler returns the period to the next module timer in ms, and
/// Redis 7.0 multiplies that by 1000 in an `int`: a next timer more than about 35 minutes out
/// wraps into the past, and the event loop spins at 100 % CPU (a lock expiring in the far
/// future, `PEXPIREAT k 2^62`, or a `LOCK.WAIT` with a timeout of hours). A longer delay is a
/// chain of timers: each one that fires early re-arms the next.
pub const MAX_TIMER_MS: i64 = 30 * 60 * 1000;

/// How often deferred work looks again while writes are paused or the server is loading.
pub const RETRY_MS: i64 = 10;

/// What a command answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Integer(u64),
    Nil,
    Ok,
    Error(Cow<'static, str>),
    /// `LOCK.INFO`'s map.
    Info(Info),
    /// `LOCK.HOLDERS`: one entry per holder, in grant order.
    Holders(Vec<HolderInfo>),
    /// The client is blocked; its answer comes later through [`Host::unblock`].
    Blocked,
}

/// What a `LOCK.WAIT` asks for.
#[derive(Clone, Copy, Debug)]
pub struct Wait<'a> {
    pub owner: &'a [u8],
    /// Exclusive, or shared (with a limit).
    pub mode: Mode,
    /// The lease of the hold it gets.
    pub ttl_ms: u64,
    /// How long it waits at most (0: no limit).
    pub timeout_ms: u64,
}

/// What `LOCK.INFO` reports about a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The holder of an exclusive lock (none for a shared key).
    pub owner: Option<Box<[u8]>>,
    pub token: Option<u64>,
    pub count: Option<u32>,
    /// Remaining lifetime in ms (of the latest lease of a shared key), -1 without an expiry.
    pub ttl_ms: i64,
    pub waiters: usize,
    pub mode: Mode,
    /// Live holds.
    pub holders: usize,
}

/// One entry of `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    pub owner: Box<[u8]>,
    pub token: u64,
    pub count: u32,
    /// Remaining lease in ms, -1 without an expiry.
    pub ttl_ms: i64,
}

/// Which acquiring command asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `LOCK.ACQUIRE` and `LOCK.WAIT`: replies the token; idempotent for the holder.
    Acquire,
    /// `LOCK.REENTER`: replies the count; the holder's count goes up.
    Reenter,
}

/// What a shared-aware acquire comes to.
enum Taken {
    Reply(Reply),
    /// Not now: the caller answers nil or queues.
    MustWait,
}

/// What the grant pass does with the head waiter.
enum Next {
    Stop,
    GrantExclusive,
    GrantShared(u32),
    /// Its owner holds the key already: a re-acquire, answered with the existing token.
    Reacquire,
    Fail(Cow<'static, str>),
}

struct Waiter<T: Handles> {
    client: T::Client,
    owner: Box<[u8]>,
    mode: Mode,
    ttl_ms: u64,
    /// Who asked, to re-check their permissions when the lock is handed over.
    caller: Option<T::Caller>,
    /// The timer that ends the wait (none for timeout 0).
    timeout: Option<u64>,
}

/// One key's queue and the timer armed at its lock's expiry.
struct Line<T: Handles> {
    queue: Queue<Waiter<T>>,
    deadline: Option<Armed>,
    /// Shared waiters queued, and the limit they all asked for (a key's limit lasts while any
    /// shared hold or shared waiter remains).
    shared_waiters: usize,
    limit: u32,
}

impl<T: Handles> Default for Line<T> {
    fn default() -> Self {
        Line {
            queue: Queue::new(),
            deadline: None,
            shared_waiters: 0,
            limit: 0,
        }
    }
}

struct Armed {
    number: u64,
    /// When the timer fires (Unix ms): the lock's expiry, or earlier for a distant one.
    at: i64,
}

/// Where a blocked client stands.
enum Ticket {
    Waiting {
        key: KeyId,
        id: WaiterId,
    },
    /// Answered with the token of a hold nobody knows of yet (see `Unconfirmed`); the reply is
    /// on its way.
    Granted {
        token: u64,
    },
}

/// What a timer is for.
enum Due<C> {
    /// The lock at this key expires: serve it.
    Deadline(KeyId),
    /// A wait ends at `ends_at` (Unix ms), unless the waiter was served first.
    WaitEnds {
        client: C,
        id: WaiterId,
        ends_at: i64,
    },
    /// Run the jobs scheduled during the current command or notification.
    Jobs,
    /// Retry the jobs put off while the server could not write.
    Retry,
}

/// Deferred work.
enum Job {
    Serve(KeyId),
    /// Revoke the unconfirmed hold with this token.
    Revoke(u64),
    /// A user changed the key's TTL (`PERSIST`, a longer `PEXPIRE`): a shared key's TTL must
    /// not outlive its latest lease.
    Leases(KeyId),
}

/// A hold granted through a waiter's answer that has not reached any client yet.
struct Unconfirmed {
    key: KeyId,
    owner: Box<[u8]>,
    /// Answers carrying this hold's token that are on their way (a new grant, and re-acquires
    /// answered to other connections of the same owner).
    answers: u32,
}

/// The time the host reports, as the token counter's clock.
struct At(i64);

impl Clock for At {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.0).unwrap_or(0)
    }
}

/// The lock engine of one server.
pub struct Engine<T: Handles> {
    /// db -> key -> line, only for keys with live waiters.
    lines: HashMap<i32, HashMap<Rc<[u8]>, Line<T>>>,
    tickets: HashMap<T::Client, Ticket>,
    next_waiter: WaiterId,
    live: usize,
    timers: HashMap<u64, (T::Timer, Due<T::Client>)>,
    next_timer: u64,
    jobs: Vec<Job>,
    /// Keys already in `jobs` as `Job::Serve`, so a burst of events serves each key once.
    serving: HashSet<KeyId>,
    /// Keys with waiters whose value changed behind the engine's back since they were last
    /// served: their whole queue is checked for requests the new value makes impossible.
    arrived: HashSet<KeyId>,
    jobs_timer: bool,
    /// Jobs put off because the server could not write, retried every `RETRY_MS`.
    deferred: Vec<Job>,
    /// Holds granted to waiters whose answers are not delivered yet (token -> where and how many
    /// answers are in flight). A revoke runs only for a hold every answer of which was lost:
    /// one delivered answer, or a command by the owner on the hold (the retry after a lost
    /// reply that the docs call safe), confirms it for good.
    unconfirmed: HashMap<u64, Unconfirmed>,
    tokens: Tokens,
    stats: Stats,
}

impl<T: Handles> Default for Engine<T> {
    fn default() -> Self {
        Engine {
            lines: HashMap::new(),
            tickets: HashMap::new(),
            next_waiter: 0,
            live: 0,
            timers: HashMap::new(),
            next_timer: 0,
            jobs: Vec::new(),
            serving: HashSet::new(),
            arrived: HashSet::new(),
            jobs_timer: false,
            deferred: Vec::new(),
            unconfirmed: HashMap::new(),
            tokens: Tokens::new(),
            stats: Stats::default(),
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
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
        mode: Mode,
    ) -> Reply {
        self.take(host, key, at, owner, ttl_ms, mode, Kind::Acquire)
    }

    /// `LOCK.REENTER`: a reentrant acquire; replies the new count.
    pub fn reenter<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
        mode: Mode,
    ) -> Reply {
        self.take(host, key, at, owner, ttl_ms, mode, Kind::Reenter)
    }

    /// `LOCK.ACQUIRE` or `LOCK.REENTER`: an exclusive request on a key that is not shared takes
    /// the plain path (the hot one); anything involving shared holds the shared-aware one.
    #[allow(clippy::too_many_arguments)]
    fn take<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
        mode: Mode,
        kind: Kind,
    ) -> Reply {
        if mode == Mode::Exclusive && key.shared().is_none() {
            let decide = match kind {
                Kind::Acquire => hold::acquire,
                Kind::Reenter => hold::reenter,
            };
            let decision = decide(self.found(host, key, at), owner);
            return self.apply_take(host, key, at, owner, ttl_ms, decision);
        }
        match self.take_shared(host, key, at, owner, ttl_ms, mode, kind) {
            Taken::Reply(reply) => reply,
            Taken::MustWait => {
                self.stats.contended += 1;
                Reply::Nil
            }
        }
    }

    /// `LOCK.WAIT`: acquires, or queues the caller until the lock is handed to it or
    /// `timeout_ms` passes (0: no limit). `block` blocks the calling client and says who it is;
    /// `None` when the caller may not block (MULTI, scripts, the master's stream, AOF), which
    /// then gets nil at once.
    pub fn wait<H: Host<T>, B>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        wait: Wait<'_>,
        block: Option<B>,
    ) -> Reply
    where
        B: FnOnce(&mut H) -> Option<(T::Client, Option<T::Caller>)>,
    {
        let Wait {
            owner,
            mode,
            ttl_ms,
            timeout_ms,
        } = wait;
        if mode == Mode::Exclusive && key.shared().is_none() {
            let decision = hold::acquire(self.found(host, key, at), owner);
            if decision != Decision::Nil || block.is_none() {
                return self.apply_take(host, key, at, owner, ttl_ms, decision);
            }
        } else if let Taken::Reply(reply) =
            self.take_shared(host, key, at, owner, ttl_ms, mode, Kind::Acquire)
        {
            return reply;
        }
        self.stats.contended += 1;
        let Some(block) = block else {
            return Reply::Nil;
        };
        let Some((client, caller)) = block(host) else {
            // The server would not block this client: it gets nil, as a wait that timed out.
            return Reply::Nil;
        };
        let expires_at = next_deadline(key);
        let key_id = at.to_id();
        self.next_waiter += 1;
        let id = self.next_waiter;
        let timeout = (timeout_ms > 0).then(|| {
            let timeout_ms = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
            let ends_at = host.now_ms().saturating_add(timeout_ms);
            self.start_timer(
                host,
                timeout_ms,
                Due::WaitEnds {
                    client,
                    id,
                    ends_at,
                },
            )
        });
        let line = self.line_or_new(&key_id);
        if let Mode::Shared { limit } = mode {
            line.shared_waiters += 1;
            line.limit = limit;
        }
        line.queue.push(
            id,
            Waiter {
                client,
                owner: owner.into(),
                mode,
                ttl_ms,
                caller,
                timeout,
            },
        );
        self.tickets.insert(
            client,
            Ticket::Waiting {
                key: key_id.clone(),
                id,
            },
        );
        self.live += 1;
        match expires_at {
            Some(expiry) => self.arm(host, &key_id, expiry),
            // Free but queued (a wake-up is due), or held without an expiry: look again soon.
            None => self.schedule(host, Job::Serve(key_id)),
        }
        Reply::Blocked
    }

    /// `LOCK.RELEASE`: one level of the caller's hold; the last level hands the lock on.
    pub fn release<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
    ) -> Reply {
        if key.shared().is_some() {
            return self.release_shared(host, key, at, owner);
        }
        let decision = hold::release(found_here(key), owner);
        self.confirm(key, decision);
        match decision.step() {
            Step::Decrement { count } => key.update(count, None),
            Step::End => {
                key.remove();
                key.notify(Event::Released);
                self.stats.released += 1;
                self.hand_off(host, key, at);
            }
            _ => {}
        }
        reply(key, decision)
    }

    /// `LOCK.RENEW`: resets the caller's lease; never revives a lock that is gone.
    pub fn renew<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        if key.shared().is_some() {
            return self.renew_shared(host, key, at, owner, ttl_ms);
        }
        let decision = hold::renew(found_here(key), owner);
        self.confirm(key, decision);
        if let Step::Refresh { count } = decision.step() {
            key.update(count, Some(expiry(host.now_ms(), ttl_ms)));
            key.notify(Event::Renewed);
            self.stats.renewed += 1;
            self.expiry_moved(host, at);
        }
        reply(key, decision)
    }

    /// `LOCK.FORCERELEASE key [owner]`: ends every hold of the key (replies how many), or only
    /// `owner`'s (replies 1 or 0), and hands the lock on.
    pub fn force_release<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: Option<&[u8]>,
    ) -> Reply {
        if key.shared().is_some() {
            self.prune(host, key);
        }
        let ended = match (key.lock(), owner) {
            (None, _) => 0,
            (Some(LockRef::Exclusive(hold)), Some(owner)) if !hold.is_held_by(owner) => 0,
            (Some(LockRef::Exclusive(_)), _) => {
                key.remove();
                1
            }
            (Some(LockRef::Shared(shared)), None) => {
                let holders = shared.len();
                key.remove();
                holders
            }
            (Some(LockRef::Shared(shared)), Some(owner)) => match shared.get(owner) {
                Some(_) => {
                    key.remove_holder(owner);
                    1
                }
                None => 0,
            },
        };
        if ended > 0 {
            key.notify(Event::ForceReleased);
            self.stats.forcereleased += ended as u64;
            self.hand_off(host, key, at);
        }
        Reply::Integer(ended as u64)
    }

    /// `LOCK.INFO`: the hold (or how many share the key), the remaining lifetime, how many wait
    /// for it, its mode and limit; nil if free.
    pub fn info<H: Host<T>>(&self, host: &H, key: &H::Key, at: KeyRef<'_>) -> Reply {
        let now = host.now_ms();
        let ttl = |end: Option<i64>| end.map_or(-1, |end| end.saturating_sub(now).max(0));
        let info = match key.lock() {
            None => return Reply::Nil,
            Some(LockRef::Exclusive(hold)) => Info {
                owner: Some(hold.owner().into()),
                token: Some(hold.token()),
                count: Some(hold.count()),
                ttl_ms: ttl(key.expires_at()),
                waiters: self.queued(at),
                mode: Mode::Exclusive,
                holders: 1,
            },
            Some(LockRef::Shared(shared)) => {
                // Lapsed leases are gone for every command, even before the engine ends them.
                let Some(last) = shared.live_last_lease_end(now) else {
                    return Reply::Nil;
                };
                Info {
                    owner: None,
                    token: None,
                    count: None,
                    ttl_ms: ttl(Some(last)),
                    waiters: self.queued(at),
                    mode: Mode::Shared {
                        limit: shared.limit(),
                    },
                    holders: shared.live(now),
                }
            }
        };
        Reply::Info(info)
    }

    /// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`: the live holds in grant order (at most
    /// `count`, 0: all), or only `owner`'s; nil if the key has no lock.
    pub fn holders<H: Host<T>>(
        &self,
        host: &H,
        key: &H::Key,
        owner: Option<&[u8]>,
        count: usize,
    ) -> Reply {
        let now = host.now_ms();
        let ttl = |end: Option<i64>| end.map_or(-1, |end| end.saturating_sub(now).max(0));
        let entry = |owner: &[u8], token, count, ttl_ms| HolderInfo {
            owner: owner.into(),
            token,
            count,
            ttl_ms,
        };
        let list = match key.lock() {
            None => return Reply::Nil,
            Some(LockRef::Exclusive(hold)) => {
                if owner.is_some_and(|o| !hold.is_held_by(o)) {
                    Vec::new()
                } else {
                    let ttl_ms = ttl(key.expires_at());
                    vec![entry(hold.owner(), hold.token(), hold.count(), ttl_ms)]
                }
            }
            Some(LockRef::Shared(shared)) => {
                if shared.live(now) == 0 {
                    return Reply::Nil;
                }
                let alive = |h: &Holder| h.lease_end >= now;
                match owner {
                    Some(owner) => shared
                        .get(owner)
                        .filter(|h| alive(h))
                        .map(|h| entry(owner, h.token, h.count, ttl(Some(h.lease_end))))
                        .into_iter()
                        .collect(),
                    None => shared
                        .first_alive(count, now)
                        .into_iter()
                        .map(|(o, h)| entry(o, h.token, h.count, ttl(Some(h.lease_end))))
                        .collect(),
                }
            }
        };
        Reply::Holders(list)
    }

    /// `LOCK.APPLY`: sets a hold exactly as given (the effect replicas and the AOF receive).
    pub fn apply<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        hold: Box<Hold>,
        expires_at: Option<i64>,
    ) -> Reply {
        self.tokens.observe(hold.token());
        key.put(hold, expires_at);
        self.expiry_moved(host, at);
        Reply::Ok
    }

    /// `LOCK.APPLY ... SHARED [LIMIT n]`: sets one shared holder exactly as given (the effect
    /// replicas and the AOF receive for a shared key).
    pub fn apply_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        limit: u32,
        owner: &[u8],
        holder: Holder,
    ) -> Reply {
        // Only what a consistent master sends: the key's limit, room for a new holder. (RDB
        // loading refuses nothing else a holder set can contain.)
        if let Some(shared) = key.shared() {
            if shared.limit() != limit {
                return Reply::Error(other_limit(shared.limit()).into());
            }
            let joins = shared.get(owner).is_none();
            if joins && limit != 0 && shared.len() >= limit as usize {
                return Reply::Error(other_limit(limit).into());
            }
        }
        self.tokens.observe(holder.token);
        if key.hold().is_some() {
            key.remove();
        }
        key.put_holder(limit, owner, holder);
        self.expiry_moved(host, at);
        Reply::Ok
    }

    /// `LOCK.DROP key owner`: removes one shared holder exactly (the effect of a release, an
    /// expiry or a force-release of one shared hold).
    pub fn drop_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
    ) -> Reply {
        if key.shared().is_some_and(|s| s.get(owner).is_some()) {
            key.remove_holder(owner);
            self.expiry_moved(host, at);
        }
        Reply::Ok
    }

    /// Records a token that exists elsewhere (RDB, AOF, `LOCK.COUNTER`), so that every later
    /// token is above it.
    pub fn observe_token(&mut self, token: u64) {
        self.tokens.observe(token);
    }

    // --- What the host reports ---------------------------------------------------------------

    /// A key changed behind the engine's back (DEL, expiry, overwrite, RENAME...): if anyone
    /// waits for it, it is served after the current command.
    pub fn key_changed<H: Host<T>>(&mut self, host: &mut H, at: KeyRef<'_>) {
        if self
            .lines
            .get(&at.db)
            .is_some_and(|keys| keys.contains_key(at.name))
        {
            self.value_changed(host, at.to_id());
        }
    }

    /// A user set or removed the key's TTL, or a value arrived (`RESTORE`, `COPY`, `RENAME`,
    /// `MOVE`): a shared key is capped at its latest lease end after the current command
    /// (`PERSIST` or a longer TTL extends no lease).
    pub fn ttl_changed<H: Host<T>>(&mut self, host: &mut H, at: KeyRef<'_>) {
        self.schedule(host, Job::Leases(at.to_id()));
        self.key_changed(host, at);
    }

    /// Every key of `db` (all dbs if `None`) may have changed (FLUSHDB, SWAPDB, end of loading).
    pub fn db_changed<H: Host<T>>(&mut self, host: &mut H, db: Option<i32>) {
        for key in self.keys_with_waiters(db) {
            self.value_changed(host, key);
        }
    }

    /// The value at `key`, which has waiters, may have been replaced by any other: its whole queue
    /// is checked against it, then it is served. Every way a value arrives comes here.
    fn value_changed<H: Host<T>>(&mut self, host: &mut H, key: KeyId) {
        self.arrived.insert(key.clone());
        self.schedule(host, Job::Serve(key));
    }

    /// `holds` holds ended because their lock's TTL ran out (counted for `INFO`).
    pub fn count_expired(&mut self, holds: u64) {
        self.stats.expired += holds;
    }

    /// This server became a replica: every waiter fails with `READONLY`.
    pub fn became_replica<H: Host<T>>(&mut self, host: &mut H) {
        for key in self.keys_with_waiters(None) {
            self.fail_all(host, &key, Cow::Borrowed(READONLY));
        }
    }

    /// A timer the engine armed fired.
    pub fn on_timer<H: Host<T>>(&mut self, host: &mut H, number: u64) {
        let Some((_, due)) = self.timers.remove(&number) else {
            // Stopped after it was already on its way: nothing to do.
            return;
        };
        match due {
            Due::Deadline(key) => {
                if let Some(line) = self.line(&key) {
                    if line.deadline.as_ref().is_some_and(|d| d.number == number) {
                        line.deadline = None;
                    }
                }
                self.run(host, Job::Serve(key));
            }
            Due::WaitEnds {
                client,
                id,
                ends_at,
            } => self.wait_ends(host, client, id, ends_at),
            Due::Jobs => {
                self.jobs_timer = false;
                self.serving.clear();
                for job in std::mem::take(&mut self.jobs) {
                    self.run(host, job);
                }
            }
            Due::Retry => {
                for job in std::mem::take(&mut self.deferred) {
                    self.run(host, job);
                }
            }
        }
    }

    /// A blocked client's answer was delivered: a hold it carried is known to its owner now.
    pub fn replied(&mut self, client: T::Client) {
        if let Some(Ticket::Granted { token, .. }) = self.tickets.remove(&client) {
            self.unconfirmed.remove(&token);
        }
    }

    /// A blocked client hung up: a waiter leaves its queue (and is unblocked, as the host
    /// requires of every blocked client); a client granted the lock before its answer reached
    /// it has the hold revoked.
    pub fn client_gone<H: Host<T>>(&mut self, host: &mut H, client: T::Client) {
        match self.tickets.get(&client) {
            Some(&Ticket::Granted { token, .. }) => {
                self.tickets.remove(&client);
                let lost_all = self.unconfirmed.get_mut(&token).is_some_and(|hold| {
                    hold.answers -= 1;
                    hold.answers == 0
                });
                if lost_all {
                    self.schedule(host, Job::Revoke(token));
                }
            }
            Some(Ticket::Waiting { .. }) => {
                if let Some(waiter) = self.leave_queue(host, client) {
                    self.stop_timer(host, waiter.timeout);
                    host.unblock(client, Outcome::TimedOut);
                }
            }
            None => {}
        }
    }

    // --- What the host asks ------------------------------------------------------------------

    /// Live waiters over all keys.
    pub fn waiters(&self) -> usize {
        self.live
    }

    /// Live waiters queued for `at`.
    pub fn queued(&self, at: KeyRef<'_>) -> usize {
        self.lines
            .get(&at.db)
            .and_then(|keys| keys.get(at.name))
            .map_or(0, |line| line.queue.len())
    }

    /// Lease-expiry and wait-timeout timers armed and not yet fired or stopped (must come back
    /// to 0 when nobody waits, or timers leak).
    pub fn armed_timers(&self) -> usize {
        self.timers
            .values()
            .filter(|(_, due)| matches!(due, Due::Deadline(_) | Due::WaitEnds { .. }))
            .count()
    }

    /// The largest token issued or observed.
    pub fn last_token(&self) -> u64 {
        self.tokens.last()
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    // --- Applying decisions --------------------------------------------------------------------

    /// What an acquire finds: a free key only counts as free if nobody is queued for it.
    fn found<'k, H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &'k H::Key,
        at: KeyRef<'_>,
    ) -> Found<'k> {
        if let Some(hold) = key.hold() {
            return Found::Held(hold);
        }
        let queued = self.queued(at) > 0;
        if queued {
            // A free key with waiters means a wake-up is due; make sure one is scheduled.
            self.schedule(host, Job::Serve(at.to_id()));
        }
        Found::Free { queued }
    }

    /// Applies an acquire-like decision (`LOCK.ACQUIRE`, `LOCK.REENTER`, immediate `LOCK.WAIT`).
    fn apply_take<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
        decision: Decision,
    ) -> Reply {
        self.confirm(key, decision);
        match decision.step() {
            Step::Grant => {
                if self.grant(host, key, owner, ttl_ms).is_none() {
                    return Reply::Error(NO_TOKENS.into());
                }
                key.notify(Event::Acquired);
                self.stats.acquired += 1;
            }
            Step::Refresh { count } => {
                key.update(count, Some(expiry(host.now_ms(), ttl_ms)));
                key.notify(Event::Acquired);
                self.expiry_moved(host, at);
            }
            _ if decision == Decision::Nil => self.stats.contended += 1,
            _ => {}
        }
        reply(key, decision)
    }

    /// A new hold for `owner` with a fresh token; `None` (and the key unchanged) once no token
    /// can be issued.
    fn grant<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        owner: &[u8],
        ttl_ms: u64,
    ) -> Option<u64> {
        let now = host.now_ms();
        let token = self.tokens.issue(&At(now))?;
        key.put(
            Hold::new(owner, token, 1),
            Some(expiry(host.now_ms(), ttl_ms)),
        );
        Some(token)
    }

    /// The owner acts on its hold (re-acquires, re-enters, renews, releases): it knows of it,
    /// so a revoke scheduled for it must not run.
    fn confirm<K: Key>(&mut self, key: &K, decision: Decision) {
        if self.unconfirmed.is_empty() || decision.step() == Step::Nothing {
            return;
        }
        if let Some(hold) = key.hold() {
            self.unconfirmed.remove(&hold.token());
        }
    }

    /// The lock's expiry moved: waiters behind it (if any) need their timer at the new time.
    fn expiry_moved<H: Host<T>>(&mut self, host: &mut H, at: KeyRef<'_>) {
        if self.queued(at) > 0 {
            self.schedule(host, Job::Serve(at.to_id()));
        }
    }

    /// Hands the free lock at `at` to its head waiter, if anyone waits.
    fn hand_off<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key, at: KeyRef<'_>) -> bool {
        // The common case, nobody waiting, costs one lookup and no allocation.
        if self.queued(at) == 0 {
            return false;
        }
        self.grant_pass(host, key, &at.to_id())
    }

    /// The grant pass: grants waiters strictly in queue order while the key allows, in the same
    /// atomic step. An exclusive head only when no hold remains; a shared head, and then every
    /// following shared waiter, while the limit allows. A head whose owner holds the key already
    /// is answered as a re-acquire; one that can never be granted as asked gets the error. A head
    /// that cannot be granted yet blocks everyone behind it. Returns whether anyone was granted.
    fn grant_pass<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key, id: &KeyId) -> bool {
        let mut granted = false;
        loop {
            let next = match self.line(id).and_then(|line| line.queue.front()) {
                None => break,
                Some((_, head)) => next_for(head.mode, &head.owner, key.lock()),
            };
            if matches!(next, Next::Stop) {
                break;
            }
            let Some(waiter) = self.pop_head(host, id) else {
                break;
            };
            self.stop_timer(host, waiter.timeout);
            if let Next::Fail(message) = next {
                host.unblock(waiter.client, Outcome::Error(message));
                continue;
            }
            if let Some(caller) = &waiter.caller {
                if !host.permitted(caller) {
                    host.unblock(waiter.client, Outcome::Error(Cow::Borrowed(NOPERM)));
                    continue;
                }
            }
            let now = host.now_ms();
            let token = match next {
                Next::GrantExclusive => self.grant(host, key, &waiter.owner, waiter.ttl_ms),
                Next::GrantShared(limit) => {
                    self.grant_holder(host, key, limit, &waiter.owner, waiter.ttl_ms)
                }
                Next::Reacquire => Some(refresh(key, &waiter.owner, expiry(now, waiter.ttl_ms))),
                Next::Stop | Next::Fail(_) => None,
            };
            let Some(token) = token else {
                host.unblock(waiter.client, Outcome::Error(Cow::Borrowed(NO_TOKENS)));
                continue;
            };
            self.stats.granted += 1;
            // A new hold is unconfirmed until an answer carrying it is delivered. A re-acquire
            // hands out a hold its owner has already: known if no answer of it is in flight,
            // else one more answer that confirms it if it arrives.
            let in_flight = match next {
                Next::Reacquire => self.unconfirmed.get_mut(&token).map(|hold| {
                    hold.answers += 1;
                }),
                _ => {
                    let hold = Unconfirmed {
                        key: id.clone(),
                        owner: waiter.owner.clone(),
                        answers: 1,
                    };
                    self.unconfirmed.insert(token, hold);
                    Some(())
                }
            };
            if in_flight.is_some() {
                self.tickets
                    .insert(waiter.client, Ticket::Granted { token });
            }
            host.unblock(waiter.client, Outcome::Token(token));
            granted = true;
        }
        if granted {
            // One event per key per operation, however many waiters a pass grants.
            key.notify(Event::Granted);
        }
        if self.queued(id.as_ref()) > 0 {
            if let Some(deadline) = next_deadline(key) {
                self.arm(host, id, deadline);
            }
        }
        granted
    }

    /// Looks at a key with waiters and does what its state calls for: a free lock goes to the
    /// head waiter, a held one gets its expiry timer, another type fails the waiters with
    /// WRONGTYPE, a key whose slot this node no longer serves redirects them.
    fn serve<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        if self.queued(id.as_ref()) == 0 {
            return;
        }
        match host.open(id) {
            Err(OpenError::WrongType) => self.fail_all(host, id, Cow::Borrowed(WRONGTYPE)),
            Err(OpenError::Unavailable) => {}
            Ok(mut key) => {
                if key.shared().is_some() {
                    self.prune(host, &mut key);
                }
                if key.lock().is_none() {
                    if let Some(redirect) = host.redirect(&id.name) {
                        self.fail_all(host, id, Cow::Owned(redirect));
                        return;
                    }
                }
                if self.arrived.remove(id) {
                    self.fail_conflicting(host, &key, id);
                }
                self.grant_pass(host, &mut key, id);
            }
        }
    }

    /// Caps a shared key's TTL at its latest lease end (a shorter TTL stays: it ends every hold).
    fn cap_to_leases<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        let Ok(mut key) = host.open(id) else {
            return;
        };
        let Some(last) = key.shared().and_then(|s| s.last_lease_end()) else {
            return;
        };
        if key.expires_at().is_none_or(|at| at > last) {
            key.cap_expiry(last);
        }
    }

    /// A value that arrived behind the engine's back (`RENAME`, `RESTORE`, `SWAPDB`...) may
    /// conflict with waiters anywhere in the queue, not only at its head: each waiter whose
    /// request can never be granted as asked (another limit, or its owner holding the key in the
    /// other mode) gets the error now. Costs a scan of the queue, only when the key is shared
    /// and its waiters' limit differs, or a waiter's owner holds it.
    fn fail_conflicting<H: Host<T>>(&mut self, host: &mut H, key: &H::Key, id: &KeyId) {
        let Some(shared) = key.shared() else {
            return;
        };
        let Some(line) = self.line(id) else {
            return;
        };
        let limit = shared.limit();
        let failing: Vec<(WaiterId, Cow<'static, str>)> = line
            .queue
            .iter()
            .filter_map(|(wid, w)| {
                let holds = shared.get(&w.owner).is_some();
                match w.mode {
                    Mode::Exclusive if holds => Some((wid, Cow::Borrowed(OTHER_MODE))),
                    Mode::Shared { limit: asked } if asked != limit => {
                        Some((wid, Cow::Owned(other_limit(limit))))
                    }
                    _ => None,
                }
            })
            .collect();
        for (wid, message) in failing {
            let Some(line) = self.line(id) else {
                break;
            };
            let Some(waiter) = line.queue.remove(wid) else {
                continue;
            };
            if matches!(waiter.mode, Mode::Shared { .. }) {
                line.shared_waiters -= 1;
            }
            self.tickets.remove(&waiter.client);
            self.live -= 1;
            self.stop_timer(host, waiter.timeout);
            host.unblock(waiter.client, Outcome::Error(message));
        }
        if let Some(line) = self.line(id) {
            if line.shared_waiters > 0 {
                line.limit = limit;
            }
        }
        self.drop_line_if_empty(host, id);
    }

    /// Ends a hold granted through answers that were all lost (their clients hung up before
    /// delivery), unless an answer or a command of its owner confirmed it since.
    fn revoke<H: Host<T>>(&mut self, host: &mut H, token: u64) {
        if self
            .unconfirmed
            .get(&token)
            .is_none_or(|hold| hold.answers > 0)
        {
            return;
        }
        let Some(Unconfirmed { key: id, owner, .. }) = self.unconfirmed.remove(&token) else {
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
        match key.hold() {
            Some(_) => key.remove(),
            None => key.remove_holder(&owner),
        }
        key.notify(Event::Released);
        self.stats.released += 1;
        self.grant_pass(host, &mut key, &id);
    }

    /// A wait's timer fired: the waiter leaves with nil, unless it was served first. A timer
    /// capped short of the wait's end re-arms for the rest.
    fn wait_ends<H: Host<T>>(
        &mut self,
        host: &mut H,
        client: T::Client,
        id: WaiterId,
        ends_at: i64,
    ) {
        let key = match self.tickets.get(&client) {
            Some(Ticket::Waiting { key, id: waiting }) if *waiting == id => key.clone(),
            _ => return,
        };
        let left = ends_at.saturating_sub(host.now_ms());
        if left > 0 {
            let number = self.start_timer(
                host,
                left,
                Due::WaitEnds {
                    client,
                    id,
                    ends_at,
                },
            );
            match self.line(&key).and_then(|line| line.queue.get_mut(id)) {
                Some(waiter) => waiter.timeout = Some(number),
                None => self.stop_timer(host, Some(number)),
            }
            return;
        }
        // The timer that fired is gone already; the waiter's copy of its number is stale.
        if self.leave_queue(host, client).is_some() {
            self.stats.wait_timeouts += 1;
            host.unblock(client, Outcome::TimedOut);
        }
    }

    // --- Shared holds --------------------------------------------------------------------------

    /// An acquire that involves a shared key or a shared request: mode and limit errors, the
    /// holder's re-acquire or re-entry, a grant when the key allows it and nobody waits.
    #[allow(clippy::too_many_arguments)]
    fn take_shared<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
        mode: Mode,
        kind: Kind,
    ) -> Taken {
        if self.prune(host, key) {
            self.hand_off(host, key, at);
        }
        if let Some(error) = self.conflict(key, at, owner, mode) {
            return Taken::Reply(Reply::Error(error));
        }
        let lease_end = expiry(host.now_ms(), ttl_ms);
        match key.lock() {
            Some(LockRef::Shared(shared)) => {
                let limit = shared.limit();
                if let Some(held) = shared.get(owner) {
                    let count = match kind {
                        Kind::Acquire => held.count,
                        Kind::Reenter => match held.count.checked_add(1) {
                            Some(count) => count,
                            None => return Taken::Reply(Reply::Error(REENTRANCY_LIMIT.into())),
                        },
                    };
                    self.confirm_token(held.token);
                    key.put_holder(
                        limit,
                        owner,
                        Holder {
                            count,
                            lease_end,
                            ..held
                        },
                    );
                    key.notify(Event::Acquired);
                    self.expiry_moved(host, at);
                    return Taken::Reply(Reply::Integer(match kind {
                        Kind::Acquire => held.token,
                        Kind::Reenter => u64::from(count),
                    }));
                }
                let room = limit == 0 || shared.len() < limit as usize;
                if mode == Mode::Exclusive || !room || self.queued(at) > 0 {
                    return Taken::MustWait;
                }
                self.take_holder(host, key, limit, owner, ttl_ms, kind)
            }
            Some(LockRef::Exclusive(_)) => Taken::MustWait,
            None => {
                if self.queued(at) > 0 {
                    // A free key with waiters means a wake-up is due; make sure one is scheduled.
                    self.schedule(host, Job::Serve(at.to_id()));
                    return Taken::MustWait;
                }
                match mode {
                    Mode::Exclusive => {
                        let decision = match kind {
                            Kind::Acquire => Decision::Token(Step::Grant),
                            Kind::Reenter => Decision::Integer(Step::Grant, 1),
                        };
                        Taken::Reply(self.apply_take(host, key, at, owner, ttl_ms, decision))
                    }
                    Mode::Shared { limit } => {
                        self.take_holder(host, key, limit, owner, ttl_ms, kind)
                    }
                }
            }
        }
    }

    /// A new shared hold for a command.
    fn take_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        limit: u32,
        owner: &[u8],
        ttl_ms: u64,
        kind: Kind,
    ) -> Taken {
        let Some(token) = self.grant_holder(host, key, limit, owner, ttl_ms) else {
            return Taken::Reply(Reply::Error(NO_TOKENS.into()));
        };
        key.notify(Event::Acquired);
        self.stats.acquired += 1;
        Taken::Reply(Reply::Integer(match kind {
            Kind::Acquire => token,
            Kind::Reenter => 1,
        }))
    }

    /// A new shared hold for `owner` with a fresh token; `None` once no token can be issued.
    fn grant_holder<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        limit: u32,
        owner: &[u8],
        ttl_ms: u64,
    ) -> Option<u64> {
        let now = host.now_ms();
        let token = self.tokens.issue(&At(now))?;
        let holder = Holder {
            token,
            count: 1,
            lease_end: expiry(now, ttl_ms),
        };
        key.put_holder(limit, owner, holder);
        Some(token)
    }

    /// Why a request can never be granted as asked: its owner holds the key in the other mode,
    /// or it is shared with a limit other than the key's.
    fn conflict<K: Key>(
        &self,
        key: &K,
        at: KeyRef<'_>,
        owner: &[u8],
        mode: Mode,
    ) -> Option<Cow<'static, str>> {
        let other_mode = match key.lock() {
            Some(LockRef::Exclusive(hold)) => hold.is_held_by(owner) && mode != Mode::Exclusive,
            Some(LockRef::Shared(shared)) => shared.get(owner).is_some() && mode == Mode::Exclusive,
            None => false,
        };
        if other_mode {
            return Some(Cow::Borrowed(OTHER_MODE));
        }
        let Mode::Shared { limit } = mode else {
            return None;
        };
        let key_limit = match key.shared() {
            Some(shared) => Some(shared.limit()),
            None => self
                .lines
                .get(&at.db)
                .and_then(|keys| keys.get(at.name))
                .filter(|line| line.shared_waiters > 0)
                .map(|line| line.limit),
        };
        key_limit
            .filter(|l| *l != limit)
            .map(|l| Cow::Owned(other_limit(l)))
    }

    /// `LOCK.RELEASE` of a shared hold.
    fn release_shared<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
    ) -> Reply {
        let pruned = self.prune(host, key);
        let held = key.shared().and_then(|s| Some((s.limit(), s.get(owner)?)));
        let reply = match held {
            None => Reply::Nil,
            Some((limit, held)) => {
                self.confirm_token(held.token);
                if held.count > 1 {
                    let count = held.count - 1;
                    key.put_holder(limit, owner, Holder { count, ..held });
                    Reply::Integer(u64::from(count))
                } else {
                    key.remove_holder(owner);
                    key.notify(Event::Released);
                    self.stats.released += 1;
                    self.hand_off(host, key, at);
                    return Reply::Integer(0);
                }
            }
        };
        if pruned {
            self.hand_off(host, key, at);
        }
        reply
    }

    /// `LOCK.RENEW` of a shared hold.
    fn renew_shared<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &mut H::Key,
        at: KeyRef<'_>,
        owner: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        if self.prune(host, key) {
            self.hand_off(host, key, at);
        }
        let Some((limit, held)) = key.shared().and_then(|s| Some((s.limit(), s.get(owner)?)))
        else {
            return Reply::Nil;
        };
        self.confirm_token(held.token);
        let lease_end = expiry(host.now_ms(), ttl_ms);
        key.put_holder(limit, owner, Holder { lease_end, ..held });
        key.notify(Event::Renewed);
        self.stats.renewed += 1;
        self.expiry_moved(host, at);
        Reply::Integer(held.token)
    }

    /// Ends every shared lease that has lapsed (they count for nothing already); returns
    /// whether any did, so that the queue is served.
    fn prune<H: Host<T>>(&mut self, host: &mut H, key: &mut H::Key) -> bool {
        let now = host.now_ms();
        let mut ended = 0u64;
        loop {
            let lapsed = key
                .shared()
                .and_then(|s| s.first_lease_end())
                .filter(|(end, _)| *end < now)
                .map(|(_, owner)| owner.to_vec());
            let Some(owner) = lapsed else {
                break;
            };
            key.remove_holder(&owner);
            ended += 1;
        }
        if ended > 0 {
            if key.lock().is_some() {
                key.notify(Event::Expired);
            }
            self.stats.expired += ended;
        }
        // A user's longer TTL extends no lease.
        if let Some(last) = key.shared().and_then(|s| s.last_lease_end()) {
            if key.expires_at().is_none_or(|at| at > last) {
                key.cap_expiry(last);
            }
        }
        ended > 0
    }

    /// A revoke scheduled for the hold with `token` must not run: its owner acted on it.
    fn confirm_token(&mut self, token: u64) {
        if !self.unconfirmed.is_empty() {
            self.unconfirmed.remove(&token);
        }
    }

    // --- Queues --------------------------------------------------------------------------------

    fn line(&mut self, key: &KeyId) -> Option<&mut Line<T>> {
        self.lines.get_mut(&key.db)?.get_mut(&key.name)
    }

    fn line_or_new(&mut self, key: &KeyId) -> &mut Line<T> {
        self.lines
            .entry(key.db)
            .or_default()
            .entry(key.name.clone())
            .or_default()
    }

    /// Removes an empty line and stops its deadline timer.
    fn drop_line_if_empty<H: Host<T>>(&mut self, host: &mut H, key: &KeyId) {
        let Some(keys) = self.lines.get_mut(&key.db) else {
            return;
        };
        if !keys
            .get(&key.name)
            .is_some_and(|line| line.queue.is_empty())
        {
            return;
        }
        let line = keys.remove(&key.name);
        if keys.is_empty() {
            self.lines.remove(&key.db);
        }
        self.arrived.remove(key);
        if let Some(deadline) = line.and_then(|line| line.deadline) {
            self.stop_timer(host, Some(deadline.number));
        }
    }

    /// Removes the head waiter of `key`, dropping the line once it is empty.
    fn pop_head<H: Host<T>>(&mut self, host: &mut H, key: &KeyId) -> Option<Waiter<T>> {
        let waiter = self.line(key).and_then(|line| {
            let (_, waiter) = line.queue.pop()?;
            if matches!(waiter.mode, Mode::Shared { .. }) {
                line.shared_waiters -= 1;
            }
            Some(waiter)
        });
        if let Some(waiter) = &waiter {
            self.tickets.remove(&waiter.client);
            self.live -= 1;
        }
        self.drop_line_if_empty(host, key);
        waiter
    }

    /// Takes a waiting client out of its queue; the caller unblocks it exactly once.
    fn leave_queue<H: Host<T>>(&mut self, host: &mut H, client: T::Client) -> Option<Waiter<T>> {
        let Some(Ticket::Waiting { key, id }) = self.tickets.remove(&client) else {
            return None;
        };
        let mut was_head = false;
        let waiter = self.line(&key).and_then(|line| {
            was_head = line.queue.front().is_some_and(|(head, _)| head == id);
            let waiter = line.queue.remove(id)?;
            if matches!(waiter.mode, Mode::Shared { .. }) {
                line.shared_waiters -= 1;
            }
            Some(waiter)
        });
        if waiter.is_some() {
            self.live -= 1;
        }
        self.drop_line_if_empty(host, &key);
        // The head leaving may let those behind it in (readers behind a writer that gave up).
        if was_head && self.queued(key.as_ref()) > 0 {
            self.schedule(host, Job::Serve(key));
        }
        waiter
    }

    /// Fails every waiter of `key` with the error `message`.
    fn fail_all<H: Host<T>>(&mut self, host: &mut H, key: &KeyId, message: Cow<'static, str>) {
        let Some(keys) = self.lines.get_mut(&key.db) else {
            return;
        };
        let Some(mut line) = keys.remove(&key.name) else {
            return;
        };
        if keys.is_empty() {
            self.lines.remove(&key.db);
        }
        self.arrived.remove(key);
        if let Some(deadline) = line.deadline.take() {
            self.stop_timer(host, Some(deadline.number));
        }
        for (_, waiter) in line.queue.drain() {
            self.tickets.remove(&waiter.client);
            self.live -= 1;
            self.stop_timer(host, waiter.timeout);
            host.unblock(waiter.client, Outcome::Error(message.clone()));
        }
    }

    fn keys_with_waiters(&self, db: Option<i32>) -> Vec<KeyId> {
        self.lines
            .iter()
            .filter(|(d, _)| db.is_none_or(|db| db == **d))
            .flat_map(|(d, keys)| {
                keys.keys().map(|name| KeyId {
                    db: *d,
                    name: name.clone(),
                })
            })
            .collect()
    }

    // --- Timers and jobs -----------------------------------------------------------------------

    fn start_timer<H: Host<T>>(&mut self, host: &mut H, delay_ms: i64, due: Due<T::Client>) -> u64 {
        self.next_timer += 1;
        let number = self.next_timer;
        let timer = host.start_timer(delay_ms.clamp(0, MAX_TIMER_MS), number);
        self.timers.insert(number, (timer, due));
        number
    }

    fn stop_timer<H: Host<T>>(&mut self, host: &mut H, number: Option<u64>) {
        if let Some((timer, _)) = number.and_then(|n| self.timers.remove(&n)) {
            host.stop_timer(timer);
        }
    }

    /// Arms (or moves earlier) the expiry timer of `key`'s lock to fire just after `expiry`, or
    /// after `MAX_TIMER_MS` for a lock that expires later than that (the timer then re-arms).
    fn arm<H: Host<T>>(&mut self, host: &mut H, key: &KeyId, expiry: i64) {
        let now = host.now_ms();
        // A key counts as expired once now > its expiry, hence the extra millisecond.
        let delay = expiry
            .saturating_add(1)
            .saturating_sub(now)
            .clamp(0, MAX_TIMER_MS);
        let fires_at = now.saturating_add(delay);
        let armed_in_time = match self.line(key) {
            None => return,
            Some(line) => line.deadline.as_ref().is_some_and(|d| d.at <= fires_at),
        };
        if armed_in_time {
            return;
        }
        let number = self.start_timer(host, delay, Due::Deadline(key.clone()));
        let old = self.line(key).and_then(|line| {
            line.deadline
                .replace(Armed {
                    number,
                    at: fires_at,
                })
                .map(|old| old.number)
        });
        self.stop_timer(host, old);
    }

    /// Schedules `job` to run after the current command or notification.
    fn schedule<H: Host<T>>(&mut self, host: &mut H, job: Job) {
        let fresh = match &job {
            Job::Serve(key) => self.serving.insert(key.clone()),
            Job::Revoke(..) | Job::Leases(..) => true,
        };
        if fresh {
            self.jobs.push(job);
        }
        if !std::mem::replace(&mut self.jobs_timer, true) {
            self.start_timer(host, 0, Due::Jobs);
        }
    }

    /// Runs a job if the server's state lets the engine write now; otherwise defers it
    /// (paused, loading) or drops it (a replica fails its waiters instead).
    fn run<H: Host<T>>(&mut self, host: &mut H, job: Job) {
        match host.state() {
            State::Master => match job {
                Job::Serve(key) => self.serve(host, &key),
                Job::Revoke(token) => self.revoke(host, token),
                Job::Leases(key) => self.cap_to_leases(host, &key),
            },
            // While writes are paused Redis does not expire keys either: a key past its expiry
            // is still there, and writing it would corrupt the db. Hand-offs wait for the pause.
            State::Paused | State::Loading => {
                self.deferred.push(job);
                if self.deferred.len() == 1 {
                    self.start_timer(host, RETRY_MS, Due::Retry);
                }
            }
            State::Replica => match job {
                Job::Serve(key) => self.fail_all(host, &key, Cow::Borrowed(READONLY)),
                // The master decides now; nothing is revoked here.
                Job::Revoke(token) => {
                    self.unconfirmed.remove(&token);
                }
                // The master caps its keys; the cap reaches replicas as PEXPIREAT.
                Job::Leases(_) => {}
            },
        }
    }
}

/// What the grant pass does with a head waiter of `mode` and `owner`, given the key's lock.
fn next_for(mode: Mode, owner: &[u8], lock: Option<LockRef<'_>>) -> Next {
    match (mode, lock) {
        (Mode::Exclusive, None) => Next::GrantExclusive,
        (Mode::Exclusive, Some(LockRef::Exclusive(hold))) if hold.is_held_by(owner) => {
            Next::Reacquire
        }
        (Mode::Exclusive, Some(LockRef::Shared(shared))) if shared.get(owner).is_some() => {
            Next::Fail(Cow::Borrowed(OTHER_MODE))
        }
        (Mode::Exclusive, Some(_)) => Next::Stop,
        (Mode::Shared { .. }, Some(LockRef::Exclusive(hold))) if hold.is_held_by(owner) => {
            Next::Fail(Cow::Borrowed(OTHER_MODE))
        }
        (Mode::Shared { .. }, Some(LockRef::Exclusive(_))) => Next::Stop,
        (Mode::Shared { limit }, Some(LockRef::Shared(shared))) if shared.limit() != limit => {
            Next::Fail(Cow::Owned(other_limit(shared.limit())))
        }
        (Mode::Shared { .. }, Some(LockRef::Shared(shared))) if shared.get(owner).is_some() => {
            Next::Reacquire
        }
        (Mode::Shared { limit }, Some(LockRef::Shared(shared))) => {
            if limit == 0 || shared.len() < limit as usize {
                Next::GrantShared(limit)
            } else {
                Next::Stop
            }
        }
        (Mode::Shared { limit }, None) => Next::GrantShared(limit),
    }
}

/// Refreshes `owner`'s existing hold to end at `lease_end` (a waiter whose owner holds the key
/// when its turn comes); returns its token.
fn refresh<K: Key>(key: &mut K, owner: &[u8], lease_end: i64) -> u64 {
    match key.lock() {
        Some(LockRef::Exclusive(hold)) => {
            let (token, count) = (hold.token(), hold.count());
            key.update(count, Some(lease_end));
            token
        }
        Some(LockRef::Shared(shared)) => match shared.get(owner) {
            Some(held) => {
                let limit = shared.limit();
                key.put_holder(limit, owner, Holder { lease_end, ..held });
                held.token
            }
            None => 0,
        },
        None => 0,
    }
}

/// When the key's next hold ends (the lock's expiry, or a shared key's first lease end).
fn next_deadline<K: Key>(key: &K) -> Option<i64> {
    match key.lock()? {
        LockRef::Exclusive(_) => key.expires_at(),
        LockRef::Shared(shared) => shared.first_lease_end().map(|(end, _)| end),
    }
}

/// What a command other than an acquire finds (waiters do not matter to it).
fn found_here<K: Key>(key: &K) -> Found<'_> {
    match key.hold() {
        Some(hold) => Found::Held(hold),
        None => Found::Free { queued: false },
    }
}

fn expiry(now: i64, ttl_ms: u64) -> i64 {
    now.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

fn reply<K: Key>(key: &K, decision: Decision) -> Reply {
    match decision {
        Decision::Token(_) => match key.hold() {
            Some(hold) => Reply::Integer(hold.token()),
            None => Reply::Nil,
        },
        Decision::Integer(_, n) => Reply::Integer(n),
        Decision::Nil => Reply::Nil,
        Decision::ReentrancyLimit => Reply::Error(REENTRANCY_LIMIT.into()),
    }
}
