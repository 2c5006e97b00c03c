//! The `LOCK.*` commands: argument parsing and reply mapping, one small fn per command. What a
//! command decides comes from `lock::hold`; how it lands in the keyspace from `store`.

use std::borrow::Cow;
use std::ffi::CString;
use std::os::raw::c_int;

use redis_module::raw;

use crate::lock::hold::{self, Decision, Found, Step};
use crate::lock::{args, ArgError, Hold};
use crate::store::{self, event, string_bytes, LockKey, WrongType};
use crate::{fencing, rm, server, stats, waiters};

type Args<'a> = &'a [*mut raw::RedisModuleString];
type Ctx = *mut raw::RedisModuleCtx;

/// What a command answers.
pub enum Reply {
    Integer(u64),
    Nil,
    Ok,
    Error(Cow<'static, str>),
    WrongType,
    WrongArity,
    /// `LOCK.INFO`'s map: owner, token, count, ttl, waiters.
    Info {
        hold: Box<Hold>,
        ttl: i64,
        waiters: usize,
    },
    /// The client is blocked; the reply comes later.
    Blocked,
}

impl From<ArgError> for Reply {
    fn from(e: ArgError) -> Reply {
        Reply::Error(Cow::Owned(e.to_string()))
    }
}

impl From<WrongType> for Reply {
    fn from(_: WrongType) -> Reply {
        Reply::WrongType
    }
}

const REENTRANCY_LIMIT: &str = "ERR reentrancy limit reached";
const NO_TOKENS: &str = "ERR fencing token space exhausted";

/// Wraps a command fn as the C callback Redis calls.
/// `writes`: the command changes locks, so a replica refuses it unless the master sent it.
macro_rules! command_callback {
    ($callback:ident, $handler:path, $arity:expr, writes: $writes:expr) => {
        pub extern "C" fn $callback(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            let reply = crate::guard(
                Reply::Error(Cow::Borrowed("ERR relock internal error")),
                || {
                    let args: Args<'_> = match usize::try_from(argc) {
                        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
                        _ => &[],
                    };
                    if !$arity(args.len()) {
                        return Reply::WrongArity;
                    }
                    if $writes && !server::may_write(ctx) {
                        return Reply::Error(Cow::Borrowed(server::READONLY));
                    }
                    if $writes && server::paused_for(ctx) {
                        return Reply::Error(Cow::Borrowed(server::PAUSED));
                    }
                    match $handler(ctx, args) {
                        Ok(reply) | Err(reply) => reply,
                    }
                },
            );
            send(ctx, reply)
        }
    };
}

command_callback!(acquire_cmd, acquire, |n| n == 4, writes: true);
command_callback!(reenter_cmd, reenter, |n| n == 4, writes: true);
command_callback!(release_cmd, release, |n| n == 3, writes: true);
command_callback!(renew_cmd, renew, |n| n == 4, writes: true);
command_callback!(wait_cmd, wait, |n| n == 5, writes: true);
command_callback!(info_cmd, info, |n| n == 2, writes: false);
command_callback!(forcerelease_cmd, force_release, |n| n == 2, writes: true);
command_callback!(apply_cmd, apply, |n| n == 5 || n == 7, writes: true);
command_callback!(counter_cmd, counter, |n| n == 2, writes: true);

type Result<T> = std::result::Result<T, Reply>;

/// `LOCK.ACQUIRE key owner ttl_ms`
fn acquire(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let ttl = args::ttl_ms(string_bytes(args[3]))?;
    let mut key = LockKey::open(ctx, args[1], false)?;
    Ok(take(ctx, &mut key, owner, ttl, hold::acquire))
}

/// `LOCK.REENTER key owner ttl_ms`
fn reenter(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let ttl = args::ttl_ms(string_bytes(args[3]))?;
    let mut key = LockKey::open(ctx, args[1], false)?;
    Ok(take(ctx, &mut key, owner, ttl, hold::reenter))
}

