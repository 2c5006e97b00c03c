//! Model-based tests: random operation sequences, with time steps, run on the engine itself (on
//! the in-memory host, driven as Redis drives it) and on a naive reference model written
//! straight from the command contract. Both must give the same replies and grant the same
//! waiters the same holds, and the invariants of a lock must hold.

use std::collections::{BTreeMap, HashMap, VecDeque};

use proptest::prelude::*;

use super::engine::Reply;
use super::host::Outcome;
use super::memory::{Client, Sim};

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
    /// The deferred wake-ups run (what is due after the current command).
    Serve,
    /// Time passes; expiry timers fire and hand expired locks to their waiters.
    Advance {
        ms: u64,
    },
}

/// What a command replied, or that the client is now queued.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Hold(HoldName),
    Integer(u64),
    Nil,
    Limit,
    Queued(u64),
}

/// A hold, named by its key and the how-manieth hold of that key it is. Tokens are compared
/// through these names: when locks on two keys are handed off in the same step, which of them
/// gets the smaller token is not part of the contract.
type HoldName = (u8, u32);

/// A hand-off to a queued waiter: (step, key, waiter, hold).
type Grant = (usize, u8, u64, HoldName);

fn owner_bytes(owner: u8) -> Vec<u8> {
    vec![b'o', owner]
}

fn key_bytes(key: u8) -> Vec<u8> {
    vec![b'k', key]
}

// ---------------------------------------------------------------------------------------------
// The machine under test: the engine itself, on the in-memory host.

struct Machine {
    sim: Sim,
    /// Blocked client -> (waiter number, key).
    waiting: BTreeMap<Client, (u64, u8)>,
    next_waiter: u64,
    names: HashMap<u64, HoldName>,
    holds_per_key: HashMap<u8, u32>,
    grants: Vec<Grant>,
    /// Every token issued, in order.
    issued: Vec<u64>,
    step: usize,
}

impl Machine {
    fn new(start: u64) -> Machine {
        Machine {
            sim: Sim::new(start as i64),
            waiting: BTreeMap::new(),
            next_waiter: 0,
            names: HashMap::new(),
            holds_per_key: HashMap::new(),
            grants: Vec::new(),
            issued: Vec::new(),
            step: 0,
        }
    }

    /// The name of the hold with `token` at `key`, naming it if it is new.
    fn name(&mut self, key: u8, token: u64) -> HoldName {
        if let Some(name) = self.names.get(&token) {
            return *name;
        }
        let n = self.holds_per_key.entry(key).or_default();
        *n += 1;
        let name = (key, *n);
        self.names.insert(token, name);
        self.issued.push(token);
        name
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        self.step += 1;
        let out = match *op {
            Op::Advance { ms } => {
                self.sim.advance(ms as i64);
                None
            }
            Op::Delete { key } => {
                self.sim.delete(&key_bytes(key));
                None
            }
            Op::Serve => {
                self.sim.settle();
                None
            }
            Op::Leave { nth } => {
                let clients: Vec<Client> = self.waiting.keys().copied().collect();
                if let Some(&client) = clients.get(nth % clients.len().max(1)) {
                    self.waiting.remove(&client);
                    self.sim.hang_up(client);
                }
                None
            }
            Op::Acquire { key, owner, ttl } => {
                let reply = self.sim.acquire(&key_bytes(key), &owner_bytes(owner), ttl);
                Some(self.token_reply(key, reply))
            }
            Op::Renew { key, owner, ttl } => {
                let reply = self.sim.renew(&key_bytes(key), &owner_bytes(owner), ttl);
                Some(self.token_reply(key, reply))
            }
            Op::Wait { key, owner, ttl } => {
                let (reply, client) = self.sim.wait(&key_bytes(key), &owner_bytes(owner), ttl, 0);
                if reply == Reply::Blocked {
                    self.next_waiter += 1;
                    self.waiting.insert(client, (self.next_waiter, key));
                    Some(Out::Queued(self.next_waiter))
                } else {
                    Some(self.token_reply(key, reply))
                }
            }
            Op::Reenter { key, owner, ttl } => {
                let reply = self.sim.reenter(&key_bytes(key), &owner_bytes(owner), ttl);
                if let (Reply::Integer(1), Some((_, token, 1, _))) =
                    (&reply, self.sim.lock(&key_bytes(key)))
                {
                    self.name(key, token);
                }
                Some(count_reply(reply))
            }
            Op::Release { key, owner } => Some(count_reply(
                self.sim.release(&key_bytes(key), &owner_bytes(owner)),
            )),
            Op::Force { key } => Some(count_reply(self.sim.force_release(&key_bytes(key)))),
        };
        for (client, outcome) in self.sim.deliver() {
            let Some((waiter, key)) = self.waiting.remove(&client) else {
                continue;
            };
            if let Outcome::Token(token) = outcome {
                let name = self.name(key, token);
                self.grants.push((self.step, key, waiter, name));
            }
        }
        out
    }

    fn token_reply(&mut self, key: u8, reply: Reply) -> Out {
        match reply {
            Reply::Integer(token) => Out::Hold(self.name(key, token)),
            other => count_reply(other),
        }
    }
}

