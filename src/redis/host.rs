//! The engine's host on Redis: [`RedisHost`] (the clock, the server's state, timers, blocked
//! clients, ACL and cluster checks) and [`RedisKey`] (a key opened for the engine).
//!
//! Every change to a lock is replicated (and written to the AOF) as its [`Effect`]: the hold as it
//! is after the change (`LOCK.APPLY`), or its end (`LOCK.DROP`, `DEL`). Replicas and AOF replays
//! therefore never re-run a decision that depends on time.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;

use redis_module::raw;

use super::acl::Caller;
use super::datatype::{self, LOCK_TYPE};
use super::effects;
use super::ffi::{self, OwnedString};
use super::globals::{self, Client, RedisHandles, Report};
use super::{cluster, server};
use crate::lock::{
    Blocked, Effect, Event, Hold, Holder, Host, Key, KeyId, KeyRef, LockMut, LockRef, LockValue,
    OpenError, Outcome, Shared, State,
};

/// Blocks the client of the command running with a context and arguments (`clients::block`).
pub type Blocker = fn(
    *mut raw::RedisModuleCtx,
    &[*mut raw::RedisModuleString],
) -> Option<(Client, Option<Caller>)>;

/// The engine's host inside one Redis callback.
pub struct RedisHost<'a> {
    ctx: *mut raw::RedisModuleCtx,
    /// The running command's arguments, when the callback is a command (a `LOCK.WAIT` may block
    /// its client, and keeps them for the permission check at hand-off), and how to block it.
    command: Option<(&'a [*mut raw::RedisModuleString], Blocker)>,
}

impl<'a> RedisHost<'a> {
    /// The host for a callback that is no command (a timer, an event).
    pub fn new(ctx: *mut raw::RedisModuleCtx) -> RedisHost<'a> {
        RedisHost { ctx, command: None }
    }

    /// The host for the command running with `ctx` and `argv`, whose client `block` blocks.
    pub fn for_command(
        ctx: *mut raw::RedisModuleCtx,
        argv: &'a [*mut raw::RedisModuleString],
        block: Blocker,
    ) -> RedisHost<'a> {
        RedisHost {
            ctx,
            command: Some((argv, block)),
        }
    }
}

impl Host<RedisHandles> for RedisHost<'_> {
    type Key = RedisKey;

    fn now_ms(&self) -> i64 {
        ffi::now_ms()
    }

    fn state(&self) -> State {
        server::state(self.ctx)
    }

    fn now_us(&self) -> u64 {
        ffi::monotonic_us()
    }

    fn block(&mut self) -> Option<Blocked<RedisHandles>> {
        // Clients of the master's stream and of the AOF never block; nor do scripts and MULTI.
        let (argv, block) = self.command?;
        if !server::may_block(self.ctx) {
            return None;
        }
        // SAFETY: `ctx` is the running command's context.
        let id = unsafe { rm!(RedisModule_GetClientId(self.ctx)) };
        let (client, caller) = block(self.ctx, argv)?;
        Some(Blocked { client, caller, id })
    }

    fn caller_info(&mut self) -> String {
        if self.command.is_none() {
            return String::new();
        }
        // SAFETY: `ctx` is the running command's context.
        let id = unsafe { rm!(RedisModule_GetClientId(self.ctx)) };
        if id == 0 {
            return String::new();
        }
        server::client_info(self.ctx, id)
    }

    fn open(&mut self, key: &KeyId) -> Result<RedisKey, OpenError> {
        // A key of a slot being imported is the import stream's alone until the slot is ours.
        let importing = |m: &mut crate::redis::migration::Migrations| {
            m.importing_any() && m.importing(cluster::key_slot(&key.name))
        };
        if globals::with_migrations(importing).unwrap_or(true) {
            return Err(OpenError::Unavailable);
        }
        // The context's selection is put back when the key closes: a context may share its
        // client with a user's connection (Valkey 8.1 runs keyspace notifications on the
        // executing client), which must never find itself in another db.
        let before = ffi::selected_db(self.ctx);
        if !ffi::select_db(self.ctx, key.db) {
            return Err(OpenError::Unavailable);
        }
        let name = OwnedString::new(self.ctx, &key.name).ok_or(OpenError::Unavailable);
        let opened = name
            .and_then(|name| RedisKey::open_as(self.ctx, key.db, Name::Owned(name), false, false));
        match opened {
            Ok(mut opened) => {
                opened.restore_db = (before != key.db).then_some(before);
                Ok(opened)
            }
            Err(e) => {
                ffi::select_db(self.ctx, before);
                Err(e)
            }
        }
    }

    fn start_timer(&mut self, delay_ms: i64, number: u64) -> raw::RedisModuleTimerID {
        // The timer carries the engine's number in its data pointer: nothing to allocate or free.
        let data = number as usize as *mut c_void;
        // SAFETY: `ctx` is live; the callback is a plain `extern "C"` fn that never unwinds.
        unsafe {
            rm!(RedisModule_CreateTimer(
                self.ctx,
                delay_ms,
                Some(on_timer),
                data
            ))
        }
    }

    fn stop_timer(&mut self, timer: raw::RedisModuleTimerID) -> bool {
        // SAFETY: a null `data` out-pointer is allowed; an unknown id fails softly.
        unsafe {
            rm!(RedisModule_StopTimer(self.ctx, timer, std::ptr::null_mut()))
                == raw::REDISMODULE_OK as c_int
        }
    }

    fn unblock(&mut self, client: Client, outcome: Outcome) {
        let data = Box::into_raw(Box::new(outcome));
        // SAFETY: `client` is a blocked client the engine has not unblocked before (it answers
        // each exactly once); Redis owns `data` from here and frees it with the blocked
        // client's free callback (`clients::free_outcome`).
        unsafe { rm!(RedisModule_UnblockClient(client, data.cast())) };
    }

    fn permitted(&mut self, caller: &Caller) -> bool {
        caller.still_permitted()
    }

    fn redirect(&mut self, key: &[u8]) -> Option<String> {
        cluster::redirect(self.ctx, key)
    }

    fn out_of_memory(&self) -> bool {
        self.command.is_some() && server::out_of_memory(self.ctx)
    }
}

