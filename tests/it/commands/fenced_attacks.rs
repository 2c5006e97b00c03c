//! `LOCK.FENCED` under attack: what an attempt to break it found, one test per finding, each
//! saying what broke and what must hold.
use relock_testkit as common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use super::fenced::{fenced, is_7_0};
use common::reply::error_reply;
use common::{eventually, Server};

const LONG_TTL: u64 = 100_000;

/// The RESP encoding of one command.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// A script body that keeps the server busy for `ARGV[1]` ms (os.clock on 7.2+, where TIME is
/// frozen in a script; 7.0 has no os.clock and its TIME moves).
fn spin(c: &mut redis::Connection) -> &'static str {
    let v = common::info_str(c, "server", "redis_version");
    let old = v.starts_with("7.0") || v.starts_with("6.");
    if old {
        "local function ms() local t = redis.call('TIME') \
         return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end \
         local t0 = ms() while ms() - t0 < tonumber(ARGV[1]) do end return 1"
    } else {
        "local c0 = os.clock() while os.clock() - c0 < tonumber(ARGV[1]) / 1000 do end return 1"
    }
}

/// Whether the server answers `BUSY` now (a script past busy-reply-threshold).
fn busy(c: &mut redis::Connection) -> bool {
    match redis::cmd("PING").query::<String>(c) {
        Ok(_) => false,
        Err(e) => e.code() == Some("BUSY"),
    }
}

/// Found: a script run through `LOCK.FENCED` that outlived `busy-reply-threshold`, whose caller
/// disconnected meanwhile, crashed the server (SIGSEGV in `call()` on Redis 7.0 and Valkey 9.1,
/// `qb_pos == 0` assertion on Redis 8.6). Redis protects a script's caller from being freed (or
/// read) while a busy script lets the event loop run, but the caller it protects is the
/// module call's temporary client, not the connection that sent `LOCK.FENCED` (or the `EXEC`
/// holding it). Must hold: the server survives, stays consistent, and serves the next commands;
/// in a `MULTI` too.
#[test]
fn a_busy_script_whose_caller_disconnects_does_not_crash_the_server() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(50)
        .query(&mut c)
        .unwrap();
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let t = t.to_string();
    let script = spin(&mut c);
    let fenced = ["LOCK.FENCED", "k", &t, "EVAL", script, "0", "1500"];
    let direct: Vec<u8> = resp(&fenced);
    let mut multi = resp(&["MULTI"]);
    multi.extend(resp(&fenced));
    multi.extend(resp(&["EXEC"]));
    for sent in [direct, multi] {
        let mut caller = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        caller.write_all(&sent).unwrap();
        // The script is past the threshold: the server processes events while it runs.
        assert!(
            eventually(Duration::from_secs(10), || busy(&mut c)),
            "the script never made the server busy"
        );
        drop(caller);
        // The script ends; the server must answer again (it crashed here). Newer servers' spin
        // counts CPU time (os.clock): 1.5 s of it took over 10 s of wall time on a loaded
        // machine, so the bound is wide (an event-bounded wait: it ends at the first PONG).
        assert!(
            eventually(Duration::from_secs(90), || {
                redis::cmd("PING").query::<String>(&mut c).is_ok()
            }),
            "the server did not come back: {}",
            server.log()
        );
    }
    let _: () = redis::cmd("SET").arg("d").arg("1").query(&mut c).unwrap();
    let n: i64 = redis::cmd("EXISTS")
        .arg("k")
        .arg("d")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
}

