//! The module's configuration, through the module config API of Redis 7.0 (`CONFIG SET/GET
//! relock.*`, `redis.conf`, `--relock.log-max-len 100`, `MODULE LOADEX ... CONFIG ...`):
//!
//! - `relock.log-max-len` (default 1024, 0 turns the journal off, at most 100000);
//! - `relock.log-reasons` (default `all`; any of the reasons, space-separated, or `none`);
//! - `relock.stats` (`yes` | `no`, default yes);
//! - `relock.stats-keys` (default 1000, at most 100000): the size of `LOCK.STATS`'s table;
//! - `relock.restart-grace-ms` (default 0, at most 10^12): the restart grace.
//!
//! The values live in the engine's `Watch`, which keeps its own bounds; these callbacks only
//! read and set them.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong, c_void};

use redis_module::raw;

use super::ffi;
use super::globals;
use crate::lock::{args, contention, journal, Reason, Reasons, Watch};

/// Registers the configs and applies what the server was given for them at load.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
    let ok = raw::REDISMODULE_OK as c_int;
    let flags = raw::REDISMODULE_CONFIG_DEFAULT;
    let log_len = register_number(
        ctx,
        c"log-max-len",
        journal::DEFAULT_LEN as c_longlong,
        journal::MAX_LEN as c_longlong,
    );
    let stats_keys = register_number(
        ctx,
        c"stats-keys",
        contention::DEFAULT_KEYS as c_longlong,
        contention::MAX_KEYS as c_longlong,
    );
    let grace = register_number(ctx, c"restart-grace-ms", 0, args::MAX_TTL_MS as c_longlong);
    // SAFETY: `ctx` is the load context; the name is a static C string; the callbacks are
    // `extern "C"` fns that never unwind; no private data. (The same for the one below.)
    let stats = unsafe {
        rm!(RedisModule_RegisterBoolConfig(
            ctx,
            c"stats".as_ptr(),
            1,
            flags,
            Some(get_bool),
            Some(set_bool),
            None,
            std::ptr::null_mut()
        ))
    };
    let (mut names, values) = reason_names();
    // SAFETY: as for `stats`; `names` and `values` outlive the call (Redis copies them).
    let reasons = unsafe {
        rm!(RedisModule_RegisterEnumConfig(
            ctx,
            c"log-reasons".as_ptr(),
            Reasons::ALL.0 as c_int,
            flags | raw::REDISMODULE_CONFIG_BITFLAGS,
            names.as_mut_ptr(),
            values.as_ptr(),
            names.len() as c_int,
            Some(get_enum),
            Some(set_enum),
            None,
            std::ptr::null_mut()
        ))
    };
    if [log_len, stats_keys, grace, stats, reasons]
        .iter()
        .any(|&r| r != ok)
    {
        return Err("cannot register the module configs");
    }
    // SAFETY: the load context, after every config is registered.
    if unsafe { rm!(RedisModule_LoadConfigs(ctx)) } != ok {
        return Err("bad value for a relock.* config");
    }
    Ok(())
}

/// Registers the numeric config `relock.<name>`, from 0 to `max`, `default` unless the
/// server's configuration says otherwise.
fn register_number(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    default: c_longlong,
    max: c_longlong,
) -> c_int {
    // SAFETY: `ctx` is the load context; the name is a static C string; the callbacks are
    // `extern "C"` fns that never unwind; no private data.
    unsafe {
        rm!(RedisModule_RegisterNumericConfig(
            ctx,
            name.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT,
            0,
            max,
            Some(get_number),
            Some(set_number),
            None,
            std::ptr::null_mut()
        ))
    }
}

/// The names of `relock.log-reasons` and their bits: `all` first (so that reading back every
/// bit says `all`), `none`, then each reason.
fn reason_names() -> (Vec<*const c_char>, Vec<c_int>) {
    const NAMES: [&CStr; 9] = [
        c"expired",
        c"forcereleased",
        c"deleted",
        c"evicted",
        c"revoked",
        c"restored",
        c"moved",
        c"flushed",
        c"swapped",
    ];
    let mut names = vec![c"all".as_ptr(), c"none".as_ptr()];
    let mut values = vec![Reasons::ALL.0 as c_int, 0];
    for (name, reason) in NAMES.iter().zip(Reason::ALL) {
        debug_assert_eq!(name.to_str().ok(), Some(reason.name()));
        names.push(name.as_ptr());
        values.push(reason.bit() as c_int);
    }
    (names, values)
}

/// The config's name without the module prefix.
///
/// # Safety
/// `name` is the NUL-terminated name Redis passes to a config callback.
unsafe fn short_name<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // SAFETY: the caller's promise.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    name.strip_prefix(b"relock.").unwrap_or(name)
}

/// Reads the engine's settings (the defaults if it is busy, which only a crash report sees).
fn read<T>(f: impl Fn(&Watch) -> T) -> T {
    globals::read_engine(|engine| f(engine.watch())).unwrap_or_else(|| f(&Watch::default()))
}

/// Changes the engine's settings; an error if the engine is busy (a config set from inside a
/// relock command, which no server does).
fn write(err: *mut *mut raw::RedisModuleString, f: impl FnOnce(&mut Watch)) -> c_int {
    if globals::configure(f) {
        return raw::REDISMODULE_OK as c_int;
    }
    if !err.is_null() {
        let text = c"relock is busy";
        // SAFETY: Redis passes a place for an error string it frees; a null context makes a
        // string Redis owns.
        unsafe {
            *err = rm!(RedisModule_CreateString(
                std::ptr::null_mut(),
                text.as_ptr(),
                text.count_bytes()
            ))
        };
    }
    raw::REDISMODULE_ERR as c_int
}

extern "C" fn get_number(name: *const c_char, _data: *mut c_void) -> c_longlong {
    ffi::guard(0, || {
        // SAFETY: Redis passes the config's name.
        let value = match unsafe { short_name(name) } {
            b"log-max-len" => read(|w| w.journal.max_len() as u64),
            b"restart-grace-ms" => globals::read_engine(|e| e.grace_configured_ms()).unwrap_or(0),
            _ => read(|w| w.contention.keys.capacity() as u64),
        };
        value as c_longlong
    })
}

extern "C" fn set_number(
    name: *const c_char,
    value: c_longlong,
    _data: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        // Redis checked the bounds it was given at registration.
        let value = usize::try_from(value).unwrap_or(0);
        // SAFETY: Redis passes the config's name.
        match unsafe { short_name(name) } {
            b"log-max-len" => write(err, |w| {
                let reasons = w.journal.reasons();
                w.journal.configure(value, reasons);
            }),
            b"restart-grace-ms" => {
                if globals::configure_engine(|e| e.configure_grace(value as u64)) {
                    raw::REDISMODULE_OK as c_int
                } else {
                    write(err, |_| ())
                }
            }
            _ => write(err, |w| w.contention.set_capacity(value)),
        }
    })
}

extern "C" fn get_bool(_name: *const c_char, _data: *mut c_void) -> c_int {
    ffi::guard(0, || c_int::from(read(|w| w.contention.enabled)))
}

extern "C" fn set_bool(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        write(err, |w| w.contention.enabled = value != 0)
    })
}

extern "C" fn get_enum(_name: *const c_char, _data: *mut c_void) -> c_int {
    ffi::guard(0, || read(|w| w.journal.reasons().0) as c_int)
}

extern "C" fn set_enum(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        let reasons = Reasons(value as u32 & Reasons::ALL.0);
        write(err, |w| {
            let len = w.journal.max_len();
            w.journal.configure(len, reasons);
        })
    })
}