/// Whether `name`, in the db selected in `ctx`, holds a shared lock: a look that changes nothing
/// (no access time, no expiry, no notification, no stats where the server lets a module ask
/// for that), for keyspace notifications, which must not write on Redis 7.0.
pub fn is_shared_lock(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) -> bool {
    let wanted = raw::REDISMODULE_OPEN_KEY_NOTOUCH
        | raw::REDISMODULE_OPEN_KEY_NONOTIFY
        | raw::REDISMODULE_OPEN_KEY_NOSTATS
        | raw::REDISMODULE_OPEN_KEY_NOEXPIRE
        | raw::REDISMODULE_OPEN_KEY_NOEFFECTS;
    // SAFETY: reads a function pointer the module API table filled in (null before 7.2).
    let supported = match unsafe { raw::RedisModule_GetOpenKeyModesAll } {
        // SAFETY: no arguments.
        Some(all) => (unsafe { all() }) as u32,
        None => raw::REDISMODULE_OPEN_KEY_NOTOUCH,
    };
    let mode = raw::REDISMODULE_READ | (wanted & supported);
    // SAFETY: `ctx` is the notification's context and `name` the key it names, both alive for
    // the callback; the key is closed below.
    unsafe {
        let key = rm!(RedisModule_OpenKey(ctx, name, mode as c_int)).cast::<raw::RedisModuleKey>();
        if key.is_null() {
            return false;
        }
        let shared = rm!(RedisModule_KeyType(key)) == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && rm!(RedisModule_ModuleTypeGetType(key)) == lock_type()
            && matches!(
                datatype::lock_of(rm!(RedisModule_ModuleTypeGetValue(key))),
                Some(LockMut::Shared(_))
            );
        rm!(RedisModule_CloseKey(key));
        shared
    }
}

/// The engine's timer fired; its data is the number the engine gave it. The turn's work is
/// recorded (`longest_turn_us`, in CPU time of the thread): the engine bounds the work of each.
extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    ffi::guard((), || {
        let started = ffi::thread_cpu_us();
        globals::report(
            &mut RedisHost::new(ctx),
            Report::Timer(data as usize as u64),
        );
        globals::record_turn(ffi::thread_cpu_us().saturating_sub(started));
    })
}

