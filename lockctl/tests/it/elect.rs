//! `lockctl elect` and `lockctl leader`: a command run while its process leads, with the term
//! in `RELOCK_TOKEN`; the next candidate leading once the leader is killed; the exit codes of
//! `run` on a loss; the leader's value and term, once and at every change.
use crate::support;
use relock_testkit as common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{eventually, Server};
use relock_testkit::ask::waiters;
use support::{lockctl, stderr, stdout, Spawned};

const KEY: &str = "service:leader";
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// The leader's (value, term), from `LOCK.INFO`.
fn leader(server: &Server) -> Option<(String, u64)> {
    support::holder(server, KEY).map(|(owner, term)| {
        let value = owner.rsplit_once('/').map_or("", |(v, _)| v).to_string();
        (value, term)
    })
}

/// `lockctl elect --id <id> --ttl <ttl> KEY -- sh -c <script>`.
fn elect(server: &Server, id: &str, ttl: &str, script: &str) -> std::process::Command {
    let mut cmd = lockctl(&[server]);
    cmd.args([
        "elect", "--id", id, "--ttl", ttl, KEY, "--", "sh", "-c", script,
    ])
    .stderr(Stdio::piped());
    cmd
}

/// Three `lockctl elect` processes: one leads and runs its command with the term in
/// `RELOCK_TOKEN`; killed (SIGKILL), the next in line leads within its ttl with a larger term,
/// and its command starts.
#[test]
fn the_next_candidate_leads_when_the_leader_is_killed() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("dir");
    let ttl = Duration::from_millis(600);
    // Each command writes the term it runs under, then works.
    let script = |id: &str| {
        format!(
            "echo \"$RELOCK_TOKEN\" > {}/{id}.term; exec sleep 60",
            dir.path().display()
        )
    };
    let term_of = |id: &str| -> Option<u64> {
        std::fs::read_to_string(dir.path().join(format!("{id}.term")))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    };
    let mut candidates = Vec::new();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        candidates.push((
            id,
            Spawned::new(&mut elect(&server, id, "600ms", &script(id))),
        ));
        if i == 0 {
            assert!(eventually(WITHIN, || leader(&server).is_some()));
        } else {
            assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == i as i64));
        }
    }
    let (first, term) = leader(&server).expect("a leader");
    assert_eq!(first, "a", "candidates lead in arrival order");
    assert!(eventually(WITHIN, || term_of("a") == Some(term)));
    assert_eq!(term_of("b"), None, "only the leader's command runs");

    let died = Instant::now();
    support::send(candidates[0].1.pid(), libc::SIGKILL);
    assert!(eventually(WITHIN, || leader(&server).is_some_and(|(v, _)| v != "a")));
    let took = died.elapsed();
    let (next, next_term) = leader(&server).expect("a leader");
    eprintln!("lockctl elect killed; {next} led {took:?} later (ttl {ttl:?})");
    assert_eq!(next, "b", "the next in line");
    assert!(next_term > term);
    // At most a ttl after its last renewal, plus the expiry event and the polling here; 500 ms
    // more so that the bound holds with the cores busy (the measurement is printed).
    assert!(took <= ttl + Duration::from_millis(500), "took {took:?}");
    assert!(eventually(WITHIN, || term_of("b") == Some(next_term)));
    assert_eq!(term_of("c"), None);
}

