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
