//! The lock engine, in pure Rust: no Redis imports, the server behind a [`Host`] trait.
//!
//! - [`engine`]: every decision and its application: grants, releases, renewals, the FIFO
//!   hand-off, serving and revoking waiters, lease-expiry and wait timers, tokens, counters.
//! - [`host`]: what the engine needs from the server (keys, timers, blocked clients, state).
//! - [`hold`]: what each command decides from a lock's state.
//! - [`packed`]: the packed layout of a [`Hold`] (the engine's only `unsafe`).
//! - [`queue`]: the FIFO queue of waiters, with O(1) hand-off and cheap departures.
//! - [`tokens`]: fencing tokens, strictly increasing and floored by the wall clock.
//! - [`args`]: parsing and bounds of command arguments.
//! - [`memory`]: an in-memory host, on which the unit, model and fuzz tests run the engine.
//!
//! The Redis module (`src/redis/`) is the other host: it parses arguments, opens keys, calls
//! the engine and turns its replies into Redis replies.

pub mod args;
pub mod engine;
pub mod errors;
pub mod hold;
pub mod host;
pub mod memory;
pub mod packed;
pub mod queue;
pub mod shared;
pub mod stats;
pub mod tokens;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod model;
#[cfg(test)]
mod shared_tests;

pub use args::ArgError;
pub use engine::{Engine, HolderInfo, Info, Reply};
pub use hold::{Decision, Found, Step};
pub use host::{Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
pub use packed::{Hold, LockMut, LockRef, LockValue, MAX_COUNT};
pub use queue::Queue;
pub use shared::{Holder, Mode, Shared, MAX_LIMIT};
pub use stats::Stats;
pub use tokens::{Clock, SystemClock, Tokens, MAX_TOKEN};