/// Found: with `rename-command`, the inner command was judged by the entry of the command whose
/// ORIGINAL name the caller sent (the module's table came from `COMMAND`, which names commands
/// by their original names), while `RedisModule_Call` runs the command found under the name as
/// sent in the server's live, renamed dictionary. With SET and BLPOP swapped, `set` (BLPOP, a
/// blocking command) was let through and `blpop` (a plain SET) was refused; a name renamed away
/// (`flushall` -> "") was refused as a known command instead of being unknown; a container
/// under its new name (`obj` for OBJECT) was refused as unknown to the table. Must hold: the
/// entry judged is the one of the command that runs under the name sent (subcommands
/// included); a renamed-away name is Redis's own unknown command.
#[test]
fn a_renamed_command_is_judged_as_the_command_that_runs() {
    let server = Server::with_args(&[
        "--rename-command",
        "set",
        "swap_tmp",
        "--rename-command",
        "blpop",
        "set",
        "--rename-command",
        "swap_tmp",
        "blpop",
        "--rename-command",
        "object",
        "obj",
        "--rename-command",
        "flushall",
        "",
    ]);
    let mut c = server.conn();
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let refused = common::info_field(&mut c, "fenced_refused_total");
    let ran = common::info_field(&mut c, "fenced_total");
    // `set` is BLPOP now: refused as the blocking command it is, before the token.
    for token in [t, 1] {
        let e = error_reply(&mut c, fenced("k", token, &["set", "l", "0"]));
        assert_eq!(e, "ERR set cannot run in LOCK.FENCED");
    }
    // `BLPOP` is SET now: a plain keyed write, run.
    let ok: String = fenced("k", t, &["BLPOP", "d", "v"]).query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let d: Option<String> = redis::cmd("GET").arg("d").query(&mut c).unwrap();
    assert_eq!(d.as_deref(), Some("v"));
    // A container under its new name, judged by its subcommand's entry.
    let enc: String = fenced("k", t, &["obj", "encoding", "d"])
        .query(&mut c)
        .unwrap();
    assert_eq!(enc, "embstr");
    let e = error_reply(&mut c, fenced("k", t, &["obj", "nosuch", "d"]));
    assert!(e.to_lowercase().contains("unknown subcommand"), "{e}");
    // Names gone from the live dictionary are unknown, as sent directly.
    for gone in [&["flushall"][..], &["object", "encoding", "d"][..]] {
        let e = error_reply(&mut c, fenced("k", t, gone));
        assert!(e.starts_with("ERR unknown command"), "{gone:?}: {e}");
    }
    // `container|sub` is no command name (COMMAND INFO would read it as one).
    let e = error_reply(&mut c, fenced("k", t, &["obj|encoding", "d"]));
    assert!(e.starts_with("ERR unknown command"), "{e}");
    assert_eq!(
        common::info_field(&mut c, "fenced_refused_total") - refused,
        2
    );
    assert_eq!(common::info_field(&mut c, "fenced_total") - ran, 2);
    // ACL rules name commands by their own names; NOPERM names the command that runs (`set`,
    // sent as `BLPOP`), as for the command sent directly (the module writes 7.0's text).
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("u")
        .arg("on")
        .arg("nopass")
        .arg("+@all")
        .arg("-set")
        .arg("~*")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("AUTH").arg("u").arg("x").query(&mut c).unwrap();
    let mut direct = redis::cmd("BLPOP");
    direct.arg("d").arg("w");
    let direct = error_reply(&mut c, &direct);
    assert!(direct.contains("'set' command"), "{direct}");
    assert_eq!(
        error_reply(&mut c, fenced("k", t, &["BLPOP", "d", "w"])),
        direct
    );
    let _: () = redis::cmd("AUTH")
        .arg("default")
        .arg("x")
        .query(&mut c)
        .unwrap();
    // The list BLPOP would have popped is untouched, the lock still held.
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 1);
}

/// A second module, for what `LOCK.FENCED` does with another module's commands: C without
/// `redismodule.h` (the API is fetched by name), built with the system's `cc`. `probe.write key`
/// replies `PROBED` and has `flags`; `probe.block key` (flags `write`, not `blocking`) blocks
/// for 30 s and then replies `UNBLOCKED`. Module name `fencedprobe`.
fn probe_module(dir: &std::path::Path, file: &str, flags: &str) -> String {
    const SOURCE: &str = r#"
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleBlockedClient RedisModuleBlockedClient;
typedef int (*CmdFunc)(RedisModuleCtx *, RedisModuleString **, int);
typedef int (*GetApiFn)(const char *, void *);
static void (*SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*CreateCommand)(RedisModuleCtx *, const char *, CmdFunc, const char *, int, int, int);
static int (*ReplyWithSimpleString)(RedisModuleCtx *, const char *);
static RedisModuleBlockedClient *(*BlockClient)(RedisModuleCtx *, CmdFunc, CmdFunc,
                                                 void (*)(RedisModuleCtx *, void *), long long);
static int wrote(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    return ReplyWithSimpleString(ctx, "PROBED");
}
static int unblocked(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    return ReplyWithSimpleString(ctx, "UNBLOCKED");
}
static int block(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    BlockClient(ctx, unblocked, unblocked, 0, 30000);
    return 0;
}
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    GetApiFn get = (GetApiFn)((void **)ctx)[0];
    if (get("RedisModule_SetModuleAttribs", &SetModuleAttribs) ||
        get("RedisModule_CreateCommand", &CreateCommand) ||
        get("RedisModule_ReplyWithSimpleString", &ReplyWithSimpleString) ||
        get("RedisModule_BlockClient", &BlockClient))
        return 1;
    SetModuleAttribs(ctx, "fencedprobe", 1, 1);
    if (CreateCommand(ctx, "probe.write", wrote, PROBE_FLAGS, 1, 1, 1) ||
        CreateCommand(ctx, "probe.block", block, "write", 1, 1, 1))
        return 1;
    return 0;
}
"#;
    let src = dir.join(format!("{file}.c"));
    let lib = dir.join(format!("{file}.so"));
    std::fs::write(&src, SOURCE).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(format!("-DPROBE_FLAGS=\"{flags}\""))
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{cc} (a C compiler builds the probe module): {e}"));
    assert!(
        out.status.success(),
        "building the probe module: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib.to_string_lossy().into_owned()
}

