//! Keeping a lock alive: a background renewal task, a loss signal, release on every exit path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::error::Error;
use crate::group::LockGroup;
use crate::lock::Lock;
use crate::loss::{Loss, LossWatch};
use crate::masters::{BackgroundReleases, Masters};

/// A lock kept alive by a [`LockGuard`], as the body of
/// [`Relock::with_lock`](crate::Relock::with_lock) sees it: its key, owner and tokens, and the
/// signal that it was lost.
#[derive(Debug, Clone)]
pub struct GuardedLock {
    /// The locked key (for a [`LockGroup`], its first key in sorted order).
    pub key: String,
    /// Every locked key: the one key, or a group's keys in sorted order.
    pub keys: Vec<String>,
    /// The owner id the lock is held under.
    pub owner: String,
    /// The fencing token of the first master that granted (see [`Lock::token`]).
    pub token: Option<u64>,
    /// Per master, `(master, token)` for each master that granted (for a group, the largest
    /// token of its keys there).
    pub tokens: Vec<(String, u64)>,
    /// Cancelled the moment the lock is known lost (a renewal was refused by a quorum, or
    /// failed there with an error retrying cannot fix), and at the latest when its validity
    /// ([`LockGuard::valid_until`]) runs out before a renewal succeeded, even while that
    /// renewal still waits for masters that do not answer (a renewal whose ttl the masters
    /// refused, [`Error::TtlRefused`], changed nothing there: the hold is kept, and renewed
    /// again, until then). It is cancelled a little ahead of
    /// the validity's end ([`loss_lead`]: 1/20 of the ttl, at most 20 ms) so that a body woken
    /// by it is still within the validity. Await `lost.cancelled()` in a `tokio::select!` to
    /// stop work that must not go on without the lock.
    pub lost: CancellationToken,
    /// Why it was lost: once `lost` is cancelled, the guard asks the masters' journals
    /// (`LOCK.HISTORY`, one round trip bounded by the node timeout) and publishes the answer
    /// here ([`LossWatch::explained`]); `lost` never waits for it.
    pub loss: LossWatch,
}

/// The former name of [`GuardedLock`], kept so that code naming it still compiles (it was
/// easy to confuse with the module's own `Hold`, the record of a lock on a server).
pub type Hold = GuardedLock;

/// A lock renewed in the background until it is released or dropped.
///
/// It renews every ttl / 3 (and retries sooner after a failed renewal while validity is
/// left); it stops renewing the instant [`LockGuard::release`] is called or the guard is
/// dropped, and then releases the lock on every master. Dropping it never blocks: the
/// renewal task, already running on the runtime, does the release.
pub struct LockGuard {
    lock: GuardedLock,
    renewed: watch::Receiver<Renewed>,
    /// Wakes the renewal task for a renewal now ([`LockGuard::renew_now`]).
    nudge: Arc<Notify>,
    /// What the holder asks of the hold the renewal task keeps ([`LockGuard::downgrade`]).
    requests: mpsc::UnboundedSender<Request>,
    stop: CancellationToken,
    done: Option<oneshot::Receiver<Result<(), Error>>>,
    /// Handed to the renewal task on drop, so that [`Relock::settle`](crate::Relock::settle)
    /// waits for the release from the moment the guard is dropped.
    releasing: Arc<Mutex<Option<TaskTrackerToken>>>,
    background: BackgroundReleases,
    /// The masters the hold is on (for fenced writes).
    masters: Arc<Masters>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("hold", &self.lock)
            .finish()
    }
}

// Here rather than in lock.rs: a guard is built on a lock's public API, and the lock need not
// know about guards.
impl Lock {
    /// Hands the lock to a background renewal task (spawned on the current tokio runtime,
    /// which this must be called from) and returns its guard.
    pub fn keep_alive(self) -> LockGuard {
        let lock = GuardedLock {
            key: self.key().to_string(),
            keys: vec![self.key().to_string()],
            owner: self.owner().to_string(),
            token: self.token(),
            tokens: self
                .tokens()
                .into_iter()
                .map(|(n, t)| (n.to_string(), t))
                .collect(),
            lost: CancellationToken::new(),
            loss: LossWatch(watch::channel(None).1),
        };
        let (background, masters) = (self.background(), self.masters().clone());
        guard(Held::One(self), lock, background, masters)
    }
}