/// A key's name: a command's argument, or a string the host made for a timer.
enum Name {
    Argument(*mut raw::RedisModuleString),
    Owned(OwnedString),
}

impl Name {
    fn as_ptr(&self) -> *mut raw::RedisModuleString {
        match self {
            Name::Argument(ptr) => *ptr,
            Name::Owned(owned) => owned.as_ptr(),
        }
    }
}

/// An open key that is empty or holds a lock.
pub struct RedisKey {
    ctx: *mut raw::RedisModuleCtx,
    /// The db it was opened in.
    db: c_int,
    /// Opened by a client's command (not a timer): `RedisModule_ReplicateVerbatim` has a command
    /// to propagate.
    from_command: bool,
    /// `None` for a read-only open of a missing key (Redis returns no handle then).
    key: Option<NonNull<raw::RedisModuleKey>>,
    /// The db to select again in `ctx` once the key is closed (opened by the module for its
    /// own work in another db than the context's).
    restore_db: Option<c_int>,
    /// The expiry this handle set last (`set_expiry`): what `expires_at` answers without
    /// asking Redis again, since nothing else changes it while the module's command runs.
    expiry_set: Option<i64>,
    /// Declared after `key`: the open key refers to its name, so the name is freed after it.
    name: Name,
}

impl RedisKey {
    /// Opens the key named by a command's argument `name`, for writing unless `read_only`.
    pub fn open(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        read_only: bool,
    ) -> Result<RedisKey, OpenError> {
        RedisKey::open_as(
            ctx,
            ffi::selected_db(ctx),
            Name::Argument(name),
            read_only,
            true,
        )
    }

    fn open_as(
        ctx: *mut raw::RedisModuleCtx,
        db: c_int,
        name: Name,
        read_only: bool,
        from_command: bool,
    ) -> Result<RedisKey, OpenError> {
        let mode = if read_only {
            raw::REDISMODULE_READ
        } else {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        };
        // SAFETY: `ctx` is live and `name` a valid string that outlives the open key (it is
        // dropped after it, see the field order).
        let key = unsafe { rm!(RedisModule_OpenKey(ctx, name.as_ptr(), mode as c_int)) };
        let opened = RedisKey {
            ctx,
            db,
            from_command,
            key: NonNull::new(key.cast::<raw::RedisModuleKey>()),
            restore_db: None,
            expiry_set: None,
            name,
        };
        let Some(key) = opened.key else {
            return Ok(opened);
        };
        // SAFETY: `key` is the handle just opened.
        let kind = unsafe { rm!(RedisModule_KeyType(key.as_ptr())) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(opened);
        }
        // SAFETY: as above; the key holds a module value, so asking its type is valid.
        let ours = kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && unsafe { rm!(RedisModule_ModuleTypeGetType(key.as_ptr())) } == lock_type();
        if ours {
            Ok(opened)
        } else {
            Err(OpenError::WrongType)
        }
    }

    /// The raw key handle, or null for a missing key opened read-only.
    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    fn value(&self) -> *mut c_void {
        match self.key {
            // SAFETY: an open handle of a key that `open_as` checked is empty or ours; an empty
            // key's value is null.
            Some(key) => unsafe { rm!(RedisModule_ModuleTypeGetValue(key.as_ptr())) },
            None => std::ptr::null_mut(),
        }
    }

