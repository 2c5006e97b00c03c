//! `LOCK.FENCED` under attack: what an attempt to break it found, one test per finding, each
//! saying what broke and what must hold.
use relock_testkit as common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

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
        // The script ends; the server must answer again (it crashed here).
        assert!(
            eventually(Duration::from_secs(10), || {
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

/// The error text (code and message) of a command that must fail.
fn error(c: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<redis::Value>(c) {
        Ok(v) => panic!("expected an error from {}, got {v:?}", common::show(cmd)),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => e.to_string(),
        },
    }
}

fn fenced(t: u64, inner: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.FENCED");
    cmd.arg("k").arg(t);
    for a in inner {
        cmd.arg(*a);
    }
    cmd
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
        let e = error(&mut c, &fenced(token, &["set", "l", "0"]));
        assert_eq!(e, "ERR set cannot run in LOCK.FENCED");
    }
    // `BLPOP` is SET now: a plain keyed write, run.
    let ok: String = fenced(t, &["BLPOP", "d", "v"]).query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let d: Option<String> = redis::cmd("GET").arg("d").query(&mut c).unwrap();
    assert_eq!(d.as_deref(), Some("v"));
    // A container under its new name, judged by its subcommand's entry.
    let enc: String = fenced(t, &["obj", "encoding", "d"]).query(&mut c).unwrap();
    assert_eq!(enc, "embstr");
    let e = error(&mut c, &fenced(t, &["obj", "nosuch", "d"]));
    assert!(e.to_lowercase().contains("unknown subcommand"), "{e}");
    // Names gone from the live dictionary are unknown, as sent directly.
    for gone in [&["flushall"][..], &["object", "encoding", "d"][..]] {
        let e = error(&mut c, &fenced(t, gone));
        assert!(e.starts_with("ERR unknown command"), "{gone:?}: {e}");
    }
    // `container|sub` is no command name (COMMAND INFO would read it as one).
    let e = error(&mut c, &fenced(t, &["obj|encoding", "d"]));
    assert!(e.starts_with("ERR unknown command"), "{e}");
    assert_eq!(
        common::info_field(&mut c, "fenced_refused_total") - refused,
        2
    );
    assert_eq!(common::info_field(&mut c, "fenced_total") - ran, 2);
    // The list BLPOP would have popped is untouched, the lock still held.
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 1);
}
