//! Contention statistics: how long waits and holds last (server-wide distributions, as
//! `INFO latencystats` shows command latencies), and which keys are waited for most (a bounded
//! approximate top-k). Fixed memory, set by configuration; O(1) per event for the
//! distributions, O(log k) for the top-k.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use super::host::KeyRef;

/// The bytes of a key's name the table keeps (a longer key is shown by its prefix, and told from
/// others by its length and hash).
pub const KEY_BYTES: usize = 1024;

/// Values below this are kept exactly.
const EXACT: u64 = 64;
/// Buckets per power of two above it: a bucket is 1/32 of its power wide, so its middle is
/// within 1.6 % of every value in it.
const SUB_BUCKETS: u64 = 32;
/// Powers of two covered above `EXACT` (values up to 2^50 µs, 35 years).
const POWERS: u64 = 44;
const BUCKETS: usize = (EXACT + POWERS * SUB_BUCKETS) as usize;

/// A log-bucketed distribution of durations in µs, relative error at most 3 %.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }
}

impl Histogram {
    /// Counts one duration of `us` µs.
    pub fn record(&mut self, us: u64) {
        self.counts[bucket(us)] += 1;
        self.total += 1;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1), in µs: the middle of its bucket; 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, width) = bounds(i);
                return low as f64 + (width as f64 - 1.0) / 2.0;
            }
        }
        0.0
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|n| *n = 0);
        self.total = 0;
    }
}

/// The bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let power = 63 - u64::from(v.leading_zeros()); // >= 6
    let index = EXACT + (power - 6) * SUB_BUCKETS + ((v >> (power - 5)) - SUB_BUCKETS);
    (index as usize).min(BUCKETS - 1)
}

/// The lowest value of bucket `i`, and how many values it holds.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < EXACT {
        return (i, 1);
    }
    let power = (i - EXACT) / SUB_BUCKETS + 6;
    let sub = (i - EXACT) % SUB_BUCKETS + SUB_BUCKETS;
    (sub << (power - 5), 1 << (power - 5))
}

/// One key's contention, since it entered the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyStats {
    /// `LOCK.WAIT`s that queued.
    pub waits: u64,
    /// Hand-offs to a waiter.
    pub granted: u64,
    /// Waits that timed out.
    pub timeouts: u64,
    /// Requests answered nil because the key was taken.
    pub contended: u64,
    /// Total wait, in ms (the ranking; see `error`).
    pub wait_ms_total: u64,
    /// At most this much of `wait_ms_total` may belong to keys it replaced in the table.
    pub error: u64,
    /// The longest single wait, in ms.
    pub wait_ms_max: u64,
}

/// A key as the table names it: at most [`KEY_BYTES`] of its name, and its whole length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    pub db: i32,
    /// A `Vec` so that a key replacing another in a full table reuses its bytes (no allocation
    /// on the refusal that brings it in, unless its name is longer).
    pub name: Vec<u8>,
    pub len: usize,
    tag: Tag,
}

/// What tells keys apart in the table without keeping their whole names: db, length, and a
/// 64-bit hash (two keys that collide share one entry: the statistics are approximate anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tag {
    db: i32,
    len: usize,
    hash: u64,
}

/// Hashes a [`Tag`] by the keyed hash it carries already (no second SipHash per event).
#[derive(Default)]
struct TagHasher(u64);

impl Hasher for TagHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = self.0.rotate_left(8) ^ n as u64;
    }

    fn write_i32(&mut self, n: i32) {
        self.0 = self.0.rotate_left(8) ^ u64::from(n as u32);
    }
}

/// The hottest keys by total wait, at most `capacity` of them: Space-Saving over weighted
/// counts. A key that arrives when the table is full replaces the one with the least total
/// wait, and starts from that total, which it records as its error bound: every key's true
/// total is between `wait_ms_total - error` and `wait_ms_total`, and any key whose true total
/// is above the table's smallest is in the table. Memory: at most `capacity` entries of at most
/// [`KEY_BYTES`] each.
#[derive(Clone, Debug)]
pub struct HotKeys {
    capacity: usize,
    keys: Vec<(HotKey, KeyStats)>,
    index: HashMap<Tag, usize, BuildHasherDefault<TagHasher>>,
    /// The key of [`key_hash`], random per table.
    seed: u64,
    /// A min-heap of places in `keys` by total wait, and each place's position in it.
    heap: Vec<usize>,
    position: Vec<usize>,
}

