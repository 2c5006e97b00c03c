//! The module data type `relock-lk`: one lock per key. Its Redis TTL is the lock's lifetime
//! (for a shared key, the latest lease end; each holder's own lease end is in the value).
//!
//! RDB encoding, version 3: a kind (unsigned), then for an exclusive lock (0) owner (string),
//! token (unsigned), count (unsigned) and grant time (signed, Unix ms); for a shared key (1) its
//! limit (unsigned, 0: none), the number of holders (unsigned), and per holder owner, token,
//! count, lease end (signed, Unix ms), permits (unsigned) and grant time (signed). Version 2 is
//! the same without grant times and permits (one permit each, grant time unknown); version 1
//! (exclusive locks written before shared holds existed) is owner, token, count. Both still
//! load. The absolute expiry is the key's own expire, which RDB and AOF already store.
//! Aux data (written before the keyspace) carries the token counter, so tokens never go backwards
//! across a restart even when no lock is left to remember them. An AOF rewrite emits an exclusive
//! lock as `LOCK.APPLY key owner token count` and each shared holder as `LOCK.APPLY key owner
//! token count PXAT lease_end SHARED [LIMIT n]` (Redis appends the key's `PEXPIREAT`).

use std::os::raw::{c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::globals;
use super::server;
use super::unlinked::Gone;
use super::{effects, ffi};
use crate::lock::{bounds, Effect, EndedHold, Hold, Holder, LockMut, LockRef, LockValue, Shared};

/// Data type name as `TYPE` shows it (exactly 9 characters).
pub const TYPE_NAME: &str = "relock-lk";
/// RDB encoding version of a lock value (and of the aux data: version 4 adds the accepted token
/// lead after the counter).
const ENCODING_VERSION: i32 = 4;
/// Kinds of value in encoding versions 2 to 4 (4 encodes values as 3 does).
const KIND_EXCLUSIVE: u64 = 0;
const KIND_SHARED: u64 = 1;

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
        free_effort: Some(free_effort),
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

/// Holds in a value.
fn holds_in(value: LockRef<'_>) -> u64 {
    match value {
        LockRef::Exclusive(_) => 1,
        LockRef::Shared(shared) => shared.len() as u64,
    }
}

/// Turns a lock into a value owned by Redis.
pub fn into_value(value: LockValue) -> *mut c_void {
    let holds = match &value {
        LockValue::Exclusive(_) => 1,
        LockValue::Shared(shared) => {
            globals::count_shared_value(true);
            shared.len() as u64
        }
    };
    globals::count_lock_value(true, holds);
    value.into_raw().cast()
}

/// Borrows the lock behind a value pointer.
///
/// # Safety
/// `value` must come from [`into_value`] and still be owned by Redis.
pub unsafe fn lock_of<'a>(value: *mut c_void) -> Option<LockMut<'a>> {
    if value.is_null() {
        None
    } else {
        // SAFETY: `value` is non-null and came from `into_value` (the caller's promise).
        Some(unsafe { LockValue::borrow_raw(value.cast()) })
    }
}

/// Loads a lock value. Input may be hostile (`RESTORE` takes any payload whose checksum is
/// right): every read is checked for an IO error (the module runs with
/// `REDISMODULE_OPTIONS_HANDLE_IO_ERRORS`, so a short or mistyped field fails softly instead of
/// aborting Redis) and every field for its bounds; a bad value is rejected (`RESTORE` answers
/// "Bad data format"), nothing is half-built.
extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    ffi::guard(std::ptr::null_mut(), || {
        let value = match encver {
            1 => load_hold(rdb, 1).map(LockValue::Exclusive),
            2..=4 => match load_unsigned(rdb) {
                Some(KIND_EXCLUSIVE) => load_hold(rdb, encver).map(LockValue::Exclusive),
                Some(KIND_SHARED) => load_shared(rdb, encver).map(|shared| {
                    note_loaded(rdb);
                    LockValue::Shared(shared)
                }),
                Some(_) => {
                    log_io(rdb, "corrupt relock value");
                    None
                }
                None => None,
            },
            _ => {
                log_io(rdb, "unknown relock encoding version");
                None
            }
        };
        value.map_or(std::ptr::null_mut(), into_value)
    })
}

