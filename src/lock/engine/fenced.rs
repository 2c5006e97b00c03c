//! `LOCK.FENCED`'s check: does a token prove a live hold of a key? The engine only answers and
//! counts; the host runs the inner command after the engine is released, so whatever that
//! command does to a lock key is handled as if it ran directly.

use std::fmt;

use super::Engine;
use crate::lock::host::{Handles, Host, Key};
use crate::lock::packed::LockRef;

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
    /// `LOCK.FENCED`'s check of `token` against the live hold of `key`. O(1) for an exclusive
    /// hold, O(H) for a shared key with H holders (no index by token). A stale token is counted.
    pub fn fence<H: Host<T>>(&mut self, host: &H, key: &H::Key, token: u64) -> Fence {
        let now = host.now_ms();
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