/// Whether the server survives aborting a module command blocked inside `RedisModule_Call`
/// (Redis 8.6+; not Valkey): elsewhere `LOCK.FENCED` refuses other modules' commands.
fn module_blocks_undone(c: &mut redis::Connection) -> bool {
    let info: String = redis::cmd("INFO").arg("server").query(c).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };
    let mut v = field("redis_version")
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0))
        .collect::<Vec<_>>();
    v.resize(2, 0);
    field("server_name").is_none_or(|n| n == "redis") && (v[0], v[1]) >= (8, 6)
}

/// A blocking command never blocks through `LOCK.FENCED`: every built-in command flagged
/// `blocking` is refused before the token (`WAIT` and `WAITAOF` have no key); a module command
/// that blocks without the flag is aborted (RM_Call's `K`) and answered `would block`, the
/// server free at once. Found: a module command blocking inside the call aborted the server
/// everywhere but Redis 8.6: on 7.0 (no `K`) `'(c->flags & CLIENT_BLOCKED) == 0' is not true`
/// in RM_Call, on Redis 8.2 and Valkey 8.1 / 9.1 `'c->duration == 0' is not true` in
/// `resetClient` under `RedisModule_CallReplyPromiseAbort`. There other modules' commands are
/// refused.
#[test]
fn blocking_commands_are_refused_and_never_block() {
    let server = Server::with_args(&["--enable-module-command", "yes"]);
    let mut c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let old = is_7_0(&mut c);
    let undone = module_blocks_undone(&mut c);
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("s")
        .arg("g")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut c)
        .unwrap();
    let mut blocking: Vec<&[&str]> = vec![
        &["BLPOP", "l", "0"],
        &["BRPOP", "l", "0"],
        &["BRPOPLPUSH", "l", "m", "0"],
        &["BLMOVE", "l", "m", "LEFT", "LEFT", "0"],
        &["BLMPOP", "0", "1", "l", "LEFT"],
        &["BZPOPMIN", "z", "0"],
        &["BZPOPMAX", "z", "0"],
        &["BZMPOP", "0", "1", "z", "MIN"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
        &["WAIT", "1", "0"],
    ];
    if !old {
        blocking.push(&["WAITAOF", "1", "0", "0"]);
    }
    for inner in blocking {
        for token in [t, 1] {
            let e = error_reply(&mut c, fenced("k", token, inner));
            assert_eq!(e, format!("ERR {} cannot run in LOCK.FENCED", inner[0]));
        }
    }
    // A module command that blocks without saying so.
    let lib = probe_module(server.dir(), "probe", "write");
    let _: () = redis::cmd("MODULE")
        .arg("LOAD")
        .arg(&lib)
        .query(&mut c)
        .unwrap();
    let started = std::time::Instant::now();
    let e = error_reply(&mut c, fenced("k", t, &["probe.block", "k"]));
    if undone {
        assert_eq!(e, "ERR probe.block would block in LOCK.FENCED");
    } else {
        assert_eq!(e, "ERR probe.block cannot run in LOCK.FENCED");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // From a script the server itself keeps it from blocking (an error on Redis, nil on Valkey
    // 8.1): the same answer as the script sent directly, at once.
    let script = "return redis.call('probe.block', KEYS[1])";
    let show = |r: redis::RedisResult<redis::Value>| format!("{r:?}");
    let direct = show(redis::cmd("EVAL").arg(script).arg(1).arg("k").query(&mut c));
    let through = show(fenced("k", t, &["EVAL", script, "1", "k"]).query(&mut c));
    assert_eq!(through, direct);
    assert!(started.elapsed() < Duration::from_secs(5));
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 1);
}

