//! The smoke run inside `make test`: the whole benchmark, every case, with a tiny budget against
//! its own servers. Asserts that it completes and writes the table, the JSON and the chart; the
//! numbers themselves are not judged here.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn smoke_run_writes_table_json_and_chart() {
    let out = tempfile::Builder::new()
        .prefix("relock-bench-smoke-")
        .tempdir()
        .expect("temp dir");
    let started = Instant::now();
    let run = Command::new(env!("CARGO_BIN_EXE_relock-bench"))
        .arg("--smoke")
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("run relock-bench");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "relock-bench --smoke failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "smoke run took {:?}",
        started.elapsed()
    );

    let md = std::fs::read_to_string(out.path().join("results.md")).expect("results.md");
    assert!(md.contains("| Case | Measure | relock |"), "{md}");
    for case in [
        "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |", "| 6 |", "| 7 |", "| 8 |", "| 9 |", "| 10 |",
        "| 13 |", "| 14 |", "| 15 |",
    ] {
        assert!(md.contains(case), "no row for case {case} in:\n{md}");
    }
    // The refused rows pre-fill their keys and check every reply; they ran if they are listed.
    for row in [
        "refused acquire/s, pipeline 1 ",
        "refused acquire/s, pipeline 16 ",
    ] {
        assert!(md.contains(row), "no row {row:?} in:\n{md}");
    }
    assert!(md.contains("SMOKE RUN"), "{md}");
    assert!(
        stdout.contains("| Case | Measure | relock |"),
        "table not printed:\n{stdout}"
    );
    for machine in ["CPU:", "cores:", "redis:", "date:"] {
        assert!(md.contains(machine), "no {machine} line in:\n{md}");
    }

    let json = std::fs::read_to_string(out.path().join("results.json")).expect("results.json");
    assert!(
        json.trim_start().starts_with('{') && json.contains("\"rows\""),
        "{json}"
    );

    let svg = std::fs::read_to_string(out.path().join("results.svg")).expect("results.svg");
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "not an SVG"
    );
    assert!(
        svg.contains("Hand-off latency"),
        "chart lacks the hand-off panel"
    );
}
