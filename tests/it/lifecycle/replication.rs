//! A replica receives every lock change, answers LOCK.INFO like its master, refuses writes, and
//! once promoted issues tokens above every token its master issued.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::{
    acquire, eventually, int_or_nil, lock_info as info, wait_out_ttl, wait_replica, Server,
};
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
        common::attach_replica(&master, &replica);
        Pair { master, replica }
    }
}

/// A master that starts a full sync at once (the default waits 5 s for more replicas).
fn master() -> Server {
    Server::with_args(&["--repl-diskless-sync-delay", "0"])
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
    wait_replica(&mut m);
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
    wait_replica(&mut m);
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
    // Read one right after the other: the time between the reads (long on a loaded machine)
    // is allowed on top of the 100 ms.
    let before = std::time::Instant::now();
    let p: i64 = cmd!("PTTL", "a").query(&mut r).unwrap();
    let ttl = info(&mut r, b"a").unwrap().ttl;
    let between = before.elapsed().as_millis() as i64;
    assert!(
        (p - ttl).abs() <= 100 + between,
        "PTTL {p} vs ttl {ttl}, read {between} ms apart"
    );
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
    wait_replica(&mut m);
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
    // With the master's active expiry off, nothing deletes the key on the master (so no DEL
    // reaches the replica): the replica hides the expired lock on its own.
    let _: () = cmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0).query(&mut m).unwrap();
    acquire(&mut m, b"short", b"o", 2_000);
    wait_replica(&mut m);
    assert!(info(&mut r, b"short").is_some());
    // Replicas do not expire keys themselves, but must not show a logically expired one.
    assert!(
        eventually(Duration::from_secs(5), || info(&mut r, b"short").is_none()),
        "replica shows an expired lock"
    );
    let exists: i64 = cmd!("DBSIZE").query(&mut r).unwrap();
    assert_eq!(
        exists, 1,
        "the key is still there on the replica, only hidden"
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
    wait_replica(&mut m);

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
    common::attach_replica(&master, &replica);
    wait_replica(&mut m);
    let mut r = replica.conn();
    assert_mirrored(&mut m, &mut r, &[b"held", b"x", b"seed"]);
    let held = info(&mut r, b"held").expect("held on the replica");
    assert_eq!(held.count, 2);
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    let t = acquire(&mut r, b"z", b"p", 60_000);
    assert!(t > held.token && t > high, "promoted replica issued {t}");
}

/// A master alone (no AOF, no replica, no backlog) skips building effects. A replica that
/// attaches later, including while the master waits out `repl-diskless-sync-delay` before it
/// forks, must still end up identical: what ran before the fork is in the snapshot, what runs
/// after it goes out as effects.
#[test]
fn replica_attaching_to_a_lone_master_gets_every_change() {
    for delay in ["0", "1"] {
        let master = Server::with_args(&["--repl-diskless-sync-delay", delay, "--hz", "100"]);
        let replica = Server::start();
        let mut m = master.conn();
        // Alone long enough for the module's cron check to see nobody listening (thirty ticks
        // at hz 100; what it decided is not shown anywhere a test could wait for).
        acquire(&mut m, b"before", b"a", 60_000);
        wait_out_ttl(Duration::from_millis(300));
        acquire(&mut m, b"alone", b"a", 60_000);

        let mut r = replica.conn();
        let _: () = cmd!("REPLICAOF", "127.0.0.1", master.port)
            .query(&mut r)
            .expect("REPLICAOF");
        // Changes while the sync is being set up (during the diskless delay when it is 1 s)...
        let mut keys: Vec<Vec<u8>> = vec![b"before".to_vec(), b"alone".to_vec()];
        for i in 0..20 {
            let key = format!("during:{i}").into_bytes();
            acquire(&mut m, &key, b"b", 60_000);
            if i % 3 == 0 {
                assert_eq!(
                    int_or_nil(&mut m, cmd!("LOCK.REENTER", &key, b"b", 30_000)),
                    Some(2)
                );
                let _: Option<i64> = int_or_nil(&mut m, cmd!("LOCK.RENEW", &key, b"b", 45_000));
            }
            if i % 4 == 0 {
                let left = if i % 3 == 0 { 1 } else { 0 };
                assert_eq!(
                    int_or_nil(&mut m, cmd!("LOCK.RELEASE", &key, b"b")),
                    Some(left)
                );
            }
            keys.push(key);
            std::thread::sleep(Duration::from_millis(50)); // paced over the sync's setup (not a wait)
        }
        let up = eventually(Duration::from_secs(10), || {
            let s: String = cmd!("INFO", "replication").query(&mut r).unwrap();
            s.contains("master_link_status:up")
        });
        assert!(up, "replica did not connect:\n{}", replica.log());
        // ...and after it.
        for i in 0..5 {
            let key = format!("after:{i}").into_bytes();
            acquire(&mut m, &key, b"c", 60_000);
            keys.push(key);
        }
        wait_replica(&mut m);
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        assert_mirrored(&mut m, &mut r, &keys);
        // The replica's counter followed: promoted, it issues a larger token than any.
        let last: i64 = keys
            .iter()
            .filter_map(|k| info(&mut m, k).map(|i| i.token))
            .max()
            .unwrap();
        let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
        let next = acquire(&mut r, b"promoted", b"d", 60_000);
        assert!(
            next > last,
            "delay {delay}: promoted replica token {next} <= {last}"
        );
    }
}

