//! How the module fits into the server: ACL key patterns and categories, command metadata,
//! keyspace events, and the `INFO relock` section.
#[macro_use]
mod common;

use std::thread;
use std::time::Duration;

use common::{acquire, eventually, info_field, int_or_nil, show, Server};
use redis::{Connection, Value};

fn error(c: &mut Connection, cmd: redis::Cmd) -> (String, String) {
    match cmd.query::<Value>(c) {
        Ok(v) => panic!("{} replied {v:?}, expected an error", show(&cmd)),
        Err(e) => (e.code().unwrap_or_default().to_string(), e.to_string()),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A connection authenticated as `user` (password `pw`).
fn conn_as(server: &Server, user: &str) -> Connection {
    let mut c = server.conn();
    let _: () = cmd!("AUTH", user, "pw").query(&mut c).expect("AUTH");
    c
}

/// Every LOCK.* command with `key` in its key position.
fn every_command(key: &str) -> Vec<(&'static str, redis::Cmd)> {
    vec![
        ("lock.acquire", cmd!("LOCK.ACQUIRE", key, "o", 100)),
        ("lock.reenter", cmd!("LOCK.REENTER", key, "o", 100)),
        ("lock.release", cmd!("LOCK.RELEASE", key, "o")),
        ("lock.renew", cmd!("LOCK.RENEW", key, "o", 100)),
        ("lock.wait", cmd!("LOCK.WAIT", key, "o", 100, 50)),
        ("lock.info", cmd!("LOCK.INFO", key)),
        ("lock.forcerelease", cmd!("LOCK.FORCERELEASE", key)),
    ]
}

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
        let (code, msg) = error(&mut c, cmd);
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
fn acl_read_only_key_pattern_allows_info_only() {
    // `%R~` grants read access only: the key specs must mark LOCK.INFO read and the rest write.
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
        if name == "lock.info" {
            continue;
        }
        let (code, msg) = error(&mut c, cmd);
        assert_eq!(code, "NOPERM", "{name} on a read-only key: {msg}");
    }
}

#[test]
fn forcerelease_is_refused_to_a_user_without_admin() {
    let server = Server::start();
    let mut admin = server.conn();
    // Redis 7.2+ lets the module put its commands in ACL categories, so `-@admin` covers
    // LOCK.FORCERELEASE there. Redis 7.0 has no such API and module commands belong to no
    // category: there the README tells operators to deny the command by name, which is what
    // this test checks on 7.0.
    let info: String = cmd!("INFO", "server").query(&mut admin).unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0.0.0")
        .trim()
        .to_string();
    let has_module_acl_categories = version.as_str() >= "7.2";
    let deny = if has_module_acl_categories {
        "-@admin"
    } else {
        "-lock.forcerelease"
    };
    let _: () = cmd!("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", deny)
        .query(&mut admin)
        .unwrap();
    acquire(&mut admin, "k", "o", 10_000);
    let mut c = conn_as(&server, "app");
    // Ordinary lock commands are allowed.
    assert!(int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "j", "o", 10_000)).is_some());
    let (code, msg) = error(&mut c, cmd!("LOCK.FORCERELEASE", "k"));
    assert_eq!(
        code, "NOPERM",
        "LOCK.FORCERELEASE by a {deny} user on Redis {version}: {msg}"
    );
    let v: Value = cmd!("LOCK.INFO", "k").query(&mut admin).unwrap();
    assert_ne!(v, Value::Nil, "the lock must still be held");
}

