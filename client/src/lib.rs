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

mod client;
mod error;
mod guard;
pub mod limits;
mod lock;
mod node;
pub mod validity;

pub use client::{NodeReport, Options, Relock};
pub use error::{Error, NodeError, NodeErrors, NodeFailure};
pub use guard::{loss_lead, Hold, LockGuard};
pub use lock::Lock;

use std::time::Duration;

/// The state of a lock on one master, as `LOCK.INFO` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner id (non-UTF-8 bytes shown lossily).
    pub owner: String,
    /// The hold's fencing token.
    pub token: u64,
    /// The reentrancy count (>= 1).
    pub count: u64,
    /// The time left before it expires.
    pub ttl: Duration,
    /// How many clients wait in `LOCK.WAIT` for it.
    pub waiters: u64,
}

/// Parses a duration such as `500ms`, `10s`, `2m`, `1h`, `1e3s` or a bare number of seconds
/// (`30`). Used by `lockctl`; exposed because callers often read ttls from configuration.
/// It only parses: what a duration may be used for is checked by [`limits`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let mut split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    // An exponent (`1e3s`) belongs to the number, not the unit.
    if let Some(rest) = text[split..].strip_prefix(['e', 'E']) {
        let sign = usize::from(rest.starts_with(['+', '-']));
        let digits = rest[sign..].len()
            - rest[sign..]
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if digits > 0 {
            split += 1 + sign + digits;
        }
    }
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (try 500ms, 10s, 2m)"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m or h)"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale)
        .map_err(|e| format!("invalid duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("30"), Ok(ms(30_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1e3ms"), Ok(ms(1_000)));
        assert_eq!(parse_duration("2.5E-3s"), Ok(Duration::from_micros(2_500)));
        assert_eq!(
            parse_duration("1e19s"),
            Ok(Duration::from_secs(10_000_000_000_000_000_000))
        );
        assert!(parse_duration("1e400s").is_err());
        assert!(parse_duration("1e").is_err());
        assert!(parse_duration("1es").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
