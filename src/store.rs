//! Locks in the keyspace: opening a key, reading its hold, and applying a decision to it.
//!
//! Every change is replicated (and written to the AOF) as its *effect*: `LOCK.APPLY key owner
//! token count PXAT unix_ms` for a hold that exists after the change, `DEL key` for one that
//! ended. Replicas and AOF replays therefore never re-run a decision that depends on time.

use std::ffi::CStr;
use std::os::raw::{c_int, c_longlong};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::datatype::{self, LOCK_TYPE};
use crate::lock::{Found, Hold};
use crate::{fencing, rm};

/// Keyspace events this module emits (class `d`).
pub mod event {
    use std::ffi::CStr;
    pub const ACQUIRED: &CStr = c"lock.acquired";
    pub const RELEASED: &CStr = c"lock.released";
    pub const RENEWED: &CStr = c"lock.renewed";
    pub const GRANTED: &CStr = c"lock.granted";
    pub const FORCERELEASED: &CStr = c"lock.forcereleased";
}

/// Whether anything can receive propagated commands (AOF on, a replication backlog, replicas).
/// Conservatively true at load; `events` sets it true the instant a fork child is born (every
/// full sync and every AOF rewrite starts with one) and clears it on the cron tick only when
/// none of those exist.
static EFFECTS_NEEDED: AtomicBool = AtomicBool::new(true);

/// Records whether lock changes must be propagated as effects (see `EFFECTS_NEEDED`).
pub fn set_effects_needed(needed: bool) {
    EFFECTS_NEEDED.store(needed, Ordering::Relaxed);
}

/// The bytes of a Redis string.
pub fn string_bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    let ptr = unsafe { rm!(RedisModule_StringPtrLen(s, &mut len)) };
    if ptr.is_null() {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// Current Unix time in milliseconds, as Redis sees it.
pub fn now_ms() -> i64 {
    unsafe { rm!(RedisModule_Milliseconds()) }
}

/// A Redis string this module created and frees.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl OwnedString {
    /// A new Redis string holding `bytes`.
    pub fn new(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) -> Option<OwnedString> {
        let ptr = unsafe {
            rm!(RedisModule_CreateString(
                ctx,
                bytes.as_ptr().cast(),
                bytes.len()
            ))
        };
        NonNull::new(ptr).map(|ptr| OwnedString { ctx, ptr })
    }

    /// The raw string, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        unsafe { rm!(RedisModule_FreeString(self.ctx, self.ptr.as_ptr())) };
    }
}

/// The key holds a value of another type.
#[derive(Debug, Clone, Copy)]
pub struct WrongType;

/// An open key that is empty or holds a lock.
pub struct LockKey {
    ctx: *mut raw::RedisModuleCtx,
    /// Opened by a client's command (not a timer): `RedisModule_ReplicateVerbatim` has a command
    /// to propagate.
    from_command: bool,
    /// `None` for a read-only open of a missing key (Redis returns no handle then).
    key: Option<NonNull<raw::RedisModuleKey>>,
    name: *mut raw::RedisModuleString,
}

