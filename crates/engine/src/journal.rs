//! The journal of holds that ended other than by their owner (`LOCK.LOG`, `LOCK.HISTORY`): a
//! bounded ring of entries, newest last, in memory only. What a client asks when its hold went
//! away: expired, force-released by whom, deleted, evicted...
//!
//! Memory is bounded by its length (`relock.log-max-len`) and what one entry may take: a key is
//! kept up to [`KEY_BYTES`] (its full length is kept too, and a longer key is matched by a hash
//! of all of it), an owner up to 256 bytes, the client's description up to [`CLIENT_BYTES`].
//! Recording is O(1); reading `count` entries of one key is a scan of the ring (at most its
//! length).

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// The longest key an entry keeps whole.
pub const KEY_BYTES: usize = 1024;
/// The longest client description an entry keeps.
pub const CLIENT_BYTES: usize = 512;
/// The longest journal `relock.log-max-len` may ask for.
pub const MAX_LEN: usize = 100_000;
/// The default length.
pub const DEFAULT_LEN: usize = 1024;

/// Why a hold ended other than by its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Its ttl (exclusive) or lease (shared) ran out.
    Expired,
    /// `LOCK.FORCERELEASE`.
    ForceReleased,
    /// `DEL`, `UNLINK`, `GETDEL`, or overwritten by another value.
    Deleted,
    /// Evicted under `maxmemory`.
    Evicted,
    /// Granted to a waiter that hung up before every answer carrying it reached it.
    Revoked,
    /// Replaced by `RESTORE` or `COPY ... REPLACE`.
    Restored,
    /// `RENAME` or `MOVE` away: the hold lives on elsewhere.
    Moved,
    /// `FLUSHDB` or `FLUSHALL` (one entry for the whole flush).
    Flushed,
    /// `SWAPDB` (one entry for the swap).
    Swapped,
}

impl Reason {
    /// Every reason, in the order of their bits.
    pub const ALL: [Reason; 9] = [
        Reason::Expired,
        Reason::ForceReleased,
        Reason::Deleted,
        Reason::Evicted,
        Reason::Revoked,
        Reason::Restored,
        Reason::Moved,
        Reason::Flushed,
        Reason::Swapped,
    ];

    /// Its name, as `LOCK.LOG` and `relock.log-reasons` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::ForceReleased => "forcereleased",
            Reason::Deleted => "deleted",
            Reason::Evicted => "evicted",
            Reason::Revoked => "revoked",
            Reason::Restored => "restored",
            Reason::Moved => "moved",
            Reason::Flushed => "flushed",
            Reason::Swapped => "swapped",
        }
    }

    /// Its bit in a [`Reasons`] set.
    pub fn bit(self) -> u32 {
        1 << Reason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// A set of reasons (which the journal records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reasons(pub u32);

impl Reasons {
    /// Every reason.
    pub const ALL: Reasons = Reasons((1 << Reason::ALL.len()) - 1);

    pub fn contains(self, reason: Reason) -> bool {
        self.0 & reason.bit() != 0
    }
}

/// One hold that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Increasing over the server's life (not reset by `LOCK.LOG RESET`).
    pub id: u64,
    /// When it ended (Unix ms).
    pub time: i64,
    /// The key's db (for a flush of every db, -1).
    pub db: i32,
    /// For a swap, the other db.
    pub swapped_with: Option<i32>,
    /// The key (its first [`KEY_BYTES`]; empty for a flush or a swap).
    pub key: Box<[u8]>,
    /// The key's whole length.
    pub key_len: usize,
    key_hash: u64,
    pub owner: Box<[u8]>,
    pub token: u64,
    pub reason: Reason,
    /// How long it was held (ms from grant to end), if its grant time is known.
    pub held: Option<i64>,
    /// Who ended it, as `CLIENT LIST` shows a client; empty where the server does not say.
    pub client_info: Box<str>,
    /// Waiters queued for the key when it ended.
    pub waiters: usize,
}

/// What the engine reports of one ended hold.
#[derive(Clone, Copy, Debug)]
pub struct Ended<'a> {
    pub db: i32,
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub token: u64,
    /// Unix ms; 0 if unknown.
    pub granted_at: i64,
    pub reason: Reason,
    pub client_info: &'a str,
    pub waiters: usize,
    /// [`Journal::key_hash`] of `key`: computed once for the many holds of one key.
    pub key_hash: u64,
}

/// The journal.
#[derive(Clone, Debug)]
pub struct Journal {
    entries: VecDeque<Entry>,
    max_len: usize,
    reasons: Reasons,
    next_id: u64,
    hasher: RandomState,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            entries: VecDeque::new(),
            max_len: DEFAULT_LEN,
            reasons: Reasons::ALL,
            next_id: 0,
            hasher: RandomState::new(),
        }
    }
}