impl LockGroup {
    /// Hands the group to a background renewal task (spawned on the current tokio runtime,
    /// which this must be called from) that renews every key at once (`LOCK.MRENEW`) every
    /// ttl / 3, and returns its guard. The group is lost, and the guard says so, when any of
    /// its keys is.
    pub fn keep_alive(self) -> LockGuard {
        let lock = GuardedLock {
            key: self.keys().first().cloned().unwrap_or_default(),
            keys: self.keys().to_vec(),
            owner: self.owner().to_string(),
            token: self.token(),
            // Per master, the largest token of the group there.
            tokens: {
                let mut per: Vec<(String, u64)> = Vec::new();
                for (master, t) in self.tokens().into_iter().flat_map(|(_, per)| per) {
                    match per.iter_mut().find(|(m, _)| m == master) {
                        Some((_, top)) => *top = (*top).max(t),
                        None => per.push((master.to_string(), t)),
                    }
                }
                per
            },
            lost: CancellationToken::new(),
            loss: LossWatch(watch::channel(None).1),
        };
        let (background, masters) = (self.background(), self.masters().clone());
        guard(Held::Group(self), lock, background, masters)
    }
}

/// Starts the renewal task of `held` and returns its guard.
fn guard(
    held: Held,
    lock: GuardedLock,
    background: BackgroundReleases,
    masters: Arc<Masters>,
) -> LockGuard {
    let (loss_tx, loss_rx) = watch::channel(None);
    let lock = GuardedLock {
        loss: LossWatch(loss_rx),
        ..lock
    };
    let (valid_tx, valid_rx) = watch::channel(Renewed {
        count: 0,
        valid_until: held.valid_until(),
    });
    let (done_tx, done_rx) = oneshot::channel();
    let stop = CancellationToken::new();
    let nudge = Arc::new(Notify::new());
    let releasing = Arc::new(Mutex::new(None));
    let (requests_tx, requests_rx) = mpsc::unbounded_channel();
    tokio::spawn(renew_until_stopped(
        held,
        Signals {
            stop: stop.clone(),
            lost: lock.lost.clone(),
            renewed: valid_tx,
            nudge: nudge.clone(),
            done: done_tx,
            releasing: releasing.clone(),
            loss: loss_tx,
            requests: requests_rx,
        },
    ));
    LockGuard {
        lock: GuardedLock {
            lost: lock.lost.child_token(),
            ..lock
        },
        renewed: valid_rx,
        nudge,
        requests: requests_tx,
        stop,
        done: Some(done_rx),
        releasing,
        background,
        masters,
    }
}

/// What a guard keeps alive: one lock, or a group of keys.
enum Held {
    One(Lock),
    Group(LockGroup),
}

impl Held {
    fn ttl(&self) -> Duration {
        match self {
            Held::One(l) => l.ttl(),
            Held::Group(g) => g.ttl(),
        }
    }

    fn valid_until(&self) -> Instant {
        match self {
            Held::One(l) => l.valid_until(),
            Held::Group(g) => g.valid_until(),
        }
    }

    fn key(&self) -> String {
        match self {
            Held::One(l) => l.key().to_string(),
            Held::Group(g) => crate::group::group_name(g.keys()),
        }
    }

    fn owner(&self) -> &str {
        match self {
            Held::One(l) => l.owner(),
            Held::Group(g) => g.owner(),
        }
    }

    async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        match self {
            Held::One(l) => l.extend(ttl).await,
            Held::Group(g) => g.extend(ttl).await,
        }
    }

    async fn downgrade(&mut self) -> Result<(), Error> {
        match self {
            Held::One(l) => l.downgrade().await,
            Held::Group(_) => Err(Error::InvalidKeys(
                "a group of keys is held exclusively: there is no LOCK.MDOWNGRADE".into(),
            )),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::One(l) => l.release().await,
            Held::Group(g) => g.release().await,
        }
    }

    async fn release_quietly(self) {
        match self {
            Held::One(l) => l.release_quietly().await,
            Held::Group(g) => g.release_quietly().await,
        }
    }

    async fn explain_loss(&self, unrenewed: Duration, seen: &str) -> Loss {
        match self {
            Held::One(l) => l.explain_loss(unrenewed, seen).await,
            Held::Group(g) => g.explain_loss(unrenewed, seen).await,
        }
    }
}

