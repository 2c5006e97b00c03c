//! Model-based tests: random operation sequences, with time steps, run on the engine itself (on
//! the in-memory host, driven as Redis drives it) and on a naive reference model written
//! straight from the command contract. Both must give the same replies and grant the same
//! waiters the same holds, and the invariants of a lock must hold.

use std::collections::{BTreeMap, HashMap, VecDeque};

use proptest::prelude::*;

use super::engine::Reply;
use super::host::Outcome;
use super::memory::{Client, Sim};
use super::Mode;

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: u8,
        owner: u8,
        ttl: u64,
        /// 0: exclusive, 1: shared without a limit, 2: shared with limit 2.
        mode: u8,
    },
    Reenter {
        key: u8,
        owner: u8,
        ttl: u64,
        /// 0: exclusive, 1: shared without a limit, 2: shared with limit 2.
        mode: u8,
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
        /// 0: exclusive, 1: shared without a limit, 2: shared with limit 2.
        mode: u8,
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
    /// An error that changes nothing (another mode, another limit).
    Error(String),
}

fn mode_of(mode: u8) -> Mode {
    match mode {
        0 => Mode::Exclusive,
        1 => Mode::Shared { limit: 0 },
        _ => Mode::Shared { limit: 2 },
    }
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
            Op::Acquire {
                key,
                owner,
                ttl,
                mode,
            } => {
                let reply =
                    self.sim
                        .acquire_as(&key_bytes(key), &owner_bytes(owner), ttl, mode_of(mode));
                Some(self.token_reply(key, reply))
            }
            Op::Renew { key, owner, ttl } => {
                let reply = self.sim.renew(&key_bytes(key), &owner_bytes(owner), ttl);
                Some(self.token_reply(key, reply))
            }
            Op::Wait {
                key,
                owner,
                ttl,
                mode,
            } => {
                let (reply, client) =
                    self.sim
                        .wait_as(&key_bytes(key), &owner_bytes(owner), ttl, 0, mode_of(mode));
                if reply == Reply::Blocked {
                    self.next_waiter += 1;
                    self.waiting.insert(client, (self.next_waiter, key));
                    Some(Out::Queued(self.next_waiter))
                } else {
                    Some(self.token_reply(key, reply))
                }
            }
            Op::Reenter {
                key,
                owner,
                ttl,
                mode,
            } => {
                let reply =
                    self.sim
                        .reenter_as(&key_bytes(key), &owner_bytes(owner), ttl, mode_of(mode));
                if reply == Reply::Integer(1) {
                    // A new hold: name it by its token.
                    if let Reply::Holders(list) =
                        self.sim
                            .holders(&key_bytes(key), Some(&owner_bytes(owner)), 0)
                    {
                        if let Some(h) = list.first() {
                            self.name(key, h.token);
                        }
                    }
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
        Reply::Error(e) => Out::Error(e.into_owned()),
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
    /// Its holds in grant order: one for an exclusive lock, any number for a shared key.
    holders: Vec<RefHold>,
    /// The mode of the holds.
    shared: bool,
    limit: u32,
    /// (waiter, owner, ttl, mode), first come first served.
    queue: VecDeque<(u64, u8, u64, Mode)>,
    holds: u32,
}

impl RefKey {
    fn held_by(&mut self, owner: u8) -> Option<&mut RefHold> {
        self.holders.iter_mut().find(|h| h.owner == owner)
    }

    /// The limit a shared request must have: the shared holders', else the shared waiters'.
    fn limit(&self) -> Option<u32> {
        if self.shared && !self.holders.is_empty() {
            return Some(self.limit);
        }
        self.queue.iter().find_map(|(_, _, _, m)| match m {
            Mode::Shared { limit } => Some(*limit),
            Mode::Exclusive => None,
        })
    }

    /// Whether a request in `mode` would be granted now if nobody waited.
    fn room(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.holders.is_empty(),
            Mode::Shared { limit } => {
                self.holders.is_empty()
                    || (self.shared
                        && self.limit == limit
                        && (limit == 0 || self.holders.len() < limit as usize))
            }
        }
    }
}

const OTHER_MODE: &str = "ERR lock is held in another mode";

fn other_limit(limit: u32) -> String {
    format!("ERR lock has another limit ({limit})")
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
    fn new_hold(&mut self, key: u8, owner: u8, ttl: u64, mode: Mode) -> HoldName {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        entry.holds += 1;
        let name = (key, entry.holds);
        if entry.holders.is_empty() {
            entry.shared = mode != Mode::Exclusive;
            entry.limit = match mode {
                Mode::Shared { limit } => limit,
                Mode::Exclusive => 1,
            };
        }
        entry.holders.push(RefHold {
            owner,
            count: 1,
            name,
            expires: now + ttl,
        });
        name
    }

    /// Expired holds are gone; with `give`, the grant pass runs.
    fn settle(&mut self, key: u8, give: bool) {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        entry.holders.retain(|h| h.expires >= now);
        if give {
            self.give_to_next(key);
        }
    }

    /// What a command does first: expired holds are gone; a shared key that lost some passes
    /// its queue on at once (an exclusive one is served by the wake-up after the command).
    fn settle_for_command(&mut self, key: u8) {
        let now = self.now;
        let entry = self.keys.entry(key).or_default();
        let before = entry.holders.len();
        entry.holders.retain(|h| h.expires >= now);
        if entry.shared && entry.holders.len() < before {
            self.give_to_next(key);
        }
    }

    /// The grant pass: strictly in queue order while the key allows; a head whose owner holds
    /// the key is a re-acquire; one that can never be granted as asked is failed.
    fn give_to_next(&mut self, key: u8) {
        loop {
            let now = self.now;
            let entry = self.keys.entry(key).or_default();
            let Some(&(id, owner, ttl, mode)) = entry.queue.front() else {
                return;
            };
            let holds_it = entry.holders.iter().any(|h| h.owner == owner);
            let same_mode = entry.holders.is_empty() || entry.shared == (mode != Mode::Exclusive);
            if holds_it && !same_mode {
                entry.queue.pop_front();
                continue;
            }
            if let (Mode::Shared { limit }, true) =
                (mode, entry.shared && !entry.holders.is_empty())
            {
                if entry.limit != limit {
                    entry.queue.pop_front();
                    continue;
                }
            }
            let name = if holds_it {
                let h = entry.held_by(owner).expect("held");
                h.expires = now + ttl;
                let name = h.name;
                entry.queue.pop_front();
                name
            } else if entry.room(mode) {
                entry.queue.pop_front();
                self.new_hold(key, owner, ttl, mode)
            } else {
                return;
            };
            self.grants.push((self.step, key, id, name));
        }
    }

    /// Every key with waiters gets a grant pass (a wake-up is due for each).
    fn serve_all(&mut self) {
        let mut keys: Vec<u8> = self.keys.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            self.settle(key, true);
        }
    }

    /// Mode and limit errors: a request that can never be granted as asked.
    fn conflict(&mut self, key: u8, owner: u8, mode: Mode) -> Option<Out> {
        let entry = self.keys.entry(key).or_default();
        let holds_it = entry.holders.iter().any(|h| h.owner == owner);
        if holds_it && entry.shared != (mode != Mode::Exclusive) {
            return Some(Out::Error(OTHER_MODE.into()));
        }
        if let Mode::Shared { limit } = mode {
            if let Some(l) = entry.limit().filter(|l| *l != limit) {
                return Some(Out::Error(other_limit(l)));
            }
        }
        None
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        self.step += 1;
        let now = self.now;
        match *op {
            Op::Advance { ms } => {
                self.serve_all();
                // Each lock with waiters passes on the millisecond after its first hold
                // expires, in time order, and the new holders' leases start then.
                let until = self.now + ms;
                loop {
                    let next = self
                        .keys
                        .iter()
                        .filter(|(_, e)| !e.queue.is_empty())
                        .filter_map(|(k, e)| {
                            e.holders
                                .iter()
                                .map(|h| h.expires + 1)
                                .min()
                                .map(|at| (at, *k))
                        })
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
                self.keys.entry(key).or_default().holders.clear();
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
                    .flat_map(|(k, e)| e.queue.iter().map(move |(id, ..)| (*id, *k)))
                    .collect();
                ids.sort_unstable();
                if let Some(&(id, key)) = ids.get(nth % ids.len().max(1)) {
                    self.keys
                        .entry(key)
                        .or_default()
                        .queue
                        .retain(|(w, ..)| *w != id);
                }
                None
            }
            Op::Acquire {
                key,
                owner,
                ttl,
                mode,
            }
            | Op::Wait {
                key,
                owner,
                ttl,
                mode,
            }
            | Op::Reenter {
                key,
                owner,
                ttl,
                mode,
            } => {
                let mode = mode_of(mode);
                let reenter = matches!(op, Op::Reenter { .. });
                self.settle_for_command(key);
                if let Some(error) = self.conflict(key, owner, mode) {
                    return Some(error);
                }
                let entry = self.keys.entry(key).or_default();
                if let Some(h) = entry.held_by(owner) {
                    if reenter {
                        if h.count == u64::from(u32::MAX) {
                            return Some(Out::Limit);
                        }
                        h.count += 1;
                    }
                    h.expires = now + ttl;
                    return Some(if reenter {
                        Out::Integer(h.count)
                    } else {
                        Out::Hold(h.name)
                    });
                }
                if entry.queue.is_empty() && entry.room(mode) {
                    let name = self.new_hold(key, owner, ttl, mode);
                    return Some(if reenter {
                        Out::Integer(1)
                    } else {
                        Out::Hold(name)
                    });
                }
                if matches!(op, Op::Wait { .. }) {
                    self.next_waiter += 1;
                    let id = self.next_waiter;
                    entry.queue.push_back((id, owner, ttl, mode));
                    return Some(Out::Queued(id));
                }
                Some(Out::Nil)
            }
            Op::Release { key, owner } => {
                self.settle_for_command(key);
                let entry = self.keys.entry(key).or_default();
                let Some(h) = entry.held_by(owner) else {
                    return Some(Out::Nil);
                };
                h.count -= 1;
                let left = h.count;
                if left == 0 {
                    entry.holders.retain(|h| h.owner != owner);
                    self.give_to_next(key);
                }
                Some(Out::Integer(left))
            }
            Op::Renew { key, owner, ttl } => {
                self.settle_for_command(key);
                let entry = self.keys.entry(key).or_default();
                match entry.held_by(owner) {
                    Some(h) => {
                        h.expires = now + ttl;
                        Some(Out::Hold(h.name))
                    }
                    None => Some(Out::Nil),
                }
            }
            Op::Force { key } => {
                self.settle_for_command(key);
                let entry = self.keys.entry(key).or_default();
                let ended = entry.holders.len() as u64;
                entry.holders.clear();
                if ended > 0 {
                    self.give_to_next(key);
                }
                Some(Out::Integer(ended))
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
        (key.clone(), owner.clone(), ttl.clone(), 0u8..3).prop_map(|(key, owner, ttl, mode)| {
            Op::Acquire {
                key,
                owner,
                ttl,
                mode,
            }
        }),
        (key.clone(), owner.clone(), ttl.clone(), 0u8..3).prop_map(|(key, owner, ttl, mode)| {
            Op::Reenter {
                key,
                owner,
                ttl,
                mode,
            }
        }),
        (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Release { key, owner }),
        (key.clone(), owner.clone(), ttl.clone()).prop_map(|(key, owner, ttl)| Op::Renew {
            key,
            owner,
            ttl
        }),
        key.clone().prop_map(|key| Op::Force { key }),
        (key, owner, ttl, 0u8..3).prop_map(|(key, owner, ttl, mode)| Op::Wait {
            key,
            owner,
            ttl,
            mode
        }),
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
