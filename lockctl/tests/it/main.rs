//! lockctl's integration tests: one binary, one module per concern (issue 32). Each linked
//! test binary costs a link of relock-client, redis-rs, tokio, rustls, ratatui and hyper with
//! debug info; one binary links them once. Run a concern with `cargo test -p lockctl --test it
//! jobs::`.
//!
//! Every test starts its own servers and lockctl processes (relock-testkit: `Server`,
//! `Cluster`, the proxies, `process::Spawned`), on ports the kernel picks, and changes no
//! process-wide state (no environment variable, signal handler or working directory): what a
//! test sets, it sets on the `Command` it runs.

mod support;

mod attack;
mod cluster;
mod elect;
mod halfopen;
mod jobs;
mod lockctl;
mod loss;
mod ops;
mod primitives;
mod sentinel;
mod shared;
mod tls;

/// Not a test of its own: the command of the signal and job-control tests
/// ([`relock_testkit::process::Counter`] runs this binary with `signal_counter --exact`).
#[test]
fn signal_counter() {
    relock_testkit::process::signal_counter_main();
}
