//! The command table, the one home of each command's facts: name, handler, flags, arity, key
//! spec and docs. Registration reads it (`RedisModule_CreateCommand` +
//! `RedisModule_SetCommandInfo`, both in Redis 7.0, so that `COMMAND INFO`, `COMMAND DOCS`,
//! `COMMAND GETKEYS`, cluster routing and ACL key patterns work), and so does every call
//! (`commands::dispatch` checks the arity and flags given here).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use super::commands::{self, Arg, Command};
use super::{fenced, ffi};

/// The C callback of the table's command `$command`: hands the call to `commands::dispatch`.
macro_rules! callback {
    ($name:ident, $command:ident) => {
        extern "C" fn $name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            commands::dispatch(&$command, ctx, argv, argc)
        }
    };
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
    }
}

const KEY: Arg = arg(
    c"key",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
);
const OWNER: Arg = arg(
    c"owner",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
);
const TTL: Arg = arg(
    c"ttl_ms",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const TIMEOUT: Arg = arg(
    c"timeout_ms",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const TOKEN: Arg = arg(
    c"token",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const COUNT: Arg = arg(
    c"count",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const PXAT: Arg = Arg {
    name: c"unix-time-milliseconds",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    token: Some(c"PXAT"),
    optional: true,
    multiple: false,
};

const SHARED: Arg = Arg {
    name: c"shared",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    token: Some(c"SHARED"),
    optional: true,
    multiple: false,
};
const LIMIT: Arg = Arg {
    name: c"limit",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"LIMIT"),
    optional: true,
    multiple: false,
};
const PERMITS: Arg = Arg {
    name: c"permits",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"PERMITS"),
    optional: true,
    multiple: false,
};
const GRANTED: Arg = Arg {
    name: c"granted-unix-time-milliseconds",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    token: Some(c"GRANTED"),
    optional: true,
    multiple: false,
};
const HOLDER: Arg = Arg {
    name: c"owner",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: true,
    multiple: false,
};
const OWNER_OPTION: Arg = Arg {
    name: c"owner",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: Some(c"OWNER"),
    optional: true,
    multiple: false,
};
const COUNT_OPTION: Arg = Arg {
    name: c"count",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"COUNT"),
    optional: true,
    multiple: false,
};

const FROM: Arg = Arg {
    name: c"count",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"FROM"),
    optional: true,
    multiple: false,
};

const RW: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS;

const ACQUIRE: Command = Command {
    name: c"LOCK.ACQUIRE",
    handler: commands::acquire,
    callback: acquire_callback,
    flags: c"write deny-oom fast",
    acl: c"write fast",
    arity: -4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary: c"Takes a lock if it is free (non-reentrant; idempotent for its holder), exclusively or SHARED (LIMIT n: a semaphore; PERMITS p of it at once). Replies the fencing token or nil.",
    complexity: c"O(log H) with H holders",
    since: c"0.1.0",
    args: &[KEY, OWNER, TTL, SHARED, LIMIT, PERMITS],
};
callback!(acquire_callback, ACQUIRE);

const REENTER: Command = Command {
    name: c"LOCK.REENTER",
    handler: commands::reenter,
    callback: reenter_callback,
    // Not deny-oom: out of memory, the engine refuses what adds a hold or a level, and still
    // answers a repeat of a step (`FROM c`), which adds nothing.
    flags: c"write fast",
    acl: c"write fast",
    arity: -4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary: c"Takes a lock or enters it once more (reentrant), exclusively or SHARED (LIMIT n, PERMITS p); FROM c names the count before the step, so that a repeat changes nothing. Replies the reentrancy count or nil.",
    complexity: c"O(log H) with H holders",
    since: c"0.1.0",
    args: &[KEY, OWNER, TTL, SHARED, LIMIT, PERMITS, FROM],
};
callback!(reenter_callback, REENTER);

const RELEASE: Command = Command {
    name: c"LOCK.RELEASE",
    handler: commands::release,
    callback: release_callback,
    flags: c"write fast",
    acl: c"write fast",
    arity: -3,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: false,
    inner_keys: false,
    summary: c"Leaves a lock once; at count 0 the lock passes to the first waiter. FROM c names the count before the step, so that a repeat changes nothing. Replies the remaining count or nil.",
    complexity: c"O(log H) with H holders",
    since: c"0.1.0",
    args: &[KEY, OWNER, FROM],
};
callback!(release_callback, RELEASE);

