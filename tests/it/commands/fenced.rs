//! `LOCK.FENCED` end to end: the token's check (exclusive and shared holds, stale and invalid
//! tokens), which inner commands it refuses (before the token), replies passed through (errors,
//! RESP3), key specs and getkeys, ACL as the caller, scripts and MULTI, replication and the AOF
//! of the inner command's effects only (a lapse at the check is Redis's own expiry), re-entry
//! (the inner command changing the lock key itself), the 7.0 tracking refusal, `SLOWLOG`,
//! `MONITOR` and the counters.
use relock_testkit as common;

use std::time::Duration;

use common::ask::calls;
use common::events::Events;
use common::raw::{Raw, Reply};
use common::reply::error_reply;
use common::{acquire, attach_replica, eventually, info_field, wait_replica, Server};

const SOON: Duration = Duration::from_secs(3);
const LONG_TTL: i64 = 100_000;

fn acquire_shared(c: &mut redis::Connection, key: &str, owner: &str) -> u64 {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(LONG_TTL)
        .arg("SHARED")
        .query(c)
        .expect("acquire shared")
}

/// `LOCK.FENCED key token command args...`
pub(super) fn fenced(key: &str, token: impl redis::ToRedisArgs, inner: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.FENCED");
    cmd.arg(key).arg(token);
    for a in inner {
        cmd.arg(*a);
    }
    cmd
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn version(c: &mut redis::Connection) -> (u32, u32) {
    let v = common::info_str(c, "server", "redis_version");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

pub(super) fn is_7_0(c: &mut redis::Connection) -> bool {
    version(c) < (7, 2)
}

#[test]
fn runs_with_the_holders_token_only() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let ok: String = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(get(&mut c, "d").as_deref(), Some("1"));
    // Another token: nothing runs, the error names both.
    let stale = error_reply(&mut c, fenced("k", t - 1, &["SET", "d", "2"]));
    assert_eq!(stale, format!("FENCED stale token {}, current {t}", t - 1));
    assert_eq!(get(&mut c, "d").as_deref(), Some("1"));
    // Released: the holder's own token is stale now.
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let stale = error_reply(&mut c, fenced("k", t, &["SET", "d", "3"]));
    assert_eq!(stale, format!("FENCED stale token {t}, current none"));
    assert_eq!(get(&mut c, "d").as_deref(), Some("1"));
}

#[test]
fn any_live_shared_holders_token_passes() {
    let server = Server::start();
    let mut c = server.conn();
    let ta = acquire_shared(&mut c, "k", "a");
    let tb = acquire_shared(&mut c, "k", "b");
    for (t, v) in [(ta, "a"), (tb, "b")] {
        let _: () = fenced("k", t, &["SET", "d", v]).query(&mut c).unwrap();
        assert_eq!(get(&mut c, "d").as_deref(), Some(v));
    }
    let other = ta.max(tb) + 1;
    let stale = error_reply(&mut c, fenced("k", other, &["SET", "d", "x"]));
    assert_eq!(stale, format!("FENCED stale token {other}, current shared"));
    // A shared holder that left: its token no longer passes.
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let stale = error_reply(&mut c, fenced("k", ta, &["SET", "d", "x"]));
    assert_eq!(stale, format!("FENCED stale token {ta}, current shared"));
    assert_eq!(get(&mut c, "d").as_deref(), Some("b"));
}

#[test]
fn token_and_arity_errors() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "a", LONG_TTL);
    for bad in ["0", "-1", "abc", "9007199254740992", "1.5", ""] {
        assert_eq!(
            error_reply(&mut c, fenced("k", bad, &["SET", "d", "1"])),
            "ERR invalid token",
            "{bad}"
        );
    }
    let e = error_reply(&mut c, redis::cmd("LOCK.FENCED").arg("k").arg(1).clone());
    assert!(e.contains("wrong number of arguments"), "{e}");
    // The inner command's own arity and existence: Redis's own errors, nothing runs.
    let e = error_reply(&mut c, fenced("k", 1, &["GET"]));
    assert!(e.contains("wrong number of arguments for 'get'"), "{e}");
    let e = error_reply(&mut c, fenced("k", 1, &["NOSUCHCOMMAND", "x"]));
    assert!(e.starts_with("ERR unknown command"), "{e}");
    let e = error_reply(&mut c, fenced("k", 1, &["OBJECT", "NOSUCH", "d"]));
    assert!(e.to_lowercase().contains("unknown subcommand"), "{e}");
}

