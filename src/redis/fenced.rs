//! `LOCK.FENCED key token command [arg ...]`: runs the inner command only if `token` proves a
//! live hold of `key`. The order of one call: arguments and the inner command's admission (from
//! the server's own command table, so the answer does not depend on the token), then the
//! token's check in the engine (which is then released), then the inner command through
//! `RedisModule_Call` on the caller's behalf (its user, db, protocol and cluster state), whose
//! reply is passed through unchanged. Nothing of `LOCK.FENCED` itself is replicated: the inner
//! command propagates what it does (`!`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ffi::{CStr, CString};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::raw::c_int;
use std::ptr;
use std::sync::OnceLock;

use redis_module::raw;

use super::commands::{Answer, Args};
use super::ffi;
use super::globals;
use super::host::{RedisHost, RedisKey};
use super::{clients, cluster, server};
use crate::lock::args;

type Ctx = *mut raw::RedisModuleCtx;

/// `MOVED <slot> <ip:port>` to this replica's master, from the module API (no command).
fn moved_to_my_master(ctx: Ctx, key: &[u8]) -> Option<String> {
    const ID: usize = raw::REDISMODULE_NODE_ID_LEN as usize;
    // SAFETY: the node id is `ID` bytes the server owns, copied; the buffers are as long as the API
    // writes (an id, an IP of at most 46 bytes with its NUL).
    unsafe {
        let me_at = rm!(RedisModule_GetMyClusterID());
        if me_at.is_null() {
            return None;
        }
        // Some servers read the id with `strlen`: both ids are passed NUL-terminated.
        let mut me = [0 as std::os::raw::c_char; ID + 1];
        ptr::copy_nonoverlapping(me_at, me.as_mut_ptr(), ID);
        let mut master = [0 as std::os::raw::c_char; ID + 1];
        let got = rm!(RedisModule_GetClusterNodeInfo(
            ctx,
            me.as_ptr(),
            ptr::null_mut(),
            master.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut()
        ));
        if got != raw::REDISMODULE_OK as c_int || master[0] == 0 {
            return None;
        }
        let mut ip = [0 as std::os::raw::c_char; 64];
        let mut port: c_int = 0;
        let got = rm!(RedisModule_GetClusterNodeInfo(
            ctx,
            master.as_ptr(),
            ip.as_mut_ptr(),
            ptr::null_mut(),
            &mut port,
            ptr::null_mut()
        ));
        if got != raw::REDISMODULE_OK as c_int || ip[0] == 0 {
            return None;
        }
        let ip = CStr::from_ptr(ip.as_ptr()).to_string_lossy();
        Some(format!("MOVED {} {ip}:{port}", cluster::key_slot(key)))
    }
}

/// The error of a server without run-as-user for module calls.
const NEEDS_RUN_AS_USER: &str = "ERR LOCK.FENCED needs Redis 7.0.6 or later";
/// A read on 7.0 by a connection whose reads are tracked key by key.
const UNTRACKED: &str = "ERR LOCK.FENCED reads are not tracked on this server version";

/// What the module knows of a server command (from `COMMAND INFO`). `Copy`, so that a lookup
/// per call copies a few words and allocates nothing.
#[derive(Clone, Copy, Debug)]
struct Inner {
    /// It is `COPY` (refused with `DB`).
    copy: bool,
    arity: i64,
    refused: bool,
    script: bool,
    readonly: bool,
    /// It has subcommands: look the next argument up.
    container: bool,
}

/// A table entry: the command's judgement, and its own full name (`config|get`), which Redis
/// 7.0's `NOPERM` text names whatever name it was sent under.
struct Entry {
    inner: Inner,
    fullname: Box<str>,
}

