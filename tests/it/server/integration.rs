//! How the module fits into the server: ACL key patterns and categories, command metadata,
//! keyspace events, and the `INFO relock` section.
use relock_testkit as common;
use relock_testkit::cmd;

use std::thread;
use std::time::Duration;

use common::events::{keyevent, Events};
use common::reply::text;
use common::{acquire, eventually, info_field, int_or_nil, show, Server};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

/// Runs a command that must fail; returns its error code and the error as the client shows it.
fn error_code_and_text(c: &mut Connection, cmd: redis::Cmd) -> (String, String) {
    match cmd.query::<Value>(c) {
        Ok(v) => panic!("{} replied {v:?}, expected an error", show(&cmd)),
        Err(e) => (e.code().unwrap_or_default().to_string(), e.to_string()),
    }
}

/// A connection authenticated as `user` (password `pw`).
fn conn_as(server: &Server, user: &str) -> Connection {
    let mut c = server.conn();
    let _: () = cmd!("AUTH", user, "pw").query(&mut c).expect("AUTH");
    c
}

/// Every LOCK.* command a client calls, with `key` in its key position (the groups with one
/// key).
fn every_command(key: &str) -> Vec<(&'static str, redis::Cmd)> {
    vec![
        ("lock.acquire", cmd!("LOCK.ACQUIRE", key, "o", 100)),
        ("lock.reenter", cmd!("LOCK.REENTER", key, "o", 100)),
        ("lock.release", cmd!("LOCK.RELEASE", key, "o")),
        ("lock.renew", cmd!("LOCK.RENEW", key, "o", 100)),
        ("lock.wait", cmd!("LOCK.WAIT", key, "o", 100, 50)),
        ("lock.info", cmd!("LOCK.INFO", key)),
        ("lock.holders", cmd!("LOCK.HOLDERS", key)),
        ("lock.waiters", cmd!("LOCK.WAITERS", key)),
        ("lock.history", cmd!("LOCK.HISTORY", key)),
        ("lock.macquire", cmd!("LOCK.MACQUIRE", 1, key, "o", 100)),
        ("lock.mrelease", cmd!("LOCK.MRELEASE", 1, key, "o")),
        ("lock.mrenew", cmd!("LOCK.MRENEW", 1, key, "o", 100)),
        ("lock.downgrade", cmd!("LOCK.DOWNGRADE", key, "o")),
        ("lock.forcerelease", cmd!("LOCK.FORCERELEASE", key)),
    ]
}

/// The commands that only read a key (`readonly`, key spec RO).
const READS: [&str; 4] = ["lock.info", "lock.holders", "lock.waiters", "lock.history"];

#[test]
fn acl_key_patterns_apply_to_lock_commands() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all")
        .query(&mut admin)
        .unwrap();
    let mut c = conn_as(&server, "app");
    let t = acquire(&mut c, "app:x", "o", 10_000);
    assert!(t > 0);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "app:x", "o")),
        Some(0)
    );
    acquire(&mut admin, "other:x", "o", 10_000);
    for (name, cmd) in every_command("other:x") {
        let (code, msg) = error_code_and_text(&mut c, cmd);
        assert_eq!(code, "NOPERM", "{name} on other:x: {msg}");
    }
    // Nothing changed on the forbidden key.
    let v: Value = cmd!("LOCK.INFO", "other:x").query(&mut admin).unwrap();
    assert_ne!(v, Value::Nil);
    for (name, cmd) in every_command("app:y") {
        let r = cmd.query::<Value>(&mut c);
        assert!(r.is_ok(), "{name} on app:y: {r:?}");
    }
}

#[test]
fn acl_read_only_key_pattern_allows_the_reads_only() {
    // `%R~` grants read access only: the key specs must mark the reads RO and the rest RW.
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = cmd!("ACL", "SETUSER", "reader", "on", ">pw", "%R~ro:*", "+@all")
        .query(&mut admin)
        .unwrap();
    acquire(&mut admin, "ro:x", "o", 10_000);
    let mut c = conn_as(&server, "reader");
    let v: Value = cmd!("LOCK.INFO", "ro:x").query(&mut c).expect("LOCK.INFO");
    assert!(matches!(v, Value::Array(_)), "{v:?}");
    for (name, cmd) in every_command("ro:x") {
        if READS.contains(&name) {
            let r = cmd.query::<Value>(&mut c);
            assert!(r.is_ok(), "{name} reads a read-only key: {r:?}");
            continue;
        }
        let (code, msg) = error_code_and_text(&mut c, cmd);
        assert_eq!(code, "NOPERM", "{name} on a read-only key: {msg}");
    }
}

