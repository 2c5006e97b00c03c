//! What the engine reports without changing anything: `LOCK.INFO`, `LOCK.HOLDERS`,
//! `LOCK.WAITERS`.

use super::*;

impl<T: Handles> Engine<T> {
    /// `LOCK.INFO`: the hold (or how many share the key), the remaining lifetime, how many wait
    /// for it, its mode and limit; nil if free. O(log H).
    pub fn info<H: Host<T>>(&self, host: &H, key: &H::Key) -> Reply {
        let now = host.now_ms();
        let ttl = |end: Option<i64>| end.map_or(-1, |end| end.saturating_sub(now).max(0));
        let info = match key.lock() {
            None => return Reply::Nil,
            Some(LockRef::Exclusive(hold)) => Info {
                owner: Some(hold.owner().into()),
                token: Some(hold.token()),
                count: Some(hold.count()),
                ttl_ms: ttl(key.expires_at()),
                waiters: self.waiters.queued(key.id()),
                mode: Mode::Exclusive,
                holders: 1,
                permits_free: 0,
            },
            Some(LockRef::Shared(shared)) => {
                // Lapsed leases are gone for every command, even before the engine ends them.
                let Some(last) = shared.live_last_lease_end(now) else {
                    return Reply::Nil;
                };
                Info {
                    owner: None,
                    token: None,
                    count: None,
                    ttl_ms: ttl(Some(last)),
                    waiters: self.waiters.queued(key.id()),
                    mode: Mode::shared(shared.limit()),
                    holders: shared.live(now),
                    permits_free: match shared.limit() {
                        0 => -1,
                        limit => i64::from(limit).saturating_sub(shared.live_permits(now) as i64),
                    },
                }
            }
        };
        Reply::Info(info)
    }

    /// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`: the live holds in grant order (at most
    /// `count`, 0: all), or only `owner`'s; nil if the key has no lock.
    pub fn holders<H: Host<T>>(
        &self,
        host: &H,
        key: &H::Key,
        owner: Option<&[u8]>,
        count: usize,
    ) -> Reply {
        let now = host.now_ms();
        let ttl = |end: Option<i64>| end.map_or(-1, |end| end.saturating_sub(now).max(0));
        let entry = |owner: &[u8], h: Holder| HolderInfo {
            owner: owner.into(),
            token: h.token,
            count: h.count,
            ttl_ms: ttl(Some(h.lease_end)),
            permits: h.permits,
        };
        let list = match key.lock() {
            None => return Reply::Nil,
            Some(LockRef::Exclusive(hold)) => {
                if owner.is_some_and(|o| !hold.is_held_by(o)) {
                    Vec::new()
                } else {
                    vec![HolderInfo {
                        owner: hold.owner().into(),
                        token: hold.token(),
                        count: hold.count(),
                        ttl_ms: ttl(key.expires_at()),
                        permits: 1,
                    }]
                }
            }
            Some(LockRef::Shared(shared)) => {
                if shared.live_last_lease_end(now).is_none() {
                    return Reply::Nil;
                }
                match owner {
                    Some(owner) => shared
                        .get_alive(owner, now)
                        .map(|h| entry(owner, h))
                        .into_iter()
                        .collect(),
                    None => shared
                        .first_alive(count, now)
                        .into_iter()
                        .map(|(o, h)| entry(o, h))
                        .collect(),
                }
            }
        };
        Reply::Holders(list)
    }

    /// `LOCK.WAITERS key [COUNT n]`: the first `count` waiters of `key` (0: all), in queue
    /// order. O(min(count, N)).
    pub fn waiters_of<H: Host<T>>(&self, host: &H, key: KeyRef<'_>, count: usize) -> Reply {
        let (now, now_us) = (host.now_ms(), host.now_us());
        let count = if count == 0 { usize::MAX } else { count };
        let list = self
            .waiters
            .iter(key)
            .take(count)
            .map(|(_, w)| WaiterInfo {
                owner: w.owner.clone(),
                mode: w.mode,
                client: w.connection,
                waited_ms: now_us.saturating_sub(w.since_us) / 1000,
                timeout_ms: w
                    .times_out_at
                    .map_or(-1, |at| at.saturating_sub(now).max(0)),
                ttl_ms: w.ttl_ms,
            })
            .collect();
        Reply::Waiters(list)
    }
}
