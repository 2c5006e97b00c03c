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

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::raw::{c_int, c_void};
use std::rc::Rc;

use redis_module::raw;

use crate::lock::queue::WaiterId;
use crate::lock::Queue;
use crate::rm;
use crate::stats;
use crate::store::{self, event, LockKey, OwnedString, WrongType};

/// Why a waiter was unblocked without a token (tokens are 1 .. 2^53, so these never clash).
mod outcome {
    pub const WRONGTYPE: u64 = u64::MAX;
    pub const READONLY: u64 = u64::MAX - 1;
    pub const NO_TOKENS: u64 = u64::MAX - 2;
    pub const TIMED_OUT: u64 = u64::MAX - 3;
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
    /// The module timer that ends the wait at timeout_ms (none for timeout 0).
    timeout: Option<raw::RedisModuleTimerID>,
}

/// What a wait's timeout timer carries: which client, in which place of which queue.
struct WaitTimeout {
    client: usize,
    id: WaiterId,
}

/// One key's queue and the timer armed at its lock's expiry.
#[derive(Default)]
struct Line {
    queue: Queue<Waiter>,
    timer: Option<Armed>,
}

struct Armed {
    id: raw::RedisModuleTimerID,
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

/// Deferred work, run on a 0 ms timer.
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
    name: &[u8],
    owner: &[u8],
    ttl_ms: u64,
    timeout_ms: u64,
    expires_at: Option<i64>,
) {
    // No Redis timeout: the module times waits out itself. On Redis 7.0 a blocked client whose
    // Redis timeout passes in the same event-loop turn as its grant is unblocked with no reply
    // at all (the timeout path skips a client already unblocked, yet unblocks it); one timer per
    // wait, decided in the same thread as every grant, cannot race a grant.
    let client = unsafe {
        rm!(RedisModule_BlockClient(
            ctx,
            Some(on_reply),
            Some(on_timeout),
            None,
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
        name: Rc::from(name),
    };
    let id = with(|r| {
        r.next_id += 1;
        r.next_id
    });
    let timeout = (timeout_ms > 0).then(|| {
        let data = Box::into_raw(Box::new(WaitTimeout {
            client: client as usize,
            id,
        }));
        unsafe {
            rm!(RedisModule_CreateTimer(
                ctx,
                timeout_ms as i64,
                Some(on_wait_timeout),
                data.cast()
            ))
        }
    });
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
        let Some(token) = key.grant(&waiter.owner, waiter.ttl_ms) else {
            unblock(waiter.client, outcome::NO_TOKENS);
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
        unblock(waiter.client, token);
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

fn unblock(client: *mut raw::RedisModuleBlockedClient, outcome: u64) {
    unsafe {
        rm!(RedisModule_UnblockClient(
            client,
            outcome as usize as *mut c_void
        ))
    };
}

/// Fails every waiter of `key` with `outcome`.
fn fail_all(ctx: *mut raw::RedisModuleCtx, key: &KeyId, outcome: u64) {
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
        unblock(waiter.client, outcome);
    }
}

/// Fails every waiter on the server with a READONLY error (this server became a replica).
pub fn fail_everyone_readonly(ctx: *mut raw::RedisModuleCtx) {
    for key in all_keys(None) {
        fail_all(ctx, &key, outcome::READONLY);
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

/// Arms (or moves earlier) the expiry timer of `key`'s lock to fire just after `at`.
fn arm(ctx: *mut raw::RedisModuleCtx, key: &KeyId, at: i64) {
    let old = with(|r| {
        let line = r.line(key)?;
        if line.timer.as_ref().is_some_and(|t| t.at <= at) {
            return None;
        }
        // Redis considers a key expired once now > at, hence the extra millisecond.
        let delay = (at + 1 - store::now_ms()).max(0);
        let data = Box::into_raw(Box::new(key.clone())).cast::<c_void>();
        let id = unsafe { rm!(RedisModule_CreateTimer(ctx, delay, Some(on_deadline), data)) };
        line.timer.replace(Armed { id, at })
    });
    stop_timer(ctx, old);
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
    if stopped == raw::REDISMODULE_OK as c_int && !data.is_null() {
        drop(unsafe { Box::from_raw(data.cast::<T>()) });
    }
}

/// A wait's timeout_ms passed: it leaves the queue and gets nil, unless it was granted first.
extern "C" fn on_wait_timeout(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    crate::guard((), || {
        if data.is_null() {
            return;
        }
        let due = unsafe { Box::from_raw(data.cast::<WaitTimeout>()) };
        let client = due.client as *mut raw::RedisModuleBlockedClient;
        let still_waiting = with(
            |r| matches!(r.tickets.get(&due.client), Some(Ticket::Waiting { id, .. }) if *id == due.id),
        );
        // The firing timer is gone already; the waiter's copy of its id must not be stopped.
        if still_waiting && leave_queue(ctx, client).is_some() {
            stats::WAIT_TIMEOUTS.bump();
            unblock(client, outcome::TIMED_OUT);
        }
    })
}

extern "C" fn on_deadline(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    crate::guard((), || {
        if data.is_null() {
            return;
        }
        let key = unsafe { Box::from_raw(data.cast::<KeyId>()) };
        with(|r| {
            if let Some(line) = r.line(&key) {
                line.timer = None;
            }
        });
        serve(ctx, &key);
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
            match job {
                Job::Serve(key) => serve(ctx, &key),
                Job::Revoke(key, token) => revoke(ctx, &key, token),
            }
        }
    })
}

/// Looks at a key with waiters and does what its state calls for: a free lock goes to the head
/// waiter, a held one gets its expiry timer, another type fails the waiters with WRONGTYPE.
fn serve(ctx: *mut raw::RedisModuleCtx, key: &KeyId) {
    if queued(key.db, &key.name) == 0 {
        return;
    }
    match server_state(ctx) {
        ServerState::Loading => {} // the end of loading wakes every key again
        ServerState::Replica => fail_all(ctx, key, outcome::READONLY),
        ServerState::Master => with_key(ctx, key, |opened| match opened {
            Err(WrongType) => fail_all(ctx, key, outcome::WRONGTYPE),
            Ok(mut lock) => {
                if lock.hold().is_some() {
                    if let Some(at) = lock.expires_at() {
                        arm(ctx, key, at);
                    }
                } else {
                    hand_off_to_head(ctx, &mut lock, key);
                }
            }
        }),
    }
}

/// Ends a hold granted to a client that disconnected before it learned of it.
fn revoke(ctx: *mut raw::RedisModuleCtx, key: &KeyId, token: u64) {
    if server_state(ctx) != ServerState::Master {
        return;
    }
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

#[derive(PartialEq, Eq)]
enum ServerState {
    Loading,
    Replica,
    Master,
}

fn server_state(ctx: *mut raw::RedisModuleCtx) -> ServerState {
    let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
    if flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0 {
        ServerState::Loading
    } else if flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int == 0 {
        ServerState::Replica
    } else {
        ServerState::Master
    }
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
        let outcome = unsafe { rm!(RedisModule_GetBlockedClientPrivateData(ctx)) } as usize as u64;
        unsafe {
            match outcome {
                outcome::WRONGTYPE => rm!(RedisModule_ReplyWithError(
                    ctx,
                    raw::REDISMODULE_ERRORMSG_WRONGTYPE.as_ptr().cast()
                )),
                outcome::READONLY => rm!(RedisModule_ReplyWithError(
                    ctx,
                    c"READONLY You can't write against a read only replica.".as_ptr()
                )),
                outcome::NO_TOKENS => rm!(RedisModule_ReplyWithError(
                    ctx,
                    c"ERR fencing token space exhausted".as_ptr()
                )),
                outcome::TIMED_OUT => rm!(RedisModule_ReplyWithNull(ctx)),
                token => rm!(RedisModule_ReplyWithLongLong(ctx, token as i64)),
            }
        }
    })
}

extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    crate::guard(raw::REDISMODULE_OK as c_int, || {
        let client = unsafe { rm!(RedisModule_GetBlockedClientHandle(ctx)) };
        if leave(ctx, client) {
            stats::WAIT_TIMEOUTS.bump();
        }
        unsafe { rm!(RedisModule_ReplyWithNull(ctx)) }
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
            None => {
                leave(ctx, client);
            }
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

/// A waiting client disconnected or was unblocked by `CLIENT UNBLOCK`: it leaves its queue and
/// its handle is released.
fn leave(ctx: *mut raw::RedisModuleCtx, client: *mut raw::RedisModuleBlockedClient) -> bool {
    let Some(waiter) = leave_queue(ctx, client) else {
        return false;
    };
    cancel_timer::<WaitTimeout>(ctx, waiter.timeout);
    // A client blocked with RedisModule_BlockClient must be unblocked by the module exactly
    // once, also after a timeout or disconnect, or its handle leaks.
    unblock(client, 0);
    true
}