    fn lock_mut(&mut self) -> Option<LockMut<'_>> {
        // SAFETY: the value is one of ours (checked at open), owned by Redis while the key is
        // open, and borrowed only through `&mut self`.
        unsafe { datatype::lock_of(self.value()) }
    }

    fn hold_mut(&mut self) -> Option<&mut Hold> {
        match self.lock_mut()? {
            LockMut::Exclusive(hold) => Some(hold),
            LockMut::Shared(_) => None,
        }
    }

    /// Stores a new value, replacing whatever is here.
    fn set_value(&mut self, value: LockValue) {
        let Some(key) = self.key.map(NonNull::as_ptr) else {
            return;
        };
        let value = datatype::into_value(value);
        // Setting a value removes the key's expiry (Redis's setKey without KEEPTTL).
        self.expiry_set = None;
        // SAFETY: an open key handle, opened for writing; Redis takes ownership of `value`,
        // a value of our type.
        // Replacing a value unlinks the old one; no notification follows.
        globals::unlinking_own(|| unsafe {
            rm!(RedisModule_ModuleTypeSetValue(key, lock_type(), value))
        });
    }

    /// Deletes the key (the engine has decided the lock is gone).
    fn delete(&mut self) {
        let Some(key) = self.key else {
            return;
        };
        self.expiry_set = None;
        // Our own delete is not followed by an `expired` notification.
        // SAFETY: an open key handle, opened for writing.
        globals::unlinking_own(|| unsafe { rm!(RedisModule_DeleteKey(key.as_ptr())) });
    }

    /// Replicates `effect` (unless nothing can receive it: see `propagate_cheaply`).
    fn replicate(&self, effect: Effect<'_>) {
        if !self.propagate_cheaply() {
            effects::replicate(self.ctx, self.name.as_ptr(), &effect);
        }
    }

    /// Tells Redis the key changed (WATCH, client-side caching). The module runs with
    /// `REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED`, so a key opened for writing that ends up
    /// unchanged (a refused acquire, a release by a non-owner) signals nothing.
    fn changed(&self) {
        // One flag read when nobody observes (the key's name is only looked at otherwise).
        if globals::observing() {
            globals::note_written(self.id());
        }
        // SAFETY: `ctx` and the name are live.
        unsafe { rm!(RedisModule_SignalModifiedKey(self.ctx, self.name.as_ptr())) };
    }

    /// When nothing can receive propagated commands, skips building the effect (a fifth of a
    /// `LOCK.ACQUIRE`'s cost) and only marks the change with `RedisModule_ReplicateVerbatim`,
    /// which then propagates nothing (Redis's own check finds no AOF, backlog or replica) but
    /// counts the change for `save` rules, as any write must. Returns whether it did so.
    fn propagate_cheaply(&self) -> bool {
        if !self.from_command || globals::effects_needed() {
            return false;
        }
        // SAFETY: `ctx` is the context of the running command.
        unsafe { rm!(RedisModule_ReplicateVerbatim(self.ctx)) };
        true
    }

    /// Replicates the exclusive hold as it is now, with `expires_at`.
    fn replicate_hold(&self, expires_at: Option<i64>) {
        if let Some(hold) = self.hold() {
            self.replicate(Effect::Hold {
                owner: hold.owner(),
                token: hold.token(),
                count: hold.count(),
                expires_at,
                granted_at: hold.granted_at(),
            });
        }
    }

    /// Removes `owner`'s holder (compacting the set after if `tidy`), and the key with its last.
    fn drop_holder(&mut self, owner: &[u8], tidy: bool) {
        let left = match self.lock_mut() {
            // The last holder: the key goes, its value freed whole (counted by `free`).
            Some(LockMut::Shared(shared)) if shared.len() == 1 && shared.get(owner).is_some() => {
                None
            }
            Some(LockMut::Shared(shared)) => {
                if shared.remove_keeping_room(owner).is_some() {
                    globals::count_holder(false);
                }
                if tidy {
                    // What is copied is bounded; what is freed may be large: off this thread.
                    globals::free(shared.tidy_cheaply());
                } else {
                    // A lapsed lease the schedule removed: its owner's bytes are freed too, a
                    // few records per later operation (O(1) here).
                    shared.compact_lazily();
                }
                shared.last_lease_end()
            }
            _ => return,
        };
        match left {
            Some(last) => self.set_expiry(last),
            None => self.delete(),
        }
        self.changed();
        self.replicate(Effect::Drop { owner });
    }

    fn set_expiry(&mut self, at: i64) {
        if let Some(key) = self.key {
            // SAFETY: an open key handle, opened for writing (only writers change expiry).
            let done = unsafe { rm!(RedisModule_SetAbsExpire(key.as_ptr(), at)) };
            // Remembered only when Redis took it (a refusal leaves the expiry as it was, and
            // `expires_at` then asks Redis): the lapse timer is skipped on this answer.
            self.expiry_set = (done == raw::REDISMODULE_OK as c_int).then_some(at);
        }
    }
}

