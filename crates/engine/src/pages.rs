//! The arrays a shared key's holders live in, built so that no single operation touches O(H) of
//! them however large they grow:
//! - [`Paged`]: a growable array kept in pages of at most `1 << SHIFT` items. Growing it copies
//!   at most one page (a `Vec` of H items copies all H when it reallocates, and Redis's
//!   allocator has no in-place `realloc` for Rust);
//! - [`Table`]: the places of an open-addressing hash table (linear probing, deletion by
//!   backward shift, so no tombstones; a table being emptied, which takes no more entries, marks
//!   places instead, so that emptying one place costs O(1)), in pages allocated on their first
//!   write: a new table of any size costs nothing up front.

use std::ops::{Index, IndexMut};

/// A growable array in pages of at most `1 << SHIFT` items; item `i` is at page `i >> SHIFT`.
/// Every page but the last is full, except where [`Paged::push_run`] left a page's tail unused
/// so that a run does not straddle two pages.
#[derive(Clone, Debug)]
pub struct Paged<T, const SHIFT: u32> {
    pages: Pages<T>,
    /// Items copied by growth so far (a page's reallocation), for the tests that bound it.
    #[cfg(test)]
    copied: u64,
}

impl<T, const SHIFT: u32> Default for Paged<T, SHIFT> {
    fn default() -> Self {
        Paged {
            pages: Pages::default(),
            #[cfg(test)]
            copied: 0,
        }
    }
}

impl<T: Copy, const SHIFT: u32> Paged<T, SHIFT> {
    /// Items a page holds at most.
    pub const PAGE: usize = 1 << SHIFT;
    const MASK: usize = Self::PAGE - 1;

    /// The index one past the last item (unused page tails included).
    pub fn len(&self) -> usize {
        match self.pages.last() {
            None => 0,
            Some(last) => ((self.pages.len() - 1) << SHIFT) + last.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Items allocated room for (the pages' capacities).
    pub fn capacity(&self) -> usize {
        self.pages.iter().map(Vec::capacity).sum()
    }

    /// Bytes it takes: its pages and the list of them.
    pub fn bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
            + self.pages.more.capacity() * std::mem::size_of::<Vec<T>>()
    }

    /// Items copied by growth so far.
    #[cfg(test)]
    pub fn copied(&self) -> u64 {
        self.copied
    }

    /// Makes room for `more` (at most a page) items in one page: the last page grows by a
    /// sixteenth of the whole (at most to a page), or a new page starts when they do not fit the
    /// last. Returns the index they will start at.
    fn room_for(&mut self, more: usize) -> usize {
        debug_assert!(more <= Self::PAGE);
        let total = self.len();
        let step = (total / 16).max(more).max(4);
        match self.pages.last_mut() {
            Some(last) if last.len() + more <= Self::PAGE => {
                if last.capacity() - last.len() < more {
                    let extra = step.min(Self::PAGE - last.len());
                    #[cfg(test)]
                    {
                        self.copied += last.len() as u64;
                    }
                    last.reserve_exact(extra);
                }
            }
            _ => self.pages.push(Vec::with_capacity(step.min(Self::PAGE))),
        }
        self.len()
    }

    /// Where a run of `more` items would start if pushed now (without pushing it).
    pub fn next_run_at(&self, more: usize) -> usize {
        match self.pages.last() {
            Some(last) if last.len() + more > Self::PAGE => self.pages.len() << SHIFT,
            _ => self.len(),
        }
    }

    /// Appends `item`; returns its index.
    pub fn push(&mut self, item: T) -> usize {
        let at = self.room_for(1);
        // `room_for` leaves a last page with room; were there none, the item starts one at
        // `at` (the index past the last page) all the same: no path here can panic.
        match self.pages.last_mut() {
            Some(last) => last.push(item),
            None => self.pages.push(vec![item]),
        }
        at
    }

    /// Appends `items` within one page; returns where they start. A run is at most a page (the
    /// callers' runs are owners' names, at most 256 bytes, in pages of 256 KiB): of a longer
    /// one only its first page is kept, so that every page keeps its size and no index here
    /// can go out of bounds.
    pub fn push_run(&mut self, items: &[T]) -> usize {
        let items = &items[..items.len().min(Self::PAGE)];
        if items.is_empty() {
            return self.len();
        }
        let at = self.room_for(items.len());
        // As in `push`: a missing page (which `room_for` never leaves) is started.
        match self.pages.last_mut() {
            Some(last) => last.extend_from_slice(items),
            None => self.pages.push(items.to_vec()),
        }
        at
    }

    /// The `len` items from `at` (within one page, as [`Paged::push_run`] put them); none
    /// where there are not that many (a corrupt offset reads as nothing rather than aborting
    /// the server).
    pub fn run(&self, at: usize, len: usize) -> &[T] {
        let within = at & Self::MASK;
        self.pages
            .get(at >> SHIFT)
            .and_then(|page| page.get(within..within.saturating_add(len)))
            .unwrap_or(&[])
    }

    /// Item `i`, if there is one (no panic out of range).
    pub fn get(&self, i: usize) -> Option<&T> {
        self.pages.get(i >> SHIFT)?.get(i & Self::MASK)
    }

    /// Item `i` to change, if there is one.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.pages.get_mut(i >> SHIFT)?.get_mut(i & Self::MASK)
    }

    /// Removes the last item (a page left empty is freed: at most a page's bytes).
    pub fn pop(&mut self) -> Option<T> {
        let last = self.pages.last_mut()?;
        let item = last.pop();
        if last.is_empty() {
            self.pages.pop();
        }
        item
    }

    /// Removes item `i`, the last one taking its place; `None` (nothing changes) if there is
    /// no item `i`. Only for arrays without unused page tails (those [`Paged::push`] alone
    /// filled).
    pub fn swap_remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len() {
            return None;
        }
        let last = self.pop()?;
        if i == self.len() {
            Some(last)
        } else {
            Some(std::mem::replace(&mut self[i], last))
        }
    }

