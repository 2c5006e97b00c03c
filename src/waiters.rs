//! Clients blocked in `LOCK.WAIT`, and the FIFO queue of each key: the one place that uses
//! Redis's blocked-client API.
//!
//! Why not `RedisModule_BlockClientOnKeys`: on Redis 7.0 it does not wake clients when the key
//! is deleted, and every signal re-runs every waiter's callback (O(N) per release). Here each
//! key has its own queue; ending a lock pops the head and grants it in the same atomic step
//! (O(1)), and the other ways a lock ends (DEL, expiry, FLUSHALL...) schedule a `serve` of the
//! key on a 0 ms timer, because Redis 7.0 forbids writes inside keyspace notifications.
//!
//! A key whose lock has waiters also has a timer at the lock's expiry, so the head waiter gets
//! the lock within a few ms of the TTL running out instead of whenever Redis gets to the key.
//!
//! Borrowing rule: the registry is borrowed only inside the small functions below and never
//! across a Redis call that can call back into the module (opening or writing keys).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::raw::{c_int, c_void};
use std::rc::Rc;

use redis_module::raw;

use crate::acl::{self, Caller};
use crate::lock::queue::WaiterId;
use crate::lock::Queue;
use crate::server::{self, State};
use crate::store::{self, event, LockKey, OwnedString, WrongType};
use crate::{cluster, rm, stats};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NO_TOKENS: &str = "ERR fencing token space exhausted";

/// Longest delay of a module timer: 30 minutes. Redis keeps every module timer behind one
/// event-loop timer whose handler returns the period to the next module timer in ms, and
/// Redis 7.0 multiplies that by 1000 in an `int`: a next timer more than about 35 minutes out
/// wraps into the past, and the event loop spins at 100 % CPU (a lock expiring in the far future,
/// `PEXPIREAT k 2^62`, or a `LOCK.WAIT` with a timeout of hours). A longer delay is covered by a
/// chain of timers: each one that fires early re-arms the next.
const MAX_TIMER_MS: i64 = 30 * 60 * 1000;

/// How often deferred work looks again while writes are paused or the server is loading.
const RETRY_MS: i64 = 10;

/// What a blocked client is answered. Boxed as the blocked client's private data; Redis frees
/// it (`free_outcome`) after the reply, or when the client is gone before it.
enum Outcome {
    Token(u64),
    TimedOut,
    Error(Cow<'static, str>),
}

/// A key in a db.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct KeyId {
    db: c_int,
    name: Rc<[u8]>,
}

struct Waiter {
    client: *mut raw::RedisModuleBlockedClient,
    owner: Box<[u8]>,
    ttl_ms: u64,
    /// Who asked, to re-check their permissions when the lock is handed over.
    caller: Option<Caller>,
    /// The module timer that ends the wait at timeout_ms (none for timeout 0).
    timeout: Option<raw::RedisModuleTimerID>,
}

/// What a wait's timeout timer carries: which client, in which place of which queue.
struct WaitTimeout {
    client: usize,
    id: WaiterId,
    /// When the wait ends (Unix ms); a timer that fires earlier (capped) re-arms.
    ends_at: i64,
}

/// One key's queue and the timer armed at its lock's expiry.
#[derive(Default)]
struct Line {
    queue: Queue<Waiter>,
    timer: Option<Armed>,
}

struct Armed {
    id: raw::RedisModuleTimerID,
    /// When the timer fires (Unix ms): the lock's expiry, or earlier for a distant one.
    at: i64,
}

/// Where a blocked client stands.
enum Ticket {
    Waiting {
        key: KeyId,
        id: WaiterId,
    },
    /// Granted; the reply is on its way. If the client disconnects before it is delivered, the
    /// lock it never learned of is revoked.
    Granted {
        key: KeyId,
        token: u64,
    },
}

/// Deferred work, run on a 0 ms timer (later while the server may not write).
enum Job {
    Serve(KeyId),
    Revoke(KeyId, u64),
}

