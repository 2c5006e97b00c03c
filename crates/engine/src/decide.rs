//! What each lock command decides, for exclusive and shared holds alike: pure functions of what
//! the request finds at its key ([`Seen`]) and in the key's queue ([`Queued`]), table-tested
//! below. The engine applies the decisions (tokens, leases, effects, the queue).
//!
//! A lapsed shared lease is not seen at all: it counts for nothing from the millisecond after
//! its end, whether or not it has been removed yet. So no decision waits for a removal, and
//! removals can run in bounded slices after the fact.

use super::errors::Refusal;
use super::host::Key;
use super::packed::{Hold, LockRef};
use super::shared::{Holder, Mode};

/// What a request finds at a key, lapsed leases left out.
#[derive(Clone, Copy, Debug)]
pub enum Seen<'a> {
    /// No lock (no value, or a shared value whose every lease has lapsed).
    Free,
    /// A live exclusive hold (an exclusive lock lives exactly as long as its key).
    Exclusive(&'a Hold),
    /// A shared key with live holders.
    Shared(SharedSeen),
}

/// A shared key as one owner's request sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSeen {
    /// The key's limit (0: none).
    pub limit: u32,
    /// Holders whose lease is alive (at least 1).
    pub live: usize,
    /// The permits those holders hold (`live` without a limit: a reader holds one).
    pub live_permits: u64,
    /// The requesting owner's live hold, if it has one.
    pub mine: Option<Holder>,
}

impl<'a> Seen<'a> {
    /// What `owner` finds at `key` at time `now` (read only for a shared key: O(log H)).
    pub fn of<K: Key>(key: &'a K, owner: &[u8], now: impl FnOnce() -> i64) -> Seen<'a> {
        Seen::of_lock(key.lock(), owner, now)
    }

    /// [`Seen::of`] a key whose value the caller has read already.
    pub fn of_lock(lock: Option<LockRef<'a>>, owner: &[u8], now: impl FnOnce() -> i64) -> Seen<'a> {
        match lock {
            None => Seen::Free,
            Some(LockRef::Exclusive(hold)) => Seen::Exclusive(hold),
            Some(LockRef::Shared(shared)) => {
                let now = now();
                match shared.live(now) {
                    0 => Seen::Free,
                    live => Seen::Shared(SharedSeen {
                        limit: shared.limit(),
                        live,
                        live_permits: match shared.limit() {
                            0 => live as u64,
                            _ => shared.live_permits(now),
                        },
                        mine: shared.get_alive(owner, now),
                    }),
                }
            }
        }
    }

    /// The count of `owner`'s live hold, if it has one.
    fn held_by(&self, owner: &[u8]) -> Option<u32> {
        match self {
            Seen::Exclusive(hold) if hold.is_held_by(owner) => Some(hold.count()),
            Seen::Shared(SharedSeen { mine: Some(h), .. }) => Some(h.count),
            _ => None,
        }
    }

    /// Whether `owner` holds the key in the other mode than `mode`.
    fn held_in_other_mode(&self, owner: &[u8], mode: Mode) -> bool {
        match (self, mode) {
            (Seen::Exclusive(hold), Mode::Shared { .. }) => hold.is_held_by(owner),
            (Seen::Shared(seen), Mode::Exclusive) => seen.mine.is_some(),
            _ => false,
        }
    }

    /// Whether the requesting owner holds the key shared with other permits than `mode` asks
    /// for.
    fn held_with_other_permits(&self, mode: Mode) -> bool {
        match (self, mode) {
            (Seen::Shared(SharedSeen { mine: Some(h), .. }), Mode::Shared { permits, .. }) => {
                h.permits != permits
            }
            _ => false,
        }
    }

    /// Whether a new hold in `mode` fits beside what is held now (the queue aside).
    fn room_for(&self, mode: Mode) -> bool {
        match (self, mode) {
            (Seen::Free, _) => true,
            (Seen::Shared(seen), Mode::Shared { permits, .. }) => {
                seen.limit == 0 || seen.live_permits + u64::from(permits) <= u64::from(seen.limit)
            }
            _ => false,
        }
    }
}

/// What a request finds in the key's queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// Someone waits for the key.
    pub any: bool,
    /// The limit every queued shared request asked for, if one is queued.
    pub shared_limit: Option<u32>,
}

/// Which acquiring command asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `LOCK.ACQUIRE` and `LOCK.WAIT`: replies the token; idempotent for the holder.
    Acquire,
    /// `LOCK.REENTER`: replies the count; the holder's count goes up. With the count the
    /// caller expects before the step (`FROM c`), a repeat of the step changes nothing.
    Reenter(Option<u32>),
}