/// The server's version, as `INFO server` says it.
fn server_version(c: &mut Connection) -> String {
    let info: String = cmd!("INFO", "server").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0.0.0")
        .trim()
        .to_string()
}

/// The administrative commands: `admin`, and in `@admin` where the server has module ACL
/// categories.
const ADMIN: [&str; 3] = ["LOCK.FORCERELEASE", "LOCK.LOG", "LOCK.STATS"];

#[test]
fn admin_commands_are_refused_to_a_user_without_admin() {
    let server = Server::start();
    let mut admin = server.conn();
    // Redis 7.2+ lets the module put its commands in ACL categories, so `-@admin` covers
    // LOCK.FORCERELEASE, LOCK.LOG and LOCK.STATS there. Redis 7.0 has no such API and module
    // commands belong to no category: there the README tells operators to deny the commands by
    // name, which is what this test checks on 7.0.
    let version = server_version(&mut admin);
    let has_module_acl_categories = version.as_str() >= "7.2";
    let mut setuser = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all");
    if has_module_acl_categories {
        setuser.arg("-@admin");
    } else {
        for name in ADMIN {
            setuser.arg(format!("-{}", name.to_lowercase()));
        }
    }
    let _: () = setuser.query(&mut admin).unwrap();
    acquire(&mut admin, "k", "o", 10_000);
    let mut c = conn_as(&server, "app");
    // Ordinary lock commands are allowed, the reads of the journal by key too.
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "j", "o", 10_000)).is_some());
    let _: Value = cmd!("LOCK.HISTORY", "k").query(&mut c).unwrap();
    for cmd in [
        cmd!("LOCK.FORCERELEASE", "k"),
        cmd!("LOCK.LOG"),
        cmd!("LOCK.LOG", "RESET"),
        cmd!("LOCK.STATS"),
        cmd!("LOCK.STATS", "RESET"),
    ] {
        let shown = show(&cmd);
        let (code, msg) = error_code_and_text(&mut c, cmd);
        assert_eq!(
            code, "NOPERM",
            "{shown} by a user without admin on {version}: {msg}"
        );
    }
    let v: Value = cmd!("LOCK.INFO", "k").query(&mut admin).unwrap();
    assert_ne!(v, Value::Nil, "the lock must still be held");
}

#[test]
fn command_getkeys_finds_the_keys_of_every_command() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        cmd!("COMMAND", "GETKEYS", "LOCK.ACQUIRE", "k", "o", 100),
        cmd!(
            "COMMAND",
            "GETKEYS",
            "LOCK.ACQUIRE",
            "k",
            "o",
            100,
            "SHARED",
            "LIMIT",
            4,
            "PERMITS",
            2
        ),
        cmd!("COMMAND", "GETKEYS", "LOCK.REENTER", "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.RELEASE", "k", "o"),
        cmd!("COMMAND", "GETKEYS", "LOCK.RENEW", "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.WAIT", "k", "o", 100, 0),
        cmd!("COMMAND", "GETKEYS", "LOCK.INFO", "k"),
        cmd!("COMMAND", "GETKEYS", "LOCK.HOLDERS", "k", "COUNT", 0),
        cmd!("COMMAND", "GETKEYS", "LOCK.WAITERS", "k", "COUNT", 0),
        cmd!("COMMAND", "GETKEYS", "LOCK.HISTORY", "k", 5),
        cmd!("COMMAND", "GETKEYS", "LOCK.DOWNGRADE", "k", "o"),
        cmd!("COMMAND", "GETKEYS", "LOCK.FORCERELEASE", "k"),
        cmd!("COMMAND", "GETKEYS", "LOCK.APPLY", "k", "o", 1, 1),
        cmd!("COMMAND", "GETKEYS", "LOCK.DROP", "k", "o"),
        cmd!("COMMAND", "GETKEYS", "LOCK.MACQUIRE", 1, "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.MRELEASE", 1, "k", "o"),
        cmd!("COMMAND", "GETKEYS", "LOCK.MRENEW", 1, "k", "o", 100),
    ];
    for cmd in cases {
        let shown = show(&cmd);
        let keys: Vec<String> = cmd.query(&mut c).unwrap_or_else(|e| panic!("{shown}: {e}"));
        assert_eq!(keys, vec!["k".to_string()], "{shown}");
    }
    // A group's keys are all declared (a keynum key spec), and nothing after them.
    for (name, tail) in [
        ("LOCK.MACQUIRE", &["o", "100"][..]),
        ("LOCK.MRELEASE", &["o"]),
        ("LOCK.MRENEW", &["o", "100"]),
    ] {
        let keys: Vec<String> = cmd!("COMMAND", "GETKEYS", name, 3, "a", "b", "c")
            .arg(tail)
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, ["a", "b", "c"], "{name}");
    }
    // The commands without keys have none.
    for cmd in [
        cmd!("COMMAND", "GETKEYS", "LOCK.LOG"),
        cmd!("COMMAND", "GETKEYS", "LOCK.STATS"),
        cmd!("COMMAND", "GETKEYS", "LOCK.COUNTER", 5),
    ] {
        let shown = show(&cmd);
        assert!(
            cmd.query::<Vec<String>>(&mut c).is_err(),
            "{shown} has no key"
        );
    }
}