/// The command's own exit status, leadership released after it; 76 when leadership is lost
/// while it runs (the command stopped); 75 when it did not lead within --wait; 2 over several
/// independent masters.
#[test]
fn exit_codes_are_those_of_run() {
    let server = Server::start();
    let out = elect(
        &server,
        "a",
        "10s",
        "test \"$RELOCK_TOKEN\" -gt 0 && exit 7",
    )
    .output()
    .expect("lockctl");
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(leader(&server), None, "resigned once the command ended");

    let dir = tempfile::tempdir().expect("dir");
    let done = dir.path().join("stopped");
    let script = format!(
        "trap 'echo TERM > {}; exit 143' TERM; while :; do sleep 0.05; done",
        done.display()
    );
    let mut lead = elect(&server, "a", "3s", &script);
    let child = Spawned::new(&mut lead);
    assert!(eventually(WITHIN, || leader(&server).is_some()));
    // Another candidate queued behind it: leadership passes to it on the loss.
    let mut other = Spawned::new(&mut elect(&server, "b", "10s", "exec sleep 60"));
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 1));
    let taken_at = Instant::now();
    support::force_release(&server, KEY);
    let out = child.output();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(err.contains("reason=forcereleased"), "{err}");
    assert!(done.exists(), "the command got SIGTERM");
    eprintln!("lost and stopped within {:?}", taken_at.elapsed());
    assert_eq!(leader(&server).map(|(v, _)| v), Some("b".to_string()));

    let out = lockctl(&[&server])
        .args(["elect", "--wait", "200ms", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("could not lead"), "{}", stderr(&out));
    drop(other.child().kill());

    let more = [Server::start(), Server::start()];
    let out = lockctl(&[&server, &more[0], &more[1]])
        .args(["elect", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("one server or --cluster"),
        "{}",
        stderr(&out)
    );
    let out = lockctl(&[&server, &more[0], &more[1]])
        .args(["leader", KEY])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A shared key is no election: refused for good.
    let _read: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg("shared:key")
        .arg("reader")
        .arg(10_000)
        .arg("SHARED")
        .query(&mut server.conn())
        .expect("a shared hold");
    let out = lockctl(&[&server])
        .args(["leader", "shared:key"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("shared"), "{}", stderr(&out));
}

/// `lockctl leader`: the value and term now, as a line or JSON; `RELOCK_TOKEN` is the term.
#[test]
fn leader_prints_value_and_term() {
    let server = Server::start();
    let out = lockctl(&[&server])
        .args(["leader", KEY])
        .output()
        .expect("lockctl");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "no leader\n");

    let dir = tempfile::tempdir().expect("dir");
    let term_file = dir.path().join("term");
    let script = format!(
        "echo \"$RELOCK_TOKEN\" > {}; exec sleep 60",
        term_file.display()
    );
    let _lead = Spawned::new(&mut elect(&server, "web-1:8080", "10s", &script));
    assert!(eventually(WITHIN, || std::fs::read_to_string(&term_file)
        .is_ok_and(|t| t.ends_with('\n'))));
    let term: u64 = std::fs::read_to_string(&term_file)
        .expect("term")
        .trim()
        .parse()
        .expect("a number");
    let out = lockctl(&[&server])
        .args(["leader", KEY])
        .output()
        .expect("lockctl");
    let line = stdout(&out);
    assert!(
        line.starts_with(&format!("value=web-1:8080 term={term} ttl_ms=")),
        "{line}"
    );
    let out = lockctl(&[&server])
        .args(["leader", "--json", KEY])
        .output()
        .expect("lockctl");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["key"], KEY);
    assert_eq!(doc["leader"]["value"], "web-1:8080");
    assert_eq!(doc["leader"]["term"], term);
    assert_eq!(doc["regressed"], false);
    // --watch --json: one document per line, the leader now first.
    let mut watch = Spawned::new(
        lockctl(&[&server])
            .args(["leader", "--watch", "--json", KEY])
            .stdout(Stdio::piped()),
    );
    let lines = lines_of(&mut watch);
    let line = lines.recv_timeout(WITHIN).expect("a line in time");
    let doc: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(doc["leader"]["term"], term, "{line}");
    assert_eq!(doc["leader"]["value"], "web-1:8080", "{line}");
}

/// Lines of a child's stdout, as they come.
fn lines_of(child: &mut Spawned) -> mpsc::Receiver<String> {
    let out = child.child().stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `lockctl leader --watch`: one line per change seen, a term lower than the last marked
/// `regressed` (a server that had issued tokens far above its clock, restarted without
/// persistence).
#[test]
fn leader_watch_prints_every_change_and_marks_a_regression() {
    let mut server = Server::start();
    let ahead = (common::now_ms() as u64 + 3_600_000) * 1000;
    let _: () = redis::cmd("LOCK.COUNTER")
        .arg(ahead)
        .query(&mut server.conn())
        .expect("LOCK.COUNTER");
    let mut watch = Spawned::new(
        lockctl(&[&server])
            .args(["leader", "--watch", KEY])
            .stdout(Stdio::piped()),
    );
    let lines = lines_of(&mut watch);
    let next = || lines.recv_timeout(WITHIN).expect("a line in time");
    assert_eq!(next(), "no leader");

    let mut a = Spawned::new(&mut elect(&server, "a", "10s", "exec sleep 60"));
    assert!(eventually(WITHIN, || leader(&server).is_some()));
    let mut b = Spawned::new(&mut elect(&server, "b", "10s", "exec sleep 60"));
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), KEY) == 1));
    let (_, term_a) = leader(&server).expect("a leads");
    assert!(next().starts_with(&format!("value=a term={term_a} ")));
    // a's command is stopped: a resigns, b leads in the same step.
    support::send(a.pid(), libc::SIGTERM);
    a.wait_within(WITHIN);
    assert!(eventually(WITHIN, || leader(&server).is_some_and(|(v, _)| v == "b")));
    let (_, term_b) = leader(&server).expect("b leads");
    let line = next();
    assert!(
        line.starts_with(&format!("value=b term={term_b} ")),
        "{line}"
    );
    assert!(!line.ends_with("regressed"), "{line}");
    drop(b.child().kill());
    b.wait_within(WITHIN);

    server.restart();
    let _c = Spawned::new(&mut elect(&server, "c", "10s", "exec sleep 60"));
    assert!(eventually(WITHIN, || leader(&server).is_some()));
    let (_, term_c) = leader(&server).expect("c leads");
    assert!(term_c < term_b);
    let line = loop {
        let line = next();
        if line != "no leader" {
            break line;
        }
    };
    assert_eq!(line.split_whitespace().next(), Some("value=c"), "{line}");
    assert!(line.contains(&format!(" term={term_c} ")), "{line}");
    assert!(line.ends_with(" regressed"), "{line}");
}