const RENEW: Command = Command {
    name: c"LOCK.RENEW",
    handler: commands::renew,
    callback: renew_callback,
    flags: c"write fast",
    acl: c"write fast",
    arity: 4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary:
        c"Sets the remaining lifetime of a lock its owner holds. Replies the fencing token or nil.",
    complexity: c"O(log H) with H holders",
    since: c"0.1.0",
    args: &[KEY, OWNER, TTL],
};
callback!(renew_callback, RENEW);

const WAIT: Command = Command {
    name: c"LOCK.WAIT",
    handler: commands::wait,
    callback: wait_callback,
    flags: c"write deny-oom blocking",
    acl: c"write blocking",
    arity: -5,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary: c"Takes a lock, exclusively or SHARED (LIMIT n, PERMITS p), waiting in FIFO order until it is handed over or the timeout passes. Replies the fencing token or nil.",
    complexity: c"O(log H) with H holders",
    since: c"0.1.0",
    args: &[KEY, OWNER, TTL, TIMEOUT, SHARED, LIMIT, PERMITS],
};
callback!(wait_callback, WAIT);

const DOWNGRADE: Command = Command {
    name: c"LOCK.DOWNGRADE",
    handler: commands::downgrade,
    callback: downgrade_callback,
    flags: c"write fast",
    acl: c"write fast",
    arity: 3,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary: c"Makes the owner's exclusive hold a shared one (same token, lease and count) and grants the shared waiters at the head of the queue with it. Replies the token or nil.",
    complexity: c"O(1) plus O(k log H) for k waiters granted",
    since: c"0.2.0",
    args: &[KEY, OWNER],
};
callback!(downgrade_callback, DOWNGRADE);

const INFO: Command = Command {
    name: c"LOCK.INFO",
    handler: commands::info,
    callback: info_callback,
    flags: c"readonly fast",
    acl: c"read fast",
    arity: 2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: false,
    summary: c"Shows a lock: owner, token, count, ttl, waiters, mode, holders, limit. Replies nil when there is no lock.",
    complexity: c"O(1); O(log H) for a shared key with H holders",
    since: c"0.1.0",
    args: &[KEY],
};
callback!(info_callback, INFO);

const KNOWN_TOKEN: Arg = arg(
    c"known_token",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);

const OBSERVE: Command = Command {
    name: c"LOCK.OBSERVE",
    handler: commands::observe,
    callback: observe_callback,
    flags: c"readonly blocking",
    acl: c"read slow blocking",
    arity: 4,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: false,
    summary: c"Replies LOCK.INFO's reply at once if the lock's token is not known_token (0: no holder), else when it changes, the hold ends or the timeout passes. Exclusive locks only.",
    complexity: c"O(1); a change wakes each of the key's O(N) observers",
    since: c"0.2.0",
    args: &[KEY, KNOWN_TOKEN, TIMEOUT],
};
callback!(observe_callback, OBSERVE);

const HOLDERS: Command = Command {
    name: c"LOCK.HOLDERS",
    handler: commands::holders,
    callback: holders_callback,
    flags: c"readonly",
    acl: c"read",
    arity: -2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: false,
    summary: c"Lists a lock's holders in grant order (owner, token, count, ttl); OWNER answers for one. Replies nil when there is no lock.",
    complexity: c"O((n + log H) log(n + log H)) for n of H holders listed (COUNT 0: O(H log H)); O(1) with OWNER",
    since: c"0.2.0",
    args: &[KEY, OWNER_OPTION, COUNT_OPTION],
};
callback!(holders_callback, HOLDERS);

const FORCERELEASE: Command = Command {
    name: c"LOCK.FORCERELEASE",
    handler: commands::force_release,
    callback: forcerelease_callback,
    flags: c"write admin",
    acl: c"write admin dangerous",
    arity: -2,
    key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: false,
    inner_keys: false,
    summary: c"Breaks every hold of a lock, or only the given owner's, handing it on to the waiters. Replies the number of holds removed.",
    complexity: c"O(H) for H holders; O(log H) with an owner",
    since: c"0.1.0",
    args: &[KEY, HOLDER],
};
callback!(forcerelease_callback, FORCERELEASE);

const APPLY: Command = Command {
    name: c"LOCK.APPLY",
    handler: commands::apply,
    callback: apply_callback,
    flags: c"write deny-oom admin",
    acl: c"write admin dangerous",
    arity: -5,
    key_flags: raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: false,
    inner_keys: false,
    summary: c"Internal: sets a lock exactly as given. Replicas and the AOF receive lock changes in this form.",
    complexity: c"O(1)",
    since: c"0.1.0",
    args: &[KEY, OWNER, TOKEN, COUNT, PXAT, GRANTED, SHARED, LIMIT, PERMITS],
};
callback!(apply_callback, APPLY);

