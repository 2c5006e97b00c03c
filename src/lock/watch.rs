//! What operators watch, kept by the engine as things happen: the journal of holds that ended
//! other than by their owner, and the contention statistics (wait and hold distributions, the
//! hottest keys). The engine tells [`Watch`] what happened; it decides what to keep (by
//! `relock.log-*` and `relock.stats*`), in fixed memory.

use super::contention::Contention;
use super::host::KeyRef;
use super::journal::{Ended, Journal, Reason};

/// Hold durations recorded per ending of many holds at once (a whole shared key), so that such
/// an ending costs no more than this.
pub const BULK_SAMPLE: usize = 1024;

/// The most holds of one key that end together without a command of relock naming them (a
/// shared key deleted, expired, evicted, overwritten, moved or replaced by Redis; its lapsed
/// leases replaced by a new hold) that are described and journaled: they end inside one
/// callback, often in Redis's own expire or eviction cycle, which must stay short whatever
/// `relock.log-max-len` is. Describing 100,000 holders there took 43 ms, journaling them up to
/// 650 ms.
pub const MASS_END: usize = 1024;

/// The reasons a key ending behind relock's back may have (its `unlink2` callback).
const UNLINKED: [Reason; 5] = [
    Reason::Expired,
    Reason::Deleted,
    Reason::Evicted,
    Reason::Restored,
    Reason::Moved,
];

/// A hold as the journal describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedHold {
    pub owner: Box<[u8]>,
    pub token: u64,
    /// Unix ms; 0 if unknown.
    pub granted_at: i64,
}

/// The journal and the statistics.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    pub journal: Journal,
    pub contention: Contention,
}

/// Where and when something happened.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    pub key: KeyRef<'a>,
    /// Unix ms.
    pub now: i64,
    /// Waiters queued for the key.
    pub waiters: usize,
    /// The journal's hash of the key's name (see [`Watch::at`]).
    key_hash: u64,
}

impl At<'_> {
    /// The same place at another time.
    pub fn when(self, now: i64) -> Self {
        At { now, ..self }
    }
}

impl Watch {
    /// Where and when holds end: `key` with `waiters` queued, at `now` (Unix ms). Hashes the
    /// key's name once: build it once for the many holds of one key.
    pub fn at<'a>(&self, key: KeyRef<'a>, now: i64, waiters: usize) -> At<'a> {
        At {
            key,
            now,
            waiters,
            key_hash: self.journal.key_hash(key.name),
        }
    }

    /// A hold ended other than by its owner, for `reason`, ended by `client` (as `CLIENT LIST`
    /// shows it; empty if the server does not say).
    pub fn lost(&mut self, at: At<'_>, hold: &EndedHold, reason: Reason, client: &str) {
        self.held(at.now, hold.granted_at);
        self.journal.record(
            at.now,
            Ended {
                db: at.key.db,
                key: at.key.name,
                owner: &hold.owner,
                token: hold.token,
                granted_at: hold.granted_at,
                reason,
                client_info: client,
                waiters: at.waiters,
                key_hash: at.key_hash,
            },
        );
    }

    /// Whether the journal records `reason` (a caller may skip gathering holds it would not).
    pub fn records(&self, reason: Reason) -> bool {
        self.journal.records(reason)
    }

    /// How many of many holds ending at once by `LOCK.FORCERELEASE key` to describe: what the
    /// journal keeps, and enough for the hold distribution (the command is O(H) by nature).
    pub fn bulk(&self) -> usize {
        self.journal.max_len().max(BULK_SAMPLE)
    }

    /// How many of many holds of one key ending together for `reasons`, not by a command of
    /// relock's (see [`MASS_END`]), to describe: what the journal keeps of them (none when it
    /// records none of `reasons`) or a sample for the hold distribution, at most [`MASS_END`].
    pub fn mass_end(&self, reasons: &[Reason]) -> usize {
        let journal = if reasons.iter().any(|r| self.journal.records(*r)) {
            self.journal.max_len()
        } else {
            0
        };
        let sample = if self.contention.enabled {
            BULK_SAMPLE
        } else {
            0
        };
        journal.max(sample).min(MASS_END)
    }

    /// How many holds of a key Redis unlinks to describe (see [`Watch::mass_end`]): 0 when
    /// nothing would be kept of them.
    pub fn unlinked(&self) -> usize {
        self.mass_end(&UNLINKED)
    }

    /// Every hold of `dbs` ended at once (`flushed`, `swapped`; `None`: every db): one entry,
    /// with an empty key.
    pub fn all_ended(&mut self, now: i64, dbs: Option<(i32, i32)>, reason: Reason) {
        self.journal.record_all(now, dbs, reason);
    }

    /// Whether anything is kept of a hold ending for `reason` (journal or statistics).
    pub fn wants(&self, reason: Reason) -> bool {
        self.contention.enabled || self.journal.records(reason)
    }

    /// A hold granted at `granted_at` (Unix ms; 0: unknown) ended at `now`.
    pub fn held(&mut self, now: i64, granted_at: i64) {
        if self.contention.enabled && granted_at > 0 {
            let ms = now.saturating_sub(granted_at).max(0) as u64;
            self.contention.holds.record(ms.saturating_mul(1000));
        }
    }

    /// A request for `key` was answered nil: it is taken.
    pub fn contended(&mut self, key: KeyRef<'_>) {
        if self.contention.enabled {
            self.contention.keys.update(key, 0, |s| s.contended += 1);
        }
    }

    /// A `LOCK.WAIT` for `key` queued.
    pub fn queued(&mut self, key: KeyRef<'_>) {
        if self.contention.enabled {
            self.contention.keys.update(key, 0, |s| s.waits += 1);
        }
    }

    /// A waiter for `key` was granted after `waited_us` µs (`granted`), or timed out.
    pub fn waited(&mut self, key: KeyRef<'_>, waited_us: u64, granted: bool) {
        if !self.contention.enabled {
            return;
        }
        self.contention.waits.record(waited_us);
        let ms = waited_us / 1000;
        self.contention.keys.update(key, ms, |s| {
            s.wait_ms_max = s.wait_ms_max.max(ms);
            if granted {
                s.granted += 1;
            } else {
                s.timeouts += 1;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::journal::Reasons;

    #[test]
    fn a_mass_end_is_described_within_its_bound_and_only_if_kept() {
        let mut w = Watch::default();
        w.journal.configure(100_000, Reasons::ALL);
        assert_eq!(w.unlinked(), MASS_END, "a long journal: still bounded");
        assert_eq!(
            w.bulk(),
            100_000,
            "LOCK.FORCERELEASE logs up to the journal's length"
        );
        w.journal.configure(10, Reasons::ALL);
        assert_eq!(
            w.unlinked(),
            BULK_SAMPLE,
            "a sample for the hold distribution"
        );
        w.contention.enabled = false;
        assert_eq!(w.unlinked(), 10, "what the journal keeps");
        let forced = Reasons(Reason::ForceReleased.bit() | Reason::Revoked.bit());
        w.journal.configure(100_000, forced);
        assert_eq!(
            w.unlinked(),
            0,
            "no reason Redis's removal may have is recorded"
        );
        w.journal.configure(100_000, Reasons(Reason::Evicted.bit()));
        assert_eq!(w.unlinked(), MASS_END);
        assert_eq!(w.mass_end(&[Reason::Expired]), 0);
        w.journal.configure(0, Reasons::ALL);
        assert_eq!(w.unlinked(), 0, "journal off, statistics off");
    }
}