#[test]
fn refuses_what_cannot_be_fenced_before_the_token() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("SET").arg("d").arg("v").query(&mut c).unwrap();
    let refused: &[&[&str]] = &[
        &["PING"],
        &["MULTI"],
        &["EXEC"],
        &["WATCH", "d"],
        &["BLPOP", "l", "0"],
        &["SUBSCRIBE", "ch"],
        &["PUBLISH", "ch", "m"],
        &["KEYS", "*"],
        &["FLUSHALL"],
        &["CONFIG", "GET", "maxmemory"],
        &["CLIENT", "LIST"],
        &["SELECT", "1"],
        &["MOVE", "d", "1"],
        &["COPY", "d", "e", "DB", "1"],
        &["MIGRATE", "127.0.0.1", "1", "d", "0", "10"],
        &["LOCK.INFO", "k"],
        &["lock.release", "k", "a"],
        &["SCRIPT", "FLUSH"],
        &["XREAD", "STREAMS", "s", "0"],
    ];
    let before = info_field(&mut c, "fenced_refused_total");
    for inner in refused {
        // The same answer whatever the token.
        for token in [t, 1] {
            let e = error_reply(&mut c, fenced("k", token, inner));
            assert_eq!(e, format!("ERR {} cannot run in LOCK.FENCED", inner[0]));
        }
    }
    let after = info_field(&mut c, "fenced_refused_total");
    assert_eq!(after - before, 2 * refused.len() as i64);
    // Nothing ran: d is still here, in db 0, the lock still held.
    assert_eq!(get(&mut c, "d").as_deref(), Some("v"));
    assert!(common::lock_info(&mut c, "k").is_some());
    // COPY within the db is a plain keyed write.
    let copied: i64 = fenced("k", t, &["COPY", "d", "e"]).query(&mut c).unwrap();
    assert_eq!(copied, 1);
}

#[test]
fn the_inner_reply_passes_through_unchanged() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("x")
        .arg("y")
        .query(&mut c)
        .unwrap();
    let list: Vec<String> = fenced("k", t, &["LRANGE", "l", "0", "-1"])
        .query(&mut c)
        .unwrap();
    assert_eq!(list, ["x", "y"]);
    let none: Option<String> = fenced("k", t, &["GET", "missing"]).query(&mut c).unwrap();
    assert_eq!(none, None);
    // Errors, as the command itself gives them.
    let direct = error_reply(&mut c, redis::cmd("INCR").arg("l").clone());
    assert_eq!(error_reply(&mut c, fenced("k", t, &["INCR", "l"])), direct);
    let _: () = redis::cmd("SET").arg("s").arg("abc").query(&mut c).unwrap();
    let direct = error_reply(&mut c, redis::cmd("INCR").arg("s").clone());
    assert_eq!(error_reply(&mut c, fenced("k", t, &["INCR", "s"])), direct);
    // RESP3: the caller's protocol (a map for HGETALL).
    let mut c3 = server.conn_resp3();
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c3)
        .unwrap();
    let map: redis::Value = fenced("k", t, &["HGETALL", "h"]).query(&mut c3).unwrap();
    assert!(matches!(map, redis::Value::Map(_)), "{map:?}");
    let flat: redis::Value = fenced("k", t, &["HGETALL", "h"]).query(&mut c).unwrap();
    assert!(matches!(flat, redis::Value::Array(_)), "{flat:?}");
}