/// What an acquiring request (`LOCK.ACQUIRE`, `LOCK.REENTER`, `LOCK.WAIT`) comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// It can never be granted as asked: an error, and nothing changes.
    Refuse(Refusal),
    /// The owner's own hold: same token, a new lease, this count.
    Refresh { count: u32 },
    /// A new hold for the owner.
    Grant,
    /// Not now: nil, or the queue.
    Wait,
    /// A repeat of a step already applied (`LOCK.REENTER ... FROM c` on a hold at `c + 1`):
    /// this count, and nothing changes.
    Repeat { count: u32 },
    /// `LOCK.REENTER ... FROM c` with c >= 1 on a hold the owner no longer has: nil, nothing
    /// changes (never a fresh hold: the caller's outer hold is gone).
    Gone,
}

/// `LOCK.ACQUIRE`, `LOCK.REENTER` or `LOCK.WAIT` by `owner` in `mode`. Mode is checked before
/// limit, limit before permits; a holder's own re-acquire or re-entry ignores the queue and the
/// limit; nobody else barges past a queue.
pub fn take(seen: Seen<'_>, queued: Queued, owner: &[u8], mode: Mode, kind: Kind) -> Take {
    if seen.held_in_other_mode(owner, mode) {
        return Take::Refuse(Refusal::OtherMode);
    }
    if let Mode::Shared { limit, .. } = mode {
        let key_limit = match seen {
            Seen::Shared(shared) => Some(shared.limit),
            _ => queued.shared_limit,
        };
        if let Some(key_limit) = key_limit.filter(|l| *l != limit) {
            return Take::Refuse(Refusal::OtherLimit(key_limit));
        }
    }
    if seen.held_with_other_permits(mode) {
        return Take::Refuse(Refusal::OtherPermits);
    }
    match (seen.held_by(owner), kind) {
        (Some(count), Kind::Acquire) => return Take::Refresh { count },
        (Some(count), Kind::Reenter(None)) => return reenter(count),
        (Some(held), Kind::Reenter(Some(from))) => {
            return if held == from {
                reenter(held)
            } else if from.checked_add(1) == Some(held) {
                Take::Repeat { count: held }
            } else {
                Take::Refuse(Refusal::OtherCount { held, from })
            };
        }
        (None, Kind::Reenter(Some(from))) if from >= 1 => return Take::Gone,
        (None, _) => {}
    }
    if !queued.any && seen.room_for(mode) {
        Take::Grant
    } else {
        Take::Wait
    }
}

/// [`take`] for an exclusive request at an exclusive hold, where the queue cannot matter
/// (nothing is granted at a hold): another owner's request is answered without building the
/// whole view of the key, the common refusal's fast path.
pub fn take_at_hold(hold: &Hold, owner: &[u8], kind: Kind) -> Take {
    if !hold.is_held_by(owner) {
        return match kind {
            Kind::Reenter(Some(from)) if from >= 1 => Take::Gone,
            _ => Take::Wait,
        };
    }
    take(
        Seen::Exclusive(hold),
        Queued::default(),
        owner,
        Mode::Exclusive,
        kind,
    )
}

/// One level more on a hold at `count`.
fn reenter(count: u32) -> Take {
    match count.checked_add(1) {
        Some(count) => Take::Refresh { count },
        None => Take::Refuse(Refusal::ReentrancyLimit),
    }
}

/// What `LOCK.RELEASE` comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// The owner holds nothing here: nil, nothing changes.
    NotHeld,
    /// One level less; the hold stays with this count.
    Decrement { count: u32 },
    /// The hold ends and the queue moves on.
    End,
    /// A repeat of a step already applied (`FROM c` on a hold at `c - 1`): this count, and
    /// nothing changes.
    Repeat { count: u32 },
    /// The hold's count is neither `from` nor `from - 1`: an error, nothing changes.
    Refuse(Refusal),
}

