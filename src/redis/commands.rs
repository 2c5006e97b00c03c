//! The `LOCK.*` commands: argument parsing, one call into the engine, and the reply. What a
//! command decides and does to the lock is the engine's (`crate::lock::engine`).

use std::borrow::Cow;
use std::os::raw::c_int;

use redis_module::raw;

use super::ffi::{self, error_text};
use super::globals::{self, RedisHandles};
use super::host::{RedisHost, RedisKey};
use super::{clients, server};
use crate::lock::engine::Wait;
use crate::lock::{
    args, errors, ArgError, Engine, Hold, Holder, HolderInfo, Info, KeyRef, Mode, OpenError, Reply,
};

type Ctx = *mut raw::RedisModuleCtx;

/// A command's arguments, borrowed for the length of the command.
#[derive(Clone, Copy)]
struct Args<'a>(&'a [*mut raw::RedisModuleString]);

impl<'a> Args<'a> {
    /// The bytes of argument `i` (empty if there is none).
    fn bytes(self, i: usize) -> &'a [u8] {
        match self.0.get(i) {
            // SAFETY: Redis keeps a command's arguments alive and unchanged until it returns,
            // which outlives `'a`.
            Some(&arg) => unsafe { ffi::string_bytes(arg) },
            None => &[],
        }
    }

    /// The bytes of arguments `from` on.
    fn rest(self, from: usize) -> Vec<&'a [u8]> {
        (from..self.0.len()).map(|i| self.bytes(i)).collect()
    }

    /// The raw argument `i`.
    fn raw(self, i: usize) -> *mut raw::RedisModuleString {
        self.0.get(i).copied().unwrap_or(std::ptr::null_mut())
    }

    /// The key (argument 1) in the db the command runs in.
    fn key(self, ctx: Ctx) -> KeyRef<'a> {
        KeyRef {
            db: ffi::selected_db(ctx),
            name: self.bytes(1),
        }
    }
}

/// What a command answers.
enum Answer {
    Engine(Reply),
    Error(Cow<'static, str>),
    WrongType,
    WrongArity,
}

impl From<ArgError> for Answer {
    fn from(e: ArgError) -> Answer {
        Answer::Error(Cow::Owned(e.to_string()))
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

/// Wraps a command fn as the C callback Redis calls.
/// `writes`: the command changes locks, so a replica refuses it unless the master sent it.
macro_rules! command_callback {
    ($callback:ident, $handler:path, $arity:expr, writes: $writes:expr) => {
        pub extern "C" fn $callback(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            let answer = ffi::guard(Answer::Error(Cow::Borrowed(INTERNAL)), || {
                let args = match usize::try_from(argc) {
                    // SAFETY: Redis passes `argc` valid arguments at `argv`.
                    Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
                    _ => &[],
                };
                if !$arity(args.len()) {
                    return Answer::WrongArity;
                }
                if $writes && !server::may_write(ctx) {
                    return Answer::Error(Cow::Borrowed(errors::READONLY));
                }
                if $writes && server::paused_for(ctx) {
                    return Answer::Error(Cow::Borrowed(server::PAUSED));
                }
                match $handler(ctx, Args(args)) {
                    Ok(answer) | Err(answer) => answer,
                }
            });
            send(ctx, answer)
        }
    };
}

command_callback!(acquire_cmd, acquire, |n| n >= 4, writes: true);
command_callback!(reenter_cmd, reenter, |n| n >= 4, writes: true);
command_callback!(release_cmd, release, |n| n == 3, writes: true);
command_callback!(renew_cmd, renew, |n| n == 4, writes: true);
command_callback!(wait_cmd, wait, |n| n >= 5, writes: true);
command_callback!(info_cmd, info, |n| n == 2, writes: false);
command_callback!(holders_cmd, holders, |n| n >= 2, writes: false);
command_callback!(forcerelease_cmd, force_release, |n| n == 2 || n == 3, writes: true);
command_callback!(apply_cmd, apply, |n| n >= 5, writes: true);
command_callback!(drop_cmd, drop_holder, |n| n == 3, writes: true);
command_callback!(counter_cmd, counter, |n| n == 2, writes: true);

/// Runs `f` on the engine; the answer is the engine's reply.
fn engine(ctx: Ctx, f: impl FnOnce(&mut Engine<RedisHandles>, &mut RedisHost) -> Reply) -> Answer {
    match globals::with_engine(&mut RedisHost::new(ctx), f) {
        Some(reply) => Answer::Engine(reply),
        // Only if a command ran inside another module callback of ours; never expected.
        None => Answer::Error(Cow::Borrowed(INTERNAL)),
    }
}

/// The mode words after argument `from`; no words (the common case) costs no allocation.
fn mode(args: Args<'_>, from: usize) -> std::result::Result<Mode, ArgError> {
    if args.0.len() <= from {
        return Ok(Mode::Exclusive);
    }
    args::mode(&args.rest(from))
}

/// `LOCK.ACQUIRE key owner ttl_ms [SHARED [LIMIT n]]`
fn acquire(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let mode = mode(args, 4)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| {
        e.acquire(h, &mut key, at, owner, ttl, mode)
    }))
}

/// `LOCK.REENTER key owner ttl_ms [SHARED [LIMIT n]]`
fn reenter(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let mode = mode(args, 4)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| {
        e.reenter(h, &mut key, at, owner, ttl, mode)
    }))
}

