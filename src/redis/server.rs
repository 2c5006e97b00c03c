//! What state the server is in, and so what the module may do in it. Asked before every write
//! the module makes on its own (timers, deferred jobs) and by every command that changes a lock.
//! Also what the server says of itself: `INFO` fields, and which command is running.
//!
//! | state | commands that change locks | the module's own writes (hand-offs, revokes) |
//! |---|---|---|
//! | master | run | run |
//! | master, writes paused (`CLIENT PAUSE WRITE`, `FAILOVER`, shutdown waiting for replicas) | held back by Redis; `TRYAGAIN` for one that runs anyway (after `CLIENT PAUSE` in the same `EXEC`) | deferred until the pause ends, as Redis defers its own expiry |
//! | loading | refused by Redis (`LOADING`); AOF replay runs | deferred to the end of loading |
//! | replica (read-only or not) | `READONLY`, except what the master or the AOF sends | never: waiters fail with `READONLY` |

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::globals;
pub use crate::lock::State;

fn flags(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: `ctx` is the live context of the running callback.
    unsafe { rm!(RedisModule_GetContextFlags(ctx)) }
}

/// The state, for work the module does on its own (timers, deferred jobs).
pub fn state(ctx: *mut raw::RedisModuleCtx) -> State {
    let flags = flags(ctx);
    if flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0 {
        State::Loading
    } else if flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int == 0 {
        State::Replica
    } else if writes_paused() {
        State::Paused
    } else {
        State::Master
    }
}

/// Whether writes (and with them expiry, eviction and replication traffic) are paused. Redis
/// pauses all of them together, for `CLIENT PAUSE WRITE|ALL`, `FAILOVER`, `CLUSTER FAILOVER`
/// and a shutdown that waits for lagging replicas.
pub fn writes_paused() -> bool {
    // SAFETY: no arguments; reads a server flag.
    unsafe { rm!(RedisModule_AvoidReplicaTraffic()) != 0 }
}

/// When the running command started, as the server cached it (µs): the same for every callback
/// of one command, nested ones included. `None` on Redis 7.0, which has no API for it.
pub fn command_started_us() -> Option<i64> {
    // SAFETY: reads a function pointer the module API table filled in at load (null on 7.0).
    let cached = unsafe { raw::RedisModule_CachedMicroseconds }?;
    // SAFETY: no arguments; reads the server's cached time.
    Some(unsafe { cached() })
}

/// The server's `total_commands_processed`: every command raises it when it ends, nested ones
/// (`MULTI`, scripts) included, so it is the same for every callback of one command. One read
/// of `INFO stats`.
pub fn commands_processed() -> Option<i64> {
    let [processed] = server_info(
        std::ptr::null_mut(),
        c"stats",
        [c"total_commands_processed"],
    );
    processed
}

/// Reads the server's role from `ctx` and records it.
pub fn learn_role(ctx: *mut raw::RedisModuleCtx) {
    globals::set_replica(flags(ctx) & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int == 0);
}

/// Whether the running command may change locks: on a replica only the master's stream and the
/// AOF may, whatever `replica-read-only` says, because a lock granted on a replica is one the
/// master never hears of.
pub fn may_write(ctx: *mut raw::RedisModuleCtx) -> bool {
    if !globals::is_replica() {
        return true;
    }
    let flags = flags(ctx);
    let master = flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0;
    let from_master = flags & raw::REDISMODULE_CTX_FLAGS_REPLICATED as c_int != 0;
    let loading = flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0;
    master || from_master || loading
}

/// Whether a client's command that changes locks must be refused because writes are paused.
/// Redis holds such commands back during a pause, except in one place: a `CLIENT PAUSE` (or
/// `FAILOVER`) queued in `MULTI` pauses writes for the rest of that very `EXEC`. A lock past its
/// TTL is then still in the keyspace while lookups call it missing, and writing it would abort
/// Redis (or, on Valkey, revive the old hold under the new owner). The master's stream and the
/// AOF are never paused.
pub fn paused_for(ctx: *mut raw::RedisModuleCtx) -> bool {
    writes_paused() && !from_replication_or_aof(ctx)
}

/// Whether a client's command is refused what adds to the keyspace, as Redis refuses a
/// `deny-oom` command: used memory is above `maxmemory` after what eviction could free (Redis
/// evicts before every command). The master's stream and the AOF are never refused.
pub fn out_of_memory(ctx: *mut raw::RedisModuleCtx) -> bool {
    flags(ctx) & raw::REDISMODULE_CTX_FLAGS_OOM as c_int != 0 && !from_replication_or_aof(ctx)
}