/// `COMMAND INFO name`: (arity, flags, first key, last key, step).
fn command_info(c: &mut Connection, name: &str) -> (i64, Vec<String>, i64, i64, i64) {
    let v: Value = cmd!("COMMAND", "INFO", name).query(c).unwrap();
    let Value::Array(mut outer) = v else {
        panic!("COMMAND INFO {name}: {v:?}")
    };
    assert_eq!(outer.len(), 1);
    let Value::Array(entry) = outer.remove(0) else {
        panic!("COMMAND INFO {name}: no entry (command not registered?)")
    };
    assert_eq!(text(&entry[0]).to_lowercase(), name);
    let int_at = |i: usize| match entry[i] {
        Value::Int(n) => n,
        ref other => panic!("COMMAND INFO {name} item {i}: {other:?}"),
    };
    let Value::Array(flags) = &entry[2] else {
        panic!("COMMAND INFO {name} flags: {:?}", entry[2])
    };
    let flags = flags.iter().map(text).collect();
    (int_at(1), flags, int_at(3), int_at(4), int_at(5))
}

#[test]
fn command_info_has_arity_flags_and_keys() {
    let server = Server::start();
    let mut c = server.conn();
    // Since shared holds, the acquiring commands take optional mode words (arity -4/-5),
    // LOCK.FORCERELEASE an optional owner (-2), LOCK.RELEASE an optional `FROM c` (-3);
    // LOCK.HOLDERS and LOCK.DROP are new. The groups
    // find their keys by a keynum key spec: `movablekeys`, no fixed key positions.
    let expected: [(&str, i64, &[&str], &[&str]); 20] = [
        (
            "lock.acquire",
            -4,
            &["write", "denyoom", "fast"],
            &["readonly", "admin", "blocking"],
        ),
        (
            "lock.reenter",
            -4,
            // Not denyoom: the module refuses what adds out of memory, and answers a repeat.
            &["write", "fast"],
            &["readonly", "admin", "blocking", "denyoom"],
        ),
        (
            "lock.release",
            -3,
            &["write", "fast"],
            &["readonly", "admin", "denyoom"],
        ),
        (
            "lock.renew",
            4,
            &["write", "fast"],
            &["readonly", "admin", "denyoom"],
        ),
        (
            "lock.wait",
            -5,
            &["write", "denyoom", "blocking"],
            &["readonly", "admin", "fast"],
        ),
        (
            "lock.info",
            2,
            &["readonly", "fast"],
            &["write", "admin", "denyoom"],
        ),
        (
            "lock.forcerelease",
            -2,
            &["write", "admin"],
            &["readonly", "denyoom", "fast"],
        ),
        (
            "lock.holders",
            -2,
            &["readonly"],
            &["write", "admin", "denyoom"],
        ),
        (
            "lock.drop",
            3,
            &["write", "admin"],
            &["readonly", "denyoom"],
        ),
        (
            "lock.apply",
            -5,
            &["write", "denyoom", "admin"],
            &["readonly"],
        ),
        (
            "lock.counter",
            2,
            &["write", "admin"],
            &["readonly", "denyoom"],
        ),
        (
            "lock.waiters",
            -2,
            &["readonly"],
            &["write", "admin", "denyoom", "blocking"],
        ),
        (
            "lock.history",
            -2,
            &["readonly"],
            &["write", "admin", "denyoom"],
        ),
        (
            "lock.log",
            -1,
            &["admin", "loading", "stale"],
            &["write", "readonly", "denyoom"],
        ),
        (
            "lock.stats",
            -1,
            &["admin", "loading", "stale"],
            &["write", "readonly", "denyoom"],
        ),
        (
            "lock.downgrade",
            3,
            &["write", "fast"],
            &["readonly", "admin", "denyoom", "blocking"],
        ),
        (
            "lock.macquire",
            -5,
            &["write", "denyoom", "fast", "movablekeys"],
            &["readonly", "admin", "blocking"],
        ),
        (
            "lock.mrelease",
            -4,
            &["write", "fast", "movablekeys"],
            &["readonly", "admin", "denyoom"],
        ),
        (
            "lock.mrenew",
            -5,
            &["write", "fast", "movablekeys"],
            &["readonly", "admin", "denyoom"],
        ),
        (
            "lock.observe",
            4,
            &["readonly", "blocking"],
            &["write", "admin", "denyoom"],
        ),
    ];
    for (name, arity, has, lacks) in expected {
        let (a, flags, first, last, step) = command_info(&mut c, name);
        assert_eq!(a, arity, "{name} arity");
        for f in has {
            assert!(flags.iter().any(|x| x == f), "{name} lacks {f}: {flags:?}");
        }
        for f in lacks {
            assert!(!flags.iter().any(|x| x == f), "{name} has {f}: {flags:?}");
        }
        let keyless = ["lock.counter", "lock.log", "lock.stats"].contains(&name);
        if keyless || has.contains(&"movablekeys") {
            assert_eq!((first, last, step), (0, 0, 0), "{name} has no fixed key");
            continue;
        }
        assert_eq!((first, last, step), (1, 1, 1), "{name} key positions");
    }
    // LOCK.FENCED: its key at 1, the inner command's keys from its getkeys-api callback;
    // neither write, readonly nor deny-oom (its inner command's flags apply).
    let (a, flags, first, last, step) = command_info(&mut c, "lock.fenced");
    assert_eq!(a, -4, "lock.fenced arity");
    assert!(flags.iter().any(|f| f == "movablekeys"), "{flags:?}");
    for f in ["write", "readonly", "denyoom", "admin", "blocking"] {
        assert!(
            !flags.iter().any(|x| x == f),
            "lock.fenced has {f}: {flags:?}"
        );
    }
    assert_eq!((first, last, step), (1, 1, 1), "lock.fenced key positions");
}