/// Another module's commands are judged by their own flags, and the module's knowledge of a
/// name is dropped when a module is loaded or unloaded: a name that went away is Redis's own
/// unknown command (not the entry it had), and a command loaded again under the same name with
/// other flags is judged by the new ones. (Where a module command blocking inside the call
/// cannot be undone, every other module's command is refused: see
/// `blocking_commands_are_refused_and_never_block`.)
#[test]
fn another_modules_commands_are_judged_by_their_own_flags_across_load_and_unload() {
    let server = Server::with_args(&["--enable-module-command", "yes"]);
    let mut c = server.conn();
    let old = !module_blocks_undone(&mut c);
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let unknown = |c: &mut redis::Connection| {
        for token in [t, 1] {
            let e = error_reply(c, fenced("k", token, &["probe.write", "k"]));
            assert!(e.starts_with("ERR unknown command"), "{e}");
        }
    };
    unknown(&mut c);
    let plain = probe_module(server.dir(), "plain", "write");
    let blocking = probe_module(server.dir(), "blocking", "write blocking");
    let load = |c: &mut redis::Connection, lib: &str| {
        let _: () = redis::cmd("MODULE").arg("LOAD").arg(lib).query(c).unwrap();
    };
    let unload = |c: &mut redis::Connection| {
        let _: () = redis::cmd("MODULE")
            .arg("UNLOAD")
            .arg("fencedprobe")
            .query(c)
            .unwrap();
    };
    load(&mut c, &plain);
    if old {
        let e = error_reply(&mut c, fenced("k", t, &["probe.write", "k"]));
        assert_eq!(e, "ERR probe.write cannot run in LOCK.FENCED");
    } else {
        let ok: String = fenced("k", t, &["probe.write", "k"]).query(&mut c).unwrap();
        assert_eq!(ok, "PROBED");
        let e = error_reply(&mut c, fenced("k", t + 1, &["probe.write", "k"]));
        assert!(e.starts_with("FENCED stale token"), "{e}");
    }
    unload(&mut c);
    unknown(&mut c);
    load(&mut c, &blocking);
    for token in [t, 1] {
        let e = error_reply(&mut c, fenced("k", token, &["probe.write", "k"]));
        assert_eq!(e, "ERR probe.write cannot run in LOCK.FENCED");
    }
    unload(&mut c);
    load(&mut c, &plain);
    if !old {
        let ok: String = fenced("k", t, &["probe.write", "k"]).query(&mut c).unwrap();
        assert_eq!(ok, "PROBED");
    }
}

/// Found: a name is resolved by calling `COMMAND INFO <name>` under the name `COMMAND`, and
/// under `rename-command` another command may answer to it. With `del` renamed to `command`,
/// every first use of a name ran `DEL INFO <name>` (unreplicated): `LOCK.FENCED k t set foo 2`
/// deleted the keys `INFO` and `set`, and was then refused. With `COMMAND` disabled, every call
/// answered `relock internal error`. Must hold: nothing but the server's own `COMMAND INFO`
/// ever runs to resolve a name, and without it `LOCK.FENCED` refuses with an error that says
/// why, running nothing.
#[test]
fn a_command_renamed_to_command_never_runs_to_resolve_a_name() {
    let setups: [&[&str]; 3] = [
        &[
            "--rename-command",
            "command",
            "",
            "--rename-command",
            "del",
            "command",
        ],
        &["--rename-command", "command", ""],
        &["--rename-command", "command", "command_elsewhere"],
    ];
    for args in setups {
        let server = Server::with_args(args);
        let mut c = server.conn();
        for key in ["INFO", "set", "SET", "foo"] {
            let _: () = redis::cmd("SET").arg(key).arg("1").query(&mut c).unwrap();
        }
        let t: u64 = redis::cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("a")
            .arg(LONG_TTL)
            .query(&mut c)
            .unwrap();
        for inner in [&["set", "foo", "2"][..], &["OBJECT", "ENCODING", "SET"][..]] {
            let e = error_reply(&mut c, fenced("k", t, inner));
            assert_eq!(
                e,
                "ERR LOCK.FENCED needs the COMMAND command, which is renamed or disabled on \
                 this server",
                "{args:?} {inner:?}"
            );
        }
        let n: i64 = redis::cmd("EXISTS")
            .arg("INFO")
            .arg("set")
            .arg("SET")
            .arg("foo")
            .arg("k")
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 5, "{args:?}: a key went away");
        let foo: String = redis::cmd("GET").arg("foo").query(&mut c).unwrap();
        assert_eq!(foo, "1", "{args:?}");
    }
}

