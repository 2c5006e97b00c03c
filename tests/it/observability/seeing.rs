//! "Seeing what locks do" (spec): `LOCK.WAITERS`, the journal (`LOCK.LOG`, `LOCK.HISTORY`) with
//! every reason a hold ends other than by its owner, the contention statistics (`INFO relock`
//! distributions, `LOCK.STATS`) and the `relock.*` module configs. Runs on every server of the
//! matrix.
use relock_testkit as common;
use relock_testkit::cmd;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::ask::history;
use common::raw::{pipeline, Raw, Reply};
use common::reply::{config_set, entries, fields, int, log_reasons, text};
use common::{acquire, eventually, info_field, now_ms, Server};
use redis::{Connection, Value};
use relock_testkit::wait_out_ttl;

const LONG: i64 = 60_000;
const DUE: Duration = Duration::from_secs(10);

/// The names of an entry's fields, in order.
fn names(v: &Value) -> Vec<String> {
    match v {
        Value::Map(pairs) => pairs.iter().map(|(k, _)| text(k)).collect(),
        Value::Array(items) => items.iter().step_by(2).map(text).collect(),
        other => panic!("not an entry: {other:?}"),
    }
}

/// A raw connection queued in `LOCK.WAIT key owner ttl timeout words...`; returns it with its
/// client id once the key has `n` waiters.
fn queue_with_timeout(
    server: &Server,
    c: &mut Connection,
    key: &str,
    owner: &str,
    timeout: i64,
    words: &[&str],
    n: usize,
) -> (Raw, i64) {
    let mut r = Raw::connect(server);
    r.send(&[b"CLIENT", b"ID"]);
    let Reply::Int(id) = r.read(DUE) else {
        panic!("CLIENT ID")
    };
    let (ttl, timeout) = (LONG.to_string(), timeout.to_string());
    let mut args: Vec<&[u8]> = vec![
        b"LOCK.WAIT",
        key.as_bytes(),
        owner.as_bytes(),
        ttl.as_bytes(),
        timeout.as_bytes(),
    ];
    args.extend(words.iter().map(|w| w.as_bytes()));
    r.send(&args);
    let queued = eventually(DUE, || {
        entries(c, cmd!("LOCK.WAITERS", key, "COUNT", 0)).len() == n
    });
    assert!(queued, "{owner} not queued as waiter #{n} of {key}");
    (r, id)
}

fn config_get(c: &mut Connection, name: &str) -> String {
    let v: Vec<String> = cmd!("CONFIG", "GET", name).query(c).unwrap();
    assert_eq!(v.len(), 2, "CONFIG GET {name}: {v:?}");
    v[1].clone()
}

// --- LOCK.WAITERS --------------------------------------------------------------------------

#[test]
fn waiters_lists_the_queue_in_order_with_every_field() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "holder", LONG);
    let (_a, a_id) = queue_with_timeout(&server, &mut c, "k", "host-a/1/x", 0, &[], 1);
    let (_b, b_id) = queue_with_timeout(&server, &mut c, "k", "host-b/2/y", 30_000, &[], 2);
    // Both have waited at least this long: `waited` must show it.
    wait_out_ttl(Duration::from_millis(50));
    for resp3 in [false, true] {
        let mut c = if resp3 {
            server.conn_resp3()
        } else {
            server.conn()
        };
        let list: Value = cmd!("LOCK.WAITERS", "k").query(&mut c).unwrap();
        let Value::Array(items) = &list else {
            panic!("{list:?}")
        };
        assert_eq!(items.len(), 2);
        if resp3 {
            assert!(matches!(items[0], Value::Map(_)), "a map under RESP3");
        } else {
            assert!(
                matches!(&items[0], Value::Array(a) if a.len() == 16),
                "flat under RESP2"
            );
        }
        assert_eq!(
            names(&items[0]),
            ["owner", "mode", "limit", "permits", "client", "waited", "timeout", "ttl"]
        );
        let (a, b) = (fields(&items[0]), fields(&items[1]));
        assert_eq!(text(&a["owner"]), "host-a/1/x");
        assert_eq!(text(&b["owner"]), "host-b/2/y");
        assert_eq!(text(&a["mode"]), "exclusive");
        assert_eq!((int(&a["limit"]), int(&a["permits"])), (0, 1));
        assert_eq!((int(&a["client"]), int(&b["client"])), (a_id, b_id));
        assert!(int(&a["waited"]) >= int(&b["waited"]) && int(&b["waited"]) >= 40);
        assert!(int(&a["waited"]) < DUE.as_millis() as i64);
        assert_eq!(int(&a["timeout"]), -1, "no timeout");
        let left = int(&b["timeout"]);
        assert!((20_000..30_000).contains(&left), "timeout left: {left}");
        assert_eq!(int(&a["ttl"]), LONG);
    }
}

#[test]
fn waiters_shows_shared_requests_with_their_limit() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "writer", LONG);
    let _r = queue_with_timeout(
        &server,
        &mut c,
        "k",
        "reader",
        0,
        &["SHARED", "LIMIT", "3"],
        1,
    );
    let _s = queue_with_timeout(&server, &mut c, "k", "writer-2", 0, &[], 2);
    let list = entries(&mut c, cmd!("LOCK.WAITERS", "k"));
    assert_eq!(text(&list[0]["mode"]), "shared");
    assert_eq!((int(&list[0]["limit"]), int(&list[0]["permits"])), (3, 1));
    assert_eq!(text(&list[1]["mode"]), "exclusive");
    assert_eq!((int(&list[1]["limit"]), int(&list[1]["permits"])), (0, 1));
}

#[test]
fn waiters_count_default_zero_and_errors() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(entries(&mut c, cmd!("LOCK.WAITERS", "missing")).len(), 0);
    acquire(&mut c, "k", "holder", LONG);
    assert_eq!(
        entries(&mut c, cmd!("LOCK.WAITERS", "k")).len(),
        0,
        "held, nobody waits"
    );
    let mut held = Vec::new();
    for i in 0..103 {
        held.push(queue_with_timeout(
            &server,
            &mut c,
            "k",
            &format!("w{i}"),
            0,
            &[],
            i + 1,
        ));
    }
    let default = entries(&mut c, cmd!("LOCK.WAITERS", "k"));
    assert_eq!(default.len(), 100, "default COUNT 100");
    assert_eq!(text(&default[99]["owner"]), "w99", "in queue order");
    assert_eq!(
        entries(&mut c, cmd!("LOCK.WAITERS", "k", "COUNT", 0)).len(),
        103
    );
    assert_eq!(
        entries(&mut c, cmd!("LOCK.WAITERS", "k", "count", 2)).len(),
        2
    );
    for (args, error) in [
        (vec!["COUNT", "-1"], "invalid count"),
        (vec!["COUNT", "x"], "invalid count"),
        (vec!["COUNT"], "syntax error"),
        (vec!["LIMIT", "2"], "syntax error"),
    ] {
        let e = cmd!("LOCK.WAITERS", "k").arg(&args).query::<Value>(&mut c);
        let e = e.expect_err("an error").to_string();
        assert!(e.contains(error), "{args:?}: {e}");
    }
    let _: () = cmd!("SET", "str", "v").query(&mut c).unwrap();
    let e = cmd!("LOCK.WAITERS", "str")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    // A waiter that leaves is gone from the list.
    drop(held.remove(0));
    assert!(eventually(DUE, || {
        entries(&mut c, cmd!("LOCK.WAITERS", "k", "COUNT", 1))
            .first()
            .is_some_and(|e| text(&e["owner"]) == "w1")
    }));
}

#[test]
fn waiters_and_history_have_key_specs_for_acls_and_routing() {
    let server = Server::start();
    let mut c = server.conn();
    for command in ["LOCK.WAITERS", "LOCK.HISTORY"] {
        let keys: Vec<String> = cmd!("COMMAND", "GETKEYS", command, "some:key")
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, ["some:key"], "{command}");
    }
    let _: () = cmd!(
        "ACL",
        "SETUSER",
        "reader",
        "on",
        ">pw",
        "~app:*",
        "+lock.waiters",
        "+lock.history",
        "+lock.log"
    )
    .query(&mut c)
    .unwrap();
    let mut r = server.conn();
    let _: () = cmd!("AUTH", "reader", "pw").query(&mut r).unwrap();
    assert_eq!(entries(&mut r, cmd!("LOCK.WAITERS", "app:1")).len(), 0);
    assert_eq!(entries(&mut r, cmd!("LOCK.HISTORY", "app:1")).len(), 0);
    for command in ["LOCK.WAITERS", "LOCK.HISTORY"] {
        let e = cmd!(command, "other:1").query::<Value>(&mut r).unwrap_err();
        assert!(e.to_string().contains("NOPERM"), "{command}: {e}");
    }
}