/// Lock changes count as writes for `save` rules even when nothing receives propagation.
#[test]
fn lock_changes_count_for_save_rules_on_a_lone_master() {
    let master = Server::with_args(&["--hz", "100"]);
    let mut m = master.conn();
    // Alone long enough for the module's cron check to see nobody listening (thirty ticks).
    wait_out_ttl(Duration::from_millis(300));
    let changes = |m: &mut Connection| -> i64 {
        let s: String = cmd!("INFO", "persistence").query(m).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = changes(&mut m);
    acquire(&mut m, b"k", b"a", 60_000);
    let _: Option<i64> = int_or_nil(&mut m, cmd!("LOCK.RENEW", b"k", b"a", 30_000));
    let _: Option<i64> = int_or_nil(&mut m, cmd!("LOCK.RELEASE", b"k", b"a"));
    assert!(
        changes(&mut m) >= before + 3,
        "lock changes not counted as dirty"
    );
}

/// Reads a master's replication stream as a replica would (`PSYNC ? -1`, then the RDB, then
/// commands) and returns the names of the commands that follow, until `quiet` passes without
/// one.
struct FakeReplica {
    stream: std::io::BufReader<std::net::TcpStream>,
}

impl FakeReplica {
    /// Sends `PSYNC ? -1`: the master forks for the RDB at once. The RDB is read later, by
    /// `commands`, so the caller can write in the window right after the fork.
    fn attach(master: &Server) -> FakeReplica {
        use std::io::Write;
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", master.port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.write_all(b"PSYNC ? -1\r\n").unwrap();
        let stream = std::io::BufReader::new(tcp);
        FakeReplica { stream }
    }

    /// Skips `+FULLRESYNC` and the RDB (disk-based: this replica announced no `capa eof`).
    fn skip_rdb(&mut self) {
        use std::io::{BufRead, Read};
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).unwrap();
            if line.starts_with("+FULLRESYNC") {
                break;
            }
            assert!(line.trim().is_empty(), "PSYNC: {line:?}");
        }
        loop {
            line.clear();
            self.stream.read_line(&mut line).unwrap();
            if let Some(len) = line.trim().strip_prefix('$') {
                let mut rdb = vec![0u8; len.parse().unwrap()];
                self.stream.read_exact(&mut rdb).unwrap();
                return;
            }
            assert!(line.trim().is_empty(), "RDB header: {line:?}");
        }
    }

    /// The command names received until nothing arrives for `quiet`.
    /// Every command received until the stream is quiet for `quiet`, as its arguments (the
    /// name upper-cased).
    fn commands(&mut self, quiet: Duration) -> Vec<Vec<String>> {
        use std::io::{BufRead, Read};
        self.skip_rdb();
        self.stream.get_ref().set_read_timeout(Some(quiet)).unwrap();
        let mut names = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            match self.stream.read_line(&mut line) {
                Ok(0) | Err(_) => return names,
                Ok(_) => {}
            }
            let Some(argc) = line.trim().strip_prefix('*') else {
                continue;
            };
            let argc: usize = argc.parse().unwrap();
            let mut command = Vec::new();
            for i in 0..argc {
                line.clear();
                self.stream.read_line(&mut line).unwrap();
                let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
                let mut arg = vec![0u8; len + 2];
                self.stream.read_exact(&mut arg).unwrap();
                let text = String::from_utf8_lossy(&arg[..len]).into_owned();
                command.push(if i == 0 { text.to_uppercase() } else { text });
            }
            names.push(command);
        }
    }
}