/// Three `lockctl elect` processes whose commands write only through `LOCK.FENCED` under their
/// term: the leader killed, a leader stopped past its ttl and then continued, and a leader
/// whose lock an operator broke while its command still ran. The log the commands append to
/// must show one writer at a time: terms never go back, and within a term "+" and "-"
/// alternate. Without fencing (plain APPEND), the stopped or broken leader's late writes would
/// appear after the next leader's, with a lower term.
#[test]
fn elected_commands_never_write_at_once() {
    let server = Server::start();
    let key = "{el}:leader";
    let log = "{el}:log";
    let script = format!(
        "while :; do \
           redis-cli -p {port} LOCK.FENCED '{key}' \"$RELOCK_TOKEN\" APPEND '{log}' \"$RELOCK_TOKEN+,\" >/dev/null; \
           sleep 0.02; \
           redis-cli -p {port} LOCK.FENCED '{key}' \"$RELOCK_TOKEN\" APPEND '{log}' \"$RELOCK_TOKEN-,\" >/dev/null; \
         done",
        port = server.port
    );
    let candidate = |id: &str| {
        let mut cmd = lockctl(&[&server]);
        cmd.args([
            "elect", "--id", id, "--ttl", "2s", "--grace", "1s", key, "--", "sh", "-c",
        ])
        .arg(&script)
        .stderr(Stdio::null());
        Spawned::new(&mut cmd)
    };
    let entries = || -> Vec<(u64, char)> {
        let text: Option<String> = redis::cmd("GET")
            .arg(log)
            .query(&mut server.conn())
            .expect("GET");
        text.unwrap_or_default()
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (term, mark) = e.split_at(e.len() - 1);
                (
                    term.parse().expect("a term"),
                    mark.chars().next().expect("a mark"),
                )
            })
            .collect()
    };
    let current = |server: &Server| {
        support::holder(server, key).map(|(owner, term)| {
            (
                owner
                    .rsplit_once('/')
                    .map_or(String::new(), |(v, _)| v.to_string()),
                term,
            )
        })
    };
    // A term's writes have begun once its entries are in the log.
    let writes_under = |term: u64| eventually(WITHIN, || entries().iter().any(|(t, _)| *t == term));

    let mut a = candidate("a");
    assert!(eventually(WITHIN, || current(&server).is_some()));
    // Queued in this order: b, then c.
    let mut b = candidate("b");
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), key) == 1));
    let mut c = candidate("c");
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), key) == 2));
    let (_, term_a) = current(&server).expect("a leads");
    assert!(writes_under(term_a));

    // 1. The leader killed: its command dies with it (lockctl's watchdog); b leads.
    support::send(a.pid(), libc::SIGKILL);
    a.wait_within(WITHIN);
    assert!(eventually(WITHIN, || current(&server).is_some_and(|(_, t)| t > term_a)));
    let (who, term_b) = current(&server).expect("b leads");
    assert_eq!(who, "b");
    assert!(writes_under(term_b));

    // 2. The leader stopped (lockctl and, by its watchdog, its command) past its ttl: c leads;
    // continued, b's command may write once more before lockctl ends it (exit 76).
    let mut d = candidate("d");
    assert!(eventually(WITHIN, || waiters(&mut server.conn(), key) == 2));
    support::send(b.pid(), libc::SIGSTOP);
    assert!(eventually(WITHIN, || current(&server).is_some_and(|(_, t)| t > term_b)));
    let (who, term_c) = current(&server).expect("c leads");
    assert_eq!(who, "c");
    assert!(writes_under(term_c));
    support::send(b.pid(), libc::SIGCONT);
    assert_eq!(b.wait_within(WITHIN).code(), Some(76));

    // 3. An operator breaks c's lock: d leads at once, while c's command writes on until
    // lockctl's next renewal finds the loss.
    support::force_release(&server, key);
    assert!(eventually(WITHIN, || current(&server).is_some_and(|(_, t)| t > term_c)));
    let (who, term_d) = current(&server).expect("d leads");
    assert_eq!(who, "d");
    assert_eq!(c.wait_within(WITHIN).code(), Some(76));
    assert!(writes_under(term_d));
    support::send(d.pid(), libc::SIGTERM);
    d.wait_within(WITHIN);

    let entries = entries();
    let terms: Vec<u64> = {
        let mut t: Vec<u64> = entries.iter().map(|(t, _)| *t).collect();
        t.dedup();
        t
    };
    assert_eq!(
        terms,
        [term_a, term_b, term_c, term_d],
        "one writer at a time, in term order"
    );
    let mut last: Option<(u64, char)> = None;
    for (term, mark) in &entries {
        if let Some((t, m)) = last {
            if t == *term {
                assert_ne!(m, *mark, "within a term, + and - alternate: {entries:?}");
            }
        }
        last = Some((*term, *mark));
    }
    // How many late writes the deposed leaders' commands made depends on how fast a loaded
    // machine runs them (none, in two runs with a core kept busy): a write under each old term,
    // as a command lockctl has not stopped yet would send it, is refused and leaves no entry.
    let deposed = relock_testkit::info_field(&mut server.conn(), "fenced_stale_total");
    for term in [term_a, term_b, term_c] {
        let late: redis::RedisResult<redis::Value> = redis::cmd("LOCK.FENCED")
            .arg(key)
            .arg(term)
            .arg("APPEND")
            .arg(log)
            .arg(format!("{term}+,"))
            .query(&mut server.conn());
        let e = late.expect_err("a deposed term's write is refused");
        assert!(e.to_string().contains("stale token"), "{e}");
    }
    assert_eq!(
        entries.len(),
        self::entries_len(&server, log),
        "nothing appended"
    );
    eprintln!(
        "{} fenced writes in the log; {deposed} of the deposed leaders' refused as stale",
        entries.len()
    );
}