impl LockGuard {
    /// The lock's key, owner and tokens, and its loss signal.
    pub fn hold(&self) -> &GuardedLock {
        &self.lock
    }

    /// The masters the hold is on.
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }

    /// The fencing token of the first master that granted.
    pub fn token(&self) -> Option<u64> {
        self.lock.token
    }

    /// A token cancelled the moment the lock is known lost.
    pub fn lost(&self) -> CancellationToken {
        self.lock.lost.clone()
    }

    /// Whether the lock is known lost.
    pub fn is_lost(&self) -> bool {
        self.lock.lost.is_cancelled()
    }

    /// The validity after the last successful renewal.
    pub fn valid_until(&self) -> Instant {
        self.renewed.borrow().valid_until
    }

    /// Renews now rather than at the next ttl / 3, and returns the new validity once a
    /// renewal that was under way or started by this call succeeded. A renewal that fails
    /// without a verdict (no reply) is retried as usual, so this waits until one succeeds or
    /// the lock is lost: then it fails with [`Error::Lost`] (or the error that ended the
    /// renewal, as [`LockGuard::release`] reports it).
    ///
    /// For a holder that could not act for a while (a process stopped by job control) and
    /// must know the lock is still held before it goes on.
    pub async fn renew_now(&self) -> Result<Instant, Error> {
        let mut renewed = self.renewed.clone();
        let seen = renewed.borrow_and_update().count;
        self.nudge.notify_one();
        loop {
            tokio::select! {
                biased;
                _ = self.lock.lost.cancelled() => break,
                changed = renewed.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let now = *renewed.borrow_and_update();
                    if now.count > seen {
                        return Ok(now.valid_until);
                    }
                }
            }
        }
        Err(self.lost_error())
    }

    /// Why the lock was lost, once the guard has asked the masters' journals: see
    /// [`GuardedLock::loss`].
    pub fn loss(&self) -> Option<Arc<Loss>> {
        self.lock.loss.get()
    }

    fn lost_error(&self) -> Error {
        Error::Lost {
            key: self.lock.key.clone(),
            cause: self.loss().map(|l| Box::new((*l).clone())),
        }
    }

    /// Turns the exclusive hold into a shared one (see [`Lock::downgrade`]): same token and
    /// lease, the shared waiters at the head of the queue are granted with it, and the guard
    /// goes on renewing the shared hold. A quorum that no longer has the hold makes the guard
    /// lose it ([`GuardedLock::lost`]) and this fail with [`Error::Lost`].
    pub async fn downgrade(&self) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        if self.requests.send(Request::Downgrade(reply)).is_err() {
            return Err(self.lost_error());
        }
        answer.await.unwrap_or_else(|_| Err(self.lost_error()))
    }

    /// Stops the renewal and releases the lock on every master, waiting for the outcome.
    /// Fails with [`Error::Lost`] if the lock had been lost before, or, when an error that
    /// retrying cannot fix ended the renewal ([`Error::is_permanent`]: an ACL that forbids
    /// `LOCK.RENEW`, the key overwritten with another type...), with that error; with
    /// [`Error::TtlRefused`] when the validity ran out while every renewal since the last
    /// success had its ttl refused (the hold was kept until then).
    pub async fn release(mut self) -> Result<(), Error> {
        self.stop.cancel();
        match self.done.take() {
            Some(done) => done.await.unwrap_or_else(|_| {
                Err(Error::Lost {
                    key: self.lock.key.clone(),
                    cause: None,
                })
            }),
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // The renewal task sees this at once and releases; nothing here waits for it.
        if self.done.is_some() {
            let token = self.background.token();
            *self.releasing.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
        }
        self.stop.cancel();
    }
}

