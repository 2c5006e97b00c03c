//! Who observes which key (`LOCK.OBSERVE`): each blocked observer, the token it knows of, and,
//! per key, how many observers know each token, so that a change wakes exactly those whose token
//! is no longer the key's, and a renewal (same token) looks at no observer at all.
//!
//! Observers take no place in any queue and change no hold. Nothing is kept for a key nobody
//! observes. Invariants: every entry of a key's list has a [`Place`] in `clients` naming that key
//! and that position; a key's `knowns` count its entries by known token (no zero count); no
//! observed key has an empty list.
//!
//! Memory: the spec allows an observer at most 64 bytes beyond Redis's own blocked-client cost.
//! An observer is one 20-byte [`Entry`] in its key's list (its client, its known token with its
//! caller's index above it, its timeout in 5 ms steps; the list grown by a quarter, not doubled)
//! and one 16-byte bucket of the `clients` table (hashbrown: about 1.6 buckets per entry at
//! worst): about 50 bytes. Its caller (for the read-permission re-check) is shared by every
//! observer of the key with the same caller, and no timer is kept per observer (one for the
//! first step due). Measured with 10,000 observers of one key: 59 bytes each, with or without a
//! timeout (270 and 409 before); docs/benchmarks.md says how.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use super::host::{Handles, KeyId, KeyRef};
use super::schedule::TimerId;

/// A known token takes 53 bits of an entry's `word`; its caller's index the 11 above.
const TOKEN_BITS: u32 = 53;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;
/// No caller recorded (an internal client: nothing to re-check).
const NO_CALLER: u32 = 0x7FF;
/// The caller is in `Observers::spilled` (a key observed by more than 2,045 distinct callers).
const SPILLED: u32 = 0x7FE;
/// An entry's `due` when its timeout is kept by a timer of its own (see `Observers::far`).
pub const FAR: u32 = u32::MAX;

/// One observer in its key's list: 20 bytes (packed to 4-byte alignment).
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
struct Entry<C: Copy> {
    client: C,
    /// The token it knows of (0: no holder; below 2^53), and above it its caller's index in the
    /// key's `callers` ([`NO_CALLER`], [`SPILLED`]).
    word: u64,
    /// When its timeout passes, in [`TIMEOUT_STEP_MS`] steps after `Observers::base_ms` (0: no
    /// timeout; [`FAR`]: a timer of its own).
    due: u32,
}

impl<C: Copy> Entry<C> {
    fn known(&self) -> u64 {
        self.word & TOKEN_MASK
    }

    fn caller(&self) -> u32 {
        (self.word >> TOKEN_BITS) as u32
    }
}

/// Where a client's entry is: its key's slot and its position in that key's list.
#[derive(Clone, Copy)]
struct Place {
    key: u32,
    pos: u32,
}

/// A blocked `LOCK.OBSERVE`, as it leaves.
pub struct Observer {
    pub key: KeyId,
    /// The token it knew of (0: no holder).
    pub known: u64,
}

/// An observer [`Observers::add`] could not take: the tables count keys and entries in 32 bits
/// and have no room left (more blocked clients than a server can have). Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotAdded;

/// One observed key.
struct Watched<T: Handles> {
    id: KeyId,
    entries: Vec<Entry<T::Client>>,
    /// Known token -> how many of `entries` know it (a short list: usually one token).
    knowns: Vec<(u64, u32)>,
    /// The callers of its observers, shared, each with its number of observers (0: a free slot).
    callers: Vec<(Option<T::Caller>, u32)>,
    /// The timer armed for the hold's expiry (its id, when it fires), on a master.
    deadline: Option<(TimerId, i64)>,
}

/// Every observer.
pub struct Observers<T: Handles> {
    /// Observed keys by db and name -> their slot in `watched`.
    index: HashMap<i32, HashMap<Rc<[u8]>, u32>>,
    watched: Vec<Option<Watched<T>>>,
    /// Free slots of `watched`.
    free: Vec<u32>,
    clients: HashMap<T::Client, Place>,
    /// The steps at which observers' timeouts pass (ms, a multiple of [`TIMEOUT_STEP_MS`]; one
    /// per distinct step, not per observer, some perhaps of observers already gone), and the
    /// timer armed at the first: when it fires, the entries whose `due` passed are answered.
    pub timeouts: BTreeSet<i64>,
    pub timeout_timer: Option<(TimerId, i64)>,
    /// What an entry's `due` counts from (set when the first observer comes).
    base_ms: Option<i64>,
    /// Observers whose timeout does not fit an entry's `due` (248 days past `base_ms`): their
    /// own timers.
    far: HashMap<T::Client, TimerId>,
    /// Callers beyond the 2,045 distinct ones an entry can name, by client.
    spilled: HashMap<T::Client, T::Caller>,
}

