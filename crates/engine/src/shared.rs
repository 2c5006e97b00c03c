//! The holders of a shared key (a read lock, or a counting semaphore when it has a limit).
//!
//! Every holder is a full hold of its own: owner, fencing token, reentrancy count and lease end.
//! Each operation costs what the commands' docs promise, whatever the number H of holders and
//! however many of their leases have lapsed without being removed yet:
//! - finding a holder by owner: O(1) expected;
//! - adding, renewing or removing one: O(log H) expected, growth included: the table grows
//!   incrementally, the arrays a page at a time and the owners' bytes compact a few at a time,
//!   so no single operation re-hashes or copies the set (only [`Shared::tidy`], for small sets,
//!   and the owners' room running out at [`MAX_OWNER_BYTES`] copy it whole);
//! - the first and the last lease to end, the first lease end from a given time, and how many
//!   leases are alive at a given time: O(log H);
//! - the first n live holders in grant (token) order: O((n + log H) log(n + log H)).
//!
//! Memory is what the spec bounds (bytes per holder beyond its owner's bytes), so the set is a
//! few paged arrays ([`super::pages`]) rather than maps of boxes:
//! - `slots`: one 48-byte record per holder, in no particular order (a removal moves the last
//!   record into the hole), in pages of 4,096;
//! - `owners`: every owner's bytes back to back in pages of 256 KB, each record pointing at its
//!   own; once the bytes of removed owners are three quarters of the whole, the live ones move
//!   into a fresh buffer [`REHASH_STEP`] records per later insert and removal (a bit of each
//!   record says which buffer holds its bytes meanwhile; at most [`MAX_OWNER_BYTES`] in a
//!   buffer, so that a 32-bit offset addresses every owner);
//! - `table`: an open-addressing hash table of slot numbers by owner (4 bytes per entry, between
//!   an eighth and three quarters full; deletion shifts entries back, so it never fills with
//!   tombstones). Past 3/4 full a table twice as large takes over, and the old one's owners move
//!   into it [`REHASH_STEP`] at a time with each later insert and removal (lookups look in both
//!   meanwhile), as Redis's dict does;
//! - the records are also the nodes of a treap ordered by (lease end, token, owner), each node
//!   knowing the size of its subtree, the permits held in it and the holder with the smallest
//!   token in it: that is what answers the time, permit and order questions above without a
//!   scan.

use std::cmp::Ordering;
use std::collections::hash_map::RandomState;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;

use super::pages::{Paged, Table, EMPTY};
use super::tokens::{MAX_TOKEN as TOKEN_MASK, TOKEN_BITS};

pub use relock_protocol::bounds::{MAX_HOLDERS, MAX_LEASE_END, MAX_LIMIT};

/// The most bytes the owners of one key may take together (offsets into them are 32-bit). With
/// 256-byte owners that is 16.7 million holders; RDB loading refuses a value above it.
pub const MAX_OWNER_BYTES: usize = u32::MAX as usize;

/// How a request wants a key (the words `SHARED [LIMIT n [PERMITS p]]`).
pub use relock_protocol::Ask as Mode;

/// One holder of a shared key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: u64,
    pub count: u32,
    /// The last millisecond of its lease (Unix ms); it has lapsed once the clock is past it.
    pub lease_end: i64,
    /// The semaphore's permits it holds (1 unless it asked for more; 1 for a reader).
    pub permits: u32,
    /// When it was granted (Unix ms); 0 if unknown (loaded from an older RDB encoding).
    pub granted_at: i64,
}

impl Holder {
    /// A hold of one permit, count 1, granted at `granted_at` (Unix ms, 0: unknown).
    pub fn new(token: u64, lease_end: i64, granted_at: i64) -> Holder {
        Holder {
            token,
            count: 1,
            lease_end,
            permits: 1,
            granted_at,
        }
    }

    /// Whether the lease is alive at `now` (through its last millisecond).
    pub fn alive_at(&self, now: i64) -> bool {
        self.lease_end >= now
    }
}

/// A new holder would take the owners' bytes past [`MAX_OWNER_BYTES`], or the holders past
/// [`MAX_HOLDERS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// Arrays a holder set no longer needs ([`Shared::tidy`]): dropping it frees them.
#[derive(Default)]
pub struct Garbage {
    slots: Slots,
    owners: Owners,
    tables: [Table; 2],
}

impl Garbage {
    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.slots.bytes()
            + self.owners.bytes()
            + self.tables.iter().map(Table::bytes).sum::<usize>()
    }
}

/// Holders' records, in pages of 4,096 (192 KB): growing copies at most one page. Indexing
/// them is total: a slot number past the records (only a bug could make one) reads as a
/// detached record ([`DETACHED`]: no links, so every walk ends) and writes to a spare one,
/// rather than panicking, which would abort the user's Redis.
#[derive(Clone, Debug, Default)]
struct Slots {
    records: Paged<Slot, 12>,
    /// Where a write to a slot past the records goes (allocated on the first one: never, but
    /// for a bug).
    spare: Option<Box<Slot>>,
}

impl Slots {
    #[cfg(test)]
    const PAGE: usize = Paged::<Slot, 12>::PAGE;
}

impl std::ops::Deref for Slots {
    type Target = Paged<Slot, 12>;

    fn deref(&self) -> &Paged<Slot, 12> {
        &self.records
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut Paged<Slot, 12> {
        &mut self.records
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Slot;

    fn index(&self, i: usize) -> &Slot {
        self.records.get(i).unwrap_or(&DETACHED)
    }
}

impl std::ops::IndexMut<usize> for Slots {
    fn index_mut(&mut self, i: usize) -> &mut Slot {
        match self.records.get_mut(i) {
            Some(record) => record,
            None => {
                let spare = self.spare.get_or_insert_with(|| Box::new(DETACHED));
                **spare = DETACHED;
                spare
            }
        }
    }
}

/// What a slot number past the records reads as: a node with no links and no holder.
const DETACHED: Slot = Slot {
    token_len: 0,
    lease_permits: 0,
    granted_sum: 0,
    owner_at: 0,
    count: 0,
    left: NIL,
    right: NIL,
    size: 0,
    min: NIL,
};
/// Owners' bytes, in pages of 256 KB (an owner never straddles two).
type Owners = Paged<u8, 18>;

/// Units of work (a table place looked at, or an owner moved to the new table) each insert or
/// removal spends on a table's growth under way: the old table's places are all looked at long
/// before the new one fills (it starts half as full as its growth threshold).
pub const REHASH_STEP: usize = 16;

/// The most holders a set has without an owner table: finding one of them compares owners in
/// turn (lengths first), cheaper than hashing one, and the common set of a few readers
/// allocates no table. The holder past it builds the table.
pub const SMALL: usize = 16;

/// The most holders a set may have for a removal to compact it whole: copying 16,384 records
/// (0.8 MB) and rehashing their owners takes well under a millisecond.
pub const QUICK_TIDY_HOLDERS: usize = 16_384;

const _: () = assert!(
    std::mem::size_of::<Slot>() == 48,
    "a holder's record is 48 bytes"
);

/// The bit of a record's `token_len` that says which owners' buffer holds its bytes while they
/// move into a fresh one ([`Shared::owners_step`]): the current one if it equals the set's
/// `epoch`, else the old one. (Tokens take 53 bits, the owner's length 8 above them.)
const EPOCH_BIT: u64 = 1 << 63;

/// Owners' bytes moving, record by record, from an old buffer into the set's fresh one.
#[derive(Clone, Debug)]
struct Moving {
    old: Owners,
    /// Every record below this slot has its bytes in the fresh buffer.
    cursor: usize,
}

/// No node (a missing child); also the most slots a set can have.
const NIL: u32 = u32::MAX;

/// Bits of a record's two packed words that hold a time (Unix ms, until the year 2527): the
/// lease end and the grant time; the 20 above hold the permits (at most 10^6) and the
/// subtree's permits.
use relock_protocol::bounds::TIME_BITS;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
const _: () = assert!(MAX_LEASE_END == TIME_MASK as i64);
/// The most a 20-bit permit field holds.
const PERMITS_MASK: u64 = (1 << (64 - TIME_BITS)) - 1;

/// One holder's record, and its node in the treap: 48 bytes.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Token (the low `TOKEN_BITS`), and `owner length - 1` in the 8 bits above.
    token_len: u64,
    /// Lease end (the low `TIME_BITS`) and permits (above).
    lease_permits: u64,
    /// Grant time (the low `TIME_BITS`) and the permits of this subtree's holders (above,
    /// saturating: a semaphore's sum never exceeds its limit, 10^6; a reader's subtree may
    /// saturate, and is never asked).
    granted_sum: u64,
    /// Where the owner's bytes start in `owners`.
    owner_at: u32,
    count: u32,
    left: u32,
    right: u32,
    /// Nodes in this subtree, this one included.
    size: u32,
    /// The slot with the smallest token in this subtree.
    min: u32,
}

/// A time and a 20-bit number in one word.
fn pack(time: i64, n: u64) -> u64 {
    (time.clamp(0, MAX_LEASE_END) as u64) | (n.min(PERMITS_MASK) << TIME_BITS)
}

impl Slot {
    fn token(&self) -> u64 {
        self.token_len & TOKEN_MASK
    }

