//! lockctl says why it lost its lock, from the masters' journals (`LOCK.HISTORY`), and names
//! its process in the owner (the client's part: client/tests/it/loss.rs).
use crate::support;
use relock_testkit as common;

use std::time::Duration;

use common::{eventually, Server};
use support::{lockctl, stderr, Spawned};

const KEY: &str = "jobs:why";
/// Every wait below is for an event; this only bounds a test that went wrong.
const WITHIN: Duration = Duration::from_secs(20);

/// lockctl says why in its message and in its exit line, and names the process in the owner.
#[test]
fn lockctl_says_why_it_lost_the_lock() {
    let server = Server::start();
    // The command says it runs (a file) before the holder is read: on a loaded machine an
    // acquisition whose reply came too late is given back and lockctl asks again under a new
    // owner, so a holder seen before the command runs may be that late grant, not the hold
    // the command runs under.
    let dir = tempfile::tempdir().expect("tempdir");
    let running = dir.path().join("running");
    let mut run = lockctl(&[&server]);
    run.args([
        "--owner-prefix",
        "nightly-report",
        "run",
        "--ttl",
        "3s",
        KEY,
        "--",
        "sh",
        "-c",
        r#"touch "$1" && exec sleep 60"#,
        "sh",
    ])
    .arg(&running)
    .stderr(std::process::Stdio::piped());
    let child = Spawned::new(&mut run);
    let owner = || support::holder(&server, KEY).map(|(o, _)| o);
    assert!(eventually(WITHIN, || running.exists()), "the command runs");
    assert!(owner().is_some(), "held while the command runs");
    let held_by = owner().expect("owner");
    assert!(held_by.starts_with("nightly-report/"), "{held_by}");
    assert_eq!(held_by.len(), "nightly-report/".len() + 32, "{held_by}");
    let mut ops = server.conn();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("ops")
        .query(&mut ops)
        .expect("setname");
    let _: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg(KEY)
        .query(&mut ops)
        .expect("force release");
    // The loss is found at the next renewal (ttl / 3) at the latest.
    let out = child.output();
    let err = stderr(&out);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(
        err.contains(&format!("lock {KEY:?} was force-released on ")),
        "{err}"
    );
    assert!(
        err.contains("by client ") && err.contains("name ops"),
        "{err}"
    );
    assert!(err.contains("reason=forcereleased"), "{err}");
}