/// `LOCK.WAIT key owner ttl_ms timeout_ms`
fn wait(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let ttl = args::ttl_ms(string_bytes(args[3]))?;
    let timeout = args::timeout_ms(string_bytes(args[4]))?;
    let mut key = LockKey::open(ctx, args[1], false)?;
    // Clients of the master's stream and of the AOF never block; nor do scripts and MULTI.
    let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
    let no_block = raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    let may_block = flags & no_block as c_int == 0;
    let decision = hold::acquire(found(ctx, &key), owner);
    if decision != Decision::Nil || !may_block {
        return Ok(apply_take(ctx, &mut key, owner, ttl, decision));
    }
    stats::CONTENDED.bump();
    let expires_at = key.hold().and(key.expires_at());
    waiters::block(ctx, args, owner, ttl, timeout, expires_at);
    Ok(Reply::Blocked)
}

/// `LOCK.RELEASE key owner`
fn release(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let mut key = LockKey::open(ctx, args[1], false)?;
    let decision = hold::release(key.found(false), owner);
    match decision.step() {
        Step::Decrement { count } => key.decrement(count),
        Step::End => {
            key.remove();
            key.notify(event::RELEASED);
            stats::RELEASED.bump();
            hand_off(ctx, &mut key);
        }
        _ => {}
    }
    Ok(reply(&key, decision))
}

/// `LOCK.RENEW key owner ttl_ms`
fn renew(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let ttl = args::ttl_ms(string_bytes(args[3]))?;
    let mut key = LockKey::open(ctx, args[1], false)?;
    let decision = hold::renew(key.found(false), owner);
    if let Step::Refresh { count } = decision.step() {
        key.refresh(count, ttl);
        key.notify(event::RENEWED);
        stats::RENEWED.bump();
        expiry_moved(ctx, &key);
    }
    Ok(reply(&key, decision))
}

/// `LOCK.INFO key`
fn info(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let key = LockKey::open(ctx, args[1], true)?;
    Ok(match key.hold() {
        Some(hold) => Reply::Info {
            hold: hold.to_boxed(),
            ttl: key.ttl_ms(),
            waiters: waiters::queued(store::selected_db(ctx), string_bytes(args[1])),
        },
        None => Reply::Nil,
    })
}

/// `LOCK.FORCERELEASE key`
fn force_release(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let mut key = LockKey::open(ctx, args[1], false)?;
    let decision = hold::force_release(key.found(false));
    if decision.step() == Step::End {
        key.remove();
        key.notify(event::FORCERELEASED);
        stats::FORCERELEASED.bump();
        hand_off(ctx, &mut key);
    }
    Ok(reply(&key, decision))
}

/// `LOCK.APPLY key owner token count [PXAT unix_ms]`: sets a hold exactly as given. This is the
/// effect that replicas and the AOF receive; it is not meant for clients.
fn apply(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let owner = args::owner(string_bytes(args[2]))?;
    let token = args::token(string_bytes(args[3]))?;
    let count = args::count(string_bytes(args[4]))?;
    let at = match args.get(5..7) {
        Some([word, at]) if string_bytes(*word).eq_ignore_ascii_case(b"PXAT") => {
            Some(args::expiry_at_ms(string_bytes(*at))? as i64)
        }
        Some(_) => return Err(ArgError::Syntax.into()),
        None => None,
    };
    let mut key = LockKey::open(ctx, args[1], false)?;
    fencing::observe(token);
    key.put(Hold::new(owner, token, count), at);
    expiry_moved(ctx, &key);
    Ok(Reply::Ok)
}

/// `LOCK.COUNTER token`: raises the token counter to at least `token`. The module writes it to
/// the AOF after every rewrite, so the counter survives even an AOF without the RDB preamble
/// (which has no aux data) when no lock is left to carry it. Not meant for clients.
fn counter(ctx: Ctx, args: Args<'_>) -> Result<Reply> {
    let token = args::token(string_bytes(args[1]))?;
    fencing::observe(token);
    unsafe { rm!(RedisModule_ReplicateVerbatim(ctx)) };
    Ok(Reply::Ok)
}

/// What an acquire finds: a free key only counts as free if nobody is queued for it.
fn found<'k>(ctx: Ctx, key: &'k LockKey) -> Found<'k> {
    if key.hold().is_some() {
        return key.found(false);
    }
    let name = string_bytes(key.name());
    let queued = waiters::queued(store::selected_db(ctx), name) > 0;
    if queued {
        // A free key with waiters means a wake-up is due; make sure one is scheduled.
        waiters::wake(ctx, store::selected_db(ctx), name);
    }
    key.found(queued)
}

