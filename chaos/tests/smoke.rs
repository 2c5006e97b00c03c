//! The short chaos run inside `make test`: every process scenario for a couple of seconds and
//! the short subset of the network scenarios (test hosts in network namespaces: root only)
//! for 8 s each. Where relock claims mutual exclusion the run must see 0 violations (and the
//! fenced register no linearizability violation); everywhere tokens must never go backwards
//! and the fenced store must reject every stale write (the binary exits 1 otherwise).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use relock_testkit::eventually;
use relock_testkit::process::is_running;

#[test]
fn short_chaos_run_meets_every_claim() {
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/chaos/short");
    let child = Command::new(env!("CARGO_BIN_EXE_relock-chaos"))
        .arg("--short")
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relock-chaos");
    let pid = child.id();
    let output = child.wait_with_output().expect("run relock-chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "a scenario failed:\n{stdout}");
    let results = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    for name in [
        "pause",
        "kill-client",
        "restart-aof",
        "restart-nopersist",
        "failover-async",
        "failover-wait",
        "redlock-restart",
        "redlock-delayed-restart",
        "redlock-clock-jump",
    ] {
        assert!(results.contains(&format!("| {name} |")), "{name} missing");
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for name in [
        "net-client-partition",
        "net-reply-loss",
        "net-split-wait",
        "net-redlock-minority",
    ] {
        if root {
            assert!(results.contains(&format!("| {name} |")), "{name} missing");
        } else {
            assert!(results.contains(&format!("{name} (needs root")), "{name}");
        }
    }
    // Every test host of the run is gone (it removes its namespaces, links and bridge).
    if root {
        let left = test_hosts(&format!("relock-chaos-{pid}-"));
        assert!(left.is_empty(), "test namespaces left behind: {left:?}");
    }
}

/// A network scenario's run stopped by SIGTERM removes its test hosts before it exits; one
/// stopped by SIGKILL leaves them, its processes die with it (`PR_SET_PDEATHSIG`), and the next
/// run (here `relock-chaos sweep`) removes them.
#[test]
fn killed_runs_leave_no_test_hosts() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: test hosts need root");
        return;
    }
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGKILL, "SIGKILL")] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_relock-chaos"))
            .args(["--only", "net-client-partition", "--net-ms", "60000"])
            .args(["--out", "/tmp/relock-chaos-killed"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run relock-chaos");
        let prefix = format!("relock-chaos-{}-", child.id());
        let hosts = || test_hosts(&prefix).len();
        let pids = || -> Vec<u32> {
            test_hosts(&prefix)
                .iter()
                .flat_map(|ns| pids_in(ns))
                .collect()
        };
        let pids_in_hosts = || pids().len();
        // Up: five hosts and the store's, a server, the store and four workers in them.
        assert!(
            eventually(Duration::from_secs(60), || hosts() >= 6
                && pids_in_hosts() >= 6),
            "the run made no test hosts in 60 s"
        );
        let started = pids();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().expect("wait");
        assert!(!status.success(), "{name}: {status}");
        if sig == libc::SIGKILL {
            assert!(
                eventually(Duration::from_secs(20), || pids_in_hosts() == 0),
                "processes outlived the killed run"
            );
            assert_eq!(hosts(), 6, "a SIGKILLed run cannot remove its hosts");
            let swept = Command::new(env!("CARGO_BIN_EXE_relock-chaos"))
                .arg("sweep")
                .output()
                .expect("sweep");
            assert!(swept.status.success());
        }
        assert_eq!(hosts(), 0, "{name}: test hosts left behind");
        // Nothing the run started in its hosts (servers, the store, workers) outlives it.
        assert_all_exit(&started, name);
    }
}

/// Fails unless every one of `pids` has exited within 20 s, naming the ones left.
fn assert_all_exit(pids: &[u32], run: &str) {
    let left = || -> Vec<u32> {
        pids.iter()
            .copied()
            .filter(|p| is_running(*p as i32))
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(20), || left().is_empty()),
        "{run}: processes of the run left: {:?}",
        left()
    );
}

/// A process scenario's run stopped by SIGTERM kills what it started outside test hosts (its
/// redis-servers, the fenced store, its workers) before it exits: a signal's exit runs no
/// destructor, so without that they would be left running.
#[test]
fn a_stopped_run_leaves_no_servers() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_relock-chaos"))
        .args([
            "--only",
            "failover-wait",
            "--out",
            "/tmp/relock-chaos-stopped",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run relock-chaos");
    // Up: the master, its replica, the store and four workers.
    let mut started = Vec::new();
    assert!(
        eventually(Duration::from_secs(60), || {
            started = children_of(child.id());
            started.len() >= 7
        }),
        "the run started {} processes in 60 s",
        started.len()
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert!(!status.success(), "{status}");
    assert_all_exit(&started, "the stopped run");
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().nth(1))
                    == Some(&pid.to_string())
            })
        })
        .collect()
}

/// The network namespaces whose names start with `prefix`.
fn test_hosts(prefix: &str) -> Vec<String> {
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The processes in network namespace `ns` (none once it is gone).
fn pids_in(ns: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}