#[test]
fn key_specs_getkeys_and_docs() {
    let server = Server::start();
    let mut c = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.FENCED")
        .arg("k")
        .arg(1)
        .arg("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k", "a", "b"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.FENCED")
        .arg("k")
        .arg(1)
        .arg("EVAL")
        .arg("return 1")
        .arg(2)
        .arg("x")
        .arg("y")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k", "x", "y"]);
    let flags: redis::Value = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("LOCK.FENCED")
        .arg("k")
        .arg(1)
        .arg("SET")
        .arg("a")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let text = format!("{flags:?}");
    assert!(text.contains("RO") && text.contains("access"), "{text}");
    if !is_7_0(&mut c) {
        // 7.0 reports a legacy key range without flags.
        assert!(text.contains("RW") || text.contains("OW"), "{text}");
    }
    let info: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("LOCK.FENCED")
        .query(&mut c)
        .unwrap();
    let text = format!("{info:?}").to_lowercase();
    // (may_replicate is hidden from COMMAND INFO on purpose: `writes_wait_for_a_pause` shows it.)
    for flag in ["movablekeys", "incomplete"] {
        assert!(text.contains(flag), "{flag} missing: {text}");
    }
    for flag in ["\"write\"", "\"readonly\"", "denyoom"] {
        assert!(!text.contains(flag), "{flag} present: {text}");
    }
    if !is_7_0(&mut c) {
        for category in ["@write", "@slow"] {
            assert!(text.contains(category), "{category} missing: {text}");
        }
    }
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("LOCK.FENCED")
        .query(&mut c)
        .unwrap();
    let text = format!("{docs:?}");
    for name in ["\"key\"", "\"token\"", "\"command\"", "\"arg\""] {
        assert!(text.contains(name), "{name} missing: {text}");
    }
}

#[test]
fn runs_as_the_callers_user_with_redis_own_noperm() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("u")
        .arg("on")
        .arg("nopass")
        .arg("~k")
        .arg("~d")
        .arg("+@all")
        .arg("-set")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut c)
        .unwrap();
    let mut u = server.conn();
    let _: () = redis::cmd("AUTH").arg("u").arg("x").query(&mut u).unwrap();
    // A command the user may not run: the text a direct call gets.
    let direct = error_reply(&mut u, redis::cmd("SET").arg("d").arg("1").clone());
    assert!(direct.starts_with("NOPERM"), "{direct}");
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut c)
        .unwrap();
    let through = error_reply(&mut u, fenced("k", t, &["SET", "d", "1"]));
    assert_eq!(through, direct);
    // The refusal through LOCK.FENCED is in ACL LOG as the direct one would be: the user and
    // the command refused.
    let log: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query(&mut c).unwrap();
    assert_eq!(log.len(), 1, "one entry, the fenced SET's: {log:?}");
    let field = |name: &str| -> String {
        redis::from_redis_value(log[0].get(name).expect(name)).expect(name)
    };
    assert_eq!(
        (field("reason"), field("object"), field("username")),
        ("command".to_string(), "set".to_string(), "u".to_string()),
        "{log:?}"
    );
    // A key the user may not touch: Redis refuses LOCK.FENCED itself (its keys include it).
    let direct = error_reply(&mut u, redis::cmd("GET").arg("other").clone());
    let through = error_reply(&mut u, fenced("k", t, &["GET", "other"]));
    assert_eq!(through, direct);
    // Allowed: runs.
    let _: () = fenced("k", t, &["APPEND", "d", "x"]).query(&mut u).unwrap();
    assert_eq!(get(&mut c, "d").as_deref(), Some("x"));
    // A script runs its commands as the user too: the error a direct EVAL gets.
    let script = "return redis.call('set', KEYS[1], '1')";
    let direct = error_reply(
        &mut u,
        redis::cmd("EVAL").arg(script).arg(1).arg("d").clone(),
    );
    let through = error_reply(&mut u, fenced("k", t, &["EVAL", script, "1", "d"]));
    assert_eq!(through, direct);
    assert_eq!(get(&mut c, "d").as_deref(), Some("x"));
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut c).unwrap();
    assert!(log.len() >= 2, "{log:?}");
}

#[test]
fn scripts_run_and_never_nest() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let v: i64 = fenced(
        "k",
        t,
        &[
            "EVAL",
            "return redis.call('incrby', KEYS[1], ARGV[1])",
            "1",
            "n",
            "5",
        ],
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(v, 5);
    // A script calling LOCK.FENCED with a script inside: refused, the server stays up.
    let script = "return redis.call('lock.fenced', KEYS[1], ARGV[1], 'eval', 'return 1', '0')";
    let e = error_reply(
        &mut c,
        redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg("k")
            .arg(t)
            .clone(),
    );
    assert!(
        e.contains("eval cannot run in LOCK.FENCED inside a script"),
        "{e}"
    );
    // And with a plain command inside: runs.
    let script = "return redis.call('lock.fenced', KEYS[1], ARGV[1], 'set', KEYS[2], 'x')";
    let _: () = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("k")
        .arg("d")
        .arg(t)
        .query(&mut c)
        .unwrap();
    assert_eq!(get(&mut c, "d").as_deref(), Some("x"));
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

/// Functions (`FCALL`, `FCALL_RO`) are the other `noscript` commands the inner command may be:
/// they run with the live token, a stale one runs nothing, and a function calling
/// `LOCK.FENCED ... FCALL` (a script inside a script) is refused with the server up.
#[test]
fn functions_run_with_the_live_token_and_never_nest() {
    let server = Server::start();
    let mut c = server.conn();
    let library = "#!lua name=fencedlib\n\
        redis.register_function('bump', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n\
        redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}\n\
        redis.register_function('nest', function(keys, args) return redis.call('lock.fenced', keys[1], args[1], 'fcall', 'bump', '1', keys[2], '1') end)";
    let loaded: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut c)
        .unwrap();
    assert_eq!(loaded, "fencedlib");
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let v: i64 = fenced("k", t, &["FCALL", "bump", "1", "n", "5"])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, 5);
    let seen: String = fenced("k", t, &["FCALL_RO", "peek", "1", "n"])
        .query(&mut c)
        .unwrap();
    assert_eq!(seen, "5");
    let stale = fenced("k", t + 1, &["FCALL", "bump", "1", "n", "5"]);
    let e = error_reply(&mut c, &stale);
    assert!(e.starts_with("FENCED"), "{e}");
    assert_eq!(
        get(&mut c, "n").as_deref(),
        Some("5"),
        "the stale call ran nothing"
    );
    let nested = redis::cmd("FCALL")
        .arg("nest")
        .arg(2)
        .arg("k")
        .arg("n")
        .arg(t)
        .clone();
    let e = error_reply(&mut c, &nested);
    assert!(
        e.contains("fcall cannot run in LOCK.FENCED inside a script"),
        "{e}"
    );
    assert_eq!(get(&mut c, "n").as_deref(), Some("5"));
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn in_multi_exec() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let (t, stale) = (t.to_string(), (t + 1).to_string());
    let mut raw = Raw::connect(&server);
    raw.send(&[b"MULTI"]);
    raw.send(&[b"LOCK.FENCED", b"k", t.as_bytes(), b"SET", b"d", b"1"]);
    raw.send(&[b"LOCK.FENCED", b"k", t.as_bytes(), b"INCR", b"d"]);
    raw.send(&[b"LOCK.FENCED", b"k", stale.as_bytes(), b"INCR", b"d"]);
    raw.send(&[b"EXEC"]);
    for _ in 0..4 {
        let queued = raw.read(SOON);
        assert!(matches!(queued, Reply::Status(_)), "{queued:?}");
    }
    let Reply::Array(replies) = raw.read(SOON) else {
        panic!("EXEC did not reply an array");
    };
    assert_eq!(replies[0], Reply::Status("OK".into()));
    assert_eq!(replies[1], Reply::Int(2));
    assert!(
        matches!(&replies[2], Reply::Error(e) if e.starts_with("FENCED stale token")),
        "{:?}",
        replies[2]
    );
    assert_eq!(get(&mut c, "d").as_deref(), Some("2"));
}

