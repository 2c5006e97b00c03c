//! The lock handle: what was granted, until when, and how to extend or release it.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Relock, Write};
use crate::error::{Error, NodeFailure};
use crate::limits::check_ttl;
use crate::validity::validity;

/// A held lock: its key, owner, the fencing token each master granted, and the instant until
/// which it is safe to act as the holder.
///
/// Release it with [`Lock::release`]. A `Lock` dropped unreleased is released in the
/// background (a task spawned on the current tokio runtime, if there is one; `Drop` never
/// blocks; [`Relock::settle`] waits for it); without a runtime it simply expires after its
/// ttl. For automatic renewal use
/// [`Lock::keep_alive`] or [`Relock::with_lock`].
pub struct Lock {
    pub(crate) client: Relock,
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) ttl: Duration,
    /// Per master (in the client's order), the token it granted, if it did.
    pub(crate) tokens: Vec<Option<u64>>,
    pub(crate) valid_until: Instant,
    /// Reentrant holds are released only where they were counted.
    pub(crate) reentrant: bool,
    pub(crate) released: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("tokens", &self.tokens)
            .field("valid_until", &self.valid_until)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(
        client: Relock,
        key: &str,
        owner: &str,
        ttl: Duration,
        tokens: Vec<Option<u64>>,
        reentrant: bool,
    ) -> Lock {
        Lock {
            client,
            key: key.to_string(),
            owner: owner.to_string(),
            ttl,
            tokens,
            valid_until: Instant::now(),
            reentrant,
            released: false,
        }
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id this lock is held under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The ttl last asked for (at acquisition or the last extend).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fencing token of each master that granted, as `(master, token)`, in the client's
    /// order of masters. Tokens of different masters are unrelated numbers.
    pub fn tokens(&self) -> Vec<(&str, u64)> {
        self.client
            .inner
            .nodes
            .iter()
            .zip(&self.tokens)
            .filter_map(|(n, t)| t.map(|t| (n.name.as_str(), t)))
            .collect()
    }

    /// The fencing token of the first master (in the client's order) that granted. With one
    /// server, that server's token.
    pub fn token(&self) -> Option<u64> {
        self.tokens.iter().flatten().next().copied()
    }

    /// Until when the lock is ours for sure: ttl - elapsed - drift after the last successful
    /// acquire or extend round. Past this instant, act as if the lock were lost.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether [`Lock::valid_until`] is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// Resets the lock's ttl to `ttl` on every master with `LOCK.RENEW`. Succeeds only when it
    /// starts within the validity and a quorum renews, and moves [`Lock::valid_until`].
    /// Fails with [`Error::Lost`] when the validity is over or too many masters say the lock
    /// is no longer ours (or answer with an error retrying cannot fix, such as `WRONGTYPE`
    /// for a key overwritten with another type) for a quorum to renew, with
    /// [`Error::Permanent`] when such errors alone leave no quorum (the module was unloaded,
    /// the password changed), with [`Error::NoQuorum`] when too many masters failed otherwise.
    ///
    /// It waits for the round however long it takes (each master at most the node timeout);
    /// the renewal of a [`LockGuard`](crate::LockGuard) gives up at the validity's end.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.renew(ttl, true).await
    }

    /// The renew round; `within_validity: false` is for a grant from `LOCK.WAIT`, whose
    /// validity has not been measured yet.
    pub(crate) async fn renew(
        &mut self,
        ttl: Duration,
        within_validity: bool,
    ) -> Result<(), Error> {
        let ttl = check_ttl(ttl)?;
        let ms = ttl.as_millis() as u64;
        if within_validity && Instant::now() >= self.valid_until {
            return Err(Error::Lost {
                key: self.key.clone(),
            });
        }
        let round = self
            .client
            .write_round(&self.key, &self.owner, ms, Write::Renew)
            .await;
        let quorum = self.client.quorum();
        let nodes = self.client.inner.nodes.len();
        if round.granted() < quorum {
            if round.refused() > 0 && round.refused() + round.permanent() > nodes - quorum {
                return Err(Error::Lost {
                    key: self.key.clone(),
                });
            }
            let round = self.client.permanent_failure(&self.key, round)?;
            return Err(self.client.no_quorum(&self.key, round));
        }
        let Some(left) = validity(ttl, round.elapsed) else {
            return Err(Error::ValidityExhausted {
                key: self.key.clone(),
                elapsed: round.elapsed,
                ttl,
            });
        };
        for (slot, token) in self.tokens.iter_mut().zip(&round.tokens) {
            if token.is_some() && !self.reentrant {
                *slot = *token;
            }
        }
        self.ttl = ttl;
        self.valid_until = round.started + left;
        Ok(())
    }

    /// Adds one to the hold count with `LOCK.REENTER` (same key, same owner) and returns a
    /// handle for that extra hold; releasing it takes the count back down by one.
    pub async fn reenter(&self, ttl: Duration) -> Result<Lock, Error> {
        self.client.reenter(&self.key, &self.owner, ttl).await
    }

    /// Releases the lock with `LOCK.RELEASE` on every master at once. Fails with
    /// [`Error::Lost`] when no master still had it, with [`Error::NoQuorum`] when fewer than a
    /// quorum confirmed the release for other reasons (the rest will expire with the ttl).
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.release_inner().await
    }

    async fn release_inner(&self) -> Result<(), Error> {
        let targets: Option<Vec<bool>> = self
            .reentrant
            .then(|| self.tokens.iter().map(Option::is_some).collect());
        let round = self
            .client
            .release_targets(&self.key, &self.owner, targets.as_deref())
            .await;
        let nodes = self.client.inner.nodes.len();
        let quorum = self.client.quorum();
        tracing::debug!(key = %self.key, released = round.granted(), "lock released");
        if round.granted() >= quorum {
            return Ok(());
        }
        if round.granted() == 0 && round.refused() == nodes {
            return Err(Error::Lost {
                key: self.key.clone(),
            });
        }
        // Masters that failed could still hold it until the ttl runs out.
        if round
            .failures
            .iter()
            .all(|f| matches!(f.failure, NodeFailure::NotGranted))
        {
            return Err(Error::Lost {
                key: self.key.clone(),
            });
        }
        Err(self.client.no_quorum(&self.key, round))
    }

    /// Releases, ignoring the outcome (used when an acquisition is abandoned).
    pub(crate) async fn release_quietly(mut self) {
        self.released = true;
        let _ = self.release_inner().await;
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let lock = Lock {
            client: self.client.clone(),
            key: std::mem::take(&mut self.key),
            owner: std::mem::take(&mut self.owner),
            ttl: self.ttl,
            tokens: std::mem::take(&mut self.tokens),
            valid_until: self.valid_until,
            reentrant: self.reentrant,
            released: true,
        };
        let client = lock.client.clone();
        client.in_background(async move {
            if let Err(e) = lock.release_inner().await {
                tracing::debug!(key = %lock.key, error = %e, "release of a dropped lock");
            }
        });
    }
}