impl Journal {
    /// Whether `reason` is recorded now (a host may skip gathering what it would not record).
    pub fn records(&self, reason: Reason) -> bool {
        self.max_len > 0 && self.reasons.contains(reason)
    }

    /// The most entries the journal keeps.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Records an ended hold at `now` (Unix ms), dropping the oldest entry when full.
    pub fn record(&mut self, now: i64, ended: Ended<'_>) {
        if !self.records(ended.reason) {
            return;
        }
        while self.entries.len() >= self.max_len {
            self.entries.pop_front();
        }
        self.next_id += 1;
        let keep = ended.key.len().min(KEY_BYTES);
        let mut client = ended.client_info;
        if client.len() > CLIENT_BYTES {
            let mut cut = CLIENT_BYTES;
            while !client.is_char_boundary(cut) {
                cut -= 1;
            }
            client = &client[..cut];
        }
        self.entries.push_back(Entry {
            id: self.next_id,
            time: now,
            db: ended.db,
            swapped_with: None,
            key: ended.key[..keep].into(),
            key_len: ended.key.len(),
            key_hash: ended.key_hash,
            owner: ended.owner[..ended.owner.len().min(256)].into(),
            token: ended.token,
            reason: ended.reason,
            held: (ended.granted_at > 0).then(|| now.saturating_sub(ended.granted_at).max(0)),
            client_info: client.into(),
            waiters: ended.waiters,
        });
    }

    /// The hash entries of `key` are found by: O(len(key)), so computed once per key and
    /// command, not per hold (a 1 MB key and 100,000 holds would hash 100 GB).
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The newest `count` entries, newest first (`count` 0: none).
    pub fn latest(&self, count: usize) -> Vec<&Entry> {
        self.entries.iter().rev().take(count).collect()
    }

    /// Every hold of a db ended at once: one entry with an empty key, for `dbs` (a flushed db
    /// twice, or the two swapped; `None`: every db flushed).
    pub fn record_all(&mut self, now: i64, dbs: Option<(i32, i32)>, reason: Reason) {
        let (db, other) = dbs.unwrap_or((-1, -1));
        self.record(
            now,
            Ended {
                db,
                key: b"",
                owner: b"",
                token: 0,
                granted_at: 0,
                reason,
                client_info: "",
                waiters: 0,
                key_hash: 0,
            },
        );
        if let Some(last) = self
            .entries
            .back_mut()
            .filter(|e| e.time == now && e.key_len == 0)
        {
            last.swapped_with = (other != db).then_some(other);
        }
    }

    /// The newest `count` entries of `key` in `db`, newest first, with the flushes and swaps of
    /// its db (its holds ended with them).
    pub fn of_key(&self, db: i32, key: &[u8], count: usize) -> Vec<&Entry> {
        let hash = self.hasher.hash_one(key);
        let keep = key.len().min(KEY_BYTES);
        self.entries
            .iter()
            .rev()
            .filter(|e| {
                if matches!(e.reason, Reason::Flushed | Reason::Swapped) {
                    return e.db == -1 || e.db == db || e.swapped_with == Some(db);
                }
                e.db == db && e.key_len == key.len() && e.key_hash == hash && *e.key == key[..keep]
            })
            .take(count)
            .collect()
    }

    /// Empties it (ids keep growing).
    pub fn reset(&mut self) {
        self.entries = VecDeque::new();
    }

    /// Sets its length (dropping the oldest entries beyond it; 0 turns it off) and what it
    /// records.
    pub fn configure(&mut self, max_len: usize, reasons: Reasons) {
        self.max_len = max_len.min(MAX_LEN);
        self.reasons = reasons;
        while self.entries.len() > self.max_len {
            self.entries.pop_front();
        }
        if self.max_len == 0 {
            self.entries = VecDeque::new();
        }
    }