#[test]
fn writes_wait_for_a_pause() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL).to_string();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    let mut raw = Raw::connect(&server);
    raw.send(&[b"LOCK.FENCED", b"k", t.as_bytes(), b"SET", b"d", b"1"]);
    raw.assert_silent("LOCK.FENCED while writes are paused");
    assert_eq!(get(&mut c, "d"), None);
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    assert_eq!(raw.read(SOON), Reply::Status("OK".into()));
    assert_eq!(get(&mut c, "d").as_deref(), Some("1"));
}

#[test]
fn replicas_get_the_inner_effects_never_lock_fenced() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let t = acquire(&mut m, "k", "a", LONG_TTL);
    let _: () = redis::cmd("SADD")
        .arg("s")
        .arg("x")
        .arg("y")
        .query(&mut m)
        .unwrap();
    for inner in [
        &["SET", "d", "1"][..],
        &["INCR", "d"],
        &["EXPIRE", "d", "1000"],
        &["SPOP", "s"],
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'w'); return 1",
            "1",
            "e",
        ],
    ] {
        let _: redis::Value = fenced("k", t, inner).query(&mut m).unwrap();
    }
    wait_replica(&mut m);
    let digest = |c: &mut redis::Connection| -> String {
        redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
    };
    assert_eq!(digest(&mut m), digest(&mut r));
    let stats = |c: &mut redis::Connection| -> String {
        redis::cmd("INFO").arg("commandstats").query(c).unwrap()
    };
    assert!(stats(&mut m).to_lowercase().contains("cmdstat_lock.fenced"));
    let replica_stats = stats(&mut r).to_lowercase();
    assert!(!replica_stats.contains("lock.fenced"), "{replica_stats}");
    assert!(
        replica_stats.contains("cmdstat_pexpireat"),
        "{replica_stats}"
    );
    // A write through LOCK.FENCED on the replica: Redis's own READONLY.
    let e = error_reply(&mut r, fenced("k", t, &["SET", "d", "2"]));
    assert!(e.starts_with("READONLY"), "{e}");
}

/// A waiter queued on `k` behind a.
fn queued_waiter(server: &Server, c: &mut redis::Connection) -> Raw {
    let mut w = Raw::connect(server);
    w.send_wait("k", "b", LONG_TTL as u64, 0);
    assert!(eventually(SOON, || {
        let waiters: Vec<redis::Value> = redis::cmd("LOCK.WAITERS").arg("k").query(c).unwrap();
        waiters.len() == 1
    }));
    w
}

/// The waiter is granted the lock: its answer is a token, and LOCK.INFO shows b.
fn granted(w: &mut Raw, c: &mut redis::Connection) {
    let token = w.read(SOON).token();
    let info = common::lock_info(c, "k").expect("b holds k");
    assert_eq!(info.token, token as i64);
}

#[test]
fn reentry_del_of_the_lock_key() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queued_waiter(&server, &mut c);
    let n: i64 = fenced("k", t, &["DEL", "k"]).query(&mut c).unwrap();
    assert_eq!(n, 1);
    granted(&mut w, &mut c);
}