/// FNV-1a over a command's name: the table only holds names the server resolves to one of its
/// commands (at most one live name per command), so no caller can make its chains longer;
/// SipHash's defence is not needed and costs more than the rest of the lookup.
#[derive(Default)]
struct NameHasher(u64);

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    /// The length `[u8]`'s `Hash` writes before the bytes: one step, not eight.
    fn write_usize(&mut self, n: usize) {
        let h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        self.0 = (h ^ n as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Entries by the name a caller sent, ASCII letters lowered (Redis's own command lookup folds
/// ASCII case only), `name|sub` for a subcommand.
type Table = HashMap<Box<[u8]>, Entry, BuildHasherDefault<NameHasher>>;

thread_local! {
    /// What the server's live command dictionary resolves each name sent so far to (never a
    /// name it does not know), emptied when a module is loaded or unloaded. Keyed by the name
    /// as sent, not by the command's own name: `rename-command` moves a command to another
    /// name (`COMMAND` still shows the original), and `RedisModule_Call` runs whatever the
    /// sent name finds. Main thread only.
    static TABLE: RefCell<Table> = const {
        RefCell::new(Table::with_hasher(BuildHasherDefault::new()))
    };
}

/// Scripts and functions: the only `noscript` commands an inner command may be.
const SCRIPTS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// At load: the table starts empty (each name is resolved at its first use).
pub fn load_table(_ctx: Ctx) {
    forget_table();
}

/// A module was loaded or unloaded: every name is resolved again before it is next used.
pub fn forget_table() {
    TABLE.with(|t| t.borrow_mut().clear());
}

/// Whether another module's command may run through `LOCK.FENCED` here: a module command that
/// blocks without the `blocking` flag (nothing in its entry tells) must be undone at once, and
/// only Redis 8.6+ (tested: 8.6.3) survives that. On Redis 7.0 (no `K`) the blocked temporary
/// client fails `(c->flags & CLIENT_BLOCKED) == 0` in RM_Call; on Redis 8.2.3 and Valkey
/// 8.1.8 / 9.1.2 (tested; Redis 7.2 .. 8.4 untested) `RedisModule_CallReplyPromiseAbort`
/// fails `c->duration == 0` in `resetClient`: both abort the server. Read once.
fn module_blocks_abort_safely(ctx: Ctx) -> bool {
    static SAFE: OnceLock<bool> = OnceLock::new();
    *SAFE.get_or_init(|| {
        let [name, version] =
            server::server_info_text(ctx, c"server", [c"server_name", c"redis_version"]);
        let mut parts = version
            .as_deref()
            .unwrap_or("")
            .split('.')
            .map(|p| p.parse::<u32>().ok());
        let (major, minor) = (parts.next().flatten(), parts.next().flatten());
        // Valkey names itself; Redis 8 does too, Redis 7 does not.
        name.as_deref().is_none_or(|n| n == "redis")
            && matches!((major, minor), (Some(major), Some(minor)) if (major, minor) >= (8, 6))
    })
}

/// What the server's live dictionary resolves `name` (a command name as sent) to:
/// `COMMAND INFO name`, which looks `name` up where a call of it would (the renamed
/// dictionary), and names the command by its own name. `Ok(false)`: no such command; `Err`:
/// the server did not answer.
fn resolve(ctx: Ctx, key: &[u8], name: *mut raw::RedisModuleString) -> Result<bool, &'static str> {
    if !ffi::is_itself(ffi::Own::CommandInfo) {
        return Err(NO_COMMAND_INFO);
    }
    // SAFETY: "cs": a C string and a live module string; the reply is freed below.
    let reply = unsafe {
        rm!(RedisModule_Call(
            ctx,
            c"COMMAND".as_ptr(),
            c"cs".as_ptr(),
            c"INFO".as_ptr(),
            name
        ))
    };
    if reply.is_null() {
        return Err("ERR relock internal error");
    }
    let entry = element(reply, 0);
    let found = reply_len(entry) > 0;
    if found {
        TABLE.with(|t| add_entry(ctx, &mut t.borrow_mut(), key.to_vec(), entry));
    }
    // SAFETY: `reply` came from `RedisModule_Call` and is freed once.
    unsafe { rm!(RedisModule_FreeCallReply(reply)) };
    Ok(found)
}

/// The error where `COMMAND INFO` is not the server's own (renamed, disabled, or another
/// command renamed to `COMMAND`): no name can be resolved, so nothing runs.
const NO_COMMAND_INFO: &str =
    "ERR LOCK.FENCED needs the COMMAND command, which is renamed or disabled on this server";

/// One `COMMAND INFO` entry (and its subcommands), under `key`: name, arity, flags, first,
/// last, step, ACL categories, tips, key specs, subcommands. The judgement uses the entry's own
/// name (that of the command that runs), never the name it was sent under.
fn add_entry(ctx: Ctx, table: &mut Table, key: Vec<u8>, entry: *mut raw::RedisModuleCallReply) {
    let Some(fullname) = text(element(entry, 0)).map(|n| n.to_ascii_lowercase()) else {
        return;
    };
    let arity = integer(element(entry, 1));
    let flags = words(element(entry, 2));
    let acl = words(element(entry, 6));
    let key_specs = reply_len(element(entry, 8));
    let subcommands = element(entry, 9);
    let has = |list: &[String], w: &str| list.iter().any(|f| f.eq_ignore_ascii_case(w));
    let script = SCRIPTS.contains(&fullname.as_str());
    let container = reply_len(subcommands) > 0;
    let refused = !script
        && (fullname.starts_with("lock.")
            || fullname == "move"
            || fullname == "migrate"
            || ["admin", "pubsub", "blocking", "no_multi", "noscript"]
                .iter()
                .any(|f| has(&flags, f))
            || ["@connection", "@transaction"].iter().any(|c| has(&acl, c))
            || (key_specs == 0 && !container)
            // Another module's command where a block inside the call cannot be undone
            // safely: see `module_blocks_abort_safely`.
            || (has(&flags, "module") && !module_blocks_abort_safely(ctx)));
    let inner = Inner {
        copy: fullname == "copy",
        arity,
        refused,
        script,
        readonly: has(&flags, "readonly"),
        container,
    };
    for i in 0..reply_len(subcommands) {
        let sub = element(subcommands, i);
        // A subcommand's own name is `container|sub`: filed under `key|sub`.
        let Some(name) = text(element(sub, 0)) else {
            continue;
        };
        let Some((_, sub_name)) = name.split_once('|') else {
            continue;
        };
        let mut sub_key = key.clone();
        sub_key.push(b'|');
        sub_key.extend(sub_name.bytes().map(|b| b.to_ascii_lowercase()));
        add_entry(ctx, table, sub_key, sub);
    }
    table.insert(
        key.into_boxed_slice(),
        Entry {
            inner,
            fullname: fullname.into_boxed_str(),
        },
    );
}

fn reply_len(reply: *mut raw::RedisModuleCallReply) -> usize {
    if reply.is_null() {
        return 0;
    }
    // SAFETY: `reply` is a live call reply (or an element of one).
    match unsafe { rm!(RedisModule_CallReplyType(reply)) } as u32 {
        t if t == raw::REDISMODULE_REPLY_ARRAY as u32 => {
            // SAFETY: as above.
            unsafe { rm!(RedisModule_CallReplyLength(reply)) }
        }
        _ => 0,
    }
}

fn element(reply: *mut raw::RedisModuleCallReply, i: usize) -> *mut raw::RedisModuleCallReply {
    if i >= reply_len(reply) {
        return ptr::null_mut();
    }
    // SAFETY: `reply` is a live array reply with more than `i` elements.
    unsafe { rm!(RedisModule_CallReplyArrayElement(reply, i)) }
}

fn text(reply: *mut raw::RedisModuleCallReply) -> Option<String> {
    if reply.is_null() {
        return None;
    }
    let mut len = 0usize;
    // SAFETY: `reply` is a live element; the bytes are copied before the reply is freed.
    let p = unsafe { rm!(RedisModule_CallReplyStringPtr(reply, &mut len)) };
    // SAFETY: Redis gives `len` readable bytes at `p`.
    (!p.is_null()).then(|| {
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
            .into_owned()
    })
}

fn integer(reply: *mut raw::RedisModuleCallReply) -> i64 {
    if reply.is_null() {
        return 0;
    }
    // SAFETY: `reply` is a live element.
    unsafe { rm!(RedisModule_CallReplyInteger(reply)) }
}

fn words(reply: *mut raw::RedisModuleCallReply) -> Vec<String> {
    (0..reply_len(reply))
        .filter_map(|i| text(element(reply, i)))
        .collect()
}

/// What the table says of an inner command.
enum Lookup {
    Found(Inner),
    /// Not in the table.
    Missing,
    /// The table cannot be read: nothing may run (the error says why).
    NoTable(&'static str),
}

/// Room on the stack for a lower-cased command name (`container|sub` included): longer names
/// are lowered into a `Vec`.
const NAME_ROOM: usize = 64;

/// The table's key for `parts` joined by `|`, ASCII letters lowered, every other byte kept.
/// In `buf` when it fits, so a call of `LOCK.FENCED` does not allocate for it.
fn table_key<'b>(parts: &[&[u8]], buf: &'b mut [u8; NAME_ROOM]) -> Cow<'b, [u8]> {
    let len = parts.iter().map(|p| p.len()).sum::<usize>() + parts.len().saturating_sub(1);
    let mut owned = Vec::new();
    let out: &mut [u8] = if len <= NAME_ROOM {
        &mut buf[..len]
    } else {
        owned.resize(len, 0);
        &mut owned
    };
    let mut at = 0;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out[at] = b'|';
            at += 1;
        }
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out.make_ascii_lowercase();
    if len <= NAME_ROOM {
        Cow::Borrowed(&buf[..len])
    } else {
        Cow::Owned(owned)
    }
}

