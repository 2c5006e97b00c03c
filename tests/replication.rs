//! A replica receives every lock change, answers LOCK.INFO like its master, refuses writes, and
//! once promoted issues tokens above every token its master issued.
#[macro_use]
mod common;

use std::time::Duration;

use common::{acquire, eventually, int_or_nil, lock_info as info, Server};
use redis::{Connection, Value};

const SEED: i64 = 1 << 52;

struct Pair {
    master: Server,
    replica: Server,
}

impl Pair {
    fn start() -> Pair {
        let master = master();
        let replica = Server::start();
        attach(&master, &replica);
        Pair { master, replica }
    }
}

/// A master that starts a full sync at once (the default waits 5 s for more replicas).
fn master() -> Server {
    Server::with_args(&["--repl-diskless-sync-delay", "0"])
}

fn attach(master: &Server, replica: &Server) {
    let mut r = replica.conn();
    let _: () = cmd!("REPLICAOF", "127.0.0.1", master.port)
        .query(&mut r)
        .expect("REPLICAOF");
    let up = eventually(Duration::from_secs(10), || {
        let s: String = cmd!("INFO", "replication").query(&mut r).unwrap();
        s.contains("master_link_status:up")
    });
    assert!(up, "replica did not connect:\n{}", replica.log());
}

/// Waits until the replica acknowledged everything the master wrote.
fn sync(master: &mut Connection) {
    let acked: i64 = cmd!("WAIT", 1, 5000).query(master).expect("WAIT");
    assert_eq!(acked, 1, "replica did not acknowledge");
}

fn assert_mirrored(m: &mut Connection, r: &mut Connection, keys: &[&[u8]]) {
    for key in keys {
        let a = info(m, key);
        let b = info(r, key);
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                assert_eq!(b.owner, a.owner, "owner of {key:?}");
                assert_eq!(b.token, a.token, "token of {key:?}");
                assert_eq!(b.count, a.count, "count of {key:?}");
                assert!(
                    (b.ttl - a.ttl).abs() <= 100,
                    "ttl of {key:?}: master {} replica {}",
                    a.ttl,
                    b.ttl
                );
            }
            (a, b) => panic!("{key:?}: master {a:?}, replica {b:?}"),
        }
    }
}

#[test]
fn replica_mirrors_every_lock_change() {
    let pair = Pair::start();
    let mut m = pair.master.conn();
    let mut r = pair.replica.conn();
    let bin_key: &[u8] = b"bin\x00\xff\r\n";
    let bin_owner: &[u8] = b"\x00owner\xff\r\n";

    let a = acquire(&mut m, b"a", b"oa", 30_000);
    for n in 1..=3 {
        assert_eq!(
            int_or_nil(&mut m, cmd!("LOCK.REENTER", "b", "ob", 30_000)),
            Some(n)
        );
    }
    acquire(&mut m, bin_key, bin_owner, 30_000);
    acquire(&mut m, b"released", b"oc", 30_000);
    acquire(&mut m, b"forced", b"od", 30_000);
    sync(&mut m);
    let keys: [&[u8]; 5] = [b"a", b"b", bin_key, b"released", b"forced"];
    assert_mirrored(&mut m, &mut r, &keys);
    let rb = info(&mut r, b"b").expect("b on the replica");
    assert_eq!((rb.owner.as_slice(), rb.count), (&b"ob"[..], 3));
    assert_eq!(info(&mut r, bin_key).unwrap().owner, bin_owner);

    // Renew, re-acquire, partial and full release, force release.
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.RENEW", "a", "oa", 600_000)),
        Some(a)
    );
    assert_eq!(int_or_nil(&mut m, cmd!("LOCK.RELEASE", "b", "ob")), Some(2));
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.ACQUIRE", bin_key, bin_owner, 5_000)),
        Some(info(&mut m, bin_key).unwrap().token)
    );
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.RELEASE", "released", "oc")),
        Some(0)
    );
    assert_eq!(
        cmd!("LOCK.FORCERELEASE", "forced")
            .query::<i64>(&mut m)
            .unwrap(),
        1
    );
    sync(&mut m);
    assert_mirrored(&mut m, &mut r, &keys);
    let ra = info(&mut r, b"a").unwrap();
    assert!(
        ra.ttl > 590_000,
        "renew reached the replica: ttl {}",
        ra.ttl
    );
    assert_eq!(info(&mut r, b"b").unwrap().count, 2);
    let rbin = info(&mut r, bin_key).unwrap();
    assert!(
        rbin.ttl <= 5_000,
        "re-acquire reset the replica's ttl: {}",
        rbin.ttl
    );
    assert_eq!(info(&mut r, b"released"), None);
    assert_eq!(info(&mut r, b"forced"), None);
    let exists: i64 = cmd!("EXISTS", "released", "forced").query(&mut r).unwrap();
    assert_eq!(exists, 0);

    // The replica's key TTL is the lock's ttl as well.
    let p: i64 = cmd!("PTTL", "a").query(&mut r).unwrap();
    assert!((p - ra.ttl).abs() <= 100, "PTTL {p} vs ttl {}", ra.ttl);
    let kind: String = cmd!("TYPE", "a").query(&mut r).unwrap();
    assert_eq!(kind, "relock-lk");
    assert_eq!(common::info_field(&mut r, "locks"), 3);
}