impl HotKeys {
    /// A table of at most `capacity` keys.
    pub fn new(capacity: usize) -> HotKeys {
        HotKeys {
            capacity,
            keys: Vec::new(),
            index: HashMap::default(),
            seed: RandomState::new().hash_one(0x5eed_u64),
            heap: Vec::new(),
            position: Vec::new(),
        }
    }

    /// The most keys it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Applies `change` to `key`'s stats, `wait_ms` more total wait. No allocation unless the key
    /// enters the table.
    pub fn update(&mut self, key: KeyRef<'_>, wait_ms: u64, change: impl FnOnce(&mut KeyStats)) {
        if self.capacity == 0 {
            return;
        }
        let tag = Tag {
            db: key.db,
            len: key.name.len(),
            hash: key_hash(self.seed, key.name),
        };
        let kept = &key.name[..key.name.len().min(KEY_BYTES)];
        let place = match self.index.get(&tag) {
            Some(&place) => place,
            None if self.keys.len() < self.capacity => {
                let place = self.keys.len();
                let named = HotKey {
                    db: key.db,
                    name: kept.to_vec(),
                    len: key.name.len(),
                    tag,
                };
                self.keys.push((named, KeyStats::default()));
                self.index.insert(tag, place);
                self.position.push(self.heap.len());
                self.heap.push(place);
                // Its total (0) may be below its parent's: the least must stay on top.
                self.sift_up(self.heap.len() - 1);
                place
            }
            None => {
                // Replace the key with the least total wait; the newcomer inherits its total,
                // and the old key's name buffer.
                let place = self.heap[0];
                let (old, stats) = &mut self.keys[place];
                let floor = stats.wait_ms_total;
                *stats = KeyStats {
                    wait_ms_total: floor,
                    error: floor,
                    ..KeyStats::default()
                };
                self.index.remove(&old.tag);
                old.db = key.db;
                old.name.clear();
                old.name.extend_from_slice(kept);
                old.len = key.name.len();
                old.tag = tag;
                self.index.insert(tag, place);
                place
            }
        };
        let stats = &mut self.keys[place].1;
        stats.wait_ms_total += wait_ms;
        change(stats);
        if wait_ms > 0 {
            self.sift_down(self.position[place]);
        }
    }

    /// The hottest `count` keys, hottest first. O(k + count log count) for k keys in the table.
    pub fn hottest(&self, count: usize) -> Vec<(&HotKey, &KeyStats)> {
        let mut all: Vec<(&HotKey, &KeyStats)> = self.keys.iter().map(|(k, s)| (k, s)).collect();
        let hotter = |a: &(&HotKey, &KeyStats), b: &(&HotKey, &KeyStats)| hotter(a.1, b.1);
        if count < all.len() {
            all.select_nth_unstable_by(count, hotter);
            all.truncate(count);
        }
        all.sort_unstable_by(hotter);
        all
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets every key, keeping `capacity` (0 turns the table off).
    pub fn reset(&mut self, capacity: usize) {
        *self = HotKeys::new(capacity);
    }

    /// Takes `capacity` keys at most from now on, keeping the hottest that fit: growing keeps
    /// every key, shrinking drops the coldest. The table's promise holds on: a dropped key's
    /// total was at most any kept one's, and the table is then full, so a dropped key that comes
    /// back starts from the smallest total kept, which covers what it had. O(k log k).
    pub fn resize(&mut self, capacity: usize) {
        self.capacity = capacity;
        if self.keys.len() <= capacity {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys);
        keys.sort_unstable_by(|a, b| hotter(&a.1, &b.1));
        keys.truncate(capacity);
        keys.shrink_to_fit();
        self.index.clear();
        self.index.shrink_to(capacity);
        self.heap.clear();
        self.position.clear();
        for (place, (key, _)) in keys.iter().enumerate() {
            self.index.insert(key.tag, place);
        }
        self.keys = keys;
        for place in 0..self.keys.len() {
            self.position.push(self.heap.len());
            self.heap.push(place);
            self.sift_up(place);
        }
        self.heap.shrink_to_fit();
        self.position.shrink_to_fit();
    }

    /// Totals only grow, so an updated entry can only move down the min-heap.
    /// Moves the entry at heap index `i` up while its total is below its parent's.
    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            let total = |h: &HotKeys, i: usize| h.keys[h.heap[i]].1.wait_ms_total;
            if total(self, i) >= total(self, parent) {
                return;
            }
            self.heap.swap(i, parent);
            self.position[self.heap[i]] = i;
            self.position[self.heap[parent]] = parent;
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let total = |h: &HotKeys, i: usize| h.keys[h.heap[i]].1.wait_ms_total;
            let mut least = i;
            for child in [2 * i + 1, 2 * i + 2] {
                if child < self.heap.len() && total(self, child) < total(self, least) {
                    least = child;
                }
            }
            if least == i {
                return;
            }
            self.heap.swap(i, least);
            self.position[self.heap[i]] = i;
            self.position[self.heap[least]] = least;
            i = least;
        }
    }
}