/// What the table says of the inner command, `args` 3 on (its name, then its arguments),
/// resolving the name first if it is new.
fn look_up(ctx: Ctx, args: Args<'_>) -> Lookup {
    if args.count() < 4 {
        return Lookup::Missing;
    }
    let first = args.bytes(3);
    // `COMMAND INFO a|b` reads `a|b` as container `a`, subcommand `b`; a call of `a|b` looks
    // up the name `a|b` (not a command unless renamed to it: then it is refused, unjudged).
    // A NUL ends the name for the server's case-folding compare, not for its hash: `COMMAND
    // INFO set\0x` finds SET when the two share a bucket (8 names in 3,000 on 7.0), and each
    // such name was kept, a table without bound. The call cannot run such a name anyway.
    if first.contains(&b'|') || first.contains(&0) {
        return Lookup::Missing;
    }
    let mut buf = [0u8; NAME_ROOM];
    let name = table_key(&[first], &mut buf);
    // The entry, or its subcommand's; `None` when the name is new to the table.
    let judge = |table: &Table| {
        let found = table.get(name.as_ref())?;
        let found = if found.inner.container && args.count() > 4 {
            let mut buf = [0u8; NAME_ROOM];
            table
                .get(table_key(&[first, args.bytes(4)], &mut buf).as_ref())
                .map(|e| e.inner)
        } else {
            Some(found.inner)
        };
        Some(found.map_or(Lookup::Missing, Lookup::Found))
    };
    if let Some(found) = TABLE.with(|t| judge(&t.borrow())) {
        return found;
    }
    match resolve(ctx, &name, args.raw(3)) {
        Ok(true) => TABLE
            .with(|t| judge(&t.borrow()))
            .unwrap_or(Lookup::Missing),
        Ok(false) => Lookup::Missing,
        Err(why) => Lookup::NoTable(why),
    }
}