#[test]
fn lock_log_and_stats_are_admin_commands() {
    let server = Server::start();
    let mut c = server.conn();
    let docs: Value = cmd!("COMMAND", "INFO", "LOCK.LOG", "LOCK.STATS", "LOCK.HISTORY")
        .query(&mut c)
        .unwrap();
    let Value::Array(infos) = docs else {
        panic!("{docs:?}")
    };
    for (info, admin) in infos.iter().zip([true, true, false]) {
        let Value::Array(info) = info else {
            panic!("{info:?}")
        };
        let flags: Vec<String> = match &info[2] {
            Value::Array(f) => f.iter().map(text).collect(),
            Value::Set(f) => f.iter().map(text).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(flags.contains(&"admin".to_string()), admin, "{info:?}");
    }
}

// --- The journal ---------------------------------------------------------------------------

#[test]
fn a_release_by_its_owner_is_not_logged() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "o", LONG);
    let _: i64 = cmd!("LOCK.RELEASE", "k", "o").query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "o", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "s", "o").query(&mut c).unwrap();
    assert!(log_reasons(&mut c, 10).is_empty());
    assert!(history(&mut c, "k").is_empty());
}

#[test]
fn mrelease_and_downgrade_are_not_logged() {
    let server = Server::start();
    let mut c = server.conn();
    // A group released by its owner, one key re-entered and one handed to a waiter.
    let _: Vec<i64> = cmd!("LOCK.MACQUIRE", 3, "a", "b", "c", "o", LONG)
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.REENTER", "a", "o", LONG).query(&mut c).unwrap();
    let (mut next, _) = queue_with_timeout(&server, &mut c, "b", "next", 0, &[], 1);
    let n: i64 = cmd!("LOCK.MRELEASE", 3, "a", "b", "c", "o")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    next.read(DUE).token();
    let n: i64 = cmd!("LOCK.MRELEASE", 1, "a", "o").query(&mut c).unwrap();
    assert_eq!(n, 1);
    // An exclusive hold made shared, readers let in with it; then released by each owner.
    acquire(&mut c, "rw", "writer", LONG);
    let (mut reader, _) = queue_with_timeout(&server, &mut c, "rw", "reader", 0, &["SHARED"], 1);
    let _: i64 = cmd!("LOCK.DOWNGRADE", "rw", "writer")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.DOWNGRADE", "rw", "writer")
        .query(&mut c)
        .unwrap();
    reader.read(DUE).token();
    let _: i64 = cmd!("LOCK.RELEASE", "rw", "writer").query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.RELEASE", "rw", "reader").query(&mut c).unwrap();
    let n: i64 = cmd!("LOCK.MRENEW", 1, "b", "next", LONG)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(
        log_reasons(&mut c, 100).is_empty(),
        "{:?}",
        log_reasons(&mut c, 100)
    );
    for key in ["a", "b", "c", "rw"] {
        assert!(history(&mut c, key).is_empty(), "{key}");
    }
    assert_eq!(info_field(&mut c, "log_len"), 0);
    // What ends a hold other than by its owner still is logged after them.
    let _: i64 = cmd!("LOCK.FORCERELEASE", "b").query(&mut c).unwrap();
    assert_eq!(
        history(&mut c, "b"),
        [("forcereleased".into(), "next".into())]
    );
}

#[test]
fn force_release_is_logged_with_who_did_it() {
    let server = Server::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "app/1/abc", LONG);
    let (_w, _) = queue_with_timeout(&server, &mut c, "k", "next", 0, &[], 1);
    let mut ops = server.conn();
    let _: () = cmd!("CLIENT", "SETNAME", "ops").query(&mut ops).unwrap();
    let ops_id: i64 = cmd!("CLIENT", "ID").query(&mut ops).unwrap();
    // The hold has lasted at least this long: `held` must show it.
    wait_out_ttl(Duration::from_millis(30));
    let before = now_ms();
    let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut ops).unwrap();
    let log = entries(&mut c, cmd!("LOCK.LOG"));
    assert_eq!(log.len(), 1);
    let e = &log[0];
    assert_eq!(
        names(
            &cmd!("LOCK.LOG")
                .query::<Value>(&mut c)
                .unwrap()
                .as_sequence()
                .unwrap()[0]
        ),
        [
            "id",
            "time",
            "db",
            "key",
            "owner",
            "token",
            "reason",
            "held",
            "client-info",
            "waiters"
        ]
    );
    assert_eq!(text(&e["reason"]), "forcereleased");
    assert_eq!(text(&e["key"]), "k");
    assert_eq!(text(&e["owner"]), "app/1/abc");
    assert_eq!(int(&e["token"]), token);
    assert_eq!(int(&e["waiters"]), 1, "the queue when it ended");
    assert!((before - 5..=now_ms() + 5).contains(&int(&e["time"])));
    assert!((30..DUE.as_millis() as i64).contains(&int(&e["held"])));
    let client = text(&e["client-info"]);
    for part in [
        format!("id={ops_id} "),
        " name=ops ".into(),
        " user=default".into(),
    ] {
        assert!(client.contains(&part), "{part:?} in {client}");
    }
    // The same in a transaction; from a script, the caller's user.
    acquire(&mut c, "t", "o", LONG);
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.FORCERELEASE")
        .arg("t")
        .query(&mut ops)
        .unwrap();
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "t"))[0];
    assert!(text(&e["client-info"]).contains(" name=ops "), "{e:?}");
    acquire(&mut c, "s", "o", LONG);
    let _: i64 = cmd!(
        "EVAL",
        "return redis.call('LOCK.FORCERELEASE', KEYS[1])",
        1,
        "s"
    )
    .query(&mut ops)
    .unwrap();
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "s"))[0];
    assert_eq!(text(&e["client-info"]), "user=default via=script");
}

/// Found: the caller's description for the journal is read with `CLIENT LIST ID <id>`, called
/// under the name `CLIENT`; with `rename-command del client` a force release ran `DEL LIST ID
/// <id>` (unreplicated) and deleted two of the user's keys. Must hold: nothing is called under
/// a name that is not the server's own command; the entry names the user only.
#[test]
fn a_force_release_with_client_renamed_calls_nothing_under_that_name() {
    let server = Server::with_args(&[
        "--rename-command",
        "client",
        "client_elsewhere",
        "--rename-command",
        "del",
        "client",
    ]);
    let mut c = server.conn();
    for key in ["LIST", "ID"] {
        let _: () = cmd!("SET", key, "1").query(&mut c).unwrap();
    }
    acquire(&mut c, "k", "o", LONG);
    let n: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let kept: i64 = cmd!("EXISTS", "LIST", "ID").query(&mut c).unwrap();
    assert_eq!(kept, 2, "a key went away");
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "k"))[0];
    assert_eq!(text(&e["client-info"]), "user=default");
}

#[test]
fn force_release_of_one_shared_holder_or_all() {
    let server = Server::start();
    let mut c = server.conn();
    for o in ["r1", "r2", "r3"] {
        let _: i64 = cmd!("LOCK.ACQUIRE", "s", o, LONG, "SHARED")
            .query(&mut c)
            .unwrap();
    }
    let _: i64 = cmd!("LOCK.FORCERELEASE", "s", "r2").query(&mut c).unwrap();
    assert_eq!(
        history(&mut c, "s"),
        [("forcereleased".into(), "r2".into())]
    );
    let _: i64 = cmd!("LOCK.FORCERELEASE", "s").query(&mut c).unwrap();
    let mut owners: Vec<String> = history(&mut c, "s").into_iter().map(|(_, o)| o).collect();
    owners.sort();
    assert_eq!(owners, ["r1", "r2", "r3"]);
}

#[test]
fn expiries_are_logged_for_exclusive_and_shared_holds() {
    let server = Server::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "x", "late", 100);
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "reader", 100, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "s", "keeper", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    assert!(
        eventually(DUE, || history(&mut c, "x").len() == 1),
        "x expired"
    );
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "x"))[0];
    assert_eq!(
        (text(&e["reason"]), int(&e["token"])),
        ("expired".into(), token)
    );
    assert!(int(&e["held"]) >= 100, "held {:?}", e["held"]);
    // A shared lease that lapsed is logged when the module removes it: at the latest when its
    // holder learns it is gone.
    wait_out_ttl(Duration::from_millis(150));
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.RENEW", "s", "reader", LONG)),
        None
    );
    assert_eq!(
        history(&mut c, "s"),
        [("expired".to_string(), "reader".to_string())]
    );
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "s"))[0];
    assert!(
        (100..1000).contains(&int(&e["held"])),
        "held {:?}",
        e["held"]
    );
    // A whole shared key whose TTL runs out.
    let _: i64 = cmd!("LOCK.ACQUIRE", "s2", "a", 150, "SHARED")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "s2", "b", 150, "SHARED")
        .query(&mut c)
        .unwrap();
    assert!(
        eventually(DUE, || history(&mut c, "s2").len() == 2),
        "s2 expired"
    );
}