const DROP: Command = Command {
    name: c"LOCK.DROP",
    handler: commands::drop_holder,
    callback: drop_callback,
    flags: c"write admin",
    acl: c"write admin dangerous",
    arity: 3,
    key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: false,
    inner_keys: false,
    summary: c"Internal: removes one holder of a shared lock exactly. Replicas and the AOF receive shared releases in this form.",
    complexity: c"O(log H) with H holders",
    since: c"0.2.0",
    args: &[KEY, OWNER],
};
callback!(drop_callback, DROP);

const COUNTER: Command = Command {
    name: c"LOCK.COUNTER",
    handler: commands::counter,
    callback: counter_callback,
    flags: c"write admin",
    acl: c"write admin dangerous",
    arity: 2,
    key_flags: 0,
    numkeys: false,
    inner_keys: false,
    summary: c"Internal: raises the fencing-token counter to at least the given token. Written to the AOF after each rewrite.",
    complexity: c"O(1)",
    since: c"0.1.0",
    args: &[TOKEN],
};
callback!(counter_callback, COUNTER);

const WAITERS: Command = Command {
    name: c"LOCK.WAITERS",
    handler: commands::waiters,
    callback: waiters_callback,
    flags: c"readonly",
    acl: c"read",
    arity: -2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: false,
    summary: c"Lists a lock's queue in order: owner, mode, limit, permits, client, waited, timeout, ttl. An empty array when nobody waits.",
    complexity: c"O(min(n, N)) for n of N waiters listed",
    since: c"0.2.0",
    args: &[KEY, COUNT_OPTION],
};
callback!(waiters_callback, WAITERS);

const LOG_ARG: Arg = Arg {
    name: c"count-or-reset",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: true,
    multiple: false,
};

const LOG: Command = Command {
    name: c"LOCK.LOG",
    handler: commands::log,
    callback: log_callback,
    flags: c"admin allow-loading allow-stale",
    acl: c"admin slow dangerous",
    arity: -1,
    key_flags: 0,
    numkeys: false,
    inner_keys: false,
    summary: c"Shows the journal of holds that ended other than by their owner, newest first (count, default 10), or empties it (RESET).",
    complexity: c"O(n) for n entries listed",
    since: c"0.2.0",
    args: &[LOG_ARG],
};
callback!(log_callback, LOG);

const HISTORY_COUNT: Arg = Arg {
    name: c"count",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    optional: true,
    multiple: false,
};

const HISTORY: Command = Command {
    name: c"LOCK.HISTORY",
    handler: commands::history,
    callback: history_callback,
    flags: c"readonly",
    acl: c"read",
    arity: -2,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: false,
    summary: c"Shows the journal's entries for one key, newest first (count, default 10): why its holds ended.",
    complexity: c"O(L) for a journal of L entries",
    since: c"0.2.0",
    args: &[KEY, HISTORY_COUNT],
};
callback!(history_callback, HISTORY);

const STATS_ARG: Arg = Arg {
    name: c"count-or-reset",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: true,
    multiple: false,
};

const STATS: Command = Command {
    name: c"LOCK.STATS",
    handler: commands::stats,
    callback: stats_callback,
    flags: c"admin allow-loading allow-stale",
    acl: c"admin slow dangerous",
    arity: -1,
    key_flags: 0,
    numkeys: false,
    inner_keys: false,
    summary: c"Shows the hottest keys by total wait (COUNT n, default 10): waits, granted, timeouts, contended, wait_ms_total with its error bound, wait_ms_max; or clears the statistics (RESET).",
    complexity: c"O(k + n log n) for a table of k keys",
    since: c"0.2.0",
    args: &[STATS_ARG],
};
callback!(stats_callback, STATS);

