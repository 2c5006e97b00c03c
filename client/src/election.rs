//! Elections and fenced writes: a lock whose holder is the leader.
//!
//! **campaign** = `LOCK.WAIT key <value>/<random> ttl timeout` (candidates served in arrival
//! order), **leadership** = the hold, kept alive by a [`LockGuard`] with its loss signal,
//! **term** = the hold's fencing token, **resign** = `LOCK.RELEASE` (the next candidate leads
//! in the same step), **leader** = `LOCK.INFO`, **observe** = a loop on `LOCK.OBSERVE`.
//! **fenced** = `LOCK.FENCED key token command ...`: the server runs the write only while the
//! token is a live hold's.
//!
//! Elections run on one master or a Redis Cluster, never over independent (Redlock) masters:
//! a term must come from one sequence of tokens, and FIFO order does not compose across
//! independent queues.

use std::sync::Arc;
use std::time::Duration;

use relock_protocol::cmd::{Fenced, Info, Observe};
use tokio_util::sync::CancellationToken;

use crate::client::{Command, Relock, Reply};
use crate::conn::Resend;
use crate::error::{Error, NodeError, NodeFailure};
use crate::guard::LockGuard;
use crate::info::{parse_info, LockInfo};
use crate::lock::Lock;
use crate::loss::Loss;
use crate::masters::Masters;
use crate::mode::Mode;
use crate::wire;

/// How long one `LOCK.OBSERVE` of an [`Observer`] blocks before it asks again (a timeout is
/// not a change: the observer asks again with the same token). Bounded so that a connection
/// that died without a word is noticed by the next question at the latest.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(10);

/// The leader of an election, as `LOCK.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its proclaimed value: the owner without its last `/`-separated part (the random part).
    pub value: String,
    /// Its term: the hold's fencing token.
    pub term: u64,
    /// The time left of its hold, as the server saw it (`None`: no expiry).
    pub ttl: Option<Duration>,
    /// The whole owner id, `<value>/<32 hex random>`.
    pub owner: String,
}

impl Leader {
    /// The leader an exclusive lock's `LOCK.INFO` shows; `None` for a lock without holder.
    fn of(info: LockInfo) -> Option<Leader> {
        let owner = info.owner?;
        Some(Leader {
            value: proclaimed_value(&owner).to_string(),
            term: info.token?,
            ttl: info.ttl,
            owner,
        })
    }
}

/// What an [`Observer`] saw change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// The leader now, or `None` when nobody leads.
    pub leader: Option<Leader>,
    /// The term is lower than the last term this observer saw: the store lost history (a
    /// server restarted without persistence, a failover to a replica that had not received
    /// the last grants). Terms are no longer a safe order across that point.
    pub regressed: bool,
}

/// The proclaimed value of a candidate's owner: the owner without its last `/`-separated
/// part (an owner without `/` proclaims the empty value).
pub fn proclaimed_value(owner: &str) -> &str {
    owner.rsplit_once('/').map_or("", |(value, _)| value)
}

/// Leadership of an election, won by [`Relock::campaign`]: the hold, renewed in the
/// background, and the signal that it was lost.
///
/// Dropping it resigns in the background (as dropping a [`LockGuard`] releases).
#[derive(Debug)]
pub struct Leadership {
    value: String,
    guard: LockGuard,
}

impl Leadership {
    /// The term: the hold's fencing token. Hand it to whatever the leader writes (or write
    /// through [`Leadership::fenced`]), so that a deposed leader's writes are refused.
    pub fn term(&self) -> u64 {
        self.guard.token().unwrap_or_default()
    }

    /// The value this leader proclaims (as given to `campaign`, cut to fit the owner).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The owner id the hold is held under, `<value>/<32 hex random>`.
    pub fn owner(&self) -> &str {
        &self.guard.hold().owner
    }

    /// The election's key.
    pub fn key(&self) -> &str {
        &self.guard.hold().key
    }

    /// Cancelled the moment leadership is known lost (see [`GuardedLock::lost`]); at the
    /// latest a little before the hold's validity ends.
    ///
    /// [`GuardedLock::lost`]: crate::GuardedLock::lost
    pub fn lost(&self) -> CancellationToken {
        self.guard.lost()
    }

