//! relock-chaos: many worker processes take one lock (raw `LOCK.WAIT` and relock-client), each
//! records its holds and makes one fenced write per hold, while a nemesis injects faults; a
//! checker then verifies mutual exclusion, token order and fencing (see `history.rs`).
//!
//! ```text
//! relock-chaos [--short] [--out DIR] [--only NAME,NAME...] [--net-ms MS]
//! ```
//! prints a table and writes `DIR/results.md` (default `target/chaos`); exits 1 if a scenario
//! missed what relock claims for it. `relock-chaos worker ...` is the worker process itself.

mod delay;
mod history;
mod net;
mod netscenarios;
mod register;
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
    if args.first().map(String::as_str) == Some("sweep") {
        // What a killed run left: its namespaces, links and bridge (every run does this first).
        println!(
            "removed {} test host(s) of runs that are gone",
            net::sweep()
        );
        return;
    }
    if args.first().map(String::as_str) == Some("delay") {
        std::process::exit(delay::main(&args[1..]));
    }
    net::install_cleanup_on_signals();
    let mut short = false;
    let mut net_ms: Option<u64> = None;
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/chaos");
    let mut only: Option<Vec<String>> = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--short" => short = true,
            "--out" => out = it.next().map(PathBuf::from).unwrap_or(out),
            "--net-ms" => net_ms = it.next().and_then(|v| v.parse().ok()),
            "--only" => {
                only = it
                    .next()
                    .map(|s| s.split(',').map(str::to_string).collect())
            }
            _ => {
                eprintln!(
                    "usage: relock-chaos [--short] [--out DIR] [--only NAME,NAME...] [--net-ms MS]"
                );
                std::process::exit(2);
            }
        }
    }
    let length = Length {
        run_ms: if short { 2_500 } else { 45_000 },
        net_ms: net_ms.unwrap_or(if short { 8_000 } else { 60_000 }),
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
    let mut skipped = Vec::new();
    // The network scenarios need root and nftables: without them they are listed as skipped.
    let net = net::available();
    if net.is_ok() {
        let swept = net::sweep();
        if swept > 0 {
            println!("removed {swept} test host(s) left by runs that are gone");
        }
    }
    let chosen = scenarios::ALL.iter().chain(
        netscenarios::ALL
            .iter()
            .filter(|(name, _)| !short || netscenarios::SHORT.contains(name)),
    );
    for (name, scenario) in chosen {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        if let (true, Err(why)) = (name.starts_with("net-"), &net) {
            println!("  {name}: skipped ({why})");
            skipped.push(format!("{name} ({why})"));
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
    let mut table = table(&outcomes);
    if !skipped.is_empty() {
        table.push_str(&format!("\nSkipped: {}.\n", skipped.join(", ")));
    }
    println!("\n{table}");
    let report = format!(
        "# relock chaos results\n\n{} run, {} ms per process scenario and {} ms per network scenario, nemesis seed {seed}, {:.0} s in all; {}.\n\n{table}\n{LEGEND}",
        if short { "Short" } else { "Full" },
        length.run_ms,
        length.net_ms,
        started.elapsed().as_secs_f64(),
        machine(),
    );
    let _ = std::fs::create_dir_all(&out);
    let path = out.join("results.md");
    match std::fs::write(&path, report) {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    if let Some(only) = &only {
        let known: Vec<&str> = scenarios::ALL
            .iter()
            .chain(netscenarios::ALL)
            .map(|(n, _)| *n)
            .collect();
        let unknown: Vec<&String> = only
            .iter()
            .filter(|n| !known.contains(&n.as_str()))
            .collect();
        if !unknown.is_empty() {
            eprintln!(
                "no such scenario: {unknown:?} (known: {})",
                known.join(", ")
            );
            std::process::exit(2);
        }
    }
    if outcomes.is_empty() {
        eprintln!("no scenario ran");
        std::process::exit(1);
    }
    if outcomes.iter().all(Outcome::passed) {
        println!("every scenario met relock's claims");
    } else {
        eprintln!("a scenario missed relock's claims (see the verdict column)");
        std::process::exit(1);
    }
}

/// The machine a report was made on: cores, kernel, date.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cores} cores, Linux {}, {date}", kernel.trim())
}

const LEGEND: &str = "\
- *holds*: grants recorded; *used*: holds whose fenced write was made within their validity
  (or whose worker died holding, counted as used for its whole validity).
- *violations*: used holds that began while another used hold's interval `[grant reply,
  min(release, validity end)]` was still open (for a semaphore of n permits: while n were);
  *most at once*: the most used holds open at one instant.
- *losses (late) / late acts*: holds the client signalled lost (a leader's guard), how many of
  those signals came after the validity they ended, and how many times a leader acted after its
  validity (it missed the signal).
- *backwards*: used holds whose token is not above every used hold's token granted (reply
  received) before they were requested, plus used holds that repeat another's token (two
  leaders of one term). Unused grants do not count: in a split, the minority master's grants
  that `WAIT` could not confirm may repeat the new master's clock-floor token of the same ms.
- *stale rejected*: writes whose token was not above the highest accepted so far, and how many
  of them the fenced store rejected (a semaphore's holders overlap by design, so theirs are
  stale whenever a later holder wrote first); *late*: writes made after the hold's validity (a paused
  holder resuming), and how many were rejected.
- *register ops (violations)*: writes and reads of the fenced register (`LOCK.FENCED ... SET`
  / `GET`, plus one read at the end), and the operations that break linearizability with
  writes in token order (`register.rs`): a stale read, a lost acknowledged write...
- *claim*: `safe` = relock claims mutual exclusion here, violations must be 0;
  `not claimed` = violations are reported, but tokens must never go backwards and the fenced
  store must reject every stale write; `split brain` = two masters serve at once: nothing is
  claimed (the two masters' tokens may go backwards too), the row shows what happens.
";

fn table(outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "| scenario | claim | faults | holds | used | violations | most at once | losses (late) / late acts | backwards | writes (accepted) | stale rejected | late (rejected) | register ops (violations) | errors seen | verdict |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for o in outcomes {
        let v = &o.verdict;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) / {} | {} | {} ({}) | {}/{} | {} ({}) | {} | {} | {} |\n",
            o.name,
            match o.claim {
                Claim::Safe => "safe",
                Claim::NotClaimed => "not claimed",
                Claim::SplitBrain => "split brain",
            },
            o.faults,
            v.holds,
            v.used,
            v.violations,
            v.max_concurrent,
            v.losses,
            v.late_losses,
            v.late_acts,
            v.backwards + v.duplicates,
            v.writes,
            v.accepted,
            v.stale_rejected,
            v.stale,
            v.late,
            v.late_rejected,
            o.register.as_ref().map_or("-".to_string(), |r| format!(
                "{} ({})",
                r.writes + r.reads,
                r.violations
            )),
            o.errors,
            o.verdict_text(),
        ));
    }
    s
}