#[test]
fn replica_refuses_writes_and_answers_info() {
    let pair = Pair::start();
    let mut m = pair.master.conn();
    let mut r = pair.replica.conn();
    let t = acquire(&mut m, b"k", b"o", 60_000);
    sync(&mut m);
    let writes = [
        cmd!("LOCK.ACQUIRE", "k", "o", 1_000),
        cmd!("LOCK.ACQUIRE", "new", "o", 1_000),
        cmd!("LOCK.REENTER", "k", "o", 1_000),
        cmd!("LOCK.RELEASE", "k", "o"),
        cmd!("LOCK.RENEW", "k", "o", 1_000),
        cmd!("LOCK.FORCERELEASE", "k"),
        cmd!("LOCK.WAIT", "new", "o", 1_000, 100),
        cmd!("LOCK.APPLY", "k", "x", 1, 1),
    ];
    for (i, cmd) in writes.into_iter().enumerate() {
        let e = cmd
            .query::<Value>(&mut r)
            .expect_err("a write on a replica must fail");
        assert_eq!(e.code(), Some("READONLY"), "write #{i}: {e}");
    }
    let ri = info(&mut r, b"k").expect("LOCK.INFO on a replica");
    assert_eq!(
        (ri.owner.as_slice(), ri.token, ri.count, ri.waiters),
        (&b"o"[..], t, 1, 0)
    );
    assert_eq!(info(&mut r, b"new"), None);
    // Nothing changed on either side.
    assert_eq!(info(&mut m, b"k").unwrap().count, 1);
    assert_eq!(info(&mut m, b"new"), None);
}

#[test]
fn replica_sees_an_expired_lock_as_gone() {
    let pair = Pair::start();
    let mut m = pair.master.conn();
    let mut r = pair.replica.conn();
    acquire(&mut m, b"short", b"o", 2_000);
    sync(&mut m);
    assert!(info(&mut r, b"short").is_some());
    // Replicas do not expire keys themselves, but must not show a logically expired one.
    assert!(
        eventually(Duration::from_secs(5), || info(&mut r, b"short").is_none()),
        "replica shows an expired lock"
    );
    assert_eq!(info(&mut m, b"short"), None);
}

#[test]
fn promoted_replica_issues_larger_tokens() {
    let pair = Pair::start();
    let mut m = pair.master.conn();
    let mut r = pair.replica.conn();
    let ok: String = cmd!("LOCK.APPLY", "seed", "o", SEED, 1)
        .query(&mut m)
        .unwrap();
    assert_eq!(ok, "OK");
    let high = acquire(&mut m, b"x", b"o", 60_000);
    assert!(high > SEED);
    assert_eq!(int_or_nil(&mut m, cmd!("LOCK.RELEASE", "x", "o")), Some(0));
    let _: i64 = cmd!("DEL", "seed").query(&mut m).unwrap();
    // A lock that stays held, with the highest token.
    let kept = acquire(&mut m, b"kept", b"o", 60_000);
    assert!(kept > high);
    sync(&mut m);

    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    let t = acquire(&mut r, b"y", b"p", 60_000);
    assert!(
        t > kept,
        "promoted replica issued {t}, master had issued up to {kept}"
    );
    assert_eq!(common::info_field(&mut r, "last_token"), t);
}

#[test]
fn full_sync_copies_locks_and_the_counter() {
    let master = master();
    let replica = Server::start();
    let mut m = master.conn();
    let ok: String = cmd!("LOCK.APPLY", "seed", "o", SEED, 1)
        .query(&mut m)
        .unwrap();
    assert_eq!(ok, "OK");
    let high = acquire(&mut m, b"x", b"o", 60_000);
    assert_eq!(int_or_nil(&mut m, cmd!("LOCK.RELEASE", "x", "o")), Some(0));
    let _: i64 = cmd!("DEL", "seed").query(&mut m).unwrap();
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.REENTER", "held", "h", 60_000)),
        Some(1)
    );
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.REENTER", "held", "h", 60_000)),
        Some(2)
    );
    // The replica attaches after the fact: it gets everything through the RDB transfer.
    attach(&master, &replica);
    sync(&mut m);
    let mut r = replica.conn();
    assert_mirrored(&mut m, &mut r, &[b"held", b"x", b"seed"]);
    let held = info(&mut r, b"held").expect("held on the replica");
    assert_eq!(held.count, 2);
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    let t = acquire(&mut r, b"z", b"p", 60_000);
    assert!(t > held.token && t > high, "promoted replica issued {t}");
}