/// How long before the end of its validity a guard reports its lock lost: 1/20 of the ttl,
/// at most 20 ms. It covers the timer's resolution (1 ms) and the time a woken body takes to
/// run on a busy machine, so that the body hears of the loss while the lock is still valid.
pub fn loss_lead(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(20))
}

/// A successful renewal, as the guard sees it: how many so far, and the validity it gave.
#[derive(Debug, Clone, Copy)]
struct Renewed {
    count: u64,
    valid_until: Instant,
}

/// What a guard asks of the renewal task, which owns the lock.
enum Request {
    Downgrade(oneshot::Sender<Result<(), Error>>),
}

/// How the renewal task talks to its guard.
struct Signals {
    stop: CancellationToken,
    lost: CancellationToken,
    renewed: watch::Sender<Renewed>,
    nudge: Arc<Notify>,
    done: oneshot::Sender<Result<(), Error>>,
    releasing: Arc<Mutex<Option<TaskTrackerToken>>>,
    loss: watch::Sender<Option<Arc<Loss>>>,
    requests: mpsc::UnboundedReceiver<Request>,
}

/// Why the renewal task ends.
enum Ended {
    /// The guard stopped it (released or dropped): the task releases the lock.
    Stopped,
    /// The lock was lost: what the task saw, and the error when a master refused for good.
    Lost(String, Option<Error>),
}

/// The instant the renewal task reports `lock` lost at the latest: `lead` before its
/// validity's end.
fn lost_at(lock: &Held, lead: Duration) -> Instant {
    let end = lock.valid_until();
    end.checked_sub(lead).unwrap_or(end)
}

async fn renew_until_stopped(mut lock: Held, mut signals: Signals) {
    let ttl = lock.ttl();
    let every = (ttl / 3).max(Duration::from_millis(1));
    // Every wait below, the renewal included, ends at `lost_at`: the lock is reported lost
    // no later than its validity's end, whatever the masters do.
    let lead = loss_lead(ttl);
    let stop = &signals.stop;
    // When the hold was last shown to exist (a round's start): what "not renewed for" counts.
    let mut proved_at = lock
        .valid_until()
        .checked_sub(ttl.saturating_sub(crate::validity::drift(ttl)))
        .unwrap_or_else(Instant::now);
    let mut next = Instant::now() + every;
    let mut count = 0;
    // The last renewal's refusal of the ttl (Error::TtlRefused), while no renewal succeeded
    // since: the hold is kept, and this is what ended it if its validity runs out.
    let mut ttl_refused: Option<Error> = None;
    let ran_out = |what: &str, refused: &mut Option<Error>| match refused.take() {
        Some(e) => Ended::Lost(format!("{what} (each renewal since: {e})"), Some(e)),
        None => Ended::Lost(what.to_string(), None),
    };
    let ended = loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break Ended::Stopped,
            _ = tokio::time::sleep_until(lost_at(&lock, lead)) => {
                break ran_out("its validity ran out before a renewal succeeded", &mut ttl_refused)
            }
            _ = tokio::time::sleep_until(next) => {}
            _ = signals.nudge.notified() => {}
            Some(Request::Downgrade(reply)) = signals.requests.recv() => {
                match downgrade(&mut lock, reply, stop, lead).await {
                    Some(ended) => break ended,
                    None => continue,
                }
            }
        }
        let deadline = lost_at(&lock, lead);
        let round_start = Instant::now();
        let renewed = tokio::select! {
            biased;
            _ = stop.cancelled() => break Ended::Stopped,
            _ = tokio::time::sleep_until(deadline) => {
                break ran_out("its validity ran out while a renewal waited for masters", &mut ttl_refused)
            }
            r = lock.extend(ttl) => r,
        };
        match renewed {
            Ok(()) => {
                proved_at = round_start;
                ttl_refused = None;
                count += 1;
                let _ = signals.renewed.send(Renewed {
                    count,
                    valid_until: lock.valid_until(),
                });
                next = Instant::now() + every;
            }
            Err(Error::Lost { .. }) => {
                break Ended::Lost(
                    "LOCK.RENEW answered nil: the masters no longer have it".into(),
                    None,
                )
            }
            Err(e @ Error::TtlRefused { .. }) => {
                // The masters refused the ttl and changed nothing: the hold is still ours,
                // with its ttl and validity. Not a loss: asked again soon (an operator may
                // raise relock.restart-grace-ms); if its validity runs out first, the loss
                // reports this refusal.
                tracing::warn!(key = %lock.key(), error = %e, "lock renewal refused its ttl; the hold is kept");
                ttl_refused = Some(e);
                let left = lock.valid_until().saturating_duration_since(Instant::now());
                next = Instant::now() + (every / 4).min(left / 2);
            }
            Err(e) if e.is_permanent() => break Ended::Lost(e.to_string(), Some(e)),
            Err(e) => {
                // Not refused, only unanswered: try again soon while validity is left.
                tracing::warn!(key = %lock.key(), error = %e, "lock renewal failed, retrying");
                let left = lock.valid_until().saturating_duration_since(Instant::now());
                next = Instant::now() + (every / 4).min(left / 2);
            }
        }
    };
    match ended {
        Ended::Stopped => release_when_stopped(lock, signals).await,
        Ended::Lost(why, permanent) => {
            report_loss(lock, signals, proved_at.elapsed(), &why, permanent).await
        }
    }
}