#[test]
fn command_getkeys_finds_the_key_of_every_command() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        cmd!("COMMAND", "GETKEYS", "LOCK.ACQUIRE", "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.REENTER", "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.RELEASE", "k", "o"),
        cmd!("COMMAND", "GETKEYS", "LOCK.RENEW", "k", "o", 100),
        cmd!("COMMAND", "GETKEYS", "LOCK.WAIT", "k", "o", 100, 0),
        cmd!("COMMAND", "GETKEYS", "LOCK.INFO", "k"),
        cmd!("COMMAND", "GETKEYS", "LOCK.FORCERELEASE", "k"),
        cmd!("COMMAND", "GETKEYS", "LOCK.APPLY", "k", "o", 1, 1),
    ];
    for (i, cmd) in cases.into_iter().enumerate() {
        let keys: Vec<String> = cmd
            .query(&mut c)
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(keys, vec!["k".to_string()], "case {i}");
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
    // LOCK.FORCERELEASE an optional owner (-2); LOCK.HOLDERS and LOCK.DROP are new.
    let expected: [(&str, i64, &[&str], &[&str]); 11] = [
        (
            "lock.acquire",
            -4,
            &["write", "denyoom", "fast"],
            &["readonly", "admin", "blocking"],
        ),
        (
            "lock.reenter",
            -4,
            &["write", "denyoom", "fast"],
            &["readonly", "admin", "blocking"],
        ),
        (
            "lock.release",
            3,
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
        if name == "lock.counter" {
            assert_eq!((first, last, step), (0, 0, 0), "{name} has no key");
            continue;
        }
        assert_eq!((first, last, step), (1, 1, 1), "{name} key positions");
    }
}

#[test]
fn command_docs_have_a_summary() {
    let server = Server::start();
    let mut c = server.conn();
    for name in [
        "LOCK.ACQUIRE",
        "LOCK.REENTER",
        "LOCK.RELEASE",
        "LOCK.RENEW",
        "LOCK.WAIT",
        "LOCK.INFO",
        "LOCK.FORCERELEASE",
    ] {
        let v: Value = cmd!("COMMAND", "DOCS", name).query(&mut c).unwrap();
        // RESP2: [name, [field, value, ...]]
        let Value::Array(items) = v else {
            panic!("COMMAND DOCS {name}: {v:?}")
        };
        assert_eq!(items.len(), 2, "COMMAND DOCS {name}: {items:?}");
        assert_eq!(text(&items[0]).to_uppercase(), name);
        let Value::Array(doc) = &items[1] else {
            panic!("COMMAND DOCS {name}: {:?}", items[1])
        };
        let summary = doc
            .chunks(2)
            .find(|pair| text(&pair[0]) == "summary")
            .map(|pair| text(&pair[1]))
            .unwrap_or_else(|| panic!("COMMAND DOCS {name} has no summary"));
        assert!(summary.len() > 10, "{name} summary: {summary:?}");
    }
}

/// A pattern subscription on its own connection; collects (channel, payload) pairs. It speaks
/// the protocol directly so that the subscription lives as long as the struct.
struct Events {
    conn: Connection,
}

impl Events {
    fn subscribe(server: &Server, pattern: &str) -> Events {
        let mut conn = server.conn();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.send_packed_command(&cmd!("PSUBSCRIBE", pattern).get_packed_command())
            .unwrap();
        let confirm = conn.recv_response().expect("PSUBSCRIBE confirmation");
        let Value::Array(items) = &confirm else {
            panic!("PSUBSCRIBE replied {confirm:?}")
        };
        assert_eq!(text(&items[0]), "psubscribe");
        Events { conn }
    }

    /// Messages until (and without) the first one about the key `sentinel`, which the caller
    /// triggers after the commands under test.
    fn until_sentinel(&mut self) -> Vec<(String, String)> {
        let mut got = Vec::new();
        loop {
            let msg = self
                .conn
                .recv_response()
                .expect("event before the read timeout");
            let Value::Array(items) = &msg else {
                panic!("pub/sub message {msg:?}")
            };
            assert_eq!(text(&items[0]), "pmessage", "{msg:?}");
            let channel = text(&items[2]);
            let payload = text(&items[3]);
            if payload == "sentinel" || channel.ends_with(":sentinel") {
                return got;
            }
            got.push((channel, payload));
        }
    }
}

fn keyevent(name: &str, key: &str) -> (String, String) {
    (format!("__keyevent@0__:{name}"), key.to_string())
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
    thread::sleep(Duration::from_millis(100));
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
    let info: String = cmd!("INFO", "server").query(&mut c).unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0.0.0")
        .trim()
        .to_string();
    let expected: [(&str, &[&str]); 5] = [
        ("lock.acquire", &["@write", "@fast"]),
        ("lock.wait", &["@write", "@blocking"]),
        ("lock.info", &["@read", "@fast"]),
        ("lock.forcerelease", &["@write", "@admin", "@dangerous"]),
        ("lock.apply", &["@write", "@admin", "@dangerous"]),
    ];
    for (name, wanted) in expected {
        let cats = acl_categories(&mut c, name);
        if version.as_str() >= "7.2" {
            for w in wanted {
                assert!(
                    cats.iter().any(|x| x == w),
                    "{name} on {version}: {w} missing from {cats:?}"
                );
            }
        } else {
            assert!(cats.is_empty(), "{name} on {version}: {cats:?}");
        }
    }
}