/// Every command the module registers.
const COMMANDS: [&str; 21] = [
    "LOCK.ACQUIRE",
    "LOCK.REENTER",
    "LOCK.RELEASE",
    "LOCK.RENEW",
    "LOCK.WAIT",
    "LOCK.INFO",
    "LOCK.HOLDERS",
    "LOCK.FORCERELEASE",
    "LOCK.APPLY",
    "LOCK.DROP",
    "LOCK.COUNTER",
    "LOCK.WAITERS",
    "LOCK.LOG",
    "LOCK.HISTORY",
    "LOCK.STATS",
    "LOCK.DOWNGRADE",
    "LOCK.MACQUIRE",
    "LOCK.MRELEASE",
    "LOCK.MRENEW",
    "LOCK.OBSERVE",
    "LOCK.FENCED",
];

/// `COMMAND LIST` knows no `LOCK.*` command that `COMMANDS` lacks (nor the reverse), so every
/// test walking `COMMANDS` covers every command the module registers.
#[test]
fn commands_lists_every_registered_command() {
    let server = Server::start();
    let mut c = server.conn();
    let mut registered: Vec<String> = cmd!("COMMAND", "LIST", "FILTERBY", "PATTERN", "lock.*")
        .query(&mut c)
        .unwrap();
    registered.iter_mut().for_each(|n| n.make_ascii_uppercase());
    registered.sort();
    let mut listed: Vec<String> = COMMANDS.iter().map(|n| n.to_string()).collect();
    listed.sort();
    assert_eq!(registered, listed);
}

/// `COMMAND DOCS name` as (field, value) pairs (RESP2: [name, [field, value, ...]]).
fn command_docs(c: &mut Connection, name: &str) -> Vec<(String, Value)> {
    let v: Value = cmd!("COMMAND", "DOCS", name).query(c).unwrap();
    let Value::Array(items) = v else {
        panic!("COMMAND DOCS {name}: {v:?}")
    };
    assert_eq!(items.len(), 2, "COMMAND DOCS {name}: {items:?}");
    assert_eq!(text(&items[0]).to_uppercase(), name);
    let Value::Array(doc) = &items[1] else {
        panic!("COMMAND DOCS {name}: {:?}", items[1])
    };
    doc.chunks(2)
        .map(|pair| (text(&pair[0]), pair[1].clone()))
        .collect()
}