#[derive(Default)]
struct Registry {
    /// db -> key -> line.
    dbs: HashMap<c_int, HashMap<Rc<[u8]>, Line>>,
    /// Blocked-client handle -> ticket.
    tickets: HashMap<usize, Ticket>,
    next_id: WaiterId,
    live: usize,
    jobs: Vec<Job>,
    /// Keys already in `jobs` as `Job::Serve`, so a burst of events serves each key once.
    serving: HashSet<KeyId>,
    jobs_timer: bool,
    /// Jobs put off because writes were paused or the server was loading, retried every
    /// `RETRY_MS` until it may write again.
    deferred: Vec<Job>,
    /// Wait-timeout and expiry timers armed and not yet fired or stopped (`INFO`: a number that
    /// must come back to 0 when nobody waits, or timers leak).
    timers: usize,
}

impl Registry {
    fn line(&mut self, key: &KeyId) -> Option<&mut Line> {
        self.dbs.get_mut(&key.db)?.get_mut(&key.name)
    }

    /// Removes an empty line; returns its timer, which the caller stops.
    fn drop_line_if_empty(&mut self, key: &KeyId) -> Option<Armed> {
        let lines = self.dbs.get_mut(&key.db)?;
        if !lines.get(&key.name)?.queue.is_empty() {
            return None;
        }
        let line = lines.remove(&key.name)?;
        if lines.is_empty() {
            self.dbs.remove(&key.db);
        }
        line.timer
    }
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with<T: Default>(f: impl FnOnce(&mut Registry) -> T) -> T {
    REGISTRY.with(|cell| match cell.try_borrow_mut() {
        Ok(mut registry) => f(&mut registry),
        // Only reachable if a Redis call re-entered us while borrowed: skip rather than panic.
        Err(_) => T::default(),
    })
}

/// Live waiters over all keys.
pub fn live_total() -> usize {
    with(|r| r.live)
}

/// Wait-timeout and expiry timers currently armed.
pub fn armed_timers() -> usize {
    with(|r| r.timers)
}

/// Live waiters queued for `name` in `db`.
pub fn queued(db: c_int, name: &[u8]) -> usize {
    with(|r| {
        r.dbs
            .get(&db)
            .and_then(|lines| lines.get(name))
            .map_or(0, |line| line.queue.len())
    })
}

/// Whether any key has waiters (the fast path of every keyspace notification).
pub fn any() -> bool {
    with(|r| !r.dbs.is_empty())
}

/// Blocks the calling client in the queue of `name` until it is granted the lock or
/// `timeout_ms` passes (0: no limit). `expires_at` is the current lock's expiry, if any.
pub fn block(
    ctx: *mut raw::RedisModuleCtx,
    argv: &[*mut raw::RedisModuleString],
    owner: &[u8],
    ttl_ms: u64,
    timeout_ms: u64,
    expires_at: Option<i64>,
) {
    // Neither a Redis timeout nor a timeout callback: the module times waits out itself, on
    // its own timers, decided in the same thread as every grant. With a timeout callback,
    // Redis's own paths can reach a client the module already granted (its timeout, or
    // `CLIENT UNBLOCK id TIMEOUT` in the same event-loop turn as the grant) and then answer it
    // nothing at all (7.0) or a nil while the lock is held in its name (8.x). Without one,
    // `CLIENT UNBLOCK` answers 0 for a `LOCK.WAIT` client and leaves it waiting.
    let client = unsafe {
        rm!(RedisModule_BlockClient(
            ctx,
            Some(on_reply),
            None,
            Some(free_outcome),
            0
        ))
    };
    if client.is_null() {
        return;
    }
    unsafe {
        rm!(RedisModule_SetDisconnectCallback(
            client,
            Some(on_disconnect)
        ))
    };
    let key = KeyId {
        db: store::selected_db(ctx),
        name: Rc::from(argv.get(1).map_or(&[][..], |k| store::string_bytes(*k))),
    };
    let id = with(|r| {
        r.next_id += 1;
        r.next_id
    });
    let timeout = (timeout_ms > 0).then(|| {
        let timeout_ms = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
        let data = Box::new(WaitTimeout {
            client: client as usize,
            id,
            ends_at: store::now_ms().saturating_add(timeout_ms),
        });
        start_timer(ctx, timeout_ms, on_wait_timeout, data)
    });
    let caller = Caller::of_running_command(ctx, argv);
    with(|r| {
        let line = r
            .dbs
            .entry(key.db)
            .or_default()
            .entry(key.name.clone())
            .or_default();
        line.queue.push(
            id,
            Waiter {
                client,
                owner: owner.into(),
                ttl_ms,
                caller,
                timeout,
            },
        );
        r.tickets.insert(
            client as usize,
            Ticket::Waiting {
                key: key.clone(),
                id,
            },
        );
        r.live += 1;
    });
    if let Some(at) = expires_at {
        arm(ctx, &key, at);
    } else {
        // Free but queued (a wake-up is pending), or held without a TTL: make sure the key is
        // looked at again.
        schedule(ctx, Job::Serve(key));
    }
}

/// Hands the free lock at `key` to the first waiter: a new hold with a new token and the
/// waiter's ttl, in the same atomic step. Returns whether someone was granted.
pub fn hand_off(ctx: *mut raw::RedisModuleCtx, key: &mut LockKey, db: c_int, name: &[u8]) -> bool {
    // The common case, nobody waiting, costs one lookup and no allocation.
    if queued(db, name) == 0 {
        return false;
    }
    let id = KeyId {
        db,
        name: Rc::from(name),
    };
    hand_off_to_head(ctx, key, &id)
}

fn hand_off_to_head(ctx: *mut raw::RedisModuleCtx, key: &mut LockKey, id: &KeyId) -> bool {
    loop {
        let Some(waiter) = pop_head(ctx, id) else {
            return false;
        };
        cancel_timer::<WaitTimeout>(ctx, waiter.timeout);
        if waiter.caller.as_ref().is_some_and(|c| !c.still_permitted()) {
            unblock(waiter.client, Outcome::Error(Cow::Borrowed(acl::NOPERM)));
            continue;
        }
        let Some(token) = key.grant(&waiter.owner, waiter.ttl_ms) else {
            unblock(waiter.client, Outcome::Error(Cow::Borrowed(NO_TOKENS)));
            continue;
        };
        key.notify(event::GRANTED);
        stats::GRANTED.bump();
        with(|r| {
            r.tickets.insert(
                waiter.client as usize,
                Ticket::Granted {
                    key: id.clone(),
                    token,
                },
            )
        });
        unblock(waiter.client, Outcome::Token(token));
        if queued(id.db, &id.name) > 0 {
            if let Some(at) = key.expires_at() {
                arm(ctx, id, at);
            }
        }
        return true;
    }
}

/// Removes the head waiter of `key`, dropping the line (and its timer) once it is empty.
fn pop_head(ctx: *mut raw::RedisModuleCtx, key: &KeyId) -> Option<Waiter> {
    let (waiter, timer) = with(|r| {
        let waiter = r
            .line(key)
            .and_then(|line| line.queue.pop())
            .map(|(_, w)| w);
        if let Some(w) = &waiter {
            r.tickets.remove(&(w.client as usize));
            r.live -= 1;
        }
        (waiter, r.drop_line_if_empty(key))
    });
    stop_timer(ctx, timer);
    waiter
}

/// Unblocks `client` with `outcome`, which `on_reply` answers. Exactly once per blocked client.
fn unblock(client: *mut raw::RedisModuleBlockedClient, outcome: Outcome) {
    let data = Box::into_raw(Box::new(outcome));
    unsafe { rm!(RedisModule_UnblockClient(client, data.cast())) };
}

/// Fails every waiter of `key` with the error `message`.
fn fail_all(ctx: *mut raw::RedisModuleCtx, key: &KeyId, message: Cow<'static, str>) {
    let (waiters, timer) = with(|r| {
        let Some(lines) = r.dbs.get_mut(&key.db) else {
            return (Vec::new(), None);
        };
        let Some(mut line) = lines.remove(&key.name) else {
            return (Vec::new(), None);
        };
        if lines.is_empty() {
            r.dbs.remove(&key.db);
        }
        let waiters: Vec<_> = line.queue.drain().map(|(_, w)| w).collect();
        for w in &waiters {
            r.tickets.remove(&(w.client as usize));
        }
        r.live -= waiters.len();
        (waiters, line.timer.take())
    });
    stop_timer(ctx, timer);
    for waiter in waiters {
        cancel_timer::<WaitTimeout>(ctx, waiter.timeout);
        unblock(waiter.client, Outcome::Error(message.clone()));
    }
}

/// Fails every waiter on the server with a READONLY error (this server became a replica).
pub fn fail_everyone_readonly(ctx: *mut raw::RedisModuleCtx) {
    for key in all_keys(None) {
        fail_all(ctx, &key, Cow::Borrowed(server::READONLY));
    }
}

fn all_keys(db: Option<c_int>) -> Vec<KeyId> {
    with(|r| {
        r.dbs
            .iter()
            .filter(|(d, _)| db.is_none_or(|db| db == **d))
            .flat_map(|(d, lines)| {
                lines.keys().map(|name| KeyId {
                    db: *d,
                    name: name.clone(),
                })
            })
            .collect()
    })
}

/// Arms (or moves earlier) the expiry timer of `key`'s lock to fire just after `at`, or after
/// `MAX_TIMER_MS` for a lock that expires later than that (the timer then re-arms).
fn arm(ctx: *mut raw::RedisModuleCtx, key: &KeyId, at: i64) {
    let now = store::now_ms();
    // Redis considers a key expired once now > at, hence the extra millisecond.
    let delay = at
        .saturating_add(1)
        .saturating_sub(now)
        .clamp(0, MAX_TIMER_MS);
    let fires_at = now.saturating_add(delay);
    let armed_in_time = with(|r| {
        r.line(key)
            .is_none_or(|line| line.timer.as_ref().is_some_and(|t| t.at <= fires_at))
    });
    if armed_in_time {
        return;
    }
    let id = start_timer(ctx, delay, on_deadline, Box::new(key.clone()));
    let old = with(|r| match r.line(key) {
        Some(line) => line.timer.replace(Armed { id, at: fires_at }),
        // Unreachable (nothing between the two borrows can drop the line); stop the new timer.
        None => Some(Armed { id, at: fires_at }),
    });
    stop_timer(ctx, old);
}

/// Starts a module timer carrying `data`, `delay_ms` from now (clamped to 0..=MAX_TIMER_MS).
fn start_timer<T>(
    ctx: *mut raw::RedisModuleCtx,
    delay_ms: i64,
    callback: extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void),
    data: Box<T>,
) -> raw::RedisModuleTimerID {
    let data = Box::into_raw(data).cast::<c_void>();
    let delay = delay_ms.clamp(0, MAX_TIMER_MS);
    with(|r| r.timers += 1);
    unsafe { rm!(RedisModule_CreateTimer(ctx, delay, Some(callback), data)) }
}

