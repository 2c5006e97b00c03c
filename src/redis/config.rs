//! The module's configuration, through the module config API of Redis 7.0 (`CONFIG SET/GET
//! relock.*`, `redis.conf`, `--relock.log-max-len 100`, `MODULE LOADEX ... CONFIG ...`):
//!
//! - `relock.log-max-len` (default 1024, 0 turns the journal off, at most 100000);
//! - `relock.log-reasons` (default `all`; any of the reasons, space-separated, or `none`);
//! - `relock.stats` (`yes` | `no`, default yes);
//! - `relock.stats-keys` (default 1000, at most 100000): the size of `LOCK.STATS`'s table;
//! - `relock.restart-grace-ms` (default 0, at most 10^12): the restart grace.
//!
//! A `CONFIG SET` of several parameters is all or nothing, and relock's part of it too: the set
//! callbacks only record the new values in [`SETTINGS`] (what `CONFIG GET` reads), and the one
//! apply callback gives them to the engine once Redis has set every parameter of the command.
//! When a parameter fails to set, Redis sets the old values back through the same callbacks
//! and never calls the apply. But an apply of another parameter can fail after relock's ran
//! (Redis 8.2 applies `port` after the module configs): Redis then sets the old values back and
//! applies again. So the apply does only what can be undone (the grace, the reasons, the
//! statistics switch, growing the journal or the table); what cannot (dropping journal entries
//! and statistics keys to shrink them) waits for the end of the command: [`settle`] applies the
//! values recorded then (the old ones if the command failed) before anything else uses the
//! engine, or a 0 ms timer does, before the reply is sent. The engine keeps its own bounds too.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong, c_void};

use redis_module::raw;

use super::ffi;
use super::globals::{self, RedisHandles};
use crate::lock::{args, contention, journal, Engine, Reason, Reasons};

/// The values `CONFIG SET` recorded, given to the engine by [`apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Settings {
    log_max_len: usize,
    log_reasons: Reasons,
    stats: bool,
    stats_keys: usize,
    restart_grace_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            log_max_len: journal::DEFAULT_LEN,
            log_reasons: Reasons::ALL,
            stats: true,
            stats_keys: contention::DEFAULT_KEYS,
            restart_grace_ms: 0,
        }
    }
}

