//! Lapsed leases of shared keys: they count for nothing from the moment they lapse, and are
//! removed later in bounded slices (or by their owner's next command), each told to the journal
//! and the statistics.

use super::*;

impl<T: Handles> Engine<T> {
    /// The caller's own shared lease lapsed: it is removed now, in its command, so that the
    /// caller who learns its hold is gone (a nil from `LOCK.RENEW` or `LOCK.RELEASE`) finds why
    /// in `LOCK.HISTORY` at once.
    pub(super) fn end_own_lapsed<K: Key>(&mut self, key: &mut K, owner: &[u8], now: i64) {
        let lapsed = key
            .shared()
            .and_then(|s| s.get(owner))
            .is_some_and(|h| !h.alive_at(now));
        if !lapsed {
            return;
        }
        self.journal_one_lapsed(key, owner);
        key.end_lapsed(owner);
        if key.lock().is_some() {
            self.lapsed_ended(key, 1);
        } else {
            self.stats.expired += 1;
        }
    }

    /// The journal learns of the lapsed leases of a shared key about to be replaced whole (as
    /// many as it and the hold distribution can use).
    pub(super) fn journal_lapsed<K: Key>(&mut self, key: &K) {
        if !self.watch.wants(Reason::Expired) {
            return;
        }
        let Some(shared) = key.shared() else {
            return;
        };
        let at = self.watch.at(key.id(), 0, self.waiters.queued(key.id()));
        // Bounded: the command that replaces them did not name them.
        for (owner, holder) in shared.sample(self.watch.mass_end(&[Reason::Expired])) {
            let at = at.when(holder.lease_end);
            self.watch
                .lost(at, &ended_holder(owner, holder), Reason::Expired, "");
        }
    }

    /// The journal learns of one lapsed lease about to be removed.
    pub(super) fn journal_one_lapsed<K: Key>(&mut self, key: &K, owner: &[u8]) {
        if !self.watch.wants(Reason::Expired) {
            return;
        }
        let Some(holder) = key.shared().and_then(|s| s.get(owner)) else {
            return;
        };
        let waiters = self.waiters.queued(key.id());
        let at = self.watch.at(key.id(), holder.lease_end, waiters);
        self.watch
            .lost(at, &ended_holder(owner, holder), Reason::Expired, "");
    }

    /// `holds` lapsed leases were ended by the engine: counted, and signalled while the key
    /// lives on.
    pub(super) fn lapsed_ended<K: Key>(&mut self, key: &mut K, holds: u64) {
        if holds > 0 {
            self.stats.expired += holds;
            key.notify(Event::Expired);
        }
    }