/// A timer from `start_timer` fired (Redis forgets it by itself).
fn timer_fired() {
    with(|r| r.timers = r.timers.saturating_sub(1));
}

fn stop_timer(ctx: *mut raw::RedisModuleCtx, timer: Option<Armed>) {
    cancel_timer::<KeyId>(ctx, timer.map(|t| t.id));
}

/// Stops a timer whose data is a `Box<T>`, and frees the data.
fn cancel_timer<T>(ctx: *mut raw::RedisModuleCtx, timer: Option<raw::RedisModuleTimerID>) {
    let Some(timer) = timer else {
        return;
    };
    let mut data: *mut c_void = std::ptr::null_mut();
    let stopped = unsafe { rm!(RedisModule_StopTimer(ctx, timer, &mut data)) };
    if stopped == raw::REDISMODULE_OK as c_int {
        timer_fired();
        if !data.is_null() {
            drop(unsafe { Box::from_raw(data.cast::<T>()) });
        }
    }
}

/// A wait's timeout_ms passed: it leaves the queue and gets nil, unless it was granted first.
/// A timer capped short of the wait's end re-arms for the rest.
extern "C" fn on_wait_timeout(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    crate::guard((), || {
        if data.is_null() {
            return;
        }
        timer_fired();
        let due = unsafe { Box::from_raw(data.cast::<WaitTimeout>()) };
        let client = due.client as *mut raw::RedisModuleBlockedClient;
        let waiting_at = with(|r| match r.tickets.get(&due.client) {
            Some(Ticket::Waiting { key, id }) if *id == due.id => Some(key.clone()),
            _ => None,
        });
        let Some(key) = waiting_at else {
            return;
        };
        let left = due.ends_at.saturating_sub(store::now_ms());
        if left > 0 {
            let id = due.id;
            let timer = start_timer(ctx, left, on_wait_timeout, due);
            let stale = with(
                |r| match r.line(&key).and_then(|line| line.queue.get_mut(id)) {
                    Some(waiter) => {
                        waiter.timeout = Some(timer);
                        false
                    }
                    None => true,
                },
            );
            if stale {
                cancel_timer::<WaitTimeout>(ctx, Some(timer));
            }
            return;
        }
        // The firing timer is gone already; the waiter's copy of its id must not be stopped.
        if leave_queue(ctx, client).is_some() {
            stats::WAIT_TIMEOUTS.bump();
            unblock(client, Outcome::TimedOut);
        }
    })
}