/// Whether the server has no such command (or subcommand), so that a call cannot run it:
/// `RedisModule_GetCommandKeysWithFlags` fails with `ENOENT` exactly then.
fn unknown_to_server(ctx: Ctx, args: Args<'_>) -> bool {
    let inner = args.all().get(3..).unwrap_or(&[]);
    let mut n: c_int = 0;
    // SAFETY: the inner command's arguments are live strings; no flags array is asked for and
    // the positions returned (if any) are freed below.
    let positions = unsafe {
        rm!(RedisModule_GetCommandKeysWithFlags(
            ctx,
            inner.as_ptr().cast_mut(),
            c_int::try_from(inner.len()).unwrap_or(c_int::MAX),
            &mut n,
            ptr::null_mut()
        ))
    };
    if !positions.is_null() {
        // SAFETY: allocated by Redis for this call, freed once.
        unsafe { rm!(RedisModule_Free(positions.cast())) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(ENOENT)
}

/// `ENOENT` (2 on every platform Redis runs on).
const ENOENT: i32 = 2;

/// Redis's own arity check (`commandCheckArity`), exactly: a command that fails it is run only
/// for Redis's error, without the token's check, so it must never pass Redis's check. Arity 0
/// (no check) fits any count.
fn arity_fits(arity: i64, n: usize) -> bool {
    let n = n as i64;
    !((arity > 0 && arity != n) || n < -arity)
}

/// The server's version as `0x00MMmmpp`; 0 if unknown.
fn version() -> c_int {
    // SAFETY: reads a function pointer the module API table filled in at load.
    match unsafe { raw::RedisModule_GetServerVersion } {
        // SAFETY: no arguments.
        Some(f) => unsafe { f() },
        None => 0,
    }
}

/// Redis 7.0 (or older): reads through a module call are not tracked, `K` does not exist and
/// RM_Call's ACL text differs.
fn is_7_0() -> bool {
    version() < 0x0007_0200
}

/// `LOCK.FENCED key token command [arg ...]`
pub fn fenced(ctx: Ctx, args: Args<'_>) -> Result<Answer, Answer> {
    // Always served by the slot's master. Not being a `write` command, it reaches a cluster
    // replica from a `READONLY` connection: the replica's copy cannot vouch for a token, so
    // nothing is checked or run here, and the caller gets the `MOVED` a write would.
    // `CLUSTER NODES` is read only where `CLUSTER` is the server's own (renamed away, the
    // replica served the call from its copy); else the master is the one the module API names.
    if globals::is_replica() && server::cluster_enabled(ctx) {
        let redirect = if ffi::is_itself(ffi::Own::ClusterNodes) {
            cluster::redirect(ctx, args.bytes(1))
        } else {
            None
        };
        let redirect = redirect.or_else(|| moved_to_my_master(ctx, args.bytes(1)));
        return Err(Answer::Error(redirect.map_or(
            Cow::Borrowed("TRYAGAIN the key's slot is not served by this node; retry the command"),
            Cow::Owned,
        )));
    }
    // SAFETY: reads a function pointer the module API table filled in at load (7.0.6+).
    if unsafe { raw::RedisModule_SetContextUser }.is_none() {
        return Err(refused(Cow::Borrowed(NEEDS_RUN_AS_USER)));
    }
    // The inner command: arguments 3 on (arity -4: there is one). Nothing here allocates on
    // the way to the call; the name as written is only made into text for an error.
    let inner = args.all().get(3..).unwrap_or(&[]);
    let written = || String::from_utf8_lossy(args.bytes(3)).into_owned();
    let found = match look_up(ctx, args) {
        Lookup::Found(found) => found,
        // Unknown command or subcommand: Redis's own error (the call cannot run it).
        Lookup::Missing if unknown_to_server(ctx, args) => return Ok(call(ctx, args, false)),
        // A command the table does not know (yet) is not judged: refused.
        Lookup::Missing => {
            return Err(refused(Cow::Owned(format!(
                "ERR {} cannot run in LOCK.FENCED",
                written()
            ))))
        }
        Lookup::NoTable(why) => return Err(refused(Cow::Borrowed(why))),
    };
    if !arity_fits(found.arity, inner.len()) {
        return Ok(call(ctx, args, false));
    }
    let copy_to_db =
        found.copy && (6..args.count()).any(|i| args.bytes(i).eq_ignore_ascii_case(b"DB"));
    if found.refused || copy_to_db {
        return Err(refused(Cow::Owned(format!(
            "ERR {} cannot run in LOCK.FENCED",
            written()
        ))));
    }
    if found.script && in_script(ctx) {
        return Err(refused(Cow::Owned(format!(
            "ERR {} cannot run in LOCK.FENCED inside a script",
            written()
        ))));
    }
    if (found.readonly || found.script) && is_7_0() && tracked(ctx) {
        return Err(refused(Cow::Borrowed(UNTRACKED)));
    }
    let token = args::token(args.bytes(2))?;
    {
        let key = RedisKey::open(ctx, args.raw(1), true)?;
        let host = &mut RedisHost::for_command(ctx, args.all(), clients::block);
        // The command's time (frozen for a MULTI or a script) where the server has it, 7.2+.
        let now = server::command_started_us().map_or_else(ffi::now_ms, |us| us / 1000);
        let fence = globals::with_engine(host, |e, _| e.fence(&key, token, now))
            .ok_or(Answer::Error(Cow::Borrowed("ERR relock internal error")))?;
        if let Some(error) = fence.error() {
            return Err(Answer::Error(Cow::Owned(error)));
        }
        // The key closes and the engine is free before the inner command runs.
    }
    let answer = if found.script {
        // Held until the script's reply is sent: see `Protected`.
        let _protected = Protected::caller(ctx);
        call(ctx, args, false)
    } else {
        call(ctx, args, true)
    };
    globals::configure_engine(|e| e.fenced_ran());
    Ok(answer)
}

/// The server's `protectClient` / `unprotectClient`.
// SAFETY: called only with the live client running the command (see `Protected`).
type ClientFn = unsafe extern "C" fn(*mut c_void);

/// The connection that sent `LOCK.FENCED` (or the `EXEC` holding it), kept from being read or
/// freed while a script it runs is past `busy-reply-threshold`. Such a script lets the event
/// loop run, and Redis then protects the script's caller, which is the module call's temporary
/// client: the real connection, unprotected, was read mid-command (an assertion on Redis 8) or
/// freed if it disconnected, and `call()` then used the freed client (SIGSEGV on 7.0 and
/// Valkey). Redis has no module API for this; its own `protectClient`, which a direct `EVAL`'s
/// caller gets, is an exported symbol of every server the module runs on.
struct Protected {
    client: *mut c_void,
    unprotect: ClientFn,
}

impl Protected {
    /// Protects the command's client; `None` (running unprotected, as before) where the
    /// server's functions or the expected layout are not found.
    fn caller(ctx: Ctx) -> Option<Protected> {
        let (protect, unprotect) = (*CLIENT_FNS.get_or_init(client_fns))?;
        // The module context starts with `getapifuncptr`, `module`, `client` (every Redis since
        // 4.0 and Valkey); a client starts with its id, which checks the layout.
        // SAFETY: `ctx` is the running command's context, at least three pointers long.
        let client = unsafe { *(ctx as *const *mut c_void).add(2) };
        if client.is_null() {
            return None;
        }
        // SAFETY: `client` is the context's live client, whose first field is a u64.
        let id = unsafe { *(client as *const u64) };
        // SAFETY: `ctx` is the running command's context.
        if id == 0 || id != unsafe { rm!(RedisModule_GetClientId(ctx)) } {
            return None;
        }
        // SAFETY: `client` is the live client running this command; unprotected on drop,
        // before the command returns.
        unsafe { protect(client) };
        Some(Protected { client, unprotect })
    }
}

impl Drop for Protected {
    fn drop(&mut self) {
        // SAFETY: the client protected by `caller`, still alive (a protected client is only
        // freed asynchronously, after the command).
        unsafe { (self.unprotect)(self.client) }
    }
}

static CLIENT_FNS: OnceLock<Option<(ClientFn, ClientFn)>> = OnceLock::new();

fn client_fns() -> Option<(ClientFn, ClientFn)> {
    // SAFETY: looks up two symbols of the running server by name.
    let (p, u) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"protectClient".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"unprotectClient".as_ptr()),
        )
    };
    if p.is_null() || u.is_null() {
        return None;
    }
    // SAFETY: both are `void f(client *c)` in every Redis and Valkey that has them.
    unsafe {
        Some((
            std::mem::transmute::<*mut c_void, ClientFn>(p),
            std::mem::transmute::<*mut c_void, ClientFn>(u),
        ))
    }
}