impl LockKey {
    /// Opens `name` for a client's command in the context's selected db, for writing unless
    /// `read_only`. Fails with [`WrongType`] if the key holds another type.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        read_only: bool,
    ) -> Result<LockKey, WrongType> {
        LockKey::open_as(ctx, name, read_only, true)
    }

    /// Opens `name` for writing from a timer or event callback (no client command running).
    pub fn open_from_timer(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
    ) -> Result<LockKey, WrongType> {
        LockKey::open_as(ctx, name, false, false)
    }

    fn open_as(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        read_only: bool,
        from_command: bool,
    ) -> Result<LockKey, WrongType> {
        let mode = if read_only {
            raw::REDISMODULE_READ
        } else {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        };
        let key = unsafe { rm!(RedisModule_OpenKey(ctx, name, mode as c_int)) };
        let opened = LockKey {
            ctx,
            from_command,
            key: NonNull::new(key.cast::<raw::RedisModuleKey>()),
            name,
        };
        let Some(key) = opened.key else {
            return Ok(opened);
        };
        let kind = unsafe { rm!(RedisModule_KeyType(key.as_ptr())) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(opened);
        }
        let ours = kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && unsafe { rm!(RedisModule_ModuleTypeGetType(key.as_ptr())) } == lock_type();
        if ours {
            Ok(opened)
        } else {
            Err(WrongType)
        }
    }

    /// The key's name.
    pub fn name(&self) -> *mut raw::RedisModuleString {
        self.name
    }

    /// The raw key handle, or null for a missing key opened read-only.
    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// The hold at this key, if there is a lock.
    pub fn hold(&self) -> Option<&Hold> {
        let key = self.key?;
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue(key.as_ptr())) };
        unsafe { datatype::hold_of(value) }.map(|h| &*h)
    }

    fn hold_mut(&mut self) -> Option<&mut Hold> {
        let key = self.key?;
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue(key.as_ptr())) };
        unsafe { datatype::hold_of(value) }
    }

    /// What a command finds here; `queued` says whether waiters are queued for the key.
    pub fn found(&self, queued: bool) -> Found<'_> {
        match self.hold() {
            Some(hold) => Found::Held(hold),
            None => Found::Free { queued },
        }
    }

    /// Remaining lifetime in ms, or -1 when the key has no TTL.
    pub fn ttl_ms(&self) -> i64 {
        let Some(key) = self.key else {
            return -1;
        };
        let ttl = unsafe { rm!(RedisModule_GetExpire(key.as_ptr())) };
        if ttl == raw::REDISMODULE_NO_EXPIRE as i64 {
            -1
        } else {
            ttl.max(0)
        }
    }

    /// Absolute expiry in Unix ms, if the key has a TTL.
    pub fn expires_at(&self) -> Option<i64> {
        let key = self.key?;
        let at = unsafe { rm!(RedisModule_GetAbsExpire(key.as_ptr())) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// A new hold for `owner` with a fresh token and `ttl_ms` to live. Returns the token, or
    /// `None` if no token can be issued (the key is then unchanged).
    pub fn grant(&mut self, owner: &[u8], ttl_ms: u64) -> Option<u64> {
        let token = fencing::issue()?;
        let at = now_ms().saturating_add(ttl_ms as i64);
        self.put(Hold::new(owner, token, 1), Some(at));
        Some(token)
    }

    /// Sets the hold's count and resets its lifetime to `ttl_ms`.
    pub fn refresh(&mut self, count: u32, ttl_ms: u64) {
        let at = now_ms().saturating_add(ttl_ms as i64);
        if let Some(hold) = self.hold_mut() {
            hold.set_count(count);
        }
        if let Some(key) = self.key {
            unsafe { rm!(RedisModule_SetAbsExpire(key.as_ptr(), at)) };
        }
        self.changed();
        self.replicate_hold(Some(at));
    }

    /// Sets the hold's count; its lifetime is unchanged.
    pub fn decrement(&mut self, count: u32) {
        if let Some(hold) = self.hold_mut() {
            hold.set_count(count);
        }
        self.changed();
        self.replicate_hold(self.expires_at());
    }

    /// Stores `hold` with absolute expiry `at` (none: no TTL), replacing whatever is here.
    pub fn put(&mut self, hold: Box<Hold>, at: Option<i64>) {
        let Some(key) = self.key.map(NonNull::as_ptr) else {
            return;
        };
        let value = datatype::into_value(hold);
        unsafe {
            rm!(RedisModule_ModuleTypeSetValue(key, lock_type(), value));
            if let Some(at) = at {
                rm!(RedisModule_SetAbsExpire(key, at));
            }
        }
        self.changed();
        self.replicate_hold(at);
    }

    /// Removes the lock.
    pub fn remove(&mut self) {
        let Some(key) = self.key else {
            return;
        };
        unsafe { rm!(RedisModule_DeleteKey(key.as_ptr())) };
        self.changed();
        unsafe {
            if !self.propagate_cheaply() {
                rm!(RedisModule_Replicate(
                    self.ctx,
                    c"DEL".as_ptr(),
                    c"s".as_ptr(),
                    self.name
                ));
            }
        }
        // Our own delete is not followed by an `expired` notification.
        datatype::forget_unlinked();
    }

    /// Tells Redis the key changed (WATCH, client-side caching). The module runs with
    /// `REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED`, so a key opened for writing that ends up
    /// unchanged (a refused acquire, a release by a non-owner) signals nothing.
    fn changed(&self) {
        unsafe { rm!(RedisModule_SignalModifiedKey(self.ctx, self.name)) };
    }

    /// Emits keyspace event `event` (class `d`) for this key.
    pub fn notify(&self, event: &CStr) {
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent(
                self.ctx,
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                event.as_ptr(),
                self.name
            ))
        };
    }

    /// When nothing can receive propagated commands, skips building the effect (a fifth of a
    /// `LOCK.ACQUIRE`'s cost) and only marks the change with `RedisModule_ReplicateVerbatim`,
    /// which then propagates nothing (Redis's own check finds no AOF, backlog or replica) but
    /// counts the change for `save` rules, as any write must. Returns whether it did so.
    fn propagate_cheaply(&self) -> bool {
        if !self.from_command || EFFECTS_NEEDED.load(Ordering::Relaxed) {
            return false;
        }
        unsafe { rm!(RedisModule_ReplicateVerbatim(self.ctx)) };
        true
    }

    fn replicate_hold(&self, at: Option<i64>) {
        let Some(hold) = self.hold() else {
            return;
        };
        if self.propagate_cheaply() {
            return;
        }
        let owner = hold.owner();
        let (token, count) = (hold.token() as c_longlong, c_longlong::from(hold.count()));
        unsafe {
            match at {
                Some(at) => rm!(RedisModule_Replicate(
                    self.ctx,
                    c"LOCK.APPLY".as_ptr(),
                    c"sbllcl".as_ptr(),
                    self.name,
                    owner.as_ptr(),
                    owner.len(),
                    token,
                    count,
                    c"PXAT".as_ptr(),
                    at as c_longlong,
                )),
                None => rm!(RedisModule_Replicate(
                    self.ctx,
                    c"LOCK.APPLY".as_ptr(),
                    c"sbll".as_ptr(),
                    self.name,
                    owner.as_ptr(),
                    owner.len(),
                    token,
                    count,
                )),
            };
        }
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.raw().is_null() {
            unsafe { rm!(RedisModule_CloseKey(self.raw())) };
        }
    }
}

fn lock_type() -> *mut raw::RedisModuleType {
    *LOCK_TYPE.raw_type.borrow()
}

/// The db selected in `ctx`.
pub fn selected_db(ctx: *mut raw::RedisModuleCtx) -> c_int {
    unsafe { rm!(RedisModule_GetSelectedDb(ctx)) }
}

/// Selects `db` in `ctx` (for timer and event contexts).
pub fn select_db(ctx: *mut raw::RedisModuleCtx, db: c_int) -> bool {
    unsafe { rm!(RedisModule_SelectDb(ctx, db)) == raw::REDISMODULE_OK as c_int }
}
