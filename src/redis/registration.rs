//! Command table: names, flags, arity, key specs and docs, registered with
//! `RedisModule_CreateCommand` + `RedisModule_SetCommandInfo` (both in Redis 7.0), so that
//! `COMMAND INFO`, `COMMAND DOCS`, `COMMAND GETKEYS`, cluster routing and ACL key patterns work.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use super::commands;

type Callback =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// An argument as `COMMAND DOCS` shows it.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
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
};

const SHARED: Arg = Arg {
    name: c"shared",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    token: Some(c"SHARED"),
    optional: true,
};
const LIMIT: Arg = Arg {
    name: c"limit",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"LIMIT"),
    optional: true,
};
const HOLDER: Arg = Arg {
    name: c"owner",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: true,
};
const OWNER_OPTION: Arg = Arg {
    name: c"owner",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: Some(c"OWNER"),
    optional: true,
};
const COUNT_OPTION: Arg = Arg {
    name: c"count",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"COUNT"),
    optional: true,
};

struct Command {
    name: &'static CStr,
    callback: Callback,
    flags: &'static CStr,
    /// ACL categories, set where the server supports it (Redis 7.2+; 7.0 has no API for it).
    acl: &'static CStr,
    arity: c_int,
    /// Key-spec flags of the one key at argument 1; 0 for a command without keys.
    key_flags: u32,
    summary: &'static CStr,
    complexity: &'static CStr,
    args: &'static [Arg],
}

const RW: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS;