/// A refusal before the check, counted.
fn refused(message: Cow<'static, str>) -> Answer {
    globals::configure_engine(|e| e.fenced_refused());
    Answer::Error(message)
}

/// Whether a script or function is running (Redis cannot nest them).
fn in_script(ctx: Ctx) -> bool {
    // SAFETY: `ctx` is the running command's context.
    let flags = unsafe { rm!(RedisModule_GetContextFlags(ctx)) };
    flags & raw::REDISMODULE_CTX_FLAGS_LUA as c_int != 0
}

/// Whether the caller tracks keys one by one (tracking on, not `BCAST`).
fn tracked(ctx: Ctx) -> bool {
    // SAFETY: `ctx` is the running command's context.
    let id = unsafe { rm!(RedisModule_GetClientId(ctx)) };
    if id == 0 {
        return false;
    }
    // SAFETY: a zeroed `RedisModuleClientInfo` with its version set is what the call fills in.
    let mut info: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    info.version = 1;
    // SAFETY: `info` is a live struct of the version given.
    let found = unsafe {
        rm!(RedisModule_GetClientInfoById(
            (&mut info as *mut raw::RedisModuleClientInfo).cast(),
            id
        ))
    };
    if found != raw::REDISMODULE_OK as c_int
        || info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_TRACKING) == 0
    {
        return false;
    }
    // The module API does not tell BCAST; CLIENT LIST's flags do (`B`). Where `CLIENT` is not
    // the server's own (renamed), nothing is called under that name: taken as tracked.
    if !ffi::is_itself(ffi::Own::ClientList) {
        return true;
    }
    let id = CString::new(id.to_string()).unwrap_or_default();
    let line = ffi::call_own(ctx, ffi::Own::ClientList, &[c"ID", &id]).unwrap_or_default();
    let flags = line
        .split(' ')
        .find_map(|f| f.strip_prefix("flags="))
        .unwrap_or("");
    !flags.contains('B')
}

