//! A lock's state and the decisions of the lock commands.
//!
//! A key either holds a [`Hold`] or is free; a free key may still have waiters queued, and then
//! nobody but the head of the queue may take it (no barging). The lifetime of a hold is the key's
//! Redis TTL, so expiry is not modelled here: an expired hold simply is not [`Found::Held`].

pub use super::packed::{Hold, MAX_COUNT};

/// What a command finds at a key.
#[derive(Debug, Clone, Copy)]
pub enum Found<'a> {
    /// No lock; `queued` says whether waiters are queued for the key.
    Free { queued: bool },
    /// A live hold.
    Held(&'a Hold),
}

/// What the command does to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing changes.
    Nothing,
    /// A new hold for the caller, count 1, a new token, TTL = ttl_ms.
    Grant,
    /// The caller's hold stays; its count becomes `count` and its TTL is reset to ttl_ms.
    Refresh { count: u32 },
    /// The caller's hold stays with `count`; its TTL is untouched.
    Decrement { count: u32 },
    /// The hold ends and passes to the head waiter, if any.
    End,
}

/// A command's decision: the step to apply and what to reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Apply the step; reply the token of the resulting hold.
    Token(Step),
    /// Apply the step; reply this integer.
    Integer(Step, u64),
    /// Nothing changes; reply nil.
    Nil,
    /// Nothing changes; the reentrancy count would overflow.
    ReentrancyLimit,
}

impl Decision {
    /// The step this decision applies.
    pub fn step(&self) -> Step {
        match *self {
            Decision::Token(step) | Decision::Integer(step, _) => step,
            Decision::Nil | Decision::ReentrancyLimit => Step::Nothing,
        }
    }
}

/// `LOCK.ACQUIRE`: non-reentrant; idempotent for the holder; no barging past the queue.
pub fn acquire(found: Found<'_>, owner: &[u8]) -> Decision {
    match found {
        Found::Held(hold) if hold.is_held_by(owner) => Decision::Token(Step::Refresh {
            count: hold.count(),
        }),
        Found::Free { queued: false } => Decision::Token(Step::Grant),
        _ => Decision::Nil,
    }
}

/// `LOCK.REENTER`: reentrant acquire; replies the new count.
pub fn reenter(found: Found<'_>, owner: &[u8]) -> Decision {
    match found {
        Found::Held(hold) if hold.is_held_by(owner) => match hold.count().checked_add(1) {
            Some(count) => Decision::Integer(Step::Refresh { count }, u64::from(count)),
            None => Decision::ReentrancyLimit,
        },
        Found::Free { queued: false } => Decision::Integer(Step::Grant, 1),
        _ => Decision::Nil,
    }
}

/// `LOCK.RELEASE`: one level of the caller's hold; replies the remaining count.
pub fn release(found: Found<'_>, owner: &[u8]) -> Decision {
    match found {
        Found::Held(hold) if hold.is_held_by(owner) => match hold.count() {
            0 | 1 => Decision::Integer(Step::End, 0),
            n => Decision::Integer(Step::Decrement { count: n - 1 }, u64::from(n - 1)),
        },
        _ => Decision::Nil,
    }
}

/// `LOCK.RENEW`: resets the caller's TTL; never revives a lock that is gone.
pub fn renew(found: Found<'_>, owner: &[u8]) -> Decision {
    match found {
        Found::Held(hold) if hold.is_held_by(owner) => Decision::Token(Step::Refresh {
            count: hold.count(),
        }),
        _ => Decision::Nil,
    }
}

/// `LOCK.FORCERELEASE`: ends any hold; replies 1 if there was one.
pub fn force_release(found: Found<'_>) -> Decision {
    match found {
        Found::Held(_) => Decision::Integer(Step::End, 1),
        Found::Free { .. } => Decision::Integer(Step::Nothing, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Command = fn(Found<'_>, &[u8]) -> Decision;

    fn free() -> Found<'static> {
        Found::Free { queued: false }
    }
    fn queued() -> Found<'static> {
        Found::Free { queued: true }
    }
    fn held(h: &Hold) -> Found<'_> {
        Found::Held(h)
    }

    #[test]
    fn decisions_table() {
        let a1 = Hold::new(b"a", 10, 1);
        let a3 = Hold::new(b"a", 10, 3);
        let a_max = Hold::new(b"a", 10, MAX_COUNT);
        let refresh = |count| Step::Refresh { count };

        #[rustfmt::skip]
        let rows: Vec<(&str, Command, Found<'_>, &[u8], Decision)> = vec![
            // LOCK.ACQUIRE
            ("acquire free",               acquire, free(),       b"a", Decision::Token(Step::Grant)),
            ("acquire free, queue",        acquire, queued(),     b"a", Decision::Nil),
            ("acquire own",                acquire, held(&a3),    b"a", Decision::Token(refresh(3))),
            ("acquire other's",            acquire, held(&a1),    b"b", Decision::Nil),
            ("acquire owner is prefix",    acquire, held(&a1),    b"aa", Decision::Nil),
            // LOCK.REENTER
            ("reenter free",               reenter, free(),       b"a", Decision::Integer(Step::Grant, 1)),
            ("reenter free, queue",        reenter, queued(),     b"a", Decision::Nil),
            ("reenter own",                reenter, held(&a1),    b"a", Decision::Integer(refresh(2), 2)),
            ("reenter own x3",             reenter, held(&a3),    b"a", Decision::Integer(refresh(4), 4)),
            ("reenter at limit",           reenter, held(&a_max), b"a", Decision::ReentrancyLimit),
            ("reenter other's",            reenter, held(&a3),    b"b", Decision::Nil),
            // LOCK.RELEASE
            ("release last level",         release, held(&a1),    b"a", Decision::Integer(Step::End, 0)),
            ("release one of three",       release, held(&a3),    b"a", Decision::Integer(Step::Decrement { count: 2 }, 2)),
            ("release other's",            release, held(&a1),    b"b", Decision::Nil),
            ("release free",               release, free(),       b"a", Decision::Nil),
            ("release free, queue",        release, queued(),     b"a", Decision::Nil),
            // LOCK.RENEW
            ("renew own",                  renew,   held(&a3),    b"a", Decision::Token(refresh(3))),
            ("renew other's",              renew,   held(&a3),    b"b", Decision::Nil),
            ("renew gone (expired)",       renew,   free(),       b"a", Decision::Nil),
            // LOCK.FORCERELEASE
            ("force held",                 |f, _| force_release(f), held(&a3), b"", Decision::Integer(Step::End, 1)),
            ("force free",                 |f, _| force_release(f), free(),    b"", Decision::Integer(Step::Nothing, 0)),
            ("force free, queue",          |f, _| force_release(f), queued(),  b"", Decision::Integer(Step::Nothing, 0)),
        ];
        for (name, command, found, owner, expected) in rows {
            assert_eq!(command(found, owner), expected, "{name}");
        }
    }

    #[test]
    fn refused_decisions_change_nothing() {
        assert_eq!(Decision::Nil.step(), Step::Nothing);
        assert_eq!(Decision::ReentrancyLimit.step(), Step::Nothing);
    }
}