/// `LOCK.WAIT key owner ttl_ms timeout_ms [SHARED [LIMIT n]]`
fn wait(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let timeout = args::timeout_ms(args.bytes(4))?;
    let mode = mode(args, 5)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    // Clients of the master's stream and of the AOF never block; nor do scripts and MULTI.
    let block = server::may_block(ctx).then_some(|_: &mut RedisHost| clients::block(ctx, args.0));
    let wait = Wait {
        owner,
        mode,
        ttl_ms: ttl,
        timeout_ms: timeout,
    };
    Ok(engine(ctx, |e, h| e.wait(h, &mut key, at, wait, block)))
}

/// `LOCK.RELEASE key owner`
fn release(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.release(h, &mut key, at, owner)))
}

/// `LOCK.RENEW key owner ttl_ms`
fn renew(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.renew(h, &mut key, at, owner, ttl)))
}

/// `LOCK.INFO key`
fn info(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.info(h, &key, at)))
}

/// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`
fn holders(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let (owner, count) = args::holders_options(&args.rest(2))?;
    let key = RedisKey::open(ctx, args.raw(1), true)?;
    Ok(engine(ctx, |e, h| {
        e.holders(h, &key, owner.as_deref(), count)
    }))
}

/// `LOCK.FORCERELEASE key [owner]`
fn force_release(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = match args.0.len() {
        3 => Some(args::owner(args.bytes(2))?),
        _ => None,
    };
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.force_release(h, &mut key, at, owner)))
}

/// `LOCK.DROP key owner`: removes one shared holder exactly. The effect replicas and the AOF
/// receive when a shared hold ends; it is not meant for clients.
fn drop_holder(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.drop_holder(h, &mut key, at, owner)))
}

/// `LOCK.APPLY key owner token count [PXAT unix_ms]`: sets a hold exactly as given. This is the
/// effect that replicas and the AOF receive; it is not meant for clients.
fn apply(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let token = args::token(args.bytes(3))?;
    let count = args::count(args.bytes(4))?;
    let (expires_at, mode_from) = if args.bytes(5).eq_ignore_ascii_case(b"PXAT") {
        (Some(args::expiry_at_ms(args.bytes(6))? as i64), 7)
    } else {
        (None, 5)
    };
    let mode = mode(args, mode_from)?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    match mode {
        Mode::Exclusive => {
            let hold = Hold::new(owner, token, count);
            Ok(engine(ctx, |e, h| {
                e.apply(h, &mut key, at, hold, expires_at)
            }))
        }
        Mode::Shared { limit } => {
            // A shared holder's lease end is part of it.
            let lease_end = expires_at.ok_or(ArgError::Syntax)?;
            let holder = Holder {
                token,
                count,
                lease_end,
            };
            Ok(engine(ctx, |e, h| {
                e.apply_holder(h, &mut key, at, limit, owner, holder)
            }))
        }
    }
}

