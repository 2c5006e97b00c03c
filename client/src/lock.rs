//! The lock handle: what was granted, until when, and how to extend or release it.

use std::sync::Arc;
use std::time::Duration;

use relock_protocol::Ask;
use tokio::time::Instant;

use crate::error::Error;
use crate::limits::check_ttl;
use crate::masters::{Abandoned, BackgroundReleases, Landed, Masters, Write};
use crate::mode::{permits_of, Mode};

/// A held lock: its key, owner, the fencing token each master granted, and the instant until
/// which it is safe to act as the holder.
///
/// Release it with [`Lock::release`]. A `Lock` dropped unreleased is released in the
/// background (a task spawned on the current tokio runtime, if there is one; `Drop` never
/// blocks; [`Relock::settle`](crate::Relock::settle) waits for it); without a runtime it
/// simply expires after its ttl. For automatic renewal use [`Lock::keep_alive`] or
/// [`Relock::with_lock`](crate::Relock::with_lock).
pub struct Lock {
    masters: Arc<Masters>,
    key: String,
    owner: String,
    ttl: Duration,
    /// Per master (in the client's order), the token it granted, if it did.
    tokens: Vec<Option<u64>>,
    valid_until: Instant,
    /// Reentrant holds are released only where they were counted.
    reentrant: bool,
    /// How it is held (and with how many permits); a re-entry asks for the same.
    mode: Ask,
    /// The hold's count on each master, shared by the handles of one hold (this lock and the
    /// re-entries made from it): each `LOCK.REENTER` and `LOCK.RELEASE` names the count it
    /// moves from (`FROM c`), so that a command sent twice changes the hold once.
    counts: Counts,
    /// Whether each master's request of the acquisition has landed (it goes on after the
    /// round is decided); `None` when not known (a grant of `LOCK.WAIT`).
    landed: Option<Landed>,
    released: bool,
}

/// Per master, the count of a hold as its handles know it (`None`: not held there, as far as
/// they know). Locked across each step, so that the steps of one hold go one at a time.
pub(crate) type Counts = Arc<tokio::sync::Mutex<Vec<Option<u32>>>>;

/// A fresh owner's grants: count 1 where a master granted.
fn granted_once(tokens: &[Option<u64>]) -> Counts {
    Arc::new(tokio::sync::Mutex::new(
        tokens.iter().map(|t| t.map(|_| 1)).collect(),
    ))
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("mode", &self.mode())
            .field("permits", &self.permits())
            .field("tokens", &self.tokens)
            .field("valid_until", &self.valid_until)
            .finish()
    }
}

impl Lock {
    /// One Redlock round of `LOCK.ACQUIRE` (or, `reentrant`, `LOCK.REENTER`) in `mode` under
    /// `owner`, no retry. On failure the masters are released at once (in the background for
    /// `LOCK.ACQUIRE`, whose owner is never used again, so that a stopped master does not hold
    /// up the caller twice; only where a count was added for `LOCK.REENTER`).
    ///
    /// A re-entry names the count it moves from: `chain`'s (the hold it re-enters), or, with
    /// no chain, the count each master reports first.
    pub(crate) async fn attempt(
        masters: &Arc<Masters>,
        key: &str,
        owner: &str,
        ttl: Duration,
        reentrant: bool,
        mode: Ask,
        chain: Option<&Counts>,
    ) -> Result<Lock, Error> {
        let ttl = check_ttl(ttl)?;
        let ttl_ms = ttl.as_millis() as u64;
        let write = if reentrant {
            Write::Reenter(mode)
        } else {
            Write::Acquire(mode)
        };
        // A reentrant hold cannot be undone blindly: only the counts it added are released.
        let abandoned = (!reentrant).then(|| Abandoned::new(masters, key, owner));
        // The steps of one hold go one at a time: its count is locked until this one is done.
        let mut known = match chain {
            Some(chain) => Some(chain.lock().await),
            None => None,
        };
        let from: Option<Vec<Option<u32>>> = known
            .as_ref()
            .map(|counts| counts.iter().map(|c| Some(c.unwrap_or(0))).collect());
        let (round, after, landed) = masters
            .write_round_from(key, owner, ttl_ms, write, from.as_deref())
            .await;
        if let Some(abandoned) = abandoned {
            abandoned.disarm();
        }
        let Some(valid_until) = round.valid_until(ttl) else {
            if reentrant {
                // Each count added comes off again, naming the count it added.
                masters
                    .release_round_from(key, owner, Some(&round.agreed_by()), Some(&after))
                    .await;
            } else {
                masters.release_failed(key, owner, &round).await;
            }
            return Err(round.into_acquire_error(key, ttl));
        };
        tracing::debug!(key, owner, ?valid_until, "lock acquired");
        let tokens = round.into_answers();
        let counts = if !reentrant {
            granted_once(&tokens)
        } else if let (Some(chain), Some(known)) = (chain, known.as_mut()) {
            for (known, after) in known.iter_mut().zip(&after) {
                if after.is_some() {
                    *known = *after;
                }
            }
            chain.clone()
        } else {
            Arc::new(tokio::sync::Mutex::new(after))
        };
        drop(known);
        Ok(Lock {
            masters: masters.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            ttl,
            tokens,
            valid_until,
            reentrant,
            mode,
            counts,
            landed: Some(landed),
            released: false,
        })
    }