    /// Removes a slice of a shared key's lapsed leases (they count for nothing already), at
    /// most [`PRUNE_SLICE`] and what the turn's budget has left; queues itself again for the
    /// rest, and compacts the set once none is left (if at most [`QUICK_TIDY_HOLDERS`] remain).
    pub(super) fn prune<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        let mut key = match host.open(id) {
            Ok(key) => key,
            Err(error) => {
                self.unavailable(id, error);
                return;
            }
        };
        if self.lapse_left == 0 {
            // This turn ended its share of lapsed leases: the next one, at once, goes on.
            self.schedule.next_turn(Job::Prune(id.clone()));
            return;
        }
        let now = host.now_ms();
        let slice = PRUNE_SLICE
            .min(self.lapse_left)
            .min(TURN_BUDGET.saturating_sub(self.work))
            .max(1);
        let first_lapsed = |key: &H::Key| {
            key.shared()
                .and_then(|s| s.first_lease_end())
                .filter(|(end, _)| *end < now)
                .map(|(_, owner)| owner.to_vec())
        };
        let mut ended = 0;
        while ended < slice {
            let Some(owner) = first_lapsed(&key) else {
                break;
            };
            self.journal_one_lapsed(&key, &owner);
            key.end_lapsed(&owner);
            ended += 1;
        }
        self.work += ended;
        self.lapse_left = self.lapse_left.saturating_sub(ended);
        if key.lock().is_some() {
            self.lapsed_ended(&mut key, ended as u64);
        } else {
            self.stats.expired += ended as u64;
        }
        if first_lapsed(&key).is_some() {
            self.schedule.push(host, Job::Prune(id.clone()));
        } else {
            if key.shared().is_some_and(|s| s.len() <= QUICK_TIDY_HOLDERS) {
                // Compacting costs what is left; a large set compacts with a later removal
                // instead.
                key.tidy();
            }
            self.arm_lapse(host, &key);
        }
        if ended > 0 && self.waiters.queued(id.as_ref()) > 0 {
            // A head waiting for room may fit now (or after the next slices).
            self.schedule.push(host, Job::Serve(id.clone()));
        }
    }

    /// Arms the key's lapse timer for the millisecond after its first lease ends (unless one
    /// is armed as early), so that lapsed leases are removed whether or not a command touches
    /// the key.
    ///
    /// None is armed on a master while every lease ends together (one holder, the common case)
    /// and the key's expiry is that end: Redis ends the key then, as it ends an exclusive lock,
    /// and a waiter's deadline timer serves the queue. The timer cost a shared acquire and its
    /// release about 4,000 instructions of 25,600 (callgrind, issue 31). A replica arms it as
    /// before (a `PERSIST` it was sent while its master's cap was put off would otherwise keep
    /// the key for good after a promotion), and so does a key without that expiry (loaded, or
    /// tampered with until the `Leases` job caps it). Every path that adds a later lease runs
    /// `note_lapsed` after it, which arms the timer for the earlier one.
    fn arm_lapse<H: Host<T>>(&mut self, host: &mut H, key: &H::Key) {
        let Some(shared) = key.shared() else {
            return;
        };
        let Some((end, _)) = shared.first_lease_end() else {
            return;
        };
        if shared.last_lease_end() == Some(end)
            && key.expires_at() == Some(end)
            && matches!(host.state(), State::Master)
        {
            return;
        }
        let fires_at = end.saturating_add(1);
        let id = key.id();
        let armed = self.lapses.get(&id.db).and_then(|keys| keys.get(id.name));
        if armed.is_some_and(|(at, _)| *at <= fires_at) {
            return;
        }
        let id = id.to_id();
        let timer = self.schedule.start(host, fires_at, Due::Lapse(id.clone()));
        let old = self
            .lapses
            .entry(id.db)
            .or_default()
            .insert(id.name, (fires_at, timer));
        if let Some((_, old)) = old {
            self.schedule.stop(host, old);
        }
    }

    /// Stops `key`'s lapse timer, if it has one.
    pub(super) fn disarm_lapse<H: Host<T>>(&mut self, host: &mut H, key: KeyRef<'_>) {
        let Some(keys) = self.lapses.get_mut(&key.db) else {
            return;
        };
        let Some((_, timer)) = keys.remove(key.name) else {
            return;
        };
        if keys.is_empty() {
            self.lapses.remove(&key.db);
        }
        self.schedule.stop(host, timer);
    }

    /// Whether `key` has a lapse timer armed.
    pub(super) fn lapse_armed(&self, key: KeyRef<'_>) -> bool {
        self.lapses
            .get(&key.db)
            .is_some_and(|keys| keys.contains_key(key.name))
    }

    /// Queues the removal of a shared key's lapsed leases if it has any, else arms its lapse
    /// timer for when its first lease ends.
    pub(super) fn note_lapsed<H: Host<T>>(&mut self, host: &mut H, key: &H::Key) {
        let Some(shared) = key.shared() else {
            // Its last holder is gone: so is its timer (else one would stay per key released
            // until its lease would have ended).
            self.disarm_lapse(host, key.id());
            return;
        };
        if shared
            .first_lease_end()
            .is_some_and(|(end, _)| end < host.now_ms())
        {
            self.schedule.push(host, Job::Prune(key.id().to_id()));
        } else {
            self.arm_lapse(host, key);
        }
    }

    /// Caps a shared key's TTL at its latest lease end (a shorter TTL stays: it ends every hold),
    /// and arms its lapse timer.
    pub(super) fn cap_to_leases<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        let mut key = match host.open(id) {
            Ok(key) => key,
            Err(error) => {
                self.disarm_lapse(host, id.as_ref());
                self.unavailable(id, error);
                return;
            }
        };
        let Some(last) = key.shared().and_then(|s| s.last_lease_end()) else {
            self.disarm_lapse(host, id.as_ref());
            return;
        };
        if key.expires_at().is_none_or(|expires_at| expires_at > last) {
            key.cap_expiry(last);
        }
        // A value that arrived (RESTORE, COPY, RENAME, MOVE) has its lapsed leases removed too.
        self.note_lapsed(host, &key);
    }
}

