//! Loading the module: check the server, set options, register commands and events.

use std::os::raw::c_int;

use redis_module::{raw, Context, RedisString, Status};

use super::globals::Report;
use super::host::RedisHost;
use super::{config, events, fenced, globals, info, migration, registration, server};

/// The module's `OnLoad`, after `redis_module!` has registered the data type.
pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    globals::note_main_thread();
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
    // HANDLE_ATOMIC_SLOT_MIGRATION (Valkey 9 only; see `migration`): relock can take part in
    // `CLUSTER MIGRATESLOTS`, which Valkey refuses unless every module declares it.
    let slot_migration = events::slot_migration_supported(ctx.ctx);
    let mut options = (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int;
    if slot_migration {
        options |= migration::OPTION_HANDLES_SLOT_MIGRATION;
    }
    // SAFETY: `ctx` is the load context; the options are flags the running server knows (the
    // slot-migration one only on Valkey 9+).
    unsafe { rm!(RedisModule_SetModuleOptions(ctx.ctx, options)) };
    // The configs first: the load fails on a bad value, and Redis (7.0) does not undo the
    // event subscriptions of a module whose load failed, though it unmaps its code (the next
    // write or flush would call into it). Everything that can fail comes before `subscribe`.
    if let Err(e) = config::register(ctx.ctx) {
        ctx.log_warning(&format!("relock: {e}"));
        return Status::Err;
    }
    if let Err(e) = registration::register(ctx.ctx) {
        ctx.log_warning(&format!("relock: {e}"));
        return Status::Err;
    }
    if let Err(e) = events::subscribe(ctx.ctx) {
        ctx.log_warning(&format!("relock: {e}"));
        return Status::Err;
    }
    if slot_migration {
        if let Err(e) = events::subscribe_slot_migration(ctx.ctx) {
            ctx.log_warning(&format!("relock: {e}"));
            return Status::Err;
        }
    }
    // Redis 8.4+'s atomic slot migration (run-time check: the event and `key_trimmed` exist
    // only there).
    if events::redis_slot_migration_supported(ctx.ctx) {
        if let Err(e) = events::subscribe_redis_slot_migration(ctx.ctx) {
            ctx.log_warning(&format!("relock: {e}"));
            return Status::Err;
        }
    }
    globals::configure(|_| ());
    // LOCK.FENCED's table of the server's commands (read again after a module load/unload).
    fenced::load_table(ctx.ctx);
    server::learn_role(ctx.ctx);
    if !globals::is_replica() {
        // Started as a master: the restart grace (if configured) starts now.
        globals::report(&mut RedisHost::new(ctx.ctx), Report::Promoted);
    }
    // SAFETY: `ctx` is the load context; `info` is an `extern "C"` fn that never unwinds.
    unsafe { rm!(RedisModule_RegisterInfoFunc(ctx.ctx, Some(info::info))) };
    events::warn_if_locks_may_be_evicted(ctx.ctx);
    server::learn_role(ctx.ctx);
    Status::Ok
}

/// The first Redis API function this module uses that the server lacks.
fn missing_apis() -> Option<&'static str> {
    missing_apis_of_commands().or_else(missing_apis_of_keys_and_events)
}

/// Returns the name of the first function in the list that the API table lacks.
macro_rules! check {
    ($($name:ident),* $(,)?) => {
        // SAFETY: reads a function pointer the module API table filled in at load.
        $(if unsafe { $name }.is_none() { return Some(stringify!($name)); })*
    };
}

/// Those of commands, clients, replies and the server.
fn missing_apis_of_commands() -> Option<&'static str> {
    use redis_module::raw::*;
    check!(
        RedisModule_ACLCheckCommandPermissions,
        RedisModule_CreateModuleUser,
        RedisModule_SetModuleUserACL,
        RedisModule_GetClusterNodeInfo,
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
        RedisModule_RegisterNumericConfig,
        RedisModule_GetCurrentUserName,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPos,
        RedisModule_RegisterBoolConfig,
        RedisModule_RegisterEnumConfig,
        RedisModule_LoadConfigs,
        RedisModule_InfoAddFieldCString,
        RedisModule_ReplyWithArray,
    );
    None
}

/// Those of keys, values, persistence, timers and events.
fn missing_apis_of_keys_and_events() -> Option<&'static str> {
    use redis_module::raw::*;
    check!(
        RedisModule_DbSize,
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