/// Runs the inner command (arguments 3 on) on the caller's behalf and replies with its reply,
/// or, where RM_Call refuses it, with Redis's own error.
fn call(ctx: Ctx, args: Args<'_>, script_mode: bool) -> Answer {
    // The name as a C string: on the stack when it fits (every command name does).
    let written = args.bytes(3);
    let mut buf = [0u8; NAME_ROOM + 1];
    let owned;
    let name: &CStr = if written.len() < buf.len() {
        buf[..written.len()].copy_from_slice(written);
        // A NUL inside the name fails here as it does in `CString::new`.
        match CStr::from_bytes_with_nul(&buf[..=written.len()]) {
            Ok(name) => name,
            Err(_) => return unknown_command(written),
        }
    } else {
        match CString::new(written) {
            Ok(name) => {
                owned = name;
                &owned
            }
            Err(_) => return unknown_command(written),
        }
    };
    // SAFETY: reads a function pointer the module API table filled in at load (7.2+).
    let may_block = unsafe { raw::RedisModule_CallReplyPromiseAbort }.is_some() && !is_7_0();
    let format = match (script_mode, may_block) {
        (true, true) => c"v!CE0MSK",
        (true, false) => c"v!CE0MS",
        (false, true) => c"v!CE0MK",
        (false, false) => c"v!CE0M",
    };
    let rest = args.all().get(4..).unwrap_or(&[]);
    // SAFETY: "v" takes the argument vector and its length; the strings live until the command
    // returns, and Redis takes its own references. The reply is freed below.
    let reply = unsafe {
        rm!(RedisModule_Call(
            ctx,
            name.as_ptr(),
            format.as_ptr(),
            rest.as_ptr(),
            rest.len()
        ))
    };
    if reply.is_null() {
        return Answer::Error(Cow::Borrowed("ERR relock internal error"));
    }
    // SAFETY: `reply` is live.
    let kind = unsafe { rm!(RedisModule_CallReplyType(reply)) };
    let answer = if kind == raw::REDISMODULE_REPLY_PROMISE as c_int {
        let mut data = ptr::null_mut();
        // SAFETY: a promise reply from a call with `K` (7.2+, checked above): aborting it
        // unblocks and frees the inner client.
        unsafe {
            if let Some(abort) = raw::RedisModule_CallReplyPromiseAbort {
                abort(reply, &mut data);
            }
        }
        Answer::Error(Cow::Owned(format!(
            "ERR {} would block in LOCK.FENCED",
            String::from_utf8_lossy(args.bytes(3))
        )))
    } else if kind == raw::REDISMODULE_REPLY_ERROR as c_int && is_7_0() {
        match text(reply).as_deref().and_then(|t| noperm_7_0(t, args)) {
            Some(text) => Answer::Error(Cow::Owned(text)),
            None => passed_through(ctx, reply),
        }
    } else {
        passed_through(ctx, reply)
    };
    // SAFETY: `reply` came from `RedisModule_Call` and is freed once.
    unsafe { rm!(RedisModule_FreeCallReply(reply)) };
    answer
}