thread_local! {
    /// The values of the `relock.*` configs (Redis calls every config callback on its main
    /// thread).
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

/// The value `relock.log-reasons` gives `none`: a bit of its own, so that a list naming `none`
/// with anything else (`all none`, `expired none`) is seen and refused rather than read as the
/// other names (a bit-flag config's value is the OR of its names').
const NONE_BIT: c_int = 1 << 30;

fn settings() -> Settings {
    SETTINGS.with(|s| *s.borrow())
}

fn record(f: impl FnOnce(&mut Settings)) -> c_int {
    SETTINGS.with(|s| f(&mut s.borrow_mut()));
    raw::REDISMODULE_OK as c_int
}

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
            Some(apply),
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
            Some(apply),
            std::ptr::null_mut()
        ))
    };
    if [log_len, stats_keys, grace, stats, reasons]
        .iter()
        .any(|&r| r != ok)
    {
        return Err("cannot register the module configs");
    }
    // No timer while loading: the load can still fail, and Redis would not stop a failed
    // module's timer (`register` applies the values itself below).
    LOADING.with(|l| l.set(true));
    // SAFETY: the load context, after every config is registered.
    let loaded = unsafe { rm!(RedisModule_LoadConfigs(ctx)) };
    LOADING.with(|l| l.set(false));
    PENDING.with(|p| p.set(false));
    globals::set_unsettled(None);
    if loaded != ok {
        return Err("bad value for a relock.* config");
    }
    // Not every server calls the apply callback for the values it loads.
    if !apply_settings(true) {
        return Err("relock is busy");
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
            Some(apply),
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
    let mut values = vec![Reasons::ALL.0 as c_int, NONE_BIT];
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

/// Gives `engine` the settings `s`, shrinking the journal and the statistics table to theirs
/// only if `shrink` (otherwise they keep their larger size for now).
fn apply_to(engine: &mut Engine<RedisHandles>, s: Settings, shrink: bool) {
    let watch = engine.watch_mut();
    let (mut log_len, mut keys) = (s.log_max_len, s.stats_keys);
    if !shrink {
        log_len = log_len.max(watch.journal.max_len());
        keys = keys.max(watch.contention.keys.capacity());
    }
    watch.journal.configure(log_len, s.log_reasons);
    watch.contention.set_capacity(keys);
    watch.contention.enabled = s.stats;
    engine.configure_grace(s.restart_grace_ms);
}

/// Gives the engine the recorded settings (see [`apply_to`]); false (nothing changed) if it is
/// busy, which a config set from inside a relock command would be and no server does.
fn apply_settings(shrink: bool) -> bool {
    globals::configure_engine(|engine| apply_to(engine, settings(), shrink))
}

thread_local! {
    /// Whether the recorded settings wait to be applied whole (an apply ran).
    static PENDING: Cell<bool> = const { Cell::new(false) };
    /// Whether the timer that applies them is on its way.
    static ONE_SHOT: Cell<bool> = const { Cell::new(false) };
    /// Whether the module is loading its configs (`register` applies them itself).
    static LOADING: Cell<bool> = const { Cell::new(false) };
}

/// Applies the recorded settings whole if a `CONFIG SET` left them pending: called before
/// anything else uses the engine (a command, a timer, an event, `INFO`), which is after the
/// `CONFIG SET` and its rollback if it failed, and by a 0 ms timer.
pub fn settle(engine: &mut Engine<RedisHandles>) {
    if PENDING.with(|p| p.replace(false)) {
        apply_to(engine, settings(), true);
    }
}

/// After the command that set the configs (a 0 ms timer: Redis runs it in the same event-loop
/// turn, after the commands it read and before it sends their replies): [`settle`].
extern "C" fn settle_later(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    ffi::guard((), || {
        ONE_SHOT.with(|q| q.set(false));
        globals::configure_engine(settle);
    })
}

/// Sets `*err` to `text` (Redis frees it).
fn error(err: *mut *mut raw::RedisModuleString, text: &CStr) -> c_int {
    if !err.is_null() {
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

/// The apply callback of every relock config: Redis calls it once per `CONFIG SET` (however
/// many relock configs it names), after every parameter was set, and again after a rollback.
/// It changes only what can be undone, and queues the rest for after the command.
extern "C" fn apply(
    ctx: *mut raw::RedisModuleCtx,
    _data: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        if !apply_settings(false) {
            return error(err, c"relock is busy");
        }
        PENDING.with(|p| p.set(true));
        globals::set_unsettled(Some(settle));
        if !ctx.is_null() && !LOADING.with(Cell::get) && !ONE_SHOT.with(|q| q.replace(true)) {
            // SAFETY: `ctx` is the context Redis passes the apply; the callback is a plain
            // `extern "C"` fn that never unwinds; no data.
            unsafe {
                rm!(RedisModule_CreateTimer(
                    ctx,
                    0,
                    Some(settle_later),
                    std::ptr::null_mut()
                ))
            };
        }
        raw::REDISMODULE_OK as c_int
    })
}

extern "C" fn get_number(name: *const c_char, _data: *mut c_void) -> c_longlong {
    ffi::guard(0, || {
        let s = settings();
        // SAFETY: Redis passes the config's name.
        let value = match unsafe { short_name(name) } {
            b"log-max-len" => s.log_max_len as u64,
            b"restart-grace-ms" => s.restart_grace_ms,
            _ => s.stats_keys as u64,
        };
        value as c_longlong
    })
}

extern "C" fn set_number(
    name: *const c_char,
    value: c_longlong,
    _data: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        // Redis checked the bounds it was given at registration.
        let value = u64::try_from(value).unwrap_or(0);
        let size = usize::try_from(value).unwrap_or(usize::MAX);
        // SAFETY: Redis passes the config's name.
        match unsafe { short_name(name) } {
            b"log-max-len" => record(|s| s.log_max_len = size),
            b"restart-grace-ms" => record(|s| s.restart_grace_ms = value),
            _ => record(|s| s.stats_keys = size),
        }
    })
}

extern "C" fn get_bool(_name: *const c_char, _data: *mut c_void) -> c_int {
    ffi::guard(0, || c_int::from(settings().stats))
}

extern "C" fn set_bool(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        record(|s| s.stats = value != 0)
    })
}

extern "C" fn get_enum(_name: *const c_char, _data: *mut c_void) -> c_int {
    ffi::guard(0, || match settings().log_reasons {
        Reasons(0) => NONE_BIT,
        reasons => reasons.0 as c_int,
    })
}

extern "C" fn set_enum(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        let reasons = Reasons(value as u32 & Reasons::ALL.0);
        if value & NONE_BIT != 0 && reasons.0 != 0 {
            return error(err, c"'none' cannot be listed with other reasons");
        }
        record(|s| s.log_reasons = reasons)
    })
}