/// `LOCK.RELEASE` by `owner`; `from` the count the caller expects before the step (`FROM c`,
/// c >= 1), if it says.
pub fn release(seen: Seen<'_>, owner: &[u8], from: Option<u32>) -> Release {
    let step = |held: u32| match held {
        0 | 1 => Release::End,
        count => Release::Decrement { count: count - 1 },
    };
    match (seen.held_by(owner), from) {
        (None, _) => Release::NotHeld,
        (Some(held), None) => step(held),
        (Some(held), Some(from)) if held == from => step(held),
        (Some(held), Some(from)) if held >= 1 && held.checked_add(1) == Some(from) => {
            Release::Repeat { count: held }
        }
        (Some(held), Some(from)) => Release::Refuse(Refusal::OtherCount { held, from }),
    }
}

/// `LOCK.RENEW` by `owner`: whether it holds the key (then its lease is reset); a hold that is
/// gone is never revived.
pub fn renew(seen: Seen<'_>, owner: &[u8]) -> bool {
    seen.held_by(owner).is_some()
}

/// What `LOCK.DOWNGRADE` comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Downgrade {
    /// The owner holds nothing here: nil.
    NotHeld,
    /// The owner's exclusive hold becomes shared.
    Go,
    /// The owner holds the key shared already: its token (safe to retry).
    Already { token: u64 },
    /// The owner holds a semaphore, which a downgrade never makes.
    Refuse(Refusal),
}

/// `LOCK.DOWNGRADE` by `owner`, with `queued` waiting. A downgrade makes a read lock (no
/// limit): a queued semaphore request has set the key's limit already, and refuses it.
pub fn downgrade(seen: Seen<'_>, queued: Queued, owner: &[u8]) -> Downgrade {
    match seen {
        Seen::Exclusive(hold) if hold.is_held_by(owner) => match queued.shared_limit {
            Some(limit) if limit != 0 => Downgrade::Refuse(Refusal::OtherLimit(limit)),
            _ => Downgrade::Go,
        },
        Seen::Shared(SharedSeen {
            limit: 0,
            mine: Some(h),
            ..
        }) => Downgrade::Already { token: h.token },
        Seen::Shared(SharedSeen {
            limit,
            mine: Some(_),
            ..
        }) => Downgrade::Refuse(Refusal::OtherLimit(limit)),
        _ => Downgrade::NotHeld,
    }
}

/// What the grant pass does with a queued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// It cannot be granted yet, and blocks everyone behind it.
    Stop,
    /// A new hold for it.
    Grant,
    /// Its owner holds the key already: a re-acquire, answered with the existing token.
    Reacquire,
    /// It can never be granted as asked: it gets the error.
    Fail(Refusal),
}

/// The grant pass's decision for a queued request of `owner` in `mode` (the head of the queue;
/// also asked of every waiter when a value arrives, to fail those it makes impossible).
pub fn next_for(seen: Seen<'_>, owner: &[u8], mode: Mode) -> Next {
    if seen.held_in_other_mode(owner, mode) {
        return Next::Fail(Refusal::OtherMode);
    }
    if let (Mode::Shared { limit, .. }, Seen::Shared(shared)) = (mode, seen) {
        if shared.limit != limit {
            return Next::Fail(Refusal::OtherLimit(shared.limit));
        }
    }
    if seen.held_with_other_permits(mode) {
        return Next::Fail(Refusal::OtherPermits);
    }
    if seen.held_by(owner).is_some() {
        Next::Reacquire
    } else if seen.room_for(mode) {
        Next::Grant
    } else {
        Next::Stop
    }
}

