//! The `LOCK.*` commands: argument parsing, one call into the engine, and the reply. What a
//! command decides and does to the lock is the engine's (`crate::lock::engine`); its name,
//! arity, flags and docs are in the command table (`registration`), which [`dispatch`] reads.

use std::borrow::Cow;
use std::ffi::CStr;
use std::os::raw::{c_int, c_long};

use redis_module::raw;

use super::ffi::{self, error_text};
use super::globals::{self, RedisHandles};
use super::host::{RedisHost, RedisKey};
use super::replies::{reply_info, Fields};
use super::{clients, server};
use crate::lock::args::Listing;
use crate::lock::{
    args, errors, ArgError, Engine, Entry, Hold, Holder, HolderInfo, HotKey, Key, KeyStats, Mode,
    OpenError, Reply, Request, Wait, WaiterInfo, Watch,
};
use relock_protocol::cmd::{self as wire, Argv, Command as _};

type Ctx = *mut raw::RedisModuleCtx;

/// A command's arguments, borrowed for the length of the command.
#[derive(Clone, Copy)]
pub struct Args<'a>(&'a [*mut raw::RedisModuleString]);

impl<'a> Args<'a> {
    /// How many arguments (the command's name included).
    pub fn count(self) -> usize {
        self.0.len()
    }

    /// Every raw argument.
    pub fn all(self) -> &'a [*mut raw::RedisModuleString] {
        self.0
    }

    /// The bytes of argument `i` (empty if there is none).
    pub fn bytes(self, i: usize) -> &'a [u8] {
        match self.0.get(i) {
            // SAFETY: Redis keeps a command's arguments alive and unchanged until it returns,
            // which outlives `'a`.
            Some(&arg) => unsafe { ffi::string_bytes(arg) },
            None => &[],
        }
    }

    /// The raw argument `i`.
    pub fn raw(self, i: usize) -> *mut raw::RedisModuleString {
        self.0.get(i).copied().unwrap_or(std::ptr::null_mut())
    }
}

impl<'a> Argv<'a> for Args<'a> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn arg(&self, i: usize) -> &'a [u8] {
        self.bytes(i)
    }
}

/// The C callback Redis calls for a command (made by `registration`'s `callback!`).
pub type Callback =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// An argument as `COMMAND DOCS` shows it.
pub struct Arg {
    pub name: &'static CStr,
    pub kind: raw::RedisModuleCommandArgType,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// Repeated (`key [key ...]`).
    pub multiple: bool,
}

/// A command: everything Redis and the module need to know of it.
pub struct Command {
    pub name: &'static CStr,
    /// Parses and runs it.
    pub handler: Handler,
    pub callback: Callback,
    /// Redis command flags; a command whose flags start with `write` changes locks.
    pub flags: &'static CStr,
    /// ACL categories, set where the server supports it (Redis 7.2+; 7.0 has no API for it).
    pub acl: &'static CStr,
    /// As Redis counts it: n arguments exactly (name included), or -n for at least n.
    pub arity: c_int,
    /// Key-spec flags of the one key at argument 1 (of every key, for a numkeys command); 0
    /// for a command without keys.
    pub key_flags: u32,
    /// Whether its keys follow a `numkeys` at argument 1.
    pub numkeys: bool,
    /// Whether an inner command starts at argument 3 (`LOCK.FENCED`): a second key spec,
    /// `INCOMPLETE`, makes Redis ask the getkeys-api callback for its keys.
    pub inner_keys: bool,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// The relock version that added it (`COMMAND DOCS` shows it).
    pub since: &'static CStr,
    pub args: &'static [Arg],
}

impl Command {
    /// Whether it changes locks (a replica refuses it unless the master sent it).
    pub fn writes(&self) -> bool {
        self.flags.to_bytes().starts_with(b"write")
    }

    /// Whether its arity allows `n` arguments (its name included).
    pub fn takes(&self, n: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            n == arity
        } else {
            n >= arity
        }
    }
}