    /// What it records.
    pub fn reasons(&self) -> Reasons {
        self.reasons
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it keeps none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended<'a>(j: &Journal, key: &'a [u8], reason: Reason) -> Ended<'a> {
        Ended {
            db: 0,
            key,
            owner: b"o",
            token: 7,
            granted_at: 1_000,
            reason,
            client_info: "",
            waiters: 2,
            key_hash: j.key_hash(key),
        }
    }

    #[test]
    fn a_bounded_ring_newest_first() {
        let mut j = Journal::default();
        j.configure(3, Reasons::ALL);
        for i in 0..5u8 {
            j.record(2_000 + i64::from(i), ended(&j, &[b'k', i], Reason::Expired));
        }
        let ids: Vec<u64> = j.latest(10).iter().map(|e| e.id).collect();
        assert_eq!(ids, [5, 4, 3], "the oldest two dropped");
        assert_eq!(j.latest(1)[0].held, Some(1_004));
        assert_eq!(j.latest(1)[0].waiters, 2);
        j.configure(1, Reasons::ALL);
        assert_eq!(j.len(), 1);
        j.reset();
        assert!(j.is_empty());
        j.record(3_000, ended(&j, b"x", Reason::Moved));
        assert_eq!(j.latest(1)[0].id, 6, "ids keep growing after a reset");
    }

    #[test]
    fn reasons_and_length_zero_decide_what_is_recorded() {
        let mut j = Journal::default();
        j.configure(10, Reasons(Reason::Expired.bit() | Reason::Evicted.bit()));
        j.record(1, ended(&j, b"k", Reason::Deleted));
        j.record(1, ended(&j, b"k", Reason::Evicted));
        assert_eq!(j.latest(10).len(), 1);
        assert!(!j.records(Reason::Deleted) && j.records(Reason::Expired));
        j.configure(0, Reasons::ALL);
        j.record(1, ended(&j, b"k", Reason::Evicted));
        assert!(j.is_empty() && !j.records(Reason::Evicted));
        assert_eq!(
            Reason::ALL
                .iter()
                .map(|r| r.name())
                .collect::<Vec<_>>()
                .join(" "),
            "expired forcereleased deleted evicted revoked restored moved flushed swapped"
        );
    }

    #[test]
    fn history_of_a_key_even_a_very_long_one() {
        let mut j = Journal::default();
        let long = vec![b'x'; 100_000];
        let mut other = long.clone();
        other[99_999] = b'y';
        j.record(1, ended(&j, &long, Reason::Expired));
        j.record(2, ended(&j, &other, Reason::Expired));
        j.record(3, ended(&j, b"short", Reason::Expired));
        let mine = j.of_key(0, &long, 10);
        assert_eq!(
            mine.len(),
            1,
            "a long key is told from another with its prefix"
        );
        assert_eq!(mine[0].key.len(), KEY_BYTES);
        assert_eq!(mine[0].key_len, 100_000);
        assert_eq!(j.of_key(1, b"short", 10).len(), 0, "another db");
        assert_eq!(j.of_key(0, b"short", 10).len(), 1);
    }

    #[test]
    fn a_flush_or_a_swap_is_one_entry_in_the_history_of_every_key_it_ended() {
        let mut j = Journal::default();
        j.record(1, ended(&j, b"k", Reason::Expired));
        j.record_all(2, Some((3, 5)), Reason::Swapped);
        j.record_all(3, Some((7, 7)), Reason::Flushed);
        j.record_all(4, None, Reason::Flushed);
        assert_eq!(j.len(), 4, "one entry each");
        let reasons = |db: i32| -> Vec<&str> {
            j.of_key(db, b"k", 10)
                .iter()
                .map(|e| e.reason.name())
                .collect()
        };
        assert_eq!(
            reasons(0),
            ["flushed", "expired"],
            "flushall, then its own expiry"
        );
        assert_eq!(reasons(5), ["flushed", "swapped"]);
        assert_eq!(reasons(7), ["flushed", "flushed"]);
        assert_eq!(j.latest(10)[2].swapped_with, Some(5));
        assert_eq!(j.latest(10)[1].swapped_with, None);
    }

    #[test]
    fn long_client_descriptions_are_cut_on_a_char_boundary() {
        let mut j = Journal::default();
        let client = "é".repeat(400);
        let mut e = ended(&j, b"k", Reason::ForceReleased);
        e.client_info = &client;
        j.record(1, e);
        let kept = &j.latest(1)[0].client_info;
        assert!(kept.len() <= CLIENT_BYTES && kept.chars().all(|c| c == 'é'));
    }

    /// A cut that falls inside a character backs up to its start: three-byte characters, whose
    /// boundaries miss [`CLIENT_BYTES`], keep every whole one that fits. (Recorded on another
    /// thread: a cut that never found its boundary fails the test instead of hanging it.)
    #[test]
    fn a_cut_inside_a_character_keeps_the_whole_ones_before_it() {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut j = Journal::default();
            let client = "€".repeat(400);
            let mut e = ended(&j, b"k", Reason::ForceReleased);
            e.client_info = &client;
            j.record(1, e);
            let _ = done.send(j.latest(1)[0].client_info.clone());
        });
        let kept = result
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("recorded in time");
        assert_eq!(&*kept, "€".repeat(CLIENT_BYTES / 3));
    }
}
