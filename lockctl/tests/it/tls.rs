//! `rediss://` servers: lockctl against a real TLS-enabled redis-server (with the module),
//! certificates made here (a CA, the server's, a client's, and an impostor CA), client
//! certificates required; misconfigurations say why (the client's part: client/tests/it/tls.rs).
use crate::support;

use std::process::Stdio;
use std::time::Duration;

use relock_testkit::tls::{Files, TlsServer};
use support::{holder, lockctl_at, stderr, stdout, Spawned};

const KEY: &str = "tls:deploy";

/// `cmd` (a lockctl) trusting our CA, with a client certificate if given, and a node timeout
/// that a TLS handshake on a busy machine fits in (these tests are not about speed).
fn with_tls(
    mut cmd: std::process::Command,
    files: &Files,
    client: Option<(&str, &str)>,
) -> std::process::Command {
    cmd.args(["--node-timeout", "2s", "--tls-ca", &files.arg("ca.pem")]);
    if let Some((cert, key)) = client {
        cmd.args(["--tls-cert", &files.arg(cert), "--tls-key", &files.arg(key)]);
    }
    cmd
}

/// lockctl over TLS: run (the command sees the token the server granted), info,
/// force-release; a password in the URL works over TLS too.
#[test]
fn lockctl_over_tls_with_a_client_certificate() {
    let files = Files::new();
    let tls = TlsServer::start(&files);
    let client = Some(("client.pem", "client.key"));
    let script = "echo \"$RELOCK_OWNER $RELOCK_TOKEN\"";

    let out = with_tls(lockctl_at(&tls.url()), &files, client)
        .args(["run", KEY, "--", "sh", "-c", script])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{text}");
    assert!(fields[1].parse::<u64>().is_ok(), "{text}");
    assert_eq!(holder(&tls.server, KEY), None, "released");

    // info and force-release through TLS.
    support::acquire_as(&tls.server, KEY, "stuck-worker", 60_000).expect("held");
    let out = with_tls(lockctl_at(&tls.url()), &files, client)
        .args(["info", KEY])
        .output()
        .expect("info");
    assert!(
        stdout(&out).contains("owner=stuck-worker"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = with_tls(lockctl_at(&tls.url()), &files, client)
        .args(["force-release", KEY])
        .output()
        .expect("force-release");
    assert!(stdout(&out).contains("released"), "{}", stderr(&out));
    assert_eq!(holder(&tls.server, KEY), None);

    // A password in the URL (an ACL user here), over TLS.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg(&["on", ">s3cret", "~*", "&*", "+@all"][..])
        .query(&mut tls.server.conn())
        .expect("ACL SETUSER");
    let url = format!("rediss://app:s3cret@127.0.0.1:{}/", tls.tls_port);
    let out = with_tls(lockctl_at(&url), &files, client)
        .args(["run", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let url = format!("rediss://app:wrong@127.0.0.1:{}/", tls.tls_port);
    let out = with_tls(lockctl_at(&url), &files, client)
        .args(["run", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
}

/// What a TLS misconfiguration does. A server certificate the client does not trust fails
/// the handshake: no retry can fix that, so lockctl exits 78 at once, even with an unlimited
/// wait, and says it is TLS. A client certificate the server refuses (or none, where one is
/// required) is refused by TLS 1.3 servers only after the handshake, with the connection
/// closed: lockctl cannot tell that from a network failure, so it is not acquired for now
/// (75), with a hint about the client certificate. Unreadable files and `#insecure` are usage
/// errors.
#[test]
fn tls_misconfigurations_fail_and_say_why() {
    let files = Files::new();
    let tls = TlsServer::start(&files);
    let mut child = Spawned::new(
        lockctl_at(&tls.url())
            .args([
                "--node-timeout",
                "2s",
                "--tls-ca",
                &files.arg("impostor-ca.pem"),
            ])
            .args([
                "--tls-cert",
                &files.arg("client.pem"),
                "--tls-key",
                &files.arg("client.key"),
            ])
            .args(["run", KEY, "--", "true"])
            .stderr(Stdio::piped()),
    );
    let status = child.wait_within(Duration::from_secs(20));
    let err = stderr(&child.output());
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(err.contains("TLS") && err.contains("certificate"), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{}", tls.tls_port)),
        "{err}"
    );
    for (what, client) in [
        ("no client certificate", None),
        (
            "a client certificate of another CA",
            Some(("stranger.pem", "stranger.key")),
        ),
    ] {
        let out = with_tls(lockctl_at(&tls.url()), &files, client)
            .args(["run", "--wait", "0", KEY, "--", "true"])
            .output()
            .expect("lockctl");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{what}: {err}");
        assert!(err.contains("--tls-cert"), "{what}: {err}");
    }
    // A TLS client at a plain-text port: the server takes the handshake for a command and
    // never answers, like a server too slow to: not acquired for now.
    let out = with_tls(
        lockctl_at(&format!("rediss://127.0.0.1:{}/", tls.server.port)),
        &files,
        Some(("client.pem", "client.key")),
    )
    .args(["run", "--wait", "0", KEY, "--", "true"])
    .output()
    .expect("lockctl");
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    for (args, says) in [
        (
            vec!["--tls-ca", "/nonexistent/ca.pem"],
            "cannot read --tls-ca",
        ),
        (vec!["--tls-cert", "/nonexistent/c.pem"], "--tls-key"),
    ] {
        let out = lockctl_at(&tls.url())
            .args(&args)
            .args(["run", KEY, "--", "true"])
            .output()
            .expect("lockctl");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let out = lockctl_at(&format!("rediss://127.0.0.1:{}/#insecure", tls.tls_port))
        .args(["run", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be turned off"),
        "{}",
        stderr(&out)
    );
    let garbage = files.path("garbage.pem");
    std::fs::write(&garbage, b"not a certificate").expect("write");
    let out = lockctl_at(&tls.url())
        .args([
            "--tls-cert",
            &garbage.display().to_string(),
            "--tls-key",
            &garbage.display().to_string(),
        ])
        .args(["run", KEY, "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
