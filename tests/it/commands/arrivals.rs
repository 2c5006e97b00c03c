//! Every way a value arrives at a key with waiters goes through one path: the whole queue is
//! checked against the new value at once, not only its head. Here the head waits exclusively and
//! a `SHARED LIMIT 2` waiter behind it meets a shared value with `LIMIT 3` brought by RENAME,
//! COPY ... REPLACE, RESTORE ... REPLACE or SWAPDB: it gets the limit error at once, and the head
//! keeps waiting. (Before the fix, SWAPDB left it waiting until the head timed out, or forever.)
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::ask::waiters;
use common::raw::{queue_wait, Reply};
use common::Server;
use redis::Connection;

const LONG: u64 = 100_000;
const DUE: Duration = Duration::from_secs(10);
const LIMIT_ERROR: &str = "ERR lock has another limit (3)";

/// `k` held exclusively by x, with an exclusive head e and a `SHARED LIMIT 2` waiter q behind it;
/// `bring` then puts a shared value with `LIMIT 3` at `k`.
fn conflict_behind_the_head(bring: impl FnOnce(&mut Connection)) {
    let server = Server::start();
    let mut c = server.conn();
    let _: i64 = cmd!("LOCK.ACQUIRE", "k", "x", LONG).query(&mut c).unwrap();
    let mut e = queue_wait(&server, &mut c, "k", "e", &[], 1).0;
    let mut q = queue_wait(&server, &mut c, "k", "q", &["SHARED", "LIMIT", "2"], 2).0;
    bring(&mut c);
    assert_eq!(
        q.read(DUE),
        Reply::Error(LIMIT_ERROR.into()),
        "the LIMIT 2 waiter behind the exclusive head"
    );
    assert_eq!(
        e.read_within(Duration::from_millis(200)),
        None,
        "the head still waits"
    );
    assert_eq!(waiters(&mut c, "k"), 1);
}

/// A shared value with `LIMIT 3` at `key` of the current db.
fn shared_value(c: &mut Connection, key: &str) {
    let _: i64 = cmd!("LOCK.ACQUIRE", key, "y", LONG, "SHARED", "LIMIT", 3)
        .query(c)
        .unwrap();
}

#[test]
fn rename() {
    conflict_behind_the_head(|c| {
        shared_value(c, "other");
        let _: () = cmd!("RENAME", "other", "k").query(c).unwrap();
    });
}

#[test]
fn copy_replace() {
    conflict_behind_the_head(|c| {
        shared_value(c, "other");
        let _: i64 = cmd!("COPY", "other", "k", "REPLACE").query(c).unwrap();
    });
}

#[test]
fn restore_replace() {
    conflict_behind_the_head(|c| {
        shared_value(c, "other");
        let dump: Vec<u8> = cmd!("DUMP", "other").query(c).unwrap();
        let _: () = cmd!("RESTORE", "k", 0, dump, "REPLACE").query(c).unwrap();
    });
}

#[test]
fn swapdb() {
    conflict_behind_the_head(|c| {
        let _: () = cmd!("SELECT", 1).query(c).unwrap();
        shared_value(c, "k");
        let _: () = cmd!("SELECT", 0).query(c).unwrap();
        let _: () = cmd!("SWAPDB", 0, 1).query(c).unwrap();
    });
}

/// Valkey 8.1 runs keyspace notifications on the client running the command and leaves it in
/// the notified key's db (valkey-io/valkey#4024): with relock loaded, a `MOVE` must still leave
/// the connection in its own db.
#[test]
fn move_leaves_the_connection_in_its_db() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = cmd!("SELECT", 2).query(&mut c).unwrap();
    let _: i64 = cmd!("LOCK.ACQUIRE", "m", "o", 60_000)
        .query(&mut c)
        .unwrap();
    let _: () = cmd!("SET", "plain", "v", "EX", 100).query(&mut c).unwrap();
    for key in ["m", "plain"] {
        let moved: i64 = cmd!("MOVE", key, 5).query(&mut c).unwrap();
        assert_eq!(moved, 1);
        let info: String = cmd!("CLIENT", "INFO").query(&mut c).unwrap();
        assert!(info.contains(" db=2 "), "after MOVE {key}: {info}");
    }
}
