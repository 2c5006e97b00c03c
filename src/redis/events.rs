//! What the module learns from Redis about keys changing behind its back: keyspace
//! notifications (DEL, UNLINK, expiry, eviction, RENAME, MOVE, overwrites) and server events
//! (FLUSHDB/FLUSHALL, SWAPDB, end of loading, becoming a replica).
//!
//! Handlers only look and schedule: on Redis 7.0 a module must not write from inside a keyspace
//! notification, so waking waiters runs as a job after it (see the engine's `schedule`).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::raw;

use super::globals::{self, Report};
use super::host::{self, RedisHost};
use super::migration::{self, EXPORT_COMPLETED, EXPORT_STARTED, IMPORT_COMPLETED};
use super::server::{self, server_info, server_info_text};
use super::{cluster, effects, ffi, unlinked};
use crate::lock::Effect;

/// Every class of keyspace event that can end or replace a lock (not `d`: our own events; not
/// key-miss or new-key events, which fire on reads and creations of unrelated keys).
const WATCHED: c_int = raw::REDISMODULE_NOTIFY_GENERIC
    | raw::REDISMODULE_NOTIFY_STRING
    | raw::REDISMODULE_NOTIFY_LIST
    | raw::REDISMODULE_NOTIFY_SET
    | raw::REDISMODULE_NOTIFY_HASH
    | raw::REDISMODULE_NOTIFY_ZSET
    | raw::REDISMODULE_NOTIFY_EXPIRED
    | raw::REDISMODULE_NOTIFY_EVICTED
    | raw::REDISMODULE_NOTIFY_STREAM;

/// Subscribes to keyspace notifications and server events.
pub fn subscribe(ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
    let ok = raw::REDISMODULE_OK as c_int;
    // SAFETY: `ctx` is the load context; the callback is an `extern "C"` fn that never unwinds.
    if unsafe {
        rm!(RedisModule_SubscribeToKeyspaceEvents(
            ctx,
            WATCHED,
            Some(on_keyspace_event)
        ))
    } != ok
    {
        return Err("cannot subscribe to keyspace events");
    }
    let server_events = [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_LOADING,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_CRON_LOOP,
        raw::REDISMODULE_EVENT_FORK_CHILD,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
        raw::REDISMODULE_EVENT_PERSISTENCE,
        raw::REDISMODULE_EVENT_MODULE_CHANGE,
    ];
    for id in server_events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: as above, for a server event Redis 7.0 knows.
        if unsafe {
            rm!(RedisModule_SubscribeToServerEvent(
                ctx,
                event,
                Some(on_server_event)
            ))
        } != ok
        {
            return Err("cannot subscribe to server events");
        }
    }
    Ok(())
}

extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_OK as c_int, || {
        // SAFETY: Redis passes the key's name, alive for the length of the notification.
        let name = unsafe { ffi::string_bytes(key) };
        let db = ffi::selected_db(ctx);
        // SAFETY: Redis passes the event name as a NUL-terminated C string.
        let event = if event.is_null() {
            c""
        } else {
            unsafe { CStr::from_ptr(event) }
        };
        // A lock Redis just unlinked: this notification says why.
        if let Some(gone) = globals::take_unlinked(db, name, event) {
            // Serialized by this very command (not one that started in the same µs, nor an
            // earlier one of the same EXEC): MIGRATE. One INFO read for all its deletions.
            let serialized = gone.serialized_by.is_some()
                && gone.serialized_by
                    == server::command_started_us().and_then(|started_us| {
                        globals::processed_now(started_us, server::commands_processed)
                    });
            // Valkey 9 deletes the keys of the slots an atomic slot migration handed over.
            let handed_over = event == c"del"
                && globals::with_migrations(|m| m.handed_over(cluster::key_slot(name)))
                    .unwrap_or(false);
            // A key of an import that failed or was cancelled, deleted by the target: its holds
            // were never this node's, and did not move (the source still has them).
            let dropped = (event == c"key_trimmed" || event == c"del")
                && globals::with_migrations(|m| m.import_dropped(cluster::key_slot(name)))
                    .unwrap_or(false);
            if !dropped {
                let reason = unlinked::reason_for(event, serialized || handed_over);
                globals::report(&mut RedisHost::new(ctx), Report::Lost { reason, gone });
            }
        }
        // A shared key's TTL must not outlive its leases: watch what sets or removes TTLs or
        // brings a value in, while shared keys exist, and only for a key that is one (a look
        // per event, no job: `expire` fires for every `SET EX` on the server).
        let arrived = event == c"restore"
            || event == c"copy_to"
            || event == c"rename_to"
            || event == c"move_to";
        let ttl_set = (arrived || event == c"expire" || event == c"persist")
            && globals::shared_values_exist()
            && host::is_shared_lock(ctx, key);
        if ttl_set {
            let name = name.to_vec();
            globals::report(&mut RedisHost::new(ctx), Report::TtlChanged { db, name });
        }
        // A value that arrived is checked against every waiter of its key (see
        // `Engine::value_arrived`); any other change only serves the key.
        globals::key_changed(&mut RedisHost::new(ctx), db, name, arrived);
        keep_the_callers_db(ctx, event, db);
        raw::REDISMODULE_OK as c_int
    })
}

thread_local! {
    /// The db of the last `move_from` notification: the db of the client running `MOVE`.
    static MOVED_FROM: std::cell::Cell<c_int> = const { std::cell::Cell::new(-1) };
}

/// Valkey 8.1 runs keyspace notifications on the client that runs the command, after selecting
/// the notified key's db on it, and never selects its db back (valkey-io/valkey#4024): after a
/// `MOVE`, the user's connection would find itself in the destination db. `move_from` names the
/// source db, which is the client's; `move_to` follows at once, and the client is put back there.
/// Elsewhere the notification runs on a client of its own, and selecting its db changes nothing.
/// (`COPY ... DB n` has the same fault on Valkey 8.1, with no notification of the source db:
/// the deployment docs say so.)
fn keep_the_callers_db(ctx: *mut raw::RedisModuleCtx, event: &CStr, db: c_int) {
    if event == c"move_from" {
        MOVED_FROM.with(|m| m.set(db));
    } else if event == c"move_to" {
        let from = MOVED_FROM.with(|m| m.replace(-1));
        if from >= 0 && from != db {
            ffi::select_db(ctx, from);
        }
    }
}

extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    ffi::guard((), || {
        let id = event.id;
        if id == raw::REDISMODULE_EVENT_FLUSHDB {
            if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_START && !data.is_null() {
                // SAFETY: for FLUSHDB events Redis passes a `RedisModuleFlushInfo`.
                let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
                // Valkey 9 flushes inside a load it has started (`DEBUG RELOAD`, a full sync):
                // no lock is lost then.
                // SAFETY: `ctx` is the server event's context.
                let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
                if flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int == 0
                    && flush_empties_keys(ctx, info.dbnum)
                {
                    globals::note_flush(info.dbnum, server::commands_processed());
                }
                globals::forget_unlinked();
            }
            if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END && !data.is_null() {
                // SAFETY: for FLUSHDB events Redis passes a `RedisModuleFlushInfo`.
                let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
                let db = (info.dbnum >= 0).then_some(info.dbnum);
                globals::report(&mut RedisHost::new(ctx), Report::DbChanged(db));
            }
        } else if id == raw::REDISMODULE_EVENT_SWAPDB {
            if !data.is_null() {
                // SAFETY: for SWAPDB events Redis passes a `RedisModuleSwapDbInfo`.
                let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
                let host = &mut RedisHost::new(ctx);
                if globals::lock_values() > 0 {
                    let (first, second) = (info.dbnum_first, info.dbnum_second);
                    globals::report(host, Report::Swapped(first, second));
                }
                globals::report(host, Report::DbChanged(Some(info.dbnum_first)));
                globals::report(host, Report::DbChanged(Some(info.dbnum_second)));
            }
        } else if id == raw::REDISMODULE_EVENT_LOADING {
            if subevent != raw::REDISMODULE_SUBEVENT_LOADING_ENDED
                && subevent != raw::REDISMODULE_SUBEVENT_LOADING_FAILED
            {
                // The flush before a load in the same command (`DEBUG RELOAD`) loses no lock.
                globals::cancel_flush(server::commands_processed());
                globals::loading_started();
            }
            if subevent == raw::REDISMODULE_SUBEVENT_LOADING_FAILED {
                globals::loading_ended(false);
            }
            if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
                let host = &mut RedisHost::new(ctx);
                // The shared keys loaded get their lapse timers, a slice a turn.
                let shared = globals::loading_ended(true).unwrap_or_default();
                globals::report(host, Report::Loaded(shared));
                globals::report(host, Report::DbChanged(None));
            }
        } else if id == raw::REDISMODULE_EVENT_PERSISTENCE {
            let ended = subevent == raw::REDISMODULE_SUBEVENT_PERSISTENCE_ENDED
                || subevent == raw::REDISMODULE_SUBEVENT_PERSISTENCE_FAILED;
            globals::set_saving(!ended);
        } else if id == raw::REDISMODULE_EVENT_MODULE_CHANGE {
            // A module's commands came or went: LOCK.FENCED reads the table again.
            super::fenced::forget_table();
        } else if id == raw::REDISMODULE_EVENT_CRON_LOOP {
            on_cron(ctx);
        } else if id == raw::REDISMODULE_EVENT_FORK_CHILD
            || id == raw::REDISMODULE_EVENT_REPLICA_CHANGE
        {
            // A fork starts every full sync and every AOF rewrite: from this instant on, what is
            // propagated reaches someone, so every change must go out as its effect.
            globals::set_effects_needed(true);
        } else if id == raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED {
            let replica = subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA;
            globals::set_replica(replica);
            let report = if replica {
                Report::BecameReplica
            } else {
                Report::Promoted
            };
            globals::report(&mut RedisHost::new(ctx), report);
        }
    })
}

/// The server's cron tick (`hz` times a second, between commands).
fn on_cron(ctx: *mut raw::RedisModuleCtx) {
    globals::forget_serialized(server::command_started_us());
    globals::with_migrations(|m| m.tick());
    globals::journal_pending_flush();
    record_counter_after_aof_rewrite(ctx);
    globals::set_effects_needed(effects_needed(ctx));
}

/// Whether the flush about to run empties any key: the db `dbnum` (every db for -1) holds one.
/// Lock values an earlier asynchronous flush (`FLUSHALL ASYNC`, Valkey's default) handed to a
/// background thread count as alive until that thread frees them, though they are in no db any
/// more: without this look, a flush of nothing right after one would be logged as ending holds.
/// O(dbs), on flushes only.
fn flush_empties_keys(ctx: *mut raw::RedisModuleCtx, dbnum: c_int) -> bool {
    let selected = ffi::selected_db(ctx);
    let (first, last) = if dbnum >= 0 {
        (dbnum, dbnum)
    } else {
        (0, c_int::MAX)
    };
    let mut found = false;
    for db in first..=last {
        // Past the last db (`databases`), selecting fails.
        if !ffi::select_db(ctx, db) {
            break;
        }
        if ffi::db_size(ctx) > 0 {
            found = true;
            break;
        }
    }
    ffi::select_db(ctx, selected);
    found
}