#[test]
fn deletes_overwrites_moves_and_restores_say_so() {
    let server = Server::start();
    let mut c = server.conn();
    let steps: &[(&str, &[&[&str]], &str)] = &[
        ("del", &[&["DEL", "k"]], "deleted"),
        ("unlink", &[&["UNLINK", "k"]], "deleted"),
        ("set", &[&["SET", "k", "v"]], "deleted"),
        ("rename", &[&["RENAME", "k", "k2"]], "moved"),
    ];
    for (name, commands, reason) in steps {
        let _: () = cmd!("DEL", "k", "k2", "l").query(&mut c).unwrap();
        let _: () = cmd!("LOCK.LOG", "RESET").query(&mut c).unwrap();
        acquire(&mut c, "k", *name, LONG);
        for command in *commands {
            let _: Value = redis::cmd(command[0])
                .arg(&command[1..])
                .query(&mut c)
                .unwrap();
        }
        assert_eq!(
            history(&mut c, "k"),
            [(reason.to_string(), name.to_string())],
            "after {commands:?}"
        );
    }
    // EXPIRE in the past deletes the key: Redis says `del`, Valkey 8+ `expired`.
    acquire(&mut c, "p", "pexpire", LONG);
    let _: i64 = cmd!("PEXPIRE", "p", -1).query(&mut c).unwrap();
    let said = history(&mut c, "p");
    assert!(
        said == [("deleted".into(), "pexpire".into())]
            || said == [("expired".into(), "pexpire".into())],
        "{said:?}"
    );
    // GETDEL (Redis 6.2+) on a lock is WRONGTYPE; a lock overwritten by RENAME is deleted.
    let _: () = cmd!("DEL", "a", "b").query(&mut c).unwrap();
    acquire(&mut c, "a", "from", LONG);
    acquire(&mut c, "b", "overwritten", LONG);
    let _: () = cmd!("RENAME", "a", "b").query(&mut c).unwrap();
    assert_eq!(history(&mut c, "a"), [("moved".into(), "from".into())]);
    assert_eq!(
        history(&mut c, "b"),
        [("deleted".into(), "overwritten".into())]
    );
    // MOVE to another db: moved; the hold lives on there.
    acquire(&mut c, "m", "mover", LONG);
    let _: i64 = cmd!("MOVE", "m", 1).query(&mut c).unwrap();
    assert_eq!(history(&mut c, "m"), [("moved".into(), "mover".into())]);
    // RESTORE ... REPLACE and COPY ... REPLACE onto a lock: restored.
    acquire(&mut c, "r", "old", LONG);
    acquire(&mut c, "src", "new", LONG);
    let dump: Vec<u8> = cmd!("DUMP", "src").query(&mut c).unwrap();
    let _: () = cmd!("RESTORE", "r", 0, dump, "REPLACE")
        .query(&mut c)
        .unwrap();
    assert_eq!(history(&mut c, "r"), [("restored".into(), "old".into())]);
    acquire(&mut c, "cp", "copied-over", LONG);
    let _: i64 = cmd!("COPY", "src", "cp", "REPLACE").query(&mut c).unwrap();
    assert_eq!(
        history(&mut c, "cp"),
        [("restored".into(), "copied-over".into())]
    );
    // Non-lock keys are never logged.
    let _: () = cmd!("SET", "plain", "v").query(&mut c).unwrap();
    let _: () = cmd!("DEL", "plain").query(&mut c).unwrap();
    assert!(history(&mut c, "plain").is_empty());
}

#[test]
fn migrate_away_is_a_move_where_the_server_lets_the_module_tell() {
    let source = Server::start();
    let target = Server::start();
    let mut c = source.conn();
    // Redis 7.0: MIGRATE's deletion looks like DEL's, `deleted` (docs/commands.md).
    let moved = common::migrate_reason(&mut c);
    let a = acquire(&mut c, "a", "mover-a", LONG);
    acquire(&mut c, "b", "mover-b", LONG);
    for r in ["r1", "r2"] {
        let _: i64 = cmd!("LOCK.ACQUIRE", "s", r, LONG, "SHARED")
            .query(&mut c)
            .unwrap();
    }
    let ok: String = cmd!("MIGRATE", "127.0.0.1", target.port, "a", 0, 5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        history(&mut c, "a"),
        [(moved.to_string(), "mover-a".into())]
    );
    let mut t = target.conn();
    let there = common::lock_info(&mut t, "a").expect("the hold lives on at the target");
    assert_eq!((there.owner.as_slice(), there.token), (&b"mover-a"[..], a));
    assert!(history(&mut t, "a").is_empty(), "nothing ended there");
    // Several keys at once, a shared one among them: each hold says so.
    let ok: String = cmd!(
        "MIGRATE",
        "127.0.0.1",
        target.port,
        "",
        0,
        5000,
        "KEYS",
        "b",
        "s"
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        history(&mut c, "b"),
        [(moved.to_string(), "mover-b".into())]
    );
    let mut s = history(&mut c, "s");
    s.sort();
    assert_eq!(
        s,
        [
            (moved.to_string(), "r1".to_string()),
            (moved.to_string(), "r2".to_string())
        ]
    );
    // COPY ends nothing here; REPLACE onto a lock there restores over it.
    acquire(&mut c, "a", "second", LONG);
    let ok: String = cmd!(
        "MIGRATE",
        "127.0.0.1",
        target.port,
        "a",
        0,
        5000,
        "COPY",
        "REPLACE"
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        history(&mut c, "a").len(),
        1,
        "COPY logs nothing at the source"
    );
    assert_eq!(
        history(&mut t, "a"),
        [("restored".into(), "mover-a".into())]
    );
    // A DUMP and a DEL are not a MIGRATE: apart, pipelined (two commands may start in the same
    // microsecond), or in one transaction.
    let _: () = cmd!("LOCK.LOG", "RESET").query(&mut c).unwrap();
    acquire(&mut c, "d1", "o", LONG);
    let _: Vec<u8> = cmd!("DUMP", "d1").query(&mut c).unwrap();
    let _: i64 = cmd!("DEL", "d1").query(&mut c).unwrap();
    for i in 0..20 {
        let key = format!("p{i}");
        acquire(&mut c, &key, "o", LONG);
        let _: (Vec<u8>, i64) = redis::pipe()
            .cmd("DUMP")
            .arg(&key)
            .cmd("DEL")
            .arg(&key)
            .query(&mut c)
            .unwrap();
    }
    acquire(&mut c, "t1", "o", LONG);
    let _: (Vec<u8>, i64) = redis::pipe()
        .atomic()
        .cmd("DUMP")
        .arg("t1")
        .cmd("DEL")
        .arg("t1")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "l1", "o", LONG);
    let _: i64 = cmd!(
        "EVAL",
        "redis.call('DUMP', KEYS[1]); return redis.call('DEL', KEYS[1])",
        1,
        "l1"
    )
    .query(&mut c)
    .unwrap();
    let reasons = log_reasons(&mut c, 100);
    assert_eq!(reasons.len(), 23);
    assert!(reasons.iter().all(|r| r == "deleted"), "{reasons:?}");
}

#[test]
fn evictions_are_logged() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "victim", "evicted-owner", LONG);
    let used = {
        let info: String = cmd!("INFO", "memory").query(&mut c).unwrap();
        let line = info
            .lines()
            .find(|l| l.starts_with("used_memory:"))
            .unwrap();
        line["used_memory:".len()..].trim().parse::<i64>().unwrap()
    };
    let _: () = cmd!("CONFIG", "SET", "maxmemory", used + 2_000_000)
        .query(&mut c)
        .unwrap();
    let big = vec![b'x'; 100_000];
    // Strings without a TTL cannot be evicted under volatile-lru: only the lock can.
    for i in 0..200 {
        if cmd!("SET", format!("big:{i}"), &big)
            .query::<()>(&mut c)
            .is_err()
        {
            break;
        }
        if common::lock_info(&mut c, "victim").is_none() {
            break;
        }
    }
    let _: () = cmd!("CONFIG", "SET", "maxmemory", 0).query(&mut c).unwrap();
    assert_eq!(
        history(&mut c, "victim"),
        [("evicted".into(), "evicted-owner".into())]
    );
}

#[test]
fn a_grant_whose_waiter_hung_up_is_revoked_and_logged() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "w", LONG);
    let (_gone, gone_id) = queue_with_timeout(&server, &mut c, "k", "hung-up", 0, &[], 1);
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("w")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(gone_id)
        .query(&mut c)
        .unwrap();
    assert!(
        eventually(DUE, || history(&mut c, "k")
            == [("revoked".into(), "hung-up".into())]),
        "{:?}",
        history(&mut c, "k")
    );
}