/// A keyed 64-bit hash of a key's name: a few multiplications per 8 bytes (SipHash, 40 % of
/// a refusal's statistics, was more than the table needs: two keys that collide share one
/// entry, and the seed is random per table, so which ones collide cannot be chosen).
fn key_hash(seed: u64, name: &[u8]) -> u64 {
    const M: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(M).rotate_left(29);
    let mut h = seed ^ (name.len() as u64).wrapping_mul(M);
    let mut chunks = name.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = mix(h, u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(word) ^ 0xff);
    }
    // Final avalanche (splitmix64's), so every bit of the name moves every bit of the hash.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Which of two keys is hotter (`Less` for `a`): the larger total wait, then, between keys
/// that waited as long (often none: contention answered nil), the more contended events.
fn hotter(a: &KeyStats, b: &KeyStats) -> std::cmp::Ordering {
    let events = |s: &KeyStats| s.waits + s.contended + s.timeouts;
    (b.wait_ms_total, events(b)).cmp(&(a.wait_ms_total, events(a)))
}

/// The statistics the engine keeps, switched on and off by `relock.stats`.
#[derive(Clone, Debug)]
pub struct Contention {
    pub enabled: bool,
    /// From queueing to grant (a wait that timed out counts with its wait), µs.
    pub waits: Histogram,
    /// From grant to end, µs.
    pub holds: Histogram,
    pub keys: HotKeys,
}

/// The default number of keys in the hot-keys table (`relock.stats-keys`).
pub const DEFAULT_KEYS: usize = 1000;
/// The most `relock.stats-keys` may ask for.
pub const MAX_KEYS: usize = 100_000;

impl Default for Contention {
    fn default() -> Self {
        Contention {
            enabled: true,
            waits: Histogram::default(),
            holds: Histogram::default(),
            keys: HotKeys::new(DEFAULT_KEYS),
        }
    }
}

impl Contention {
    /// Forgets the distributions and the table (`LOCK.STATS RESET`), keeping the settings.
    pub fn reset(&mut self) {
        self.waits.reset();
        self.holds.reset();
        let capacity = self.keys.capacity;
        self.keys.reset(capacity);
    }

    /// Sets the table's capacity, keeping the hottest keys that fit.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.keys.resize(capacity.min(MAX_KEYS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused acquire that brings a key into a full table allocates nothing: the key it
    /// replaces gives it its name's bytes.
    #[test]
    fn a_key_replacing_another_reuses_its_name_buffer() {
        let mut hot = HotKeys::new(2);
        let key = |name: &'static [u8]| KeyRef { db: 0, name };
        hot.update(key(b"lock:0001"), 5, |s| s.waits += 1);
        hot.update(key(b"lock:0002"), 9, |s| s.waits += 1);
        let coldest = hot
            .keys
            .iter()
            .find(|(k, _)| k.name == b"lock:0001")
            .unwrap();
        let buffer = coldest.0.name.as_ptr();
        hot.update(key(b"lock:0003"), 0, |s| s.contended += 1);
        let (newcomer, stats) = hot
            .keys
            .iter()
            .find(|(k, _)| k.name == b"lock:0003")
            .unwrap();
        assert_eq!(
            newcomer.name.as_ptr(),
            buffer,
            "the replaced key's bytes, reused"
        );
        assert_eq!(
            (stats.contended, stats.wait_ms_total, stats.error),
            (1, 5, 5)
        );
        assert!(hot.keys.iter().all(|(k, _)| k.name != b"lock:0001"));
        // Found again by its name, not by the replaced one's.
        hot.update(key(b"lock:0003"), 0, |s| s.contended += 1);
        assert_eq!(hot.len(), 2);
        let top = hot.hottest(2);
        assert_eq!(
            (&top[1].0.name[..], top[1].1.contended),
            (&b"lock:0003"[..], 2)
        );
    }