/// Replicas receive effects, never the timing-dependent commands themselves, also from a master
/// that was alone (and so skipped building effects) until the replica came.
#[test]
fn replication_stream_carries_only_effects() {
    let master = Server::with_args(&["--repl-diskless-sync", "no"]);
    let mut m = master.conn();
    acquire(&mut m, b"alone", b"a", 60_000);
    // Four cron ticks (hz 10): the module's cron sees nobody listening.
    wait_out_ttl(Duration::from_millis(400));
    // The writes below land right after the fork for this replica's RDB, before the next cron
    // tick could notice the replica: only the fork event tells the module.
    let mut replica = FakeReplica::attach(&master);
    assert!(eventually(Duration::from_secs(5), || {
        let s: String = cmd!("INFO", "replication").query(&mut m).unwrap();
        s.contains("connected_slaves:1")
    }));
    acquire(&mut m, b"k", b"a", 60_000);
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.REENTER", b"k", b"a", 60_000)),
        Some(2)
    );
    assert!(int_or_nil(&mut m, cmd!("LOCK.RENEW", b"k", b"a", 30_000)).is_some());
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.RELEASE", b"k", b"a")),
        Some(1)
    );
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.RELEASE", b"k", b"a")),
        Some(0)
    );
    assert_eq!(
        int_or_nil(&mut m, cmd!("LOCK.FORCERELEASE", b"alone")),
        Some(1)
    );
    let commands = replica.commands(Duration::from_millis(500));
    let names: Vec<String> = commands.iter().map(|c| c[0].clone()).collect();
    let timing_dependent = ["LOCK.ACQUIRE", "LOCK.REENTER", "LOCK.RENEW", "LOCK.RELEASE"];
    assert!(
        !names.iter().any(|n| timing_dependent.contains(&n.as_str())),
        "the stream carries commands, not effects: {names:?}"
    );
    let applies = names.iter().filter(|n| *n == "LOCK.APPLY").count();
    let dels = names.iter().filter(|n| *n == "DEL").count();
    assert_eq!((applies, dels), (4, 2), "effects in the stream: {names:?}");
    // Each effect is the hold after the change: owner, token, count, absolute expiry.
    let effects: Vec<&Vec<String>> = commands
        .iter()
        .filter(|c| c[0] == "LOCK.APPLY" || c[0] == "DEL")
        .collect();
    let token = effects[0][3].clone();
    let at = |c: &Vec<String>| -> i64 {
        assert_eq!(c[5], "PXAT", "{c:?}");
        c[6].parse().unwrap()
    };
    let now = common::now_ms();
    for (i, (want, count, ttl)) in [
        ("acquire", "1", 60_000),
        ("reenter", "2", 60_000),
        ("renew", "2", 30_000),
        ("release", "1", 30_000),
    ]
    .into_iter()
    .enumerate()
    {
        let c = effects[i];
        assert_eq!(
            (
                c[0].as_str(),
                c[1].as_str(),
                c[2].as_str(),
                c[3].as_str(),
                c[4].as_str()
            ),
            ("LOCK.APPLY", "k", "a", token.as_str(), count),
            "{want}: {c:?}"
        );
        let left = at(c) - now;
        assert!(
            left > ttl - 10_000 && left <= ttl,
            "{want}: expiry {left} ms away, ttl {ttl}: {c:?}"
        );
    }
    assert_eq!(effects[4].as_slice(), ["DEL", "k"]);
    assert_eq!(effects[5].as_slice(), ["DEL", "alone"]);
}