/// Applies an acquire-like decision (`LOCK.ACQUIRE`, `LOCK.REENTER`, immediate `LOCK.WAIT`).
fn take(
    ctx: Ctx,
    key: &mut LockKey,
    owner: &[u8],
    ttl: u64,
    decide: fn(Found<'_>, &[u8]) -> Decision,
) -> Reply {
    let decision = decide(found(ctx, key), owner);
    apply_take(ctx, key, owner, ttl, decision)
}

/// Applies an acquire-like decision already made.
fn apply_take(ctx: Ctx, key: &mut LockKey, owner: &[u8], ttl: u64, decision: Decision) -> Reply {
    match decision.step() {
        Step::Grant => {
            if key.grant(owner, ttl).is_none() {
                return Reply::Error(Cow::Borrowed(NO_TOKENS));
            }
            key.notify(event::ACQUIRED);
            stats::ACQUIRED.bump();
        }
        Step::Refresh { count } => {
            key.refresh(count, ttl);
            key.notify(event::ACQUIRED);
            expiry_moved(ctx, key);
        }
        _ if decision == Decision::Nil => stats::CONTENDED.bump(),
        _ => {}
    }
    reply(key, decision)
}

/// The lock's expiry changed: waiters behind it (if any) need their timer at the new deadline.
fn expiry_moved(ctx: Ctx, key: &LockKey) {
    waiters::wake(ctx, store::selected_db(ctx), string_bytes(key.name()));
}

fn hand_off(ctx: Ctx, key: &mut LockKey) {
    // The name lives in the command's arguments, not in `key`.
    let name = string_bytes(key.name());
    waiters::hand_off(ctx, key, store::selected_db(ctx), name);
}

fn reply(key: &LockKey, decision: Decision) -> Reply {
    match decision {
        Decision::Token(_) => match key.hold() {
            Some(hold) => Reply::Integer(hold.token()),
            None => Reply::Nil,
        },
        Decision::Integer(_, n) => Reply::Integer(n),
        Decision::Nil => Reply::Nil,
        Decision::ReentrancyLimit => Reply::Error(Cow::Borrowed(REENTRANCY_LIMIT)),
    }
}

/// An error reply's text as a C string (a NUL byte would cut it short).
pub fn error_text(message: &str) -> CString {
    CString::new(message.replace('\0', "")).unwrap_or_else(|_| CString::from(c"ERR relock error"))
}

fn send(ctx: Ctx, reply: Reply) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    unsafe {
        match reply {
            Reply::Integer(n) => rm!(RedisModule_ReplyWithLongLong(ctx, n as i64)),
            Reply::Nil => rm!(RedisModule_ReplyWithNull(ctx)),
            Reply::Ok => rm!(RedisModule_ReplyWithSimpleString(ctx, c"OK".as_ptr())),
            Reply::Error(message) => {
                rm!(RedisModule_ReplyWithError(
                    ctx,
                    error_text(&message).as_ptr()
                ))
            }
            Reply::WrongType => rm!(RedisModule_ReplyWithError(
                ctx,
                raw::REDISMODULE_ERRORMSG_WRONGTYPE.as_ptr().cast()
            )),
            Reply::WrongArity => rm!(RedisModule_WrongArity(ctx)),
            Reply::Info { hold, ttl, waiters } => {
                let owner = hold.owner();
                rm!(RedisModule_ReplyWithMap(ctx, 5));
                rm!(RedisModule_ReplyWithCString(ctx, c"owner".as_ptr()));
                rm!(RedisModule_ReplyWithStringBuffer(
                    ctx,
                    owner.as_ptr().cast(),
                    owner.len()
                ));
                rm!(RedisModule_ReplyWithCString(ctx, c"token".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, hold.token() as i64));
                rm!(RedisModule_ReplyWithCString(ctx, c"count".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, i64::from(hold.count())));
                rm!(RedisModule_ReplyWithCString(ctx, c"ttl".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, ttl));
                rm!(RedisModule_ReplyWithCString(ctx, c"waiters".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, waiters as i64))
            }
            Reply::Blocked => ok,
        }
    };
    ok
}