#[test]
fn a_flush_or_a_swap_is_one_entry_and_a_reload_none() {
    let server = Server::start();
    let mut c = server.conn();
    for i in 0..50 {
        acquire(&mut c, format!("k{i}"), "o", LONG);
    }
    let _: () = cmd!("FLUSHDB").query(&mut c).unwrap();
    let log = entries(&mut c, cmd!("LOCK.LOG", 100));
    assert_eq!(log.len(), 1, "one entry per flush, never one per hold");
    assert_eq!(
        (text(&log[0]["reason"]), text(&log[0]["key"])),
        ("flushed".into(), "".into())
    );
    assert_eq!(int(&log[0]["db"]), 0);
    // The history of any key of that db shows it (what a client asks to explain a loss).
    assert_eq!(history(&mut c, "k7"), [("flushed".into(), "".into())]);
    acquire(&mut c, "a", "o", LONG);
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(
        int(&entries(&mut c, cmd!("LOCK.LOG", 1))[0]["db"]),
        -1,
        "every db"
    );
    acquire(&mut c, "a", "o", LONG);
    let _: () = cmd!("SWAPDB", 0, 3).query(&mut c).unwrap();
    assert_eq!(log_reasons(&mut c, 10), ["swapped", "flushed", "flushed"]);
    let mut in3 = server.conn();
    let _: () = cmd!("SELECT", 3).query(&mut in3).unwrap();
    assert_eq!(
        history(&mut in3, "a")[0].0,
        "swapped",
        "the other db's keys see it too"
    );
    // DEBUG RELOAD flushes and loads again: no lock is lost, nothing is logged, and the journal
    // (in memory, not in the RDB) is still there.
    let _: () = cmd!("SWAPDB", 0, 3).query(&mut c).unwrap();
    assert_eq!(log_reasons(&mut c, 10).len(), 4);
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    // Two cron ticks, each of which would write a pending flush, and none may: the reload's
    // flush was cancelled by its load.
    wait_out_ttl(Duration::from_millis(250));
    assert_eq!(
        log_reasons(&mut c, 10).len(),
        4,
        "{:?}",
        log_reasons(&mut c, 10)
    );
    assert!(
        common::lock_info(&mut c, "a").is_some(),
        "the lock survived the reload"
    );
    // Without any lock, a flush ends no hold: nothing to log.
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(log_reasons(&mut c, 10).len(), 5);
    // Also right after an asynchronous flush (Valkey's default for FLUSHALL), whose locks a
    // background thread is still freeing: they are no longer in any db.
    // Pipelined: a new hold past a millisecond's 1000th is sent again (`pipeline`).
    for db in [0, 5] {
        let mut raw = Raw::connect(&server);
        let select = std::iter::once(vec![b"SELECT".to_vec(), db.to_string().into_bytes()]);
        let acquires = (0..20_000).map(|i| {
            vec![
                b"LOCK.ACQUIRE".to_vec(),
                format!("many{i}").into_bytes(),
                b"o".to_vec(),
                LONG.to_string().into_bytes(),
            ]
        });
        pipeline(&mut raw, select.chain(acquires), |r| {
            !matches!(r, Reply::Error(_) | Reply::Nil)
        });
    }
    let _: () = cmd!("SELECT", 0).query(&mut c).unwrap();
    let _: ((), (), (), ()) = redis::pipe()
        .cmd("FLUSHDB")
        .arg("ASYNC")
        .cmd("FLUSHDB")
        .cmd("FLUSHALL")
        .arg("ASYNC")
        .cmd("FLUSHALL")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        log_reasons(&mut c, 10),
        [
            "flushed", "flushed", // FLUSHALL ASYNC, FLUSHDB ASYNC; not the flushes of nothing
            "flushed", "swapped", "swapped", "flushed", "flushed"
        ],
        "one entry per flush that ended holds"
    );
}

/// `held` of the newest journal entry of `key` (`None`: nil, the grant time is unknown).
fn held_of(c: &mut Connection, key: &str) -> Option<i64> {
    let e = entries(c, cmd!("LOCK.HISTORY", key, 1));
    let e = e.first().unwrap_or_else(|| panic!("no entry for {key}"));
    match &e["held"] {
        Value::Nil => None,
        Value::Int(ms) => Some(*ms),
        other => panic!("held of {key}: {other:?}"),
    }
}

/// Force-releases `key` and checks that the journal counts its hold from `granted_ms` (Unix
/// ms, just before the grant), at least `at_least` ms.
fn assert_held_since(c: &mut Connection, key: &str, granted_ms: i64, at_least: i64) {
    let _: i64 = cmd!("LOCK.FORCERELEASE", key).query(c).unwrap();
    let held = held_of(c, key).unwrap_or_else(|| panic!("{key}: held unknown"));
    let most = now_ms() - granted_ms + 5;
    assert!(
        (at_least..=most).contains(&held),
        "{key} held {held} ms, expected {at_least}..={most}"
    );
}

#[test]
fn held_counts_from_the_grant_across_reloads_and_restarts() {
    // The grant time is kept in the value: in the RDB, the AOF (as LOCK.APPLY ... GRANTED) and
    // what replicas receive, so a hold granted before this server started has a known `held`.
    let mut server = Server::with_args(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut c = server.conn();
    let since = now_ms();
    acquire(&mut c, "reloaded", "o", LONG);
    acquire(&mut c, "rewritten", "o", LONG);
    let _: () = cmd!("BGREWRITEAOF").query(&mut c).unwrap();
    assert!(eventually(DUE, || {
        let info: String = cmd!("INFO", "persistence").query(&mut c).unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    }));
    acquire(&mut c, "appended", "o", LONG);
    let _: i64 = cmd!("LOCK.ACQUIRE", "shared", "r", LONG, "SHARED")
        .query(&mut c)
        .unwrap();
    // The holds last at least this long: `held` must count it across the reload and restarts.
    wait_out_ttl(Duration::from_millis(200));
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    assert_held_since(&mut c, "reloaded", since, 200);
    // Restarted from its AOF: the rewritten base and the commands appended after it.
    drop(c);
    server.restart();
    let mut c = server.conn();
    for key in ["rewritten", "appended", "shared"] {
        assert_held_since(&mut c, key, since, 200);
    }
    // Restarted from an RDB.
    let since = now_ms();
    acquire(&mut c, "saved", "o", LONG);
    wait_out_ttl(Duration::from_millis(100));
    let _: () = cmd!("SAVE").query(&mut c).unwrap();
    drop(c);
    server.restart_with(&["--appendonly", "no"]);
    let mut c = server.conn();
    assert_held_since(&mut c, "saved", since, 100);
}

#[test]
fn held_is_empty_only_for_a_hold_whose_grant_time_was_never_recorded() {
    // An RDB of encoding version 2 (before grant times) has none: its holds say nil.
    let server = Server::start();
    let mut c = server.conn();
    let (format, _) = common::payload::Format::of(&mut c);
    use common::payload::Field;
    let v2 = format.payload(
        2,
        &[
            Field::Uint(0),
            Field::Str(b"old-owner".to_vec()),
            Field::Uint(1 << 50),
            Field::Uint(1),
        ],
    );
    let _: () = cmd!("RESTORE", "old", 60_000, v2).query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.FORCERELEASE", "old").query(&mut c).unwrap();
    let e = &entries(&mut c, cmd!("LOCK.HISTORY", "old"))[0];
    assert_eq!(text(&e["owner"]), "old-owner");
    assert_eq!(e["held"], Value::Nil, "{e:?}");
    // A replica promoted after it replicated a grant knows when it was granted.
    let master = Server::start();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    let since = now_ms();
    acquire(&mut m, "k", "o", LONG);
    // The hold lasts at least this long: the promoted replica's `held` must count it.
    wait_out_ttl(Duration::from_millis(100));
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    assert_held_since(&mut r, "k", since, 100);
}

#[test]
fn log_is_newest_first_counts_resets_and_ids_keep_growing() {
    let server = Server::start();
    let mut c = server.conn();
    for i in 0..15 {
        acquire(&mut c, format!("k{i}"), format!("o{i}"), LONG);
        let _: i64 = cmd!("LOCK.FORCERELEASE", format!("k{i}"))
            .query(&mut c)
            .unwrap();
    }
    let log = entries(&mut c, cmd!("LOCK.LOG"));
    assert_eq!(log.len(), 10, "default count 10");
    let ids: Vec<i64> = log.iter().map(|e| int(&e["id"])).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    assert_eq!(text(&log[0]["key"]), "k14");
    assert_eq!(entries(&mut c, cmd!("LOCK.LOG", 3)).len(), 3);
    assert_eq!(entries(&mut c, cmd!("LOCK.LOG", 0)).len(), 0);
    assert_eq!(entries(&mut c, cmd!("LOCK.LOG", 1000)).len(), 15);
    for bad in [&["-1"][..], &["x"], &["1", "2"]] {
        assert!(
            cmd!("LOCK.LOG").arg(bad).query::<Value>(&mut c).is_err(),
            "{bad:?}"
        );
    }
    let ok: String = cmd!("LOCK.LOG", "reset").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    assert!(log_reasons(&mut c, 10).is_empty());
    acquire(&mut c, "again", "o", LONG);
    let _: i64 = cmd!("LOCK.FORCERELEASE", "again").query(&mut c).unwrap();
    assert!(int(&entries(&mut c, cmd!("LOCK.LOG"))[0]["id"]) > ids[0]);
    // Only that key's entries, at most count.
    assert_eq!(history(&mut c, "k3"), []);
    let _: () = cmd!("LOCK.LOG", "RESET").query(&mut c).unwrap();
    for _ in 0..3 {
        acquire(&mut c, "h", "o", LONG);
        let _: i64 = cmd!("LOCK.FORCERELEASE", "h").query(&mut c).unwrap();
    }
    acquire(&mut c, "other", "o", LONG);
    let _: i64 = cmd!("LOCK.FORCERELEASE", "other").query(&mut c).unwrap();
    assert_eq!(entries(&mut c, cmd!("LOCK.HISTORY", "h")).len(), 3);
    assert_eq!(entries(&mut c, cmd!("LOCK.HISTORY", "h", 2)).len(), 2);
    let mut db1 = server.conn();
    let _: () = cmd!("SELECT", 1).query(&mut db1).unwrap();
    assert!(history(&mut db1, "h").is_empty(), "another db's key");
}

#[test]
fn log_configs_bound_and_filter_the_journal() {
    let server = Server::with_args(&["--relock.log-max-len", "3"]);
    let mut c = server.conn();
    assert_eq!(config_get(&mut c, "relock.log-max-len"), "3", "set at load");
    assert_eq!(config_get(&mut c, "relock.log-reasons"), "all");
    let end = |c: &mut Connection, key: &str| {
        acquire(c, key, "o", LONG);
        let _: i64 = cmd!("LOCK.FORCERELEASE", key).query(c).unwrap();
    };
    for i in 0..5 {
        end(&mut c, &format!("k{i}"));
    }
    let keys: Vec<String> = entries(&mut c, cmd!("LOCK.LOG", 10))
        .iter()
        .map(|e| text(&e["key"]))
        .collect();
    assert_eq!(keys, ["k4", "k3", "k2"], "the newest 3");
    assert_eq!(info_field(&mut c, "log_len"), 3);
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 1)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        log_reasons(&mut c, 10).len(),
        1,
        "shrinking drops the oldest"
    );
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 0)
        .query(&mut c)
        .unwrap();
    end(&mut c, "off");
    assert!(log_reasons(&mut c, 10).is_empty(), "0 turns it off");
    for bad in ["-1", "100001", "x"] {
        let e = cmd!("CONFIG", "SET", "relock.log-max-len", bad).query::<()>(&mut c);
        assert!(e.is_err(), "{bad}");
    }
    assert_eq!(config_get(&mut c, "relock.log-max-len"), "0");
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 100)
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("CONFIG", "SET", "relock.log-reasons", "expired deleted")
        .query(&mut c)
        .unwrap();
    let got = config_get(&mut c, "relock.log-reasons");
    assert!(
        got == "expired deleted" || got == "deleted expired",
        "{got}"
    );
    end(&mut c, "not-recorded");
    acquire(&mut c, "d", "o", LONG);
    let _: () = cmd!("DEL", "d").query(&mut c).unwrap();
    assert_eq!(log_reasons(&mut c, 10), ["deleted"]);
    let _: () = cmd!("CONFIG", "SET", "relock.log-reasons", "none")
        .query(&mut c)
        .unwrap();
    assert_eq!(config_get(&mut c, "relock.log-reasons"), "none");
    let e = cmd!("CONFIG", "SET", "relock.log-reasons", "expired bogus").query::<()>(&mut c);
    assert!(e.is_err());
    assert_eq!(
        config_get(&mut c, "relock.log-reasons"),
        "none",
        "unchanged by a bad set"
    );
    let _: () = cmd!("CONFIG", "SET", "relock.log-reasons", "all")
        .query(&mut c)
        .unwrap();
    assert_eq!(config_get(&mut c, "relock.log-reasons"), "all");
}