extern "C" fn on_deadline(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    crate::guard((), || {
        if data.is_null() {
            return;
        }
        timer_fired();
        let key = unsafe { Box::from_raw(data.cast::<KeyId>()) };
        with(|r| {
            if let Some(line) = r.line(&key) {
                line.timer = None;
            }
        });
        run(ctx, Job::Serve(*key));
    })
}

/// Schedules a look at `name` in `db` after the current command or notification, if waiters
/// are queued there.
pub fn wake(ctx: *mut raw::RedisModuleCtx, db: c_int, name: &[u8]) {
    let queued_here = with(|r| r.dbs.get(&db).is_some_and(|lines| lines.contains_key(name)));
    if queued_here {
        let key = KeyId {
            db,
            name: Rc::from(name),
        };
        schedule(ctx, Job::Serve(key));
    }
}

/// Schedules a look at every key with waiters in `db` (all dbs if `None`).
pub fn wake_db(ctx: *mut raw::RedisModuleCtx, db: Option<c_int>) {
    for key in all_keys(db) {
        schedule(ctx, Job::Serve(key));
    }
}

fn schedule(ctx: *mut raw::RedisModuleCtx, job: Job) {
    let start_timer = with(|r| {
        let fresh = match &job {
            Job::Serve(key) => r.serving.insert(key.clone()),
            Job::Revoke(..) => true,
        };
        if fresh {
            r.jobs.push(job);
        }
        !std::mem::replace(&mut r.jobs_timer, true)
    });
    if start_timer {
        unsafe {
            rm!(RedisModule_CreateTimer(
                ctx,
                0,
                Some(run_jobs),
                std::ptr::null_mut()
            ))
        };
    }
}

