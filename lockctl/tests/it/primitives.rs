//! Beyond one key and one permit, from lockctl against real servers: several keys and several
//! permits of `lockctl run` (the client's part: client/tests/it/primitives.rs).
use crate::support;
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use relock_testkit::ask::info_text as info;

/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// Two lockctl processes take overlapping keys given in opposite orders, many times: each run
/// holds all its keys at once (one token), and none waits forever.
#[test]
fn two_lockctl_processes_in_opposite_orders() {
    const RUNS: usize = 25;
    let server = Server::start();
    let dir = tempfile::tempdir().expect("dir");
    // mkdir is atomic: a second holder of a key would find its directory there.
    let body = format!(
        "set -e; for k in $RELOCK_KEYS; do mkdir {d}/$k; done; \
         for k in $RELOCK_KEYS; do rmdir {d}/$k; done",
        d = dir.path().display()
    );
    let script = |keys: &[&str]| {
        let flags: Vec<String> = keys.iter().map(|k| format!("--key {k}")).collect();
        format!(
            "for i in $(seq {RUNS}); do \"$LOCKCTL\" run --wait 20s {} -- sh -c '{body}' || exit $?; done",
            flags.join(" ")
        )
    };
    let start = |keys: &[&str]| {
        let mut cmd = support::lockctl(&[&server]);
        cmd.env("LOCKCTL", env!("CARGO_BIN_EXE_lockctl"))
            .env("RELOCK_SERVERS", server.url());
        let mut sh = std::process::Command::new("sh");
        sh.arg("-c").arg(script(keys));
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        support::Spawned::new(&mut sh)
    };
    let mut one = start(&["x", "y", "z"]);
    let mut two = start(&["z", "y", "x"]);
    let a = one.wait_within(Duration::from_secs(120));
    let b = two.wait_within(Duration::from_secs(120));
    assert!(a.success() && b.success(), "{a:?} {b:?}");
}

/// `lockctl run` with its output, bounded.
fn lockctl_run(server: &Server, args: &[&str]) -> std::process::Output {
    let mut cmd = support::lockctl(&[server]);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = support::Spawned::new(&mut cmd);
    child.wait_within(WITHIN);
    child.output()
}

#[test]
fn lockctl_runs_with_several_keys_and_several_permits() {
    let server = Server::start();
    // Several keys: one owner, one token, every key in RELOCK_KEYS (sorted, one per line).
    let out = lockctl_run(
        &server,
        &[
            "run",
            "--key",
            "acct:2",
            "--key",
            "acct:1",
            "--",
            "sh",
            "-c",
            "printf '%s|%s|%s' \"$RELOCK_KEYS\" \"$RELOCK_KEY\" \"$RELOCK_TOKEN\"",
        ],
    );
    let text = support::stdout(&out);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let fields: Vec<&str> = text.split('|').collect();
    assert_eq!(fields[0], "acct:1\nacct:2");
    assert_eq!(fields[1], "acct:1");
    assert!(fields[2].parse::<u64>().is_ok(), "{text}");
    assert!(support::holder(&server, "acct:1").is_none(), "released");
    // A key held elsewhere: nothing is taken, exit 75 with --wait 0.
    let held = support::acquire_as(&server, "acct:2", "someone", 60_000);
    assert!(held.is_some());
    let out = lockctl_run(
        &server,
        &[
            "run", "--wait", "0", "--key", "acct:1", "--key", "acct:2", "--", "true",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", support::stderr(&out));
    assert!(
        support::holder(&server, "acct:1").is_none(),
        "all or nothing"
    );
    // Usage errors before any server is asked.
    for args in [
        vec!["run", "--key", "a", "--key", "a", "--", "true"],
        vec!["run", "--shared", "--key", "a", "--key", "b", "--", "true"],
        vec!["run", "--", "true"],
        vec![
            "run",
            "--limit",
            "10",
            "--permits",
            "11",
            "pool",
            "--",
            "true",
        ],
        vec!["run", "--permits", "2", "pool", "--", "true"],
    ] {
        let out = lockctl_run(&server, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            support::stderr(&out)
        );
    }
    // Several permits: 7 of 10 held, 4 more do not fit, 3 do.
    let mut seven = support::lockctl(&[&server]);
    seven.args([
        "run",
        "--limit",
        "10",
        "--permits",
        "7",
        "pool",
        "--",
        "sleep",
        "30",
    ]);
    let _seven = support::Spawned::new(&mut seven);
    assert!(eventually(WITHIN, || info(&server, "pool")
        .is_some_and(|i| i["permits_free"] == "3")));
    let out = lockctl_run(
        &server,
        &[
            "run",
            "--wait",
            "0",
            "--limit",
            "10",
            "--permits",
            "4",
            "pool",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", support::stderr(&out));
    let out = lockctl_run(
        &server,
        &[
            "run",
            "--wait",
            "0",
            "--limit",
            "10",
            "--permits",
            "3",
            "pool",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
}