#[test]
fn reentry_rename_of_the_lock_key() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("RENAME")
        .arg("k")
        .arg("k2")
        .query(&mut c)
        .unwrap();
    let direct = common::lock_info(&mut c, "k2");
    let _: () = redis::cmd("DEL").arg("k2").query(&mut c).unwrap();
    // The same through LOCK.FENCED, with a waiter on k.
    let t = {
        let _ = t;
        acquire(&mut c, "k", "a", LONG_TTL)
    };
    let mut w = queued_waiter(&server, &mut c);
    let _: () = fenced("k", t, &["RENAME", "k", "k2"])
        .query(&mut c)
        .unwrap();
    granted(&mut w, &mut c);
    let moved = common::lock_info(&mut c, "k2");
    assert_eq!(moved.is_some(), direct.is_some());
}

#[test]
fn reentry_expire_zero_of_the_lock_key() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queued_waiter(&server, &mut c);
    let n: i64 = fenced("k", t, &["EXPIRE", "k", "0"]).query(&mut c).unwrap();
    assert_eq!(n, 1);
    granted(&mut w, &mut c);
}

#[test]
fn reentry_script_releasing_the_lock() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queued_waiter(&server, &mut c);
    let left: i64 = fenced(
        "k",
        t,
        &[
            "EVAL",
            "return redis.call('lock.release', KEYS[1], ARGV[1])",
            "1",
            "k",
            "a",
        ],
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(left, 0);
    granted(&mut w, &mut c);
    // The new holder's token passes, a's does not.
    let tb = common::lock_info(&mut c, "k").unwrap().token as u64;
    let _: () = fenced("k", tb, &["SET", "d", "1"]).query(&mut c).unwrap();
    let e = error_reply(&mut c, fenced("k", t, &["SET", "d", "2"]));
    assert_eq!(e, format!("FENCED stale token {t}, current {tb}"));
}

#[test]
fn reads_are_tracked_or_refused_on_7_0() {
    let server = Server::start();
    let mut c = server.conn_resp3();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .query(&mut c)
        .unwrap();
    let read = fenced("k", t, &["GET", "d"]);
    if is_7_0(&mut c) {
        assert_eq!(
            error_reply(&mut c, &read),
            "ERR LOCK.FENCED reads are not tracked on this server version"
        );
        // Writes are not reads; BCAST tracking needs no key list.
        let _: () = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("OFF")
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("BCAST")
            .query(&mut c)
            .unwrap();
        let v: Option<String> = read.query(&mut c).unwrap();
        assert_eq!(v.as_deref(), Some("1"));
    } else {
        // Tracked as a direct read: a write by another connection invalidates it.
        let mut sub = server.conn();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut sub).unwrap();
        sub.set_read_timeout(Some(SOON)).unwrap();
        sub.send_packed_command(
            &redis::cmd("SUBSCRIBE")
                .arg("__redis__:invalidate")
                .get_packed_command(),
        )
        .unwrap();
        let _ = sub.recv_response().expect("SUBSCRIBE confirmation");
        let mut r = server.conn();
        let _: () = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("REDIRECT")
            .arg(id)
            .query(&mut r)
            .unwrap();
        let v: Option<String> = fenced("k", t, &["GET", "d"]).query(&mut r).unwrap();
        assert_eq!(v, None);
        let _: () = redis::cmd("SET")
            .arg("d")
            .arg("1")
            .query(&mut server.conn())
            .unwrap();
        let msg = sub.recv_response().expect("an invalidation");
        let text = format!("{msg:?}");
        assert!(
            text.contains("invalidate") && text.contains("\"d\""),
            "{text}"
        );
    }
}

#[test]
fn counters_and_stats_reset() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
    let _ = error_reply(&mut c, fenced("k", t + 1, &["SET", "d", "1"]));
    let _ = error_reply(&mut c, fenced("k", t, &["PING"]));
    let _ = error_reply(&mut c, fenced("k", t, &["PING"]));
    let fields = |c: &mut redis::Connection| {
        ["fenced_total", "fenced_stale_total", "fenced_refused_total"].map(|f| info_field(c, f))
    };
    assert_eq!(fields(&mut c), [1, 1, 2]);
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    assert_eq!(fields(&mut c), [1, 1, 2]);
    let _: () = redis::cmd("LOCK.STATS").arg("RESET").query(&mut c).unwrap();
    assert_eq!(fields(&mut c), [0, 0, 0]);
}

#[test]
fn a_lock_key_of_another_type_is_wrongtype() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let e = error_reply(&mut c, fenced("k", 1, &["SET", "d", "1"]));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(get(&mut c, "d"), None);
}

#[test]
fn the_inner_command_signals_its_own_key() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query(&mut c)
        .unwrap();
    let mut events = Events::subscribe(&server, "__keyevent@0__:*");
    // WATCH sees the inner write as a direct one.
    let mut w = server.conn();
    let _: () = redis::cmd("WATCH").arg("d").query(&mut w).unwrap();
    let _: () = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
    let _: () = redis::cmd("MULTI").query(&mut w).unwrap();
    let _: () = redis::cmd("SET").arg("d").arg("2").query(&mut w).unwrap();
    let exec: redis::Value = redis::cmd("EXEC").query(&mut w).unwrap();
    assert_eq!(exec, redis::Value::Nil);
    assert_eq!(get(&mut c, "d").as_deref(), Some("1"));
    acquire(&mut c, "sentinel", "o", LONG_TTL);
    let got = events.until_sentinel();
    assert_eq!(
        got,
        vec![("__keyevent@0__:set".to_string(), "d".to_string()),]
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    assert!(stats.contains("cmdstat_set:"), "{stats}");
}

