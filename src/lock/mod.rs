//! The lock itself, in pure Rust: no Redis imports, the clock injected.
//!
//! - [`hold`]: a lock's state (`Hold`) and what each command decides from it.
//! - [`tokens`]: fencing tokens, strictly increasing and floored by the wall clock.
//! - [`queue`]: the FIFO queue of waiters, with O(1) hand-off and cheap departures.
//! - [`args`]: parsing and bounds of command arguments.
//!
//! The Redis glue (`commands`, `store`, `waiters`) asks these modules what to do and applies
//! the answer to the keyspace; everything that can be decided without Redis is decided here and
//! unit-tested table-style.

pub mod args;
pub mod hold;
pub mod queue;
pub mod tokens;

#[cfg(test)]
mod model;

pub use args::ArgError;
pub use hold::{Decision, Found, Hold, Step, MAX_COUNT};
pub use queue::Queue;
pub use tokens::{Clock, SystemClock, Tokens, MAX_TOKEN};
