//! The `lockctl` binary against real servers.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Server;

const KEY: &str = "deploy";

fn lockctl(servers: &[&Server]) -> Command {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.env("RELOCK_SERVERS", urls.join(","))
        .env_remove("RELOCK_LOG")
        .stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run lockctl")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn acquire_as(server: &Server, owner: &str, ttl_ms: u64) -> u64 {
    let token: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg(owner)
        .arg(ttl_ms)
        .query(&mut server.conn())
        .expect("LOCK.ACQUIRE");
    token.expect("granted")
}

fn lock_owner(server: &Server) -> Option<String> {
    let info: Option<Vec<redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(KEY)
        .query(&mut server.conn())
        .expect("LOCK.INFO");
    info.map(|fields| redis::from_redis_value(&fields[1]).expect("owner"))
}

#[test]
fn passes_the_exit_code_through_and_releases() {
    let server = Server::start();
    let out = run(lockctl(&[&server]).args(["run", KEY, "--", "sh", "-c", "exit 7"]));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let out = run(lockctl(&[&server]).args(["run", KEY, "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lock_owner(&server), None, "released after the command");
}

#[test]
fn gives_the_command_key_owner_and_token() {
    let server = Server::start();
    let out = run(lockctl(&[&server]).args([
        "run",
        KEY,
        "--",
        "sh",
        "-c",
        "echo $RELOCK_KEY $RELOCK_OWNER $RELOCK_TOKEN; redis-cli -p $PORT LOCK.INFO $RELOCK_KEY || true",
    ])
    .env("PORT", server.port.to_string()));
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let first: Vec<&str> = lines.next().expect("env line").split(' ').collect();
    assert_eq!(first.len(), 3, "{stdout}");
    assert_eq!(first[0], KEY);
    assert_eq!(first[1].len(), 36, "owner is a UUID: {stdout}");
    let token: u64 = first[2].parse().expect("numeric token");
    assert!(token > 0);
    // While the command ran, the server saw that owner and token.
    let rest: Vec<&str> = lines.collect();
    if rest.len() >= 4 {
        assert_eq!(rest[1], first[1], "{stdout}");
        assert_eq!(rest[3], first[2], "{stdout}");
    }
}

#[test]
fn several_masters_give_per_master_tokens() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let out = run(lockctl(&refs).args([
        "run",
        KEY,
        "--",
        "sh",
        "-c",
        "echo $RELOCK_TOKEN; echo $RELOCK_TOKENS",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let tokens: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(tokens.len(), 3, "{stdout}");
    let first_granted = tokens.iter().find(|t| !t.is_empty()).expect("a token");
    assert_eq!(lines[0], *first_granted);
}

#[test]
fn exits_75_when_the_lock_is_held() {
    let server = Server::start();
    acquire_as(&server, "someone-else", 30_000);

    let started = Instant::now();
    let out = run(lockctl(&[&server]).args(["run", "--wait", "0", KEY, "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("someone-else"),
        "says who holds it: {}",
        stderr(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    let out = run(lockctl(&[&server]).args(["run", "--wait", "200ms", KEY, "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("someone-else"), "{}", stderr(&out));
    assert_eq!(lock_owner(&server).as_deref(), Some("someone-else"));
}

#[test]
fn exits_75_without_a_quorum_and_names_the_dead_masters() {
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let dead_port = servers[1].port;
    let other_dead = servers[2].port;
    servers[1].kill();
    servers[2].kill();
    let refs: Vec<&Server> = servers.iter().collect();
    let out = run(lockctl(&refs).args(["run", "--wait", "0", KEY, "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&dead_port.to_string()) && err.contains(&other_dead.to_string()),
        "{err}"
    );
}

#[test]
fn waits_for_the_holder_then_runs() {
    let server = Server::start();
    acquire_as(&server, "batch-job", 1_500);
    let started = Instant::now();
    let out = run(lockctl(&[&server]).args(["run", "--wait", "20s", KEY, "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        stderr(&out).contains("batch-job"),
        "says who it waits for: {}",
        stderr(&out)
    );
}

#[test]
fn exits_76_when_the_lock_is_lost() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!("touch {}; exec sleep 30", started.display());
    let mut child = lockctl(&[&server])
        .args([
            "run", "--ttl", "1s", "--grace", "5s", KEY, "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockctl");
    // Break the lock only once the command runs under it: broken earlier (between lockctl's
    // grant and its first renewal), lockctl rightly takes the lock again before starting it.
    assert!(common::eventually(Duration::from_secs(10), || started
        .exists()
        && lock_owner(&server).is_some()));
    let _: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg(KEY)
        .query(&mut server.conn())
        .expect("force release");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lockctl did not stop after the lock was lost");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    assert_eq!(status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
}

#[test]
fn concurrent_runs_on_one_key_never_interleave() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo start >> {0}; sleep 0.3; echo end >> {0}",
        log.display()
    );
    let children: Vec<_> = (0..3)
        .map(|_| {
            lockctl(&[&server])
                .args(["run", "--wait", "30s", KEY, "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        ["start", "end", "start", "end", "start", "end"],
        "interleaved runs"
    );
}

#[test]
fn info_and_force_release_for_operators() {
    let server = Server::start();
    let token = acquire_as(&server, "stuck-worker", 60_000);

    let out = run(lockctl(&[&server]).args(["info", KEY]));
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("owner=stuck-worker"), "{stdout}");
    assert!(stdout.contains(&format!("token={token}")), "{stdout}");
    assert!(
        stdout.contains(&format!("127.0.0.1:{}", server.port)),
        "{stdout}"
    );

    let out = run(lockctl(&[&server]).args(["force-release", KEY]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("released"));
    assert_eq!(lock_owner(&server), None);

    let out = run(lockctl(&[&server]).args(["info", KEY]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("not locked"));
}