/// Found: a name with a NUL byte was resolved with `COMMAND INFO`, whose lookup hashes the
/// whole name but compares it case-folded up to the NUL: `set\0<n>` found SET whenever the two
/// shared a bucket (8 names in 3,000 on Redis 7.0), and each such name was kept, so distinct
/// names grew the module's table without bound (200,000 `config\0<n>` names: +370 KB), and its
/// token was then checked for a command that can never run. Must hold: a name with a NUL is
/// never resolved: with a wrong token every such name gets the same refusal or unknown command
/// (no token check), and nothing runs.
#[test]
fn a_name_with_a_nul_is_never_resolved() {
    let server = Server::start();
    let mut c = server.conn();
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET").arg("foo").arg("1").query(&mut c).unwrap();
    for base in ["set", "config"] {
        for i in 0..3000 {
            let mut name = base.as_bytes().to_vec();
            name.push(0);
            name.extend_from_slice(i.to_string().as_bytes());
            let mut cmd = redis::cmd("LOCK.FENCED");
            cmd.arg("k").arg(t + 1).arg(name).arg("get").arg("foo");
            let e = error_reply(&mut c, &cmd);
            assert!(
                e.starts_with("ERR unknown command") || e.contains("cannot run"),
                "{base} {i}: {e}"
            );
        }
    }
    let foo: String = redis::cmd("GET").arg("foo").query(&mut c).unwrap();
    assert_eq!(foo, "1");
}

/// Found (Redis 7.0): to tell `BCAST` tracking, a read called `CLIENT LIST ID <id>` under the
/// name `CLIENT`, whatever answered to it: with `del` renamed to `client`, a tracked
/// connection's `LOCK.FENCED k t GET d` ran `DEL LIST ID <id>` (unreplicated), deleting the
/// keys `LIST` and `ID`. Must hold: nothing but the server's own `CLIENT LIST` runs under that
/// name; without it a tracked read on 7.0 is refused as untracked (it cannot tell `BCAST`),
/// and elsewhere (reads tracked) it runs.
#[test]
fn a_command_renamed_to_client_never_runs_for_a_tracked_read() {
    let server = Server::with_args(&[
        "--rename-command",
        "client",
        "client_elsewhere",
        "--rename-command",
        "del",
        "client",
    ]);
    let mut c = server.conn();
    let old = is_7_0(&mut c);
    for key in ["LIST", "ID", "d"] {
        let _: () = redis::cmd("SET").arg(key).arg("1").query(&mut c).unwrap();
    }
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("CLIENT_ELSEWHERE")
        .arg("TRACKING")
        .arg("ON")
        .query(&mut c)
        .unwrap();
    if old {
        let e = error_reply(&mut c, fenced("k", t, &["GET", "d"]));
        assert_eq!(
            e,
            "ERR LOCK.FENCED reads are not tracked on this server version"
        );
    } else {
        let d: String = fenced("k", t, &["GET", "d"]).query(&mut c).unwrap();
        assert_eq!(d, "1");
    }
    let n: i64 = redis::cmd("EXISTS")
        .arg("LIST")
        .arg("ID")
        .arg("d")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 4, "a key went away");
}