fn unknown_command(written: &[u8]) -> Answer {
    Answer::Error(Cow::Owned(format!(
        "ERR unknown command '{}'",
        String::from_utf8_lossy(written)
    )))
}

fn passed_through(ctx: Ctx, reply: *mut raw::RedisModuleCallReply) -> Answer {
    // SAFETY: `ctx` is the running command's context; `reply` is live.
    unsafe { rm!(RedisModule_ReplyWithCallReply(ctx, reply)) };
    Answer::Sent
}

/// Redis 7.0's RM_Call says "acl verification failed, <why>." where a direct call gets
/// `-NOPERM <text>`: the text Redis 7.0 gives a direct call.
fn noperm_7_0(text: &str, args: Args<'_>) -> Option<String> {
    let why = text
        .strip_prefix("ERR ")
        .unwrap_or(text)
        .strip_prefix("acl verification failed, ")?;
    if why.starts_with("can't run") {
        // Redis names the command's own full name, whatever name it was sent under.
        let mut buf = [0u8; NAME_ROOM];
        let mut sub_buf = [0u8; NAME_ROOM];
        let name = table_key(&[args.bytes(3)], &mut buf);
        let fullname = TABLE
            .with(|t| {
                let t = t.borrow();
                let entry = t.get(name.as_ref())?;
                let sub = match args.count() {
                    n if n > 4 && entry.inner.container => {
                        t.get(table_key(&[args.bytes(3), args.bytes(4)], &mut sub_buf).as_ref())
                    }
                    _ => None,
                };
                Some(sub.unwrap_or(entry).fullname.to_string())
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&name).into_owned());
        Some(format!(
            "NOPERM this user has no permissions to run the '{fullname}' command"
        ))
    } else if why.starts_with("can't access") {
        Some(
            "NOPERM this user has no permissions to access one of the keys used as arguments"
                .into(),
        )
    } else if why.starts_with("can't publish") {
        Some(
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .into(),
        )
    } else {
        None
    }
}

