//! Connections that die silently (half-open TCP: a crashed host, a dropped NAT entry, a stuck
//! middlebox) while lockctl waits in `LOCK.WAIT` or renews, through a loopback proxy that stops
//! forwarding without closing anything (issue 19, problem 6). The client's part:
//! client/tests/it/halfopen.rs.
use crate::support;
use relock_testkit as common;

use std::process::Stdio;
use std::time::Duration;

use common::{eventually, Server};
use support::proxy::Proxy;
use support::{acquire_as, calls, holder, lockctl_at, release_as, stderr, Spawned};

const KEY: &str = "silent";

/// lockctl waits on one server; its connections go silent; the lock is freed (and so granted
/// to the silent waiting connection): lockctl notices within the documented bound (the
/// server is asked every second whether the wait is still blocked; an answer that does not
/// arrive within the node timeout means the connection died), waits again on a new
/// connection, gets the grant it never received, and runs its command.
#[test]
fn lockctl_waiting_on_a_silent_connection_gets_the_lock_once_free() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(500);
    // What the client documents (about 1 s + 2 x the node timeout), doubled for a machine
    // whose other core is busy and whose timers may fire late.
    let notice_within = (Duration::from_secs(1) + NODE_TIMEOUT * 2) * 2;
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    acquire_as(&server, KEY, "holder", 60_000).expect("held");
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["--node-timeout", "500ms", "run", "--wait", "60s", KEY])
            .args(["--", "sh", "-c"])
            .arg(format!("echo $RELOCK_OWNER > {}", ran.display()))
            .stderr(Stdio::piped()),
    );
    assert!(eventually(
        Duration::from_secs(20),
        || relock_testkit::info_field(&mut server.conn(), "waiters") == 1
    ));
    let waits = calls(&server, "lock.wait");
    proxy.silence_open_connections();
    release_as(&server, KEY, "holder");
    let freed = std::time::Instant::now();
    // The wait again, on a new connection, is how the server sees that lockctl noticed.
    assert!(
        eventually(Duration::from_secs(30), || calls(&server, "lock.wait")
            > waits),
        "lockctl never waited again"
    );
    let noticed = freed.elapsed();
    let status = lockctl.wait_within(Duration::from_secs(20));
    let took = freed.elapsed();
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(ran.exists(), "the command did not run: {}", stderr(&out));
    eprintln!(
        "half-open wait, one server: noticed {noticed:?} and the command ran {took:?} after \
         the lock was freed"
    );
    assert!(
        noticed < notice_within,
        "noticed only after {noticed:?} (bound {notice_within:?})"
    );
    assert!(eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()));
}

/// The server stops answering on every connection, old and new, while lockctl waits; once it
/// answers again (on new connections only: the old ones stay dead), the wait goes on and gets
/// the lock.
#[test]
fn lockctl_waits_through_a_server_that_stopped_answering() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    acquire_as(&server, KEY, "holder", 60_000).expect("held");
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["run", "--wait", "60s", KEY, "--", "true"])
            .stderr(Stdio::piped()),
    );
    assert!(eventually(
        Duration::from_secs(20),
        || relock_testkit::info_field(&mut server.conn(), "waiters") == 1
    ));
    proxy.silence_all();
    release_as(&server, KEY, "holder");
    // The server stays silent for 3 s, a stall the test imposes: the wait outlives it.
    common::wait_out_ttl(Duration::from_secs(3));
    assert!(lockctl.try_status().is_none(), "gave up a 60 s wait");
    proxy.speak();
    let spoke = std::time::Instant::now();
    let status = lockctl.wait_within(Duration::from_secs(30));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    eprintln!(
        "half-open wait, server silent for 3 s: the command ran {:?} after it answered again",
        spoke.elapsed()
    );
}

/// The connection lockctl renews on goes silent while its command runs (the server still
/// reachable on new connections): a renewal that times out drops it, the next one connects
/// again, and the lock is kept (before, every renewal after that went to the silent
/// connection and timed out until the lock was lost).
#[test]
fn lockctl_renews_through_a_connection_that_went_silent() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let (started, stop) = (dir.path().join("started"), dir.path().join("stop"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        stop.display()
    );
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args([
                "--node-timeout",
                "500ms",
                "run",
                "--ttl",
                "3s",
                KEY,
                "--",
                "sh",
                "-c",
            ])
            .arg(&script)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || started.exists()));
    let (owner, token) = holder(&server, KEY).expect("held");
    proxy.silence_open_connections();
    let renewed = relock_testkit::info_field(&mut server.conn(), "renewed_total");
    // Two ttls of renewals (one every ttl / 3), each of which can reach the server only on a
    // new connection, the lock held by the same owner all along.
    let silenced = std::time::Instant::now();
    let renewed_six_times = eventually(Duration::from_secs(60), || {
        assert!(
            lockctl.try_status().is_none(),
            "lockctl ended {:?} after its connection went silent",
            silenced.elapsed()
        );
        assert_eq!(
            holder(&server, KEY),
            Some((owner.clone(), token)),
            "the lock was lost {:?} after its connection went silent",
            silenced.elapsed()
        );
        relock_testkit::info_field(&mut server.conn(), "renewed_total") >= renewed + 6
    });
    assert!(
        renewed_six_times,
        "{} renewals in a minute",
        relock_testkit::info_field(&mut server.conn(), "renewed_total") - renewed
    );
    std::fs::write(&stop, b"").expect("stop");
    let status = lockctl.wait_within(Duration::from_secs(20));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(
        eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()),
        "released"
    );
}
