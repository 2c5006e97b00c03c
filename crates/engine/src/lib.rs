//! The lock engine, in pure Rust: no Redis dependency (this crate has none to import), the
//! server behind a [`Host`] trait and the time behind an injected [`Clock`].
//!
//! - [`decide`]: what each command decides from what it finds at a key and in its queue (pure
//!   functions, both modes, table-tested).
//! - [`engine`]: applies the decisions: grants, releases, renewals, the FIFO hand-off, serving
//!   and revoking waiters, lapsed leases, tokens, counters. It owns the parts below.
//! - [`waiters`]: every key's queue, every blocked client's ticket, the answers in flight.
//! - [`schedule`]: every timer and deferred job, behind one host timer, a bounded slice a turn.
//! - [`host`]: what the engine needs from the server (keys, timers, blocked clients, state).
//! - [`reply`]: what the engine answers and what it is asked, as plain data.
//! - [`edit`]: what commands do to one key's holds (refresh, end, describe), as functions.
//! - [`effect`]: what replicas and the AOF receive for each change, and how it is spelled.
//! - [`packed`]: the packed layout of a [`Hold`] (the engine's only `unsafe`).
//! - [`shared`]: the holders of a shared key, with O(log H) lease and order queries.
//! - [`queue`]: the FIFO queue of waiters, with O(1) hand-off and cheap departures.
//! - [`journal`]: the journal of holds that ended other than by their owner (`LOCK.LOG`).
//! - [`contention`]: wait and hold distributions, and the hottest keys (`LOCK.STATS`).
//! - [`watch`]: the journal and the statistics together, as the engine tells them what happened.
//! - [`tokens`]: fencing tokens, strictly increasing and floored by the wall clock.
//! - [`grace`]: the restart grace (`relock.restart-grace-ms`): no new hold until it ends.
//! - [`args`]: parsing of command arguments.
//! - [`bounds`]: the bounds of every field of a lock value, for the parser, the loader and the
//!   encoder alike.
//! - [`memory`]: an in-memory host, on which the unit, model and fuzz tests run the engine.
//!
//! The engine on the in-memory host (feature `sim`), as `LOCK.ACQUIRE`, `LOCK.WAIT` and
//! `LOCK.RELEASE` drive it inside Redis:
//!
//! ```
//! use relock_engine::memory::Sim;
//! use relock_engine::{Outcome, Reply};
//!
//! let mut server = Sim::new(1_795_262_129_362);
//! let Reply::Integer(first) = server.acquire(b"orders:42", b"worker-a", 30_000) else {
//!     panic!("a free key is granted");
//! };
//! let (reply, worker_b) = server.wait(b"orders:42", b"worker-b", 30_000, 5_000);
//! assert_eq!(reply, Reply::Blocked);
//! // The release hands the lock to the waiter in the same step, under a higher token; Redis
//! // then delivers the answer to the blocked client.
//! assert_eq!(server.release(b"orders:42", b"worker-a"), Reply::Integer(0));
//! let answers = server.deliver();
//! assert!(matches!(answers[..], [(c, Outcome::Token(t))] if c == worker_b && t > first));
//! ```
//!
//! The Redis module (the crate `relock`, `src/redis/`, which names this crate `lock`) is the other
//! host: it parses arguments, opens keys, calls the engine and turns its replies into Redis
//! replies. It sets the allocator (Redis's); this crate never names one, so its tests and the
//! fuzz targets run on the system's.

pub use relock_protocol::{args, bounds};
pub mod contention;
pub mod decide;
pub mod edit;
pub mod effect;
pub mod engine;
pub mod errors;
pub mod grace;
pub mod host;
pub mod journal;
#[cfg(any(test, feature = "sim"))]
pub mod memory;
pub mod observers;
pub mod packed;
mod pages;
pub mod queue;
pub mod reply;
pub mod schedule;
pub mod shared;
pub mod stats;
pub mod tokens;
pub mod waiters;
pub mod watch;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod model;
#[cfg(test)]
mod parts_tests;
#[cfg(test)]
mod shared_tests;

pub use args::ArgError;
pub use contention::{HotKey, KeyStats};
pub use effect::{Effect, Word};
pub use engine::{Current, Engine, Fence, HolderInfo, Info, Reply, Request, Wait, WaiterInfo};
pub use errors::{LockError, Refusal};
pub use host::{Blocked, Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
pub use journal::{Entry, Reason, Reasons};
pub use packed::{Hold, LockMut, LockRef, LockValue, MAX_COUNT};
pub use queue::Queue;
pub use shared::{Holder, Mode, Shared, MAX_LIMIT};
pub use stats::Stats;
pub use tokens::{Clock, SystemClock, Tokens, MAX_TOKEN};
pub use watch::{EndedHold, Watch};
