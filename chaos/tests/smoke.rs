//! The short chaos run inside `make test`: every scenario for a couple of seconds. Where relock
//! claims mutual exclusion the run must see 0 violations; everywhere tokens must never go
//! backwards and the fenced store must reject every stale write (the binary exits 1 otherwise).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn short_chaos_run_meets_every_claim() {
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/chaos/short");
    let output = Command::new(env!("CARGO_BIN_EXE_relock-chaos"))
        .arg("--short")
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run relock-chaos");
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
}