/// What a command answers.
pub enum Answer {
    Engine(Reply),
    /// Already replied (a listing written straight from the engine's state).
    Sent,
    Error(Cow<'static, str>),
    WrongType,
    WrongArity,
}

impl From<ArgError> for Answer {
    fn from(e: ArgError) -> Answer {
        match e {
            // Redis's own text, naming the command.
            ArgError::Arity => Answer::WrongArity,
            e => Answer::Error(Cow::Owned(e.to_string())),
        }
    }
}

impl From<OpenError> for Answer {
    fn from(e: OpenError) -> Answer {
        match e {
            OpenError::WrongType => Answer::WrongType,
            OpenError::Unavailable => Answer::Error(Cow::Borrowed(INTERNAL)),
        }
    }
}

const INTERNAL: &str = "ERR relock internal error";

type Result<T> = std::result::Result<T, Answer>;

/// A command's handler: parses the arguments, runs the command, answers.
pub type Handler = fn(Ctx, Args<'_>) -> Result<Answer>;

/// Runs `command` from its C callback: its arity and flags (from the table), then its handler,
/// then the reply. A write command is refused on a replica unless the master sent it, and while
/// writes are paused.
pub fn dispatch(
    command: &Command,
    ctx: Ctx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: `ctx` is the command's context.
    if command.numkeys && unsafe { rm!(RedisModule_IsKeysPositionRequest(ctx)) } != 0 {
        return ffi::guard(raw::REDISMODULE_OK as c_int, || {
            key_positions(ctx, argv, argc)
        });
    }
    let answer = ffi::guard(Answer::Error(Cow::Borrowed(INTERNAL)), || {
        let args = match usize::try_from(argc) {
            // SAFETY: Redis passes `argc` valid arguments at `argv`.
            Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
            _ => &[],
        };
        if !command.takes(args.len()) {
            return Answer::WrongArity;
        }
        if command.writes() && !server::may_write(ctx) {
            return Answer::Error(Cow::Borrowed(errors::READONLY));
        }
        if command.writes() && server::paused_for(ctx) {
            return Answer::Error(Cow::Borrowed(server::PAUSED));
        }
        match (command.handler)(ctx, Args(args)) {
            Ok(answer) | Err(answer) => answer,
        }
    });
    send(ctx, answer)
}

/// Where a numkeys command's keys are (Redis asks a `getkeys-api` command this for cluster
/// routing where it does not read key specs, Redis 7.0): after the numkeys at argument 1; none
/// if numkeys is bad (the command then fails on its own).
fn key_positions(ctx: Ctx, argv: *mut *mut raw::RedisModuleString, argc: c_int) -> c_int {
    let args = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid arguments at `argv`.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let args = Args(args);
    let n = args::parse_integer(args.bytes(1))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=args::MAX_KEYS).contains(n))
        .unwrap_or(0);
    for i in (2..2 + n).take_while(|i| *i < args.0.len()) {
        // SAFETY: `ctx` is the key-position request's context; `i` is an argument index.
        unsafe { rm!(RedisModule_KeyAtPos(ctx, i as c_int)) };
    }
    raw::REDISMODULE_OK as c_int
}

/// Runs `f` on the engine with the command's host; the answer is the engine's reply.
fn engine(
    ctx: Ctx,
    args: Args<'_>,
    f: impl FnOnce(&mut Engine<RedisHandles>, &mut RedisHost) -> Reply,
) -> Answer {
    match globals::with_engine(&mut RedisHost::for_command(ctx, args.0, clients::block), f) {
        Some(reply) => Answer::Engine(reply),
        // Only if a command ran inside another module callback of ours; never expected.
        None => Answer::Error(Cow::Borrowed(INTERNAL)),
    }
}

/// `LOCK.ACQUIRE key owner ttl_ms [SHARED [LIMIT n [PERMITS p]]]`
pub fn acquire(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::Acquire::parse(&args)?;
    let request = Request {
        owner: c.owner,
        ttl_ms: c.ttl_ms,
        mode: c.ask,
    };
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| e.acquire(h, &mut key, request)))
}

/// `LOCK.REENTER key owner ttl_ms [SHARED [LIMIT n [PERMITS p]]] [FROM c]`: arguments checked
/// in that order.
pub fn reenter(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::Reenter::parse(&args)?;
    let (request, from) = (
        Request {
            owner: c.owner,
            ttl_ms: c.ttl_ms,
            mode: c.ask,
        },
        c.from,
    );
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| {
        e.reenter(h, &mut key, request, from)
    }))
}

/// `LOCK.WAIT key owner ttl_ms timeout_ms [SHARED [LIMIT n]]`
pub fn wait(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::Wait::parse(&args)?;
    let wait = Wait {
        request: Request {
            owner: c.owner,
            ttl_ms: c.ttl_ms,
            mode: c.ask,
        },
        timeout_ms: c.timeout_ms,
    };
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| e.wait(h, &mut key, wait)))
}

/// `LOCK.RELEASE key owner [FROM c]`
pub fn release(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::Release { owner, from, .. } = wire::Release::parse(&args)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| {
        e.release(h, &mut key, owner, from)
    }))
}