/// How finely observers' timeouts are kept: a timeout is answered within this many ms after
/// it passes (plus the turn's own delay).
pub const TIMEOUT_STEP_MS: i64 = 5;

impl<T: Handles> Default for Observers<T> {
    fn default() -> Self {
        Observers {
            index: HashMap::new(),
            watched: Vec::new(),
            free: Vec::new(),
            clients: HashMap::new(),
            timeouts: BTreeSet::new(),
            timeout_timer: None,
            base_ms: None,
            far: HashMap::new(),
            spilled: HashMap::new(),
        }
    }
}

impl<T: Handles> Observers<T> {
    /// Blocked observers over all keys.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Whether nobody observes anything.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    fn slot(&self, key: KeyRef<'_>) -> Option<u32> {
        self.index
            .get(&key.db)
            .and_then(|keys| keys.get(key.name))
            .copied()
    }

    fn at(&self, key: KeyRef<'_>) -> Option<&Watched<T>> {
        let slot = self.slot(key)?;
        self.watched.get(slot as usize)?.as_ref()
    }

    fn at_mut(&mut self, key: KeyRef<'_>) -> Option<&mut Watched<T>> {
        let slot = self.slot(key)?;
        self.watched.get_mut(slot as usize)?.as_mut()
    }

    /// Whether anyone observes `key`.
    pub fn watched(&self, key: KeyRef<'_>) -> bool {
        self.slot(key).is_some()
    }

    /// Adds `client`, observing `key` and knowing `known` (below 2^53), for `caller`, until
    /// `until` (ms; none: no timeout), at `now_ms`. Returns whether that timeout is too far to
    /// be kept in the entry ([`FAR`]): the caller then arms a timer of its own
    /// ([`Observers::set_far`]); [`NotAdded`], with nothing changed, when the tables have no
    /// room for it.
    pub fn add(
        &mut self,
        client: T::Client,
        key: KeyId,
        known: u64,
        caller: Option<T::Caller>,
        until: Option<i64>,
        now_ms: i64,
    ) -> Result<bool, NotAdded> {
        let slot = self.slot_for(&key)?;
        let watched = self
            .watched
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(NotAdded)?;
        // Checked before anything changes: a new key's list is empty, so only a key that is
        // already observed can be refused here.
        let pos = u32::try_from(watched.entries.len()).map_err(|_| NotAdded)?;
        let caller = match caller {
            None => NO_CALLER,
            Some(caller) => match watched.share(caller) {
                Ok(index) => index,
                Err(caller) => {
                    self.spilled.insert(client, caller);
                    SPILLED
                }
            },
        };
        let due = match until {
            None => 0,
            Some(at) => {
                // From now, not from this first deadline: a far first one would put every later
                // step far ahead too.
                let base = *self.base_ms.get_or_insert(now_ms);
                let steps = (at.saturating_sub(base) + TIMEOUT_STEP_MS - 1) / TIMEOUT_STEP_MS;
                let due = u32::try_from(steps.max(1)).unwrap_or(FAR);
                if due != FAR {
                    self.timeouts
                        .insert(base + i64::from(due) * TIMEOUT_STEP_MS);
                }
                due
            }
        };
        match watched.knowns.iter_mut().find(|(k, _)| *k == known) {
            Some((_, n)) => *n = n.saturating_add(1),
            None => watched.knowns.push((known, 1)),
        }
        let entries = &mut watched.entries;
        if entries.len() == entries.capacity() {
            // A quarter more, not double: the list is most of an observer's memory.
            entries.reserve_exact((entries.len() / 4).max(4));
        }
        debug_assert!(known <= TOKEN_MASK);
        entries.push(Entry {
            client,
            word: (known & TOKEN_MASK) | (u64::from(caller) << TOKEN_BITS),
            due,
        });
        self.clients.insert(client, Place { key: slot, pos });
        Ok(due == FAR)
    }

    /// The slot of `key`'s list, a new empty one if nobody observes it yet (the caller adds
    /// its first entry at once). A free slot is taken only if it really is free, and an index
    /// that names no list is replaced, so that a broken invariant costs a slot, not the server.
    fn slot_for(&mut self, key: &KeyId) -> Result<u32, NotAdded> {
        if let Some(slot) = self.slot(key.as_ref()) {
            if matches!(self.watched.get(slot as usize), Some(Some(_))) {
                return Ok(slot);
            }
        }
        let slot = match self.free.pop() {
            Some(slot) if matches!(self.watched.get(slot as usize), Some(None)) => slot,
            _ => {
                let slot = u32::try_from(self.watched.len()).map_err(|_| NotAdded)?;
                self.watched.push(None);
                slot
            }
        };
        if let Some(place) = self.watched.get_mut(slot as usize) {
            *place = Some(Watched {
                id: key.clone(),
                entries: Vec::new(),
                knowns: Vec::new(),
                callers: Vec::new(),
                deadline: None,
            });
        }
        self.index
            .entry(key.db)
            .or_default()
            .insert(key.name.clone(), slot);
        Ok(slot)
    }

    /// Records the timer of an observer whose timeout is [`FAR`].
    pub fn set_far(&mut self, client: T::Client, timer: TimerId) {
        self.far.insert(client, timer);
    }

    /// At most `max` observers whose timeout passed by `now_ms`.
    pub fn timed_out(&self, now_ms: i64, max: usize) -> Vec<T::Client> {
        let Some(base) = self.base_ms else {
            return Vec::new();
        };
        let passed = (now_ms.saturating_sub(base) / TIMEOUT_STEP_MS).clamp(0, i64::from(FAR - 1));
        let passed = u32::try_from(passed).unwrap_or(0);
        self.watched
            .iter()
            .flatten()
            .flat_map(|w| w.entries.iter())
            .filter(|e| {
                let due = e.due;
                due != 0 && due != FAR && due <= passed
            })
            .map(|e| e.client)
            .take(max)
            .collect()
    }

    /// Takes `client` out; returns its observer, its own timeout timer if [`FAR`], and the
    /// key's deadline timer when the key has no observer left (the caller stops them). None if
    /// it does not observe, or if its place names no entry of its own: an invariant broken by a
    /// bug, which forgets the client (unanswered until it hangs up) rather than stop the server.
    pub fn remove(
        &mut self,
        client: T::Client,
    ) -> Option<(Observer, Option<TimerId>, Option<TimerId>)> {
        let place = self.clients.remove(&client)?;
        let far = self.far.remove(&client);
        if self.clients.len() < self.clients.capacity() / 4 {
            self.clients.shrink_to(self.clients.len() * 2);
        }
        let pos = place.pos as usize;
        let Some(watched) = self
            .watched
            .get_mut(place.key as usize)
            .and_then(Option::as_mut)
            .filter(|w| {
                w.entries.get(pos).is_some_and(|e| {
                    let c = e.client;
                    c == client
                })
            })
        else {
            self.spilled.remove(&client);
            return None;
        };
        let entry = watched.entries.swap_remove(pos);
        if let Some(moved) = watched.entries.get(pos) {
            let moved_client = moved.client;
            if let Some(p) = self.clients.get_mut(&moved_client) {
                p.pos = place.pos;
            }
        }
        let known = entry.known();
        if let Some(i) = watched.knowns.iter().position(|(k, _)| *k == known) {
            let (_, n) = &mut watched.knowns[i];
            *n = n.saturating_sub(1);
            if *n == 0 {
                watched.knowns.swap_remove(i);
            }
        }
        let caller = entry.caller();
        if caller == SPILLED {
            self.spilled.remove(&client);
        } else if let Some(c) = watched.callers.get_mut(caller as usize) {
            c.1 = c.1.saturating_sub(1);
            if c.1 == 0 {
                c.0 = None;
            }
        }
        let entries = &mut watched.entries;
        if entries.capacity() > 16 && entries.len() < entries.capacity() / 4 {
            entries.shrink_to(entries.len() * 2);
        }
        let key = watched.id.clone();
        let mut deadline = None;
        if watched.entries.is_empty() {
            deadline = watched.deadline.map(|(timer, _)| timer);
            if let Some(used) = self.watched.get_mut(place.key as usize) {
                *used = None;
            }
            self.free.push(place.key);
            if let Some(keys) = self.index.get_mut(&key.db) {
                keys.remove(&key.name);
                if keys.is_empty() {
                    self.index.remove(&key.db);
                }
            }
            if self.free.len() == self.watched.len() {
                self.watched = Vec::new();
                self.free = Vec::new();
            }
        }
        if self.clients.is_empty() {
            self.base_ms = None;
            self.far = HashMap::new();
            self.spilled = HashMap::new();
        }
        Some((Observer { key, known }, far, deadline))
    }

    /// At most `max` observers of `key` whose known token is not `current`.
    pub fn take_changed(&self, key: KeyRef<'_>, current: u64, max: usize) -> Vec<T::Client> {
        let Some(watched) = self.at(key) else {
            return Vec::new();
        };
        if !watched.knowns.iter().any(|(k, _)| *k != current) {
            return Vec::new();
        }
        watched
            .entries
            .iter()
            .filter(|e| e.known() != current)
            .map(|e| e.client)
            .take(max)
            .collect()
    }

    /// Whether an observer of `key` knows a token other than `current`.
    pub fn any_changed(&self, key: KeyRef<'_>, current: u64) -> bool {
        self.at(key)
            .is_some_and(|w| w.knowns.iter().any(|(k, _)| *k != current))
    }

    /// At most `max` observers of `key`, whatever they know.
    pub fn some_of(&self, key: KeyRef<'_>, max: usize) -> Vec<T::Client> {
        self.at(key)
            .map(|w| w.entries.iter().map(|e| e.client).take(max).collect())
            .unwrap_or_default()
    }

    /// The observed keys of `db` (all dbs if `None`).
    pub fn keys(&self, db: Option<i32>) -> Vec<KeyId> {
        self.index
            .iter()
            .filter(|(d, _)| db.is_none_or(|db| db == **d))
            .flat_map(|(d, keys)| {
                keys.keys().map(|name| KeyId {
                    db: *d,
                    name: name.clone(),
                })
            })
            .collect()
    }

    /// The key's expiry timer, if armed.
    pub fn deadline(&self, key: KeyRef<'_>) -> Option<(TimerId, i64)> {
        self.at(key).and_then(|w| w.deadline)
    }

    /// Records the key's expiry timer (none: disarmed); ignored for a key nobody observes.
    pub fn set_deadline(&mut self, key: KeyRef<'_>, deadline: Option<(TimerId, i64)>) {
        if let Some(w) = self.at_mut(key) {
            w.deadline = deadline;
        }
    }

    /// The key `client` observes, if it observes.
    pub fn key_of(&self, client: T::Client) -> Option<&KeyId> {
        let place = self.clients.get(&client)?;
        self.watched
            .get(place.key as usize)?
            .as_ref()
            .map(|w| &w.id)
    }

    /// Who `client` observes for (none: an internal client, or it does not observe).
    pub fn caller_of(&self, client: T::Client) -> Option<&T::Caller> {
        let place = self.clients.get(&client)?;
        let watched = self.watched.get(place.key as usize)?.as_ref()?;
        let caller = watched.entries.get(place.pos as usize)?.caller();
        if caller == SPILLED {
            return self.spilled.get(&client);
        }
        watched.callers.get(caller as usize)?.0.as_ref()
    }
}

