//! Model-based tests: random operation sequences, with time steps, run on a machine built from
//! the production pieces (the decisions in `hold`, the `Queue`, the `Tokens` counter) and on a
//! naive reference model written straight from the command contract. Both must give the same
//! replies and grant the same waiters the same tokens, and the invariants of a lock must hold.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;

use super::hold::{self, Decision, Found, Hold, Step};
use super::{Clock, Queue, Tokens};

/// Simulated time, in Unix ms.
struct SimClock<'a>(&'a Cell<u64>);

impl Clock for SimClock<'_> {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: u8,
        owner: u8,
        ttl: u64,
    },
    Reenter {
        key: u8,
        owner: u8,
        ttl: u64,
    },
    Release {
        key: u8,
        owner: u8,
    },
    Renew {
        key: u8,
        owner: u8,
        ttl: u64,
    },
    Force {
        key: u8,
    },
    Wait {
        key: u8,
        owner: u8,
        ttl: u64,
    },
    /// The `nth` queued waiter (over all keys, in id order) times out or disconnects.
    Leave {
        nth: usize,
    },
    /// The lock is deleted behind the module's back (DEL, FLUSHALL...): the key is free, its
    /// waiters are woken only by the deferred `Serve`.
    Delete {
        key: u8,
    },
    /// The deferred wake-up of a key runs.
    Serve {
        key: u8,
    },
    /// Time passes; expiry timers fire and hand expired locks to their waiters.
    Advance {
        ms: u64,
    },
}

/// What a command replied, or that the client is now queued.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Token(u64),
    Integer(u64),
    Nil,
    Limit,
    Queued(u64),
}

/// A hand-off to a queued waiter: (waiter id, key, token).
type Grant = (u64, u8, u64);

fn owner_bytes(owner: u8) -> Vec<u8> {
    vec![b'o', owner]
}

// ---------------------------------------------------------------------------------------------
// The machine under test: production decisions, queue and token counter.

#[derive(Default)]
struct Slot {
    hold: Option<(Box<Hold>, u64)>,
    queue: Queue<(Vec<u8>, u64)>,
}

struct Machine {
    now: Cell<u64>,
    tokens: Tokens,
    slots: HashMap<u8, Slot>,
    next_waiter: u64,
    grants: Vec<Grant>,
    /// Every token issued, in order.
    issued: Vec<u64>,
}

impl Machine {
    fn new(start: u64) -> Machine {
        Machine {
            now: Cell::new(start),
            tokens: Tokens::new(),
            slots: HashMap::new(),
            next_waiter: 0,
            grants: Vec::new(),
            issued: Vec::new(),
        }
    }

    fn issue(&mut self) -> u64 {
        let clock = SimClock(&self.now);
        let token = self.tokens.issue(&clock).expect("token space");
        self.issued.push(token);
        token
    }

    /// Ends an expired hold; the expiry timer (`hand_off`) also gives a free key to its head
    /// waiter, while a command that finds the key expired leaves that to the deferred wake-up.
    fn expire(&mut self, key: u8, hand_off: bool) {
        let now = self.now.get();
        let slot = self.slots.entry(key).or_default();
        if slot.hold.as_ref().is_some_and(|(_, at)| *at <= now) {
            slot.hold = None;
        }
        if hand_off && slot.hold.is_none() {
            self.hand_off(key);
        }
    }