/// `LOCK.RENEW key owner ttl_ms`
pub fn renew(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::Renew {
        owner, ttl_ms: ttl, ..
    } = wire::Renew::parse(&args)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| e.renew(h, &mut key, owner, ttl)))
}

/// The `n` keys of a numkeys command (arguments 2 on, checked by its parse), opened for
/// writing: every argument is checked before any key is opened (the first bad one is the
/// error).
fn group(ctx: Ctx, args: Args<'_>, n: usize) -> Result<Vec<RedisKey>> {
    (2..2 + n)
        .map(|i| RedisKey::open(ctx, args.raw(i), false).map_err(Answer::from))
        .collect()
}

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl_ms`
pub fn macquire(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::MAcquire::parse(&args)?;
    let (owner, ttl_ms) = (c.owner, c.ttl_ms);
    let mut keys = group(ctx, args, c.keys.len())?;
    Ok(engine(ctx, args, |e, h| {
        e.macquire(h, &mut keys, owner, ttl_ms)
    }))
}

/// `LOCK.MRELEASE numkeys key [key ...] owner [FROM c]`
pub fn mrelease(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::MRelease::parse(&args)?;
    let (owner, from) = (c.owner, c.from);
    let mut keys = group(ctx, args, c.keys.len())?;
    Ok(engine(ctx, args, |e, h| {
        e.mrelease(h, &mut keys, owner, from)
    }))
}

/// `LOCK.MRENEW numkeys key [key ...] owner ttl_ms`
pub fn mrenew(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::MRenew::parse(&args)?;
    let (owner, ttl_ms) = (c.owner, c.ttl_ms);
    let mut keys = group(ctx, args, c.keys.len())?;
    Ok(engine(ctx, args, |e, h| {
        e.mrenew(h, &mut keys, owner, ttl_ms)
    }))
}

/// `LOCK.DOWNGRADE key owner`
pub fn downgrade(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::Downgrade { owner, .. } = wire::Downgrade::parse(&args)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| e.downgrade(h, &mut key, owner)))
}

/// `LOCK.INFO key`
pub fn info(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    wire::Info::parse(&args)?;
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    Ok(engine(ctx, args, |e, h| e.info(h, &key)))
}

/// `LOCK.OBSERVE key known_token timeout_ms`
pub fn observe(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::Observe::parse(&args)?;
    let (known, timeout_ms) = (c.known_token, c.timeout_ms);
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    let host = &mut RedisHost::for_command(ctx, args.0, clients::block_observer);
    match globals::with_engine(host, |e, h| e.observe(h, &key, known, timeout_ms)) {
        Some(reply) => Ok(Answer::Engine(reply)),
        None => Ok(Answer::Error(Cow::Borrowed(INTERNAL))),
    }
}

/// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`
pub fn holders(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let c = wire::Holders::parse(&args)?;
    let (owner, count) = (c.owner, c.count());
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    Ok(engine(ctx, args, |e, h| e.holders(h, &key, owner, count)))
}

/// `LOCK.FORCERELEASE key [owner]`
pub fn force_release(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::ForceRelease { owner, .. } = wire::ForceRelease::parse(&args)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    Ok(engine(ctx, args, |e, h| {
        e.force_release(h, &mut key, owner)
    }))
}

/// `LOCK.WAITERS key [COUNT n]`
pub fn waiters(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let count = wire::Waiters::parse(&args)?.count();
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    Ok(engine(ctx, args, |e, h| e.waiters_of(h, key.id(), count)))
}

/// `LOCK.LOG [count | RESET]`
pub fn log(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let listing = wire::Log::parse(&args)?.listing();
    globals::journal_pending_flush();
    Ok(match listing {
        Listing::Reset => watch(|w| {
            w.journal.reset();
            Reply::Ok
        }),
        Listing::First(n) => send_from_watch(|w| reply_entries(ctx, &w.journal.latest(n))),
    })
}

/// `LOCK.HISTORY key [count]`
pub fn history(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let count = wire::History::parse(&args)?.count();
    // The key's value now does not matter: a lock overwritten by a string has a history.
    let (db, name) = (ffi::selected_db(ctx), args.bytes(1));
    globals::journal_pending_flush();
    Ok(send_from_watch(|w| {
        reply_entries(ctx, &w.journal.of_key(db, name, count))
    }))
}

