//! Small helpers over the Redis module API that every other file of the host uses: panics kept
//! out of Redis, strings, the clock, the selected db.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

/// Called by `rm!` for an API function the server lacks. Unreachable after `init` checked
/// every function the module uses; never unwinds into Redis.
pub fn missing_api(name: &str) -> ! {
    eprintln!("relock: Redis API {name} is missing");
    std::process::abort()
}

/// Runs `f`, turning a panic into `fallback` so that no panic ever crosses into Redis.
pub fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The bytes of a Redis string.
///
/// # Safety
/// `s` must be null or a valid Redis string that outlives `'a` and is not changed meanwhile
/// (a command's argument for the length of the command, say).
pub unsafe fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    // SAFETY: `s` is a valid string (the caller's promise); Redis writes its length to `len`.
    let ptr = unsafe { rm!(RedisModule_StringPtrLen(s, &mut len)) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis returned the string's buffer of `len` bytes, alive as long as the string.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// An error reply's text as a C string (a NUL byte would cut it short).
pub fn error_text(message: &str) -> CString {
    CString::new(message.replace('\0', "")).unwrap_or_else(|_| CString::from(c"ERR relock error"))
}

/// Current Unix time in milliseconds, as Redis sees it.
pub fn now_ms() -> i64 {
    // SAFETY: no arguments; reads the clock.
    unsafe { rm!(RedisModule_Milliseconds()) }
}

/// A monotonic clock in µs since the module first asked (waits are measured with it).
pub fn monotonic_us() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed = START.get_or_init(std::time::Instant::now).elapsed();
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// The CPU time the calling thread has used, in µs: a turn's own work, whatever else the
/// machine ran meanwhile (a busy machine preempts the server; that is not the module's work).
pub fn thread_cpu_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec the call writes; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000).saturating_add(nanos / 1_000)
}

/// The db selected in `ctx`.
pub fn selected_db(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: `ctx` is the live context of the running callback.
    unsafe { rm!(RedisModule_GetSelectedDb(ctx)) }
}

/// Selects `db` in `ctx` (for timer and event contexts).
pub fn select_db(ctx: *mut raw::RedisModuleCtx, db: c_int) -> bool {
    // SAFETY: `ctx` is the live context of the running callback; a bad db number fails softly.
    unsafe { rm!(RedisModule_SelectDb(ctx, db)) == raw::REDISMODULE_OK as c_int }
}

/// How many keys the db selected in `ctx` holds.
pub fn db_size(ctx: *mut raw::RedisModuleCtx) -> u64 {
    // SAFETY: `ctx` is the live context of the running callback.
    unsafe { rm!(RedisModule_DbSize(ctx)) }
}

/// A Redis string this module created and frees.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl OwnedString {
    /// A new Redis string holding `bytes`.
    pub fn new(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) -> Option<OwnedString> {
        // SAFETY: Redis copies `bytes.len()` bytes from a live slice into a new string.
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
        // SAFETY: created by `new` in the same context and freed exactly once, here.
        unsafe { rm!(RedisModule_FreeString(self.ctx, self.ptr.as_ptr())) };
    }
}

/// The server subcommands the module calls by name: `COMMAND INFO` (`LOCK.FENCED` resolving a
/// name), `CLIENT LIST` (a client's description; `BCAST` tracking on 7.0) and `CLUSTER NODES`
/// (where a slot is served).
#[derive(Clone, Copy)]
pub enum Own {
    CommandInfo = 0,
    ClientList = 1,
    ClusterNodes = 2,
}

/// A module user allowed those subcommands only, and each one's arguments.
struct OwnCheck {
    user: *mut raw::RedisModuleUser,
    argv: [[*mut raw::RedisModuleString; 2]; 3],
}

thread_local! {
    /// Made at the first check, kept for the module's life. Main thread only.
    static OWN_CHECK: std::cell::OnceCell<Option<OwnCheck>> =
        const { std::cell::OnceCell::new() };
}