    fn hand_off(&mut self, key: u8) {
        let Some((id, (owner, ttl))) = self.slots.entry(key).or_default().queue.pop() else {
            return;
        };
        let token = self.issue();
        let at = self.now.get() + ttl;
        self.slots.entry(key).or_default().hold = Some((Hold::new(&owner, token, 1), at));
        self.grants.push((id, key, token));
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        match *op {
            Op::Advance { ms } => {
                self.now.set(self.now.get() + ms);
                // Locks that expire in the same step are handed off in key order in both models.
                let mut keys: Vec<u8> = self.slots.keys().copied().collect();
                keys.sort_unstable();
                for key in keys {
                    self.expire(key, true);
                }
                None
            }
            Op::Delete { key } => {
                self.slots.entry(key).or_default().hold = None;
                None
            }
            Op::Serve { key } => {
                self.expire(key, true);
                None
            }
            Op::Leave { nth } => {
                let mut ids: Vec<(u64, u8)> = self
                    .slots
                    .iter()
                    .flat_map(|(k, s)| s.queue.iter().map(move |(id, _)| (id, *k)))
                    .collect();
                ids.sort_unstable();
                if let Some(&(id, key)) = ids.get(nth % ids.len().max(1)) {
                    self.slots.entry(key).or_default().queue.remove(id);
                }
                None
            }
            Op::Acquire { key, owner, ttl } => Some(self.take(key, owner, ttl, hold::acquire)),
            Op::Reenter { key, owner, ttl } => Some(self.take(key, owner, ttl, hold::reenter)),
            Op::Wait { key, owner, ttl } => {
                self.expire(key, false);
                let slot = self.slots.entry(key).or_default();
                let found = found(slot);
                if hold::acquire(found, &owner_bytes(owner)) != Decision::Nil {
                    return Some(self.take(key, owner, ttl, hold::acquire));
                }
                self.next_waiter += 1;
                let id = self.next_waiter;
                slot.queue.push(id, (owner_bytes(owner), ttl));
                Some(Out::Queued(id))
            }
            Op::Release { key, owner } => {
                self.expire(key, false);
                let slot = self.slots.entry(key).or_default();
                let decision = hold::release(found(slot), &owner_bytes(owner));
                Some(self.finish(key, decision, 0))
            }
            Op::Renew { key, owner, ttl } => {
                self.expire(key, false);
                let slot = self.slots.entry(key).or_default();
                let decision = hold::renew(found(slot), &owner_bytes(owner));
                Some(self.finish(key, decision, ttl))
            }
            Op::Force { key } => {
                self.expire(key, false);
                let slot = self.slots.entry(key).or_default();
                let decision = hold::force_release(found(slot));
                Some(self.finish(key, decision, 0))
            }
        }
    }