extern "C" fn run_jobs(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    crate::guard((), || {
        let jobs = with(|r| {
            r.jobs_timer = false;
            r.serving.clear();
            std::mem::take(&mut r.jobs)
        });
        for job in jobs {
            run(ctx, job);
        }
    })
}

/// Runs a job if the server's state lets the module write now; otherwise defers it (paused,
/// loading) or drops it (a replica fails its waiters instead).
fn run(ctx: *mut raw::RedisModuleCtx, job: Job) {
    match server::state(ctx) {
        State::Master => match job {
            Job::Serve(key) => serve(ctx, &key),
            Job::Revoke(key, token) => revoke(ctx, &key, token),
        },
        // While writes are paused Redis does not expire keys either: a key past its expiry is
        // still there, and writing it would corrupt the db. Hand-offs wait for the pause to end.
        State::Paused | State::Loading => defer(ctx, job),
        State::Replica => {
            if let Job::Serve(key) = job {
                fail_all(ctx, &key, Cow::Borrowed(server::READONLY));
            }
        }
    }
}

fn defer(ctx: *mut raw::RedisModuleCtx, job: Job) {
    let start_timer = with(|r| {
        r.deferred.push(job);
        r.deferred.len() == 1
    });
    if start_timer {
        unsafe {
            rm!(RedisModule_CreateTimer(
                ctx,
                RETRY_MS,
                Some(retry_deferred),
                std::ptr::null_mut()
            ))
        };
    }
}

extern "C" fn retry_deferred(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    crate::guard((), || {
        for job in with(|r| std::mem::take(&mut r.deferred)) {
            run(ctx, job);
        }
    })
}

/// Looks at a key with waiters and does what its state calls for: a free lock goes to the head
/// waiter, a held one gets its expiry timer, another type fails the waiters with WRONGTYPE, a
/// key whose slot this node no longer serves redirects them.
fn serve(ctx: *mut raw::RedisModuleCtx, key: &KeyId) {
    if queued(key.db, &key.name) == 0 {
        return;
    }
    with_key(ctx, key, |opened| match opened {
        Err(WrongType) => fail_all(ctx, key, Cow::Borrowed(WRONGTYPE)),
        Ok(mut lock) => {
            if lock.hold().is_some() {
                if let Some(at) = lock.expires_at() {
                    arm(ctx, key, at);
                }
            } else if let Some(redirect) = cluster::redirect(ctx, &key.name) {
                fail_all(ctx, key, Cow::Owned(redirect));
            } else {
                hand_off_to_head(ctx, &mut lock, key);
            }
        }
    });
}