    /// Every item, in index order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.pages.iter().flatten()
    }

    /// Every item, in index order, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.pages.iter_mut().flatten()
    }

    /// A copy with no unused room (each page exactly as long as its items).
    pub fn compacted(&self) -> Self {
        Paged {
            pages: Pages {
                first: self.pages.first.to_vec(),
                more: self.pages.more.iter().map(|page| page.to_vec()).collect(),
            },
            #[cfg(test)]
            copied: self.copied + self.len() as u64,
        }
    }
}

impl<T: Copy, const SHIFT: u32> Index<usize> for Paged<T, SHIFT> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        &self.pages[i >> SHIFT][i & Self::MASK]
    }
}

impl<T: Copy, const SHIFT: u32> IndexMut<usize> for Paged<T, SHIFT> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.pages[i >> SHIFT][i & Self::MASK]
    }
}

/// The pages of a [`Paged`]: the first one in place, the others in a list, so that an array of
/// one page (every shared key's while it has under 4,096 holders) is one allocation, not two.
/// There are no pages while the first has no room (a page is never left empty: the last item's
/// removal frees it).
#[derive(Clone, Debug)]
struct Pages<T> {
    first: Vec<T>,
    more: Vec<Vec<T>>,
}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Pages {
            first: Vec::new(),
            more: Vec::new(),
        }
    }
}

impl<T> Pages<T> {
    fn is_empty(&self) -> bool {
        self.first.capacity() == 0
    }