/// Ends a hold of `key` by `LOCK.FORCERELEASE` and one of `key:del` by `DEL`.
fn force_release_and_delete(c: &mut Connection, key: &str) {
    acquire(c, key, "o", LONG);
    let _: i64 = cmd!("LOCK.FORCERELEASE", key).query(c).unwrap();
    let deleted = format!("{key}:del");
    acquire(c, &deleted, "o", LONG);
    let _: i64 = cmd!("DEL", &deleted).query(c).unwrap();
}

#[test]
fn log_reasons_and_length_are_taken_at_load_from_every_source() {
    // On the command line.
    let server = Server::with_args(&["--relock.log-reasons", "deleted expired"]);
    let mut c = server.conn();
    let got = config_get(&mut c, "relock.log-reasons");
    assert!(
        got == "expired deleted" || got == "deleted expired",
        "{got}"
    );
    force_release_and_delete(&mut c, "k");
    assert_eq!(log_reasons(&mut c, 10), ["deleted"], "only what was asked");
    drop(c);
    drop(server);
    // In a config file (here one included from the command line).
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("relock.conf");
    std::fs::write(
        &conf,
        "relock.log-reasons forcereleased\nrelock.log-max-len 2\n",
    )
    .unwrap();
    let server = Server::with_args(&["--include", conf.to_str().unwrap()]);
    let mut c = server.conn();
    assert_eq!(config_get(&mut c, "relock.log-reasons"), "forcereleased");
    assert_eq!(config_get(&mut c, "relock.log-max-len"), "2");
    for key in ["a", "b", "c"] {
        force_release_and_delete(&mut c, key);
    }
    let keys: Vec<String> = entries(&mut c, cmd!("LOCK.LOG", 10))
        .iter()
        .map(|e| text(&e["key"]))
        .collect();
    assert_eq!(keys, ["c", "b"], "forced releases only, the newest 2");
    drop(c);
    drop(server);
    // With MODULE LOADEX ... CONFIG; a bad value refuses the load.
    let server = Server::without_module(&["--enable-module-command", "yes"]);
    let mut c = server.conn();
    let module = common::module_path().to_string_lossy().into_owned();
    let e = cmd!(
        "MODULE",
        "LOADEX",
        &module,
        "CONFIG",
        "relock.log-reasons",
        "bogus"
    )
    .query::<()>(&mut c)
    .expect_err("a bad reason at load");
    assert!(e.to_string().contains("Error loading the extension"), "{e}");
    let modules: Value = cmd!("MODULE", "LIST").query(&mut c).unwrap();
    assert!(
        !format!("{modules:?}").contains("relock"),
        "not loaded: {modules:?}"
    );
    let _: () = cmd!(
        "MODULE",
        "LOADEX",
        &module,
        "CONFIG",
        "relock.log-reasons",
        "none",
        "CONFIG",
        "relock.log-max-len",
        "5"
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(config_get(&mut c, "relock.log-reasons"), "none");
    assert_eq!(config_get(&mut c, "relock.log-max-len"), "5");
    force_release_and_delete(&mut c, "k");
    assert!(log_reasons(&mut c, 10).is_empty());
}

/// A `MODULE LOADEX` refused for a bad config value leaves nothing of relock behind: Redis
/// 7.0 drops a failed module's commands and configs, not its keyspace and server event
/// subscriptions, and unmaps its code. relock subscribed before it read its configs, so the
/// next write or flush called into a module that was gone (Redis crashed on SIGSEGV within
/// 2 ms). The configs are now read before anything else is registered.
#[test]
fn a_module_load_refused_for_its_config_leaves_the_server_running() {
    let server = Server::without_module(&["--enable-module-command", "yes"]);
    let mut c = server.conn();
    let module = common::module_path().to_string_lossy().into_owned();
    for (name, bad) in [
        ("relock.log-max-len", "100001"),
        ("relock.log-reasons", "all none"),
        ("relock.restart-grace-ms", "-1"),
        ("relock.stats", "maybe"),
        ("relock.stats-keys", "x"),
    ] {
        let e = cmd!("MODULE", "LOADEX", &module, "CONFIG", name, bad)
            .query::<()>(&mut c)
            .expect_err(name);
        assert!(e.to_string().contains("Error loading the extension"), "{e}");
        // A keyspace event, a flush and a swap: each fires what a module subscribed to.
        let _: () = cmd!("SET", "x", "1").query(&mut c).unwrap();
        let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
        let _: () = cmd!("SWAPDB", 0, 1).query(&mut c).unwrap();
        let pong: String = cmd!("PING").query(&mut c).expect(name);
        assert_eq!(pong, "PONG", "{name} {bad}");
    }
    let _: () = cmd!(
        "MODULE",
        "LOADEX",
        &module,
        "CONFIG",
        "relock.log-max-len",
        "5"
    )
    .query(&mut c)
    .unwrap();
    assert_eq!(config_get(&mut c, "relock.log-max-len"), "5");
    acquire(&mut c, "k", "o", LONG);
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(log_reasons(&mut c, 10), ["flushed"]);
}

#[test]
fn config_set_while_holds_end_keeps_the_journal_bounded_and_consistent() {
    // Other connections end holds (expiry, force-release, DEL) while one changes the journal's
    // length and reasons, in every direction, 0 included; a snapshot in one transaction always
    // sees a journal within its length, newest first, counted by INFO.
    let server = Server::start();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..3 {
        let stop = stop.clone();
        let mut c = server.conn();
        workers.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("w{w}:{}", i % 50);
                i += 1;
                let _: Option<i64> = cmd!("LOCK.ACQUIRE", &key, "o", 1 + i % 20)
                    .query(&mut c)
                    .unwrap();
                match i % 4 {
                    0 => {
                        let _: i64 = cmd!("LOCK.FORCERELEASE", &key).query(&mut c).unwrap();
                    }
                    1 => {
                        let _: i64 = cmd!("DEL", &key).query(&mut c).unwrap();
                    }
                    2 => {
                        let _: Option<i64> = cmd!("LOCK.ACQUIRE", &key, "r", 5, "SHARED")
                            .query(&mut c)
                            .unwrap();
                    }
                    _ => {} // left to expire
                }
            }
        }));
    }
    let configs = {
        let stop = stop.clone();
        let mut c = server.conn();
        std::thread::spawn(move || {
            let lens = ["1000", "3", "0", "50", "1", "100000", "0", "7"];
            let reasons = ["all", "expired", "none", "forcereleased deleted", "all"];
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", lens[i % lens.len()])
                    .query(&mut c)
                    .unwrap();
                if i % 3 == 0 {
                    let r = reasons[(i / 3) % reasons.len()];
                    let _: () = cmd!("CONFIG", "SET", "relock.log-reasons", r)
                        .query(&mut c)
                        .unwrap();
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(2)); // the pace of the config changes (not a wait)
            }
            i
        })
    };
    let mut c = server.conn();
    let known = [
        "expired",
        "forcereleased",
        "deleted",
        "moved",
        "restored",
        "revoked",
    ];
    let started = Instant::now();
    let mut snapshots = 0;
    let mut seen_entries = 0;
    while started.elapsed() < Duration::from_secs(2) || snapshots < 50 {
        let (max, log, info): (Vec<String>, Value, String) = redis::pipe()
            .atomic()
            .cmd("CONFIG")
            .arg("GET")
            .arg("relock.log-max-len")
            .cmd("LOCK.LOG")
            .arg(100_000)
            .cmd("INFO")
            .arg("relock")
            .query(&mut c)
            .unwrap();
        let max: usize = max[1].parse().unwrap();
        let Value::Array(log) = log else {
            panic!("{log:?}")
        };
        let log: Vec<HashMap<String, Value>> = log.iter().map(fields).collect();
        assert!(log.len() <= max, "{} entries, max {max}", log.len());
        let len = info
            .lines()
            .find_map(|l| l.strip_prefix("relock_log_len:"))
            .unwrap()
            .trim()
            .parse::<usize>()
            .unwrap();
        assert_eq!(len, log.len(), "INFO log_len counts the journal");
        let ids: Vec<i64> = log.iter().map(|e| int(&e["id"])).collect();
        assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
        for e in &log {
            let reason = text(&e["reason"]);
            assert!(known.contains(&reason.as_str()), "{reason}");
        }
        seen_entries += log.len();
        snapshots += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker failed");
    }
    let sets = configs.join().expect("CONFIG SET failed");
    assert!(sets > 10, "the configs changed {sets} times");
    assert!(seen_entries > 0, "the journal recorded something meanwhile");
    let pong: String = cmd!("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    // Settled: the last setting holds.
    let _: () = cmd!("CONFIG", "SET", "relock.log-max-len", 4)
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("CONFIG", "SET", "relock.log-reasons", "all")
        .query(&mut c)
        .unwrap();
    for i in 0..6 {
        force_release_and_delete(&mut c, &format!("settled{i}"));
    }
    assert_eq!(entries(&mut c, cmd!("LOCK.LOG", 100)).len(), 4);
    assert_eq!(info_field(&mut c, "log_len"), 4);
}

