//! The module data type `relock-lk`: one lock per key. Its Redis TTL is the lock's lifetime.
//!
//! RDB encoding, version 1: owner (string), token (unsigned), count (unsigned). The absolute
//! expiry is the key's own expire, which RDB and AOF already store. Aux data (written before the
//! keyspace) carries the token counter, so tokens never go backwards across a restart even when
//! no lock is left to remember them. An AOF rewrite emits each lock as
//! `LOCK.APPLY key owner token count` (Redis appends the key's `PEXPIREAT`).

use std::os::raw::{c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::ffi;
use super::globals;
use crate::lock::{args, Hold};

/// Data type name as `TYPE` shows it (exactly 9 characters).
pub const TYPE_NAME: &str = "relock-lk";
/// RDB encoding version of a lock value.
const ENCODING_VERSION: i32 = 1;

/// The registered data type.
pub static LOCK_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// Turns a hold into a value owned by Redis.
pub fn into_value(hold: Box<Hold>) -> *mut c_void {
    globals::count_lock_value(true);
    Hold::into_raw(hold).cast()
}

/// Borrows the hold behind a value pointer.
///
/// # Safety
/// `value` must come from [`into_value`] and still be owned by Redis.
pub unsafe fn hold_of<'a>(value: *mut c_void) -> Option<&'a mut Hold> {
    if value.is_null() {
        None
    } else {
        // SAFETY: `value` is non-null and came from `into_value` (the caller's promise).
        Some(unsafe { Hold::borrow_raw(value.cast()) })
    }
}

/// Loads a lock value. Input may be hostile (`RESTORE` takes any payload whose checksum is
/// right): every read is checked for an IO error (the module runs with
/// `REDISMODULE_OPTIONS_HANDLE_IO_ERRORS`, so a short or mistyped field fails softly instead of
/// aborting Redis) and every field for its bounds; a bad value is rejected (`RESTORE` answers
/// "Bad data format"), nothing is half-built.
extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    ffi::guard(std::ptr::null_mut(), || {
        if encver != ENCODING_VERSION {
            log_io(rdb, "unknown relock encoding version");
            return std::ptr::null_mut();
        }
        let Some(owner) = load_string(rdb) else {
            return std::ptr::null_mut();
        };
        let (Some(token), Some(count)) = (load_unsigned(rdb), load_unsigned(rdb)) else {
            return std::ptr::null_mut();
        };
        let valid = args::owner(&owner).is_ok()
            && (1..=crate::lock::MAX_TOKEN).contains(&token)
            && count >= 1
            && count <= u64::from(crate::lock::MAX_COUNT);
        if !valid {
            log_io(rdb, "corrupt relock value");
            return std::ptr::null_mut();
        }
        globals::observe_token(token);
        into_value(Hold::new(&owner, token, count as u32))
    })
}

fn io_failed(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: `rdb` is the load context Redis passed to the callback running.
    unsafe { rm!(RedisModule_IsIOError(rdb)) != 0 }
}

/// An unsigned field, or `None` when the input ended or held something else.
fn load_unsigned(rdb: *mut raw::RedisModuleIO) -> Option<u64> {
    // SAFETY: as above; with HANDLE_IO_ERRORS a bad read sets the error flag, checked next.
    let value = unsafe { rm!(RedisModule_LoadUnsigned(rdb)) };
    (!io_failed(rdb)).then_some(value)
}