    /// Whether leadership is known lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Why leadership was lost, once the masters' journals said (see [`LockGuard::loss`]).
    pub fn loss(&self) -> Option<Arc<Loss>> {
        self.guard.loss()
    }

    /// The guard that keeps the hold alive.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The guard that keeps the hold alive, for a caller that supervises it as any hold
    /// (lockctl's `elect` runs its command as `run` does).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Resigns: `LOCK.RELEASE`, which grants the next candidate in the same step. Fails as
    /// [`LockGuard::release`] does (with [`Error::Lost`] when leadership was lost before).
    pub async fn resign(self) -> Result<(), Error> {
        self.guard.release().await
    }

    /// `LOCK.FENCED key term command ...`: runs `command` on the election's master only
    /// while this term is the key's live hold; see [`Lock::fenced`].
    pub async fn fenced(&self, command: &Command) -> Result<Reply, Error> {
        self.guard.fenced(command).await
    }
}

impl Relock {
    /// Campaigns for leadership of the election at `key`, proclaiming `value` (a name, an
    /// address): waits in `key`'s queue (`LOCK.WAIT`, candidates served in arrival order)
    /// until this candidate leads or `timeout` passes (`None`: no limit; a timeout leaves the
    /// queue, [`Error::WaitTimeout`]), then keeps the hold alive every ttl / 3 as a
    /// [`LockGuard`] does.
    ///
    /// The owner is `<value>/<32 hex random>`, the value cut (at a character boundary) so that
    /// the whole fits 256 bytes, never the random part: two candidates with one value are two
    /// candidates. There is no proclaim: a new value means resign and campaign again (a new
    /// term). Returns once the grant is acknowledged by [`Options::replica_acks`] replicas.
    ///
    /// Choose the ttl knowing that a candidate that hangs while queued is granted in its turn
    /// and leads, without working, until its ttl ends.
    ///
    /// Fails before any server is asked with [`Error::ElectionRefused`] on a client of several
    /// independent masters or one whose mode is not exclusive ([`Relock::with_mode`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use relock_client::{Command, Relock};
    /// # async fn demo(relock: Relock) -> Result<(), relock_client::Error> {
    /// let leading = relock.campaign("billing/leader", "10.0.0.7:8080", Duration::from_secs(10), None).await?;
    /// println!("leading in term {}", leading.term());
    /// // Every write under the term: refused by the server once another term began.
    /// leading.fenced(&Command::new("SET").arg("{billing/leader}:config").arg("v2")).await?;
    /// let lost = leading.lost();
    /// tokio::select! {
    ///     _ = lost.cancelled() => { /* deposed: stop leading */ }
    ///     _ = async { /* lead */ } => leading.resign().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`Options::replica_acks`]: crate::Options::replica_acks
    pub async fn campaign(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Leadership, Error> {
        self.check_election(key)?;
        if self.mode() != Mode::Exclusive {
            return Err(Error::ElectionRefused {
                key: key.to_string(),
                why: format!(
                    "this client holds keys in {:?} mode; a leader holds its key exclusively",
                    self.mode()
                ),
            });
        }
        let lock = self
            .acquire_wait_as(key, ttl, timeout, &|| crate::owner::make_owner(Some(value)))
            .await?;
        let value = proclaimed_value(lock.owner()).to_string();
        Ok(Leadership {
            value,
            guard: lock.keep_alive(),
        })
    }

    /// The leader of the election at `key` now (`LOCK.INFO`), or `None` when nobody leads.
    ///
    /// Fails with [`Error::ElectionRefused`] on a client of several independent masters, or
    /// when the key is a shared lock; with [`Error::Node`] when the master failed.
    pub async fn leader(&self, key: &str) -> Result<Option<Leader>, Error> {
        self.check_election(key)?;
        let cmd = wire::cmd(&Info {
            key: key.as_bytes(),
        });
        let reply = self
            .masters()
            .ask_one(key, &cmd, Resend::AfterAnyFailure)
            .await?;
        leader_of(key, reply)
    }

    /// Follows the leaders of the election at `key`: [`Observer::next`] reports the leader
    /// now, then each change seen (see [`Observer`]).
    ///
    /// Fails with [`Error::ElectionRefused`] on a client of several independent masters.
    pub fn observe(&self, key: &str) -> Result<Observer, Error> {
        self.check_election(key)?;
        Ok(Observer {
            masters: self.masters().clone(),
            key: key.to_string(),
            seen: None,
            last_term: None,
            every: OBSERVE_EVERY,
        })
    }

    /// Elections need one sequence of tokens: one master, or a cluster.
    fn check_election(&self, key: &str) -> Result<(), Error> {
        let masters = self.nodes().len();
        if masters > 1 && !self.is_cluster() {
            return Err(Error::ElectionRefused {
                key: key.to_string(),
                why: format!(
                    "elections run on one master or a Redis Cluster, not over {masters} \
                     independent masters: a term must come from one sequence of tokens, and \
                     FIFO order does not compose across independent queues"
                ),
            });
        }
        Ok(())
    }
}

/// A `LOCK.INFO` (or `LOCK.OBSERVE`) reply as the leader it shows.
fn leader_of(key: &str, reply: redis::Value) -> Result<Option<Leader>, Error> {
    let info = parse_info(reply).map_err(|failure| {
        Error::Node(NodeError {
            node: String::new(),
            failure,
        })
    })?;
    match info {
        None => Ok(None),
        Some(info) if info.mode.is_shared() => Err(Error::ElectionRefused {
            key: key.to_string(),
            why: "the key is a shared lock; a leader holds its key exclusively".into(),
        }),
        Some(info) => Ok(Leader::of(info)),
    }
}

/// The leaders of one election, one change at a time: a loop on `LOCK.OBSERVE key
/// known_token timeout_ms`.
///
/// The first [`Observer::next`] reports the leader now (or none); each later one waits for
/// the next change and reports the latest leader after it (not every intermediate term: one
/// wake-up may cover several hand-offs). A `LOCK.OBSERVE` that timed out
/// ([`OBSERVE_EVERY`]), a dropped connection or a master that does not answer is not a
/// change: the observer asks again (after a pause growing to 1 s while the master fails),
/// with the token it knows, so that a change made meanwhile is answered at once. A term lower
/// than the last one seen is reported with [`LeaderChange::regressed`].
pub struct Observer {
    masters: Arc<Masters>,
    key: String,
    /// The state last reported: `None` before the first report, `Some(None)` for no leader.
    seen: Option<Option<u64>>,
    /// The last term seen, to tell a regression.
    last_term: Option<u64>,
    every: Duration,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("key", &self.key)
            .field("seen", &self.seen)
            .field("last_term", &self.last_term)
            .finish()
    }
}

