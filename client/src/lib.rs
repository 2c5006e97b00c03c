//! A thin async client for **relock**, the Redis module with native `LOCK.*` commands.
//!
//! One API covers a single server (plain locking) and N independent masters (the Redlock
//! algorithm, with a quorum of N / 2 + 1):
//!
//! - every master is asked concurrently, each bounded by [`Options::node_timeout`], and a
//!   round returns as soon as a quorum is won or lost;
//! - the validity of a lock is `ttl - elapsed - drift` (drift = 1 % of ttl + 2 ms), computed
//!   with checked arithmetic and exposed as an instant, [`Lock::valid_until`];
//! - a failed round is released on every master at once, and retried after a random pause;
//!   an error that retrying cannot fix (the module missing, a refused login, a key of another
//!   type: [`NodeFailure::is_permanent`]) fails at once instead ([`Error::Permanent`]);
//! - [`Relock::acquire_wait`] waits with `LOCK.WAIT` instead of polling;
//! - [`Relock::with_lock`] and [`LockGuard`] renew in the background and tell the holder when
//!   the lock is lost, no later than its validity's end; errors name the master that failed
//!   ([`NodeError`]);
//! - [`Relock::cluster`] locks on a Redis Cluster instead (each lock on its key's master,
//!   redirections followed, renewals and releases following an automatic failover to the
//!   promoted replica, `LOCK.WAIT` on a connection to the key's master);
//! - ttls, wait limits and option timeouts are checked or clamped in one place, [`limits`];
//!   one server named twice in a Redlock list is refused ([`Error::DuplicateServer`]);
//! - [`Options::replica_acks`] (default 0, off) makes an acquire or extend count only once that
//!   many replicas acknowledged it (`WAIT`), per master, in every mode. See docs/deployment.md.
//! - [`Relock::with_mode`] shares a key instead of holding it alone ([`Mode`], default
//!   [`Mode::Exclusive`]): [`Mode::shared`] is the read side of a read-write lock (sound over a
//!   quorum too), [`Mode::limited`] a counting semaphore (one server or a Redis Cluster only:
//!   over independent masters it is refused, [`Error::UnsoundSemaphore`]). Each holder renews
//!   and releases its own hold; [`Relock::holders`] lists them. [`Relock::with_permits`] takes
//!   several permits of a semaphore at once; [`Lock::downgrade`] turns a write lock into a
//!   read lock without letting a writer in between.
//! - [`Relock::acquire_all`] takes several keys all or nothing with one token
//!   (`LOCK.MACQUIRE`); [`Relock::wait_all`] waits for them in sorted order, which never
//!   deadlocks; a [`LockGroup`] is renewed and released as one.
//! - owners name their process, `<host>/<pid>/<32 hex random>` ([`Options::owner_prefix`]);
//!   a guard that loses its hold says why, from the masters' journals
//!   ([`GuardedLock::loss`], [`LossReason`]);
//! - a master in its restart grace (`relock.restart-grace-ms`) counts as one that did not
//!   grant ([`NodeFailure::RestartGrace`]).
//! - elections on one master or a Redis Cluster: [`Relock::campaign`] waits in the key's FIFO
//!   queue and returns a [`Leadership`] (term = the fencing token, a loss signal, `resign`),
//!   [`Relock::leader`] says who leads, [`Relock::observe`] follows the changes
//!   (`LOCK.OBSERVE`, a term that went backwards reported as [`LeaderChange::regressed`]);
//!   [`Lock::fenced`], [`LockGuard::fenced`] and [`Leadership::fenced`] run a command only
//!   while the hold's token is live there (`LOCK.FENCED`; a stale token is [`Error::Fenced`]).
//!
//! The servers need the relock module loaded (`librelock.so`, into Redis 7.0 or later or
//! Valkey 8 or later; the release ships it as a tarball and a Debian package, and the project's
//! `docs/install.md` says how to load it). Against a server without it, an acquisition fails at
//! once with [`Error::Permanent`] (`ERR unknown command 'LOCK.ACQUIRE'`).
//!
//! ```toml
//! [dependencies]
//! relock-client = "0.2"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! ```no_run
//! use std::time::Duration;
//! use relock_client::Relock;
//!
//! # async fn demo() -> Result<(), relock_client::Error> {
//! let relock = Relock::new(&["redis://127.0.0.1:6379", "redis://127.0.0.1:6380", "redis://127.0.0.1:6381"])?;
//!
//! // By hand: acquire, use the fencing token, release.
//! let lock = relock.acquire("orders:42", Duration::from_secs(10)).await?;
//! println!("token {:?}, valid until {:?}", lock.token(), lock.valid_until());
//! lock.release().await?;
//!
//! // Scoped: renewed every ttl / 3, released however the body ends.
//! let total = relock
//!     .with_lock("orders:42", Duration::from_secs(10), |hold| async move {
//!         tokio::select! {
//!             _ = hold.lost.cancelled() => None, // someone broke the lock: stop
//!             n = async { 6 * 7 } => Some(n),
//!         }
//!     })
//!     .await?;
//! assert_eq!(total, Some(42));
//!
//! // A Redis Cluster, with every grant acknowledged by one replica of its master.
//! let options = relock_client::Options { replica_acks: 1, ..Default::default() };
//! let cluster = Relock::cluster(&["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], options)?;
//! let lock = cluster.acquire("{order:42}:invoice", Duration::from_secs(10)).await?;
//! lock.release().await?;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

#[cfg(test)]
mod cases;
mod client;
mod conn;
mod duration;
mod election;
mod error;
mod fanout;
mod group;
mod guard;
mod info;
pub mod limits;
mod lock;
mod loss;
mod masters;
mod mode;
mod node;
mod options;
mod owner;
mod reply;
mod round;
mod sentinel;
mod tls;
pub mod validity;
mod wire;

pub use client::{Command, Relock, Reply};
pub use duration::parse_duration;
pub use election::{proclaimed_value, Leader, LeaderChange, Leadership, Observer, OBSERVE_EVERY};
pub use error::{Error, NodeError, NodeErrors, NodeFailure, ServerError};
pub use group::{LockGroup, MAX_KEYS};
pub use guard::{loss_lead, GuardedLock, Hold, LockGuard};
pub use info::{HolderInfo, LockInfo};
pub use lock::Lock;
pub use loss::{Loss, LossReason, LossWatch};
pub use masters::NodeReport;
pub use mode::{Mode, MAX_LIMIT};
pub use options::Options;
pub use tls::Tls;