/// One documented argument: its name, type, token and flags.
#[derive(Debug, PartialEq)]
struct DocArg {
    name: String,
    kind: String,
    token: Option<String>,
    flags: Vec<String>,
}

fn doc_args(docs: &[(String, Value)]) -> Vec<DocArg> {
    let Some((_, Value::Array(args))) = docs.iter().find(|(f, _)| f == "arguments") else {
        panic!("no arguments in {docs:?}")
    };
    args.iter()
        .map(|arg| {
            let Value::Array(fields) = arg else {
                panic!("{arg:?}")
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|p| text(&p[0]) == name)
                    .map(|p| p[1].clone())
            };
            DocArg {
                name: text(&field("name").unwrap()),
                kind: text(&field("type").unwrap()),
                token: field("token").map(|t| text(&t)),
                flags: match field("flags") {
                    Some(Value::Array(f)) => f.iter().map(text).collect(),
                    _ => vec![],
                },
            }
        })
        .collect()
}

#[test]
fn command_docs_have_a_summary_and_every_argument() {
    let server = Server::start();
    let mut c = server.conn();
    for name in COMMANDS {
        let docs = command_docs(&mut c, name);
        let summary = docs
            .iter()
            .find(|(f, _)| f == "summary")
            .map(|(_, v)| text(v))
            .unwrap_or_else(|| panic!("COMMAND DOCS {name} has no summary"));
        assert!(summary.len() > 10, "{name} summary: {summary:?}");
        let complexity = docs.iter().find(|(f, _)| f == "complexity");
        assert!(complexity.is_some(), "{name} has no complexity");
        let since = docs
            .iter()
            .find(|(f, _)| f == "since")
            .map(|(_, v)| text(v));
        let first = [
            "LOCK.ACQUIRE",
            "LOCK.REENTER",
            "LOCK.RELEASE",
            "LOCK.RENEW",
            "LOCK.WAIT",
            "LOCK.INFO",
            "LOCK.FORCERELEASE",
            "LOCK.APPLY",
            "LOCK.COUNTER",
        ];
        let wanted = if first.contains(&name) {
            "0.1.0"
        } else {
            "0.2.0"
        };
        assert_eq!(since.as_deref(), Some(wanted), "{name} since");
    }
    // The mode words of the acquiring commands, PERMITS among them: optional, with their token.
    let arg = |name: &str, kind: &str, token: &str| DocArg {
        name: name.into(),
        kind: kind.into(),
        token: Some(token.into()),
        flags: vec!["optional".into()],
    };
    let mode = [
        arg("shared", "pure-token", "SHARED"),
        arg("limit", "integer", "LIMIT"),
        arg("permits", "integer", "PERMITS"),
    ];
    for (name, before) in [("LOCK.ACQUIRE", 3), ("LOCK.REENTER", 3), ("LOCK.WAIT", 4)] {
        let args = doc_args(&command_docs(&mut c, name));
        let names: Vec<&str> = args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(args[before..before + 3], mode, "{name}: {names:?}");
        let from = usize::from(name == "LOCK.REENTER");
        assert_eq!(args.len(), before + 3 + from, "{name}: {names:?}");
    }
    // The count a step moves from, after everything else: optional, with its token.
    let from = arg("count", "integer", "FROM");
    for (name, position) in [
        ("LOCK.REENTER", 6),
        ("LOCK.RELEASE", 2),
        ("LOCK.MRELEASE", 3),
    ] {
        let args = doc_args(&command_docs(&mut c, name));
        assert_eq!(args.len(), position + 1, "{name}: {args:?}");
        assert_eq!(args[position], from, "{name}");
    }
    let summary = text(
        &command_docs(&mut c, "LOCK.ACQUIRE")
            .into_iter()
            .find(|(f, _)| f == "summary")
            .unwrap()
            .1,
    );
    assert!(summary.contains("PERMITS"), "{summary}");
    // A group: numkeys, then its keys (several), then the rest.
    for (name, rest) in [
        ("LOCK.MACQUIRE", &["owner", "ttl_ms"][..]),
        ("LOCK.MRELEASE", &["owner", "count"]),
        ("LOCK.MRENEW", &["owner", "ttl_ms"]),
    ] {
        let args = doc_args(&command_docs(&mut c, name));
        assert_eq!(
            (args[0].name.as_str(), args[0].kind.as_str()),
            ("numkeys", "integer")
        );
        assert_eq!(
            (args[1].name.as_str(), args[1].kind.as_str()),
            ("key", "key")
        );
        assert_eq!(args[1].flags, ["multiple"], "{name}");
        let names: Vec<&str> = args[2..].iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, rest, "{name}");
    }
    let names = |name: &str, c: &mut Connection| -> Vec<String> {
        doc_args(&command_docs(c, name))
            .into_iter()
            .map(|a| a.name)
            .collect()
    };
    assert_eq!(names("LOCK.DOWNGRADE", &mut c), ["key", "owner"]);
    assert_eq!(names("LOCK.WAITERS", &mut c), ["key", "count"]);
    assert_eq!(names("LOCK.HISTORY", &mut c), ["key", "count"]);
    assert_eq!(names("LOCK.LOG", &mut c), ["count-or-reset"]);
    assert_eq!(names("LOCK.STATS", &mut c), ["count-or-reset"]);
}