#[test]
fn cluster_keys_must_share_the_lock_keys_slot() {
    let cluster = common::cluster::Cluster::start_with(0);
    let masters: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    let here = cluster.node(masters[0]);
    let key = cluster.key_on(here.port, "lock:");
    let elsewhere = cluster.key_on(masters[1], "data:");
    let mut c = here.conn();
    let t = acquire(&mut c, &key, "a", LONG_TTL);
    // A key under the lock key's own hash tag: runs here.
    let tagged = format!("{{{key}}}:data");
    let _: () = fenced(&key, t, &["SET", &tagged, "1"])
        .query(&mut c)
        .unwrap();
    assert_eq!(get(&mut c, &tagged).as_deref(), Some("1"));
    // A key of another slot: Redis's own CROSSSLOT, from the keys getkeys-api reported.
    let e = error_reply(&mut c, fenced(&key, t, &["SET", &elsewhere, "1"]));
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    let e = error_reply(
        &mut c,
        fenced(&key, t, &["EVAL", "return 1", "1", &elsewhere]),
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    // The lock key served elsewhere: MOVED, as for any command of that slot.
    let mut other = cluster.node(masters[1]).conn();
    let e = error_reply(&mut other, fenced(&key, t, &["SET", &tagged, "2"]));
    assert!(e.starts_with("MOVED"), "{e}");
    assert_eq!(get(&mut c, &tagged).as_deref(), Some("1"));
}

/// "In a cluster it is always served by the slot's master": `LOCK.FENCED` is not a `write`
/// command, so Redis itself serves it on a replica for a `READONLY` connection. The replica
/// must not check the token against its copy nor run anything (a read would return the
/// replica's data under a token only the master can vouch for): it answers the `MOVED` to the
/// master a write would get, whatever the inner command and the token.
#[test]
fn a_readonly_replica_redirects_to_the_master_and_runs_nothing() {
    let cluster = common::cluster::Cluster::start_with(1);
    let master = cluster.masters()[0];
    let key = cluster.key_on(master.port, "lock:");
    let data = format!("{{{key}}}:data");
    let mut m = master.conn();
    let t = acquire(&mut m, &key, "a", LONG_TTL);
    let _: () = redis::cmd("SET").arg(&data).arg("1").query(&mut m).unwrap();
    let replica = cluster.replica_of_master(master.port);
    let mut r = replica.conn();
    let _: () = redis::cmd("READONLY").query(&mut r).unwrap();
    // The replica has the lock and the data (a direct read is served there).
    assert!(eventually(SOON, || get(&mut r, &data).as_deref()
        == Some("1")
        && common::lock_info(&mut r, &key).is_some()));
    let slot = common::cluster::key_slot(&key);
    let moved = format!("MOVED {slot} 127.0.0.1:{}", master.port);
    let (ran, stale, gets, sets) = (
        info_field(&mut r, "fenced_total"),
        info_field(&mut r, "fenced_stale_total"),
        calls(replica, "get"),
        calls(replica, "set"),
    );
    for inner in [
        &["GET", &data][..],
        &["SET", &data, "2"][..],
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", &data][..],
    ] {
        for token in [t, t + 1] {
            let e = error_reply(&mut r, fenced(&key, token, inner));
            assert_eq!(e, moved, "{inner:?} with token {token}");
        }
    }
    assert_eq!(info_field(&mut r, "fenced_total"), ran);
    assert_eq!(info_field(&mut r, "fenced_stale_total"), stale);
    assert_eq!(calls(replica, "get"), gets);
    assert_eq!(calls(replica, "set"), sets);
    // The master serves it.
    let v: Option<String> = fenced(&key, t, &["GET", &data]).query(&mut m).unwrap();
    assert_eq!(v.as_deref(), Some("1"));
}

#[test]
fn a_script_checks_at_its_frozen_command_time_on_7_2() {
    // A busy script lets the server's cached time move after busy-reply-threshold (5 s by
    // default), and on a loaded machine the spin below took that long: 60 s keeps it frozen.
    let server = Server::with_args(&["--busy-reply-threshold", "60000"]);
    let mut c = server.conn();
    // Asked before the acquire, and a lease of 600 ms: the EVAL must start inside the lease,
    // and a 150 ms one could end first on a loaded machine.
    let on_7_0 = is_7_0(&mut c);
    let ttl = Duration::from_millis(600);
    let t: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(ttl.as_millis() as u64)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    // The script outlives the shared lease (800 ms of the server's CPU, under the 60 s after
    // which a busy script would let the server's cached time move) before its LOCK.FENCED.
    // os.clock (7.2+): the server's CPU time, since TIME and key expiry are frozen in a 7.2+
    // script; 7.0 has no os.clock, and its TIME is the clock's.
    let wait = if on_7_0 {
        "local function ms() local t = redis.call('TIME') \
         return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end \
         local t0 = ms() while ms() - t0 < tonumber(ARGV[2]) do end "
    } else {
        "local c0 = os.clock() while os.clock() - c0 < tonumber(ARGV[2]) / 1000 do end "
    };
    let script =
        format!("{wait} return redis.call('lock.fenced', KEYS[1], ARGV[1], 'set', KEYS[2], 'x')");
    let started = std::time::Instant::now();
    let reply = redis::cmd("EVAL")
        .arg(&script)
        .arg(2)
        .arg("k")
        .arg("d")
        .arg(t)
        .arg(800)
        .query::<String>(&mut c);
    assert!(started.elapsed() > ttl, "the script ran too short a time");
    let text = match &reply {
        Ok(v) => v.clone(),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
    };
    if on_7_0 {
        // 7.0 has no command time: the check uses its own instant.
        assert!(text.starts_with("FENCED stale token"), "{text}");
    } else {
        assert_eq!(text, "OK");
    }
}

#[test]
fn out_of_memory_is_the_inner_commands_own() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("SET").arg("d").arg("v").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let direct = error_reply(&mut c, redis::cmd("SET").arg("e").arg("v").clone());
    assert!(direct.starts_with("OOM"), "{direct}");
    assert_eq!(
        error_reply(&mut c, fenced("k", t, &["SET", "e", "v"])),
        direct
    );
    // A command that frees memory still runs (not deny-oom itself).
    let n: i64 = fenced("k", t, &["DEL", "d"]).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(get(&mut c, "e"), None);
}