/// Whether the running command comes from the master's stream or the AOF (no client to block).
pub fn from_replication_or_aof(ctx: *mut raw::RedisModuleCtx) -> bool {
    let flags = flags(ctx);
    flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) as c_int
        != 0
}

/// Whether the running command may block its client: not from the master's stream, the AOF,
/// a script or `MULTI`.
pub fn may_block(ctx: *mut raw::RedisModuleCtx) -> bool {
    let no_block = raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    flags(ctx) & no_block as c_int == 0
}

/// Whether the server runs in cluster mode.
pub fn cluster_enabled(ctx: *mut raw::RedisModuleCtx) -> bool {
    flags(ctx) & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
}

/// Client `id` as `CLIENT LIST` (and `ACL LOG`'s `client-info`) shows it. A script's or a
/// function's commands run on a client `CLIENT LIST` does not show, which carries the caller's
/// user only: then `user=<name> via=script`. Where `CLIENT` is not the server's own command
/// (renamed), nothing is called under that name: `user=<name>`. Empty if neither can be read.
pub fn client_info(ctx: *mut raw::RedisModuleCtx, id: u64) -> String {
    let Ok(id) = std::ffi::CString::new(id.to_string()) else {
        return String::new();
    };
    let own = super::ffi::is_itself(super::ffi::Own::ClientList);
    let listed = own
        .then(|| super::ffi::call_own(ctx, super::ffi::Own::ClientList, &[c"ID", &id]))
        .flatten()
        .map(|line| line.trim_end().to_string())
        .unwrap_or_default();
    if !listed.is_empty() {
        return listed;
    }
    // SAFETY: `ctx` is the running command's context; the name string is freed below.
    unsafe {
        let name = rm!(RedisModule_GetCurrentUserName(ctx));
        if name.is_null() {
            return String::new();
        }
        let user = String::from_utf8_lossy(super::ffi::string_bytes(name)).into_owned();
        rm!(RedisModule_FreeString(ctx, name));
        let via = if own { " via=script" } else { "" };
        format!("user={user}{via}")
    }
}

/// The error a command that would change a lock gets while writes are paused.
pub const PAUSED: &str =
    "TRYAGAIN writes are paused (CLIENT PAUSE or a failover); retry when they resume";

/// Text fields of one `INFO` section, read once; `None` for a field that cannot be read.
pub fn server_info_text<const N: usize>(
    ctx: *mut raw::RedisModuleCtx,
    section: &CStr,
    fields: [&CStr; N],
) -> [Option<String>; N] {
    // SAFETY: `ctx` is live; the section name is a C string.
    let info = unsafe { rm!(RedisModule_GetServerInfo(ctx, section.as_ptr())) };
    if info.is_null() {
        return [const { None }; N];
    }
    let values = fields.map(|field| {
        // SAFETY: `info` is live; a field comes back as a C string we copy, or null.
        unsafe {
            let value = rm!(RedisModule_ServerInfoGetFieldC(info, field.as_ptr()));
            (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
        }
    });
    // SAFETY: `info` was returned by `GetServerInfo` and is freed once, here.
    unsafe { rm!(RedisModule_FreeServerInfo(ctx, info)) };
    values
}

/// Integer fields of one `INFO` section, read once; `None` for a field that cannot be read.
/// `ctx` may be null (Redis then keeps no automatic memory for the reply; it is freed here).
pub fn server_info<const N: usize>(
    ctx: *mut raw::RedisModuleCtx,
    section: &CStr,
    fields: [&CStr; N],
) -> [Option<i64>; N] {
    // SAFETY: `ctx` is live; the section name is a C string.
    let info = unsafe { rm!(RedisModule_GetServerInfo(ctx, section.as_ptr())) };
    if info.is_null() {
        return [None; N];
    }
    let values = fields.map(|field| {
        let mut err: c_int = 0;
        // SAFETY: `info` is live; the field name is a C string; Redis writes `err`.
        let value = unsafe {
            rm!(RedisModule_ServerInfoGetFieldSigned(
                info,
                field.as_ptr(),
                &mut err
            ))
        };
        (err == 0).then_some(value)
    });
    // SAFETY: `info` was returned by `GetServerInfo` and is freed once, here.
    unsafe { rm!(RedisModule_FreeServerInfo(ctx, info)) };
    values
}