impl<T: Handles> Watched<T> {
    /// The index of `caller` among the key's callers, counted once more (added if new); the
    /// caller back if the key already has all the distinct callers an entry can name.
    fn share(&mut self, caller: T::Caller) -> Result<u32, T::Caller> {
        let index = match self
            .callers
            .iter()
            .position(|(c, n)| *n > 0 && c.as_ref() == Some(&caller))
        {
            Some(i) => i,
            None => match self.callers.iter().position(|(_, n)| *n == 0) {
                Some(i) => i,
                None if self.callers.len() < SPILLED as usize => {
                    self.callers.push((None, 0));
                    self.callers.len() - 1
                }
                None => return Err(caller),
            },
        };
        // Below SPILLED (the pushes stop there), so the index fits an entry's 11 bits.
        let (Ok(number), Some(shared)) = (u32::try_from(index), self.callers.get_mut(index)) else {
            return Err(caller);
        };
        if shared.1 == 0 {
            shared.0 = Some(caller);
        }
        shared.1 = shared.1.saturating_add(1);
        Ok(number)
    }
}

#[cfg(test)]
impl<T: Handles> Observers<T> {
    /// The heap bytes these tables take (hashbrown: a power-of-two number of buckets, each a
    /// key and a value, plus one control byte and a group of 16 more), callers excluded.
    fn heap_bytes(&self) -> usize {
        fn table<K, V>(capacity: usize) -> usize {
            if capacity == 0 {
                return 0;
            }
            let buckets = (capacity * 8 / 7).next_power_of_two();
            buckets * (std::mem::size_of::<(K, V)>() + 1) + 16
        }
        let keys: usize = self
            .index
            .values()
            .map(|k| table::<Rc<[u8]>, u32>(k.capacity()))
            .sum();
        let watched: usize = self
            .watched
            .iter()
            .flatten()
            .map(|w| {
                w.entries.capacity() * std::mem::size_of::<Entry<T::Client>>()
                    + w.knowns.capacity() * 12
                    + w.callers.capacity() * std::mem::size_of::<(Option<T::Caller>, u32)>()
                    + w.id.name.len()
            })
            .sum();
        table::<T::Client, Place>(self.clients.capacity())
            + table::<i32, HashMap<Rc<[u8]>, u32>>(self.index.capacity())
            + keys
            + self.watched.capacity() * std::mem::size_of::<Option<Watched<T>>>()
            + watched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handles of these tests (the in-memory host's would import `memory`, which imports
    /// the engine: a circle `tests/it/meta/layout.rs` refuses).
    struct MemHost;

    impl Handles for MemHost {
        type Client = u64;
        type Timer = u64;
        type Caller = u64;
    }

    fn key(name: &str) -> KeyId {
        KeyId {
            db: 0,
            name: Rc::from(name.as_bytes()),
        }
    }

    #[test]
    fn an_entry_is_twenty_bytes() {
        assert_eq!(std::mem::size_of::<Entry<*mut u8>>(), 20);
        assert_eq!(std::mem::size_of::<(*mut u8, Place)>(), 16);
    }

    /// The spec's bound: at most 64 bytes per observer beyond Redis's own blocked-client cost,
    /// with 10,000 observers of one key (the 10,000 happen to fill hashbrown's table to 61%: the
    /// worst of the measured cases). Before the compact record this was about 270 bytes
    /// (measured in Redis: `used_memory` against the same clients blocked with no record).
    #[test]
    fn ten_thousand_observers_take_at_most_64_bytes_each() {
        let mut o: Observers<MemHost> = Observers::default();
        const N: u64 = 10_000;
        for c in 0..N {
            o.add(
                c,
                key("k"),
                (1 << 53) - 1,
                Some(1),
                Some(1_000 + c as i64),
                0,
            )
            .expect("added");
        }
        let each = o.heap_bytes() as f64 / N as f64;
        assert!(each <= 64.0, "{each:.1} bytes per observer");
        for c in 0..N - 10 {
            o.remove(c);
        }
        // Given back as they leave (not kept at the peak's size).
        let left = o.heap_bytes();
        assert!(left <= 4096, "{left} bytes kept for 10 observers");
    }

    #[test]
    fn removal_keeps_every_place_right_and_leaves_nothing() {
        let mut o: Observers<MemHost> = Observers::default();
        for c in 0..100u64 {
            o.add(
                c,
                key(if c % 3 == 0 { "a" } else { "b" }),
                c % 2,
                Some(c % 5),
                Some(c as i64),
                0,
            )
            .expect("added");
        }
        // Out of order: each removal moves another entry into the hole.
        for c in (0..100u64).rev().step_by(2).chain((0..100u64).step_by(2)) {
            assert_eq!(o.key_of(c).map(|k| k.name.clone()), {
                let k = if c % 3 == 0 { "a" } else { "b" };
                Some(Rc::from(k.as_bytes()))
            });
            assert_eq!(o.caller_of(c), Some(&(c % 5)));
            let (observer, _, _) = o.remove(c).expect("observes");
            assert_eq!(observer.known, c % 2);
            assert!(o.remove(c).is_none());
        }
        assert!(o.is_empty());
        assert!(o.index.is_empty() && o.watched.is_empty() && o.free.is_empty());
    }

    #[test]
    fn timeouts_pass_never_early_and_far_ones_get_their_own_timer() {
        let mut o: Observers<MemHost> = Observers::default();
        // A far timeout first (found in attack round 40: later steps were counted from it).
        // 2^32 steps of 5 ms: about 680 days.
        assert!(o.add(4, key("k"), 3, None, Some(999 + (1 << 32) * 5), 999) == Ok(true));
        o.set_far(4, 77);
        assert_eq!(o.add(1, key("k"), 3, None, Some(1_000), 999), Ok(false));
        assert_eq!(o.add(2, key("k"), 3, None, Some(1_012), 999), Ok(false));
        assert_eq!(o.add(3, key("k"), 3, None, None, 999), Ok(false));
        assert!(o.timed_out(999, 10).is_empty());
        assert_eq!(o.timed_out(1_004, 10), vec![1]);
        assert_eq!(o.timed_out(1_011, 10), vec![1]);
        let mut due = o.timed_out(1_020, 10);
        due.sort_unstable();
        assert_eq!(due, vec![1, 2]);
        assert_eq!(o.timed_out(1_020, 1).len(), 1);
        assert_eq!(
            o.timeouts.iter().copied().collect::<Vec<_>>(),
            vec![1_004, 1_014]
        );
        assert_eq!(o.remove(4).map(|(_, far, _)| far), Some(Some(77)));
        for c in 1..4 {
            o.remove(c);
        }
        assert!(o.base_ms.is_none() && o.far.is_empty());
    }

    #[test]
    fn callers_beyond_what_an_entry_names_are_kept_apart() {
        let mut o: Observers<MemHost> = Observers::default();
        let n = u64::from(SPILLED) + 10;
        for c in 0..n {
            o.add(c, key("k"), 9, Some(c), None, 0).expect("added");
        }
        for c in 0..n {
            assert_eq!(o.caller_of(c), Some(&c), "caller of {c}");
        }
        assert_eq!(o.spilled.len(), 10);
        assert_eq!(
            o.take_changed(key("k").as_ref(), 8, usize::MAX).len(),
            n as usize
        );
        for c in 0..n {
            let (observer, _, _) = o.remove(c).expect("observes");
            assert_eq!(observer.known, 9);
        }
        assert!(o.spilled.is_empty() && o.is_empty());
    }

    /// A bug that broke the tables' invariants must cost its one observer, not the server (a
    /// panic in a Redis module would stop Redis): before, each of these panicked.
    #[test]
    fn broken_places_are_skipped_not_panicked_on() {
        let mut o: Observers<MemHost> = Observers::default();
        // A place naming no list, a position past the list's end, another client's entry.
        o.clients.insert(90, Place { key: 7, pos: 0 });
        assert!(o.remove(90).is_none());
        o.add(1, key("k"), 3, None, None, 0).expect("added");
        o.clients.insert(91, Place { key: 0, pos: 5 });
        assert!(o.remove(91).is_none());
        o.clients.insert(92, Place { key: 0, pos: 0 });
        assert!(o.remove(92).is_none());
        assert_eq!(
            o.key_of(1).map(|k| k.name.clone()),
            Some(Rc::from(&b"k"[..]))
        );
        // An index naming a slot that is free, and a free slot in use: both made good.
        o.index
            .entry(0)
            .or_default()
            .insert(Rc::from(&b"gone"[..]), 9);
        o.free.push(0);
        o.add(2, key("gone"), 4, None, None, 0).expect("added");
        assert_eq!(
            o.key_of(2).map(|k| k.name.clone()),
            Some(Rc::from(&b"gone"[..]))
        );
        assert_eq!(
            o.key_of(1).map(|k| k.name.clone()),
            Some(Rc::from(&b"k"[..]))
        );
        assert!(o.take_changed(key("gone").as_ref(), 0, 10) == vec![2]);
        assert!(o.remove(1).is_some() && o.remove(2).is_some());
        assert!(o.is_empty());
    }

    #[test]
    fn only_changed_tokens_are_taken() {
        let mut o: Observers<MemHost> = Observers::default();
        for c in 0..10u64 {
            o.add(c, key("k"), if c < 4 { 7 } else { 8 }, None, None, 0)
                .expect("added");
        }
        assert!(o.take_changed(key("k").as_ref(), 0, 100).len() == 10);
        let mut changed = o.take_changed(key("k").as_ref(), 8, 100);
        changed.sort_unstable();
        assert_eq!(changed, vec![0, 1, 2, 3]);
        assert!(o.any_changed(key("k").as_ref(), 7));
        assert_eq!(o.take_changed(key("k").as_ref(), 8, 2).len(), 2);
        for c in 4..10 {
            o.remove(c);
        }
        assert!(!o.any_changed(key("k").as_ref(), 7));
        assert!(o.take_changed(key("k").as_ref(), 7, 100).is_empty());
    }
}