#[test]
fn keyspace_events_are_published() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "KEd")
        .query(&mut c)
        .unwrap();
    let mut events = Events::subscribe(&server, "__keyevent@0__:*");

    acquire(&mut c, "k", "o", 10_000); // new hold
    acquire(&mut c, "k", "o", 10_000); // refresh
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", 100)),
        None
    ); // none
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "k", "o", 10_000)),
        Some(2)
    );
    assert!(int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "o", 20_000)).is_some());
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "k", "x", 20_000)),
        None
    ); // none
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(1)); // none
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(0));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), None); // none
    acquire(&mut c, "other", "o", 10_000);
    let f: i64 = cmd!("LOCK.FORCERELEASE", "other").query(&mut c).unwrap();
    assert_eq!(f, 1);
    let f: i64 = cmd!("LOCK.FORCERELEASE", "other").query(&mut c).unwrap();
    assert_eq!(f, 0); // none
    acquire(&mut c, "sentinel", "o", 10_000);

    let got = events.until_sentinel();
    let want = vec![
        keyevent("lock.acquired", "k"),
        keyevent("lock.acquired", "k"),
        keyevent("lock.acquired", "k"),
        keyevent("lock.renewed", "k"),
        keyevent("lock.released", "k"),
        keyevent("lock.acquired", "other"),
        keyevent("lock.forcereleased", "other"),
    ];
    assert_eq!(got, want);
}

#[test]
fn keyspace_channel_carries_the_event_name() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "Kd")
        .query(&mut c)
        .unwrap();
    let mut events = Events::subscribe(&server, "__keyspace@0__:*");
    acquire(&mut c, "app:k", "o", 10_000);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RELEASE", "app:k", "o")),
        Some(0)
    );
    acquire(&mut c, "sentinel", "o", 10_000);
    let got = events.until_sentinel();
    assert_eq!(
        got,
        vec![
            (
                "__keyspace@0__:app:k".to_string(),
                "lock.acquired".to_string()
            ),
            (
                "__keyspace@0__:app:k".to_string(),
                "lock.released".to_string()
            ),
        ]
    );
}

#[test]
fn no_events_without_the_module_class() {
    let server = Server::start();
    let mut c = server.conn();
    // `g` (generic) but not `d`: lock events stay silent, DEL is still published.
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "Eg")
        .query(&mut c)
        .unwrap();
    let mut events = Events::subscribe(&server, "__keyevent@0__:*");
    acquire(&mut c, "k", "o", 10_000);
    let _: i64 = cmd!("DEL", "k").query(&mut c).unwrap();
    let _: () = cmd!("SET", "sentinel", "v").query(&mut c).unwrap();
    let _: i64 = cmd!("DEL", "sentinel").query(&mut c).unwrap();
    let got = events.until_sentinel();
    assert_eq!(got, vec![keyevent("del", "k")]);
}