impl<T: Handles> Engine<T> {
    /// A load (an RDB, a full sync, `DEBUG RELOAD`) replaced the dataset; `shared` names the
    /// shared keys it brought. Their lapse timers are armed by the schedule, a slice a turn, as
    /// soon as this server is a master (a replica keeps the list for its promotion). What was
    /// remembered of the old dataset goes with it. (No loop here: the list was built while the
    /// keys were loaded, and is taken whole.)
    pub fn loaded<H: Host<T>>(&mut self, host: &mut H, shared: Vec<KeyId>) {
        self.unarmed = VecDeque::from(shared);
        self.unarmed_seen = HashSet::new();
        self.rearm_unarmed(host);
    }

    /// Queues [`Job::Rearm`] if keys wait for their lapse timer.
    pub(super) fn rearm_unarmed<H: Host<T>>(&mut self, host: &mut H) {
        if !self.unarmed.is_empty() {
            self.schedule.push(host, Job::Rearm);
        }
    }

    /// [`Job::Rearm`] on a master: a slice of the waiting keys (at most what the turn's budget
    /// has left, one unit each) get their lapse timer, or their lapsed leases' removal queued;
    /// queues itself again for the rest.
    pub(super) fn rearm_slice<H: Host<T>>(&mut self, host: &mut H) {
        let slice = TURN_BUDGET.saturating_sub(self.work).max(1);
        // Keys of a slot still being imported wait for the import's end (not for the next
        // turn: that would spin while the import goes on).
        let mut importing = Vec::new();
        for _ in 0..slice {
            let Some(id) = self.unarmed.pop_front() else {
                break;
            };
            self.unarmed_seen.remove(&id);
            self.work += 1;
            match host.open(&id) {
                Ok(key) => self.note_lapsed(host, &key),
                Err(OpenError::Unavailable) => importing.push(id),
                Err(_) => {}
            }
        }
        let more = !self.unarmed.is_empty();
        for id in importing {
            self.unarmed_on_replica(id);
        }
        if more {
            self.schedule.push(host, Job::Rearm);
        } else if self.unarmed.is_empty() && self.unarmed.capacity() > 1024 {
            self.unarmed = VecDeque::new();
            self.unarmed_seen = HashSet::new();
        }
    }

    /// A key the engine could not open for its lease work: one of a slot being imported
    /// (`OpenError::Unavailable`) is remembered, and armed once the import completes
    /// ([`Engine::slots_imported`]).
    fn unavailable(&mut self, id: &KeyId, error: OpenError) {
        if error == OpenError::Unavailable {
            self.unarmed_on_replica(id.clone());
        }
    }

    /// An import of slots completed: the shared keys that arrived while they were being
    /// imported (the engine could not touch them then) get their lapse timers, a slice a turn.
    pub fn slots_imported<H: Host<T>>(&mut self, host: &mut H) {
        self.rearm_unarmed(host);
    }

    /// A replica's lapse timer fired (or a command found a lapsed lease): its master ends the
    /// lease and sends the effect; the key is remembered in case this server is promoted first.
    /// (Also a key of a slot being imported, until the import completes.)
    pub(super) fn unarmed_on_replica(&mut self, id: KeyId) {
        if self.unarmed_seen.insert(id.clone()) {
            self.unarmed.push_back(id);
        }
    }

    /// [`Job::Leases`] on a replica (its master caps the TTL): a key gone or no longer shared
    /// drops its lapse timer (read only).
    pub(super) fn leases_on_replica<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        let shared = host.open(id).is_ok_and(|key| key.shared().is_some());
        if !shared {
            self.disarm_lapse(host, id.as_ref());
        }
    }
}
