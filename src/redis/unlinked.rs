//! Why a lock went away behind the engine's back. Redis calls the data type's `unlink2` callback
//! when it removes a lock value (DEL, expiry, eviction, an overwrite, RENAME...), with the value
//! but not the cause; the keyspace notification that follows names the key and the cause but no
//! longer has the value. [`Unlinked`] keeps what `unlink2` saw of the last few locks until the
//! notification that explains each arrives.
//!
//! Neither callback says who ran the command: keyspace notifications run on a fake client on
//! every server version, so journal entries of these reasons have no client info.

use std::ffi::CStr;
use std::os::raw::c_int;

use crate::lock::{EndedHold, Reason};

/// How many unlinked locks wait for their notification at most. One command unlinks at most
/// two before notifying (RENAME over another lock: the destination, then the source).
const RECENT: usize = 4;

/// A lock value Redis unlinked.
#[derive(Debug)]
pub struct Gone {
    pub db: c_int,
    pub name: Vec<u8>,
    /// Holds it had.
    pub holds: u64,
    /// Those of them described for the journal (at most what the engine asked for).
    pub described: Vec<EndedHold>,
}

/// The locks unlinked last, at most [`RECENT`], at most one per key.
#[derive(Debug, Default)]
pub struct Unlinked {
    recent: Vec<Gone>,
}

impl Unlinked {
    /// Redis unlinked a lock.
    pub fn push(&mut self, gone: Gone) {
        self.recent
            .retain(|g| !(g.db == gone.db && g.name == gone.name));
        if self.recent.len() >= RECENT {
            self.recent.remove(0);
        }
        self.recent.push(gone);
    }

    /// The lock unlinked at (db, name), which a notification names now. A notification that
    /// names none of them means the command that unlinked them has moved on: they are
    /// forgotten (their cause is unknown, so nothing is said of them).
    pub fn take(&mut self, db: c_int, name: &[u8]) -> Option<Gone> {
        if self.recent.is_empty() {
            return None;
        }
        match self
            .recent
            .iter()
            .position(|g| g.db == db && g.name == name)
        {
            Some(i) => Some(self.recent.remove(i)),
            None => {
                self.recent.clear();
                None
            }
        }
    }

    /// Forgets them all (the module deleted or replaced a lock itself: no notification follows).
    pub fn clear(&mut self) {
        if !self.recent.is_empty() {
            self.recent.clear();
        }
    }
}

/// The reason a keyspace notification gives for the lock just unlinked at its key.
pub fn reason(event: &CStr) -> Reason {
    match event.to_bytes() {
        b"expired" => Reason::Expired,
        b"evicted" => Reason::Evicted,
        // The hold lives on at the destination.
        b"rename_from" | b"move_from" => Reason::Moved,
        // RESTORE ... REPLACE, COPY ... REPLACE onto a lock.
        b"restore" | b"copy_to" => Reason::Restored,
        // DEL, UNLINK, GETDEL, MIGRATE (the source's copy; the server says no more), EXPIRE in
        // the past; and every overwrite: RENAME onto a lock, SET, any other type's write.
        _ => Reason::Deleted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone(name: &[u8]) -> Gone {
        Gone {
            db: 0,
            name: name.to_vec(),
            holds: 1,
            described: Vec::new(),
        }
    }

    #[test]
    fn a_rename_over_a_lock_explains_both() {
        let mut u = Unlinked::default();
        u.push(gone(b"dst"));
        u.push(gone(b"src"));
        assert_eq!(u.take(0, b"src").map(|g| g.name), Some(b"src".to_vec()));
        assert_eq!(u.take(0, b"dst").map(|g| g.name), Some(b"dst".to_vec()));
        assert!(u.take(0, b"dst").is_none());
    }

    #[test]
    fn a_notification_of_another_key_forgets_what_was_not_explained() {
        let mut u = Unlinked::default();
        u.push(gone(b"a"));
        assert!(u.take(0, b"b").is_none());
        assert!(
            u.take(0, b"a").is_none(),
            "a stale unlink never explains a later event"
        );
        assert!(u.take(1, b"a").is_none());
    }

    #[test]
    fn bounded_and_one_per_key() {
        let mut u = Unlinked::default();
        for i in 0..10u8 {
            u.push(gone(&[i]));
            u.push(gone(&[i]));
        }
        assert_eq!(u.recent.len(), RECENT);
        assert!(u.take(0, &[9]).is_some());
    }

    #[test]
    fn reasons_of_events() {
        for (event, reason) in [
            (c"expired", Reason::Expired),
            (c"evicted", Reason::Evicted),
            (c"del", Reason::Deleted),
            (c"set", Reason::Deleted),
            (c"rename_to", Reason::Deleted),
            (c"rename_from", Reason::Moved),
            (c"move_from", Reason::Moved),
            (c"restore", Reason::Restored),
            (c"copy_to", Reason::Restored),
        ] {
            assert_eq!(super::reason(event), reason, "{event:?}");
        }
    }
}