/// `LOCK.COUNTER token`: raises the token counter to at least `token`. The module writes it to
/// the AOF after every rewrite, so the counter survives even an AOF without the RDB preamble
/// (which has no aux data) when no lock is left to carry it. Not meant for clients.
fn counter(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let token = args::token(args.bytes(1))?;
    let answer = engine(ctx, |e, _| {
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
            Answer::Engine(Reply::Error(message)) => error(&message),
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
            Answer::Engine(Reply::Blocked) => {}
        }
    }
    ok
}

/// `LOCK.INFO`'s map: the five fields of old, then mode, holders and limit.
fn reply_info(ctx: Ctx, info: &Info) {
    let (mode, limit): (&std::ffi::CStr, u32) = match info.mode {
        Mode::Exclusive => (c"exclusive", 1),
        Mode::Shared { limit } => (c"shared", limit),
    };
    // SAFETY: for every call, `ctx` is the running command's context; names are static C strings
    // and the owner is passed with its length.
    unsafe {
        rm!(RedisModule_ReplyWithMap(ctx, 8));
        rm!(RedisModule_ReplyWithCString(ctx, c"owner".as_ptr()));
        match &info.owner {
            Some(owner) => rm!(RedisModule_ReplyWithStringBuffer(
                ctx,
                owner.as_ptr().cast(),
                owner.len()
            )),
            None => rm!(RedisModule_ReplyWithNull(ctx)),
        };
        rm!(RedisModule_ReplyWithCString(ctx, c"token".as_ptr()));
        reply_optional(ctx, info.token.map(|t| t as i64));
        rm!(RedisModule_ReplyWithCString(ctx, c"count".as_ptr()));
        reply_optional(ctx, info.count.map(i64::from));
        rm!(RedisModule_ReplyWithCString(ctx, c"ttl".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, info.ttl_ms));
        rm!(RedisModule_ReplyWithCString(ctx, c"waiters".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, info.waiters as i64));
        rm!(RedisModule_ReplyWithCString(ctx, c"mode".as_ptr()));
        rm!(RedisModule_ReplyWithCString(ctx, mode.as_ptr()));
        rm!(RedisModule_ReplyWithCString(ctx, c"holders".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, info.holders as i64));
        rm!(RedisModule_ReplyWithCString(ctx, c"limit".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, i64::from(limit)));
    }
}

/// An integer, or nil.
fn reply_optional(ctx: Ctx, value: Option<i64>) {
    // SAFETY: `ctx` is the running command's context.
    unsafe {
        match value {
            Some(n) => rm!(RedisModule_ReplyWithLongLong(ctx, n)),
            None => rm!(RedisModule_ReplyWithNull(ctx)),
        };
    }
}

/// One `LOCK.HOLDERS` entry: a map under RESP3, a flat array under RESP2.
fn reply_holder(ctx: Ctx, holder: &HolderInfo) {
    // SAFETY: for every call, `ctx` is the running command's context; names are static C strings
    // and the owner is passed with its length.
    unsafe {
        rm!(RedisModule_ReplyWithMap(ctx, 4));
        rm!(RedisModule_ReplyWithCString(ctx, c"owner".as_ptr()));
        rm!(RedisModule_ReplyWithStringBuffer(
            ctx,
            holder.owner.as_ptr().cast(),
            holder.owner.len()
        ));
        rm!(RedisModule_ReplyWithCString(ctx, c"token".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, holder.token as i64));
        rm!(RedisModule_ReplyWithCString(ctx, c"count".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, i64::from(holder.count)));
        rm!(RedisModule_ReplyWithCString(ctx, c"ttl".as_ptr()));
        rm!(RedisModule_ReplyWithLongLong(ctx, holder.ttl_ms));
    }
}