/// `LOCK.STATS [COUNT n | RESET]`
pub fn stats(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    Ok(match wire::Stats::parse(&args)?.listing() {
        Listing::Reset => {
            globals::configure_engine(|e| {
                e.reset_observe_counters();
                e.reset_fenced_counters();
            });
            watch(|w| {
                w.contention.reset();
                Reply::Ok
            })
        }
        Listing::First(n) => send_from_watch(|w| {
            let hottest = w.contention.keys.hottest(n);
            // SAFETY: `ctx` is the running command's context.
            unsafe { rm!(RedisModule_ReplyWithArray(ctx, hottest.len() as c_long)) };
            for (key, stats) in hottest {
                reply_key_stats(ctx, key, stats);
            }
        }),
    })
}

/// Changes the journal or the statistics; the reply.
fn watch(f: impl FnOnce(&mut Watch) -> Reply) -> Answer {
    let mut f = Some(f);
    let mut reply = None;
    let done = globals::configure(|w| reply = f.take().map(|f| f(w)));
    match reply {
        Some(reply) if done => Answer::Engine(reply),
        _ => Answer::Error(Cow::Borrowed(INTERNAL)),
    }
}

/// Replies with `send`, reading the journal and the statistics in place (a long listing is
/// not copied first).
fn send_from_watch(send: impl FnOnce(&Watch)) -> Answer {
    match globals::read_engine(|e| send(e.watch())) {
        Some(()) => Answer::Sent,
        None => Answer::Error(Cow::Borrowed(INTERNAL)),
    }
}

/// `LOCK.DROP key owner`: removes one shared holder exactly. The effect replicas and the AOF
/// receive when a shared hold ends; it is not meant for clients.
pub fn drop_holder(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    timed_apply(|| {
        let wire::Drop { owner, .. } = wire::Drop::parse(&args)?;
        let mut key = RedisKey::open(ctx, args.raw(1), false)?;
        Ok(engine(ctx, args, |e, h| e.drop_holder(h, &mut key, owner)))
    })
}

/// Runs a replicated change, its CPU time recorded (`longest_apply_us`).
fn timed_apply(f: impl FnOnce() -> Result<Answer>) -> Result<Answer> {
    let started = ffi::thread_cpu_us();
    let answer = f();
    globals::record_apply(ffi::thread_cpu_us().saturating_sub(started));
    answer
}

/// `LOCK.APPLY key owner token count [PXAT unix_ms] [GRANTED unix_ms] [SHARED [LIMIT n
/// [PERMITS p]]]`: sets a hold exactly as given. This is the effect that replicas and the AOF
/// receive; it is not meant for clients.
pub fn apply(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    timed_apply(|| apply_now(ctx, args))
}

fn apply_now(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::Apply {
        owner,
        token,
        count,
        tail,
        ..
    } = wire::Apply::parse(&args)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    match tail.shared {
        None => {
            let hold = Hold::new(owner, token, count, tail.granted_at);
            Ok(engine(ctx, args, |e, h| {
                e.apply(h, &mut key, hold, tail.expires_at)
            }))
        }
        Some((limit, permits)) => {
            // A shared holder's lease end is part of it.
            let lease_end = tail.expires_at.ok_or(ArgError::Syntax)?;
            let holder = Holder {
                token,
                count,
                lease_end,
                permits,
                granted_at: tail.granted_at,
            };
            Ok(engine(ctx, args, |e, h| {
                e.apply_holder(h, &mut key, limit, owner, holder)
            }))
        }
    }
}

/// `LOCK.COUNTER token`: raises the token counter to at least `token`. The module writes it to
/// the AOF after every rewrite, so the counter survives even an AOF without the RDB preamble
/// (which has no aux data) when no lock is left to carry it. Not meant for clients.
pub fn counter(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let wire::Counter { token } = wire::Counter::parse(&args)?;
    let answer = engine(ctx, args, |e, _| {
        e.observe_token(token);
        Reply::Ok
    });
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplicateVerbatim(ctx)) };
    Ok(answer)
}

