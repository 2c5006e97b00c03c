//! relock-chaos: many worker processes take one lock (raw `LOCK.WAIT` and relock-client), each
//! records its holds and makes one fenced write per hold, while a nemesis injects faults; a
//! checker then verifies mutual exclusion, token order and fencing (see `history.rs`).
//!
//! ```text
//! relock-chaos [--short] [--out DIR] [--only NAME,NAME...]
//! ```
//! prints a table and writes `DIR/results.md` (default `target/chaos`); exits 1 if a scenario
//! missed what relock claims for it. `relock-chaos worker ...` is the worker process itself.

mod history;
mod run;
mod scenarios;
mod store;
mod worker;

// The servers and waits of the tests' kit.
use relock_testkit as common;

use std::path::PathBuf;
use std::time::Instant;

use run::{Claim, Outcome};
use scenarios::Length;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        match worker::WorkerArgs::from_args(&args[1..]) {
            Some(w) => worker::run(w),
            None => {
                eprintln!("usage: relock-chaos worker ID wait|client URLS_FILE STORE KEY TTL RUN_MS WAIT_REPLICAS");
                std::process::exit(2);
            }
        }
        return;
    }
    let mut short = false;
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/chaos");
    let mut only: Option<Vec<String>> = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--short" => short = true,
            "--out" => out = it.next().map(PathBuf::from).unwrap_or(out),
            "--only" => {
                only = it
                    .next()
                    .map(|s| s.split(',').map(str::to_string).collect())
            }
            _ => {
                eprintln!("usage: relock-chaos [--short] [--out DIR] [--only NAME,NAME...]");
                std::process::exit(2);
            }
        }
    }
    let length = Length {
        run_ms: if short { 2_500 } else { 45_000 },
    };
    let seed = std::env::var("RELOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    fastrand::seed(seed);
    println!(
        "relock-chaos: {} run, {} ms per scenario, nemesis seed {seed} (RELOCK_CHAOS_SEED)",
        if short { "short" } else { "full" },
        length.run_ms
    );
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for (name, scenario) in scenarios::ALL {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let t = Instant::now();
        let outcome = scenario(length);
        println!(
            "  {name}: {} holds, {} violations, {:.1}s",
            outcome.verdict.holds,
            outcome.verdict.violations,
            t.elapsed().as_secs_f64()
        );
        outcomes.push(outcome);
    }
    let table = table(&outcomes);
    println!("\n{table}");
    let report = format!(
        "# relock chaos results\n\n{} run, {} ms per scenario, nemesis seed {seed}, {:.0} s in all.\n\n{table}\n{LEGEND}",
        if short { "Short" } else { "Full" },
        length.run_ms,
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::create_dir_all(&out);
    let path = out.join("results.md");
    match std::fs::write(&path, report) {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    if outcomes.iter().all(Outcome::passed) {
        println!("every scenario met relock's claims");
    } else {
        eprintln!("a scenario missed relock's claims (see the verdict column)");
        std::process::exit(1);
    }
}

const LEGEND: &str = "\
- *holds*: grants recorded; *used*: holds whose fenced write was made within their validity
  (or whose worker died holding, counted as used for its whole validity).
- *violations*: pairs of used holds whose intervals `[grant reply, min(release, validity end)]`
  overlap in real time.
- *backwards*: holds whose token is not above every token granted (reply received) before
  they were requested.
- *stale rejected*: writes whose token was not above the highest accepted so far, and how many
  of them the fenced store rejected; *late*: writes made after the hold's validity (a paused
  holder resuming), and how many were rejected.
- *claim*: `safe` = relock claims mutual exclusion here, violations must be 0;
  `not claimed` = violations are reported, but tokens must never go backwards and the fenced
  store must reject every stale write.
";

fn table(outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "| scenario | claim | faults | holds | used | violations | backwards | writes (accepted) | stale rejected | late (rejected) | errors seen | verdict |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for o in outcomes {
        let v = &o.verdict;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {}/{} | {} ({}) | {} | {} |\n",
            o.name,
            match o.claim {
                Claim::Safe => "safe",
                Claim::NotClaimed => "not claimed",
            },
            o.faults,
            v.holds,
            v.used,
            v.violations,
            v.backwards,
            v.writes,
            v.accepted,
            v.stale_rejected,
            v.stale,
            v.late,
            v.late_rejected,
            o.errors,
            o.verdict_text(),
        ));
    }
    s
}