impl Observer {
    /// The election's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How long each `LOCK.OBSERVE` blocks before asking again (default [`OBSERVE_EVERY`],
    /// at least 1 ms).
    #[must_use]
    pub fn every(mut self, every: Duration) -> Observer {
        self.every = every.max(Duration::from_millis(1));
        self
    }

    /// The next change (the first call: the leader now). Fails only with an error that
    /// asking again cannot fix ([`Error::is_permanent`]: the key is shared or of another type,
    /// an ACL forbids `LOCK.OBSERVE`, the module is missing); other failures are retried.
    pub async fn next(&mut self) -> Result<LeaderChange, Error> {
        let mut pause = Duration::from_millis(20);
        loop {
            let reply = match self.seen {
                None => {
                    let cmd = wire::cmd(&Info {
                        key: self.key.as_bytes(),
                    });
                    self.masters
                        .ask_one(&self.key, &cmd, Resend::AfterAnyFailure)
                        .await
                }
                Some(known) => {
                    let ms = u64::try_from(self.every.as_millis()).unwrap_or(u64::MAX);
                    let cmd = wire::cmd(&Observe {
                        key: self.key.as_bytes(),
                        known_token: known.unwrap_or(0),
                        timeout_ms: ms.max(1),
                    });
                    self.masters.blocking_one(&self.key, &cmd).await
                }
            };
            let leader = match reply
                .map_err(Error::Node)
                .and_then(|r| leader_of(&self.key, r))
            {
                Ok(leader) => leader,
                Err(e) if e.is_permanent() => return Err(e),
                Err(e) => {
                    tracing::debug!(key = %self.key, error = %e, "observing: asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
            };
            let term = leader.as_ref().map(|l| l.term);
            if self.seen == Some(term) {
                // A timeout (or a change and its undoing within one wake-up): nothing new.
                continue;
            }
            self.seen = Some(term);
            let regressed = matches!((term, self.last_term), (Some(now), Some(last)) if now < last);
            if term.is_some() {
                self.last_term = term;
            }
            return Ok(LeaderChange { leader, regressed });
        }
    }

    /// The changes as a stream (the same items as [`Observer::next`]); it ends after the first
    /// error.
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<LeaderChange, Error>> {
        futures_util::stream::unfold(Some(self), |observer| async move {
            let mut observer = observer?;
            match observer.next().await {
                Ok(change) => Some((Ok(change), Some(observer))),
                Err(e) => Some((Err(e), None)),
            }
        })
    }
}

impl Lock {
    /// `LOCK.FENCED key token command ...`: runs `command` on the key's master only while
    /// this hold's token is a live hold of the key there, atomically with that check, and
    /// returns its reply unchanged (an error reply of `command` is [`Error::Node`]).
    ///
    /// Fails with [`Error::Fenced`] when the server refused the token (the hold is gone:
    /// nothing ran; never retried), with [`Error::FencedRefused`] on a hold of several
    /// independent masters (each master has its own tokens), before any server is asked.
    /// Put the lock and the data it guards under one hash tag (`{order:7}`,
    /// `{order:7}:data`): every key of `command` must be in the lock key's slot.
    ///
    /// A write whose reply is lost (a timeout, a dropped connection) may have run: it is an
    /// error, and never sent again, not even to the new master after a failover (which has
    /// the same hold, so a re-sent write would apply twice). Only a refusal that says the
    /// first master did not run it (`READONLY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`) sends
    /// it on to the key's new master.
    pub async fn fenced(&self, command: &Command) -> Result<Reply, Error> {
        let tokens: Vec<(String, u64)> = self
            .tokens()
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect();
        fenced(self.masters(), self.key(), self.token(), &tokens, command).await
    }
}

impl LockGuard {
    /// `LOCK.FENCED key token command ...` under this guard's hold: see [`Lock::fenced`].
    pub async fn fenced(&self, command: &Command) -> Result<Reply, Error> {
        let hold = self.hold();
        fenced(self.masters(), &hold.key, hold.token, &hold.tokens, command).await
    }
}

/// `LOCK.FENCED key token command ...` on the one master (or cluster) of `masters`.
async fn fenced(
    masters: &Arc<Masters>,
    key: &str,
    token: Option<u64>,
    tokens: &[(String, u64)],
    command: &Command,
) -> Result<Reply, Error> {
    let nodes = masters.names().len();
    if nodes > 1 && !masters.is_cluster() {
        return Err(Error::FencedRefused {
            key: key.to_string(),
            masters: nodes,
        });
    }
    let Some(token) = token.or_else(|| tokens.first().map(|(_, t)| *t)) else {
        return Err(Error::Lost {
            key: key.to_string(),
            cause: None,
        });
    };
    let cmd = wire::cmd(&Fenced {
        key: key.as_bytes(),
        token,
        command: command.args().collect(),
    });
    match masters.ask_one(key, &cmd, Resend::OnlyUnrun).await {
        Ok(reply) => Ok(crate::reply::reply_of(reply)),
        Err(NodeError {
            node,
            failure: NodeFailure::Redis(e),
        }) if e.code() == Some("FENCED") => Err(Error::Fenced {
            key: key.to_string(),
            node,
            message: e.detail().unwrap_or_default().trim_end().to_string(),
        }),
        Err(e) => Err(Error::Node(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proclaimed_value_is_the_owner_without_its_random_part() {
        assert_eq!(proclaimed_value("10.0.0.7:8080/0123abcd"), "10.0.0.7:8080");
        assert_eq!(proclaimed_value("a/b/c/0123"), "a/b/c");
        assert_eq!(proclaimed_value("0123abcd"), "");
        assert_eq!(proclaimed_value("/0123"), "");
        // A candidate's owner: the value cut to fit, never the random part.
        let owner = crate::owner::make_owner(Some(&"é".repeat(300)));
        assert!(owner.len() <= crate::owner::MAX_OWNER);
        let value = proclaimed_value(&owner);
        assert!(value.chars().all(|c| c == 'é') && !value.is_empty());
        assert_eq!(owner.len() - value.len(), 33);
    }
}