#[test]
fn granted_event_on_hand_off() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "notify-keyspace-events", "KEd")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "k", "o", 10_000);
    let mut events = Events::subscribe(&server, "__keyevent@0__:*");
    let mut w = server.conn();
    let waiter =
        thread::spawn(move || int_or_nil(&mut w, cmd!("LOCK.WAIT", "k", "w", 10_000, 5_000)));
    assert!(eventually(Duration::from_secs(5), || info_field(
        &mut c, "waiters"
    ) == 1));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "k", "o")), Some(0));
    let token = waiter
        .join()
        .unwrap()
        .expect("the waiter was granted the lock");
    acquire(&mut c, "sentinel", "o", 10_000);
    let got = events.until_sentinel();
    assert!(
        got.contains(&keyevent("lock.granted", "k")),
        "no lock.granted for k: {got:?}"
    );
    assert_eq!(info_field(&mut c, "granted_total"), 1);
    assert_eq!(info_field(&mut c, "waiters"), 0);
    assert!(info_field(&mut c, "last_token") >= token);
}

#[test]
fn info_relock_counts_every_outcome() {
    let server = Server::start();
    let mut c = server.conn();
    let fields = [
        "locks",
        "waiters",
        "timers",
        "acquired_total",
        "released_total",
        "renewed_total",
        "contended_total",
        "granted_total",
        "expired_total",
        "wait_timeouts_total",
        "forcereleased_total",
    ];
    for f in fields {
        assert_eq!(info_field(&mut c, f), 0, "{f} on a fresh server");
    }
    let _ = info_field(&mut c, "last_token");

    // New holds count; refreshes and re-entries do not.
    let a = acquire(&mut c, "a", "o", 60_000);
    assert_eq!(info_field(&mut c, "last_token"), a);
    assert_eq!(acquire(&mut c, "a", "o", 60_000), a);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "a", "o", 60_000)),
        Some(2)
    );
    assert_eq!(info_field(&mut c, "acquired_total"), 1);
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "b", "o", 60_000)),
        Some(1)
    );
    assert_eq!(info_field(&mut c, "acquired_total"), 2);
    assert_eq!(info_field(&mut c, "locks"), 2);
    let b: i64 = {
        let v: Vec<Value> = cmd!("LOCK.INFO", "b").query(&mut c).unwrap();
        match v[3] {
            Value::Int(t) => t,
            ref other => panic!("token {other:?}"),
        }
    };
    assert!(b > a);
    assert_eq!(info_field(&mut c, "last_token"), b);

    // Contended: nil replies of ACQUIRE and REENTER.
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "a", "x", 1_000)),
        None
    );
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.REENTER", "a", "x", 1_000)),
        None
    );
    assert_eq!(info_field(&mut c, "contended_total"), 2);

    // Renewed: only successful renewals.
    assert!(int_or_nil(&mut c, cmd!("LOCK.RENEW", "a", "o", 60_000)).is_some());
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.RENEW", "a", "x", 60_000)),
        None
    );
    assert_eq!(info_field(&mut c, "renewed_total"), 1);

    // Released: only holds that end.
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "a", "o")), Some(1));
    assert_eq!(info_field(&mut c, "released_total"), 0);
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "a", "o")), Some(0));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "a", "o")), None);
    assert_eq!(info_field(&mut c, "released_total"), 1);
    assert_eq!(info_field(&mut c, "locks"), 1);

    // Force-released.
    let f: i64 = cmd!("LOCK.FORCERELEASE", "b").query(&mut c).unwrap();
    assert_eq!(f, 1);
    let f: i64 = cmd!("LOCK.FORCERELEASE", "b").query(&mut c).unwrap();
    assert_eq!(f, 0);
    assert_eq!(info_field(&mut c, "forcereleased_total"), 1);
    assert_eq!(info_field(&mut c, "locks"), 0);

    // DEL frees the value.
    acquire(&mut c, "d", "o", 60_000);
    assert_eq!(info_field(&mut c, "locks"), 1);
    let _: i64 = cmd!("DEL", "d").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "locks"), 0);

    // Expired: a 50 ms lock, looked at after 100 ms.
    let e = acquire(&mut c, "e", "o", 50);
    assert_eq!(info_field(&mut c, "last_token"), e);
    wait_out_ttl(Duration::from_millis(100));
    let v: Value = cmd!("LOCK.INFO", "e").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    assert!(eventually(Duration::from_secs(2), || info_field(
        &mut c,
        "expired_total"
    ) == 1));
    assert_eq!(info_field(&mut c, "locks"), 0);

    // A WAIT that queues and times out: contended and timed out once each.
    acquire(&mut c, "w", "o", 60_000);
    let contended = info_field(&mut c, "contended_total");
    assert_eq!(
        int_or_nil(&mut c, cmd!("LOCK.WAIT", "w", "x", 1_000, 100)),
        None
    );
    assert_eq!(info_field(&mut c, "wait_timeouts_total"), 1);
    assert_eq!(info_field(&mut c, "contended_total"), contended + 1);
    assert_eq!(info_field(&mut c, "waiters"), 0);

    // Waiters and hand-off.
    let mut w = server.conn();
    let waiter =
        thread::spawn(move || int_or_nil(&mut w, cmd!("LOCK.WAIT", "w", "y", 60_000, 5_000)));
    assert!(eventually(Duration::from_secs(5), || info_field(
        &mut c, "waiters"
    ) == 1));
    assert_eq!(int_or_nil(&mut c, cmd!("LOCK.RELEASE", "w", "o")), Some(0));
    let g = waiter.join().unwrap().expect("granted");
    assert_eq!(info_field(&mut c, "granted_total"), 1);
    assert_eq!(info_field(&mut c, "waiters"), 0);
    assert_eq!(info_field(&mut c, "last_token"), g);
    assert_eq!(info_field(&mut c, "locks"), 1);
    assert_eq!(info_field(&mut c, "wait_timeouts_total"), 1);
}