/// Downgrades the hold for its guard, which `reply` tells the outcome. `Some` when the
/// renewal task must end: the guard stopped it, or the lock turned out lost.
async fn downgrade(
    lock: &mut Held,
    reply: oneshot::Sender<Result<(), Error>>,
    stop: &CancellationToken,
    lead: Duration,
) -> Option<Ended> {
    let done = tokio::select! {
        biased;
        _ = stop.cancelled() => return Some(Ended::Stopped),
        _ = tokio::time::sleep_until(lost_at(lock, lead)) => {
            let _ = reply.send(Err(Error::Lost { key: lock.key(), cause: None }));
            return Some(Ended::Lost("its validity ran out during a downgrade".into(), None));
        }
        r = lock.downgrade() => r,
    };
    let lost = matches!(done, Err(Error::Lost { .. }));
    let _ = reply.send(done);
    lost.then(|| {
        Ended::Lost(
            "LOCK.DOWNGRADE answered nil: the masters no longer have it".into(),
            None,
        )
    })
}

/// The guard stopped the renewals: releases, counted by `Relock::settle` while it runs, and
/// tells the guard how it went.
async fn release_when_stopped(lock: Held, signals: Signals) {
    let _releasing = signals
        .releasing
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let _ = signals.done.send(lock.release().await);
}

/// The lock was lost (`why`, as seen, after `unrenewed` without a successful renewal): tells
/// the body at once, then why from the masters' journals, releases what a minority may
/// still hold, and tells the guard (`permanent`, the error that ended it, if any).
async fn report_loss(
    lock: Held,
    signals: Signals,
    unrenewed: Duration,
    why: &str,
    permanent: Option<Error>,
) {
    signals.lost.cancel();
    let loss = Arc::new(lock.explain_loss(unrenewed, why).await);
    tracing::warn!(
        key = %lock.key(),
        owner = %lock.owner(),
        reason = %loss.reason,
        seen = %why,
        "lock lost: {loss}"
    );
    let _ = signals.loss.send(Some(loss.clone()));
    let key = lock.key();
    // Whatever minority of masters still has it should not keep it until the ttl.
    lock.release_quietly().await;
    let _ = signals.done.send(Err(permanent.unwrap_or(Error::Lost {
        key,
        cause: Some(Box::new((*loss).clone())),
    })));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_lead_is_a_twentieth_of_the_ttl_up_to_20_ms() {
        let ms = Duration::from_millis;
        assert_eq!(loss_lead(ms(300)), ms(15));
        assert_eq!(loss_lead(Duration::from_secs(2)), ms(20));
        assert_eq!(loss_lead(Duration::from_secs(30)), ms(20));
        assert_eq!(loss_lead(ms(1)), Duration::from_micros(50));
    }
}
