//! The holders of a shared key (a read lock, or a counting semaphore when it has a limit).
//!
//! Every holder is a full hold of its own: owner, fencing token, reentrancy count and lease end.
//! Looking a holder up by owner, adding, renewing or removing one, and finding the next lease to
//! end are O(log H) at most; listing in grant order walks the tokens in order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// The holders of one shared key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shared {
    limit: u32,
    by_owner: HashMap<Box<[u8]>, Holder>,
    /// (lease end, token): the next lease to end first.
    by_lease: BTreeSet<(i64, u64)>,
    /// Token -> owner: grant order.
    by_token: BTreeMap<u64, Box<[u8]>>,
}

impl Shared {
    /// No holders yet, with `limit` (0: none).
    pub fn new(limit: u32) -> Shared {
        Shared {
            limit,
            ..Shared::default()
        }
    }

    /// The limit (0: none).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Holders, lapsed or not.
    pub fn len(&self) -> usize {
        self.by_owner.len()
    }

    /// Whether nobody holds the key.
    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }

    /// `owner`'s hold, lapsed or not.
    pub fn get(&self, owner: &[u8]) -> Option<&Holder> {
        self.by_owner.get(owner)
    }

    /// Adds `owner`'s hold, or replaces it.
    pub fn insert(&mut self, owner: &[u8], holder: Holder) {
        if let Some(old) = self.by_owner.insert(owner.into(), holder) {
            self.by_lease.remove(&(old.lease_end, old.token));
            self.by_token.remove(&old.token);
        }
        self.by_lease.insert((holder.lease_end, holder.token));
        self.by_token.insert(holder.token, owner.into());
    }

    /// Removes `owner`'s hold.
    pub fn remove(&mut self, owner: &[u8]) -> Option<Holder> {
        let old = self.by_owner.remove(owner)?;
        self.by_lease.remove(&(old.lease_end, old.token));
        self.by_token.remove(&old.token);
        Some(old)
    }

    /// The owner of the hold with `token`.
    pub fn owner_of(&self, token: u64) -> Option<&[u8]> {
        self.by_token.get(&token).map(|owner| &owner[..])
    }

    /// The lease that ends first: (its last millisecond, the owner).
    pub fn first_lease_end(&self) -> Option<(i64, &[u8])> {
        let &(end, token) = self.by_lease.first()?;
        self.by_token.get(&token).map(|owner| (end, &owner[..]))
    }

    /// The latest lease end (what the key's TTL is set to).
    pub fn last_lease_end(&self) -> Option<i64> {
        self.by_lease.last().map(|(end, _)| *end)
    }

    /// The latest end among leases alive at `now`.
    pub fn live_last_lease_end(&self, now: i64) -> Option<i64> {
        self.last_lease_end().filter(|end| *end >= now)
    }

    /// Holders whose lease is alive at `now`.
    pub fn live(&self, now: i64) -> usize {
        // Lapsed leases are the first ones in lease order: count them from there.
        let lapsed = self.by_lease.range(..(now, 0)).count();
        self.len() - lapsed
    }

    /// Holders in grant order (ascending token), lapsed or not.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Holder)> {
        self.by_token
            .values()
            .filter_map(|owner| self.by_owner.get(owner).map(|holder| (&owner[..], holder)))
    }

    /// Bytes of memory this set takes (for `MEMORY USAGE`), an estimate.
    pub fn heap_size(&self) -> usize {
        let owners: usize = self.by_owner.keys().map(|o| o.len()).sum();
        // Each holder: its owner twice, a hash entry and two B-tree entries.
        std::mem::size_of::<Shared>() + 2 * owners + self.len() * 96
    }
}

#[cfg(test)]
mod tests {
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
    }
}
