//! What commands do to the holds of one key, as plain functions over a [`Key`]: refresh a
//! hold's lease or count, end a hold, describe one for the journal, and when the next hold of a
//! key ends.

use super::bounds;
use super::host::Key;
use super::packed::{Hold, LockRef};
use super::shared::Holder;
use super::watch::EndedHold;

/// The owner's count goes down to `count` (its lease unchanged); returns its token.
pub fn set_count<K: Key>(key: &mut K, owner: &[u8], count: u32) -> u64 {
    match key.lock() {
        Some(LockRef::Exclusive(hold)) => {
            let token = hold.token();
            // The effect carries the key's expiry, which a user may have set past what an
            // effect can say: the key's is cut to it too, so the replica's equals it.
            let at = key
                .expires_at()
                .filter(|at| *at != bounds::expiry(*at))
                .map(bounds::expiry);
            key.update(count, at);
            token
        }
        Some(LockRef::Shared(shared)) => {
            let limit = shared.limit();
            let Some(held) = shared.get(owner) else {
                return 0;
            };
            key.put_holder(limit, owner, Holder { count, ..held });
            held.token
        }
        None => 0,
    }
}

/// Sets `owner`'s hold to end at `lease_end` (and its count to `count`, if given); returns its
/// token (0 if it holds nothing).
pub fn refresh<K: Key>(key: &mut K, owner: &[u8], count: Option<u32>, lease_end: i64) -> u64 {
    match key.lock() {
        Some(LockRef::Exclusive(hold)) => {
            let (token, held) = (hold.token(), hold.count());
            key.update(count.unwrap_or(held), Some(lease_end));
            token
        }
        Some(LockRef::Shared(shared)) => {
            let limit = shared.limit();
            let Some(held) = shared.get(owner) else {
                return 0;
            };
            let count = count.unwrap_or(held.count);
            key.put_holder(
                limit,
                owner,
                Holder {
                    count,
                    lease_end,
                    ..held
                },
            );
            held.token
        }
        None => 0,
    }
}

/// Ends `owner`'s hold (the whole lock if exclusive); returns what it was.
pub fn end_hold<K: Key>(key: &mut K, owner: &[u8]) -> Option<EndedHold> {
    let ended = match key.lock()? {
        LockRef::Exclusive(hold) => {
            let ended = ended_hold(hold);
            key.remove();
            return Some(ended);
        }
        LockRef::Shared(shared) => {
            let h = shared.get(owner)?;
            ended_holder(owner, h)
        }
    };
    key.remove_holder(owner);
    Some(ended)
}

/// Ends `owner`'s hold at `key` as [`end_hold`] does, for its owner's own release: its token
/// and grant time, without copying the owner (an allocation `LOCK.RELEASE` made for nothing).
pub fn end_own_hold<K: Key>(key: &mut K, owner: &[u8]) -> Option<(u64, i64)> {
    let ended = match key.lock()? {
        LockRef::Exclusive(hold) => {
            let ended = (hold.token(), hold.granted_at());
            key.remove();
            return Some(ended);
        }
        LockRef::Shared(shared) => {
            let h = shared.get(owner)?;
            (h.token, h.granted_at)
        }
    };
    key.remove_holder(owner);
    Some(ended)
}

/// An exclusive hold, as the journal describes it.
pub fn ended_hold(hold: &Hold) -> EndedHold {
    EndedHold {
        owner: hold.owner().into(),
        token: hold.token(),
        granted_at: hold.granted_at(),
    }
}

/// A shared holder, as the journal describes it.
pub fn ended_holder(owner: &[u8], holder: Holder) -> EndedHold {
    EndedHold {
        owner: owner.into(),
        token: holder.token,
        granted_at: holder.granted_at,
    }
}

/// When a hold of the key next ends: the lock's expiry, or a shared key's next live lease end
/// (each one may make room for the head; the lapsed one is then removed by a prune job).
pub fn next_deadline<K: Key>(key: &K, now: i64) -> Option<i64> {
    match key.lock()? {
        LockRef::Exclusive(_) => key.expires_at(),
        LockRef::Shared(shared) => shared.next_lease_end(now),
    }
}

pub fn expiry(now: i64, ttl_ms: u64) -> i64 {
    now.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}
