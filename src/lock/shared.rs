//! The holders of a shared key (a read lock, or a counting semaphore when it has a limit).
//!
//! Every holder is a full hold of its own: owner, fencing token, reentrancy count and lease end.
//! Finding a holder by owner, adding, renewing or removing one, and finding the first and the
//! last lease to end are O(log H) at most (amortized); listing in grant order sorts.
//!
//! Memory is what the spec bounds (at most 64 bytes per holder beyond its owner's bytes), so the
//! set is a few flat arrays rather than maps of boxes:
//! - `slots`: one 32-byte record per holder, in no particular order (a removal moves the last
//!   record into the hole);
//! - `owners`: every owner's bytes back to back, each record pointing at its own; the bytes of
//!   removed owners are compacted away once they are a quarter of the whole;
//! - `table`: an open-addressing hash table of slot numbers by owner (4 bytes per entry, at
//!   most three quarters full);
//! - `early` and `late`: binary heaps of slot numbers by lease end, the first and the last to
//!   end on top; each record knows its place in both.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// The largest limit a semaphore may have.
pub const MAX_LIMIT: u32 = 1_000_000;

/// How a request wants a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One owner at a time (the default).
    Exclusive,
    /// Several owners at once; at most `limit` of them unless it is 0 (no limit).
    Shared { limit: u32 },
}

/// One holder of a shared key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: u64,
    pub count: u32,
    /// The last millisecond of its lease (Unix ms); it has lapsed once the clock is past it.
    pub lease_end: i64,
}

/// Tokens take the low 53 bits of a record's first word, `owner length - 1` the 8 above.
const TOKEN_BITS: u32 = 53;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;
/// A free place in `table`, and one whose entry was removed.
const EMPTY: u32 = 0;
const GONE: u32 = u32::MAX;

/// One holder's record.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Token, and `owner length - 1` above it.
    token_len: u64,
    lease_end: i64,
    /// Where the owner's bytes start in `owners`.
    owner_at: u32,
    count: u32,
    /// Places in `early` and `late`.
    early: u32,
    late: u32,
}

impl Slot {
    fn token(&self) -> u64 {
        self.token_len & TOKEN_MASK
    }

    fn owner_len(&self) -> usize {
        (self.token_len >> TOKEN_BITS) as usize + 1
    }

    fn holder(&self) -> Holder {
        Holder {
            token: self.token(),
            count: self.count,
            lease_end: self.lease_end,
        }
    }

    /// The heaps' order: by lease end, then token.
    fn key(&self) -> (i64, u64) {
        (self.lease_end, self.token())
    }
}

/// The holders of one shared key.
#[derive(Clone, Debug)]
pub struct Shared {
    limit: u32,
    slots: Vec<Slot>,
    owners: Vec<u8>,
    /// Bytes of `owners` that belong to no record any more.
    stale: usize,
    /// Slot number + 1, `EMPTY` or `GONE`; its length is 0 or a power of two.
    table: Vec<u32>,
    /// Entries of `table` that are not `EMPTY` (live and `GONE`).
    table_used: usize,
    early: Vec<u32>,
    late: Vec<u32>,
    hasher: RandomState,
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new(0)
    }
}

impl PartialEq for Shared {
    /// The same limit and the same holders.
    fn eq(&self, other: &Shared) -> bool {
        self.limit == other.limit && self.holders() == other.holders()
    }
}

impl Eq for Shared {}

impl Shared {
    /// No holders yet, with `limit` (0: none).
    pub fn new(limit: u32) -> Shared {
        Shared {
            limit,
            slots: Vec::new(),
            owners: Vec::new(),
            stale: 0,
            table: Vec::new(),
            table_used: 0,
            early: Vec::new(),
            late: Vec::new(),
            hasher: RandomState::new(),
        }
    }

    /// The limit (0: none).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Holders, lapsed or not.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nobody holds the key.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// `owner`'s hold, lapsed or not.
    pub fn get(&self, owner: &[u8]) -> Option<Holder> {
        self.find(owner).map(|(_, slot)| self.slots[slot].holder())
    }