impl Key for RedisKey {
    fn id(&self) -> KeyRef<'_> {
        KeyRef {
            db: self.db,
            // SAFETY: the name is a live Redis string (an argument of the running command, or
            // owned by this key) that outlives the borrow of `self`.
            name: unsafe { ffi::string_bytes(self.name.as_ptr()) },
        }
    }

    fn lock(&self) -> Option<LockRef<'_>> {
        // SAFETY: as in `lock_mut`; the shared borrow is tied to `&self`.
        let lock = unsafe { datatype::lock_of(self.value()) }?;
        Some(match lock {
            LockMut::Exclusive(hold) => LockRef::Exclusive(hold),
            LockMut::Shared(shared) => LockRef::Shared(shared),
        })
    }

    fn expires_at(&self) -> Option<i64> {
        let key = self.key?;
        // An empty key has no expiry; Redis 8.2's `GetAbsExpire` would read through null.
        if self.value().is_null() {
            return None;
        }
        if self.expiry_set.is_some() {
            return self.expiry_set;
        }
        // SAFETY: an open key handle.
        let at = unsafe { rm!(RedisModule_GetAbsExpire(key.as_ptr())) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    fn put(&mut self, hold: Box<Hold>, at: Option<i64>) {
        if self.key.is_none() {
            return;
        }
        self.set_value(LockValue::Exclusive(hold));
        if let Some(at) = at {
            self.set_expiry(at);
        }
        self.changed();
        self.replicate_hold(at);
    }

    fn update(&mut self, count: u32, at: Option<i64>) {
        if let Some(hold) = self.hold_mut() {
            hold.set_count(count);
        }
        if let Some(at) = at {
            self.set_expiry(at);
        }
        self.changed();
        self.replicate_hold(at.or_else(|| self.expires_at()));
    }

    fn put_holder(&mut self, limit: u32, owner: &[u8], holder: Holder) -> bool {
        if self.key.is_none() {
            return false;
        }
        if !matches!(self.lock(), Some(LockRef::Shared(_))) {
            self.set_value(LockValue::Shared(Shared::new(limit)));
        }
        let last = match self.lock_mut() {
            Some(LockMut::Shared(shared)) => {
                // One lookup: the insert says whether the owner is new.
                let Ok(joined) = shared.insert(owner, holder) else {
                    return false;
                };
                if joined {
                    globals::count_holder(true);
                }
                shared.last_lease_end()
            }
            _ => None,
        };
        if let Some(last) = last {
            self.set_expiry(last);
        }
        self.changed();
        self.replicate(Effect::Holder {
            limit,
            owner,
            holder,
        });
        true
    }

    fn remove_holder(&mut self, owner: &[u8]) {
        self.drop_holder(owner, true);
    }

    fn end_lapsed(&mut self, owner: &[u8]) {
        self.drop_holder(owner, false);
    }

    fn tidy(&mut self) {
        if let Some(LockMut::Shared(shared)) = self.lock_mut() {
            globals::free(shared.tidy());
        }
    }

    fn cap_expiry(&mut self, at: i64) {
        self.set_expiry(at);
        self.changed();
        // Not `propagate_cheaply`: runs in a job, where there is no command to propagate.
        effects::replicate(self.ctx, self.name.as_ptr(), &Effect::Expire { at });
    }

    fn remove(&mut self) {
        if self.key.is_none() {
            return;
        }
        self.delete();
        self.changed();
        self.replicate(Effect::Delete);
    }

    fn notify(&mut self, event: Event) {
        let name: &CStr = match event {
            Event::Acquired => c"lock.acquired",
            Event::Released => c"lock.released",
            Event::Expired => c"lock.expired",
            Event::Renewed => c"lock.renewed",
            Event::Granted => c"lock.granted",
            Event::ForceReleased => c"lock.forcereleased",
            Event::Downgraded => c"lock.downgraded",
        };
        // SAFETY: `ctx` and the key's name are live; the event name is a static C string.
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent(
                self.ctx,
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                name.as_ptr(),
                self.name.as_ptr()
            ))
        };
    }
}

impl Drop for RedisKey {
    fn drop(&mut self) {
        if !self.raw().is_null() {
            // SAFETY: the handle opened in `open_as`, closed exactly once, here.
            unsafe { rm!(RedisModule_CloseKey(self.raw())) };
        }
        if let Some(db) = self.restore_db {
            ffi::select_db(self.ctx, db);
        }
    }
}

fn lock_type() -> *mut raw::RedisModuleType {
    *LOCK_TYPE.raw_type.borrow()
}