const NUMKEYS: Arg = arg(
    c"numkeys",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const KEYS: Arg = Arg {
    name: c"key",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
    token: None,
    optional: false,
    multiple: true,
};

const MACQUIRE: Command = Command {
    name: c"LOCK.MACQUIRE",
    handler: commands::macquire,
    callback: macquire_callback,
    flags: c"write deny-oom fast getkeys-api",
    acl: c"write fast",
    arity: -5,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: true,
    inner_keys: false,
    summary: c"Takes exclusive locks on every key or on none (one slot in a cluster); the new holds share one fencing token. Replies each key's token in argument order, or nil.",
    complexity: c"O(N) for N keys",
    since: c"0.2.0",
    args: &[NUMKEYS, KEYS, OWNER, TTL],
};
callback!(macquire_callback, MACQUIRE);

const MRELEASE: Command = Command {
    name: c"LOCK.MRELEASE",
    handler: commands::mrelease,
    callback: mrelease_callback,
    flags: c"write fast getkeys-api",
    acl: c"write fast",
    arity: -4,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE,
    numkeys: true,
    inner_keys: false,
    summary: c"Releases the owner's hold on each key once, as LOCK.RELEASE (FROM c: on each key). Replies how many of the keys the owner held.",
    complexity: c"O(N) for N keys, plus the hand-offs",
    since: c"0.2.0",
    args: &[NUMKEYS, KEYS, OWNER, FROM],
};
callback!(mrelease_callback, MRELEASE);

const MRENEW: Command = Command {
    name: c"LOCK.MRENEW",
    handler: commands::mrenew,
    callback: mrenew_callback,
    flags: c"write fast getkeys-api",
    acl: c"write fast",
    arity: -5,
    key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
    numkeys: true,
    inner_keys: false,
    summary: c"Renews the owner's hold on each key, as LOCK.RENEW. Replies how many of the keys the owner held.",
    complexity: c"O(N) for N keys",
    since: c"0.2.0",
    args: &[NUMKEYS, KEYS, OWNER, TTL],
};
callback!(mrenew_callback, MRENEW);

const COMMAND_ARG: Arg = arg(
    c"command",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
);
const COMMAND_ARGS: Arg = Arg {
    name: c"arg",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: true,
    multiple: true,
};

const FENCED: Command = Command {
    name: c"LOCK.FENCED",
    handler: fenced::fenced,
    callback: fenced_callback,
    // Neither write, readonly nor deny-oom: the inner command's own flags decide (RM_Call
    // checks them); may-replicate so that CLIENT PAUSE WRITE and FAILOVER hold it back.
    flags: c"may-replicate getkeys-api",
    acl: c"write slow",
    arity: -4,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    numkeys: false,
    inner_keys: true,
    summary: c"Runs the command only if token is the token of a live hold on key (the exclusive holder's or any shared holder's), atomically with that check, as the caller. Replies the command's reply, or a FENCED error and runs nothing.",
    complexity: c"O(1) plus the command's; O(H) for a shared key with H holders",
    since: c"0.2.0",
    args: &[KEY, TOKEN, COMMAND_ARG, COMMAND_ARGS],
};

/// `LOCK.FENCED`'s C callback: its keys (the getkeys-api request) or the command.
extern "C" fn fenced_callback(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    if fenced::keys_asked(ctx) {
        return ffi::guard(raw::REDISMODULE_OK as c_int, || {
            fenced::key_positions(ctx, argv, argc)
        });
    }
    commands::dispatch(&FENCED, ctx, argv, argc)
}

/// Every command, in registration order.
const COMMANDS: [&Command; 21] = [
    &ACQUIRE,
    &REENTER,
    &RELEASE,
    &RENEW,
    &WAIT,
    &INFO,
    &HOLDERS,
    &FORCERELEASE,
    &APPLY,
    &DROP,
    &COUNTER,
    &WAITERS,
    &LOG,
    &HISTORY,
    &STATS,
    &DOWNGRADE,
    &MACQUIRE,
    &MRELEASE,
    &MRENEW,
    &OBSERVE,
    &FENCED,
];

/// Registers every command with its metadata.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    for command in COMMANDS {
        register_one(ctx, command)
            .map_err(|e| format!("{}: {e}", command.name.to_string_lossy()))?;
    }
    Ok(())
}

fn register_one(ctx: *mut raw::RedisModuleCtx, command: &Command) -> Result<(), &'static str> {
    let handle = create(ctx, command)?;
    set_info(handle, command)?;
    set_acl_categories(handle, command)
}