/// The AOF, like a replica, gets what the inner command propagates when run directly
/// (`EXPIRE` as `PEXPIREAT`, `SPOP` as `SREM`, a script as its writes), never `LOCK.FENCED`;
/// a restart from it brings the same data back.
#[test]
fn the_aof_gets_the_inner_effects_never_lock_fenced() {
    let mut server = Server::with_args(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("SADD")
        .arg("s")
        .arg("x")
        .arg("y")
        .query(&mut c)
        .unwrap();
    for inner in [
        &["SET", "d", "1"][..],
        &["INCR", "d"],
        &["EXPIRE", "d", "1000"],
        &["SPOP", "s"],
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'w'); return 1",
            "1",
            "e",
        ],
    ] {
        let _: redis::Value = fenced("k", t, inner).query(&mut c).unwrap();
    }
    let names: Vec<String> = common::aof_commands(&server)
        .iter()
        .map(|w| w[0].to_uppercase())
        .collect();
    for absent in ["LOCK.FENCED", "EXPIRE", "SPOP", "EVAL"] {
        assert!(!names.iter().any(|n| n == absent), "{absent} in {names:?}");
    }
    for present in ["SET", "INCR", "PEXPIREAT", "SREM"] {
        assert!(
            names.iter().any(|n| n == present),
            "no {present} in {names:?}"
        );
    }
    let data = |c: &mut redis::Connection| -> redis::Value {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg("d")
            .arg("e")
            .arg("s")
            .query(c)
            .unwrap()
    };
    let before = data(&mut c);
    drop(c);
    server.restart();
    let mut c = server.conn();
    assert_eq!(
        data(&mut c),
        before,
        "the data after a restart from the AOF"
    );
    assert_eq!(get(&mut c, "e").as_deref(), Some("w"));
    // DIGEST-VALUE ignores expiries: the PEXPIREAT the fenced EXPIRE became came back too.
    let pttl: i64 = redis::cmd("PTTL").arg("d").query(&mut c).unwrap();
    assert!(
        pttl > 900_000 && pttl <= 1_000_000,
        "d's ttl after the restart: {pttl}"
    );
}