/// Where `LOCK.FENCED`'s keys are (its getkeys-api callback, for ACL, cluster routing and
/// `COMMAND GETKEYS`): `key` (read), then the inner command's keys with their own flags.
pub fn key_positions(ctx: Ctx, argv: *mut *mut raw::RedisModuleString, argc: c_int) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    if argc < 2 || argv.is_null() {
        return ok;
    }
    let read = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
    // SAFETY: `ctx` is the key-position request's context; 1 is an argument index.
    unsafe {
        rm!(RedisModule_KeyAtPosWithFlags(
            ctx,
            1,
            c_int::try_from(read).unwrap_or(0)
        ))
    };
    if argc < 4 {
        return ok;
    }
    // SAFETY: Redis passes `argc` valid arguments at `argv`.
    let name = unsafe { ffi::string_bytes(*argv.add(3)) };
    if name.len() >= 5 && name[..5].eq_ignore_ascii_case(b"lock.") {
        return ok;
    }
    let (mut n, mut flags) = (0 as c_int, ptr::null_mut::<c_int>());
    // SAFETY: the inner command's arguments are `argc - 3` live strings from `argv + 3`; the
    // arrays returned are freed below.
    let positions = unsafe {
        rm!(RedisModule_GetCommandKeysWithFlags(
            ctx,
            argv.add(3),
            argc - 3,
            &mut n,
            &mut flags
        ))
    };
    if positions.is_null() {
        return ok;
    }
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: Redis returned `n` positions and `n` flags.
        let (pos, flag) = unsafe {
            (
                *positions.add(i),
                if flags.is_null() { 0 } else { *flags.add(i) },
            )
        };
        // SAFETY: as above; `pos + 3` is an argument index of `LOCK.FENCED`.
        unsafe { rm!(RedisModule_KeyAtPosWithFlags(ctx, pos + 3, flag)) };
    }
    // SAFETY: both arrays were allocated by Redis for this call and are freed once.
    unsafe {
        rm!(RedisModule_Free(positions.cast()));
        if !flags.is_null() {
            rm!(RedisModule_Free(flags.cast()));
        }
    }
    ok
}

/// Whether `ctx`'s call is Redis asking for the keys.
pub fn keys_asked(ctx: Ctx) -> bool {
    // SAFETY: `ctx` is the command's context.
    unsafe { rm!(RedisModule_IsKeysPositionRequest(ctx)) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arity() {
        assert!(arity_fits(2, 2));
        assert!(!arity_fits(2, 3));
        assert!(arity_fits(-3, 5));
        assert!(!arity_fits(-3, 2));
        // No check: a count that fails here would have run unchecked.
        assert!(arity_fits(0, 1));
        assert!(arity_fits(0, 7));
    }

    /// The table's key folds what Redis's own command lookup folds (ASCII letters, as
    /// `strcasecmp` does) and nothing else: two names get one key exactly when the server would
    /// find one command under both. The key is the entry judged, so a key shared by two names
    /// the server tells apart would judge one by the other's entry (as a lossy UTF-8 key did for
    /// any two invalid names). Same bytes on the stack and past `NAME_ROOM`.
    #[test]
    fn table_keys() {
        let key = |parts: &[&[u8]]| {
            let mut buf = [0u8; NAME_ROOM];
            table_key(parts, &mut buf).into_owned()
        };
        assert_eq!(key(&[b"hSeT"]), b"hset");
        assert_eq!(key(&[b"CLIENT", b"List"]), b"client|list");
        // Not ASCII: kept as sent (Redis does not fold `\xc3\x89` to `\xc3\xa9`).
        assert_eq!(key(&[b"caf\xc3\x89"]), b"caf\xc3\x89");
        // Invalid UTF-8 stays distinct byte for byte.
        assert_eq!(key(&[b"BAD\xff"]), b"bad\xff");
        assert_ne!(key(&[b"bad\xff"]), key(&[b"bad\xfe"]));
        // Past the room on the stack: the same key, built on the heap.
        let long = [b'X'; NAME_ROOM + 1];
        let mut buf = [0u8; NAME_ROOM];
        let far = table_key(&[&long], &mut buf);
        assert!(matches!(far, Cow::Owned(_)));
        assert_eq!(far.as_ref(), [b'x'; NAME_ROOM + 1]);
        let mut buf = [0u8; NAME_ROOM];
        let exact = table_key(&[&long[..NAME_ROOM - 4], b"SuB"], &mut buf);
        assert!(matches!(exact, Cow::Borrowed(_)));
        let mut want = vec![b'x'; NAME_ROOM - 4];
        want.extend_from_slice(b"|sub");
        assert_eq!(exact.as_ref(), want);
        let mut buf = [0u8; NAME_ROOM];
        let over = table_key(&[&long[..NAME_ROOM - 3], b"SuB"], &mut buf);
        assert!(matches!(over, Cow::Owned(_)));
        want.insert(0, b'x');
        assert_eq!(over.as_ref(), want);
    }
}