/// Creates the command; its handle.
fn create(
    ctx: *mut raw::RedisModuleCtx,
    command: &Command,
) -> Result<*mut raw::RedisModuleCommand, &'static str> {
    // A numkeys command's keys are found by its key spec (Redis marks it movablekeys).
    let key_at = c_int::from(command.key_flags != 0 && !command.numkeys);
    // SAFETY: `ctx` is the load context; the name, flags and callback are static.
    let created = unsafe {
        rm!(RedisModule_CreateCommand(
            ctx,
            command.name.as_ptr(),
            Some(command.callback),
            command.flags.as_ptr(),
            key_at,
            key_at,
            key_at
        ))
    };
    if created != raw::REDISMODULE_OK as c_int {
        return Err("cannot create command");
    }
    // SAFETY: the command was just created under this name.
    let handle = unsafe { rm!(RedisModule_GetCommand(ctx, command.name.as_ptr())) };
    if handle.is_null() {
        return Err("cannot find the command just created");
    }
    Ok(handle)
}

/// The one key spec of a command with keys: the key at argument 1, or the keys after the
/// numkeys at argument 1.
fn key_spec(command: &Command) -> raw::RedisModuleCommandKeySpec {
    let mut spec = one_key_spec(command.key_flags);
    if command.numkeys {
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        spec.fk = raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                keynumidx: 0,
                firstkey: 1,
                keystep: 1,
            },
        };
    }
    spec
}

/// `LOCK.FENCED`'s second key spec: from argument 3 on, `INCOMPLETE`, so that Redis asks the
/// getkeys-api callback (`fenced::key_positions`) for the inner command's keys.
fn inner_key_spec() -> raw::RedisModuleCommandKeySpec {
    let mut spec = one_key_spec(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INCOMPLETE);
    spec.bs = raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
        index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 3 },
    };
    spec
}

/// The key spec of one key at argument 1.
fn one_key_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: ptr::null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}

/// An argument as `COMMAND DOCS` shows it.
fn doc_arg(a: &Arg) -> raw::RedisModuleCommandArg {
    let key = a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
    raw::RedisModuleCommandArg {
        name: a.name.as_ptr(),
        type_: a.kind,
        key_spec_index: if key { 0 } else { -1 },
        token: a.token.map_or(ptr::null(), CStr::as_ptr),
        summary: ptr::null(),
        since: ptr::null(),
        flags: if a.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
        } else {
            0
        } | if a.multiple {
            raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int
        } else {
            0
        },
        deprecated_since: ptr::null(),
        subargs: ptr::null_mut(),
        display_text: ptr::null(),
    }
}

/// Key specs, arity and docs (`COMMAND INFO`, `COMMAND DOCS`, `COMMAND GETKEYS`).
fn set_info(handle: *mut raw::RedisModuleCommand, command: &Command) -> Result<(), &'static str> {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: an all-zero key spec (argument) ends its list, as Redis expects (plain C data).
    let (end_spec, end_arg) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: as above.
    let end_spec_2 = unsafe { std::mem::zeroed() };
    let mut key_specs = [key_spec(command), end_spec, end_spec_2];
    if command.inner_keys {
        key_specs[1] = inner_key_spec();
    }
    let mut args: Vec<raw::RedisModuleCommandArg> = command.args.iter().map(doc_arg).collect();
    args.push(end_arg);
    let mut info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: command.summary.as_ptr(),
        complexity: command.complexity.as_ptr(),
        since: command.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: command.arity,
        key_specs: if command.key_flags != 0 {
            key_specs.as_mut_ptr()
        } else {
            ptr::null_mut()
        },
        args: args.as_mut_ptr(),
    };
    // Redis copies everything it keeps, so the locals may go away after this call.
    // SAFETY: `handle` is the command's; `info` and everything it points to live until the call returns.
    if unsafe { rm!(RedisModule_SetCommandInfo(handle, &mut info)) } != raw::REDISMODULE_OK as c_int
    {
        return Err("cannot set command info (key specs, arity, docs)");
    }
    Ok(())
}

/// ACL categories, where the server has the API (Redis 7.2 on). On 7.0 module commands belong
/// to no ACL category, so e.g. `-@admin` does not deny LOCK.FORCERELEASE there (deny it by name).
fn set_acl_categories(
    handle: *mut raw::RedisModuleCommand,
    command: &Command,
) -> Result<(), &'static str> {
    // SAFETY: reads a function pointer the module API table filled in at load (null on 7.0).
    if let Some(set_categories) = unsafe { raw::RedisModule_SetCommandACLCategories } {
        // SAFETY: `handle` is the command's; the categories are a static C string.
        if unsafe { set_categories(handle, command.acl.as_ptr()) } != raw::REDISMODULE_OK as c_int {
            return Err("cannot set ACL categories");
        }
    }
    Ok(())
}
