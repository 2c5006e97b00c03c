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

/// Nil replies a [`Watch`] records one by one in each [`SAMPLE_WINDOW_MS`]; beyond them, one in
/// [`SAMPLE_EVERY`] (1,000 a second).
pub const EXACT_PER_WINDOW: u64 = 100;
/// The window over which the rate of nil replies is judged, ms.
pub const SAMPLE_WINDOW_MS: i64 = 100;
/// Under load, one nil reply in this many updates the hot-keys table, counting for all of them.
pub const SAMPLE_EVERY: u32 = 32;

/// Which nil replies update the hot-keys table (see [`Watch::contended`]).
#[derive(Clone, Debug)]
struct Sampler {
    /// Nil replies until the next that is recorded (counting it).
    left: u32,
    /// Nil replies each recorded one counts for (1: all recorded).
    every: u32,
    /// Start of the current window, Unix ms, and the nil replies seen in it.
    since_ms: i64,
    seen: u64,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            left: 1,
            every: 1,
            since_ms: i64::MIN,
            seen: 0,
        }
    }
}

/// The journal and the statistics.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    pub journal: Journal,
    pub contention: Contention,
    sampler: Sampler,
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

    /// A request for `key` was answered nil: it is taken. `now` gives the time (Unix ms), read
    /// only for the nil replies that are recorded.
    ///
    /// Recorded one by one up to [`EXACT_PER_WINDOW`] in a [`SAMPLE_WINDOW_MS`] window; beyond
    /// that, one in [`SAMPLE_EVERY`], counting for all the nil replies since the last recorded
    /// one, so that the table's totals stay exact and a key's `contended` is an estimate. The
    /// others cost a decrement: hashing the key's name and looking it up in the table was 18 %
    /// of a refused `LOCK.ACQUIRE`.
    pub fn contended(&mut self, key: KeyRef<'_>, now: impl FnOnce() -> i64) {
        if !self.contention.enabled {
            return;
        }
        let sampler = &mut self.sampler;
        sampler.left -= 1;
        if sampler.left > 0 {
            return;
        }
        let counts = sampler.every;
        let now = now();
        sampler.seen += u64::from(counts);
        if now.saturating_sub(sampler.since_ms) >= SAMPLE_WINDOW_MS {
            // A new window: recorded one by one again unless the last one was busy.
            sampler.every = if sampler.seen > EXACT_PER_WINDOW && counts > 1 {
                SAMPLE_EVERY
            } else {
                1
            };
            sampler.since_ms = now;
            sampler.seen = 0;
        } else if sampler.seen >= EXACT_PER_WINDOW {
            sampler.every = SAMPLE_EVERY;
        }
        sampler.left = sampler.every;
        self.contention
            .keys
            .update(key, 0, |s| s.contended += u64::from(counts));
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
    use crate::host::KeyRef;
    use crate::journal::Reasons;

    fn contended_of(w: &Watch, name: &[u8]) -> u64 {
        w.contention
            .keys
            .hottest(usize::MAX)
            .into_iter()
            .find(|(k, _)| k.name == name)
            .map_or(0, |(_, s)| s.contended)
    }

    /// A few nil replies are each recorded; a storm of them is sampled, each recorded one
    /// counting for those skipped, so that the table's total stays what happened.
    #[test]
    fn nil_replies_are_exact_when_few_and_sampled_when_many() {
        let mut w = Watch::default();
        let a = KeyRef { db: 0, name: b"a" };
        let b = KeyRef { db: 0, name: b"b" };
        let mut clock = 1_000_000;
        let mut reads = 0;
        for i in 0..(EXACT_PER_WINDOW - 1) {
            w.contended(if i % 2 == 0 { a } else { b }, || {
                reads += 1;
                clock
            });
        }
        assert_eq!(
            (contended_of(&w, b"a"), contended_of(&w, b"b")),
            (EXACT_PER_WINDOW / 2, EXACT_PER_WINDOW / 2 - 1),
            "below the rate, every one is recorded"
        );
        // A storm in the same window: one in SAMPLE_EVERY is recorded (and reads the clock).
        reads = 0;
        let storm = 100_000u64;
        for _ in 0..storm {
            w.contended(a, || {
                reads += 1;
                clock
            });
        }
        assert!(
            reads <= storm / u64::from(SAMPLE_EVERY) + 2,
            "{reads} clock reads"
        );
        let total = contended_of(&w, b"a") + contended_of(&w, b"b");
        let happened = storm + EXACT_PER_WINDOW - 1;
        assert!(
            total <= happened && total + u64::from(SAMPLE_EVERY) > happened,
            "{total} recorded of {happened}"
        );
        // The storm is over: after a quiet window (the skipped nil replies still count, with
        // the next recorded one), each nil reply is recorded again.
        for _ in 0..2 {
            clock += 10 * SAMPLE_WINDOW_MS;
            for _ in 0..u64::from(SAMPLE_EVERY) {
                w.contended(b, || clock);
            }
        }
        let before = contended_of(&w, b"b");
        w.contended(b, || clock);
        w.contended(b, || clock);
        assert_eq!(contended_of(&w, b"b"), before + 2, "exact again");
        // Off, nothing is recorded and the clock is not read.
        w.contention.enabled = false;
        w.contended(a, || panic!("no clock read when statistics are off"));
    }

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
