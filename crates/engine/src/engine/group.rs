//! Several keys at once: `LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MRENEW`. All or nothing, one
//! token for the holds a group takes together.

use super::*;

impl<T: Handles> Engine<T> {
    /// `LOCK.MACQUIRE numkeys key... owner ttl_ms`: exclusive holds on every key or on none. A
    /// key the owner holds already counts as granted (a new lease, its own token); the new holds
    /// share one new token. Replies each key's token in argument order; nil if any key is taken
    /// or has waiters (nothing changes); the first refusal if any key can never be granted.
    /// O(numkeys).
    pub fn macquire<H: Host<T>>(
        &mut self,
        host: &mut H,
        keys: &mut [H::Key],
        owner: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        if !self.grace.allows_ttl(ttl_ms) {
            return Reply::Error(Refusal::TtlAboveGrace.into());
        }
        let request = Request {
            owner,
            ttl_ms,
            mode: Mode::Exclusive,
        };
        let mut decisions = Vec::with_capacity(keys.len());
        let mut taken = false;
        for key in keys.iter() {
            match self.decide_take(host, key, &request, Kind::Acquire) {
                Take::Refuse(refusal) => return Reply::Error(refusal.into()),
                Take::Wait => taken = true,
                decision => decisions.push(decision),
            }
        }
        if taken {
            self.stats.contended += 1;
            for key in keys.iter() {
                self.watch.contended(key.id(), || host.now_ms());
            }
            return Reply::Nil;
        }
        let now = host.now_ms();
        let lease_end = expiry(now, ttl_ms);
        // The group's one new token, issued only when a key needs a new hold (0: none does, and
        // nothing reads it).
        let group_token = if decisions.contains(&Take::Grant) {
            if let Some(refusal) = self.no_new_holds(host) {
                return Reply::Error(refusal.into());
            }
            match self.issue(now) {
                Ok(token) => token,
                Err(refusal) => return Reply::Error(refusal.into()),
            }
        } else {
            0
        };
        let mut tokens = Vec::with_capacity(keys.len());
        for (key, decision) in keys.iter_mut().zip(decisions) {
            let token = if let Take::Refresh { count } = decision {
                let token = refresh(key, owner, Some(count), lease_end);
                self.waiters.confirm(token);
                token
            } else {
                // A grant: refusals and waits returned above, before anything changed.
                self.put_exclusive(key, owner, group_token, now, lease_end);
                self.stats.acquired += 1;
                group_token
            };
            key.notify(Event::Acquired);
            self.expiry_moved(host, key);
            self.note_lapsed(host, key);
            tokens.push(token);
        }
        Reply::Tokens(tokens)
    }

    /// `LOCK.MRELEASE numkeys key... owner [FROM c]`: `LOCK.RELEASE` of each key; replies how
    /// many the owner held (with `FROM c`: on how many the step applied or was a repeat). A key
    /// whose count is neither c nor c - 1 makes the whole command an error, before anything
    /// changes.
    pub fn mrelease<H: Host<T>>(
        &mut self,
        host: &mut H,
        keys: &mut [H::Key],
        owner: &[u8],
        from: Option<u32>,
    ) -> Reply {
        if from.is_some() {
            for key in keys.iter() {
                let seen = Seen::of(key, owner, || host.now_ms());
                if let Release::Refuse(refusal) = decide::release(seen, owner, from) {
                    return Reply::Error(refusal.into());
                }
            }
        }
        // One command: its keys share the lapsed leases it may end.
        self.lapse_left = MAKE_ROOM_INLINE;
        let mut held = 0;
        for key in keys.iter_mut() {
            if self.release_step(host, key, owner, from) != Reply::Nil {
                held += 1;
            }
        }
        Reply::Integer(held)
    }

    /// `LOCK.MRENEW numkeys key... owner ttl_ms`: `LOCK.RENEW` of each key; replies how many the
    /// owner held.
    pub fn mrenew<H: Host<T>>(
        &mut self,
        host: &mut H,
        keys: &mut [H::Key],
        owner: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        self.lapse_left = MAKE_ROOM_INLINE;
        if !self.grace.allows_ttl(ttl_ms) {
            return Reply::Error(Refusal::TtlAboveGrace.into());
        }
        let mut held = 0;
        for key in keys.iter_mut() {
            if self.renew(host, key, owner, ttl_ms) != Reply::Nil {
                held += 1;
            }
        }
        Reply::Integer(held)
    }
}
