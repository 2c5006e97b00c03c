//! One version everywhere: the Python and Node packages and the changelog say the workspace
//! version that Cargo gives the module, relock-client and lockctl (`scripts/dist-version check`),
//! and the loaded module reports it (`MODULE LIST` `ver`, `INFO relock` `relock_version`).
use relock_testkit as common;

use std::process::Command;

use common::Server;

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn every_package_and_the_changelog_say_the_workspace_version() {
    let root = env!("CARGO_MANIFEST_DIR");
    let printed = Command::new("python3")
        .arg(format!("{root}/scripts/dist-version"))
        .output()
        .expect("python3 scripts/dist-version");
    assert_eq!(String::from_utf8_lossy(&printed.stdout).trim(), VERSION);
    let check = Command::new("python3")
        .arg(format!("{root}/scripts/dist-version"))
        .arg("check")
        .output()
        .expect("python3 scripts/dist-version check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn the_loaded_module_reports_the_workspace_version() {
    let server = Server::start();
    let mut c = server.conn();
    let modules: Vec<Vec<redis::Value>> = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let ver = modules
        .iter()
        .find_map(|fields| {
            let pairs: Vec<String> = fields
                .iter()
                .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                .collect();
            let name = pairs.iter().position(|f| f == "name")?;
            (pairs.get(name + 1)? == "relock")
                .then(|| {
                    let ver = pairs.iter().position(|f| f == "ver")?;
                    pairs.get(ver + 1)?.parse::<i64>().ok()
                })
                .flatten()
        })
        .expect("MODULE LIST has relock with a ver");
    let numbers: Vec<i64> = VERSION
        .split(['-', '+'])
        .next()
        .unwrap()
        .split('.')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(ver, numbers[0] * 10000 + numbers[1] * 100 + numbers[2]);

    let info: String = redis::cmd("INFO").arg("relock").query(&mut c).unwrap();
    assert!(
        info.lines()
            .any(|line| line.trim() == format!("relock_version:{VERSION}")),
        "INFO relock has no relock_version:{VERSION}:\n{info}"
    );
}