/// A shared key loaded while the server loads: noted for its lapse timer (see
/// `globals::loading_started`).
fn note_loaded(rdb: *mut raw::RedisModuleIO) {
    if !globals::noting_loaded() {
        return;
    }
    // SAFETY: the API table is filled once at load, before any callback runs.
    let apis = unsafe {
        (
            raw::RedisModule_GetKeyNameFromIO,
            raw::RedisModule_GetDbIdFromIO,
        )
    };
    let (Some(name_of), Some(db_of)) = apis else {
        return;
    };
    // SAFETY: `rdb` is the IO of the value being loaded; Redis returns the key's name (or
    // null outside a key's load) and its db.
    let (name, db) = unsafe { (name_of(rdb), db_of(rdb)) };
    if !name.is_null() && db >= 0 {
        // SAFETY: a valid string, alive for this callback.
        globals::note_loaded_shared(db, unsafe { ffi::string_bytes(name) });
    }
}

/// An exclusive hold: owner, token, count (and from version 3 its grant time).
fn load_hold(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Box<Hold>> {
    let owner = load_string(rdb)?;
    let (token, count) = (load_unsigned(rdb)?, load_unsigned(rdb)?);
    let granted_at = if encver >= 3 { load_signed(rdb)? } else { 0 };
    let valid = valid_hold(&owner, token, count).filter(|_| bounds::is_grant_time(granted_at));
    let Some(count) = valid else {
        log_io(rdb, "corrupt relock value");
        return None;
    };
    globals::observe_token(token);
    Some(Hold::new(&owner, token, count, granted_at))
}

/// A shared key: limit, holders, and per holder owner, token, count, lease end (and from
/// version 3 permits and grant time). The permits of its holders never exceed its limit.
fn load_shared(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Shared> {
    let (limit, holders) = (load_unsigned(rdb)?, load_unsigned(rdb)?);
    let limit_ok = bounds::is_limit(limit) && (limit == 0 || holders <= limit);
    if !limit_ok || !bounds::is_holders(holders) {
        log_io(rdb, "corrupt relock value");
        return None;
    }
    let mut shared = Shared::new(limit as u32);
    let mut permits_held = 0u64;
    for _ in 0..holders {
        let owner = load_string(rdb)?;
        let (token, count, lease_end) =
            (load_unsigned(rdb)?, load_unsigned(rdb)?, load_signed(rdb)?);
        let (permits, granted_at) = if encver >= 3 {
            (load_unsigned(rdb)?, load_signed(rdb)?)
        } else {
            (1, 0)
        };
        permits_held += permits;
        let permits_ok =
            bounds::is_permits(permits, limit) && (limit == 0 || permits_held <= limit);
        let count = valid_hold(&owner, token, count)
            .filter(|_| bounds::is_expiry(lease_end))
            .filter(|_| permits_ok && bounds::is_grant_time(granted_at))
            .filter(|_| shared.get(&owner).is_none());
        let Some(count) = count else {
            log_io(rdb, "corrupt relock value");
            return None;
        };
        let holder = Holder {
            token,
            count,
            lease_end,
            permits: permits as u32,
            granted_at,
        };
        // The owners' bytes must stay addressable (`MAX_OWNER_BYTES`): refuse, never wrap.
        if shared.insert(&owner, holder).is_err() {
            log_io(rdb, "relock value too large: its owners exceed 4 GiB");
            return None;
        }
        globals::observe_token(token);
    }
    Some(shared)
}

/// The count of a hold whose fields are within the bounds `LOCK.APPLY` keeps too.
fn valid_hold(owner: &[u8], token: u64, count: u64) -> Option<u32> {
    let valid = bounds::is_owner(owner) && bounds::is_token(token) && bounds::is_count(count);
    valid.then(|| u32::try_from(count).ok()).flatten()
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

/// A signed field, or `None` when the input ended or held something else.
fn load_signed(rdb: *mut raw::RedisModuleIO) -> Option<i64> {
    // SAFETY: as above; with HANDLE_IO_ERRORS a bad read sets the error flag, checked next.
    let value = unsafe { rm!(RedisModule_LoadSigned(rdb)) };
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
    // SAFETY: the buffer came from `LoadStringBuffer` and is freed once, here.
    unsafe { rm!(RedisModule_Free(buf.cast())) };
    bytes
}

fn save_string(rdb: *mut raw::RedisModuleIO, bytes: &[u8]) {
    // SAFETY: `rdb` is the save context; the buffer is passed with its length.
    unsafe {
        rm!(RedisModule_SaveStringBuffer(
            rdb,
            bytes.as_ptr().cast(),
            bytes.len()
        ))
    };
}

fn save_unsigned(rdb: *mut raw::RedisModuleIO, value: u64) {
    // SAFETY: `rdb` is the save context Redis passed.
    unsafe { rm!(RedisModule_SaveUnsigned(rdb, value)) };
}

fn save_signed(rdb: *mut raw::RedisModuleIO, value: i64) {
    // SAFETY: `rdb` is the save context Redis passed.
    unsafe { rm!(RedisModule_SaveSigned(rdb, value)) };
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    ffi::guard((), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        let Some(lock) = (unsafe { lock_of(value) }) else {
            return;
        };
        // A MIGRATE serializes, then deletes (`unlinked::Serialized`); a save deletes nothing.
        if !globals::saving() {
            if let Some(started_us) = server::command_started_us() {
                globals::push_serialized(started_us, value as usize, server::commands_processed);
            }
        }
        match lock.as_ref() {
            LockRef::Exclusive(hold) => {
                save_unsigned(rdb, KIND_EXCLUSIVE);
                save_string(rdb, hold.owner());
                save_unsigned(rdb, hold.token());
                save_unsigned(rdb, u64::from(hold.count()));
                save_signed(rdb, hold.granted_at());
            }
            LockRef::Shared(shared) => {
                save_unsigned(rdb, KIND_SHARED);
                save_unsigned(rdb, u64::from(shared.limit()));
                save_unsigned(rdb, shared.len() as u64);
                for (owner, holder) in shared.iter() {
                    save_string(rdb, owner);
                    save_unsigned(rdb, holder.token);
                    save_unsigned(rdb, u64::from(holder.count));
                    save_signed(rdb, holder.lease_end);
                    save_unsigned(rdb, u64::from(holder.permits));
                    save_signed(rdb, holder.granted_at);
                }
            }
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
        let Some(lock) = (unsafe { lock_of(value) }) else {
            return;
        };
        // The same effects replicas receive (Redis appends the key's PEXPIREAT).
        match lock.as_ref() {
            LockRef::Exclusive(hold) => {
                let effect = Effect::Hold {
                    owner: hold.owner(),
                    token: hold.token(),
                    count: hold.count(),
                    expires_at: None,
                    granted_at: hold.granted_at(),
                };
                effects::emit(aof, key, &effect);
            }
            LockRef::Shared(shared) => {
                for (owner, holder) in shared.iter() {
                    let limit = shared.limit();
                    effects::emit(
                        aof,
                        key,
                        &Effect::Holder {
                            limit,
                            owner,
                            holder,
                        },
                    );
                }
            }
        }
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
    ffi::guard(0, || match unsafe { lock_of(value.cast_mut()) } {
        Some(LockMut::Exclusive(hold)) => hold.heap_size(),
        Some(LockMut::Shared(shared)) => shared.heap_size(),
        None => 0,
    })
}

/// How much work freeing a value is: its holders (Redis frees large ones in the background).
extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
    ffi::guard(1, || match unsafe { lock_of(value.cast_mut()) } {
        Some(lock) => holds_in(lock.as_ref()) as usize,
        None => 1,
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    ffi::guard((), || {
        // SAFETY: Redis passes a value of our type, owned by Redis for the length of the call.
        let Some(lock) = (unsafe { lock_of(value) }) else {
            return;
        };
        let add_hold = |owner: &[u8], token: u64, count: u32| {
            // SAFETY: `md` is the digest context; the owner buffer is passed with its length.
            unsafe {
                rm!(RedisModule_DigestAddStringBuffer(
                    md,
                    owner.as_ptr().cast(),
                    owner.len()
                ));
                rm!(RedisModule_DigestAddLongLong(md, token as i64));
                rm!(RedisModule_DigestAddLongLong(md, i64::from(count)));
            }
        };
        match lock.as_ref() {
            LockRef::Exclusive(hold) => {
                add_hold(hold.owner(), hold.token(), hold.count());
                // SAFETY: `md` is the digest context.
                unsafe { rm!(RedisModule_DigestAddLongLong(md, hold.granted_at())) };
            }
            LockRef::Shared(shared) => {
                // SAFETY: `md` is the digest context.
                unsafe { rm!(RedisModule_DigestAddLongLong(md, i64::from(shared.limit()))) };
                for (owner, holder) in shared.iter() {
                    add_hold(owner, holder.token, holder.count);
                    // SAFETY: `md` is the digest context.
                    unsafe {
                        rm!(RedisModule_DigestAddLongLong(md, holder.lease_end));
                        rm!(RedisModule_DigestAddLongLong(md, i64::from(holder.permits)));
                        rm!(RedisModule_DigestAddLongLong(md, holder.granted_at));
                    }
                }
            }
        }
        // SAFETY: `md` is the digest context.
        unsafe { rm!(RedisModule_DigestEndSequence(md)) };
    })
}

extern "C" fn free(value: *mut c_void) {
    ffi::guard((), || {
        if !value.is_null() {
            // SAFETY: Redis frees each value once, here; it came from `into_value`.
            let lock = unsafe { LockValue::from_raw(value.cast()) };
            let holds = match &lock {
                LockValue::Exclusive(_) => 1,
                LockValue::Shared(shared) => {
                    globals::count_shared_value(false);
                    shared.len() as u64
                }
            };
            globals::free_value(lock);
            globals::count_lock_value(false, holds);
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
        match unsafe { lock_of(value.cast_mut()) } {
            Some(LockMut::Exclusive(hold)) => into_value(LockValue::Exclusive(hold.to_boxed())),
            Some(LockMut::Shared(shared)) => into_value(LockValue::Shared(shared.clone())),
            None => std::ptr::null_mut(),
        }
    })
}

extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    ffi::guard((), || {
        // The module's own delete or replacement: nothing to explain (`globals::unlinking_own`).
        if globals::own_unlink() {
            return;
        }
        // SAFETY: Redis passes the unlink callback's key context.
        let db = unsafe { rm!(RedisModule_GetDbIdFromOptCtx(ctx)) };
        // SAFETY: as above; the name lives for the length of the callback, and is copied.
        let name = unsafe { ffi::string_bytes(rm!(RedisModule_GetKeyNameFromOptCtx(ctx))) };
        // SAFETY: Redis passes the value being unlinked, one of ours.
        let Some(lock) = (unsafe { lock_of(value.cast_mut()) }) else {
            return;
        };
        let lock = lock.as_ref();
        let serialized_by = server::command_started_us()
            .and_then(|started_us| globals::serialized_by(started_us, value as usize));
        let gone = Gone {
            db,
            name: name.to_vec(),
            holds: holds_in(lock),
            described: describe(lock, globals::describes()),
            serialized_by,
        };
        globals::push_unlinked(gone);
    })
}

/// At most `n` holds of a lock, as the journal describes them (a shared key's in no particular
/// order: which ones matters only when there are more than the journal keeps).
fn describe(lock: LockRef<'_>, n: usize) -> Vec<EndedHold> {
    match lock {
        _ if n == 0 => Vec::new(),
        LockRef::Exclusive(hold) => vec![EndedHold {
            owner: hold.owner().into(),
            token: hold.token(),
            granted_at: hold.granted_at(),
        }],
        LockRef::Shared(shared) => shared
            .sample(n)
            .map(|(owner, h)| EndedHold {
                owner: owner.into(),
                token: h.token,
                granted_at: h.granted_at,
            })
            .collect(),
    }
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    ffi::guard((), || {
        let (last, accepted) =
            globals::read_engine(|engine| (engine.last_token(), engine.accepted_token_lead_ms()))
                .unwrap_or((0, 0));
        // SAFETY: `rdb` is the save context Redis passed.
        unsafe {
            rm!(RedisModule_SaveUnsigned(rdb, last));
            rm!(RedisModule_SaveUnsigned(rdb, accepted));
        }
    })
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    ffi::guard(raw::REDISMODULE_ERR as c_int, || {
        if !(1..=ENCODING_VERSION).contains(&encver) {
            log_io(rdb, "unknown relock aux encoding version");
            return raw::REDISMODULE_ERR as c_int;
        }
        let Some(last) = load_unsigned(rdb) else {
            return raw::REDISMODULE_ERR as c_int;
        };
        let accepted = if encver >= 4 {
            let Some(accepted) = load_unsigned(rdb) else {
                return raw::REDISMODULE_ERR as c_int;
            };
            accepted
        } else {
            0
        };
        // The accepted lead is this server's own only when it loads as a master (a restart, DEBUG
        // RELOAD); a replica's full sync brings its master's, which it judges afresh by its own
        // clock.
        if accepted > 0 && !globals::is_replica() {
            globals::restore_tokens(last, accepted);
        } else {
            globals::observe_token(last);
        }
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