#[test]
fn huge_keys_owners_and_client_names_are_cut_in_the_journal() {
    let server = Server::start();
    let mut c = server.conn();
    let key = vec![b'k'; 1 << 20];
    let mut other = key.clone();
    other[(1 << 20) - 1] = b'z';
    let owner = vec![b'o'; 256];
    for k in [&key, &other] {
        acquire(&mut c, k.as_slice(), owner.as_slice(), LONG);
        let _: () = cmd!("DEL", k.as_slice()).query(&mut c).unwrap();
    }
    let mine = entries(&mut c, cmd!("LOCK.HISTORY", key.as_slice()));
    assert_eq!(
        mine.len(),
        1,
        "told from a key with the same first MB less one byte"
    );
    let Value::BulkString(kept) = &mine[0]["key"] else {
        panic!()
    };
    assert_eq!(kept.len(), 1024, "keys are kept by their first 1024 bytes");
    assert_eq!(text(&mine[0]["owner"]).len(), 256);
    let name = "n".repeat(10_000);
    let mut ops = server.conn();
    let _: () = cmd!("CLIENT", "SETNAME", &name).query(&mut ops).unwrap();
    acquire(&mut c, "x", "o", LONG);
    let _: i64 = cmd!("LOCK.FORCERELEASE", "x").query(&mut ops).unwrap();
    let info = text(&entries(&mut c, cmd!("LOCK.HISTORY", "x"))[0]["client-info"]);
    assert!(
        info.len() <= 512 && info.starts_with("id="),
        "{}",
        info.len()
    );
}

#[test]
fn the_journal_is_per_node_and_empty_after_a_restart() {
    let mut master = Server::start();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", "o", LONG);
    let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut m).unwrap();
    acquire(&mut m, "d", "o", LONG);
    let _: () = cmd!("DEL", "d").query(&mut m).unwrap();
    acquire(&mut m, "x", "o", 100);
    assert!(eventually(DUE, || log_reasons(&mut m, 10).len() == 3));
    // The replica applied all three (the expiry too: its copy of `x` is gone, so nothing is
    // left there that it could end and log by itself).
    common::wait_replica(&mut m);
    assert!(
        log_reasons(&mut r, 10).is_empty(),
        "a replica applies what its master decided; its journal stays empty"
    );
    drop(r);
    drop(replica);
    master.restart();
    let mut m = master.conn();
    assert!(log_reasons(&mut m, 10).is_empty(), "in memory only");
}