    fn owner_len(&self) -> usize {
        ((self.token_len >> TOKEN_BITS) & 0xFF) as usize + 1
    }

    fn lease_end(&self) -> i64 {
        (self.lease_permits & TIME_MASK) as i64
    }

    fn permits(&self) -> u32 {
        (self.lease_permits >> TIME_BITS) as u32
    }

    fn granted_at(&self) -> i64 {
        (self.granted_sum & TIME_MASK) as i64
    }

    fn permits_sum(&self) -> u32 {
        (self.granted_sum >> TIME_BITS) as u32
    }

    fn set_permits_sum(&mut self, sum: u32) {
        self.granted_sum = pack(self.granted_at(), u64::from(sum));
    }

    fn holder(&self) -> Holder {
        Holder {
            token: self.token(),
            count: self.count,
            lease_end: self.lease_end(),
            permits: self.permits(),
            granted_at: self.granted_at(),
        }
    }
}

/// The secret mixed into every set's treap priorities: one per process, drawn once (a set's
/// own, hashed from its `RandomState`, cost a SipHash per new shared key). Secret is what it
/// must be: nobody outside can choose tokens that unbalance a treap.
fn treap_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| RandomState::new().hash_one(0x5eed_u64))
}

/// The holders of one shared key.
#[derive(Clone, Debug)]
pub struct Shared {
    limit: u32,
    slots: Slots,
    owners: Owners,
    /// Bytes of `owners` that belong to no record any more (or to none ever: page tails).
    stale: u32,
    /// Slot number + 1 by owner; while the table grows, the owners not moved yet are in the
    /// growth's old table.
    table: Table,
    growth: Option<Box<Growth>>,
    /// While the owners' bytes are compacted: the old buffer, and how far the move got.
    moving: Option<Box<Moving>>,
    /// Whether the records whose bytes are in `owners` have `EPOCH_BIT` set (see [`EPOCH_BIT`]).
    epoch: bool,
    /// Owners' bytes copied into a fresh buffer so far (for the tests that bound it per
    /// operation).
    #[cfg(test)]
    owner_bytes_copied: u64,
    /// Owners moved from an old table to `table` so far (for the tests that bound it per
    /// operation).
    #[cfg(test)]
    rehashed: u64,
    /// Owners hashed so far (for the tests that bound the work per operation).
    #[cfg(test)]
    hashes: std::cell::Cell<u64>,
    /// The treap's root (`NIL` when empty).
    root: u32,
    /// The slot of the owner last found or added: a hint, used only once the owner's bytes
    /// there are checked (so a record moved since makes it miss, never lie).
    last_found: std::cell::Cell<u32>,
    hasher: RandomState,
    /// Mixed into the treap's priorities, so nobody can choose tokens that unbalance it.
    seed: u64,
    /// The most bytes the owners may take: [`MAX_OWNER_BYTES`] (less in unit tests, which check
    /// the bound without allocating gigabytes).
    owner_room: u32,
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
        let hasher = RandomState::new();
        let seed = treap_seed();
        Shared {
            limit,
            slots: Slots::default(),
            owners: Owners::default(),
            stale: 0,
            table: Table::default(),
            growth: None,
            moving: None,
            epoch: false,
            #[cfg(test)]
            owner_bytes_copied: 0,
            #[cfg(test)]
            rehashed: 0,
            #[cfg(test)]
            hashes: std::cell::Cell::new(0),
            root: NIL,
            last_found: std::cell::Cell::new(0),
            hasher,
            seed,
            owner_room: MAX_OWNER_BYTES as u32,
        }
    }

    /// An empty set whose owners may take at most `bytes` (tests of the bound).
    #[cfg(test)]
    fn with_owner_room(limit: u32, bytes: usize) -> Shared {
        Shared {
            owner_room: bytes as u32,
            ..Shared::new(limit)
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
        self.find_slot(owner).map(|slot| self.slots[slot].holder())
    }

    /// The slot of `owner`'s record: the one last found if it is `owner`'s (a command looks
    /// its owner up several times: one hash, not four), else found in the table.
    fn find_slot(&self, owner: &[u8]) -> Option<usize> {
        let hint = self.last_found.get() as usize;
        if hint < self.slots.len() && self.is_owner_of(&self.slots[hint], owner) {
            return Some(hint);
        }
        let (_, slot) = self.find(owner).ok()?;
        self.last_found.set(slot as u32);
        Some(slot)
    }

    /// Whether `record` is `owner`'s (lengths compared first).
    fn is_owner_of(&self, record: &Slot, owner: &[u8]) -> bool {
        record.owner_len() == owner.len() && self.owner_of_slot(record) == owner
    }

    /// `owner`'s hold if its lease is alive at `now`.
    pub fn get_alive(&self, owner: &[u8], now: i64) -> Option<Holder> {
        self.get(owner).filter(|h| h.alive_at(now))
    }

    /// Adds `owner`'s hold, or replaces it. Owners are 1 to 256 bytes long and tokens below
    /// 2^53 (what the commands accept); others are cut to fit rather than refused. A new owner
    /// whose bytes do not fit ([`MAX_OWNER_BYTES`]) is refused and nothing changes. Returns
    /// whether `owner` is a new holder (false: its hold was replaced).
    pub fn insert(&mut self, owner: &[u8], holder: Holder) -> Result<bool, Full> {
        if owner.is_empty() {
            // No room for it in a record (which keeps `length - 1`): refused, not a panic.
            return Err(Full);
        }
        let owner = &owner[..owner.len().min(256)];
        let token_len = (holder.token & TOKEN_MASK) | ((owner.len() as u64 - 1) << TOKEN_BITS);
        let lease_permits = pack(holder.lease_end, u64::from(holder.permits.min(MAX_LIMIT)));
        let hinted = self.find_slot_hinted(owner);
        if let Ok(slot) = hinted {
            let record = self.slots[slot];
            // In place only when its treap node and its subtree's permits stay as they are.
            if record.token_len & !EPOCH_BIT == token_len && record.lease_permits == lease_permits {
                self.slots[slot].count = holder.count;
                self.slots[slot].granted_sum = pack(holder.granted_at, record.permits_sum().into());
                return Ok(false);
            }
            // Its place in the treap moves with its lease end (and token).
            self.root = self.remove_node(self.root, slot as u32);
            let record = &mut self.slots[slot];
            // Its bytes stay where they are.
            record.token_len = token_len | (record.token_len & EPOCH_BIT);
            record.lease_permits = lease_permits;
            record.count = holder.count;
            record.granted_sum = pack(holder.granted_at, 0);
            self.attach(slot as u32);
            return Ok(false);
        }
        if self.owners.next_run_at(owner.len()) + owner.len() > self.owner_room as usize {
            drop(self.compact_owners());
            if self.owners.next_run_at(owner.len()) + owner.len() > self.owner_room as usize {
                return Err(Full);
            }
        }
        if self.len() >= MAX_HOLDERS {
            return Err(Full);
        }
        let slot = self.slots.len();
        let end = self.owners.len();
        let owner_at = self.owners.push_run(owner);
        // A page's tail left unused belongs to no owner.
        self.stale = self.stale.saturating_add((owner_at - end) as u32);
        let owner_at = owner_at as u32;
        let epoch = self.epoch_bit();
        self.slots.push(Slot {
            token_len: token_len | epoch,
            lease_permits,
            granted_sum: pack(holder.granted_at, 0),
            owner_at,
            count: holder.count,
            left: NIL,
            right: NIL,
            size: 1,
            min: slot as u32,
        });
        // The hash the lookup computed, not a second one.
        self.table_insert(owner, slot, hinted.err().flatten());
        self.attach(slot as u32);
        self.last_found.set(slot as u32);
        Ok(true)
    }

    /// Removes `owner`'s hold, then compacts what it cheaply can ([`Shared::tidy_cheaply`]).
    pub fn remove(&mut self, owner: &[u8]) -> Option<Holder> {
        let holder = self.remove_keeping_room(owner)?;
        drop(self.tidy_cheaply());
        Some(holder)
    }

    /// After a removal: a set of at most [`QUICK_TIDY_HOLDERS`] is compacted ([`Shared::tidy`],
    /// a copy of at most a few MB); a larger one only has its owners' bytes compacted, when
    /// three quarters of them belong to no holder (one copy per that many removals: the bytes
    /// never grow past four times what the holders need, and no single removal copies the
    /// whole set each time). Its other arrays keep their room until it shrinks.
    pub fn tidy_cheaply(&mut self) -> Garbage {
        if self.len() <= QUICK_TIDY_HOLDERS {
            return self.tidy();
        }
        self.compact_lazily();
        Garbage::default()
    }

    /// Once three quarters of the owners' bytes belong to no holder, starts moving the live
    /// ones into a fresh buffer, [`REHASH_STEP`] records per later insert and removal: O(1).
    pub fn compact_lazily(&mut self) {
        let stale = self.stale as usize;
        if self.moving.is_none() && stale > 3 * self.owners.len().saturating_sub(stale) {
            // Into a fresh buffer a few records per later operation, not all in this one.
            let old = std::mem::take(&mut self.owners);
            self.moving = Some(Box::new(Moving { old, cursor: 0 }));
            self.epoch = !self.epoch;
            self.stale = 0;
        }
    }

    /// Removes `owner`'s hold without compacting anything (O(log H) however large the set, but
    /// for a set left empty): for removing many in bounded steps; [`Shared::tidy`] afterwards.
    pub fn remove_keeping_room(&mut self, owner: &[u8]) -> Option<Holder> {
        let (at, slot) = self.find(owner).ok()?;
        if slot >= self.slots.len() {
            // Only a bug could give a slot past the records: nothing is removed, nothing panics.
            return None;
        }
        let record = self.slots[slot];
        self.root = self.remove_node(self.root, slot as u32);
        self.take_out(at);
        if !self.in_old(&record) {
            self.stale = self.stale.saturating_add(record.owner_len() as u32);
        }
        // The last record moves into the hole; whoever points at it follows.
        let last = self.slots.len().saturating_sub(1);
        self.slots.swap_remove(slot);
        if slot != last {
            let moved = self.slots[slot];
            if let Some(at) = self.table_place_of(self.owner_of_slot(&moved), last) {
                self.place_mut(at, slot as u32 + 1);
            }
            self.relink(last as u32, slot as u32);
            // Every record below the move's cursor has its bytes in the fresh buffer.
            if self.moving.as_ref().is_some_and(|m| slot < m.cursor) && self.in_old(&moved) {
                self.move_owner(slot);
            }
        }
        self.rehash_step(REHASH_STEP);
        self.owners_step(REHASH_STEP);
        Some(record.holder())
    }

    /// The lease that ends first: (its last millisecond, the owner). O(log H).
    pub fn first_lease_end(&self) -> Option<(i64, &[u8])> {
        let mut t = self.root;
        if t == NIL {
            return None;
        }
        while self.slots[t as usize].left != NIL {
            t = self.slots[t as usize].left;
        }
        let record = &self.slots[t as usize];
        Some((record.lease_end(), self.owner_of_slot(record)))
    }

    /// The latest lease end (what the key's TTL is set to). O(log H).
    pub fn last_lease_end(&self) -> Option<i64> {
        let mut t = self.root;
        if t == NIL {
            return None;
        }
        while self.slots[t as usize].right != NIL {
            t = self.slots[t as usize].right;
        }
        Some(self.slots[t as usize].lease_end())
    }

    /// The first lease end at or after `now` (the next lease of those alive to end). O(log H).
    pub fn next_lease_end(&self, now: i64) -> Option<i64> {
        let mut t = self.root;
        let mut best = None;
        while t != NIL {
            let record = &self.slots[t as usize];
            if record.lease_end() >= now {
                best = Some(record.lease_end());
                t = record.left;
            } else {
                t = record.right;
            }
        }
        best
    }

    /// The latest end among leases alive at `now`.
    pub fn live_last_lease_end(&self, now: i64) -> Option<i64> {
        self.last_lease_end().filter(|end| *end >= now)
    }

    /// Holders whose lease is alive at `now`. O(log H).
    pub fn live(&self, now: i64) -> usize {
        self.len() - self.lapsed(now)
    }

    /// The permits of the holders whose lease is alive at `now`. O(log H).
    pub fn live_permits(&self, now: i64) -> u64 {
        let mut t = self.root;
        let mut lapsed = 0u64;
        while t != NIL {
            let record = &self.slots[t as usize];
            if record.lease_end() < now {
                lapsed += u64::from(record.permits()) + u64::from(self.permits_in(record.left));
                t = record.right;
            } else {
                t = record.left;
            }
        }
        self.permits_total().saturating_sub(lapsed)
    }

    /// The permits of every holder, lapsed or not. O(1).
    pub fn permits_total(&self) -> u64 {
        u64::from(self.permits_in(self.root))
    }

    /// How many holders, taken in lease order (the first to end first), hold `permits` together
    /// (0 for none; more than [`Shared::len`] if all of them hold fewer). O(log H).
    pub fn leases_covering(&self, permits: u64) -> usize {
        let mut need = permits;
        if need == 0 {
            return 0;
        }
        let (mut t, mut before) = (self.root, 0usize);
        while t != NIL {
            let record = &self.slots[t as usize];
            let left = u64::from(self.permits_in(record.left));
            if left >= need {
                t = record.left;
                continue;
            }
            need -= left;
            before += self.size(record.left) as usize + 1;
            let own = u64::from(record.permits());
            if own >= need {
                return before;
            }
            need -= own;
            t = record.right;
        }
        self.len() + 1
    }

    /// Holders whose lease has lapsed at `now` (not removed yet). O(log H).
    pub fn lapsed(&self, now: i64) -> usize {
        let mut t = self.root;
        let mut before = 0usize;
        while t != NIL {
            let record = &self.slots[t as usize];
            if record.lease_end() < now {
                before += 1 + self.size(record.left) as usize;
                t = record.right;
            } else {
                t = record.left;
            }
        }
        before
    }

    /// Holders in grant order (ascending token), lapsed or not. O(H log H).
    pub fn holders(&self) -> Vec<(&[u8], Holder)> {
        let mut list: Vec<(&[u8], Holder)> = self
            .slots
            .iter()
            .map(|s| (self.owner_of_slot(s), s.holder()))
            .collect();
        list.sort_unstable_by_key(|(_, h)| h.token);
        list
    }

    /// The first `n` holders in grant order (0: all) among those alive at `now`. For n > 0 it
    /// costs O((n + log H) log(n + log H)) whatever H: a best-first walk of the live part of the
    /// treap by each subtree's smallest token.
    pub fn first_alive(&self, n: usize, now: i64) -> Vec<(&[u8], Holder)> {
        if n == 0 {
            let mut all: Vec<(&[u8], Holder)> = self
                .slots
                .iter()
                .filter(|s| s.lease_end() >= now)
                .map(|s| (self.owner_of_slot(s), s.holder()))
                .collect();
            all.sort_unstable_by_key(|(_, h)| h.token);
            return all;
        }
        // Candidates by smallest token: a lone node (false) or a whole subtree (true).
        let mut next: BinaryHeap<std::cmp::Reverse<(u64, bool, u32)>> = BinaryHeap::new();
        let push_tree = |next: &mut BinaryHeap<_>, t: u32| {
            if t != NIL {
                let min = self.slots[t as usize].min as usize;
                next.push(std::cmp::Reverse((self.slots[min].token(), true, t)));
            }
        };
        // The live part, leases ending at `now` or later, as O(log H) nodes and subtrees.
        let mut t = self.root;
        while t != NIL {
            let record = &self.slots[t as usize];
            if record.lease_end() >= now {
                next.push(std::cmp::Reverse((record.token(), false, t)));
                push_tree(&mut next, record.right);
                t = record.left;
            } else {
                t = record.right;
            }
        }
        let mut list = Vec::with_capacity(n.min(self.len()));
        while list.len() < n {
            let Some(std::cmp::Reverse((_, tree, t))) = next.pop() else {
                break;
            };
            let record = &self.slots[t as usize];
            if tree {
                next.push(std::cmp::Reverse((record.token(), false, t)));
                push_tree(&mut next, record.left);
                push_tree(&mut next, record.right);
            } else {
                list.push((self.owner_of_slot(record), record.holder()));
            }
        }
        list
    }

    /// At most `n` holders, lapsed or not, in no particular order. O(n).
    pub fn sample(&self, n: usize) -> impl Iterator<Item = (&[u8], Holder)> {
        self.slots
            .iter()
            .take(n)
            .map(|s| (self.owner_of_slot(s), s.holder()))
    }

    /// Holders in grant order (ascending token), lapsed or not.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Holder)> {
        self.holders().into_iter()
    }

    /// Bytes of memory this set takes (for `MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Shared>()
            + self.slots.bytes()
            + self.owners.bytes()
            + self.table.bytes()
            + self
                .growth
                .as_ref()
                .map_or(0, |g| std::mem::size_of::<Growth>() + g.old.bytes())
            + self
                .moving
                .as_ref()
                .map_or(0, |m| std::mem::size_of::<Moving>() + m.old.bytes())
    }

    /// Compacts the owners' bytes, the table and the arrays where much of them is unused (each
    /// at most once per as many removals as it holds: amortized O(1) per removal). The arrays it
    /// replaces are handed back rather than freed: freeing a large one takes the kernel
    /// milliseconds, which the host may spend off its main thread. It finishes a growth of the
    /// table under way: O(H), for sets the caller knows to be small.
    #[must_use = "the old arrays: drop them, here or elsewhere"]
    pub fn tidy(&mut self) -> Garbage {
        let mut garbage = Garbage::default();
        if self.slots.is_empty() {
            let empty = Shared {
                owner_room: self.owner_room,
                ..Shared::new(self.limit)
            };
            let old = std::mem::replace(self, empty);
            garbage.slots = old.slots;
            garbage.owners = old.owners;
            garbage.tables = [old.table, old.growth.map(|g| g.old).unwrap_or_default()];
            return garbage;
        }
        self.rehash_step(usize::MAX);
        self.owners_step(usize::MAX);
        if self.stale as usize * 4 > self.owners.len() {
            garbage.owners = self.compact_owners();
        }
        let live = self.slots.len();
        if live <= SMALL / 4 && self.table.places() > 0 {
            // Small again (a quarter of [`SMALL`], so that a set around it does not build and
            // drop its table at every change): no table.
            self.rehash_step(usize::MAX);
            garbage.tables[0] = std::mem::take(&mut self.table);
        } else if self.table.places() > 8 * live + 8 {
            garbage.tables[0] = self.rebuild_table(table_size_for(live));
        }
        if self.slots.capacity() > 2 * live + 4 {
            let slots = Slots {
                records: self.slots.compacted(),
                spare: None,
            };
            garbage.slots = std::mem::replace(&mut self.slots, slots);
            let owners = self.owners.compacted();
            let old = std::mem::replace(&mut self.owners, owners);
            if garbage.owners.capacity() < old.capacity() {
                garbage.owners = old;
            }
        }
        garbage
    }

    // --- Owners and the table ---------------------------------------------------------------

    fn owner_of_slot(&self, record: &Slot) -> &[u8] {
        match &self.moving {
            Some(moving) if self.in_old(record) => owner_in(&moving.old, record),
            _ => owner_in(&self.owners, record),
        }
    }

    /// `EPOCH_BIT` if set, else 0: the bit of the records whose bytes are in `owners`.
    fn epoch_bit(&self) -> u64 {
        if self.epoch {
            EPOCH_BIT
        } else {
            0
        }
    }

    /// Whether `record`'s bytes are still in the old buffer of a compaction under way.
    fn in_old(&self, record: &Slot) -> bool {
        self.moving.is_some() && record.token_len & EPOCH_BIT != self.epoch_bit()
    }

    /// Copies the bytes of the record at `slot` from the old buffer into the fresh one (at most
    /// 256 bytes).
    fn move_owner(&mut self, slot: usize) {
        let Some(moving) = &self.moving else {
            return;
        };
        let record = self.slots[slot];
        let mut bytes = [0u8; 256];
        let old = owner_in(&moving.old, &record);
        let len = old.len();
        bytes[..len].copy_from_slice(old);
        let end = self.owners.len();
        let at = self.owners.push_run(&bytes[..len]);
        self.stale = self.stale.saturating_add((at - end) as u32);
        let epoch = self.epoch_bit();
        let record = &mut self.slots[slot];
        record.owner_at = at as u32;
        record.token_len = (record.token_len & !EPOCH_BIT) | epoch;
        #[cfg(test)]
        {
            self.owner_bytes_copied += len as u64;
        }
    }

    /// Moves owners' bytes into the fresh buffer, at most `budget` records looked at; once
    /// every record's are there, the old buffer is dropped (its pages, 256 KB each).
    fn owners_step(&mut self, budget: usize) {
        let mut spent = 0;
        while spent < budget {
            let Some(moving) = &mut self.moving else {
                return;
            };
            if moving.cursor >= self.slots.len() {
                self.moving = None;
                return;
            }
            let slot = moving.cursor;
            moving.cursor += 1;
            spent += 1;
            if self.in_old(&self.slots[slot]) {
                self.move_owner(slot);
            }
        }
    }

    fn hash(&self, owner: &[u8]) -> usize {
        #[cfg(test)]
        self.hashes.set(self.hashes.get() + 1);
        self.hasher.hash_one(owner) as usize
    }

    /// (place in the tables, slot) of `owner`: in the table, else in the old one while the
    /// table grows.
    /// Not found: `Err` of the owner's hash (`None` for a small set, which hashes nothing).
    fn find(&self, owner: &[u8]) -> Result<(Place, usize), Option<usize>> {
        if self.table.places() == 0 {
            // A small set has no table: its few records are looked at in turn, lengths first
            // (no owner hashed, no table allocated).
            return self
                .slots
                .iter()
                .position(|record| self.is_owner_of(record, owner))
                .map(|slot| (Place::NONE, slot))
                .ok_or(None);
        }
        let hash = self.hash(owner);
        let is =
            |entry: u32| self.is_owner_of(&self.slots[(entry as usize).wrapping_sub(1)], owner);
        let place = match self.table.find(hash, is) {
            Some(at) => Place { old: false, at },
            None => {
                let at = self.growth.as_ref().and_then(|g| g.old.find(hash, is));
                Place {
                    old: true,
                    at: at.ok_or(Some(hash))?,
                }
            }
        };
        Ok((place, (self.entry(place) as usize).wrapping_sub(1)))
    }

    /// [`Shared::find_slot`], or the owner's hash if it computed one.
    fn find_slot_hinted(&self, owner: &[u8]) -> Result<usize, Option<usize>> {
        let hint = self.last_found.get() as usize;
        if hint < self.slots.len() && self.is_owner_of(&self.slots[hint], owner) {
            return Ok(hint);
        }
        let (_, slot) = self.find(owner)?;
        self.last_found.set(slot as u32);
        Ok(slot)
    }

    /// The place in the tables that points at `slot` (whose owner is `owner`).
    fn table_place_of(&self, owner: &[u8], slot: usize) -> Option<Place> {
        if self.table.places() == 0 {
            return None;
        }
        let hash = self.hash(owner);
        let is = |entry: u32| (entry as usize).wrapping_sub(1) == slot;
        match self.table.find(hash, is) {
            Some(at) => Some(Place { old: false, at }),
            None => Some(Place {
                old: true,
                at: self.growth.as_ref()?.old.find(hash, is)?,
            }),
        }
    }

    fn entry(&self, place: Place) -> u32 {
        if place.old {
            self.growth.as_ref().map_or(EMPTY, |g| g.old.get(place.at))
        } else {
            self.table.get(place.at)
        }
    }

    fn place_mut(&mut self, place: Place, entry: u32) {
        if place.old {
            if let Some(growth) = &mut self.growth {
                growth.old.set(place.at, entry);
            }
        } else {
            self.table.set(place.at, entry);
        }
    }

    /// Empties a place (see [`Table::take_out`]).
    fn take_out(&mut self, place: Place) {
        if self.table.places() == 0 {
            return;
        }
        if place.old {
            if let Some(growth) = &mut self.growth {
                growth.old.bury(place.at);
            }
            return;
        }
        let mut table = std::mem::take(&mut self.table);
        table.take_out(place.at, |entry| {
            self.hash(self.owner_of_slot(&self.slots[(entry as usize).wrapping_sub(1)]))
        });
        self.table = table;
    }

    /// Puts `slot` (already in `slots`) into the table. When that would take it past 3/4 full,
    /// a table twice as large takes its place and the old one's owners move into it
    /// [`REHASH_STEP`] at a time, with each insert and removal ([`Shared::rehash_step`]), as
    /// Redis's dict does: no single insert rehashes every owner.
    fn table_insert(&mut self, owner: &[u8], slot: usize, hash: Option<usize>) {
        self.rehash_step(REHASH_STEP);
        self.owners_step(REHASH_STEP);
        if self.table.places() == 0 {
            // Up to [`SMALL`] holders need no table; the one past it builds it (O(SMALL)).
            if self.slots.len() > SMALL {
                self.rebuild_table(table_size_for(self.slots.len()));
            }
            return;
        }
        if self.slots.len() * 4 > self.table.places() * 3 {
            // Never while a growth is under way (each one ends long before), but if so: ended.
            self.rehash_step(usize::MAX);
            let table = Table::with_places(table_size_for(self.slots.len()));
            let old = std::mem::replace(&mut self.table, table);
            if old.entries() > 0 {
                self.growth = Some(Box::new(Growth { old, cursor: 0 }));
            }
        }
        let hash = hash.unwrap_or_else(|| self.hash(owner));
        self.table.put(hash, slot as u32 + 1);
    }

    /// Moves owners from the old table into the table, spending at most `budget` units (a
    /// place looked at, or an owner moved); once every old place is looked at, the old table is
    /// gone (its pages were freed as the cursor passed them).
    fn rehash_step(&mut self, budget: usize) {
        let mut spent = 0;
        while spent < budget {
            let Some(growth) = &mut self.growth else {
                return;
            };
            if growth.cursor == growth.old.places() {
                debug_assert_eq!(growth.old.entries(), 0);
                self.growth = None;
                return;
            }
            spent += 1;
            let at = growth.cursor;
            growth.cursor += 1;
            if !growth.old.holds(at) {
                continue;
            }
            // O(1): the place is marked, not emptied (no later entry shifts back).
            let entry = growth.old.get(at);
            growth.old.bury(at);
            let hash = self.hash(self.owner_of_slot(&self.slots[(entry as usize).wrapping_sub(1)]));
            self.table.put(hash, entry);
            #[cfg(test)]
            {
                self.rehashed += 1;
            }
        }
    }

    /// A fresh table of `size` places holding every slot (after any growth under way ended);
    /// returns the old one. O(H).
    fn rebuild_table(&mut self, size: usize) -> Table {
        self.rehash_step(usize::MAX);
        let mut table = Table::with_places(size);
        for slot in 0..self.slots.len() {
            let hash = self.hash(self.owner_of_slot(&self.slots[slot]));
            table.put(hash, slot as u32 + 1);
        }
        std::mem::replace(&mut self.table, table)
    }

    /// Copies the live owners' bytes into a fresh buffer; returns the old one.
    fn compact_owners(&mut self) -> Owners {
        self.owners_step(usize::MAX);
        let mut owners = Owners::default();
        let mut stale = 0;
        for record in self.slots.iter_mut() {
            let bytes = owner_in(&self.owners, record);
            let end = owners.len();
            let at = owners.push_run(bytes);
            stale += at - end;
            record.owner_at = at as u32;
            #[cfg(test)]
            {
                self.owner_bytes_copied += bytes.len() as u64;
            }
        }
        self.stale = stale as u32;
        std::mem::replace(&mut self.owners, owners)
    }

    // --- The treap ---------------------------------------------------------------------------

    fn size(&self, t: u32) -> u32 {
        if t == NIL {
            0
        } else {
            self.slots[t as usize].size
        }
    }

    fn permits_in(&self, t: u32) -> u32 {
        if t == NIL {
            0
        } else {
            self.slots[t as usize].permits_sum()
        }
    }

    /// The order of the treap: lease end, then token, then owner (owners are unique).
    fn order(&self, a: u32, b: u32) -> Ordering {
        let (x, y) = (&self.slots[a as usize], &self.slots[b as usize]);
        x.lease_end()
            .cmp(&y.lease_end())
            .then(x.token().cmp(&y.token()))
            .then_with(|| self.owner_of_slot(x).cmp(self.owner_of_slot(y)))
    }

    /// Whether node `a` goes above node `b` in the treap. Priorities are a bijection of the
    /// token under a secret seed, so distinct tokens never tie and nobody who does not know the
    /// seed can order them; holders with the same token (only crafted data has them) are told
    /// apart by a keyed hash of their owners, which are unique. Fixed while a node is in the
    /// treap (its token and owner do not change there).
    fn above(&self, a: u32, b: u32) -> bool {
        self.outranks(self.priority(a), a, b)
    }

    /// Node `a`'s priority (its token under the secret seed).
    fn priority(&self, a: u32) -> u64 {
        mix(self.slots[a as usize].token() ^ self.seed)
    }

    /// [`Shared::above`] with `a`'s priority known (computed once per insertion, not per level).
    fn outranks(&self, pa: u64, a: u32, b: u32) -> bool {
        let pb = self.priority(b);
        if pa != pb {
            return pa > pb;
        }
        let (x, y) = (&self.slots[a as usize], &self.slots[b as usize]);
        self.hasher.hash_one(self.owner_of_slot(x)) > self.hasher.hash_one(self.owner_of_slot(y))
    }

    /// Node `x` left `t`'s subtree (below it): the same in reverse, or recomputed from the
    /// children when `x` was its smallest token or its permits' sum saturated (not exact).
    fn lose(&mut self, t: u32, x: u32) {
        let permits = self.slots[x as usize].permits();
        let record = &self.slots[t as usize];
        if record.min == x || u64::from(record.permits_sum()) >= PERMITS_MASK {
            self.update(t);
            return;
        }
        let record = &mut self.slots[t as usize];
        record.size = record.size.saturating_sub(1);
        record.set_permits_sum(record.permits_sum().saturating_sub(permits));
    }

    /// Recomputes a node's size and smallest token from its children.
    fn update(&mut self, t: u32) {
        let Slot { left, right, .. } = self.slots[t as usize];
        let mut min = t;
        for child in [left, right] {
            if child != NIL {
                let candidate = self.slots[child as usize].min;
                if self.slots[candidate as usize].token() < self.slots[min as usize].token() {
                    min = candidate;
                }
            }
        }
        let size = 1 + self.size(left) + self.size(right);
        let permits = self
            .permits_in(left)
            .saturating_add(self.permits_in(right))
            .saturating_add(self.slots[t as usize].permits());
        let record = &mut self.slots[t as usize];
        record.size = size;
        record.min = min;
        record.set_permits_sum(permits);
    }

    /// Puts the detached node `x` into the treap.
    fn attach(&mut self, x: u32) {
        let record = &mut self.slots[x as usize];
        record.left = NIL;
        record.right = NIL;
        record.size = 1;
        record.min = x;
        record.set_permits_sum(record.permits());
        self.root = self.insert_node(self.root, x);
    }

    fn insert_node(&mut self, t: u32, x: u32) -> u32 {
        let record = &self.slots[x as usize];
        let joining = Joining {
            x,
            lease_end: record.lease_end(),
            token: record.token(),
            priority: mix(record.token() ^ self.seed),
            permits: record.permits(),
        };
        self.insert_below(t, &joining)
    }

    /// Inserts the node `joining` describes into the subtree `t`; returns its new root. Each
    /// level reads only its own node (and its smallest token's): `x`'s key, priority and
    /// permits are computed once.
    fn insert_below(&mut self, t: u32, joining: &Joining) -> u32 {
        let x = joining.x;
        if t == NIL {
            return x;
        }
        let record = self.slots[t as usize];
        let priority = mix(record.token() ^ self.seed);
        if joining.priority > priority
            || (joining.priority == priority && self.outranks(joining.priority, x, t))
        {
            let (left, right) = self.split(t, x);
            let record = &mut self.slots[x as usize];
            record.left = left;
            record.right = right;
            self.update(x);
            return x;
        }
        let before = match joining
            .lease_end
            .cmp(&record.lease_end())
            .then(joining.token.cmp(&record.token()))
        {
            // Same lease end and token (only crafted data): the owners decide.
            Ordering::Equal => self.order(x, t) == Ordering::Less,
            order => order == Ordering::Less,
        };
        let child = self.insert_below(if before { record.left } else { record.right }, joining);
        // `x` joined `t`'s subtree: its size, permits and smallest token take it in, without
        // reading `t`'s children (what [`Shared::update`] would recompute).
        let smaller = joining.token < self.slots[record.min as usize].token();
        let record = &mut self.slots[t as usize];
        if before {
            record.left = child;
        } else {
            record.right = child;
        }
        record.size = record.size.saturating_add(1);
        record.set_permits_sum(record.permits_sum().saturating_add(joining.permits));
        if smaller {
            record.min = x;
        }
        t
    }

    /// Splits the subtree `t` into the nodes before `x` and those after it (`x` is not in it).
    fn split(&mut self, t: u32, x: u32) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.order(t, x) == Ordering::Less {
            let (left, right) = self.split(self.slots[t as usize].right, x);
            self.slots[t as usize].right = left;
            self.update(t);
            (t, right)
        } else {
            let (left, right) = self.split(self.slots[t as usize].left, x);
            self.slots[t as usize].left = right;
            self.update(t);
            (left, t)
        }
    }

    /// Joins two subtrees, every node of `a` before every node of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.above(a, b) {
            let right = self.merge(self.slots[a as usize].right, b);
            self.slots[a as usize].right = right;
            self.update(a);
            a
        } else {
            let left = self.merge(a, self.slots[b as usize].left);
            self.slots[b as usize].left = left;
            self.update(b);
            b
        }
    }

    /// Takes node `x` out of the subtree `t`; returns the subtree's new root.
    fn remove_node(&mut self, t: u32, x: u32) -> u32 {
        self.remove_below(t, x).0
    }

    /// [`Shared::remove_node`], and whether `x` was found (only then do the nodes above it
    /// lose it from their size and permits).
    fn remove_below(&mut self, t: u32, x: u32) -> (u32, bool) {
        if t == NIL {
            return (NIL, false);
        }
        if t == x {
            let Slot { left, right, .. } = self.slots[x as usize];
            return (self.merge(left, right), true);
        }
        let found = if self.order(x, t) == Ordering::Less {
            let (child, found) = self.remove_below(self.slots[t as usize].left, x);
            self.slots[t as usize].left = child;
            found
        } else {
            let (child, found) = self.remove_below(self.slots[t as usize].right, x);
            self.slots[t as usize].right = child;
            found
        };
        if found {
            self.lose(t, x);
        }
        (t, found)
    }

    /// The node that was slot `old` is now slot `new` (its record moved): the links to it, on
    /// the path from the root, follow.
    fn relink(&mut self, old: u32, new: u32) {
        if self.root == old {
            self.root = new;
        }
        let mut t = self.root;
        while t != NIL {
            if self.slots[t as usize].min == old {
                self.slots[t as usize].min = new;
            }
            if t == new {
                return;
            }
            let before = self.order(new, t) == Ordering::Less;
            let record = &mut self.slots[t as usize];
            let child = if before {
                &mut record.left
            } else {
                &mut record.right
            };
            if *child == old {
                *child = new;
            }
            t = *child;
        }
    }
}