    /// A lock that a quorum of masters granted to `owner` through `LOCK.WAIT`, whose validity
    /// is still to be measured (with [`Lock::renew`]): until then it is not valid.
    pub(crate) fn waited_for(
        masters: &Arc<Masters>,
        key: &str,
        owner: &str,
        ttl: Duration,
        tokens: Vec<Option<u64>>,
        mode: Ask,
    ) -> Lock {
        Lock {
            masters: masters.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            ttl,
            counts: granted_once(&tokens),
            tokens,
            valid_until: Instant::now(),
            reentrant: false,
            mode,
            landed: None,
            released: false,
        }
    }

    /// The masters it is held on.
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }

    /// The releases this lock's client runs in the background.
    pub(crate) fn background(&self) -> BackgroundReleases {
        self.masters.background().clone()
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id this lock is held under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How it is held: exclusively, or as one of several shared holders.
    pub fn mode(&self) -> Mode {
        Mode::of(self.mode)
    }

    /// How many permits of its semaphore it holds (1 unless
    /// [`Relock::with_permits`](crate::Relock::with_permits) asked for more).
    pub fn permits(&self) -> u32 {
        permits_of(self.mode)
    }

    /// The ttl last asked for (at acquisition or the last extend).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fencing token of each master that granted, as `(master, token)`, in the client's
    /// order of masters. Tokens of different masters are unrelated numbers.
    pub fn tokens(&self) -> Vec<(&str, u64)> {
        self.masters
            .names()
            .iter()
            .zip(&self.tokens)
            .filter_map(|(name, t)| t.map(|t| (name.as_str(), t)))
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
    /// the password changed), with [`Error::TtlRefused`] when a master refused the ttl itself
    /// (above its `relock.restart-grace-ms`: nothing changed, the lock keeps its ttl and
    /// validity), with [`Error::NoQuorum`] when too many masters failed otherwise.
    ///
    /// It waits for the round however long it takes (each master at most the node timeout);
    /// the renewal of a [`LockGuard`](crate::LockGuard) gives up at the validity's end.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl = check_ttl(ttl)?;
        if Instant::now() >= self.valid_until {
            return Err(Error::Lost {
                key: self.key.clone(),
                cause: None,
            });
        }
        self.renew(ttl).await
    }

    /// The renew round of [`Lock::extend`], for a `ttl` already checked, whether the validity
    /// is over or not: a grant from `LOCK.WAIT` has no measured validity yet.
    pub(crate) async fn renew(&mut self, ttl: Duration) -> Result<(), Error> {
        let ms = ttl.as_millis() as u64;
        let round = self
            .masters
            .write_round(&self.key, &self.owner, ms, Write::Renew)
            .await;
        let Some(valid_until) = round.valid_until(ttl) else {
            return Err(round.into_renew_error(&self.key, ttl));
        };
        if !self.reentrant {
            for (slot, token) in self.tokens.iter_mut().zip(round.answers()) {
                if token.is_some() {
                    *slot = *token;
                }
            }
        }
        self.ttl = ttl;
        self.valid_until = valid_until;
        tracing::debug!(key = %self.key, ?valid_until, "lock renewed");
        Ok(())
    }

    /// Turns this exclusive hold into a shared one with `LOCK.DOWNGRADE` on every master, in
    /// one step on each: same token, lease and count, the key becomes shared without a limit,
    /// and the shared waiters at the head of its queue are granted with it, so no writer gets
    /// in between (the write-to-read downgrade of Curator and Java's `ReentrantReadWriteLock`).
    /// There is no upgrade: two readers waiting to upgrade would deadlock; release and
    /// acquire instead.
    ///
    /// Safe to retry (a hold already shared answers its token). Succeeds when a quorum
    /// downgraded within the validity (which it does not change); then [`Lock::mode`] is
    /// [`Mode::shared`]. Fails with [`Error::Lost`] when the validity is over or too many masters
    /// no longer have the hold, with [`Error::OtherLimit`] on a semaphore (which is never
    /// downgraded), with [`Error::NoQuorum`] when too many failed otherwise (some masters may
    /// then hold it shared, the others exclusively: retry, or release).
    pub async fn downgrade(&mut self) -> Result<(), Error> {
        if Instant::now() >= self.valid_until {
            return Err(Error::Lost {
                key: self.key.clone(),
                cause: None,
            });
        }
        let round = self
            .masters
            .write_round(&self.key, &self.owner, 0, Write::Downgrade)
            .await;
        if !round.won() {
            return Err(round.into_renew_error(&self.key, self.ttl));
        }
        self.mode = Mode::shared().ask(1);
        tracing::debug!(key = %self.key, "lock downgraded");
        Ok(())
    }

    /// Adds one to the hold count with `LOCK.REENTER` (same key, same owner, same mode) and
    /// returns a handle for that extra hold; releasing it takes the count back down by one.
    pub async fn reenter(&self, ttl: Duration) -> Result<Lock, Error> {
        Lock::attempt(
            &self.masters,
            &self.key,
            &self.owner,
            ttl,
            true,
            self.mode,
            Some(&self.counts),
        )
        .await
    }

    /// Asks the masters' journals why this hold was lost (see [`crate::loss::explain`]).
    pub(crate) async fn explain_loss(&self, unrenewed: Duration, seen: &str) -> crate::Loss {
        crate::loss::explain(
            &self.masters,
            std::slice::from_ref(&self.key),
            &self.owner,
            &self.tokens,
            unrenewed,
            seen,
        )
        .await
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
        // A master that had not granted when the round was decided may still take its request
        // after this release has passed it (the request's task not yet run on a busy
        // runtime): its release waits for that request to land, and where it did not (it
        // failed or timed out) goes once more a little later, or the grant would stay until
        // its ttl. A reentrant hold is released only where it was counted.
        let not_granted: Vec<bool> = self.tokens.iter().map(Option::is_none).collect();
        let mut late = (!self.reentrant && not_granted.contains(&true)).then(|| LateRelease {
            masters: &self.masters,
            key: &self.key,
            owner: &self.owner,
            targets: not_granted.clone(),
        });
        // Each master's release names the count it moves from: sent twice, it releases once.
        let mut counts = self.counts.lock().await;
        let from = counts.clone();
        let after = match (&late, &self.landed) {
            (Some(_), Some(landed)) => Some((landed, not_granted.as_slice())),
            _ => None,
        };
        let (round, behind) = self
            .masters
            .release_round_after(
                &self.key,
                &self.owner,
                targets.as_deref(),
                Some(&from),
                after,
            )
            .await;
        if let Some(late) = late.as_mut() {
            // Released behind the request's answer: nothing of it can come later.
            for (target, behind) in late.targets.iter_mut().zip(&behind) {
                *target &= !behind;
            }
        }
        drop(late);
        for (i, (count, answer)) in counts.iter_mut().zip(round.answers()).enumerate() {
            if targets.as_ref().is_none_or(|t| t.get(i) == Some(&true)) {
                *count = answer
                    .and_then(|r| u32::try_from(r.holds_left).ok())
                    .filter(|left| *left > 0);
            }
        }
        drop(counts);
        tracing::debug!(key = %self.key, released = round.agreed(), "lock released");
        round.into_release_result(&self.key)
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
            masters: self.masters.clone(),
            key: std::mem::take(&mut self.key),
            owner: std::mem::take(&mut self.owner),
            ttl: self.ttl,
            tokens: std::mem::take(&mut self.tokens),
            valid_until: self.valid_until,
            reentrant: self.reentrant,
            mode: self.mode,
            counts: self.counts.clone(),
            landed: self.landed.take(),
            released: true,
        };
        let background = lock.background();
        background.spawn(async move {
            if let Err(e) = lock.release_inner().await {
                tracing::debug!(key = %lock.key, error = %e, "release of a dropped lock");
            }
        });
    }
}

/// The masters of a release that must be released once more a little later: those whose
/// acquisition's request had not landed before their release was sent. Sent when dropped, so
/// that a release abandoned half-way (its future dropped) still sends it.
struct LateRelease<'a> {
    masters: &'a Arc<Masters>,
    key: &'a str,
    owner: &'a str,
    targets: Vec<bool>,
}

impl Drop for LateRelease<'_> {
    fn drop(&mut self) {
        if self.targets.contains(&true) {
            self.masters.release_late(
                self.key,
                self.owner,
                Some(std::mem::take(&mut self.targets)),
            );
        }
    }
}