/// Whether the name `COMMAND` (`CLIENT`, `CLUSTER`) finds the server's own `COMMAND INFO`
/// (`CLIENT LIST`, `CLUSTER NODES`) in the live, renamed dictionary: the module calls them by
/// those names, and under `rename-command` another command may be there (`rename-command del command` made every
/// resolution a `DEL INFO <name>`, run unreplicated). ACL rules name commands by their own
/// names, so a user allowed `+command|info`, `+client|list` and `+cluster|nodes` alone passes
/// exactly when the name finds one of those subcommands.
pub fn is_itself(own: Own) -> bool {
    OWN_CHECK.with(|check| {
        let Some(check) = check.get_or_init(|| {
            // SAFETY: plain C strings; the user and the strings (no context: not
            // auto-freed) live as long as the module.
            unsafe {
                let user = rm!(RedisModule_CreateModuleUser(
                    c"relock-own-subcommands".as_ptr()
                ));
                if user.is_null() {
                    return None;
                }
                // A rule the server rejects leaves its subcommand denied: only that one check
                // fails.
                for rule in [c"+command|info", c"+client|list", c"+cluster|nodes"] {
                    rm!(RedisModule_SetModuleUserACL(user, rule.as_ptr()));
                }
                let make = |s: &CStr| {
                    rm!(RedisModule_CreateString(
                        std::ptr::null_mut(),
                        s.as_ptr(),
                        s.to_bytes().len()
                    ))
                };
                Some(OwnCheck {
                    user,
                    argv: [
                        [make(c"COMMAND"), make(c"INFO")],
                        [make(c"CLIENT"), make(c"LIST")],
                        [make(c"CLUSTER"), make(c"NODES")],
                    ],
                })
            }
        }) else {
            return false;
        };
        let mut argv = check.argv[own as usize];
        // SAFETY: a live module user and two live strings; nothing is run, only looked up.
        unsafe {
            rm!(RedisModule_ACLCheckCommandPermissions(
                check.user,
                argv.as_mut_ptr(),
                2
            )) == raw::REDISMODULE_OK as c_int
        }
    })
}

impl Own {
    /// The command and subcommand names it is called by.
    fn names(self) -> (&'static CStr, &'static CStr) {
        match self {
            Own::CommandInfo => (c"COMMAND", c"INFO"),
            Own::ClientList => (c"CLIENT", c"LIST"),
            Own::ClusterNodes => (c"CLUSTER", c"NODES"),
        }
    }
}

/// Runs one of the server's own subcommands through the module API, with none or two more
/// C-string arguments; its reply as text (a bulk or simple string), `None` for an error,
/// another reply type, or a name that is not the server's own subcommand here
/// (`rename-command del client` once made a `CLIENT LIST ID <id>` a `DEL LIST ID <id>`).
pub fn call_own(ctx: *mut raw::RedisModuleCtx, own: Own, rest: &[&CStr]) -> Option<String> {
    if !is_itself(own) {
        return None;
    }
    let (command, sub) = own.names();
    // SAFETY: each format has one "c" per C-string argument passed; the reply is freed below,
    // after its bytes are copied out.
    unsafe {
        let reply = match rest {
            [] => rm!(RedisModule_Call(
                ctx,
                command.as_ptr(),
                c"c".as_ptr(),
                sub.as_ptr()
            )),
            [a, b] => rm!(RedisModule_Call(
                ctx,
                command.as_ptr(),
                c"ccc".as_ptr(),
                sub.as_ptr(),
                a.as_ptr(),
                b.as_ptr()
            )),
            _ => return None,
        };
        if reply.is_null() {
            return None;
        }
        let mut len = 0usize;
        let ptr = rm!(RedisModule_CallReplyStringPtr(reply, &mut len));
        let text = (!ptr.is_null())
            .then(|| String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len)))
            .map(|t| t.into_owned());
        rm!(RedisModule_FreeCallReply(reply));
        text
    }
}