const COMMANDS: &[Command] = &[
    Command {
        name: c"LOCK.ACQUIRE",
        callback: commands::acquire_cmd,
        flags: c"write deny-oom fast",
        acl: c"write fast",
        arity: -4,
        key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
        summary: c"Takes a lock if it is free (non-reentrant; idempotent for its holder), exclusively or SHARED (LIMIT n: a semaphore). Replies the fencing token or nil.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER, TTL, SHARED, LIMIT],
    },
    Command {
        name: c"LOCK.REENTER",
        callback: commands::reenter_cmd,
        flags: c"write deny-oom fast",
        acl: c"write fast",
        arity: -4,
        key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
        summary: c"Takes a lock or enters it once more (reentrant), exclusively or SHARED (LIMIT n). Replies the reentrancy count or nil.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER, TTL, SHARED, LIMIT],
    },
    Command {
        name: c"LOCK.RELEASE",
        callback: commands::release_cmd,
        flags: c"write fast",
        acl: c"write fast",
        arity: 3,
        key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE,
        summary: c"Leaves a lock once; at count 0 the lock passes to the first waiter. Replies the remaining count or nil.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER],
    },
    Command {
        name: c"LOCK.RENEW",
        callback: commands::renew_cmd,
        flags: c"write fast",
        acl: c"write fast",
        arity: 4,
        key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
        summary: c"Sets the remaining lifetime of a lock its owner holds. Replies the fencing token or nil.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER, TTL],
    },
    Command {
        name: c"LOCK.WAIT",
        callback: commands::wait_cmd,
        flags: c"write deny-oom blocking",
        acl: c"write blocking",
        arity: -5,
        key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE,
        summary: c"Takes a lock, exclusively or SHARED (LIMIT n), waiting in FIFO order until it is handed over or the timeout passes. Replies the fencing token or nil.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER, TTL, TIMEOUT, SHARED, LIMIT],
    },
    Command {
        name: c"LOCK.INFO",
        callback: commands::info_cmd,
        flags: c"readonly fast",
        acl: c"read fast",
        arity: 2,
        key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        summary: c"Shows a lock: owner, token, count, ttl, waiters, mode, holders, limit. Replies nil when there is no lock.",
        complexity: c"O(1); O(log H) for a shared key with H holders",
        args: &[KEY],
    },
    Command {
        name: c"LOCK.HOLDERS",
        callback: commands::holders_cmd,
        flags: c"readonly",
        acl: c"read",
        arity: -2,
        key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        summary: c"Lists a lock's holders in grant order (owner, token, count, ttl); OWNER answers for one. Replies nil when there is no lock.",
        complexity: c"O((n + log H) log(n + log H)) for n of H holders listed (COUNT 0: O(H log H)); O(1) with OWNER",
        args: &[KEY, OWNER_OPTION, COUNT_OPTION],
    },
    Command {
        name: c"LOCK.FORCERELEASE",
        callback: commands::forcerelease_cmd,
        flags: c"write admin",
        acl: c"write admin dangerous",
        arity: -2,
        key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
        summary: c"Breaks every hold of a lock, or only the given owner's, handing it on to the waiters. Replies the number of holds removed.",
        complexity: c"O(H) for H holders; O(log H) with an owner",
        args: &[KEY, HOLDER],
    },
    Command {
        name: c"LOCK.APPLY",
        callback: commands::apply_cmd,
        flags: c"write deny-oom admin",
        acl: c"write admin dangerous",
        arity: -5,
        key_flags: raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
        summary: c"Internal: sets a lock exactly as given. Replicas and the AOF receive lock changes in this form.",
        complexity: c"O(1)",
        args: &[KEY, OWNER, TOKEN, COUNT, PXAT, SHARED, LIMIT],
    },
    Command {
        name: c"LOCK.DROP",
        callback: commands::drop_cmd,
        flags: c"write admin",
        acl: c"write admin dangerous",
        arity: 3,
        key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
        summary: c"Internal: removes one holder of a shared lock exactly. Replicas and the AOF receive shared releases in this form.",
        complexity: c"O(log H) with H holders",
        args: &[KEY, OWNER],
    },
    Command {
        name: c"LOCK.COUNTER",
        callback: commands::counter_cmd,
        flags: c"write admin",
        acl: c"write admin dangerous",
        arity: 2,
        key_flags: 0,
        summary: c"Internal: raises the fencing-token counter to at least the given token. Written to the AOF after each rewrite.",
        complexity: c"O(1)",
        args: &[TOKEN],
    },
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
    let ok = raw::REDISMODULE_OK as c_int;
    let key_at = c_int::from(command.key_flags != 0);
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
    if created != ok {
        return Err("cannot create command");
    }
    // SAFETY: the command was just created under this name.
    let handle = unsafe { rm!(RedisModule_GetCommand(ctx, command.name.as_ptr())) };
    if handle.is_null() {
        return Err("cannot find the command just created");
    }

    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // One key, at argument 1 (none for a keyless command); a zeroed spec ends the array.
    let mut key_specs = [
        raw::RedisModuleCommandKeySpec {
            notes: ptr::null(),
            flags: u64::from(command.key_flags),
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
        },
        // SAFETY: an all-zero key spec ends the list, as Redis expects (plain C data).
        unsafe { std::mem::zeroed() },
    ];
    let mut args: Vec<raw::RedisModuleCommandArg> = command
        .args
        .iter()
        .map(|a| raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: a.kind,
            key_spec_index: if a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY {
                0
            } else {
                -1
            },
            token: a.token.map_or(ptr::null(), CStr::as_ptr),
            summary: ptr::null(),
            since: ptr::null(),
            flags: if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            },
            deprecated_since: ptr::null(),
            subargs: ptr::null_mut(),
            display_text: ptr::null(),
        })
        .collect();
    // SAFETY: an all-zero argument ends the list, as Redis expects (plain C data).
    args.push(unsafe { std::mem::zeroed() });

    let mut info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: command.summary.as_ptr(),
        complexity: command.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
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
    if unsafe { rm!(RedisModule_SetCommandInfo(handle, &mut info)) } != ok {
        return Err("cannot set command info (key specs, arity, docs)");
    }
    // Checked at run time: this API exists from Redis 7.2 on. On 7.0 module commands belong to
    // no ACL category, so e.g. `-@admin` does not deny LOCK.FORCERELEASE there (deny it by name).
    // SAFETY: reads a function pointer the module API table filled in at load (null on 7.0).
    if let Some(set_categories) = unsafe { raw::RedisModule_SetCommandACLCategories } {
        if unsafe { set_categories(handle, command.acl.as_ptr()) } != ok {
            return Err("cannot set ACL categories");
        }
    }
    Ok(())
}
