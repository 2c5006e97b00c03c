//! relock: a distributed lock that lives inside Redis.
//!
//! The module declaration only: its name, data type, commands, events and INFO section. The
//! lock itself is pure Rust in [`lock`]; README.md documents every command. Loaded into a
//! server (`make run` starts one on 127.0.0.1:6379):
//!
//! ```text
//! $ redis-cli LOCK.ACQUIRE orders:42 worker-a 30000
//! (integer) 1795262129362000          # the fencing token
//! $ redis-cli LOCK.WAIT orders:42 worker-b 30000 5000
//! ... blocks until worker-a releases, then the token of worker-b's hold
//! $ redis-cli LOCK.RELEASE orders:42 worker-a
//! (integer) 0                         # released, and handed to worker-b in the same step
//! ```
//!
//! (A doctest cannot load the crate: outside Redis its allocator is unavailable.)

pub mod lock;

mod acl;
mod cluster;
mod commands;
mod datatype;
mod events;
mod fencing;
mod registration;
mod server;
mod stats;
mod store;
mod waiters;

use datatype::LOCK_TYPE;
use std::os::raw::c_int;

use redis_module::{raw, redis_module, Context, RedisString, Status};

/// Calls a Redis module API function. `init` has checked that every function this module uses
/// exists on the running server, so the `None` arm cannot be reached after a successful load.
#[macro_export]
#[doc(hidden)]
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?)) => {
        match redis_module::raw::$name {
            Some(f) => f($($arg),*),
            None => $crate::missing_api(stringify!($name)),
        }
    };
}

#[doc(hidden)]
pub fn missing_api(name: &str) -> ! {
    // Unreachable after `init` succeeded; never unwind into Redis.
    eprintln!("relock: Redis API {name} is missing");
    std::process::abort()
}

/// Runs `f`, turning a panic into `fallback` so that no panic ever crosses into Redis.
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(missing) = missing_apis() {
        ctx.log_warning(&format!(
            "relock needs Redis 7.0 or later: {missing} is missing"
        ));
        return Status::Err;
    }
    // HANDLE_IO_ERRORS: a truncated or mistyped value (a bad RESTORE payload) makes the load
    // calls fail softly and `datatype` rejects the value, instead of Redis aborting.
    // NO_IMPLICIT_SIGNAL_MODIFIED: a command that changes nothing must not abort WATCH or
    // invalidate client caches; `store` signals each real change itself.
    unsafe {
        rm!(RedisModule_SetModuleOptions(
            ctx.ctx,
            (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
                | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int
        ))
    };
    if let Err(e) = registration::register(ctx.ctx) {
        ctx.log_warning(&format!("relock: {e}"));
        return Status::Err;
    }
    if let Err(e) = events::subscribe(ctx.ctx) {
        ctx.log_warning(&format!("relock: {e}"));
        return Status::Err;
    }
    unsafe { rm!(RedisModule_RegisterInfoFunc(ctx.ctx, Some(stats::info))) };
    events::warn_if_locks_may_be_evicted(ctx.ctx);
    server::learn_role(ctx.ctx);
    Status::Ok
}

/// The first Redis API function this module uses that the server lacks.
fn missing_apis() -> Option<&'static str> {
    use redis_module::raw::*;
    macro_rules! check {
        ($($name:ident),* $(,)?) => {
            $(if unsafe { $name }.is_none() { return Some(stringify!($name)); })*
        };
    }
    check!(
        RedisModule_ACLCheckCommandPermissions,
        RedisModule_AvoidReplicaTraffic,
        RedisModule_BlockClient,
        RedisModule_Call,
        RedisModule_CallReplyStringPtr,
        RedisModule_FreeCallReply,
        RedisModule_FreeModuleUser,
        RedisModule_GetClientId,
        RedisModule_GetClientUserNameById,
        RedisModule_GetModuleUserFromUserName,
        RedisModule_HoldString,
        RedisModule_IsIOError,
        RedisModule_SetModuleOptions,
        RedisModule_SignalModifiedKey,
        RedisModule_CloseKey,
        RedisModule_CreateCommand,
        RedisModule_CreateString,
        RedisModule_CreateTimer,
        RedisModule_DeleteKey,
        RedisModule_DigestAddLongLong,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
        RedisModule_EmitAOF,
        RedisModule_Free,
        RedisModule_FreeString,
        RedisModule_GetAbsExpire,
        RedisModule_GetBlockedClientHandle,
        RedisModule_GetBlockedClientPrivateData,
        RedisModule_GetCommand,
        RedisModule_GetContextFlags,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_GetExpire,
        RedisModule_GetServerInfo,
        RedisModule_ServerInfoGetFieldSigned,
        RedisModule_ServerInfoGetFieldC,
        RedisModule_Log,
        RedisModule_FreeServerInfo,
        RedisModule_ReplicateVerbatim,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetSelectedDb,
        RedisModule_InfoAddFieldULongLong,
        RedisModule_InfoAddSection,
        RedisModule_KeyType,
        RedisModule_LoadStringBuffer,
        RedisModule_LoadUnsigned,
        RedisModule_LogIOError,
        RedisModule_Milliseconds,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_OpenKey,
        RedisModule_RegisterInfoFunc,
        RedisModule_Replicate,
        RedisModule_ReplyWithCString,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_SaveStringBuffer,
        RedisModule_SaveUnsigned,
        RedisModule_SelectDb,
        RedisModule_SetAbsExpire,
        RedisModule_SetCommandInfo,
        RedisModule_SetDisconnectCallback,
        RedisModule_StopTimer,
        RedisModule_StringPtrLen,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_SubscribeToServerEvent,
        RedisModule_UnblockClient,
        RedisModule_WrongArity,
    );
    None
}

#[cfg(not(any(test, feature = "system-alloc")))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(any(test, feature = "system-alloc")))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
// Unit tests run without Redis, so they cannot use its allocator.
#[cfg(any(test, feature = "system-alloc"))]
type Allocator = std::alloc::System;
#[cfg(any(test, feature = "system-alloc"))]
const ALLOCATOR: Allocator = std::alloc::System;

redis_module! {
    name: "relock",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
}