/// The table size for `n` slots: a power of two at most 3/4 full, at least 8.
fn table_size_for(n: usize) -> usize {
    (n * 4 / 3 + 1).next_power_of_two().max(8)
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A node joining the treap: what each level of its insertion compares and adds.
struct Joining {
    x: u32,
    lease_end: i64,
    token: u64,
    priority: u64,
    permits: u32,
}

/// A growth of a set's table under way: the old table, emptied into the new one a few owners
/// at a time; its places below `cursor` hold no entry any more.
#[derive(Clone, Debug)]
struct Growth {
    old: Table,
    cursor: usize,
}

/// A place in a set's tables: in the table, or in the old one while the table grows.
#[derive(Clone, Copy, Debug)]
struct Place {
    old: bool,
    at: usize,
}

impl Place {
    /// Where a small set's owner is: in no table (a set of at most [`SMALL`] has none).
    const NONE: Place = Place {
        old: false,
        at: usize::MAX,
    };
}

/// The owner of a record.
fn owner_in<'a>(owners: &'a Owners, record: &Slot) -> &'a [u8] {
    owners.run(record.owner_at as usize, record.owner_len())
}
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn h(token: u64, lease_end: i64) -> Holder {
        Holder::new(token, lease_end, 1_800_000_000_000 + token as i64)
    }

    #[test]
    fn holders_by_owner_by_lease_and_by_token() {
        let mut s = Shared::new(3);
        s.insert(b"a", h(10, 500)).unwrap();
        s.insert(b"b", h(11, 300)).unwrap();
        s.insert(b"c", h(12, 400)).unwrap();
        assert_eq!((s.len(), s.limit()), (3, 3));
        assert_eq!(s.first_lease_end(), Some((300, &b"b"[..])));
        assert_eq!(s.last_lease_end(), Some(500));
        assert_eq!(s.live(350), 2);
        assert_eq!(s.live(300), 3, "alive through its last millisecond");
        let order: Vec<&[u8]> = s.iter().map(|(o, _)| o).collect();
        assert_eq!(order, [&b"a"[..], b"b", b"c"]);
        // Renewing moves the lease, not the grant order.
        s.insert(b"b", h(11, 900)).unwrap();
        assert_eq!(s.first_lease_end(), Some((400, &b"c"[..])));
        assert_eq!(s.last_lease_end(), Some(900));
        assert_eq!(s.remove(b"c"), Some(h(12, 400)));
        assert_eq!(s.remove(b"c"), None);
        assert_eq!(s.first_lease_end(), Some((500, &b"a"[..])));
        assert_eq!(s.live_last_lease_end(901), None);
    }

    impl Shared {
        /// (size, permits, smallest token) of the subtree `t`, recomputed from its nodes;
        /// panics where a node's stored ones differ.
        fn aggregates(&self, t: u32) -> (u32, u32, u64) {
            if t == NIL {
                return (0, 0, u64::MAX);
            }
            let record = self.slots[t as usize];
            let (ls, lp, lm) = self.aggregates(record.left);
            let (rs, rp, rm) = self.aggregates(record.right);
            let size = 1 + ls + rs;
            let permits = lp + rp + record.permits();
            let min = record.token().min(lm).min(rm);
            assert_eq!(record.size, size, "size of {t}");
            assert_eq!(record.permits_sum(), permits, "permits of {t}");
            assert_eq!(self.slots[record.min as usize].token(), min, "min of {t}");
            (size, permits, min)
        }

        fn depth(&self, t: u32) -> usize {
            if t == NIL {
                return 0;
            }
            let Slot { left, right, .. } = self.slots[t as usize];
            1 + self.depth(left).max(self.depth(right))
        }
    }

    #[test]
    fn crafted_holders_cannot_unbalance_the_treap() {
        // All one token and one lease end, in owner order: once a chain 20,000 deep.
        let mut same = Shared::new(0);
        for i in 0..20_000u32 {
            same.insert(format!("{i:08}").as_bytes(), h(7, 1_000))
                .unwrap();
        }
        // Distinct tokens whose lease ends cancelled them out of the old priority.
        let mut crafted = Shared::new(0);
        for i in 1..=20_000u64 {
            let lease_end = ((i | 7 << 53).rotate_right(29)) as i64 & i64::MAX;
            crafted
                .insert(format!("{i:08}").as_bytes(), h(i, lease_end))
                .unwrap();
        }
        for s in [&same, &crafted] {
            let depth = s.depth(s.root);
            // A random treap of 20,000 nodes is about 30 deep; 100 leaves a wide margin.
            assert!(depth < 100, "depth {depth}");
        }
    }

    /// A set of a few holders (the common case) has no owner table: found by comparing owners,
    /// nothing hashed, nothing allocated for it. The holder past [`SMALL`] builds it; a tidy
    /// at half of that drops it.
    #[test]
    fn a_small_set_has_no_table() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("owner-{i}").into_bytes();
        for i in 0..SMALL as u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, 10)).unwrap();
        }
        assert_eq!((s.table.places(), s.table.bytes()), (0, 0));
        assert_eq!(s.hashes.get(), 0, "no owner hashed");
        assert_eq!(s.get(&owner(3)).map(|h| h.token), Some(4));
        assert_eq!(s.get(b"owner-"), None);
        s.insert(&owner(99), h(100, 10)).unwrap();
        assert_eq!(s.table.places(), table_size_for(SMALL + 1));
        for i in 0..SMALL as u32 {
            assert_eq!(s.get(&owner(i)).map(|h| h.token), Some(u64::from(i) + 1));
        }
        let gone = (SMALL - SMALL / 4 + 1) as u32;
        for i in 0..gone {
            s.remove(&owner(i)).unwrap();
            assert!(s.table.places() > 0 || s.len() <= SMALL / 4);
        }
        assert_eq!(s.len(), SMALL / 4);
        assert_eq!(s.table.places(), 0, "dropped by the tidy");
        for i in gone..SMALL as u32 {
            assert_eq!(s.get(&owner(i)).map(|h| h.token), Some(u64::from(i) + 1));
        }
        assert_eq!(s.remove(&owner(99)).map(|h| h.token), Some(100));
    }

    /// Nothing a set is given panics (a panic aborts the user's Redis): an empty owner is
    /// refused; a slot number past the records, which only a bug could make (here a table
    /// entry and a treap link corrupted by hand), reads as a detached record, and every
    /// operation still ends.
    #[test]
    fn nothing_panics_on_an_empty_owner_or_a_slot_past_the_records() {
        let mut s = Shared::new(0);
        assert_eq!(s.insert(b"", h(1, 10)), Err(Full));
        assert!(s.is_empty());
        let owner = |i: u32| format!("o{i}").into_bytes();
        for i in 0..40u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, 10 + i64::from(i)))
                .unwrap();
        }
        assert_eq!(s.slots[1_000_000].size, 0, "reads as detached");
        s.slots[1_000_000].count = 7;
        assert_eq!(s.slots[1_000_000].count, 0, "writes go to a spare record");
        // A table entry pointing past the records.
        let (place, _) = s.find(&owner(3)).expect("found");
        s.place_mut(place, 5_000);
        let _ = s.get(&owner(3));
        let _ = s.remove(&owner(3));
        let _ = s.insert(&owner(3), h(99, 10));
        // A treap link pointing past the records.
        let root = s.root as usize;
        s.slots[root].left = 7_000;
        let _ = (
            s.first_lease_end(),
            s.last_lease_end(),
            s.live(20),
            s.lapsed(20),
        );
        let _ = (
            s.first_alive(5, 0),
            s.live_permits(20),
            s.leases_covering(3),
        );
        let _ = s.insert(&owner(100), h(100, 5));
        let _ = s.remove(&owner(7));
        let _ = s.insert(&owner(8), h(9, 200));
        for i in 0..200u32 {
            let _ = s.remove(&owner(i));
        }
        drop(s.tidy());
    }

    #[test]
    fn equal_sets_are_the_same_holders_and_limit_in_any_order() {
        let mut a = Shared::new(2);
        a.insert(b"x", h(1, 10)).unwrap();
        a.insert(b"y", h(2, 20)).unwrap();
        let mut b = Shared::new(2);
        b.insert(b"y", h(2, 20)).unwrap();
        b.insert(b"x", h(1, 10)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, Shared::new(2));
        let mut other_limit = b.clone();
        other_limit.limit = 3;
        assert_ne!(a, other_limit);
        b.insert(b"y", h(2, 21)).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn a_big_set_stays_small() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("{i:036}").into_bytes();
        for i in 0..20_000u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, i64::from(i % 997)))
                .unwrap();
        }
        let per_holder = s.heap_size() / s.len() - 36;
        // The spec allows 72 bytes beyond the owner with permits and grant times: a 48-byte
        // record and the table's share.
        assert!(
            per_holder <= 64,
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

    /// Removals from a set too large to compact whole compact its owners' bytes before they
    /// pass four times what the holders need (the count makes 3/4 of them stale at no removal
    /// exactly, so only the "past" counts).
    #[test]
    fn a_large_set_keeps_its_owners_bytes_within_four_times_its_holders() {
        let mut s = Shared::new(0);
        let owner = |i: usize| format!("{i:036}").into_bytes();
        let n = 4 * QUICK_TIDY_HOLDERS + 101;
        for i in 0..n {
            s.insert(&owner(i), h(i as u64 + 1, 10)).unwrap();
        }
        for i in 0..n - QUICK_TIDY_HOLDERS - 1 {
            s.remove(&owner(i));
            assert!(
                s.owners.len() <= 4 * 36 * s.len(),
                "{} owner bytes for {} holders",
                s.owners.len(),
                s.len()
            );
        }
        assert!(s.len() > QUICK_TIDY_HOLDERS, "never compacted whole");
        assert!(
            s.owners.capacity() < 36 * n / 2,
            "the old bytes were given back"
        );
    }

    /// Compacting the owners' bytes of a large set is spread over operations like the table's
    /// growth: no single removal or insert copies more than [`REHASH_STEP`] owners. Before, the
    /// removal that left three quarters of them stale copied every live one (at 2,000,000
    /// holders, a `LOCK.DROP` of 8.7-14.6 ms of CPU on a replica).
    #[test]
    fn owners_bytes_are_compacted_a_few_owners_per_operation() {
        let owner = |i: usize| format!("o{i:07}").into_bytes();
        let n = 8 * QUICK_TIDY_HOLDERS;
        let mut s = Shared::new(0);
        for i in 0..n {
            s.insert(&owner(i), h(i as u64 + 1, 100)).unwrap();
        }
        let mut most = 0;
        let mut copies = 0;
        let mut next = n;
        let mut i = 0;
        while s.len() > QUICK_TIDY_HOLDERS + 1 {
            let before = s.owner_bytes_copied;
            // Removals, each tenth one with an insert: records move in both directions.
            assert_eq!(s.remove(&owner(i)).map(|h| h.token), Some(i as u64 + 1));
            i += 1;
            let mut copied = s.owner_bytes_copied - before;
            if i % 10 == 0 {
                let before = s.owner_bytes_copied;
                s.insert(&owner(next), h(next as u64 + 1, 100)).unwrap();
                next += 1;
                copied = copied.max(s.owner_bytes_copied - before);
            }
            copies += usize::from(copied > 0);
            most = most.max(copied);
        }
        assert!(copies > 0, "never compacted");
        assert!(
            most <= (REHASH_STEP as u64 + 1) * 8,
            "one operation copied {most} owners' bytes"
        );
        // Every holder is still found, by owner and in order.
        let alive: Vec<usize> = (i..next).collect();
        assert_eq!(s.len(), alive.len());
        for &i in &alive {
            assert_eq!(s.get(&owner(i)).map(|h| h.token), Some(i as u64 + 1), "{i}");
        }
        let listed: Vec<Vec<u8>> = s.holders().into_iter().map(|(o, _)| o.to_vec()).collect();
        assert_eq!(listed, alive.iter().map(|&i| owner(i)).collect::<Vec<_>>());
        assert!(
            s.owners.len() <= 4 * 8 * s.len() + (1 << 18),
            "{}",
            s.owners.len()
        );
    }

    #[test]
    fn lease_questions_cost_log_h_and_see_through_lapsed_leases() {
        let mut s = Shared::new(0);
        for i in 0..1000u32 {
            // 900 leases end at 100, the other 100 at 1000 + i.
            let end = if i < 900 { 100 } else { 1000 + i64::from(i) };
            s.insert(format!("o{i}").as_bytes(), h(u64::from(i) + 1, end))
                .unwrap();
        }
        assert_eq!(s.live(101), 100);
        assert_eq!(s.lapsed(101), 900);
        assert_eq!(s.live(100), 1000, "alive through its last millisecond");
        assert_eq!(s.next_lease_end(101), Some(1900));
        assert_eq!(s.next_lease_end(0), Some(100));
        assert_eq!(s.first_lease_end().map(|(end, _)| end), Some(100));
        assert_eq!(s.last_lease_end(), Some(1999));
        let first: Vec<u64> = s.first_alive(3, 101).iter().map(|(_, h)| h.token).collect();
        assert_eq!(
            first,
            [901, 902, 903],
            "the first live holders in token order"
        );
        assert_eq!(s.first_alive(0, 101).len(), 100);
        assert_eq!(s.get_alive(b"o0", 101), None);
        assert_eq!(s.get_alive(b"o950", 101).map(|h| h.token), Some(951));
    }

    #[test]
    fn heap_size_counts_every_record_owner_byte_and_table_slot() {
        let mut s = Shared::new(0);
        for i in 0..100u32 {
            s.insert(format!("{i:036}").as_bytes(), h(u64::from(i) + 1, 10))
                .unwrap();
        }
        assert!(
            s.heap_size() >= 100 * (std::mem::size_of::<Slot>() + 36 + 4),
            "{}",
            s.heap_size()
        );
    }

    #[test]
    fn removing_without_compacting_then_tidying() {
        let mut s = Shared::new(0);
        for i in 0..2000u32 {
            s.insert(format!("{i:036}").as_bytes(), h(u64::from(i) + 1, 10))
                .unwrap();
        }
        let before = s.heap_size();
        for i in 0..1990u32 {
            s.remove_keeping_room(format!("{i:036}").as_bytes())
                .unwrap();
        }
        assert_eq!(s.len(), 10);
        assert_eq!(s.heap_size(), before, "nothing compacted while removing");
        let garbage = s.tidy();
        assert!(s.heap_size() < before / 10, "{} after tidy", s.heap_size());
        assert!(
            garbage.bytes() > before / 2,
            "the old arrays are handed back to be freed elsewhere, not freed inline"
        );
        drop(garbage);
        let tokens: Vec<u64> = s.iter().map(|(_, h)| h.token).collect();
        assert_eq!(tokens, (1991..=2000).collect::<Vec<u64>>());
        // Emptied: every array is handed back.
        for i in 1990..2000u32 {
            s.remove_keeping_room(format!("{i:036}").as_bytes())
                .unwrap();
        }
        let size = s.heap_size();
        let garbage = s.tidy();
        assert!(
            garbage.bytes() > 0 && s.heap_size() < size,
            "an empty set hands its arrays back"
        );
        assert_eq!(
            garbage.bytes(),
            size - std::mem::size_of::<Shared>(),
            "the garbage's bytes are those of the arrays handed back (what decides where they \
             are freed)"
        );
    }

    /// A tidy copies only arrays much of which is unused: one removal from a thousand copies
    /// nothing (what keeps a removal amortized O(1)).
    #[test]
    fn a_tidy_with_little_unused_room_copies_nothing() {
        let mut s = Shared::new(0);
        for i in 0..1000u32 {
            s.insert(format!("{i:036}").as_bytes(), h(u64::from(i) + 1, 10))
                .unwrap();
        }
        s.remove(format!("{:036}", 0).as_bytes()).unwrap();
        let size = s.heap_size();
        let garbage = s.tidy();
        assert_eq!((garbage.bytes(), s.heap_size()), (0, size));
    }

    /// When the records shrink but the owners' bytes are mostly live (the removed owners were
    /// short), the owners are copied along with the records, and every old array is handed
    /// back to be freed elsewhere, none freed inline.
    #[test]
    fn a_tidy_hands_back_every_array_it_replaces() {
        let mut s = Shared::new(0);
        let long = |i: u32| format!("{i:0250}").into_bytes();
        for i in 0..1000u32 {
            s.insert(format!("s{i:04}").as_bytes(), h(u64::from(i) + 1, 10))
                .unwrap();
        }
        for i in 0..100u32 {
            s.insert(&long(i), h(u64::from(i) + 5000, 10)).unwrap();
        }
        for i in 0..1000u32 {
            s.remove_keeping_room(format!("s{i:04}").as_bytes())
                .unwrap();
        }
        let size = s.heap_size();
        let garbage = s.tidy();
        assert_eq!(garbage.bytes(), size - std::mem::size_of::<Shared>());
        assert!(s.heap_size() < size / 2);
        let owners: Vec<Vec<u8>> = s.iter().map(|(o, _)| o.to_vec()).collect();
        assert_eq!(owners, (0..100).map(long).collect::<Vec<_>>());
    }

    /// The owners' table grows only when it would pass 3/4 full, to twice its size, and no
    /// insert or removal moves more than [`REHASH_STEP`] owners into the new table: the growth
    /// is spread over the operations after it (incremental rehash), every owner found in one
    /// table or the other meanwhile, and a growth ends long before the next one is due.
    #[test]
    fn the_table_grows_a_few_owners_per_operation() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("{i:08}").into_bytes();
        let (mut growths, mut most, mut most_hashes) = (0, 0, 0);
        for i in 0..200_000u32 {
            let (places, rehashed, hashes) = (s.table.places(), s.rehashed, s.hashes.get());
            s.insert(&owner(i), h(u64::from(i) + 1, 10)).unwrap();
            // Its own hash (looked up, then put) and one per owner moved: moving one out of the
            // old table looks at no other (it used to shift back the rest of its run, hashing
            // each: O(run) per move, milliseconds at 2M holders).
            most_hashes = most_hashes.max(s.hashes.get() - hashes);
            if s.table.places() != places {
                growths += 1;
                let first = table_size_for(SMALL + 1);
                assert_eq!(
                    s.table.places(),
                    if places == 0 { first } else { 2 * places }
                );
            }
            most = most.max(s.rehashed - rehashed);
            if i % 7 == 0 {
                // A removal moves its share too, and finds what it removes in either table.
                let (rehashed, gone) = (s.rehashed, owner(i / 2));
                if s.get(&gone).is_some() {
                    assert!(s.remove_keeping_room(&gone).is_some());
                    most = most.max(s.rehashed - rehashed);
                }
            }
        }
        assert!(growths <= 17, "{growths} growths");
        assert!(
            most as usize <= REHASH_STEP,
            "{most} owners moved by one operation"
        );
        assert!(
            most_hashes as usize <= REHASH_STEP + 2,
            "{most_hashes} owners hashed by one insert"
        );
        assert!(
            s.rehashed > 100_000,
            "the growths happened by moves: {}",
            s.rehashed
        );
        // Every holder is found, wherever it is.
        let mut found = 0;
        for i in 0..200_000u32 {
            found += usize::from(s.get(&owner(i)).is_some());
        }
        assert_eq!(found, s.len());
    }

    /// The records and the owners' bytes grow by a sixteenth at a time (little unused room),
    /// in pages: no insert copies more than one page, however large the set.
    #[test]
    fn arrays_grow_by_a_sixteenth_copying_at_most_a_page() {
        let mut s = Shared::new(0);
        let (mut most_slots, mut most_owners) = (0, 0);
        for i in 0..200_000u32 {
            let before = (s.slots.copied(), s.owners.copied());
            s.insert(format!("{i:08}").as_bytes(), h(u64::from(i) + 1, 10))
                .unwrap();
            most_slots = most_slots.max(s.slots.copied() - before.0);
            most_owners = most_owners.max(s.owners.copied() - before.1);
            assert!(s.slots.capacity() <= s.len() + s.len() / 16 + 4);
        }
        assert!(
            most_slots <= Slots::PAGE as u64,
            "{most_slots} records copied at once"
        );
        assert!(
            most_owners <= Owners::PAGE as u64,
            "{most_owners} bytes copied at once"
        );
        // Amortized: at most 16 copies of each record.
        assert!(s.slots.copied() <= 16 * 200_000, "{}", s.slots.copied());
    }

    /// While the table grows, a set's memory stays within the contract's 72 bytes per holder
    /// beyond its owner (both tables, the records and the pages counted).
    #[test]
    fn a_growing_table_stays_within_the_memory_bound() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("{i:036}").into_bytes();
        let mut worst = 0;
        for i in 0..100_000u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, 10)).unwrap();
            if i > 20_000 && (i % 97 == 0 || s.growth.is_some()) {
                let per = (s.heap_size() - s.owners.len()) / s.len();
                worst = worst.max(per);
            }
        }
        assert!(worst <= 72, "{worst} bytes per holder beyond its owner");
    }

    /// Owners are spread over the table by their hash: finding one probes a few places, not a
    /// run as long as the set (`LOCK.HOLDERS ... OWNER` is O(1), a release O(log H)).
    #[test]
    fn finding_an_owner_probes_a_few_places() {
        let mut s = Shared::new(0);
        let owner = |i: u32| format!("{i:08}").into_bytes();
        for i in 0..20_000u32 {
            s.insert(&owner(i), h(u64::from(i) + 1, 10)).unwrap();
        }
        s.rehash_step(usize::MAX);
        let mask = s.table.places() - 1;
        let longest = (0..20_000u32)
            .map(|i| {
                let (place, _) = s.find(&owner(i)).expect("found");
                place.at.wrapping_sub(s.hash(&owner(i))) & mask
            })
            .max();
        // Linear probing at 61 % load: a few places on average, tens at worst.
        assert!(longest < Some(1_000), "{longest:?} places probed");
    }

    #[test]
    fn owners_never_pass_what_an_offset_addresses() {
        let room = 1 << 20;
        let mut s = Shared::with_owner_room(0, room);
        let owner = |i: usize| {
            let mut o = format!("{i:08}").into_bytes();
            o.resize(256, b'x');
            o
        };
        let fits = room / 256;
        for i in 0..fits {
            s.insert(&owner(i), h(i as u64 + 1, 10)).unwrap();
        }
        assert_eq!(
            s.insert(&owner(fits), h(1, 10)),
            Err(Full),
            "refused, not wrapped"
        );
        assert_eq!(s.len(), fits);
        // Every owner is still found where it was put.
        for i in [0, fits / 2, fits - 1] {
            assert_eq!(s.get(&owner(i)).map(|h| h.token), Some(i as u64 + 1));
        }
        // Room made by a removal is used again (compacted when needed).
        s.remove(&owner(0));
        assert_eq!(s.insert(&owner(fits), h(9, 10)), Ok(true));
        assert_eq!(s.get(&owner(fits)).map(|h| h.token), Some(9));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u64, i64, u32),
        Remove(u8),
    }

    proptest! {
        /// The set against a plain map of owner -> holder.
        #[test]
        fn matches_a_plain_map(ops in proptest::collection::vec(
            prop_oneof![
                (0u8..40, 1u64..1000, 0i64..50, 1u32..4)
                    .prop_map(|(o, t, l, p)| Op::Insert(o, t, l, p)),
                (0u8..40).prop_map(Op::Remove),
            ],
            1..300,
        )) {
            let mut s = Shared::new(0);
            let mut map: BTreeMap<Vec<u8>, Holder> = BTreeMap::new();
            let owner = |o: u8| vec![b'o'; usize::from(o % 7) + 1].into_iter().chain([o]).collect::<Vec<u8>>();
            for op in ops {
                match op {
                    Op::Insert(o, t, l, p) => {
                        let holder = Holder { permits: p, ..h(t, l) };
                        s.insert(&owner(o), holder).unwrap();
                        map.insert(owner(o), holder);
                    }
                    Op::Remove(o) => {
                        prop_assert_eq!(s.remove(&owner(o)), map.remove(&owner(o)));
                    }
                }
                prop_assert_eq!(s.len(), map.len());
                // Every node's size, permits and smallest token are its subtree's (kept up
                // incrementally on the way down, recomputed only where they must be).
                prop_assert_eq!(s.aggregates(s.root).0 as usize, map.len());
                for (o, holder) in &map {
                    prop_assert_eq!(s.get(o), Some(*holder));
                }
                let first = map.values().map(|h| (h.lease_end, h.token)).min();
                prop_assert_eq!(
                    s.first_lease_end().map(|(end, o)| (end, map[o].token)),
                    first
                );
                prop_assert_eq!(s.last_lease_end(), map.values().map(|h| h.lease_end).max());
                for now in [0, 10, 25, 49] {
                    prop_assert_eq!(s.live(now), map.values().filter(|h| h.lease_end >= now).count());
                    prop_assert_eq!(
                        s.live_permits(now),
                        map.values().filter(|h| h.lease_end >= now).map(|h| u64::from(h.permits)).sum::<u64>()
                    );
                    prop_assert_eq!(
                        s.next_lease_end(now),
                        map.values().map(|h| h.lease_end).filter(|e| *e >= now).min()
                    );
                    let mut alive: Vec<u64> =
                        map.values().filter(|h| h.lease_end >= now).map(|h| h.token).collect();
                    alive.sort_unstable();
                    for n in [1, 3, 1000] {
                        let first: Vec<u64> =
                            s.first_alive(n, now).iter().map(|(_, h)| h.token).collect();
                        prop_assert_eq!(&first[..], &alive[..n.min(alive.len())]);
                    }
                }
                let mut tokens: Vec<u64> = map.values().map(|h| h.token).collect();
                tokens.sort_unstable();
                let listed: Vec<u64> = s.iter().map(|(_, h)| h.token).collect();
                prop_assert_eq!(listed, tokens);
            }
        }
    }
}