#[test]
fn a_replica_answers_log_and_stats_and_a_promoted_one_starts_empty() {
    let master = Server::start();
    let replica = Server::with_args(&["--replica-serve-stale-data", "no"]);
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    // Contention and a forced release on the master.
    acquire(&mut m, "k", "o", LONG);
    assert_eq!(
        common::int_or_nil(&mut m, cmd!("LOCK.ACQUIRE", "k", "x", LONG)),
        None
    );
    let _ = queue_with_timeout(&master, &mut m, "k", "w", 50, &[], 1)
        .0
        .read(DUE);
    let _: i64 = cmd!("LOCK.FORCERELEASE", "k").query(&mut m).unwrap();
    acquire(&mut m, "kept", "o", LONG);
    let acked: i64 = cmd!("WAIT", 1, 5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(log_reasons(&mut m, 10), ["forcereleased"]);
    assert!(!entries(&mut m, cmd!("LOCK.STATS")).is_empty());
    // The replica answers for itself: nothing, as it only applied what its master decided.
    let mut r = replica.conn();
    assert!(log_reasons(&mut r, 10).is_empty());
    assert!(entries(&mut r, cmd!("LOCK.STATS")).is_empty());
    assert!(history(&mut r, "k").is_empty());
    // Promoted by a failover: its journal and statistics start empty (per node, in memory),
    // and record what happens on it from then on; the old master keeps its own.
    let _: () = cmd!("FAILOVER").query(&mut m).unwrap();
    let promoted = eventually(DUE, || {
        let role: Vec<Value> = cmd!("ROLE").query(&mut r).unwrap();
        text(&role[0]) == "master"
    });
    assert!(promoted, "the replica took over");
    assert!(
        log_reasons(&mut r, 10).is_empty(),
        "a failover: nothing to find"
    );
    assert!(entries(&mut r, cmd!("LOCK.STATS")).is_empty());
    let demoted = eventually(DUE, || {
        let role: Vec<Value> = cmd!("ROLE").query(&mut m).unwrap();
        text(&role[0]) == "slave"
    });
    assert!(demoted, "the old master follows");
    assert_eq!(
        log_reasons(&mut m, 10),
        ["forcereleased"],
        "the old master's journal is its own"
    );
    let ended = eventually(DUE, || {
        cmd!("LOCK.FORCERELEASE", "kept")
            .query::<i64>(&mut r)
            .is_ok_and(|n| n == 1)
    });
    assert!(ended, "the promoted replica writes");
    assert_eq!(
        history(&mut r, "kept"),
        [("forcereleased".into(), "o".into())]
    );
    // A replica whose master is gone still answers both (they read memory, not keys).
    drop(r);
    let mut old = master.conn();
    assert!(eventually(DUE, || {
        let info: String = cmd!("INFO", "replication").query(&mut old).unwrap();
        info.contains("master_link_status:up")
    }));
    let _: () = cmd!("CONFIG", "SET", "replica-serve-stale-data", "no")
        .query(&mut old)
        .unwrap();
    drop(replica);
    assert!(eventually(DUE, || {
        let info: String = cmd!("INFO", "replication").query(&mut old).unwrap();
        info.contains("master_link_status:down")
    }));
    let e = cmd!("LOCK.INFO", "kept").query::<Value>(&mut old);
    assert!(e.is_err(), "stale data is not served: {e:?}");
    assert_eq!(log_reasons(&mut old, 10), ["forcereleased"]);
    let _: Value = cmd!("LOCK.STATS").query(&mut old).unwrap();
}

#[test]
fn statistics_and_the_journal_live_across_debug_reload() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "hot", "h", LONG);
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "hot", "x", LONG)),
        None
    );
    let _ = queue_with_timeout(&server, &mut c, "hot", "t", 100, &[], 1)
        .0
        .read(DUE);
    let (mut w, _) = queue_with_timeout(&server, &mut c, "hot", "w", 0, &[], 1);
    let _: i64 = cmd!("LOCK.RELEASE", "hot", "h").query(&mut c).unwrap();
    w.read(DUE).token();
    let _: i64 = cmd!("LOCK.FORCERELEASE", "hot").query(&mut c).unwrap();
    let stats = |c: &mut Connection| cmd!("LOCK.STATS").query::<Value>(c).unwrap();
    let info = |c: &mut Connection| (percentiles(c, "wait"), percentiles(c, "hold"));
    let before = (stats(&mut c), info(&mut c), log_reasons(&mut c, 10));
    assert!(before.1 .0[3] > 0.0 && before.1 .1[3] > 0.0, "{before:?}");
    // DEBUG RELOAD saves, flushes and loads the keyspace; the module stays loaded, and with it
    // what it measured since it loaded (docs: "since the module loaded").
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    // Two cron ticks, each of which would write a pending flush, and none may.
    wait_out_ttl(Duration::from_millis(250));
    let after = (stats(&mut c), info(&mut c), log_reasons(&mut c, 10));
    assert_eq!(before, after);
    assert_eq!(info_field(&mut c, "granted_total"), 1);
}

// --- Contention statistics ------------------------------------------------------------------

/// `INFO relock`'s `name` distribution: (p50, p90, p99, p99.9) in ms.
fn percentiles(c: &mut Connection, name: &str) -> [f64; 4] {
    let info: String = cmd!("INFO", "relock").query(c).unwrap();
    let field = format!("relock_{name}_percentiles_ms:");
    let line = info
        .lines()
        .find(|l| l.starts_with(&field))
        .unwrap_or_else(|| panic!("no {field} in {info}"));
    let values: Vec<(String, f64)> = line[field.len()..]
        .trim()
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["p50", "p90", "p99", "p99.9"],
        "the shape of INFO latencystats"
    );
    [values[0].1, values[1].1, values[2].1, values[3].1]
}

/// The `LOCK.STATS` entry of `key`.
fn key_stats(c: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    entries(c, cmd!("LOCK.STATS", "COUNT", 1000))
        .into_iter()
        .find(|e| text(&e["key"]) == key)
}

#[test]
fn waits_and_holds_are_measured_and_the_hottest_key_is_named() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(percentiles(&mut c, "wait"), [0.0; 4], "nothing yet");
    acquire(&mut c, "hot", "h", LONG);
    let (mut w, _) = queue_with_timeout(&server, &mut c, "hot", "w", 0, &[], 1);
    let (mut t, _) = queue_with_timeout(&server, &mut c, "hot", "t", 200, &[], 2);
    assert_eq!(t.read(DUE), Reply::Nil, "timed out");
    // `w` waits at least this long before it is granted.
    wait_out_ttl(Duration::from_millis(300));
    let waited = Instant::now();
    let _: i64 = cmd!("LOCK.RELEASE", "hot", "h").query(&mut c).unwrap();
    w.read(DUE).token();
    let _ = waited;
    // A contended nil reply, and a cold key.
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "hot", "x", LONG)),
        None
    );
    acquire(&mut c, "cold", "h", LONG);
    let _ = queue_with_timeout(&server, &mut c, "cold", "w", 50, &[], 1)
        .0
        .read(DUE);
    let p = percentiles(&mut c, "wait");
    // Two waits: ~200 ms (timed out, counted with its wait) and >= 300 ms (granted); one of
    // ~50 ms on the cold key.
    assert!(p[3] >= 300.0 && p[3] < DUE.as_millis() as f64, "{p:?}");
    assert!(p[0] >= 190.0 * 0.97, "{p:?}");
    let holds = percentiles(&mut c, "hold");
    assert!(holds[3] >= 300.0, "h held hot for the waits: {holds:?}");
    let top = entries(&mut c, cmd!("LOCK.STATS"));
    assert_eq!(text(&top[0]["key"]), "hot", "the hottest first: {top:?}");
    assert_eq!(
        names(
            &cmd!("LOCK.STATS")
                .query::<Value>(&mut c)
                .unwrap()
                .as_sequence()
                .unwrap()[0]
        ),
        [
            "key",
            "db",
            "waits",
            "granted",
            "timeouts",
            "contended",
            "wait_ms_total",
            "error",
            "wait_ms_max"
        ]
    );
    let hot = &top[0];
    assert_eq!(int(&hot["waits"]), 2);
    assert_eq!(int(&hot["granted"]), 1);
    assert_eq!(int(&hot["timeouts"]), 1);
    assert_eq!(int(&hot["contended"]), 1);
    assert_eq!(int(&hot["error"]), 0);
    let total = int(&hot["wait_ms_total"]);
    assert!(
        total >= 190 + 290 && total < 2 * DUE.as_millis() as i64,
        "{total}"
    );
    assert!(int(&hot["wait_ms_max"]) >= 290);
    assert_eq!(entries(&mut c, cmd!("LOCK.STATS", "COUNT", 1)).len(), 1);
    assert!(key_stats(&mut c, "cold").is_some());
    // CONFIG RESETSTAT leaves them; LOCK.STATS RESET clears the table and the distributions.
    let _: () = cmd!("CONFIG", "RESETSTAT").query(&mut c).unwrap();
    assert!(key_stats(&mut c, "hot").is_some());
    assert!(percentiles(&mut c, "wait")[3] > 0.0);
    let ok: String = cmd!("LOCK.STATS", "RESET").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    assert!(entries(&mut c, cmd!("LOCK.STATS")).is_empty());
    assert_eq!(percentiles(&mut c, "wait"), [0.0; 4]);
    assert_eq!(percentiles(&mut c, "hold"), [0.0; 4]);
    for bad in [&["3"][..], &["COUNT"], &["COUNT", "-2"], &["RESET", "x"]] {
        assert!(
            cmd!("LOCK.STATS").arg(bad).query::<Value>(&mut c).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn stats_off_records_nothing_and_the_table_is_bounded() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("CONFIG", "SET", "relock.stats", "no")
        .query(&mut c)
        .unwrap();
    assert_eq!(config_get(&mut c, "relock.stats"), "no");
    acquire(&mut c, "k", "h", LONG);
    assert_eq!(
        common::int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", "k", "x", LONG)),
        None
    );
    let _ = queue_with_timeout(&server, &mut c, "k", "w", 50, &[], 1)
        .0
        .read(DUE);
    assert!(entries(&mut c, cmd!("LOCK.STATS")).is_empty());
    assert_eq!(percentiles(&mut c, "wait"), [0.0; 4]);
    let _: () = cmd!("CONFIG", "SET", "relock.stats", "yes")
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("CONFIG", "SET", "relock.stats-keys", 2)
        .query(&mut c)
        .unwrap();
    assert_eq!(config_get(&mut c, "relock.stats-keys"), "2");
    for i in 0..5 {
        let key = format!("c{i}");
        acquire(&mut c, &key, "h", LONG);
        for _ in 0..=i {
            assert_eq!(
                common::int_or_nil(&mut c, cmd!("LOCK.ACQUIRE", &key, "x", 1)),
                None
            );
        }
    }
    let top = entries(&mut c, cmd!("LOCK.STATS", "COUNT", 100));
    assert_eq!(top.len(), 2, "never more keys than relock.stats-keys");
    for bad in ["-1", "100001"] {
        assert!(cmd!("CONFIG", "SET", "relock.stats-keys", bad)
            .query::<()>(&mut c)
            .is_err());
    }
    let _: () = cmd!("CONFIG", "SET", "relock.stats-keys", 0)
        .query(&mut c)
        .unwrap();
    assert!(
        entries(&mut c, cmd!("LOCK.STATS")).is_empty(),
        "0: no table"
    );
}

#[test]
fn stats_and_info_stay_cheap_with_many_keys_and_waiters() {
    // 100,000 locks and 10,000 waiters over 1,000 keys: LOCK.STATS and INFO relock each cost
    // the server well under a millisecond (measured by the server itself, INFO commandstats).
    let server = Server::with_args(&["--maxclients", "15000"]);
    let mut c = server.conn();
    let fill: Vec<redis::Cmd> = (0..100_000)
        .map(|i| cmd!("LOCK.ACQUIRE", format!("k{i}"), "h", LONG))
        .collect();
    let mut raw = Raw::connect(&server);
    common::raw::pipeline_cmds(&mut raw, &fill, |r| matches!(r, Reply::Int(_)));
    let mut waiting = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let mut r = Raw::connect(&server);
        r.send_wait(&format!("k{}", i % 1000), &format!("w{i}"), LONG as u64, 0);
        waiting.push(r);
    }
    assert!(eventually(Duration::from_secs(60), || info_field(
        &mut c, "waiters"
    ) == 10_000));
    let _: () = cmd!("CONFIG", "RESETSTAT").query(&mut c).unwrap();
    for _ in 0..20 {
        let top = entries(&mut c, cmd!("LOCK.STATS"));
        assert_eq!(top.len(), 10);
        let _: String = cmd!("INFO", "relock").query(&mut c).unwrap();
    }
    let stats: String = cmd!("INFO", "commandstats").query(&mut c).unwrap();
    for command in ["lock.stats", "info"] {
        let line = stats
            .lines()
            .find(|l| l.to_lowercase().starts_with(&format!("cmdstat_{command}:")))
            .unwrap_or_else(|| panic!("{command} in {stats}"));
        let usec: f64 = line
            .split(',')
            .find_map(|kv| kv.strip_prefix("usec_per_call="))
            .unwrap()
            .parse()
            .unwrap();
        eprintln!("{command}: {usec} µs per call");
        assert!(usec < 1000.0, "{command}: {usec} µs per call");
    }
}