/// Found: a cluster replica names the master for its `MOVED` from `CLUSTER NODES`, called under
/// the name `CLUSTER`; with `CLUSTER` renamed that call failed and the replica went on: it
/// checked the token against its own copy (`FENCED stale token`) and ran reads there (a
/// fenced `GET` answered the replica's value), what the `MOVED` was made to stop. Must hold:
/// on a cluster replica nothing is checked or run, whatever `CLUSTER` is named: the caller
/// gets the `MOVED` to the master (named by the module API).
#[test]
fn a_cluster_replica_redirects_with_cluster_renamed() {
    let args = [
        "--cluster-enabled",
        "yes",
        "--rename-command",
        "cluster",
        "cluster_elsewhere",
    ];
    let master = Server::with_args(&args);
    let replica = Server::with_args(&args);
    let mut m = master.conn();
    let mut r = replica.conn();
    let cluster = |c: &mut redis::Connection, args: &[&str]| {
        let mut cmd = redis::cmd("CLUSTER_ELSEWHERE");
        for a in args {
            cmd.arg(*a);
        }
        cmd.query::<redis::Value>(c)
    };
    cluster(&mut m, &["ADDSLOTSRANGE", "0", "16383"]).unwrap();
    let port = master.port.to_string();
    cluster(&mut r, &["MEET", "127.0.0.1", &port]).unwrap();
    let id: String = redis::cmd("CLUSTER_ELSEWHERE")
        .arg("MYID")
        .query(&mut m)
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || cluster(
            &mut r,
            &["REPLICATE", &id]
        )
        .is_ok()),
        "the replica never met the master"
    );
    let key = "k";
    let data = "{k}d";
    let ready = |m: &mut redis::Connection, r: &mut redis::Connection| {
        let state: String = redis::cmd("CLUSTER_ELSEWHERE")
            .arg("INFO")
            .query(m)
            .unwrap_or_default();
        let repl: String = redis::cmd("INFO")
            .arg("replication")
            .query(r)
            .unwrap_or_default();
        state.contains("cluster_state:ok") && repl.contains("master_link_status:up")
    };
    assert!(
        eventually(Duration::from_secs(20), || ready(&mut m, &mut r)),
        "the cluster never came up"
    );
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut m)
        .unwrap();
    let _: () = redis::cmd("SET").arg(data).arg("1").query(&mut m).unwrap();
    let _: () = redis::cmd("READONLY").query(&mut r).unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        redis::cmd("GET")
            .arg(data)
            .query::<Option<String>>(&mut r)
            .ok()
            .flatten()
            .as_deref()
            == Some("1")
    }));
    let moved = format!(
        "MOVED {} 127.0.0.1:{}",
        common::cluster::key_slot(key),
        master.port
    );
    let (ran, stale) = (
        common::info_field(&mut r, "fenced_total"),
        common::info_field(&mut r, "fenced_stale_total"),
    );
    for inner in [&["GET", data][..], &["SET", data, "2"][..]] {
        for token in [t, 1] {
            let mut cmd = redis::cmd("LOCK.FENCED");
            cmd.arg(key).arg(token);
            for a in inner {
                cmd.arg(*a);
            }
            assert_eq!(error_reply(&mut r, &cmd), moved, "{inner:?} {token}");
        }
    }
    assert_eq!(common::info_field(&mut r, "fenced_total"), ran);
    assert_eq!(common::info_field(&mut r, "fenced_stale_total"), stale);
}

