//! relock-client's integration tests: one binary, one module per concern (issue 32). Each
//! linked test binary costs a link of the client, redis-rs, tokio and rustls with debug info;
//! one binary links them once. Run a concern with `cargo test -p relock-client --test it
//! redlock::`.
//!
//! Every test starts its own servers (relock-testkit: `Server`, `Cluster`, the proxies, the
//! processes), on ports the kernel picks, and changes no process-wide state (no environment
//! variable, signal handler or working directory), so that the concerns share one process.

mod badreplies;
#[cfg(feature = "cluster")]
mod cluster;
mod elections;
mod faults;
mod halfopen;
mod loss;
mod primitives;
mod redlock;
#[cfg(feature = "sentinel")]
mod sentinel;
mod shared;
#[cfg(feature = "tls")]
mod tls;