/// ACL categories of a command, from `COMMAND INFO` (item 7).
fn acl_categories(c: &mut Connection, name: &str) -> Vec<String> {
    let v: Value = cmd!("COMMAND", "INFO", name).query(c).unwrap();
    let Value::Array(mut outer) = v else {
        panic!("COMMAND INFO {name}: {v:?}")
    };
    let Value::Array(entry) = outer.remove(0) else {
        panic!("COMMAND INFO {name}: no entry")
    };
    match entry.get(6) {
        Some(Value::Array(cats)) => cats.iter().map(text).collect(),
        other => panic!("COMMAND INFO {name} categories: {other:?}"),
    }
}

/// Servers with `RedisModule_SetCommandACLCategories` (Redis 7.2+, Valkey) put the commands in
/// categories, checked at run time; Redis 7.0 has no such API and shows none.
#[test]
fn acl_categories_where_the_server_has_them() {
    let server = Server::start();
    let mut c = server.conn();
    let version = server_version(&mut c);
    let expected: [(&str, &[&str], &[&str]); 21] = [
        ("lock.acquire", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.reenter", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.release", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.renew", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.wait", &["@write", "@blocking"], &["@admin", "@fast"]),
        ("lock.info", &["@read", "@fast"], &["@write", "@admin"]),
        ("lock.holders", &["@read"], &["@write", "@admin"]),
        (
            "lock.forcerelease",
            &["@write", "@admin", "@dangerous"],
            &["@read"],
        ),
        (
            "lock.apply",
            &["@write", "@admin", "@dangerous"],
            &["@read"],
        ),
        ("lock.drop", &["@write", "@admin", "@dangerous"], &["@read"]),
        (
            "lock.counter",
            &["@write", "@admin", "@dangerous"],
            &["@read"],
        ),
        ("lock.waiters", &["@read"], &["@write", "@admin"]),
        ("lock.history", &["@read"], &["@write", "@admin"]),
        (
            "lock.log",
            &["@admin", "@slow", "@dangerous"],
            &["@write", "@read", "@fast"],
        ),
        (
            "lock.stats",
            &["@admin", "@slow", "@dangerous"],
            &["@write", "@read", "@fast"],
        ),
        ("lock.downgrade", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.macquire", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.mrelease", &["@write", "@fast"], &["@admin", "@read"]),
        ("lock.mrenew", &["@write", "@fast"], &["@admin", "@read"]),
        (
            "lock.fenced",
            &["@write", "@slow"],
            &["@admin", "@read", "@fast"],
        ),
        (
            "lock.observe",
            &["@read", "@slow", "@blocking"],
            &["@write", "@admin", "@fast"],
        ),
    ];
    for (name, wanted, unwanted) in expected {
        let cats = acl_categories(&mut c, name);
        if version.as_str() >= "7.2" {
            for w in wanted {
                assert!(
                    cats.iter().any(|x| x == w),
                    "{name} on {version}: {w} missing from {cats:?}"
                );
            }
            for u in unwanted {
                assert!(
                    !cats.iter().any(|x| x == u),
                    "{name} on {version}: {u} in {cats:?}"
                );
            }
        } else {
            assert!(cats.is_empty(), "{name} on {version}: {cats:?}");
        }
    }
}