    /// Adds `owner`'s hold, or replaces it. Owners are 1 to 256 bytes long and tokens below
    /// 2^53 (what the commands accept); others are cut to fit rather than refused.
    pub fn insert(&mut self, owner: &[u8], holder: Holder) {
        let owner = &owner[..owner.len().clamp(1, 256)];
        let token_len = (holder.token & TOKEN_MASK) | ((owner.len() as u64 - 1) << TOKEN_BITS);
        if let Some((_, slot)) = self.find(owner) {
            let record = &mut self.slots[slot];
            record.token_len = token_len;
            record.count = holder.count;
            record.lease_end = holder.lease_end;
            let (early, late) = (record.early as usize, record.late as usize);
            self.sift_early(early);
            self.sift_late(late);
            return;
        }
        let slot = self.slots.len();
        grow_exactly(&mut self.owners, owner.len());
        let owner_at = self.owners.len() as u32;
        self.owners.extend_from_slice(owner);
        grow_exactly(&mut self.slots, 1);
        self.slots.push(Slot {
            token_len,
            lease_end: holder.lease_end,
            owner_at,
            count: holder.count,
            early: self.early.len() as u32,
            late: self.late.len() as u32,
        });
        self.table_insert(owner, slot);
        grow_exactly(&mut self.early, 1);
        grow_exactly(&mut self.late, 1);
        self.early.push(slot as u32);
        self.late.push(slot as u32);
        self.sift_early(self.early.len() - 1);
        self.sift_late(self.late.len() - 1);
    }

    /// Removes `owner`'s hold.
    pub fn remove(&mut self, owner: &[u8]) -> Option<Holder> {
        let (at, slot) = self.find(owner)?;
        let record = self.slots[slot];
        self.table[at] = GONE;
        self.heap_remove(record.early as usize, true);
        self.heap_remove(record.late as usize, false);
        self.stale += record.owner_len();
        // The last record moves into the hole; whoever points at it follows.
        let last = self.slots.len() - 1;
        self.slots.swap_remove(slot);
        if slot != last {
            let moved = self.slots[slot];
            if let Some((at, _)) = self.find_at(self.owner_of_slot(&moved), last) {
                self.table[at] = slot as u32 + 1;
            }
            self.early[moved.early as usize] = slot as u32;
            self.late[moved.late as usize] = slot as u32;
        }
        self.tidy();
        Some(record.holder())
    }

    /// The owner of the hold with `token` (a scan: only revokes ask).
    pub fn owner_of(&self, token: u64) -> Option<&[u8]> {
        self.slots
            .iter()
            .find(|s| s.token() == token)
            .map(|s| self.owner_of_slot(s))
    }

    /// The lease that ends first: (its last millisecond, the owner).
    pub fn first_lease_end(&self) -> Option<(i64, &[u8])> {
        let record = &self.slots[*self.early.first()? as usize];
        Some((record.lease_end, self.owner_of_slot(record)))
    }

    /// The latest lease end (what the key's TTL is set to).
    pub fn last_lease_end(&self) -> Option<i64> {
        self.late
            .first()
            .map(|&slot| self.slots[slot as usize].lease_end)
    }

    /// The latest end among leases alive at `now`.
    pub fn live_last_lease_end(&self, now: i64) -> Option<i64> {
        self.last_lease_end().filter(|end| *end >= now)
    }