/// A lock that lapses at the moment of the check (the server was busy and no timer ran): the
/// check changes nothing itself (docs/commands.md, *decision*). Opening the key is Redis's own
/// lazy expiry (its `DEL` goes to the AOF and the replicas as for any read of an expired key),
/// the check answers `current none`, nothing runs, and the waiter is granted in the module's
/// next step, as after Redis's own expiry of a lock (its own effect after the `DEL`, not in one
/// transaction with it). Sent as one pipeline, so no timer runs between the lapse and the
/// check, however slow this test's own thread is; the `LOCK.WAITERS` after the check, in the
/// same turn, shows that the check granted nothing.
#[test]
fn a_lock_lapsing_at_the_check_is_redis_own_expiry_and_nothing_runs() {
    let server = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    let ta = acquire(&mut c, "k", "a", LONG_TTL);
    let mut w = queued_waiter(&server, &mut c);
    let before = common::aof_commands(&server).len();
    let mut raw = Raw::connect(&server);
    let ta_text = ta.to_string();
    let mut bytes = common::raw::encode(&[b"LOCK.RENEW", b"k", b"a", b"50"]);
    bytes.extend(common::raw::encode(&[b"DEBUG", b"SLEEP", b"0.2"]));
    bytes.extend(common::raw::encode(&[
        b"LOCK.FENCED",
        b"k",
        ta_text.as_bytes(),
        b"SET",
        b"d",
        b"1",
    ]));
    // In the same turn, after the check: b still waits (the check granted nothing).
    bytes.extend(common::raw::encode(&[b"LOCK.WAITERS", b"k"]));
    std::io::Write::write_all(&mut raw.stream, &bytes).expect("write the pipeline");
    assert!(matches!(raw.read(SOON), Reply::Int(_)), "a's renewal");
    assert_eq!(raw.read(SOON), Reply::Status("OK".into()), "the sleep");
    assert_eq!(
        raw.read(SOON),
        Reply::Error(format!("FENCED stale token {ta}, current none")),
        "the check sees the lapse"
    );
    match raw.read(SOON) {
        Reply::Array(waiters) => assert_eq!(waiters.len(), 1, "b waits: {waiters:?}"),
        other => panic!("LOCK.WAITERS: {other:?}"),
    }
    let tb = w.read(SOON).token();
    assert!(tb > ta as u64, "b is granted after the lapse");
    assert_eq!(get(&mut c, "d"), None, "nothing ran");
    let aof: Vec<String> = common::aof_commands(&server)[before..]
        .iter()
        .map(|w| w.join(" "))
        .filter(|w| !w.starts_with("SELECT"))
        .collect();
    // The first words of each; Redis propagates a lazy expiry as `UNLINK` under
    // `lazyfree-lazy-expire` (some servers' default).
    let shape: Vec<String> = aof
        .iter()
        .map(|w| w.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .map(|w| w.replace("UNLINK", "DEL"))
        .collect();
    assert_eq!(
        shape,
        ["LOCK.APPLY k a", "DEL k", "LOCK.APPLY k b"],
        "the renewal, Redis's expiry, the hand-off, each alone; no SET, no LOCK.FENCED: {aof:?}"
    );
}

/// `SLOWLOG` shows the inner command beside `LOCK.FENCED`, as for a command run directly.
#[test]
fn slowlog_shows_the_inner_command_beside_lock_fenced() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    let _: () = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let log: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(16)
        .query(&mut c)
        .unwrap();
    let entries: Vec<String> = match &log {
        redis::Value::Array(items) => items
            .iter()
            .filter_map(|e| match e {
                redis::Value::Array(f) => match f.get(3) {
                    Some(redis::Value::Array(w)) => Some(
                        w.iter()
                            .map(|w| match w {
                                redis::Value::BulkString(b) => {
                                    String::from_utf8_lossy(b).into_owned()
                                }
                                other => format!("{other:?}"),
                            })
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        other => panic!("SLOWLOG GET: {other:?}"),
    };
    let fenced_line = format!("LOCK.FENCED k {t} SET d 1");
    assert!(
        entries.iter().any(|e| e.eq_ignore_ascii_case(&fenced_line)),
        "{entries:?}"
    );
    assert!(
        entries.iter().any(|e| e.eq_ignore_ascii_case("SET d 1")),
        "{entries:?}"
    );
}

/// `MONITOR` shows the inner command beside `LOCK.FENCED`, as for a command run directly.
#[test]
fn monitor_shows_the_inner_command_beside_lock_fenced() {
    let server = Server::start();
    let mut c = server.conn();
    let t = acquire(&mut c, "k", "a", LONG_TTL);
    let mut monitor = Raw::connect(&server);
    monitor.send(&[b"MONITOR"]);
    assert_eq!(monitor.read(SOON), Reply::Status("OK".into()));
    let _: () = fenced("k", t, &["SET", "d", "1"]).query(&mut c).unwrap();
    // A command after it marks the end of what the monitor must have shown.
    let _: () = redis::cmd("SET")
        .arg("sentinel")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.contains("\"sentinel\"")) {
        match monitor.read(SOON) {
            Reply::Status(line) => lines.push(line),
            other => panic!("MONITOR sent {other:?} after {lines:?}"),
        }
    }
    let shown = |words: &str| lines.iter().any(|l| l.to_uppercase().contains(words));
    assert!(
        shown(&format!(
            "\"LOCK.FENCED\" \"K\" \"{t}\" \"SET\" \"D\" \"1\""
        )),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.to_uppercase().ends_with("\"SET\" \"D\" \"1\"") && !l.contains("LOCK.")),
        "{lines:?}"
    );
}
