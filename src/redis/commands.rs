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
use crate::lock::{args, errors, ArgError, Engine, Hold, Info, KeyRef, OpenError, Reply};

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

command_callback!(acquire_cmd, acquire, |n| n == 4, writes: true);
command_callback!(reenter_cmd, reenter, |n| n == 4, writes: true);
command_callback!(release_cmd, release, |n| n == 3, writes: true);
command_callback!(renew_cmd, renew, |n| n == 4, writes: true);
command_callback!(wait_cmd, wait, |n| n == 5, writes: true);
command_callback!(info_cmd, info, |n| n == 2, writes: false);
command_callback!(forcerelease_cmd, force_release, |n| n == 2, writes: true);
command_callback!(apply_cmd, apply, |n| n == 5 || n == 7, writes: true);
command_callback!(counter_cmd, counter, |n| n == 2, writes: true);

/// Runs `f` on the engine; the answer is the engine's reply.
fn engine(ctx: Ctx, f: impl FnOnce(&mut Engine<RedisHandles>, &mut RedisHost) -> Reply) -> Answer {
    match globals::with_engine(&mut RedisHost::new(ctx), f) {
        Some(reply) => Answer::Engine(reply),
        // Only if a command ran inside another module callback of ours; never expected.
        None => Answer::Error(Cow::Borrowed(INTERNAL)),
    }
}

/// `LOCK.ACQUIRE key owner ttl_ms`
fn acquire(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.acquire(h, &mut key, at, owner, ttl)))
}

/// `LOCK.REENTER key owner ttl_ms`
fn reenter(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.reenter(h, &mut key, at, owner, ttl)))
}

/// `LOCK.WAIT key owner ttl_ms timeout_ms`
fn wait(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let ttl = args::ttl_ms(args.bytes(3))?;
    let timeout = args::timeout_ms(args.bytes(4))?;
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    // Clients of the master's stream and of the AOF never block; nor do scripts and MULTI.
    let block = server::may_block(ctx).then_some(|_: &mut RedisHost| clients::block(ctx, args.0));
    let wait = Wait {
        owner,
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

/// `LOCK.FORCERELEASE key`
fn force_release(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    Ok(engine(ctx, |e, h| e.force_release(h, &mut key, at)))
}

/// `LOCK.APPLY key owner token count [PXAT unix_ms]`: sets a hold exactly as given. This is the
/// effect that replicas and the AOF receive; it is not meant for clients.
fn apply(ctx: Ctx, args: Args<'_>) -> Result<Answer> {
    let owner = args::owner(args.bytes(2))?;
    let token = args::token(args.bytes(3))?;
    let count = args::count(args.bytes(4))?;
    let expires_at = match args.0.len() {
        7 if args.bytes(5).eq_ignore_ascii_case(b"PXAT") => {
            Some(args::expiry_at_ms(args.bytes(6))? as i64)
        }
        7 => return Err(ArgError::Syntax.into()),
        _ => None,
    };
    let mut key = RedisKey::open(ctx, args.raw(1), false)?;
    let at = args.key(ctx);
    let hold = Hold::new(owner, token, count);
    Ok(engine(ctx, |e, h| {
        e.apply(h, &mut key, at, hold, expires_at)
    }))
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
    // SAFETY (every call below): `ctx` is the running command's context, each reply call gets
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
            Answer::Engine(Reply::Error(message)) => error(message),
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
            Answer::Engine(Reply::Info(Info {
                owner,
                token,
                count,
                ttl_ms,
                waiters,
            })) => {
                rm!(RedisModule_ReplyWithMap(ctx, 5));
                rm!(RedisModule_ReplyWithCString(ctx, c"owner".as_ptr()));
                rm!(RedisModule_ReplyWithStringBuffer(
                    ctx,
                    owner.as_ptr().cast(),
                    owner.len()
                ));
                rm!(RedisModule_ReplyWithCString(ctx, c"token".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, token as i64));
                rm!(RedisModule_ReplyWithCString(ctx, c"count".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, i64::from(count)));
                rm!(RedisModule_ReplyWithCString(ctx, c"ttl".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, ttl_ms));
                rm!(RedisModule_ReplyWithCString(ctx, c"waiters".as_ptr()));
                rm!(RedisModule_ReplyWithLongLong(ctx, waiters as i64));
            }
            Answer::Engine(Reply::Blocked) => {}
        }
    }
    ok
}