    /// Holders whose lease is alive at `now`; counts the lapsed ones from the top of the heap
    /// of first ends, so it costs the number of lapsed leases.
    pub fn live(&self, now: i64) -> usize {
        let mut lapsed = 0;
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            let Some(&slot) = self.early.get(i) else {
                continue;
            };
            if self.slots[slot as usize].lease_end >= now {
                continue;
            }
            lapsed += 1;
            stack.push(2 * i + 1);
            stack.push(2 * i + 2);
        }
        self.len() - lapsed
    }

    /// Holders in grant order (ascending token), lapsed or not.
    pub fn holders(&self) -> Vec<(&[u8], Holder)> {
        let mut list: Vec<(&[u8], Holder)> = self
            .slots
            .iter()
            .map(|s| (self.owner_of_slot(s), s.holder()))
            .collect();
        list.sort_unstable_by_key(|(_, h)| h.token);
        list
    }

    /// The first `n` holders in grant order (0: all) among those alive at `now`: O(H), plus
    /// O(n log n) to order them.
    pub fn first_alive(&self, n: usize, now: i64) -> Vec<(&[u8], Holder)> {
        let mut list: Vec<(&[u8], Holder)> = self
            .slots
            .iter()
            .filter(|s| s.lease_end >= now)
            .map(|s| (self.owner_of_slot(s), s.holder()))
            .collect();
        if n > 0 && n < list.len() {
            list.select_nth_unstable_by_key(n, |(_, h)| h.token);
            list.truncate(n);
        }
        list.sort_unstable_by_key(|(_, h)| h.token);
        list
    }

    /// Holders in grant order (ascending token), lapsed or not.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Holder)> {
        self.holders().into_iter()
    }

    /// Bytes of memory this set takes (for `MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Shared>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.owners.capacity()
            + (self.table.capacity() + self.early.capacity() + self.late.capacity()) * 4
    }

    // --- Owners and the table ---------------------------------------------------------------

    fn owner_of_slot(&self, record: &Slot) -> &[u8] {
        let at = record.owner_at as usize;
        &self.owners[at..at + record.owner_len()]
    }

    /// (place in `table`, slot) of `owner`.
    fn find(&self, owner: &[u8]) -> Option<(usize, usize)> {
        if self.table.is_empty() {
            return None;
        }
        let mask = self.table.len() - 1;
        let mut at = self.hasher.hash_one(owner) as usize & mask;
        loop {
            match self.table[at] {
                EMPTY => return None,
                GONE => {}
                entry => {
                    let slot = entry as usize - 1;
                    if self.owner_of_slot(&self.slots[slot]) == owner {
                        return Some((at, slot));
                    }
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// The place in `table` that points at `slot` (whose owner is `owner`).
    fn find_at(&self, owner: &[u8], slot: usize) -> Option<(usize, usize)> {
        let mask = self.table.len().checked_sub(1)?;
        let mut at = self.hasher.hash_one(owner) as usize & mask;
        loop {
            match self.table[at] {
                EMPTY => return None,
                entry if entry != GONE && entry as usize - 1 == slot => return Some((at, slot)),
                _ => {}
            }
            at = (at + 1) & mask;
        }
    }

    /// Puts `slot` (already in `slots`) into the table.
    fn table_insert(&mut self, owner: &[u8], slot: usize) {
        if (self.table_used + 1) * 4 > self.table.len() * 3 {
            // The rebuilt table holds every slot, this one included.
            self.rebuild_table((self.slots.len() * 4 / 3 + 1).next_power_of_two().max(8));
            return;
        }
        let mask = self.table.len() - 1;
        let mut at = self.hasher.hash_one(owner) as usize & mask;
        while self.table[at] != EMPTY && self.table[at] != GONE {
            at = (at + 1) & mask;
        }
        if self.table[at] == EMPTY {
            self.table_used += 1;
        }
        self.table[at] = slot as u32 + 1;
    }

    /// A fresh table of `size` places holding every slot.
    fn rebuild_table(&mut self, size: usize) {
        self.table = vec![EMPTY; size];
        self.table_used = 0;
        let mask = size - 1;
        for (slot, record) in self.slots.iter().enumerate() {
            let owner = self.owner_of_slot(record);
            let mut at = self.hasher.hash_one(owner) as usize & mask;
            while self.table[at] != EMPTY {
                at = (at + 1) & mask;
            }
            self.table[at] = slot as u32 + 1;
            self.table_used += 1;
        }
    }

    /// After a removal: compacts the owners' bytes, the table and the arrays when much of them
    /// is unused (each at most once per as many removals as it holds: amortized O(1)).
    fn tidy(&mut self) {
        if self.slots.is_empty() {
            *self = Shared::new(self.limit);
            return;
        }
        if self.stale * 4 > self.owners.len() {
            let mut owners = Vec::with_capacity(self.owners.len() - self.stale);
            for record in &mut self.slots {
                let at = record.owner_at as usize;
                let len = record.owner_len();
                record.owner_at = owners.len() as u32;
                owners.extend_from_slice(&self.owners[at..at + len]);
            }
            self.owners = owners;
            self.stale = 0;
        }
        let live = self.slots.len();
        if self.table_used > 2 * live + 8 || self.table.len() > 8 * live + 8 {
            self.rebuild_table((live * 4 / 3 + 1).next_power_of_two().max(8));
        }
        if self.slots.capacity() > 2 * live + 4 {
            self.slots.shrink_to(live + live / 8);
            self.early.shrink_to(live + live / 8);
            self.late.shrink_to(live + live / 8);
            self.owners
                .shrink_to(self.owners.len() + self.owners.len() / 8);
        }
    }

    // --- Heaps -------------------------------------------------------------------------------

    /// Whether slot `a` belongs above slot `b` in the heap (`early`: ends first; else last).
    fn above(&self, a: u32, b: u32, early: bool) -> bool {
        let (a, b) = (self.slots[a as usize].key(), self.slots[b as usize].key());
        if early {
            a < b
        } else {
            a > b
        }
    }

    fn heap(&mut self, early: bool) -> &mut Vec<u32> {
        if early {
            &mut self.early
        } else {
            &mut self.late
        }
    }

    fn place(&mut self, i: usize, early: bool) {
        let slot = self.heap(early)[i] as usize;
        if early {
            self.slots[slot].early = i as u32;
        } else {
            self.slots[slot].late = i as u32;
        }
    }

    fn swap(&mut self, i: usize, j: usize, early: bool) {
        self.heap(early).swap(i, j);
        self.place(i, early);
        self.place(j, early);
    }

    /// Moves the entry at `i` up or down to where it belongs.
    fn sift(&mut self, mut i: usize, early: bool) {
        while i > 0 {
            let parent = (i - 1) / 2;
            let (a, b) = (self.heap(early)[i], self.heap(early)[parent]);
            if !self.above(a, b, early) {
                break;
            }
            self.swap(i, parent, early);
            i = parent;
        }
        loop {
            let len = self.heap(early).len();
            let mut best = i;
            for child in [2 * i + 1, 2 * i + 2] {
                if child < len {
                    let (a, b) = (self.heap(early)[child], self.heap(early)[best]);
                    if self.above(a, b, early) {
                        best = child;
                    }
                }
            }
            if best == i {
                return;
            }
            self.swap(i, best, early);
            i = best;
        }
    }

    fn sift_early(&mut self, i: usize) {
        self.sift(i, true);
    }

    fn sift_late(&mut self, i: usize) {
        self.sift(i, false);
    }

    /// Takes the entry at `i` out of a heap.
    fn heap_remove(&mut self, i: usize, early: bool) {
        let last = self.heap(early).len() - 1;
        if i != last {
            self.swap(i, last, early);
        }
        self.heap(early).pop();
        if i < last {
            self.sift(i, early);
        }
    }
}

/// Makes room for `more` items, growing by a sixteenth at a time rather than doubling, so that a
/// large set carries little unused capacity (amortized O(1) per push all the same).
fn grow_exactly<T>(v: &mut Vec<T>, more: usize) {
    if v.capacity() - v.len() < more {
        let extra = (v.len() / 16).max(more).max(4);
        v.reserve_exact(extra);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn h(token: u64, lease_end: i64) -> Holder {
        Holder {
            token,
            count: 1,
            lease_end,
        }
    }

    #[test]
    fn holders_by_owner_by_lease_and_by_token() {
        let mut s = Shared::new(3);
        s.insert(b"a", h(10, 500));
        s.insert(b"b", h(11, 300));
        s.insert(b"c", h(12, 400));
        assert_eq!((s.len(), s.limit()), (3, 3));
        assert_eq!(s.first_lease_end(), Some((300, &b"b"[..])));
        assert_eq!(s.last_lease_end(), Some(500));
        assert_eq!(s.live(350), 2);
        assert_eq!(s.live(300), 3, "alive through its last millisecond");
        let order: Vec<&[u8]> = s.iter().map(|(o, _)| o).collect();
        assert_eq!(order, [&b"a"[..], b"b", b"c"]);
        // Renewing moves the lease, not the grant order.
        s.insert(b"b", h(11, 900));
        assert_eq!(s.first_lease_end(), Some((400, &b"c"[..])));
        assert_eq!(s.last_lease_end(), Some(900));
        assert_eq!(s.remove(b"c"), Some(h(12, 400)));
        assert_eq!(s.remove(b"c"), None);
        assert_eq!(s.first_lease_end(), Some((500, &b"a"[..])));
        assert_eq!(s.live_last_lease_end(901), None);
        assert_eq!(s.owner_of(11), Some(&b"b"[..]));
    }

    #[test]
    fn equal_sets_are_the_same_holders_and_limit_in_any_order() {
        let mut a = Shared::new(2);
        a.insert(b"x", h(1, 10));
        a.insert(b"y", h(2, 20));
        let mut b = Shared::new(2);
        b.insert(b"y", h(2, 20));
        b.insert(b"x", h(1, 10));
        assert_eq!(a, b);
        assert_ne!(a, Shared::new(2));
        let mut other_limit = b.clone();
        other_limit.limit = 3;
        assert_ne!(a, other_limit);
        b.insert(b"y", h(2, 21));
        assert_ne!(a, b);
    }

    #[test]
    fn a_big_set_stays_small() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("{i:036}").into_bytes();
        for i in 0..20_000u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, i64::from(i % 997)));
        }
        let per_holder = s.heap_size() / s.len() - 36;
        assert!(
            per_holder <= 56,
            "{per_holder} bytes per holder beyond its owner"
        );
        for i in 0..19_000u32 {
            s.remove(&owner(i));
        }
        assert_eq!(s.len(), 1000);
        assert!(
            s.heap_size() < 200_000,
            "{} bytes after removals",
            s.heap_size()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u64, i64),
        Remove(u8),
    }

    proptest! {
        /// The set against a plain map of owner -> holder.
        #[test]
        fn matches_a_plain_map(ops in proptest::collection::vec(
            prop_oneof![
                (0u8..40, 1u64..1000, 0i64..50).prop_map(|(o, t, l)| Op::Insert(o, t, l)),
                (0u8..40).prop_map(Op::Remove),
            ],
            1..300,
        )) {
            let mut s = Shared::new(0);
            let mut map: BTreeMap<Vec<u8>, Holder> = BTreeMap::new();
            let owner = |o: u8| vec![b'o'; usize::from(o % 7) + 1].into_iter().chain([o]).collect::<Vec<u8>>();
            for op in ops {
                match op {
                    Op::Insert(o, t, l) => {
                        s.insert(&owner(o), h(t, l));
                        map.insert(owner(o), h(t, l));
                    }
                    Op::Remove(o) => {
                        prop_assert_eq!(s.remove(&owner(o)), map.remove(&owner(o)));
                    }
                }
                prop_assert_eq!(s.len(), map.len());
                for (o, holder) in &map {
                    prop_assert_eq!(s.get(o), Some(*holder));
                }
                let first = map.values().map(|h| (h.lease_end, h.token)).min();
                prop_assert_eq!(
                    s.first_lease_end().map(|(end, o)| (end, map[o].token)),
                    first
                );
                prop_assert_eq!(s.last_lease_end(), map.values().map(|h| h.lease_end).max());
                prop_assert_eq!(s.live(25), map.values().filter(|h| h.lease_end >= 25).count());
                let mut tokens: Vec<u64> = map.values().map(|h| h.token).collect();
                tokens.sort_unstable();
                let listed: Vec<u64> = s.iter().map(|(_, h)| h.token).collect();
                prop_assert_eq!(listed, tokens);
            }
        }
    }
}
