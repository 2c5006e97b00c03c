//! `scripts/run` (what `make run` starts) serves the module as a new user would try it.
use relock_testkit as common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn run_script_starts_a_server_that_takes_locks() {
    let root = env!("CARGO_MANIFEST_DIR");
    let data = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let mut child = Command::new(format!("{root}/scripts/run"))
        .env("PORT", port.to_string())
        .env("MODULE", common::module_path())
        .env("DATA_DIR", data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start scripts/run");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let up = common::eventually(Duration::from_secs(20), || {
        client
            .get_connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    });
    let result = up.then(|| {
        let mut c = client.get_connection().unwrap();
        redis::cmd("LOCK.ACQUIRE")
            .arg("demo")
            .arg("me")
            .arg(10_000)
            .query::<Option<u64>>(&mut c)
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "scripts/run did not start a server on port {port}");
    let token = result.unwrap().unwrap();
    assert!(
        token.is_some_and(|t| t > 0),
        "LOCK.ACQUIRE demo me 10000 -> {token:?}"
    );
}