/// The number of entries in the election test's log.
fn entries_len(server: &Server, log: &str) -> usize {
    let text: Option<String> = redis::cmd("GET")
        .arg(log)
        .query(&mut server.conn())
        .expect("GET");
    text.unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .count()
}

/// With `--cluster`: the election lives on its key's master; the command runs with the term,
/// and `lockctl leader` reads it there.
#[test]
fn elect_and_leader_on_a_cluster() {
    let cluster = relock_testkit::cluster::Cluster::start_with(0);
    let seeds = cluster.urls().join(",");
    let key = "{svc}:leader";
    let master = cluster.node(cluster.owner_of(key).master_port);
    let dir = tempfile::tempdir().expect("dir");
    let term_file = dir.path().join("term");
    let mut elect = support::lockctl_at(&seeds);
    elect
        .args(["--cluster", "elect", "--id", "c1", key, "--", "sh", "-c"])
        .arg(format!(
            "echo \"$RELOCK_TOKEN\" > {}; exec sleep 60",
            term_file.display()
        ))
        .stderr(Stdio::piped());
    let _lead = Spawned::new(&mut elect);
    assert!(eventually(WITHIN, || std::fs::read_to_string(&term_file)
        .is_ok_and(|t| t.ends_with('\n'))));
    let term: u64 = std::fs::read_to_string(&term_file)
        .expect("term")
        .trim()
        .parse()
        .expect("a number");
    let (owner, held) = support::holder(master, key).expect("held on the key's master");
    assert!(owner.starts_with("c1/"), "{owner}");
    assert_eq!(held, term);
    let out = support::lockctl_at(&seeds)
        .args(["--cluster", "leader", key])
        .output()
        .expect("lockctl");
    assert!(
        stdout(&out).starts_with(&format!("value=c1 term={term} ")),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
