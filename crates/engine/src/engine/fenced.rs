//! `LOCK.FENCED`'s check: does a token prove a live hold of a key? The engine only answers and
//! counts; the host runs the inner command after the engine is released, so whatever that
//! command does to a lock key is handled as if it ran directly.

use std::fmt;

use super::Engine;
use crate::host::{Handles, Key};
use crate::packed::LockRef;

/// What a key holds now, as `-FENCED` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Current {
    /// An exclusive hold with this token.
    Token(u64),
    /// Live shared holders (their tokens are not listed).
    Shared,
    /// No live hold.
    None,
}

/// The check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The token is the exclusive holder's, or a live shared holder's.
    Pass,
    /// It is not: nothing runs.
    Stale { token: u64, current: Current },
}

impl fmt::Display for Current {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Current::Token(t) => write!(f, "{t}"),
            Current::Shared => f.write_str("shared"),
            Current::None => f.write_str("none"),
        }
    }
}

impl Fence {
    /// The error a stale token is answered with.
    pub fn error(&self) -> Option<String> {
        match self {
            Fence::Pass => None,
            Fence::Stale { token, current } => {
                Some(format!("FENCED stale token {token}, current {current}"))
            }
        }
    }
}

impl<T: Handles> Engine<T> {
    /// `LOCK.FENCED`'s check of `token` against the live hold of `key` at `now` (Unix ms: the
    /// server's command time, frozen for a whole `MULTI` or script where the server has one).
    /// O(1) for an exclusive hold (whose lease is the key's own expiry, Redis's to apply), O(H)
    /// for a shared key with H holders (no index by token). A stale token is counted.
    pub fn fence(&mut self, key: &impl Key, token: u64, now: i64) -> Fence {
        let current = match key.lock() {
            None => Current::None,
            Some(LockRef::Exclusive(hold)) if hold.token() == token => return Fence::Pass,
            Some(LockRef::Exclusive(hold)) => Current::Token(hold.token()),
            Some(LockRef::Shared(shared)) => {
                // Lapsed leases are gone for every command, even before the engine ends them.
                if shared
                    .iter()
                    .any(|(_, h)| h.token == token && h.alive_at(now))
                {
                    return Fence::Pass;
                }
                match shared.live(now) {
                    0 => Current::None,
                    _ => Current::Shared,
                }
            }
        };
        self.stats.fenced_stale += 1;
        Fence::Stale { token, current }
    }

    /// An inner command of `LOCK.FENCED` ran (`fenced_total`).
    pub fn fenced_ran(&mut self) {
        self.stats.fenced += 1;
    }

    /// An inner command was refused before the check (`fenced_refused_total`).
    pub fn fenced_refused(&mut self) {
        self.stats.fenced_refused += 1;
    }

    /// `LOCK.STATS RESET`: clears the `LOCK.FENCED` counters.
    pub fn reset_fenced_counters(&mut self) {
        self.stats.fenced = 0;
        self.stats.fenced_stale = 0;
        self.stats.fenced_refused = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{Current, Fence};
    use crate::memory::Sim;
    use crate::shared::Mode;
    use crate::Reply;

    const START: i64 = 1_800_000_000_000;

    fn token(reply: Reply) -> u64 {
        match reply {
            Reply::Integer(t) => t,
            other => panic!("expected a token, got {other:?}"),
        }
    }

    #[test]
    fn exclusive_hold() {
        let mut sim = Sim::new(START);
        assert_eq!(
            sim.fence(b"k", 5),
            Fence::Stale {
                token: 5,
                current: Current::None
            }
        );
        let t = token(sim.acquire(b"k", b"a", 1000));
        assert_eq!(sim.fence(b"k", t), Fence::Pass);
        let stale = sim.fence(b"k", t + 1);
        assert_eq!(
            stale.error().as_deref(),
            Some(format!("FENCED stale token {}, current {t}", t + 1).as_str())
        );
        let stats = sim.engine.stats();
        assert_eq!((stats.fenced_stale, stats.fenced), (2, 0));
        sim.engine.reset_fenced_counters();
        assert_eq!(sim.engine.stats().fenced_stale, 0);
    }

    #[test]
    fn shared_holders_and_lapsed_leases() {
        let mut sim = Sim::new(START);
        let a = token(sim.acquire_as(b"k", b"a", 1000, Mode::shared(0)));
        let b = token(sim.acquire_as(b"k", b"b", 5000, Mode::shared(0)));
        assert_eq!(sim.fence(b"k", a), Fence::Pass);
        assert_eq!(sim.fence(b"k", b), Fence::Pass);
        let other = a.max(b) + 1;
        assert_eq!(
            sim.fence(b"k", other),
            Fence::Stale {
                token: other,
                current: Current::Shared
            }
        );
        // a's lease lapsed, its timer not run yet: its token no longer proves a hold.
        sim.host.set_now(START + 2000);
        assert_eq!(
            sim.fence(b"k", a),
            Fence::Stale {
                token: a,
                current: Current::Shared
            }
        );
        assert_eq!(sim.fence(b"k", b), Fence::Pass);
        // Every lease lapsed: none.
        sim.host.set_now(START + 6000);
        assert_eq!(
            sim.fence(b"k", b),
            Fence::Stale {
                token: b,
                current: Current::None
            }
        );
    }
}
