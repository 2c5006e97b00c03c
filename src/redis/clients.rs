//! Clients blocked in `LOCK.WAIT`, and the engine's timers: the one place that uses Redis's
//! blocked-client and timer callbacks. The engine decides who waits, who is granted and when;
//! this file only blocks, answers and reports back.
//!
//! Why `RedisModule_BlockClient` and not `RedisModule_BlockClientOnKeys`: on Redis 7.0 the
//! latter does not wake clients when the key is deleted, and every signal re-runs every waiter's
//! callback (O(N) per release). The engine keeps each key's FIFO queue itself and grants the
//! head in the same atomic step as the release (O(1)).
//!
//! Neither a Redis timeout nor a timeout callback: the engine times waits out itself, on its own
//! timers, decided in the same thread as every grant. With a timeout callback, Redis's own paths
//! can reach a client the module already granted (its timeout, or `CLIENT UNBLOCK id TIMEOUT` in
//! the same event-loop turn as the grant) and then answer it nothing at all (7.0) or a nil while
//! the lock is held in its name (8.x). Without one, `CLIENT UNBLOCK` answers 0 for a `LOCK.WAIT`
//! client and leaves it waiting.

use std::os::raw::{c_int, c_void};

use redis_module::raw;

use super::acl::Caller;
use super::globals::{self, Client, Report};
use super::host::RedisHost;
use super::{ffi, replies};
use crate::lock::Outcome;

/// Blocks the client running the command in `ctx` (with arguments `argv`, kept for the ACL
/// re-check at hand-off). `None` if Redis would not block it.
pub fn block(
    ctx: *mut raw::RedisModuleCtx,
    argv: &[*mut raw::RedisModuleString],
) -> Option<(Client, Option<Caller>)> {
    // SAFETY: `ctx` is the running command's context; the callbacks are `extern "C"` fns that
    // never unwind; no Redis timeout (0).
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
        return None;
    }
    // SAFETY: `client` is the handle just returned, not yet unblocked.
    unsafe {
        rm!(RedisModule_SetDisconnectCallback(
            client,
            Some(on_disconnect)
        ))
    };
    Some((client, Caller::of_running_command(ctx, argv)))
}

/// Blocks the client of a `LOCK.OBSERVE`, as [`block`] does, but with a timeout callback: an
/// observer holds nothing, so `CLIENT UNBLOCK id` may end it (answered as its timeout: the
/// current state) and `CLIENT UNBLOCK id ERROR` too (Redis answers `-UNBLOCKED` and calls the
/// disconnect callback). Still no Redis timeout (0): the engine times observers out itself
/// (Redis's timeout could come in the same event-loop turn as the module's answer and drop it on
/// 7.0). Its caller is the one every observer of the key by the same user shares.
pub fn block_observer(
    ctx: *mut raw::RedisModuleCtx,
    argv: &[*mut raw::RedisModuleString],
) -> Option<(Client, Option<Caller>)> {
    // SAFETY: as in `block`, with a timeout callback that never unwinds.
    let client = unsafe {
        rm!(RedisModule_BlockClient(
            ctx,
            Some(on_reply),
            Some(on_observer_unblocked),
            Some(free_outcome),
            0
        ))
    };
    if client.is_null() {
        return None;
    }
    // SAFETY: `client` is the handle just returned, not yet unblocked.
    unsafe {
        rm!(RedisModule_SetDisconnectCallback(
            client,
            Some(on_disconnect)
        ))
    };
    Some((client, Caller::of_observer(ctx, argv)))
}

/// `CLIENT UNBLOCK id [TIMEOUT]` on an observer: answered the current state, as its timeout
/// would be. (Redis calls no timeout callback for a client the module already unblocked.)
extern "C" fn on_observer_unblocked(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    ffi::guard(raw::REDISMODULE_OK as c_int, || {
        // SAFETY: called by Redis in a blocked client's timeout context.
        let client = unsafe { rm!(RedisModule_GetBlockedClientHandle(ctx)) };
        let outcome = globals::with_engine(&mut RedisHost::new(ctx), |e, h| {
            e.observer_unblocked(h, client)
        })
        .flatten()
        .unwrap_or(Outcome::TimedOut);
        reply_outcome(ctx, Some(&outcome));
        raw::REDISMODULE_OK as c_int
    })
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    ffi::guard(raw::REDISMODULE_OK as c_int, || {
        // SAFETY: called by Redis in a blocked client's reply context.
        let client = unsafe { rm!(RedisModule_GetBlockedClientHandle(ctx)) };
        globals::report(&mut RedisHost::new(ctx), Report::Replied(client));
        // SAFETY: as above.
        let data = unsafe { rm!(RedisModule_GetBlockedClientPrivateData(ctx)) };
        // SAFETY: the private data is the `Outcome` boxed by `unblock`; Redis frees it with
        // `free_outcome` after this callback, so it is only borrowed here.
        let outcome = unsafe { data.cast::<Outcome>().as_ref() };
        reply_outcome(ctx, outcome);
        raw::REDISMODULE_OK as c_int
    })
}

/// Answers a blocked client its outcome, in its reply (or timeout) context.
fn reply_outcome(ctx: *mut raw::RedisModuleCtx, outcome: Option<&Outcome>) {
    // SAFETY: replies in the reply context; `error_text` is a NUL-terminated C string.
    unsafe {
        match outcome {
            Some(Outcome::Token(token)) => {
                rm!(RedisModule_ReplyWithLongLong(ctx, *token as i64))
            }
            Some(Outcome::TimedOut | Outcome::Info(None)) | None => {
                rm!(RedisModule_ReplyWithNull(ctx))
            }
            Some(Outcome::Info(Some(info))) => {
                replies::reply_info(ctx, info);
                raw::REDISMODULE_OK as c_int
            }
            Some(Outcome::Error(message)) => {
                let text = ffi::error_text(&message.text());
                rm!(RedisModule_ReplyWithError(ctx, text.as_ptr()))
            }
        };
    }
}

/// Frees an `Outcome` that `RedisHost::unblock` handed to Redis, once its answer is sent or
/// its client gone.
extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    ffi::guard((), || {
        if !data.is_null() {
            // SAFETY: boxed by `unblock`; Redis calls this once per unblocked client.
            drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
        }
    })
}

extern "C" fn on_disconnect(ctx: *mut raw::RedisModuleCtx, client: Client) {
    ffi::guard((), || {
        globals::report(&mut RedisHost::new(ctx), Report::Gone(client))
    })
}
