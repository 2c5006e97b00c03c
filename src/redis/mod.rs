//! The Redis host: everything that touches the Redis module API, and so every FFI `unsafe` of
//! the crate, each block with a `// SAFETY:` comment.
//!
//! - [`commands`]: the `LOCK.*` commands: argument parsing, calling the engine, replies.
//! - [`host`]: the engine's [`Host`](crate::lock::Host) and [`Key`](crate::lock::Key) on Redis:
//!   keys, expiry, effects for replicas and the AOF, keyspace events, timers.
//! - [`clients`]: blocked clients (`LOCK.WAIT`) and the timer callback.
//! - [`events`]: keyspace notifications and server events reported to the engine.
//! - [`datatype`]: the `relock-lk` data type (RDB, AOF rewrite, DUMP/RESTORE, memory).
//! - [`globals`]: the module's global state, each item with its rules.
//! - [`server`], [`acl`], [`cluster`]: the server's state, ACL re-checks, cluster redirects.
//! - [`registration`], [`info`]: the command table and the `INFO relock` section.

/// Calls a Redis module API function. `init` has checked that every function this module uses
/// exists on the running server, so the `None` arm cannot be reached after a successful load.
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?)) => {
        match redis_module::raw::$name {
            Some(f) => f($($arg),*),
            None => $crate::redis::missing_api(stringify!($name)),
        }
    };
}

pub mod acl;
pub mod clients;
pub mod cluster;
pub mod commands;
pub mod datatype;
pub mod events;
pub mod globals;
pub mod host;
pub mod info;
pub mod registration;
pub mod server;

use std::os::raw::c_int;

use redis_module::{raw, Context, RedisString, Status};

pub fn missing_api(name: &str) -> ! {
    // Unreachable after `init` succeeded; never unwind into Redis.
    eprintln!("relock: Redis API {name} is missing");
    std::process::abort()
}

/// Runs `f`, turning a panic into `fallback` so that no panic ever crosses into Redis.
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The module's `OnLoad`, after `redis_module!` has registered the data type.
pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(missing) = missing_apis() {
        ctx.log_warning(&format!(
            "relock needs Redis 7.0 or later: {missing} is missing"
        ));
        return Status::Err;
    }
    // HANDLE_IO_ERRORS: a truncated or mistyped value (a bad RESTORE payload) makes the load
    // calls fail softly and `datatype` rejects the value, instead of Redis aborting.
    // NO_IMPLICIT_SIGNAL_MODIFIED: a command that changes nothing must not abort WATCH or
    // invalidate client caches; `host` signals each real change itself.
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
    unsafe { rm!(RedisModule_RegisterInfoFunc(ctx.ctx, Some(info::info))) };
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