/// The grant pass's decision `next` for a head whose ttl `fits` the restart grace or not
/// (`relock.restart-grace-ms` may have been set at runtime after it queued). A head that would
/// get a hold (new, or its own refreshed) for longer than the grace gets the error
/// `LOCK.ACQUIRE` and `LOCK.RENEW` answer such a ttl, so that no hold outlives the grace that
/// must cover it; one that must wait still waits (its turn decides), one that fails fails.
pub fn at_turn(next: Next, fits: bool) -> Next {
    match next {
        Next::Grant | Next::Reacquire if !fits => Next::Fail(Refusal::TtlAboveGrace),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Mode = Mode::Exclusive;
    const READ: Mode = Mode::shared(0);
    const SEM2: Mode = Mode::shared(2);
    const SEM3: Mode = Mode::shared(3);

    fn shared(limit: u32, live: usize, mine: Option<u32>) -> Seen<'static> {
        Seen::Shared(SharedSeen {
            limit,
            live,
            live_permits: live as u64,
            mine: mine.map(|count| Holder {
                count,
                ..Holder::new(7, 100, 0)
            }),
        })
    }

    /// A semaphore of `limit` whose live holds hold `used` permits; the owner's own holds
    /// `mine` permits (if any).
    fn sem(limit: u32, used: u64, mine: Option<u32>) -> Seen<'static> {
        Seen::Shared(SharedSeen {
            limit,
            live: 1,
            live_permits: used,
            mine: mine.map(|permits| Holder {
                permits,
                ..Holder::new(7, 100, 0)
            }),
        })
    }

    const fn permits(limit: u32, permits: u32) -> Mode {
        Mode::Shared { limit, permits }
    }

    const NONE: Queued = Queued {
        any: false,
        shared_limit: None,
    };
    const QUEUE: Queued = Queued {
        any: true,
        shared_limit: None,
    };
    const QUEUE_SEM2: Queued = Queued {
        any: true,
        shared_limit: Some(2),
    };

    /// The engine's fast path (`Engine::decide_take_at`) decides an exclusive request at an
    /// exclusive hold with `take_at_hold`, without looking the queue up: whatever the queue,
    /// `take` must decide the same there, for the holder and for another owner, for every kind.
    #[test]
    fn exclusive_request_at_exclusive_hold_ignores_the_queue() {
        let holds = [
            Hold::new(b"a", 10, 1, 0),
            Hold::new(b"a", 10, 3, 0),
            Hold::new(b"a", 10, u32::MAX, 0),
        ];
        let queues = [
            NONE,
            QUEUE,
            QUEUE_SEM2,
            Queued {
                any: false,
                shared_limit: Some(5),
            },
        ];
        let kinds = [
            Kind::Acquire,
            Kind::Reenter(None),
            Kind::Reenter(Some(0)),
            Kind::Reenter(Some(1)),
            Kind::Reenter(Some(2)),
            Kind::Reenter(Some(3)),
        ];
        for hold in &holds {
            for owner in [&b"a"[..], b"b"] {
                for kind in kinds {
                    let fast = take_at_hold(hold, owner, kind);
                    for queued in queues {
                        let full = take(Seen::Exclusive(hold), queued, owner, X, kind);
                        assert_eq!(full, fast, "{hold:?} {owner:?} {kind:?} {queued:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn take_table() {
        let a1 = Hold::new(b"a", 10, 1, 0);
        let a3 = Hold::new(b"a", 10, 3, 0);
        let a_max = Hold::new(b"a", 10, u32::MAX, 0);
        let held = |h| Seen::Exclusive(h);
        use Kind::Acquire as Acq;
        const RE: Kind = Kind::Reenter(None);
        use Take::*;
        let other_limit = |n| Refuse(Refusal::OtherLimit(n));
        let refresh = |count| Refresh { count };
        type Row<'a> = (&'a str, Seen<'a>, Queued, &'a [u8], Mode, Kind, Take);
        #[rustfmt::skip]
        let rows: Vec<Row<'_>> = vec![
            // Exclusive requests.
            ("free",                         Seen::Free,            NONE,       b"a",  X,    Acq, Grant),
            ("free, queue",                  Seen::Free,            QUEUE,      b"a",  X,    Acq, Wait),
            ("own",                          held(&a3),             NONE,       b"a",  X,    Acq, refresh(3)),
            ("own, queue (holder ignores)",  held(&a3),             QUEUE,      b"a",  X,    Acq, refresh(3)),
            ("other's",                      held(&a1),             NONE,       b"b",  X,    Acq, Wait),
            ("owner is a prefix",            held(&a1),             NONE,       b"aa", X,    Acq, Wait),
            ("reenter free",                 Seen::Free,            NONE,       b"a",  X,    RE,  Grant),
            ("reenter own",                  held(&a1),             NONE,       b"a",  X,    RE,  refresh(2)),
            ("reenter at the limit",         held(&a_max),          NONE,       b"a",  X,    RE,  Refuse(Refusal::ReentrancyLimit)),
            ("exclusive on shared",          shared(0, 2, None),    NONE,       b"a",  X,    Acq, Wait),
            ("exclusive by a reader",        shared(0, 2, Some(1)), NONE,       b"a",  X,    Acq, Refuse(Refusal::OtherMode)),
            ("exclusive, queue of sem 2",    Seen::Free,            QUEUE_SEM2, b"a",  X,    Acq, Wait),
            // Shared requests.
            ("read free",                    Seen::Free,            NONE,       b"a",  READ, Acq, Grant),
            ("read beside readers",          shared(0, 5, None),    NONE,       b"a",  READ, Acq, Grant),
            ("read beside readers, queue",   shared(0, 5, None),    QUEUE,      b"a",  READ, Acq, Wait),
            ("read, own",                    shared(0, 5, Some(2)), QUEUE,      b"a",  READ, Acq, refresh(2)),
            ("read, reenter own",            shared(0, 5, Some(2)), NONE,       b"a",  READ, RE,  refresh(3)),
            ("read on exclusive",            held(&a1),             NONE,       b"b",  READ, Acq, Wait),
            ("read by the exclusive holder", held(&a1),             NONE,       b"a",  READ, Acq, Refuse(Refusal::OtherMode)),
            ("sem below its limit",          shared(2, 1, None),    NONE,       b"a",  SEM2, Acq, Grant),
            ("sem at its limit",             shared(2, 2, None),    NONE,       b"a",  SEM2, Acq, Wait),
            ("sem at its limit, own",        shared(2, 2, Some(1)), NONE,       b"a",  SEM2, Acq, refresh(1)),
            ("sem, another limit",           shared(2, 1, None),    NONE,       b"a",  SEM3, Acq, other_limit(2)),
            ("sem, another limit, own",      shared(2, 1, Some(1)), NONE,       b"a",  SEM3, Acq, other_limit(2)),
            ("sem vs readers",               shared(0, 1, None),    NONE,       b"a",  SEM2, Acq, other_limit(0)),
            ("sem vs queued sem",            Seen::Free,            QUEUE_SEM2, b"a",  SEM3, Acq, other_limit(2)),
            ("sem, same as queued",          Seen::Free,            QUEUE_SEM2, b"a",  SEM2, Acq, Wait),
            ("mode before limit",            held(&a1),             QUEUE_SEM2, b"a",  SEM3, Acq, Refuse(Refusal::OtherMode)),
            // Several permits.
            ("3 of 10, 7 used",              sem(10, 7, None),      NONE,       b"a",  permits(10, 3), Acq, Grant),
            ("4 of 10, 7 used",              sem(10, 7, None),      NONE,       b"a",  permits(10, 4), Acq, Wait),
            ("own 3, asks 3 again",          sem(10, 10, Some(3)),  NONE,       b"a",  permits(10, 3), Acq, refresh(1)),
            ("own 3, reenters with 3",       sem(10, 10, Some(3)),  NONE,       b"a",  permits(10, 3), RE,  refresh(2)),
            ("own 3, asks 2",                sem(10, 5, Some(3)),   NONE,       b"a",  permits(10, 2), Acq, Refuse(Refusal::OtherPermits)),
            ("limit before permits",         sem(10, 5, Some(3)),   NONE,       b"a",  permits(9, 2),  Acq, other_limit(10)),
            ("mode before permits",          held(&a1),             NONE,       b"a",  permits(10, 2), Acq, Refuse(Refusal::OtherMode)),
        ];
        for (name, seen, queued, owner, mode, kind, expected) in rows {
            assert_eq!(take(seen, queued, owner, mode, kind), expected, "{name}");
        }
    }

    #[test]
    fn release_and_renew_table() {
        let a1 = Hold::new(b"a", 10, 1, 0);
        let a3 = Hold::new(b"a", 10, 3, 0);
        #[rustfmt::skip]
        let rows: Vec<(&str, Seen<'_>, &[u8], Release, bool)> = vec![
            ("exclusive, last level",  Seen::Exclusive(&a1), b"a", Release::End, true),
            ("exclusive, one of three",Seen::Exclusive(&a3), b"a", Release::Decrement { count: 2 }, true),
            ("exclusive, other's",     Seen::Exclusive(&a1), b"b", Release::NotHeld, false),
            ("free (gone, expired)",   Seen::Free,           b"a", Release::NotHeld, false),
            ("shared, last level",     shared(0, 3, Some(1)), b"a", Release::End, true),
            ("shared, one of two",     shared(0, 3, Some(2)), b"a", Release::Decrement { count: 1 }, true),
            ("shared, not a holder",   shared(0, 3, None),    b"a", Release::NotHeld, false),
        ];
        for (name, seen, owner, released, renewed) in rows {
            assert_eq!(release(seen, owner, None), released, "release: {name}");
            assert_eq!(renew(seen, owner), renewed, "renew: {name}");
        }
    }

    /// `LOCK.REENTER ... FROM c`: the step from c applies, its repeat (the hold at c + 1)
    /// answers the same and changes nothing, a hold that is gone is never granted afresh
    /// (c >= 1), any other count is an error.
    #[test]
    fn reenter_from_table() {
        let a1 = Hold::new(b"a", 10, 1, 0);
        let a2 = Hold::new(b"a", 10, 2, 0);
        let a3 = Hold::new(b"a", 10, 3, 0);
        let a_max = Hold::new(b"a", 10, u32::MAX, 0);
        let held = |h| Seen::Exclusive(h);
        let from = |c| Kind::Reenter(Some(c));
        use Take::*;
        let other = |held, from| Refuse(Refusal::OtherCount { held, from });
        type Row<'a> = (&'a str, Seen<'a>, Queued, &'a [u8], Mode, Kind, Take);
        #[rustfmt::skip]
        let rows: Vec<Row<'_>> = vec![
            ("0: free",                      Seen::Free,            NONE,  b"a", X,    from(0), Grant),
            ("0: free, queue",               Seen::Free,            QUEUE, b"a", X,    from(0), Wait),
            ("0: another's",                 held(&a1),             NONE,  b"b", X,    from(0), Wait),
            ("0: own at 1 (repeat)",         held(&a1),             NONE,  b"a", X,    from(0), Repeat { count: 1 }),
            ("0: own at 1, queue (repeat)",  held(&a1),             QUEUE, b"a", X,    from(0), Repeat { count: 1 }),
            ("0: own at 2",                  held(&a2),             NONE,  b"a", X,    from(0), other(2, 0)),
            ("1: own at 1",                  held(&a1),             NONE,  b"a", X,    from(1), Refresh { count: 2 }),
            ("1: own at 1, queue",           held(&a1),             QUEUE, b"a", X,    from(1), Refresh { count: 2 }),
            ("1: own at 2 (repeat)",         held(&a2),             NONE,  b"a", X,    from(1), Repeat { count: 2 }),
            ("1: own at 3",                  held(&a3),             NONE,  b"a", X,    from(1), other(3, 1)),
            ("3: own at 1",                  held(&a1),             NONE,  b"a", X,    from(3), other(1, 3)),
            ("1: free (gone)",               Seen::Free,            NONE,  b"a", X,    from(1), Gone),
            ("1: another's (gone)",          held(&a1),             NONE,  b"b", X,    from(1), Gone),
            ("max-1: own at max (repeat)",   held(&a_max),          NONE,  b"a", X,    from(u32::MAX - 1), Repeat { count: u32::MAX }),
            ("max: own at max",              held(&a_max),          NONE,  b"a", X,    from(u32::MAX), Refuse(Refusal::ReentrancyLimit)),
            ("mode first, even if gone",     held(&a1),             NONE,  b"a", READ, from(1), Refuse(Refusal::OtherMode)),
            // The same rule on a shared holder's own count.
            ("read 0: free",                 shared(0, 2, None),    NONE,  b"a", READ, from(0), Grant),
            ("read 0: own at 1 (repeat)",    shared(0, 2, Some(1)), NONE,  b"a", READ, from(0), Repeat { count: 1 }),
            ("read 2: own at 2",             shared(0, 2, Some(2)), NONE,  b"a", READ, from(2), Refresh { count: 3 }),
            ("read 2: own at 3 (repeat)",    shared(0, 2, Some(3)), NONE,  b"a", READ, from(2), Repeat { count: 3 }),
            ("read 1: own at 3",             shared(0, 2, Some(3)), NONE,  b"a", READ, from(1), other(3, 1)),
            ("read 1: not a holder (gone)",  shared(0, 2, None),    NONE,  b"a", READ, from(1), Gone),
            ("sem 1: full, not a holder",    shared(2, 2, None),    NONE,  b"a", SEM2, from(1), Gone),
        ];
        for (name, seen, queued, owner, mode, kind, expected) in rows {
            assert_eq!(take(seen, queued, owner, mode, kind), expected, "{name}");
        }
    }

    /// `LOCK.RELEASE ... FROM c`: the step from c applies, its repeat (the hold at c - 1 >= 1)
    /// answers the same and changes nothing, any other count is an error.
    #[test]
    fn release_from_table() {
        let a1 = Hold::new(b"a", 10, 1, 0);
        let a2 = Hold::new(b"a", 10, 2, 0);
        let a3 = Hold::new(b"a", 10, 3, 0);
        let a_max = Hold::new(b"a", 10, u32::MAX, 0);
        let a_below_max = Hold::new(b"a", 10, u32::MAX - 1, 0);
        let held = |h| Seen::Exclusive(h);
        use Release::*;
        let other = |held, from| Refuse(Refusal::OtherCount { held, from });
        #[rustfmt::skip]
        let rows: Vec<(&str, Seen<'_>, &[u8], u32, Release)> = vec![
            ("1: own at 1",             held(&a1),              b"a", 1, End),
            ("1: gone (its repeat)",    Seen::Free,             b"a", 1, NotHeld),
            ("1: another's",            held(&a1),              b"b", 1, NotHeld),
            ("2: own at 2",             held(&a2),              b"a", 2, Decrement { count: 1 }),
            ("2: own at 1 (repeat)",    held(&a1),              b"a", 2, Repeat { count: 1 }),
            ("3: own at 2 (repeat)",    held(&a2),              b"a", 3, Repeat { count: 2 }),
            ("3: own at 1",             held(&a1),              b"a", 3, other(1, 3)),
            ("1: own at 2",             held(&a2),              b"a", 1, other(2, 1)),
            ("2: own at 3",             held(&a3),              b"a", 2, other(3, 2)),
            ("max: own at max",         held(&a_max),           b"a", u32::MAX, Decrement { count: u32::MAX - 1 }),
            ("max: own at max-1",       held(&a_below_max),     b"a", u32::MAX, Repeat { count: u32::MAX - 1 }),
            ("read 1: own at 1",        shared(0, 3, Some(1)),  b"a", 1, End),
            ("read 2: own at 1",        shared(0, 3, Some(1)),  b"a", 2, Repeat { count: 1 }),
            ("read 1: own at 2",        shared(0, 3, Some(2)),  b"a", 1, other(2, 1)),
            ("read 1: not a holder",    shared(0, 3, None),     b"a", 1, NotHeld),
        ];
        for (name, seen, owner, from, expected) in rows {
            assert_eq!(release(seen, owner, Some(from)), expected, "{name}");
        }
    }

    #[test]
    fn downgrade_table() {
        let a2 = Hold::new(b"a", 10, 2, 0);
        #[rustfmt::skip]
        let readers = Queued {
            any: true,
            shared_limit: Some(0),
        };
        let rows: Vec<(&str, Seen<'_>, Queued, &[u8], Downgrade)> = vec![
            (
                "its exclusive hold",
                Seen::Exclusive(&a2),
                NONE,
                b"a",
                Downgrade::Go,
            ),
            (
                "readers queued",
                Seen::Exclusive(&a2),
                readers,
                b"a",
                Downgrade::Go,
            ),
            (
                "writers queued",
                Seen::Exclusive(&a2),
                QUEUE,
                b"a",
                Downgrade::Go,
            ),
            (
                "a semaphore queued",
                Seen::Exclusive(&a2),
                QUEUE_SEM2,
                b"a",
                Downgrade::Refuse(Refusal::OtherLimit(2)),
            ),
            (
                "another's",
                Seen::Exclusive(&a2),
                NONE,
                b"b",
                Downgrade::NotHeld,
            ),
            ("free", Seen::Free, NONE, b"a", Downgrade::NotHeld),
            (
                "a reader already",
                shared(0, 3, Some(1)),
                NONE,
                b"a",
                Downgrade::Already { token: 7 },
            ),
            (
                "not among readers",
                shared(0, 3, None),
                NONE,
                b"a",
                Downgrade::NotHeld,
            ),
            (
                "a semaphore's holder",
                shared(4, 3, Some(1)),
                NONE,
                b"a",
                Downgrade::Refuse(Refusal::OtherLimit(4)),
            ),
        ];
        for (name, seen, queued, owner, expected) in rows {
            assert_eq!(downgrade(seen, queued, owner), expected, "{name}");
        }
    }

    #[test]
    fn next_for_table() {
        let a1 = Hold::new(b"a", 10, 1, 0);
        use Next::*;
        #[rustfmt::skip]
        let rows: Vec<(&str, Seen<'_>, &[u8], Mode, Next)> = vec![
            ("exclusive head, free",       Seen::Free,            b"b", X, Grant),
            ("exclusive head, held",       Seen::Exclusive(&a1),  b"b", X, Stop),
            ("exclusive head, its own",    Seen::Exclusive(&a1),  b"a", X, Reacquire),
            ("exclusive head, readers",    shared(0, 1, None),    b"b", X, Stop),
            ("exclusive head, a reader",   shared(0, 1, Some(1)), b"b", X, Fail(Refusal::OtherMode)),
            ("reader head, free",          Seen::Free,            b"b", READ, Grant),
            ("reader head, readers",       shared(0, 9, None),    b"b", READ, Grant),
            ("reader head, a reader",      shared(0, 9, Some(1)), b"b", READ, Reacquire),
            ("reader head, held",          Seen::Exclusive(&a1),  b"b", READ, Stop),
            ("reader head, its own excl.", Seen::Exclusive(&a1),  b"a", READ, Fail(Refusal::OtherMode)),
            ("sem head, room",             shared(2, 1, None),    b"b", SEM2, Grant),
            ("sem head, full",             shared(2, 2, None),    b"b", SEM2, Stop),
            ("sem head, full, its own",    shared(2, 2, Some(1)), b"b", SEM2, Reacquire),
            ("sem head, another limit",    shared(3, 1, None),    b"b", SEM2, Fail(Refusal::OtherLimit(3))),
            ("sem head, readers",          shared(0, 1, None),    b"b", SEM2, Fail(Refusal::OtherLimit(0))),
            ("5 permits, 5 free",          sem(10, 5, None),      b"b", permits(10, 5), Grant),
            ("5 permits, 4 free: blocks",  sem(10, 6, None),      b"b", permits(10, 5), Stop),
            ("its owner holds 2",          sem(10, 6, Some(2)),   b"b", permits(10, 5), Fail(Refusal::OtherPermits)),
            ("its owner holds as many",    sem(10, 10, Some(5)),  b"b", permits(10, 5), Reacquire),
        ];
        for (name, seen, owner, mode, expected) in rows {
            assert_eq!(next_for(seen, owner, mode), expected, "{name}");
        }
    }

    #[test]
    fn at_turn_table() {
        use Next::*;
        let above = Fail(Refusal::TtlAboveGrace);
        #[rustfmt::skip]
        let rows = [
            // next,                          ttl fits the grace, ttl above it
            (Grant,                           Grant,              above),
            (Reacquire,                       Reacquire,          above),
            (Stop,                            Stop,               Stop),
            (Fail(Refusal::OtherMode),        Fail(Refusal::OtherMode), Fail(Refusal::OtherMode)),
        ];
        for (next, fits, too_long) in rows {
            assert_eq!(at_turn(next, true), fits, "{next:?}");
            assert_eq!(at_turn(next, false), too_long, "{next:?}");
        }
    }
}
