//! Shared holds from lockctl against real servers: `--shared` and `--limit` runs, refusals,
//! `lockctl info` listing every holder (the client's part: client/tests/it/shared.rs).
use crate::support;
use relock_testkit as common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use common::{eventually, Server};
use relock_client::{Error, Mode};
use relock_testkit::ask::holders;
use relock_testkit::ask::info_text as info;
use relock_testkit::client::patient_client;
use support::{lockctl, lockctl_at};

const KEY: &str = "catalog";

/// `calls` of `INFO commandstats` for every `lock.*` command together.
fn lock_calls(server: &Server) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_lock."))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_over_independent_masters_is_refused_before_any_server_is_asked() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let relock = patient_client(&servers);
    let err = relock.with_mode(Mode::limited(2)).err().expect("unsound");
    assert!(
        matches!(
            err,
            Error::UnsoundSemaphore {
                limit: 2,
                masters: 3
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("{A,B}, {B,C} and {A,C}"), "{err}");
    assert!(matches!(
        relock.with_mode(Mode::limited(0)),
        Err(Error::InvalidLimit(0))
    ));
    for s in &servers {
        assert_eq!(lock_calls(s), 0, "a server was asked");
    }
    // lockctl says so too, with a usage error.
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let out = lockctl_at(&urls.join(","))
        .args(["run", "--limit", "2", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Redis Cluster"), "{stderr}");
    for s in &servers {
        assert_eq!(lock_calls(s), 0, "lockctl asked a server");
    }
}

/// Ten `lockctl run --limit 3` at once: every command runs, never more than three at a time.
/// Each command writes its start and end times (ns) to a file of its own.
#[test]
fn lockctl_limit_runs_at_most_n_commands_at_once() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "f={}/run-$$; echo start $(date +%s%N) > $f; sleep 0.5; echo end $(date +%s%N) >> $f",
        dir.path().display()
    );
    let children: Vec<_> = (0..10)
        .map(|_| {
            lockctl(&[&server])
                .args([
                    "run", "--limit", "3", "--wait", "120s", KEY, "--", "sh", "-c", &script,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn lockctl")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // (time, +1 for a start / -1 for an end); an end sorts before a start at the same time.
    let mut events: Vec<(u128, i32)> = Vec::new();
    let mut runs = 0;
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        let times: HashMap<&str, u128> = text
            .lines()
            .filter_map(|l| {
                let (what, at) = l.split_once(' ')?;
                Some((what, at.trim().parse().ok()?))
            })
            .collect();
        let (Some(&start), Some(&end)) = (times.get("start"), times.get("end")) else {
            panic!("a run did not finish: {text:?}");
        };
        events.push((start, 1));
        events.push((end, -1));
        runs += 1;
    }
    assert_eq!(runs, 10, "every command ran");
    events.sort();
    let (mut running, mut most) = (0, 0);
    for (_, change) in events {
        running += change;
        most = most.max(running);
    }
    assert!(most <= 3, "{most} commands ran at once under --limit 3");
    assert!(
        most >= 2,
        "the runs never overlapped: is --limit shared at all?"
    );
    assert_eq!(info(&server, KEY), None);
}

/// `lockctl info` shows the mode and every holder; `force-release KEY OWNER` removes one.
#[test]
fn lockctl_info_lists_every_holder() {
    let server = Server::start();
    let mut c = server.conn();
    let mut tokens = Vec::new();
    for owner in ["reader-1", "reader-2"] {
        let token: u64 = redis::cmd("LOCK.ACQUIRE")
            .arg(KEY)
            .arg(owner)
            .arg(60_000)
            .arg("SHARED")
            .arg("LIMIT")
            .arg(4)
            .query(&mut c)
            .expect("LOCK.ACQUIRE SHARED");
        tokens.push(token);
    }
    let out = lockctl(&[&server])
        .args(["info", KEY])
        .output()
        .expect("lockctl info");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let node = format!("127.0.0.1:{}\t", server.port);
    assert!(lines.iter().all(|l| l.starts_with(&node)), "{text}");
    assert!(
        lines[0].contains("mode=shared limit=4 holders=2 "),
        "{text}"
    );
    assert!(
        lines[1].contains(&format!(
            "holder owner=reader-1 token={} count=1 ttl_ms=",
            tokens[0]
        )),
        "{text}"
    );
    assert!(
        lines[2].contains(&format!(
            "holder owner=reader-2 token={} count=1 ttl_ms=",
            tokens[1]
        )),
        "{text}"
    );

    let out = lockctl(&[&server])
        .args(["force-release", KEY, "reader-1"])
        .output()
        .expect("lockctl force-release");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("released reader-1's hold"));
    assert_eq!(holders(&mut server.conn(), KEY).len(), 1);
    let out = lockctl(&[&server])
        .args(["info", KEY])
        .output()
        .expect("lockctl info");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("holders=1") && text.contains("owner=reader-2"),
        "{text}"
    );
    assert!(!text.contains("reader-1"), "{text}");
}

/// `lockctl run --shared`: shared runs go on together; the command sees its token.
#[test]
fn lockctl_shared_runs_overlap() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("both");
    // The first waits until the second is inside too, which only shared holds allow.
    let first = lockctl(&[&server])
        .args(["run", "--shared", "--wait", "60s", KEY, "--", "sh", "-c"])
        .arg(format!(
            "i=0; while [ ! -e {0} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; [ -e {0} ]",
            marker.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(eventually(Duration::from_secs(30), || holders(
        &mut server.conn(),
        KEY
    )
    .len()
        == 1));
    let second = lockctl(&[&server])
        .args(["run", "--shared", "--wait", "0", KEY, "--", "sh", "-c"])
        .arg(format!(
            "[ -n \"$RELOCK_TOKEN\" ] && touch {}",
            marker.display()
        ))
        .output()
        .expect("second run");
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let first = first.wait_with_output().expect("first run");
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // An exclusive run on a shared key it could not wait for: not acquired.
    let mut c = server.conn();
    let _: u64 = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg("reader")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .expect("LOCK.ACQUIRE SHARED");
    let out = lockctl(&[&server])
        .args(["run", "--wait", "0", KEY, "--", "true"])
        .output()
        .expect("exclusive run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("shared by 1 holder"), "{stderr}");
}