fn count_reply(reply: Reply) -> Out {
    match reply {
        Reply::Integer(n) => Out::Integer(n),
        Reply::Nil => Out::Nil,
        Reply::Error(e) if e == super::errors::REENTRANCY_LIMIT => Out::Limit,
        other => panic!("unexpected reply {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model: the command contract, written as plainly as possible.

#[derive(Clone)]
struct RefHold {
    owner: u8,
    count: u64,
    name: HoldName,
    /// The last millisecond the hold is alive (it has expired once the clock is past it).
    expires: u64,
}

#[derive(Default)]
struct RefKey {
    holder: Option<RefHold>,
    /// (waiter, owner, ttl), first come first served.
    queue: VecDeque<(u64, u8, u64)>,
    holds: u32,
}

struct Reference {
    now: u64,
    keys: HashMap<u8, RefKey>,
    next_waiter: u64,
    grants: Vec<Grant>,
    step: usize,
}

impl Reference {
    fn new(start: u64) -> Reference {
        Reference {
            now: start,
            keys: HashMap::new(),
            next_waiter: 0,
            grants: Vec::new(),
            step: 0,
        }
    }

    /// A new hold of `owner` at `key` for `ttl` ms from now.
    fn new_hold(&mut self, key: u8, owner: u8, ttl: u64) -> HoldName {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        entry.holds += 1;
        let name = (key, entry.holds);
        entry.holder = Some(RefHold {
            owner,
            count: 1,
            name,
            expires: now + ttl,
        });
        name
    }

    /// An expired holder is gone; with `give`, a free key goes to the first waiter in line.
    fn settle(&mut self, key: u8, give: bool) {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        if entry.holder.as_ref().is_some_and(|h| h.expires < now) {
            entry.holder = None;
        }
        if give {
            self.give_to_next(key);
        }
    }

    /// The grant pass: a free key goes to its first waiter; a waiter at the head whose owner
    /// holds the key is answered as a re-acquire; anyone else waits.
    fn give_to_next(&mut self, key: u8) {
        loop {
            let now = self.now;
            let entry = self.keys.entry(key).or_default();
            let Some(&(id, owner, ttl)) = entry.queue.front() else {
                return;
            };
            let name = match &mut entry.holder {
                None => {
                    entry.queue.pop_front();
                    self.new_hold(key, owner, ttl)
                }
                Some(h) if h.owner == owner => {
                    entry.queue.pop_front();
                    h.expires = now + ttl;
                    h.name
                }
                Some(_) => return,
            };
            self.grants.push((self.step, key, id, name));
        }
    }

    /// Every free key with waiters goes to its first waiter (a wake-up is due for each).
    fn serve_all(&mut self) {
        let mut keys: Vec<u8> = self.keys.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            self.settle(key, true);
        }
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        self.step += 1;
        let now = self.now;
        match *op {
            Op::Advance { ms } => {
                self.serve_all();
                // Each lock with waiters passes on the millisecond after it expires, in time
                // order, and the new holder's lease starts then.
                let until = self.now + ms;
                loop {
                    let next = self
                        .keys
                        .iter()
                        .filter(|(_, e)| !e.queue.is_empty())
                        .filter_map(|(k, e)| e.holder.as_ref().map(|h| (h.expires + 1, *k)))
                        .filter(|(at, _)| *at <= until)
                        .min();
                    let Some((at, key)) = next else { break };
                    self.now = self.now.max(at);
                    self.settle(key, true);
                }
                self.now = until;
                None
            }
            Op::Delete { key } => {
                self.keys.entry(key).or_default().holder = None;
                None
            }
            Op::Serve => {
                self.serve_all();
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
                        Some(Out::Hold(h.name))
                    }
                    None if entry.queue.is_empty() => {
                        Some(Out::Hold(self.new_hold(key, owner, ttl)))
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
                        self.new_hold(key, owner, ttl);
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
                        Some(Out::Hold(h.name))
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
        Just(Op::Serve),
        (0u64..150).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference_model(ops in proptest::collection::vec(op(), 1..120)) {
        let start = 1_800_000_000_000;
        let mut machine = Machine::new(start);
        let mut reference = Reference::new(start);
        for (i, op) in ops.iter().enumerate() {
            let got = machine.apply(op);
            let want = reference.apply(op);
            prop_assert_eq!(&got, &want, "step {} {:?}", i, op);
            // Grants of one step may come in any order across keys.
            let mut got_grants = machine.grants.clone();
            let mut want_grants = reference.grants.clone();
            got_grants.sort_unstable();
            want_grants.sort_unstable();
            prop_assert_eq!(&got_grants, &want_grants, "grants after step {} {:?}", i, op);
        }

        // Invariants of the lock itself.
        // Every new hold's token is larger than every token before it.
        let issued = &machine.issued;
        prop_assert!(issued.windows(2).all(|w| w[0] < w[1]), "tokens {:?}", issued);
        // A waiter is granted at most once, and each key serves its waiters in queue order.
        let mut ids: Vec<u64> = machine.grants.iter().map(|g| g.2).collect();
        for key in 0..3u8 {
            let order: Vec<u64> = machine.grants.iter().filter(|g| g.1 == key).map(|g| g.2).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "key {} order {:?}", key, order);
        }
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), machine.grants.len());
        // Nobody waits once every waiter has left or been served, and no timer is left behind.
        let clients: Vec<Client> = machine.waiting.keys().copied().collect();
        for client in clients {
            machine.sim.hang_up(client);
        }
        machine.sim.advance(1_000);
        prop_assert_eq!(machine.sim.engine.waiters(), 0);
        prop_assert_eq!(machine.sim.engine.armed_timers(), 0);
        prop_assert_eq!(machine.sim.host_timers(), 0);
    }
}
