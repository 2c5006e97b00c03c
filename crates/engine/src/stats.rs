//! Counters of what the engine did (the `INFO relock` section).

/// Event counters, each only ever increasing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// New holds taken with `LOCK.ACQUIRE`, `LOCK.REENTER` or an immediate `LOCK.WAIT`.
    pub acquired: u64,
    /// Holds ended by `LOCK.RELEASE` (or revoked from a waiter that hung up as it was granted).
    pub released: u64,
    /// Successful `LOCK.RENEW` calls.
    pub renewed: u64,
    /// Acquire attempts that found the lock taken (refused, or queued by `LOCK.WAIT`).
    pub contended: u64,
    /// Hand-offs to a waiter.
    pub granted: u64,
    /// Holds that ended because their TTL ran out.
    pub expired: u64,
    /// `LOCK.WAIT` calls that timed out.
    pub wait_timeouts: u64,
    /// Holds broken by `LOCK.FORCERELEASE`.
    pub forcereleased: u64,
    /// Exclusive holds made shared by `LOCK.DOWNGRADE`.
    pub downgraded: u64,
    /// Observers answered because their key changed (`LOCK.OBSERVE`).
    pub observe_wakeups: u64,
    /// Inner commands `LOCK.FENCED` ran (its token passed).
    pub fenced: u64,
    /// `LOCK.FENCED` calls refused for a stale token.
    pub fenced_stale: u64,
    /// `LOCK.FENCED` calls refused before the token was looked at (a command it does not run).
    pub fenced_refused: u64,
}