/// Held (a guard): a name's first use resolves it with `COMMAND INFO` on the module's behalf,
/// not the caller's: a user who may not run `COMMAND` (or runs almost nothing) gets, on the
/// very first use of each name, exactly what it gets once the name is known: its command run
/// when permitted, Redis's `NOPERM` when not, Redis's own unknown command; never a refusal for
/// `COMMAND`, and nothing it may not run runs.
#[test]
fn a_user_without_command_resolves_names_on_first_use() {
    let server = Server::start();
    let mut c = server.conn();
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    for (user, rules) in [
        ("nocmd", &["+@all", "-command", "~*"][..]),
        ("narrow", &["-@all", "+lock.fenced", "+set", "~*"][..]),
    ] {
        let mut acl = redis::cmd("ACL");
        acl.arg("SETUSER").arg(user).arg("on").arg("nopass");
        for r in rules {
            acl.arg(*r);
        }
        let _: () = acl.query(&mut c).unwrap();
    }
    let mut u = server.conn();
    let _: () = redis::cmd("AUTH")
        .arg("nocmd")
        .arg("x")
        .query(&mut u)
        .unwrap();
    let mut n = server.conn();
    let _: () = redis::cmd("AUTH")
        .arg("narrow")
        .arg("x")
        .query(&mut n)
        .unwrap();
    // First uses, by the users without COMMAND.
    let ok: String = fenced("k", t, &["sEt", "a", "x"]).query(&mut n).unwrap();
    assert_eq!(ok, "OK");
    let e = error_reply(&mut n, fenced("k", t, &["HSET", "h", "f", "v"]));
    assert!(e.starts_with("NOPERM"), "{e}");
    assert!(e.contains("'hset'"), "{e}");
    let e = error_reply(&mut n, fenced("k", t, &["nosuch", "x"]));
    assert!(e.starts_with("ERR unknown command"), "{e}");
    let enc: String = fenced("k", t, &["object", "ENCODING", "a"])
        .query(&mut u)
        .unwrap();
    assert_eq!(enc, "embstr");
    let e = error_reply(&mut u, fenced("k", t, &["BLPOP", "l", "0"]));
    assert_eq!(e, "ERR BLPOP cannot run in LOCK.FENCED");
    let e = error_reply(&mut u, fenced("k", t, &["COMMAND", "INFO", "get"]));
    assert_eq!(e, "ERR COMMAND cannot run in LOCK.FENCED");
    let exists: i64 = redis::cmd("EXISTS").arg("h").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let a: String = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    assert_eq!(a, "x");
}

/// Huge argument lists (issue 33's attack list): a fenced MSET of 200,000 pairs and a DEL of
/// them run as they would directly, `COMMAND GETKEYS` names every key, a `LOCK.OBSERVE` with
/// 100,000 extra arguments is an arity error; the lock keeps its holder and the server answers
/// after each.
#[test]
fn huge_argument_lists_run_as_directly_and_the_server_stays_up() {
    let server = Server::start();
    let mut c = server.conn();
    let token: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("{h}")
        .arg("owner")
        .arg(60_000)
        .query(&mut c)
        .expect("acquire");
    let pairs = 200_000;
    let mut mset = redis::cmd("LOCK.FENCED");
    mset.arg("{h}").arg(token).arg("MSET");
    for i in 0..pairs {
        mset.arg(format!("{{h}}:k{i}")).arg(i);
    }
    let ok: String = mset.query(&mut c).expect("a fenced MSET of 200,000 pairs");
    assert_eq!(ok, "OK");
    let size: u64 = redis::cmd("DBSIZE").query(&mut c).expect("DBSIZE");
    assert_eq!(size, pairs + 1, "every pair, and the lock");
    let last: String = redis::cmd("GET")
        .arg(format!("{{h}}:k{}", pairs - 1))
        .query(&mut c)
        .expect("GET");
    assert_eq!(last, (pairs - 1).to_string());

    let mut getkeys = redis::cmd("COMMAND");
    getkeys
        .arg("GETKEYS")
        .arg("LOCK.FENCED")
        .arg("{h}")
        .arg(token)
        .arg("DEL");
    for i in 0..pairs {
        getkeys.arg(format!("{{h}}:k{i}"));
    }
    let keys: Vec<String> = getkeys.query(&mut c).expect("COMMAND GETKEYS");
    assert_eq!(
        keys.len() as u64,
        pairs + 1,
        "the lock key and every inner key"
    );
    assert_eq!(keys[0], "{h}");

    let mut del = redis::cmd("LOCK.FENCED");
    del.arg("{h}").arg(token).arg("DEL");
    for i in 0..pairs {
        del.arg(format!("{{h}}:k{i}"));
    }
    let gone: u64 = del.query(&mut c).expect("a fenced DEL of 200,000 keys");
    assert_eq!(gone, pairs);

    let mut observe = redis::cmd("LOCK.OBSERVE");
    observe.arg("{h}").arg(0).arg(10);
    for i in 0..100_000 {
        observe.arg(i);
    }
    let refused = error_reply(&mut c, &observe);
    assert!(refused.contains("wrong number of arguments"), "{refused}");

    let pong: String = redis::cmd("PING").query(&mut c).expect("PING");
    assert_eq!(pong, "PONG");
    let held: u64 = redis::cmd("LOCK.FENCED")
        .arg("{h}")
        .arg(token)
        .arg("EXISTS")
        .arg("{h}")
        .query(&mut c)
        .expect("the holder's token still fences");
    assert_eq!(held, 1);
}