// --- A CONFIG SET that fails changes nothing ------------------------------------------------------

/// What the `relock.*` configs decide, seen from outside: every config's value, and the state the
/// engine keeps by them (journal entries, the statistics' keys, the grace `INFO` reports).
#[derive(Debug, PartialEq, Eq)]
struct ConfigState {
    configs: Vec<(String, String)>,
    log_len: i64,
    log_entries: usize,
    stats_keys: usize,
    grace_ms: i64,
}

fn config_state(c: &mut Connection) -> ConfigState {
    let mut configs: Vec<(String, String)> = cmd!("CONFIG", "GET", "relock.*").query(c).unwrap();
    configs.sort();
    let stats: Vec<Value> = cmd!("LOCK.STATS", "COUNT", 1000).query(c).unwrap();
    ConfigState {
        configs,
        log_len: info_field(c, "log_len"),
        log_entries: log_reasons(c, 1000).len(),
        stats_keys: stats.len(),
        grace_ms: info_field(c, "restart_grace_ms"),
    }
}

/// 20 journal entries (`forcereleased`) and 20 keys in the statistics.
fn fill_journal_and_stats(c: &mut Connection) {
    for i in 0..20 {
        let key = format!("full{i}");
        acquire(c, &key, "o", LONG);
        let nil: Option<i64> = cmd!("LOCK.ACQUIRE", &key, "other", LONG).query(c).unwrap();
        assert_eq!(nil, None);
        let _: i64 = cmd!("LOCK.FORCERELEASE", &key).query(c).unwrap();
    }
}

/// A new value for every relock config (each unlike its default).
const EVERY_RELOCK_CONFIG: [(&str, &str); 5] = [
    ("relock.log-max-len", "1"),
    ("relock.log-reasons", "expired"),
    ("relock.stats", "no"),
    ("relock.stats-keys", "2"),
    ("relock.restart-grace-ms", "5000"),
];

/// A `CONFIG SET` that Redis refuses as a whole (a bad value after the relock ones, a parameter
/// named twice, a setting whose apply fails) leaves every relock config and everything they
/// decide as it was: the journal keeps its 20 entries, the statistics their 20 keys, no grace
/// setting, every reason still recorded, statistics still on. Redis sets the old values back
/// through the set callbacks; before, those callbacks trimmed the journal and the statistics at
/// once (19 of 20 entries gone through the issue's command). The same command without the bad
/// parameter applies every value.
#[test]
fn a_failed_config_set_changes_nothing_and_the_same_set_alone_applies() {
    let server = Server::start();
    let mut c = server.conn();
    fill_journal_and_stats(&mut c);
    let before = config_state(&mut c);
    assert_eq!(
        (before.log_entries, before.stats_keys, before.grace_ms),
        (20, 20, 0)
    );
    // A busy port: Redis sets `port`, then its apply (listening there) fails.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port().to_string();
    let relock_args: Vec<&str> = EVERY_RELOCK_CONFIG
        .iter()
        .flat_map(|(name, value)| [*name, *value])
        .collect();
    let failing: Vec<(&str, Vec<&str>)> = vec![
        (
            "the issue's command",
            vec![
                "slowlog-max-len",
                "1",
                "relock.log-max-len",
                "1",
                "relock.stats-keys",
                "2",
                "relock.restart-grace-ms",
                "-5",
            ],
        ),
        (
            "every relock config, then a bad value",
            [relock_args.clone(), vec!["maxmemory-policy", "bogus"]].concat(),
        ),
        (
            "every relock config, then one named twice",
            [relock_args.clone(), vec!["relock.log-max-len", "2"]].concat(),
        ),
        (
            "every relock config, then a port whose apply fails",
            [relock_args.clone(), vec!["port", &busy_port]].concat(),
        ),
        (
            "an invalid reason list with every other relock config",
            [
                relock_args[..2].to_vec(),
                relock_args[4..].to_vec(),
                vec!["relock.log-reasons", "all none"],
            ]
            .concat(),
        ),
    ];
    for (what, args) in &failing {
        let mut set = redis::cmd("CONFIG");
        set.arg("SET").arg(args);
        let e = set.query::<()>(&mut c);
        assert!(e.is_err(), "{what}: accepted");
        assert_eq!(config_state(&mut c), before, "{what}: {e:?}");
        assert_eq!(config_get(&mut c, "slowlog-max-len"), "128", "{what}");
    }
    drop(busy);
    // The engine still works by the old values: a forcerelease is recorded, a contended key is
    // counted, a hold of any ttl is granted.
    fill_journal_and_stats(&mut c);
    assert_eq!(log_reasons(&mut c, 1)[0], "forcereleased");
    acquire(&mut c, "long", "o", 600_000);
    // The same values alone apply, all of them.
    let mut set = redis::cmd("CONFIG");
    set.arg("SET").arg(&relock_args);
    let () = set.query(&mut c).unwrap();
    let after = config_state(&mut c);
    let mut expected: Vec<(String, String)> = EVERY_RELOCK_CONFIG
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    expected.sort();
    assert_eq!(
        (
            after.configs,
            after.log_entries,
            after.stats_keys,
            after.grace_ms
        ),
        (expected, 1, 2, 5000)
    );
    let e = cmd!("LOCK.ACQUIRE", "longer", "o", 600_000).query::<Option<i64>>(&mut c);
    assert!(
        e.is_err_and(|e| e.to_string().contains("restart-grace-ms")),
        "a ttl above the new grace"
    );
}

/// `relock.log-reasons` refuses a list naming `none` with anything (a bit-flag config's value
/// is the OR of its names: `all none` read as `all` before), and keeps its value.
#[test]
fn log_reasons_refuses_none_with_other_reasons() {
    let server = Server::start();
    let mut c = server.conn();
    for bad in [
        "all none",
        "none all",
        "expired none",
        "none deleted evicted",
    ] {
        let e = cmd!("CONFIG", "SET", "relock.log-reasons", bad)
            .query::<()>(&mut c)
            .expect_err(bad);
        assert!(
            e.to_string().contains("'none' cannot be listed"),
            "{bad}: {e}"
        );
        assert_eq!(config_get(&mut c, "relock.log-reasons"), "all", "{bad}");
    }
    for (good, read) in [
        ("none", "none"),
        ("none none", "none"),
        ("all expired", "all"),
        ("expired", "expired"),
        ("all", "all"),
    ] {
        config_set(&mut c, "relock.log-reasons", good);
        assert_eq!(config_get(&mut c, "relock.log-reasons"), read, "{good}");
    }
}