/// Ends a hold granted to a client that disconnected before it learned of it.
fn revoke(ctx: *mut raw::RedisModuleCtx, key: &KeyId, token: u64) {
    with_key(ctx, key, |opened| {
        let Ok(mut lock) = opened else {
            return;
        };
        if lock.hold().is_some_and(|h| h.token() == token) {
            lock.remove();
            lock.notify(event::RELEASED);
            stats::RELEASED.bump();
            hand_off_to_head(ctx, &mut lock, key);
        }
    });
}

/// Opens `key` for writing in its db (from a timer, where no key is open yet) and runs `f`.
fn with_key(
    ctx: *mut raw::RedisModuleCtx,
    key: &KeyId,
    f: impl FnOnce(Result<LockKey, WrongType>),
) {
    if !store::select_db(ctx, key.db) {
        return;
    }
    // The name must outlive the open key, which refers to it.
    let Some(name) = OwnedString::new(ctx, &key.name) else {
        return;
    };
    f(LockKey::open_from_timer(ctx, name.as_ptr()));
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    crate::guard(raw::REDISMODULE_OK as c_int, || {
        let client = unsafe { rm!(RedisModule_GetBlockedClientHandle(ctx)) };
        with(|r| r.tickets.remove(&(client as usize)).map(|_| ()));
        let data = unsafe { rm!(RedisModule_GetBlockedClientPrivateData(ctx)) };
        // SAFETY: the private data is the `Outcome` boxed by `unblock`; Redis frees it with
        // `free_outcome` after this callback, so it is only borrowed here.
        let outcome = unsafe { data.cast::<Outcome>().as_ref() };
        unsafe {
            match outcome {
                Some(Outcome::Token(token)) => {
                    rm!(RedisModule_ReplyWithLongLong(ctx, *token as i64))
                }
                Some(Outcome::TimedOut) | None => rm!(RedisModule_ReplyWithNull(ctx)),
                Some(Outcome::Error(message)) => {
                    let text = crate::commands::error_text(message);
                    rm!(RedisModule_ReplyWithError(ctx, text.as_ptr()))
                }
            }
        }
    })
}

extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    crate::guard((), || {
        if !data.is_null() {
            // SAFETY: boxed by `unblock`; Redis calls this once per unblocked client.
            drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
        }
    })
}

extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    crate::guard((), || {
        let granted = with(|r| match r.tickets.get(&(client as usize)) {
            Some(Ticket::Granted { key, token }) => {
                let job = Job::Revoke(key.clone(), *token);
                r.tickets.remove(&(client as usize));
                Some(job)
            }
            _ => None,
        });
        match granted {
            Some(job) => schedule(ctx, job),
            None => leave(ctx, client),
        }
    })
}

/// Takes a waiting client out of its queue; the caller unblocks it exactly once.
fn leave_queue(
    ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) -> Option<Waiter> {
    let (waiter, timer) = with(|r| {
        let Some(Ticket::Waiting { key, id }) = r.tickets.remove(&(client as usize)) else {
            return (None, None);
        };
        let waiter = r.line(&key).and_then(|line| line.queue.remove(id));
        if waiter.is_some() {
            r.live -= 1;
        }
        (waiter, r.drop_line_if_empty(&key))
    });
    stop_timer(ctx, timer);
    waiter
}

/// A waiting client disconnected (or Redis dropped it, e.g. on becoming a replica): it leaves
/// its queue and its handle is released.
fn leave(ctx: *mut raw::RedisModuleCtx, client: *mut raw::RedisModuleBlockedClient) {
    let Some(waiter) = leave_queue(ctx, client) else {
        return;
    };
    cancel_timer::<WaitTimeout>(ctx, waiter.timeout);
    // A client blocked with RedisModule_BlockClient must be unblocked by the module exactly
    // once, also after a disconnect, or its handle leaks.
    unblock(client, Outcome::TimedOut);
}