/// Tokens under clock skew (issue 30): a master whose clock is ahead grants; its replica is
/// promoted holding the master's tokens, seconds above its own clock's floor. Issuing just above
/// them, then restarting without persistence, it issued from its own floor: below what it had
/// issued. Now a promoted replica issues no token above its own clock's floor (by more than the
/// current millisecond's): a new hold gets `TRYAGAIN` with the ms left, a `LOCK.WAIT` stays
/// queued and is granted once the clock passes the master's tokens, above them; and after a
/// restart without persistence its tokens are still above every token it issued.
///
/// The master's clock is faked by the token it grants: `LOCK.APPLY` with the token a master
/// `SKEW_MS` ahead would issue (what its replicas and AOF receive of a grant).
#[test]
fn a_promoted_replica_waits_for_its_clock_to_pass_its_masters_tokens() {
    use common::now_ms;
    use common::raw::Raw;
    const SKEW_MS: i64 = 4_000;
    let master = master();
    let mut replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    let masters = (now_ms() + SKEW_MS) * 1000 + 7;
    let _: () = cmd!(
        "LOCK.APPLY",
        "skewed",
        "o",
        masters,
        1,
        "PXAT",
        now_ms() + 600_000
    )
    .query(&mut m)
    .unwrap();
    wait_replica(&mut m);
    let mut r = replica.conn();
    assert_eq!(common::info_field(&mut r, "last_token"), masters);
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    drop(master);

    let e = common::reply::error(&mut r, cmd!("LOCK.ACQUIRE", "free", "a", 10_000));
    // redis-rs says the TRYAGAIN code its own way.
    assert!(e.contains("TryAgain") || e.contains("TRYAGAIN"), "{e}");
    // The restart grace's error (what every client reads as "grants nothing new yet"), with
    // the reason after it.
    let said = "relock restart grace, ";
    let ms: i64 = e
        .split_once(said)
        .and_then(|(_, rest)| rest.strip_suffix(" ms left (tokens ahead of this server's clock)"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("a new hold on the promoted replica: {e}"));
    assert!(0 < ms && ms <= SKEW_MS, "{ms} ms left");
    // The hold the master granted needs no new token: its owner renews it.
    assert_eq!(
        int_or_nil(&mut r, cmd!("LOCK.RENEW", "skewed", "o", 600_000)),
        Some(masters)
    );
    let mut waiter = Raw::connect(&replica);
    waiter.send_wait("free", "w", 60_000, 0);
    waiter.assert_silent("a wait while the tokens are ahead of the clock");
    let granted = waiter
        .read(Duration::from_millis(SKEW_MS as u64 + 10_000))
        .token();
    let at = now_ms();
    assert!(granted > masters as u64, "{granted} not above {masters}");
    assert!(
        at * 1000 + 999 >= granted as i64,
        "granted {granted} at {at}: above the clock's floor"
    );
    let after = acquire(&mut r, b"after", b"a", 10_000);
    assert!(after as u64 > granted);

    replica.restart();
    let mut r = replica.conn();
    let restarted = acquire(&mut r, b"restarted", b"a", 10_000);
    assert!(
        restarted > after,
        "restarted without persistence: issued {restarted}, had issued {after}"
    );
}

/// A master's tokens more than the longest catch-up (60 s) ahead of a promoted replica's clock
/// are not waited for: it issues above them at once. A second later the lead was under 60 s
/// and every new hold answered `TRYAGAIN` for a minute, though those tokens were out already
/// (waiting protected nothing). Now the lead accepted stays accepted as the clock closes it.
#[test]
fn a_promoted_replica_that_issued_above_a_lead_beyond_a_minute_keeps_issuing() {
    use common::now_ms;
    // 4 s beyond the cap: the sync and the promotion must happen before the clock closes the
    // lead below it (1 s was too little on a loaded machine).
    const LEAD_MS: i64 = 60_000 + 4_000;
    let master = master();
    let replica = Server::start();
    common::attach_replica(&master, &replica);
    let mut m = master.conn();
    let start = now_ms();
    let masters = (start + LEAD_MS) * 1000;
    let _: () = cmd!("LOCK.COUNTER", masters).query(&mut m).unwrap();
    wait_replica(&mut m);
    let mut r = replica.conn();
    assert_eq!(common::info_field(&mut r, "last_token"), masters);
    let _: () = cmd!("REPLICAOF", "NO", "ONE").query(&mut r).unwrap();
    drop(master);
    let first = acquire(&mut r, b"first", b"a", 10_000);
    assert!(first > masters, "{first} above {masters}");
    // The clock closes the lead below 60 s: 4.1 s of it must pass.
    let left = start + LEAD_MS - 60_000 + 101 - now_ms();
    wait_out_ttl(Duration::from_millis(left.max(0) as u64));
    let second = int_or_nil(&mut r, cmd!("LOCK.ACQUIRE", "second", "a", 10_000));
    assert_eq!(second, Some(first + 1), "issued on, just above");
}