/// An AOF rewrite keeps only the locks that exist, and without the RDB preamble it has no aux
/// data, so the token counter would fall back to the largest live token (or the clock floor).
/// After each rewrite starts, append `LOCK.COUNTER last_token`: with Redis 7's multi-part AOF it
/// lands in the incremental file opened for the rewrite, which stays with the new base. Checked
/// on the server's cron tick (`hz` times a second); costs one INFO read per tick while AOF is on.
fn record_counter_after_aof_rewrite(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: `ctx` is the server event's context.
    let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
    let aof_on = flags & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0;
    let master = flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0;
    let loading = flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0;
    // While writes are paused the replication stream must stay still (a failover waits for
    // the replicas to catch up); the next tick after the pause writes the counter.
    if !aof_on || !master || loading || server::writes_paused() {
        return;
    }
    let [Some(rewrites)] = server_info(ctx, c"persistence", [c"aof_rewrites"]) else {
        return;
    };
    if !globals::note_aof_rewrite(rewrites) {
        return;
    }
    let last = globals::read_engine(|engine| engine.last_token()).unwrap_or(0);
    if last > 0 {
        effects::replicate(ctx, std::ptr::null_mut(), &Effect::Counter { token: last });
    }
}

/// Whether anything can receive propagated commands: AOF on, a replication backlog or a
/// replica, or this server being a replica (its AOF). When in doubt, yes.
fn effects_needed(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: `ctx` is the server event's context.
    let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
    let aof_on = flags & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0;
    let master = flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0;
    let child = flags & raw::REDISMODULE_CTX_FLAGS_ACTIVE_CHILD as c_int != 0;
    // A slot being exported atomically (Valkey 9) receives all that is propagated.
    if aof_on || !master || child || globals::with_migrations(|m| m.exporting()).unwrap_or(true) {
        return true;
    }
    // Unknown fields count as someone listening.
    let [replicas, backlog] = server_info(
        ctx,
        c"replication",
        [c"connected_slaves", c"repl_backlog_active"],
    );
    replicas.is_none_or(|n| n != 0) || backlog.is_none_or(|n| n != 0)
}

/// Warns in the server log when Redis may evict locks: every lock has a TTL, so every policy but
/// `noeviction` can evict a held lock when memory runs out, and its waiters are then granted
/// while the holder still believes it holds it. Checked at load (the policy can change later;
/// the deployment docs say the same).
pub fn warn_if_locks_may_be_evicted(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: `ctx` is the load context; the section name is a C string.
    let info = unsafe { rm!(RedisModule_GetServerInfo(ctx, c"memory".as_ptr())) };
    if info.is_null() {
        return;
    }
    // SAFETY: `info` is the live INFO data just read; a field comes back as a C string or null.
    let policy = unsafe {
        let value = rm!(RedisModule_ServerInfoGetFieldC(
            info,
            c"maxmemory_policy".as_ptr()
        ));
        (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
    };
    // SAFETY: `info` was returned by `GetServerInfo` and is freed once, here.
    unsafe { rm!(RedisModule_FreeServerInfo(ctx, info)) };
    if let Some(policy) = policy.filter(|p| p != "noeviction") {
        let message = format!(
            "maxmemory-policy is {policy}: when memory runs out Redis may evict a held \
             lock and relock then hands it to a waiter. Use noeviction where locks live."
        );
        if let Ok(text) = std::ffi::CString::new(message) {
            // SAFETY: format "%s" with one C string.
            unsafe {
                rm!(RedisModule_Log(
                    ctx,
                    c"warning".as_ptr(),
                    c"%s".as_ptr(),
                    text.as_ptr()
                ))
            };
        }
    }
}

/// Whether this server is Valkey 9 or later, the only one with atomic slot migration (see
/// `migration`).
pub fn slot_migration_supported(ctx: *mut raw::RedisModuleCtx) -> bool {
    let [name, version] = server_info_text(ctx, c"server", [c"server_name", c"valkey_version"]);
    let major = version
        .as_deref()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    name.as_deref() == Some("valkey") && major.is_some_and(|m| m >= 9)
}

/// Whether this server is Redis 8.4 or later, which has its own atomic slot migration
/// (`CLUSTER MIGRATION`), its events and the `key_trimmed` notification (see `migration`).
pub fn redis_slot_migration_supported(ctx: *mut raw::RedisModuleCtx) -> bool {
    let [name, version] = server_info_text(ctx, c"server", [c"server_name", c"redis_version"]);
    if name.as_deref().is_some_and(|n| n != "redis") {
        return false;
    }
    let mut parts = version
        .as_deref()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().flatten(), parts.next().flatten());
    matches!((major, minor), (Some(major), Some(minor)) if (major, minor) >= (8, 4))
}