    fn len(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            1 + self.more.len()
        }
    }

    fn get(&self, i: usize) -> Option<&Vec<T>> {
        match i {
            _ if self.is_empty() => None,
            0 => Some(&self.first),
            _ => self.more.get(i - 1),
        }
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut Vec<T>> {
        match i {
            _ if self.is_empty() => None,
            0 => Some(&mut self.first),
            _ => self.more.get_mut(i - 1),
        }
    }

    fn last(&self) -> Option<&Vec<T>> {
        self.get(self.len().checked_sub(1)?)
    }

    fn last_mut(&mut self) -> Option<&mut Vec<T>> {
        self.get_mut(self.len().checked_sub(1)?)
    }

    /// Adds `page` (never one without room: it would read as no page).
    fn push(&mut self, page: Vec<T>) {
        debug_assert!(page.capacity() > 0);
        if self.is_empty() {
            self.first = page;
        } else {
            self.more.push(page);
        }
    }

    fn pop(&mut self) -> Option<Vec<T>> {
        match self.more.pop() {
            Some(page) => Some(page),
            None if self.is_empty() => None,
            None => Some(std::mem::take(&mut self.first)),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Vec<T>> {
        std::iter::once(&self.first).chain(&self.more)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Vec<T>> {
        std::iter::once(&mut self.first).chain(&mut self.more)
    }
}

impl<T> Index<usize> for Pages<T> {
    type Output = Vec<T>;

    fn index(&self, i: usize) -> &Vec<T> {
        match i {
            0 => &self.first,
            _ => &self.more[i - 1],
        }
    }
}

impl<T> IndexMut<usize> for Pages<T> {
    fn index_mut(&mut self, i: usize) -> &mut Vec<T> {
        match i {
            0 => &mut self.first,
            _ => &mut self.more[i - 1],
        }
    }
}

/// A free place in a [`Table`].
pub const EMPTY: u32 = 0;
/// A place whose entry left a table that takes no more entries (a table being emptied into a
/// larger one): probes go on past it, as past an entry.
const TOMBSTONE: u32 = u32::MAX;

/// Places in one page of a [`Table`] (64 KB).
const TABLE_SHIFT: u32 = 14;
const TABLE_PAGE: usize = 1 << TABLE_SHIFT;

/// The places of an open-addressing hash table of non-zero `u32` entries: a power of two of
/// them (or none), in pages that exist only once written to (a missing page reads as empty).
/// It knows no keys: the caller gives each entry's home place.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pages: Vec<Vec<u32>>,
    places: usize,
    entries: usize,
}

impl Table {
    /// An empty table of `places` (a power of two): O(places / 16,384), nothing written yet.
    pub fn with_places(places: usize) -> Table {
        debug_assert!(places.is_power_of_two());
        Table {
            pages: vec![Vec::new(); places.div_ceil(TABLE_PAGE)],
            places,
            entries: 0,
        }
    }

    pub fn places(&self) -> usize {
        self.places
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Bytes it takes.
    pub fn bytes(&self) -> usize {
        self.pages.iter().map(Vec::capacity).sum::<usize>() * 4
            + self.pages.capacity() * std::mem::size_of::<Vec<u32>>()
    }

    fn mask(&self) -> usize {
        self.places - 1
    }

    /// The entry at place `at` (`EMPTY` if none).
    pub fn get(&self, at: usize) -> u32 {
        self.pages[at >> TABLE_SHIFT]
            .get(at & (TABLE_PAGE - 1))
            .copied()
            .unwrap_or(EMPTY)
    }

    /// Writes place `at` (allocating its page on its first entry).
    pub fn set(&mut self, at: usize, entry: u32) {
        let page_len = self.places.min(TABLE_PAGE);
        let page = &mut self.pages[at >> TABLE_SHIFT];
        if page.is_empty() {
            if entry == EMPTY {
                return;
            }
            *page = vec![EMPTY; page_len];
        }
        page[at & (TABLE_PAGE - 1)] = entry;
    }

    /// The place of the first entry `is` accepts, probing from `hash`'s home place.
    pub fn find(&self, hash: usize, mut is: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.places == 0 {
            return None;
        }
        let mask = self.mask();
        let mut at = hash & mask;
        loop {
            match self.get(at) {
                EMPTY => return None,
                TOMBSTONE => {}
                entry if is(entry) => return Some(at),
                _ => {}
            }
            at = (at + 1) & mask;
        }
    }

    /// Puts `entry` at the first free place from `hash`'s home place (the table must not be
    /// full); returns the place.
    pub fn put(&mut self, hash: usize, entry: u32) -> usize {
        debug_assert!(self.entries < self.places);
        let mask = self.mask();
        let mut at = hash & mask;
        while self.get(at) != EMPTY {
            at = (at + 1) & mask;
        }
        self.set(at, entry);
        self.entries += 1;
        at
    }

    /// Empties place `at`, shifting back the entries after it that probed past it (`hash_of`
    /// gives an entry's hash): every entry stays reachable from its home without a tombstone.
    pub fn take_out(&mut self, mut at: usize, hash_of: impl Fn(u32) -> usize) {
        let mask = self.mask();
        let mut next = at;
        loop {
            next = (next + 1) & mask;
            let entry = self.get(next);
            if entry == EMPTY {
                break;
            }
            let home = hash_of(entry) & mask;
            // The entry at `next` may move to `at` if its home is not cyclically in (at, next].
            let stays = if at <= next {
                at < home && home <= next
            } else {
                at < home || home <= next
            };
            if !stays {
                self.set(at, entry);
                at = next;
            }
        }
        self.set(at, EMPTY);
        self.entries -= 1;
    }

    /// Takes the entry at place `at` out of a table that takes no more entries, in O(1): the
    /// place is marked rather than emptied, so that every other entry stays reachable.
    pub fn bury(&mut self, at: usize) {
        debug_assert!(!matches!(self.get(at), EMPTY | TOMBSTONE));
        self.set(at, TOMBSTONE);
        self.entries -= 1;
    }

    /// Whether place `at` holds an entry (not empty, not buried).
    pub fn holds(&self, at: usize) -> bool {
        !matches!(self.get(at), EMPTY | TOMBSTONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_copies_at_most_a_page_at_a_time() {
        let mut p: Paged<u64, 8> = Paged::default();
        let mut most = 0;
        for i in 0..100_000u64 {
            let before = p.copied();
            assert_eq!(p.push(i), i as usize);
            most = most.max(p.copied() - before);
        }
        assert!(most <= 256, "{most} items copied by one push");
        assert!(p.capacity() <= p.len() + p.len() / 16 + 4);
        assert_eq!(p[77_777], 77_777);
        assert_eq!(p.swap_remove(5), Some(5));
        assert_eq!(
            p.swap_remove(100_000),
            None,
            "no such item: nothing changes"
        );
        assert_eq!(p[5], 99_999);
        assert_eq!(p.len(), 99_999);
        assert_eq!(p.iter().count(), 99_999);
    }

    /// No call panics, whatever the array holds: a removal of an item that is not there
    /// changes nothing (before: `expect("not empty")` on an empty array, an index out of
    /// bounds past the end), a run longer than a page keeps a page's worth.
    #[test]
    fn no_call_panics_on_what_is_not_there() {
        let mut p: Paged<u64, 4> = Paged::default();
        assert_eq!(p.swap_remove(0), None);
        assert_eq!(p.pop(), None);
        assert_eq!(p.push(7), 0);
        assert_eq!(p.swap_remove(3), None);
        assert_eq!(p.len(), 1);
        assert_eq!(p.swap_remove(0), Some(7));
        assert!(p.is_empty());
        assert_eq!(p.push_run(&[]), 0);
        assert!(p.is_empty(), "an empty run adds no page");
        let at = p.push_run(&[1; 40]);
        assert_eq!((at, p.len()), (0, 16), "a page's worth kept");
        assert_eq!(p.run(0, 16), &[1; 16][..]);
        assert_eq!(p.push(2), 16, "the next item starts the next page");
        assert_eq!((p.pop(), p.pop(), p.len()), (Some(2), Some(1), 15));
    }

    /// An array of one page is that page alone (no list of pages allocated beside it: a new
    /// shared key allocates two arrays, not four); emptied, it frees the page and reads as
    /// empty; grown past a page, the list appears, and every item stays where it was, through
    /// removals back into the first page and a compacted copy.
    #[test]
    fn one_page_is_one_allocation() {
        let mut p: Paged<u64, 4> = Paged::default();
        assert_eq!((p.bytes(), p.len()), (0, 0));
        p.push(1);
        assert_eq!(p.bytes(), p.capacity() * 8, "no list of pages for one page");
        assert_eq!(p.pop(), Some(1));
        assert!(
            p.is_empty() && p.capacity() == 0,
            "the emptied page is freed"
        );
        assert_eq!((p.push(2), p.len()), (0, 1), "and a new one starts at 0");
        for i in 3..40u64 {
            p.push(i);
        }
        assert!(
            p.bytes() > p.capacity() * 8,
            "past a page, the list of pages"
        );
        assert_eq!(p.len(), 38);
        assert_eq!(
            p.iter().copied().collect::<Vec<_>>(),
            (2..40).collect::<Vec<_>>()
        );
        let copy = p.compacted();
        assert_eq!(
            copy.iter().copied().collect::<Vec<_>>(),
            (2..40).collect::<Vec<_>>()
        );
        for i in (2..40u64).rev() {
            assert_eq!(p.pop(), Some(i));
        }
        assert!(p.is_empty() && p.bytes() == p.pages.more.capacity() * 24);
        assert_eq!(p.get(0), None);
        assert_eq!(p.push_run(&[9, 9]), 0);
        assert_eq!(p.run(0, 2), &[9, 9][..]);
    }

    #[test]
    fn runs_never_straddle_pages() {
        let mut p: Paged<u8, 8> = Paged::default();
        let a = p.push_run(&[1; 200]);
        assert_eq!(p.next_run_at(100), 256);
        let b = p.push_run(&[2; 100]);
        assert_eq!((a, b, p.len()), (0, 256, 356));
        assert_eq!(p.run(b, 100), &[2; 100][..]);
        assert_eq!(p.run(a + 199, 1), &[1][..]);
    }

    #[test]
    fn a_table_allocates_pages_on_write_and_frees_them_below() {
        let mut t = Table::with_places(1 << 20);
        assert!(t.bytes() < 2048, "nothing allocated up front");
        let at = t.put(5, 9);
        assert_eq!((t.get(at), t.entries()), (9, 1));
        assert!(t.bytes() >= TABLE_PAGE * 4);
        assert_eq!(t.find(5, |e| e == 9), Some(at));
        t.take_out(at, |_| 5);
        assert_eq!((t.get(at), t.entries()), (EMPTY, 0));
        // Buried places are probed past.
        let (a, b) = (t.put(7, 1), t.put(7, 2));
        t.bury(a);
        assert_eq!(t.find(7, |e| e == 2), Some(b));
        assert_eq!(t.find(7, |e| e == 1), None);
        assert!(!t.holds(a) && t.holds(b));
    }
}