    fn take(
        &mut self,
        key: u8,
        owner: u8,
        ttl: u64,
        decide: fn(Found<'_>, &[u8]) -> Decision,
    ) -> Out {
        self.expire(key, false);
        let slot = self.slots.entry(key).or_default();
        let decision = decide(found(slot), &owner_bytes(owner));
        if decision.step() == Step::Grant {
            let token = self.issue();
            let at = self.now.get() + ttl;
            self.slots.entry(key).or_default().hold =
                Some((Hold::new(&owner_bytes(owner), token, 1), at));
        }
        self.finish(key, decision, ttl)
    }

    /// Applies the non-grant steps and maps the decision to a reply.
    fn finish(&mut self, key: u8, decision: Decision, ttl: u64) -> Out {
        let now = self.now.get();
        let slot = self.slots.entry(key).or_default();
        match decision.step() {
            Step::Refresh { count } => {
                if let Some((hold, at)) = slot.hold.as_mut() {
                    hold.set_count(count);
                    *at = now + ttl;
                }
            }
            Step::Decrement { count } => {
                if let Some((hold, _)) = slot.hold.as_mut() {
                    hold.set_count(count);
                }
            }
            Step::End => {
                slot.hold = None;
            }
            Step::Grant | Step::Nothing => {}
        }
        let token = slot.hold.as_ref().map(|(h, _)| h.token());
        let out = match decision {
            Decision::Token(_) => token.map_or(Out::Nil, Out::Token),
            Decision::Integer(_, n) => Out::Integer(n),
            Decision::Nil => Out::Nil,
            Decision::ReentrancyLimit => Out::Limit,
        };
        if decision.step() == Step::End {
            self.hand_off(key);
        }
        out
    }
}

fn found(slot: &Slot) -> Found<'_> {
    match &slot.hold {
        Some((hold, _)) => Found::Held(hold),
        None => Found::Free {
            queued: !slot.queue.is_empty(),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model: the command contract, written as plainly as possible.

#[derive(Clone)]
struct RefHold {
    owner: u8,
    count: u64,
    token: u64,
    expires: u64,
}

#[derive(Default)]
struct RefKey {
    holder: Option<RefHold>,
    queue: VecDeque<(u64, u8, u64)>,
}

struct Reference {
    now: u64,
    last_token: u64,
    keys: HashMap<u8, RefKey>,
    next_waiter: u64,
    grants: Vec<Grant>,
}

impl Reference {
    fn new(start: u64) -> Reference {
        Reference {
            now: start,
            last_token: 0,
            keys: HashMap::new(),
            next_waiter: 0,
            grants: Vec::new(),
        }
    }

    fn token(&mut self) -> u64 {
        self.last_token = (self.last_token + 1).max(self.now * 1000);
        self.last_token
    }

    /// Time has passed or a command looks at the key: an expired holder is gone, and a free
    /// key goes to the first waiter in line.
    fn settle(&mut self, key: u8, give: bool) {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        if entry.holder.as_ref().is_some_and(|h| h.expires <= now) {
            entry.holder = None;
        }
        if give && entry.holder.is_none() {
            self.give_to_next(key);
        }
    }

    fn give_to_next(&mut self, key: u8) {
        let Some((id, owner, ttl)) = self.keys.entry(key).or_default().queue.pop_front() else {
            return;
        };
        let token = self.token();
        let expires = self.now + ttl;
        self.keys.entry(key).or_default().holder = Some(RefHold {
            owner,
            count: 1,
            token,
            expires,
        });
        self.grants.push((id, key, token));
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        let now = self.now;
        match *op {
            Op::Advance { ms } => {
                self.now += ms;
                let mut keys: Vec<u8> = self.keys.keys().copied().collect();
                keys.sort_unstable();
                for key in keys {
                    self.settle(key, true);
                }
                None
            }
            Op::Delete { key } => {
                self.keys.entry(key).or_default().holder = None;
                None
            }
            Op::Serve { key } => {
                self.settle(key, true);
                None
            }
            Op::Leave { nth } => {
                let mut ids: Vec<(u64, u8)> = self
                    .keys
                    .iter()
                    .flat_map(|(k, e)| e.queue.iter().map(move |(id, _, _)| (*id, *k)))
                    .collect();
                ids.sort_unstable();
                if let Some(&(id, key)) = ids.get(nth % ids.len().max(1)) {
                    self.keys
                        .entry(key)
                        .or_default()
                        .queue
                        .retain(|(w, _, _)| *w != id);
                }
                None
            }
            Op::Acquire { key, owner, ttl } | Op::Wait { key, owner, ttl } => {
                self.settle(key, false);
                let entry = self.keys.entry(key).or_default();
                match &mut entry.holder {
                    Some(h) if h.owner == owner => {
                        h.expires = now + ttl;
                        Some(Out::Token(h.token))
                    }
                    None if entry.queue.is_empty() => {
                        let token = self.token();
                        self.keys.entry(key).or_default().holder = Some(RefHold {
                            owner,
                            count: 1,
                            token,
                            expires: now + ttl,
                        });
                        Some(Out::Token(token))
                    }
                    _ if matches!(op, Op::Wait { .. }) => {
                        self.next_waiter += 1;
                        let id = self.next_waiter;
                        entry.queue.push_back((id, owner, ttl));
                        Some(Out::Queued(id))
                    }
                    _ => Some(Out::Nil),
                }
            }
            Op::Reenter { key, owner, ttl } => {
                self.settle(key, false);
                let entry = self.keys.entry(key).or_default();
                match &mut entry.holder {
                    Some(h) if h.owner == owner => {
                        if h.count == u64::from(u32::MAX) {
                            return Some(Out::Limit);
                        }
                        h.count += 1;
                        h.expires = now + ttl;
                        Some(Out::Integer(h.count))
                    }
                    None if entry.queue.is_empty() => {
                        let token = self.token();
                        self.keys.entry(key).or_default().holder = Some(RefHold {
                            owner,
                            count: 1,
                            token,
                            expires: now + ttl,
                        });
                        Some(Out::Integer(1))
                    }
                    _ => Some(Out::Nil),
                }
            }
            Op::Release { key, owner } => {
                self.settle(key, false);
                let entry = self.keys.entry(key).or_default();
                match &mut entry.holder {
                    Some(h) if h.owner == owner => {
                        h.count -= 1;
                        let left = h.count;
                        if left == 0 {
                            entry.holder = None;
                            self.give_to_next(key);
                        }
                        Some(Out::Integer(left))
                    }
                    _ => Some(Out::Nil),
                }
            }
            Op::Renew { key, owner, ttl } => {
                self.settle(key, false);
                let entry = self.keys.entry(key).or_default();
                match &mut entry.holder {
                    Some(h) if h.owner == owner => {
                        h.expires = now + ttl;
                        Some(Out::Token(h.token))
                    }
                    _ => Some(Out::Nil),
                }
            }
            Op::Force { key } => {
                self.settle(key, false);
                let entry = self.keys.entry(key).or_default();
                if entry.holder.take().is_some() {
                    self.give_to_next(key);
                    Some(Out::Integer(1))
                } else {
                    Some(Out::Integer(0))
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..3;
    let owner = 0u8..4;
    let ttl = 1u64..200;
    prop_oneof![
        (key.clone(), owner.clone(), ttl.clone()).prop_map(|(key, owner, ttl)| Op::Acquire {
            key,
            owner,
            ttl
        }),
        (key.clone(), owner.clone(), ttl.clone()).prop_map(|(key, owner, ttl)| Op::Reenter {
            key,
            owner,
            ttl
        }),
        (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Release { key, owner }),
        (key.clone(), owner.clone(), ttl.clone()).prop_map(|(key, owner, ttl)| Op::Renew {
            key,
            owner,
            ttl
        }),
        key.clone().prop_map(|key| Op::Force { key }),
        (key, owner, ttl).prop_map(|(key, owner, ttl)| Op::Wait { key, owner, ttl }),
        (0usize..8).prop_map(|nth| Op::Leave { nth }),
        (0u8..3).prop_map(|key| Op::Delete { key }),
        (0u8..3).prop_map(|key| Op::Serve { key }),
        (0u64..150).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn machine_matches_reference_model(ops in proptest::collection::vec(op(), 1..120)) {
        let start = 1_800_000_000_000;
        let mut machine = Machine::new(start);
        let mut reference = Reference::new(start);
        for (i, op) in ops.iter().enumerate() {
            let got = machine.apply(op);
            let want = reference.apply(op);
            prop_assert_eq!(&got, &want, "step {} {:?}", i, op);
            prop_assert_eq!(&machine.grants, &reference.grants, "grants after step {} {:?}", i, op);
        }

        // Invariants of the lock itself.
        // Every new hold's token is larger than every token before it.
        let issued = &machine.issued;
        prop_assert!(issued.windows(2).all(|w| w[0] < w[1]), "tokens {:?}", issued);
        // A waiter is granted at most once, and each key serves its waiters in queue order.
        let mut ids: Vec<u64> = machine.grants.iter().map(|g| g.0).collect();
        for key in 0..3u8 {
            let order: Vec<u64> = machine.grants.iter().filter(|g| g.1 == key).map(|g| g.0).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "key {} order {:?}", key, order);
        }
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), machine.grants.len());
    }
}