/// Subscribes to Redis 8.4's atomic slot migration event and to `key_trimmed` (Redis 8.4+ only:
/// elsewhere event 18 may mean something else, and the notification class does not exist).
/// Subscribing to `key_trimmed` makes Redis trim a handed-over slot on the main thread, key by
/// key, instead of freeing it in a background thread: the deployment docs say why relock does.
pub fn subscribe_redis_slot_migration(ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
    let ok = raw::REDISMODULE_OK as c_int;
    let event = raw::RedisModuleEvent {
        id: migration::REDIS_EVENT,
        dataver: 1,
    };
    // SAFETY: `ctx` is the load context; the callbacks are `extern "C"` fns that never unwind;
    // the server is Redis 8.4+, which knows this event and this notification class.
    unsafe {
        if rm!(RedisModule_SubscribeToServerEvent(
            ctx,
            event,
            Some(on_redis_slot_migration)
        )) != ok
        {
            return Err("cannot subscribe to atomic slot migration events");
        }
        if rm!(RedisModule_SubscribeToKeyspaceEvents(
            ctx,
            migration::NOTIFY_KEY_TRIMMED,
            Some(on_keyspace_event)
        )) != ok
        {
            return Err("cannot subscribe to key_trimmed notifications");
        }
    }
    Ok(())
}

extern "C" fn on_redis_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    ffi::guard((), || {
        let Some(subevent) = migration::redis_subevent(subevent) else {
            return;
        };
        // SAFETY: for this event Redis passes its migration info, alive for the length of the
        // callback.
        let Some((job, ranges)) = (unsafe { migration::redis_event_data(data) }) else {
            return;
        };
        slot_migration_event(ctx, subevent, job, ranges);
    })
}

/// One atomic slot migration event (as Valkey numbers its subevents), from either server.
fn slot_migration_event(
    ctx: *mut raw::RedisModuleCtx,
    subevent: u64,
    job: String,
    ranges: Vec<(u16, u16)>,
) {
    globals::with_migrations(|m| m.apply(subevent, job, ranges));
    if subevent == EXPORT_STARTED {
        // From now on what is propagated reaches the target.
        globals::set_effects_needed(true);
    }
    if subevent == EXPORT_COMPLETED {
        // The slots are owned elsewhere now: the waiters there are redirected.
        globals::report(&mut RedisHost::new(ctx), Report::DbChanged(None));
    }
    if subevent == IMPORT_COMPLETED {
        // The slots are this node's now: the shared keys that arrived get their lapse timers.
        globals::report(&mut RedisHost::new(ctx), Report::SlotsImported);
    }
}

/// Subscribes to the atomic slot migration events (Valkey 9 and later only: elsewhere the
/// event's number may mean something else).
pub fn subscribe_slot_migration(ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
    let event = raw::RedisModuleEvent {
        id: migration::EVENT,
        dataver: 1,
    };
    // SAFETY: `ctx` is the load context; the callback is an `extern "C"` fn that never unwinds;
    // the server is Valkey 9+, which knows this event.
    let ok = unsafe {
        rm!(RedisModule_SubscribeToServerEvent(
            ctx,
            event,
            Some(on_slot_migration)
        ))
    };
    if ok == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("cannot subscribe to atomic slot migration events")
    }
}

extern "C" fn on_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    ffi::guard((), || {
        // SAFETY: for this event Valkey passes its migration info (dataver 1), alive for the
        // length of the callback.
        let Some((job, ranges)) = (unsafe { migration::event_data(data) }) else {
            return;
        };
        slot_migration_event(ctx, subevent, job, ranges);
    })
}