/// A string field, or `None` when the input ended or held something else.
fn load_string(rdb: *mut raw::RedisModuleIO) -> Option<Vec<u8>> {
    let mut len: usize = 0;
    // SAFETY: as above; Redis writes the length and returns a buffer we own (or null).
    let buf = unsafe { rm!(RedisModule_LoadStringBuffer(rdb, &mut len)) };
    if buf.is_null() {
        return None;
    }
    let bytes = (!io_failed(rdb)).then(|| {
        // SAFETY: Redis returned a buffer of `len` bytes that we own until we free it below.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
    });
    unsafe { rm!(RedisModule_Free(buf.cast())) };
    bytes
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    ffi::guard((), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        let Some(hold) = (unsafe { hold_of(value) }) else {
            return;
        };
        let owner = hold.owner();
        // SAFETY: `rdb` is the save context; the owner buffer is passed with its length.
        unsafe {
            rm!(RedisModule_SaveStringBuffer(
                rdb,
                owner.as_ptr().cast(),
                owner.len()
            ));
            rm!(RedisModule_SaveUnsigned(rdb, hold.token()));
            rm!(RedisModule_SaveUnsigned(rdb, u64::from(hold.count())));
        }
    })
}

extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    ffi::guard((), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        let Some(hold) = (unsafe { hold_of(value) }) else {
            return;
        };
        let owner = hold.owner();
        // SAFETY: format "sbll": the key's name, the owner's pointer and length, two long longs.
        unsafe {
            rm!(RedisModule_EmitAOF(
                aof,
                c"LOCK.APPLY".as_ptr(),
                c"sbll".as_ptr(),
                key,
                owner.as_ptr(),
                owner.len(),
                hold.token() as std::os::raw::c_longlong,
                std::os::raw::c_longlong::from(hold.count()),
            ));
        }
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
    ffi::guard(0, || match unsafe { hold_of(value.cast_mut()) } {
        Some(hold) => hold.heap_size(),
        None => 0,
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    ffi::guard((), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        let Some(hold) = (unsafe { hold_of(value) }) else {
            return;
        };
        let owner = hold.owner();
        // SAFETY: `md` is the digest context; the owner buffer is passed with its length.
        unsafe {
            rm!(RedisModule_DigestAddStringBuffer(
                md,
                owner.as_ptr().cast(),
                owner.len()
            ));
            rm!(RedisModule_DigestAddLongLong(md, hold.token() as i64));
            rm!(RedisModule_DigestAddLongLong(md, i64::from(hold.count())));
            rm!(RedisModule_DigestEndSequence(md));
        }
    })
}

extern "C" fn free(value: *mut c_void) {
    ffi::guard((), || {
        if !value.is_null() {
            // SAFETY: Redis frees each value once, here; it came from `into_value`.
            drop(unsafe { Hold::from_raw(value.cast()) });
            globals::count_lock_value(false);
        }
    })
}

extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    ffi::guard(std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        match unsafe { hold_of(value.cast_mut()) } {
            Some(hold) => into_value(hold.to_boxed()),
            None => std::ptr::null_mut(),
        }
    })
}

extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    ffi::guard((), || {
        // SAFETY: Redis passes the unlink callback's key context.
        let db = unsafe { rm!(RedisModule_GetDbIdFromOptCtx(ctx)) };
        // SAFETY: as above; the name lives for the length of the callback, and is copied.
        let name = unsafe { ffi::string_bytes(rm!(RedisModule_GetKeyNameFromOptCtx(ctx))) };
        globals::set_unlinked(db, name.to_vec());
    })
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    ffi::guard((), || {
        let last = globals::read_engine(|engine| engine.last_token()).unwrap_or(0);
        // SAFETY: `rdb` is the save context Redis passed.
        unsafe { rm!(RedisModule_SaveUnsigned(rdb, last)) };
    })
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        if encver != ENCODING_VERSION {
            log_io(rdb, "unknown relock aux encoding version");
            return raw::REDISMODULE_ERR as c_int;
        }
        let Some(last) = load_unsigned(rdb) else {
            return raw::REDISMODULE_ERR as c_int;
        };
        globals::observe_token(last);
        raw::REDISMODULE_OK as c_int
    })
}

fn log_io(rdb: *mut raw::RedisModuleIO, message: &str) {
    if let Ok(text) = std::ffi::CString::new(message) {
        // SAFETY: format "%s" with one C string; `rdb` is the load context.
        unsafe {
            rm!(RedisModule_LogIOError(
                rdb,
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr()
            ))
        };
    }
}
