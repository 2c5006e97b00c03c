//! Why a lock went away behind the engine's back. Redis calls the data type's `unlink2` callback
//! when it removes a lock value (DEL, expiry, eviction, an overwrite, RENAME...), with the value
//! but not the cause; the keyspace notification that follows names the key and the cause but no
//! longer has the value. [`Unlinked`] keeps what `unlink2` saw of the last few locks until the
//! notification that explains each arrives.
//!
//! Neither callback says who ran the command: keyspace notifications run on a fake client on
//! every server version, so journal entries of these reasons have no client info.
//!
//! Nor does either say which command it was, and `MIGRATE` notifies its deletion of the source
//! key as `del`, like `DEL`. What tells them apart is that `MIGRATE` serialized the value (the
//! data type's `rdb_save`, on the main thread) earlier in the same command: [`Serialized`] keeps
//! the values the running command serialized, and a `del` of one of them is a move. A command is
//! known by the server's cached time of its start (`RedisModule_CachedMicroseconds`, Redis 7.2+
//! and Valkey; Redis 7.0 has none, and says `deleted`) and, since two commands may start in the
//! same microsecond, by `total_commands_processed`, which every command, nested ones included
//! (`MULTI`, scripts), raises when it ends.

use std::collections::HashSet;
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
    /// `total_commands_processed` of the running command, if that command serialized the value
    /// before Redis unlinked it (see [`Serialized`]).
    pub serialized_by: Option<i64>,
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

    /// The lock unlinked at (db, name), which a notification of `event` names now. A
    /// notification that names none of them means the command that unlinked them has moved on:
    /// they are forgotten (their cause is unknown, so nothing is said of them). Except
    /// `rename_from`: `RENAME plain lock` unlinks the lock, then notifies `rename_from` for the
    /// source and `rename_to` for the lock.
    pub fn take(&mut self, db: c_int, name: &[u8], event: &CStr) -> Option<Gone> {
        if self.recent.is_empty() {
            return None;
        }
        match self
            .recent
            .iter()
            .position(|g| g.db == db && g.name == name)
        {
            Some(i) => Some(self.recent.remove(i)),
            None if event == c"rename_from" => None,
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

/// The lock values the running command serialized (`DUMP`, `MIGRATE`, `DEBUG OBJECT`), by
/// address: Redis hands the same address to `unlink2`. Every one of them, so that a `MIGRATE
/// ... KEYS` of any number of locks says `moved` for each: memory O(values of that command),
/// given back at the next command. A save or a load (`SAVE`, `DEBUG RELOAD`, `BGSAVE`'s child,
/// a full sync) serializes every lock and deletes none: the host does not push its values
/// (the server's persistence event says when one runs), so it costs no memory here.
#[derive(Debug, Default)]
pub struct Serialized {
    /// The command that serialized them: its cached start time (µs) and the server's
    /// `total_commands_processed` while it ran.
    command: Option<(i64, i64)>,
    values: HashSet<usize>,
    /// `total_commands_processed` as read after the last serialization, with the start time of
    /// the command it was read in: one `INFO` read for all the deletions that follow (a
    /// `MIGRATE` serializes every key, then deletes them).
    now: Option<(i64, i64)>,
}

impl Serialized {
    /// The command that started at `started_us` serialized `value`; `processed` reads
    /// `total_commands_processed` (once per command, not per value).
    pub fn push(&mut self, started_us: i64, value: usize, processed: impl FnOnce() -> Option<i64>) {
        if self.command.is_none_or(|(at, _)| at != started_us) {
            self.forget();
            self.command = processed().map(|n| (started_us, n));
        }
        // A serialization may start a command nested in the same one (`EXEC`, a script): the
        // count must be read again before a deletion is compared with it.
        self.now = None;
        if self.command.is_some() {
            self.values.insert(value);
        }
    }

    /// If a command that started at `started_us` serialized `value`: its
    /// `total_commands_processed`, which the caller compares with [`Serialized::processed`].
    pub fn by(&self, started_us: i64, value: usize) -> Option<i64> {
        let (at, processed) = self.command?;
        (at == started_us && self.values.contains(&value)).then_some(processed)
    }

    /// `total_commands_processed` of the command that started at `started_us` and runs now:
    /// read by `read` once after each serialization, then remembered (every deletion of one
    /// `MIGRATE` asks, and the count cannot change before the next command, which serializes
    /// again or is a command that started at another time).
    pub fn processed(
        &mut self,
        started_us: i64,
        read: impl FnOnce() -> Option<i64>,
    ) -> Option<i64> {
        match self.now {
            Some((at, n)) if at == started_us => Some(n),
            _ => {
                let n = read()?;
                self.now = Some((started_us, n));
                Some(n)
            }
        }
    }

    /// Gives the values back unless the command that started at `started_us` serialized them
    /// (the server's cron: no command runs).
    pub fn forget_unless(&mut self, started_us: Option<i64>) {
        if self.command.is_some_and(|(at, _)| Some(at) != started_us) {
            self.forget();
        }
    }

    fn forget(&mut self) {
        self.command = None;
        self.now = None;
        // A large set is given back, not kept for the next command.
        if self.values.capacity() > 1024 {
            self.values = HashSet::new();
        } else {
            self.values.clear();
        }
    }
}

/// The reason a keyspace notification gives for the lock just unlinked at its key;
/// `carried_off`: the hold lives on elsewhere though Redis says `del` (the running command
/// serialized the value before it unlinked it: `MIGRATE`; or an atomic slot migration handed
/// its slot over).
pub fn reason_for(event: &CStr, carried_off: bool) -> Reason {
    if carried_off && event == c"del" {
        return Reason::Moved;
    }
    reason(event)
}

/// The reason a keyspace notification gives for the lock just unlinked at its key.
pub fn reason(event: &CStr) -> Reason {
    match event.to_bytes() {
        b"expired" => Reason::Expired,
        b"evicted" => Reason::Evicted,
        // The hold lives on at the destination.
        // `key_trimmed`: Redis 8.4+ deleting a key of a slot its atomic slot migration handed
        // over (see `migration`).
        b"rename_from" | b"move_from" | b"key_trimmed" => Reason::Moved,
        // RESTORE ... REPLACE, COPY ... REPLACE onto a lock.
        b"restore" | b"copy_to" => Reason::Restored,
        // DEL, UNLINK, GETDEL, MIGRATE where the server cannot tell it (Redis 7.0), EXPIRE in
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
            serialized_by: None,
        }
    }

    #[test]
    fn a_rename_over_a_lock_explains_both() {
        let mut u = Unlinked::default();
        u.push(gone(b"dst"));
        u.push(gone(b"src"));
        assert_eq!(
            u.take(0, b"src", c"rename_from").map(|g| g.name),
            Some(b"src".to_vec())
        );
        assert_eq!(
            u.take(0, b"dst", c"rename_to").map(|g| g.name),
            Some(b"dst".to_vec())
        );
        assert!(u.take(0, b"dst", c"rename_to").is_none());
    }

    #[test]
    fn a_notification_of_another_key_forgets_what_was_not_explained() {
        let mut u = Unlinked::default();
        u.push(gone(b"a"));
        assert!(u.take(0, b"b", c"del").is_none());
        assert!(
            u.take(0, b"a", c"del").is_none(),
            "a stale unlink never explains a later event"
        );
        assert!(u.take(1, b"a", c"del").is_none());
    }

    #[test]
    fn a_rename_of_another_type_onto_a_lock_explains_the_lock() {
        let mut u = Unlinked::default();
        u.push(gone(b"lock"));
        assert!(u.take(0, b"plain", c"rename_from").is_none());
        assert_eq!(
            u.take(0, b"lock", c"rename_to").map(|g| g.name),
            Some(b"lock".to_vec())
        );
    }

    #[test]
    fn bounded_and_one_per_key() {
        let mut u = Unlinked::default();
        for i in 0..10u8 {
            u.push(gone(&[i]));
            u.push(gone(&[i]));
        }
        assert_eq!(u.recent.len(), RECENT);
        assert!(u.take(0, &[9], c"del").is_some());
    }

    #[test]
    fn a_del_of_a_value_its_command_serialized_is_a_move() {
        let mut s = Serialized::default();
        let mut reads = 0;
        for value in [10, 20] {
            s.push(1_000, value, || {
                reads += 1;
                Some(7)
            });
        }
        assert_eq!(reads, 1, "one read of the counter per command");
        assert_eq!(s.by(1_000, 20), Some(7));
        assert_eq!(s.by(1_000, 30), None, "another value");
        assert_eq!(s.by(1_001, 10), None, "a later command");
        s.push(1_001, 30, || Some(8));
        assert_eq!(
            s.by(1_001, 10),
            None,
            "a new command forgets the old values"
        );
        assert_eq!(reason_for(c"del", true), Reason::Moved);
        assert_eq!(reason_for(c"del", false), Reason::Deleted);
        assert_eq!(reason_for(c"expired", true), Reason::Expired);
    }

    #[test]
    fn serializations_need_the_counter_and_are_all_kept_until_the_next_command() {
        let mut s = Serialized::default();
        s.push(5, 1, || None);
        assert_eq!(s.by(5, 1), None, "without the counter nothing is known");
        for value in 0..5000 {
            s.push(6, value, || Some(1));
        }
        assert_eq!(s.by(6, 4999), Some(1), "every value of the command");
        s.forget_unless(Some(6));
        assert_eq!(s.by(6, 0), Some(1), "the command still runs");
        s.forget_unless(Some(7));
        assert_eq!(s.by(6, 0), None, "given back after it");
        assert_eq!(s.values.capacity(), 0);
    }

    #[test]
    fn the_counter_is_read_once_per_run_of_deletions() {
        let mut s = Serialized::default();
        let mut reads = 0;
        let mut read = |n| {
            reads += 1;
            Some(n)
        };
        for value in 0..1024 {
            s.push(1_000, value, || Some(7));
        }
        for _ in 0..1024 {
            assert_eq!(s.processed(1_000, || read(7)), Some(7));
        }
        // The same EXEC, a later command in it: serializes, then a deletion reads again.
        s.push(1_000, 5000, || Some(0));
        assert_eq!(s.processed(1_000, || read(9)), Some(9));
        assert_eq!(s.processed(1_001, || read(10)), Some(10), "another command");
        assert_eq!(reads, 3);
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
