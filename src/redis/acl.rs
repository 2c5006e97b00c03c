//! Permission checks at grant time. A client waiting in `LOCK.WAIT` was allowed to run the
//! command when it blocked; by the time the lock is handed to it, `ACL SETUSER` may have taken
//! the key pattern or the command away (or `ACL DELUSER` the user). Redis 7.2+ re-checks its own
//! blocked clients when it serves them; the module does the same, on every server version.

use std::ptr::NonNull;

use redis_module::raw;

/// A string retained past the command that created it; freed on drop.
struct Held(NonNull<raw::RedisModuleString>);

impl Held {
    fn new(ctx: *mut raw::RedisModuleCtx, s: *mut raw::RedisModuleString) -> Option<Held> {
        // SAFETY: `s` is a valid string of the running command; HoldString returns a string
        // the caller owns (a new reference or a copy).
        NonNull::new(unsafe { rm!(RedisModule_HoldString(ctx, s)) }).map(Held)
    }
}

impl Held {
    /// A new string holding `bytes`, owned (not under any context's automatic memory).
    fn copy_of(bytes: &[u8]) -> Option<Held> {
        // SAFETY: Redis copies `bytes.len()` bytes from a live slice; a null context is allowed.
        let s = unsafe {
            rm!(RedisModule_CreateString(
                std::ptr::null_mut(),
                bytes.as_ptr().cast(),
                bytes.len()
            ))
        };
        NonNull::new(s).map(Held)
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        // SAFETY: both are live strings we hold.
        unsafe { rm!(RedisModule_StringCompare(self.0.as_ptr(), other.0.as_ptr())) == 0 }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: we own this reference; a null context is allowed for strings not under
        // automatic memory management.
        unsafe {
            rm!(RedisModule_FreeString(
                std::ptr::null_mut(),
                self.0.as_ptr()
            ))
        };
    }
}

/// Who ran a blocking command, and the command itself, to ask again later whether they may.
/// Equal callers (same user, same command) may be kept once: the observers of a key share theirs.
#[derive(PartialEq)]
pub struct Caller {
    user: Held,
    argv: Vec<Held>,
}

impl Caller {
    /// Remembers the running command's user and arguments. `None` when the client has no
    /// user (internal clients, e.g. another module's `RedisModule_Call`): nothing to re-check.
    pub fn of_running_command(
        ctx: *mut raw::RedisModuleCtx,
        argv: &[*mut raw::RedisModuleString],
    ) -> Option<Caller> {
        // By client id rather than RedisModule_GetCurrentUserName, which dereferences the
        // client's user unchecked (null for internal clients).
        // SAFETY: plain calls on the running command's context.
        let name = unsafe {
            let id = rm!(RedisModule_GetClientId(ctx));
            rm!(RedisModule_GetClientUserNameById(ctx, id))
        };
        let user = Held(NonNull::new(name)?);
        let argv = argv
            .iter()
            .map(|&a| Held::new(ctx, a))
            .collect::<Option<Vec<_>>>()?;
        Some(Caller { user, argv })
    }

    /// The caller of a `LOCK.OBSERVE key known_token timeout_ms` as the same user's every
    /// observer of that key would be (`LOCK.OBSERVE key 0 0`: the numbers play no part in the
    /// ACL check), so that they share it.
    pub fn of_observer(
        ctx: *mut raw::RedisModuleCtx,
        argv: &[*mut raw::RedisModuleString],
    ) -> Option<Caller> {
        let mut caller = Caller::of_running_command(ctx, argv.get(..2)?)?;
        for _ in 2..argv.len() {
            caller.argv.push(Held::copy_of(b"0")?);
        }
        Some(caller)
    }

    /// Whether the user still exists and may still run the command on its key.
    pub fn still_permitted(&self) -> bool {
        // SAFETY: the name is a live string; the returned user is freed below and used only
        // in between (a user may be deleted at any time, so it is looked up each time).
        let user = unsafe { rm!(RedisModule_GetModuleUserFromUserName(self.user.0.as_ptr())) };
        if user.is_null() {
            return false;
        }
        let mut argv: Vec<*mut raw::RedisModuleString> =
            self.argv.iter().map(|a| a.0.as_ptr()).collect();
        let Ok(argc) = i32::try_from(argv.len()) else {
            // SAFETY: `user` came from `GetModuleUserFromUserName` above and is freed once.
            unsafe { rm!(RedisModule_FreeModuleUser(user)) };
            return false;
        };
        // SAFETY: `user` is live until freed; `argv` holds `argc` live strings. The check covers
        // the command, its ACL categories and its key (through the command's key specs).
        let allowed = unsafe {
            rm!(RedisModule_ACLCheckCommandPermissions(
                user,
                argv.as_mut_ptr(),
                argc
            ))
        } == raw::REDISMODULE_OK as i32;
        // SAFETY: `user` came from `GetModuleUserFromUserName` above and is freed once.
        unsafe { rm!(RedisModule_FreeModuleUser(user)) };
        allowed
    }
}