    #[test]
    fn key_hashes_tell_keys_apart_and_depend_on_the_seed() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..200_000u32 {
            let name = format!("lock:{i}");
            assert!(seen.insert(key_hash(7, name.as_bytes())), "{name} collides");
        }
        // Lengths and trailing zero bytes count.
        assert_ne!(key_hash(7, b"a"), key_hash(7, b"a\0"));
        assert_ne!(key_hash(7, b""), key_hash(7, b"\0\0\0\0\0\0\0\0"));
        assert_ne!(key_hash(7, b"lock:1"), key_hash(8, b"lock:1"));
    }

    #[test]
    fn buckets_cover_every_value_within_three_percent() {
        let mut last = 0;
        for v in (0..200_000u64).chain([1 << 20, (1 << 40) + 12345, 1 << 49]) {
            let b = bucket(v);
            assert!(b >= last || v > 200_000, "buckets grow with values");
            last = b;
            let (low, width) = bounds(b);
            assert!(
                low <= v && v < low + width,
                "{v} in bucket {b} [{low}, +{width})"
            );
            let middle = low as f64 + (width as f64 - 1.0) / 2.0;
            assert!(
                (middle - v as f64).abs() <= 0.03 * v as f64 + 0.5,
                "{v}: {middle}"
            );
        }
        assert_eq!(
            bucket(u64::MAX),
            BUCKETS - 1,
            "the largest values share the last bucket"
        );
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0.0);
        for v in 1..=10_000u64 {
            h.record(v);
        }
        for (q, want) in [
            (0.5, 5_000.0),
            (0.9, 9_000.0),
            (0.99, 9_900.0),
            (0.999, 9_990.0),
        ] {
            let got = h.quantile(q);
            assert!((got - want).abs() <= 0.03 * want, "p{q}: {got} vs {want}");
        }
        assert_eq!(h.count(), 10_000);
        h.reset();
        assert_eq!(h.count(), 0);
    }

    fn name(n: u32) -> Vec<u8> {
        format!("k{n}").into_bytes()
    }

    fn key(name: &[u8]) -> KeyRef<'_> {
        KeyRef { db: 0, name }
    }

    #[test]
    fn the_hottest_keys_stay_in_a_full_table_with_error_bounds() {
        // Space-Saving keeps every key whose total is above (all waits) / capacity: here each hot
        // key has 5,000 of 55,000 ms in all, above 55,000 / 20.
        let mut hot = HotKeys::new(20);
        // Ten hot keys, then a stream of many cold ones.
        for round in 0..50 {
            for n in 0..10 {
                hot.update(key(&name(n)), 100 + u64::from(n), |s| s.waits += 1);
            }
            for n in 0..100 {
                hot.update(key(&name(1000 + round * 100 + n)), 1, |s| s.contended += 1);
            }
        }
        assert_eq!(hot.len(), 20, "never more than its capacity");
        let top: Vec<&[u8]> = hot.hottest(10).into_iter().map(|(k, _)| &*k.name).collect();
        for n in 0..10 {
            assert!(top.contains(&&*name(n)), "hot key {n} kept: {top:?}");
        }
        let (k, s) = hot.hottest(1)[0];
        assert_eq!(*k.name, *name(9));
        assert!(s.wait_ms_total - s.error <= 50 * 109 && 50 * 109 <= s.wait_ms_total);
        hot.reset(3);
        assert!(hot.is_empty());
    }

    #[test]
    fn long_keys_are_kept_by_their_prefix_and_told_apart_by_hash() {
        let mut hot = HotKeys::new(2);
        let long = vec![b'x'; 1 << 20];
        let mut other = long.clone();
        other[(1 << 20) - 1] = b'y';
        hot.update(key(&long), 10, |s| s.waits += 1);
        hot.update(key(&other), 20, |s| s.waits += 1);
        hot.update(key(&long), 10, |s| s.waits += 1);
        let top = hot.hottest(10);
        assert_eq!(top.len(), 2, "two keys, however alike their prefixes");
        assert!(top
            .iter()
            .all(|(k, _)| k.name.len() == KEY_BYTES && k.len == 1 << 20));
        assert_eq!(top[0].1.waits, 2);
        // A third key replaces the coldest, long-named one, which is really forgotten.
        hot.update(key(b"short"), 50, |s| s.waits += 1);
        hot.update(key(b"short2"), 60, |s| s.waits += 1);
        assert_eq!(hot.len(), 2);
        assert_eq!(hot.index.len(), 2, "no stale index entries");
    }

    #[test]
    fn a_cold_key_entering_a_table_with_room_is_the_next_replaced() {
        let mut hot = HotKeys::new(2);
        hot.update(key(b"hot"), 500, |s| s.waits += 1);
        hot.update(key(b"cold"), 0, |s| s.contended += 1);
        hot.update(key(b"new"), 0, |s| s.contended += 1);
        let names: Vec<&[u8]> = hot.hottest(10).iter().map(|(k, _)| &*k.name).collect();
        assert_eq!(
            names,
            [&b"hot"[..], b"new"],
            "the coldest went, the hottest stayed"
        );
    }

    /// Every key in the table and its stats, by name.
    fn table(hot: &HotKeys) -> Vec<(Vec<u8>, KeyStats)> {
        let mut all: Vec<_> = hot
            .hottest(hot.len())
            .into_iter()
            .map(|(k, s)| (k.name.to_vec(), s.clone()))
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Space-Saving as its doc promises it, checked against a plain list on long random streams:
    /// a key in the table adds its wait; a new key enters while there is room, and otherwise
    /// replaces a key with the least total, starting from that total, its error bound.
    #[test]
    fn a_full_table_replaces_a_least_total_key_and_inherits_its_total() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut below = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for capacity in [1, 2, 3, 6, 7, 8, 13] {
            let mut hot = HotKeys::new(capacity);
            let mut model: Vec<(Vec<u8>, KeyStats)> = Vec::new();
            for step in 0..3_000 {
                let k = name(below(3 * capacity as u64) as u32);
                let wait = if below(4) == 0 { 0 } else { below(1_000) };
                hot.update(key(&k), wait, |s| s.waits += 1);
                let now = table(&hot);
                if let Some((_, s)) = model.iter_mut().find(|(n, _)| *n == k) {
                    s.wait_ms_total += wait;
                    s.waits += 1;
                } else {
                    let mut floor = 0;
                    if model.len() == capacity {
                        floor = model.iter().map(|(_, s)| s.wait_ms_total).min().unwrap();
                        // Which of several least keys goes is the table's choice.
                        let gone = model
                            .iter()
                            .position(|(n, _)| !now.iter().any(|(m, _)| m == n))
                            .expect("a key was replaced");
                        let total = model.remove(gone).1.wait_ms_total;
                        assert_eq!(total, floor, "capacity {capacity}, step {step}");
                    }
                    let entered = KeyStats {
                        waits: 1,
                        wait_ms_total: floor + wait,
                        error: floor,
                        ..KeyStats::default()
                    };
                    model.push((k, entered));
                    model.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                }
                assert_eq!(now, model, "capacity {capacity}, step {step}");
            }
        }
    }

    #[test]
    fn resizing_keeps_the_hottest_that_fit() {
        let mut hot = HotKeys::new(10);
        for (i, wait) in [30, 10, 0, 20, 0].into_iter().enumerate() {
            let contended = i as u64;
            hot.update(key(&name(i as u32)), wait, |s| s.contended += contended);
        }
        let names = |hot: &HotKeys| -> Vec<Vec<u8>> {
            hot.hottest(100)
                .iter()
                .map(|(k, _)| k.name.to_vec())
                .collect()
        };
        let before = names(&hot);
        hot.resize(2000);
        assert_eq!(
            (names(&hot), hot.capacity()),
            (before.clone(), 2000),
            "growing"
        );
        hot.resize(4);
        assert_eq!(
            names(&hot),
            before[..4],
            "the coldest went: no wait, fewest events"
        );
        hot.resize(2);
        assert_eq!(names(&hot), [name(0), name(3)]);
        assert_eq!(hot.index.len(), 2);
        // Full: a newcomer replaces the least total and starts from it.
        hot.update(key(b"new"), 1, |s| s.waits += 1);
        let top = hot.hottest(10);
        assert_eq!(top.len(), 2);
        assert_eq!((&*top[1].0.name, top[1].1.wait_ms_total), (&b"new"[..], 21));
        assert_eq!(top[1].1.error, 20);
        hot.resize(0);
        assert!(hot.is_empty());
        hot.update(key(b"k"), 5, |s| s.waits += 1);
        assert!(hot.is_empty(), "0 turns the table off");
    }

    #[test]
    fn a_table_of_zero_keys_keeps_nothing() {
        let mut hot = HotKeys::new(0);
        hot.update(key(b"k1"), 5, |s| s.waits += 1);
        assert!(hot.is_empty());
    }
}