fn send(ctx: Ctx, answer: Answer) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    let error = |message: &str| {
        let text = error_text(message);
        // SAFETY: `ctx` is the running command's context; `text` is a C string.
        unsafe { rm!(RedisModule_ReplyWithError(ctx, text.as_ptr())) };
    };
    // SAFETY: for every call below, `ctx` is the running command's context, each reply call gets
    // arguments of the types it takes, and buffers are passed with their lengths.
    // SAFETY: see the comment above: replies in the command's own context.
    unsafe {
        match answer {
            Answer::Engine(Reply::Integer(n)) => {
                rm!(RedisModule_ReplyWithLongLong(ctx, n as i64));
            }
            Answer::Engine(Reply::Nil) => {
                rm!(RedisModule_ReplyWithNull(ctx));
            }
            Answer::Engine(Reply::Ok) => {
                rm!(RedisModule_ReplyWithSimpleString(ctx, c"OK".as_ptr()));
            }
            Answer::Engine(Reply::Error(lock_error)) => error(&lock_error.text()),
            Answer::Error(message) => error(&message),
            Answer::WrongType => {
                rm!(RedisModule_ReplyWithError(
                    ctx,
                    raw::REDISMODULE_ERRORMSG_WRONGTYPE.as_ptr().cast()
                ));
            }
            Answer::WrongArity => {
                rm!(RedisModule_WrongArity(ctx));
            }
            Answer::Engine(Reply::Info(info)) => reply_info(ctx, &info),
            Answer::Engine(Reply::Holders(holders)) => {
                rm!(RedisModule_ReplyWithArray(
                    ctx,
                    holders.len() as std::os::raw::c_long
                ));
                for holder in &holders {
                    reply_holder(ctx, holder);
                }
            }
            Answer::Engine(Reply::Tokens(tokens)) => {
                rm!(RedisModule_ReplyWithArray(ctx, tokens.len() as c_long));
                for token in tokens {
                    rm!(RedisModule_ReplyWithLongLong(ctx, token as i64));
                }
            }
            Answer::Engine(Reply::Waiters(waiters)) => {
                rm!(RedisModule_ReplyWithArray(ctx, waiters.len() as c_long));
                for waiter in &waiters {
                    reply_waiter(ctx, waiter);
                }
            }
            Answer::Engine(Reply::Blocked) | Answer::Sent => {}
        }
    }
    ok
}

/// One `LOCK.HOLDERS` entry: a map under RESP3, a flat array under RESP2.
fn reply_holder(ctx: Ctx, holder: &HolderInfo) {
    Fields::start(ctx, 5)
        .bytes(c"owner", &holder.owner)
        .int(c"token", holder.token as i64)
        .int(c"count", i64::from(holder.count))
        .int(c"ttl", holder.ttl_ms)
        .int(c"permits", i64::from(holder.permits));
}

/// The mode words of `mode`: its name, limit and permits.
fn mode_fields(mode: Mode) -> (&'static CStr, i64, i64) {
    match mode {
        Mode::Exclusive => (c"exclusive", 0, 1),
        Mode::Shared { limit, permits } => (c"shared", i64::from(limit), i64::from(permits)),
    }
}

/// One `LOCK.WAITERS` entry.
fn reply_waiter(ctx: Ctx, waiter: &WaiterInfo) {
    let (mode, limit, permits) = mode_fields(waiter.mode);
    Fields::start(ctx, 8)
        .bytes(c"owner", &waiter.owner)
        .word(c"mode", mode)
        .int(c"limit", limit)
        .int(c"permits", permits)
        .int(c"client", waiter.client as i64)
        .int(c"waited", waiter.waited_ms as i64)
        .int(c"timeout", waiter.timeout_ms)
        .int(c"ttl", waiter.ttl_ms as i64);
}

/// Journal entries (`LOCK.LOG`, `LOCK.HISTORY`), as an array.
fn reply_entries(ctx: Ctx, entries: &[&Entry]) {
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplyWithArray(ctx, entries.len() as c_long)) };
    for entry in entries {
        let reason = std::ffi::CString::new(entry.reason.name()).unwrap_or_default();
        Fields::start(ctx, 10)
            .int(c"id", entry.id as i64)
            .int(c"time", entry.time)
            .int(c"db", i64::from(entry.db))
            .bytes(c"key", &entry.key)
            .bytes(c"owner", &entry.owner)
            .int(c"token", entry.token as i64)
            .word(c"reason", &reason)
            .optional(c"held", entry.held)
            .bytes(c"client-info", entry.client_info.as_bytes())
            .int(c"waiters", entry.waiters as i64);
    }
}

/// One `LOCK.STATS` entry.
fn reply_key_stats(ctx: Ctx, key: &HotKey, stats: &KeyStats) {
    Fields::start(ctx, 9)
        .bytes(c"key", &key.name)
        .int(c"db", i64::from(key.db))
        .int(c"waits", stats.waits as i64)
        .int(c"granted", stats.granted as i64)
        .int(c"timeouts", stats.timeouts as i64)
        .int(c"contended", stats.contended as i64)
        .int(c"wait_ms_total", stats.wait_ms_total as i64)
        .int(c"error", stats.error as i64)
        .int(c"wait_ms_max", stats.wait_ms_max as i64);
}
