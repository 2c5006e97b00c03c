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
        /// See [`mode_of`].
        mode: u8,
    },
    Reenter {
        key: u8,
        owner: u8,
        ttl: u64,
        /// See [`mode_of`].
        mode: u8,
        /// `FROM c`: the count expected before the step.
        from: Option<u32>,
    },
    Release {
        key: u8,
        owner: u8,
        /// `FROM c`: the count expected before the step.
        from: Option<u32>,
    },
    /// A release, then, in the same step (before any answer is delivered), the `nth` client that
    /// was queued before it hangs up: if the release granted it, its answer is lost.
    ReleaseAndHangUp {
        key: u8,
        owner: u8,
        nth: usize,
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
        /// See [`mode_of`].
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
    /// `LOCK.DOWNGRADE`.
    Downgrade {
        key: u8,
        owner: u8,
    },
    /// `LOCK.MACQUIRE 2 a b owner ttl` (two different keys).
    MAcquire {
        keys: (u8, u8),
        owner: u8,
        ttl: u64,
    },
    /// `LOCK.MRELEASE 2 a b owner [FROM c]`.
    MRelease {
        keys: (u8, u8),
        owner: u8,
        from: Option<u32>,
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
    /// `LOCK.MACQUIRE`'s holds, in argument order.
    Group(Vec<HoldName>),
    /// An error that changes nothing (another mode, another limit).
    Error(String),
}

/// 0: exclusive; 1: shared without a limit; 2, 3, 4: a semaphore of 3 permits, asked for 1, 2
/// or 3 of them.
fn mode_of(mode: u8) -> Mode {
    match mode {
        0 => Mode::Exclusive,
        1 => Mode::shared(0),
        n => Mode::Shared {
            limit: 3,
            permits: u32::from(n.min(4) - 1),
        },
    }
}

/// The kinds of mode [`mode_of`] knows.
const MODES: u8 = 5;

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
    /// Holds by (key, token): a group's holds share one token.
    names: HashMap<(u8, u64), HoldName>,
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
        if let Some(name) = self.names.get(&(key, token)) {
            return *name;
        }
        let n = self.holds_per_key.entry(key).or_default();
        *n += 1;
        let name = (key, *n);
        self.names.insert((key, token), name);
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
                self.hang_up_nth(nth);
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
            } => Some(self.wait(key, owner, ttl, mode)),
            Op::Reenter {
                key,
                owner,
                ttl,
                mode,
                from,
            } => Some(self.reenter(key, owner, ttl, mode, from)),
            Op::Release { key, owner, from } => Some(count_reply(self.sim.release_from(
                &key_bytes(key),
                &owner_bytes(owner),
                from,
            ))),
            Op::ReleaseAndHangUp { key, owner, nth } => {
                Some(self.release_and_hang_up(key, owner, nth))
            }
            Op::Force { key } => Some(count_reply(self.sim.force_release(&key_bytes(key)))),
            Op::Downgrade { key, owner } => {
                let reply = self.sim.downgrade(&key_bytes(key), &owner_bytes(owner));
                Some(self.token_reply(key, reply))
            }
            Op::MAcquire { keys, owner, ttl } => Some(self.macquire(keys, owner, ttl)),
            Op::MRelease {
                keys: (a, b),
                owner,
                from,
            } => {
                let (a, b) = (key_bytes(a), key_bytes(b));
                Some(count_reply(self.sim.mrelease_from(
                    &[&a, &b],
                    &owner_bytes(owner),
                    from,
                )))
            }
        };
        self.deliver();
        out
    }

    /// `LOCK.MACQUIRE`: the new holds of a grant share one token, above every earlier one.
    fn macquire(&mut self, (a, b): (u8, u8), owner: u8, ttl: u64) -> Out {
        let (ka, kb) = (key_bytes(a), key_bytes(b));
        match self.sim.macquire(&[&ka, &kb], &owner_bytes(owner), ttl) {
            Reply::Tokens(tokens) => {
                let fresh: Vec<u64> = [a, b]
                    .iter()
                    .zip(&tokens)
                    .filter(|(key, token)| !self.names.contains_key(&(**key, **token)))
                    .map(|(_, token)| *token)
                    .collect();
                assert!(
                    fresh.windows(2).all(|w| w[0] == w[1]),
                    "one token per group grant: {tokens:?}"
                );
                let before = self.issued.iter().copied().max().unwrap_or(0);
                assert!(fresh.iter().all(|t| *t > before), "a group's token is new");
                let names = [a, b]
                    .iter()
                    .zip(tokens)
                    .map(|(key, token)| self.name(*key, token))
                    .collect();
                Out::Group(names)
            }
            other => count_reply(other),
        }
    }

    /// The answers of this step reach their clients.
    fn deliver(&mut self) {
        for (client, outcome) in self.sim.deliver() {
            let Some((waiter, key)) = self.waiting.remove(&client) else {
                continue;
            };
            if let Outcome::Token(token) = outcome {
                let name = self.name(key, token);
                self.grants.push((self.step, key, waiter, name));
            }
        }
    }

    /// The `nth` client that waited (or was answered and not yet told) hangs up.
    fn hang_up_nth(&mut self, nth: usize) {
        let clients: Vec<Client> = self.waiting.keys().copied().collect();
        if let Some(&client) = clients.get(nth % clients.len().max(1)) {
            self.waiting.remove(&client);
            self.sim.hang_up(client);
        }
    }

    fn wait(&mut self, key: u8, owner: u8, ttl: u64, mode: u8) -> Out {
        let (reply, client) =
            self.sim
                .wait_as(&key_bytes(key), &owner_bytes(owner), ttl, 0, mode_of(mode));
        if reply == Reply::Blocked {
            self.next_waiter += 1;
            self.waiting.insert(client, (self.next_waiter, key));
            Out::Queued(self.next_waiter)
        } else {
            self.token_reply(key, reply)
        }
    }

    fn reenter(&mut self, key: u8, owner: u8, ttl: u64, mode: u8, from: Option<u32>) -> Out {
        let reply = self.sim.reenter_from(
            &key_bytes(key),
            &owner_bytes(owner),
            ttl,
            mode_of(mode),
            from,
        );
        // A new hold, or a repeat of the step that made it (named already).
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
        count_reply(reply)
    }

    fn release_and_hang_up(&mut self, key: u8, owner: u8, nth: usize) -> Out {
        let reply = self.sim.release(&key_bytes(key), &owner_bytes(owner));
        // Holds are named in the order they were granted, the lost answer's included.
        let given: Vec<(u8, u64)> = self
            .sim
            .pending()
            .iter()
            .filter_map(|(client, outcome)| match outcome {
                Outcome::Token(token) => Some((self.waiting.get(client)?.1, *token)),
                _ => None,
            })
            .collect();
        for (key, token) in given {
            self.name(key, token);
        }
        self.hang_up_nth(nth);
        count_reply(reply)
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
        Reply::Error(super::errors::LockError::Refused(
            super::errors::Refusal::ReentrancyLimit,
        )) => Out::Limit,
        Reply::Error(e) => Out::Error(e.text().into_owned()),
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
    /// The semaphore's permits it holds (1 otherwise).
    permits: u32,
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
            Mode::Shared { limit, .. } => Some(*limit),
            Mode::Exclusive => None,
        })
    }

    /// Whether a request in `mode` would be granted now if nobody waited: the permits of the
    /// holds sum to at most the limit.
    fn room(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => self.holders.is_empty(),
            Mode::Shared { limit, permits } => {
                let used: u32 = self.holders.iter().map(|h| h.permits).sum();
                self.holders.is_empty()
                    || (self.shared
                        && self.limit == limit
                        && (limit == 0 || used + permits <= limit))
            }
        }
    }

    /// Whether `owner` holds the key with other permits than `mode` asks for.
    fn other_permits(&self, owner: u8, mode: Mode) -> bool {
        match mode {
            Mode::Shared { permits, .. } => self
                .holders
                .iter()
                .any(|h| h.owner == owner && self.shared && h.permits != permits),
            Mode::Exclusive => false,
        }
    }
}

const OTHER_MODE: &str =
    "ERR lock is held in another mode (to go from exclusive to shared, use LOCK.DOWNGRADE)";

fn other_limit(limit: u32) -> String {
    format!("ERR lock has another limit ({limit})")
}

const OTHER_PERMITS: &str = "ERR lock is held with other permits";

struct Reference {
    now: u64,
    keys: HashMap<u8, RefKey>,
    next_waiter: u64,
    grants: Vec<Grant>,
    step: usize,
    /// Holds granted to a waiter in the current step (not re-acquires).
    granted_new: Vec<HoldName>,
    /// The waiter that hung up in the current step.
    hung_up: Option<u64>,
    /// Holds every answer of which was lost, and that no command of their owner confirmed: the
    /// revoke runs with the next deferred work.
    revoking: Vec<HoldName>,
}

impl Reference {
    fn new(start: u64) -> Reference {
        Reference {
            now: start,
            keys: HashMap::new(),
            next_waiter: 0,
            grants: Vec::new(),
            step: 0,
            granted_new: Vec::new(),
            hung_up: None,
            revoking: Vec::new(),
        }
    }

    /// The owner acted on its hold `name`: it knows of it, nothing revokes it.
    fn confirm(&mut self, name: HoldName) {
        self.revoking.retain(|n| *n != name);
    }

    /// The deferred revokes: each hold still there ends, and its key's queue moves on.
    fn run_revokes(&mut self) {
        for name in std::mem::take(&mut self.revoking) {
            let key = name.0;
            let entry = self.keys.entry(key).or_default();
            let before = entry.holders.len();
            entry.holders.retain(|h| h.name != name);
            if entry.holders.len() < before {
                self.give_to_next(key);
            }
        }
    }

    /// After a step in which waiter `lost` hung up before its answer: a hold it was granted new
    /// whose every answer of this step was lost is revoked later.
    fn answers_lost(&mut self, lost: u64) {
        let step = self.step;
        let mine: Vec<HoldName> = self
            .grants
            .iter()
            .filter(|g| g.0 == step && g.2 == lost)
            .map(|g| g.3)
            .collect();
        for name in mine {
            let delivered = self
                .grants
                .iter()
                .any(|g| g.0 == step && g.2 != lost && g.3 == name);
            if self.granted_new.contains(&name) && !delivered {
                self.revoking.push(name);
            }
        }
        // Nobody received it: not a grant anyone saw.
        self.grants.retain(|g| !(g.0 == step && g.2 == lost));
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
                Mode::Shared { limit, .. } => limit,
                Mode::Exclusive => 1,
            };
        }
        entry.holders.push(RefHold {
            owner,
            count: 1,
            name,
            expires: now + ttl,
            permits: match mode {
                Mode::Shared { permits, .. } => permits,
                Mode::Exclusive => 1,
            },
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
            if let (Mode::Shared { limit, .. }, true) =
                (mode, entry.shared && !entry.holders.is_empty())
            {
                if entry.limit != limit {
                    entry.queue.pop_front();
                    continue;
                }
            }
            if entry.other_permits(owner, mode) {
                entry.queue.pop_front();
                continue;
            }
            let name = if holds_it {
                let h = entry.held_by(owner).expect("held");
                h.expires = now + ttl;
                let name = h.name;
                entry.queue.pop_front();
                name
            } else if entry.room(mode) {
                entry.queue.pop_front();
                let name = self.new_hold(key, owner, ttl, mode);
                self.granted_new.push(name);
                name
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
        if let Mode::Shared { limit, .. } = mode {
            if let Some(l) = entry.limit().filter(|l| *l != limit) {
                return Some(Out::Error(other_limit(l)));
            }
        }
        if entry.other_permits(owner, mode) {
            return Some(Out::Error(OTHER_PERMITS.into()));
        }
        None
    }

    fn apply(&mut self, op: &Op) -> Option<Out> {
        self.step += 1;
        self.granted_new.clear();
        let out = self.apply_op(op);
        // Answers of this step are delivered now, except to a client that hung up: a delivered
        // answer confirms the hold it carries.
        let lost = match *op {
            Op::ReleaseAndHangUp { .. } => self.hung_up.take(),
            _ => None,
        };
        let step = self.step;
        let delivered: Vec<HoldName> = self
            .grants
            .iter()
            .filter(|g| g.0 == step && Some(g.2) != lost)
            .map(|g| g.3)
            .collect();
        for name in delivered {
            self.confirm(name);
        }
        if let Some(lost) = lost {
            self.answers_lost(lost);
        }
        out
    }

    fn apply_op(&mut self, op: &Op) -> Option<Out> {
        let now = self.now;
        match *op {
            Op::Advance { ms } => self.advance(ms),
            Op::Delete { key } => {
                self.keys.entry(key).or_default().holders.clear();
                None
            }
            Op::Serve => {
                self.run_revokes();
                self.serve_all();
                None
            }
            Op::ReleaseAndHangUp { key, owner, nth } => self.release_and_hang_up(key, owner, nth),
            Op::Leave { nth } => self.leave(nth),
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
                ..
            } => self.take(op, key, owner, ttl, mode),
            Op::Release { key, owner, from } => self.release(key, owner, from),
            Op::Renew { key, owner, ttl } => self.renew(key, owner, ttl, now),
            Op::Force { key } => self.force(key),
            Op::Downgrade { key, owner } => self.downgrade(key, owner),
            Op::MAcquire { keys, owner, ttl } => self.macquire(keys, owner, ttl),
            Op::MRelease {
                keys: (a, b),
                owner,
                from,
            } => {
                // A key off the step refuses the whole group before any key changes.
                if let Some(c) = from {
                    for key in [a, b] {
                        self.settle_for_command(key);
                        let entry = self.keys.entry(key).or_default();
                        if let Some(h) = entry.held_by(owner) {
                            if let Some(error) = release_mismatch(h.count, c) {
                                return Some(error);
                            }
                        }
                    }
                }
                let held = [a, b]
                    .iter()
                    .filter(|key| self.release(**key, owner, from) != Some(Out::Nil))
                    .count();
                Some(Out::Integer(held as u64))
            }
        }
    }

    /// `LOCK.DOWNGRADE`: the exclusive hold becomes a shared one without limit, and the shared
    /// heads are granted with it.
    fn downgrade(&mut self, key: u8, owner: u8) -> Option<Out> {
        self.settle_for_command(key);
        let entry = self.keys.entry(key).or_default();
        let (shared, limit) = (entry.shared, entry.limit);
        let Some(h) = entry.held_by(owner) else {
            return Some(Out::Nil);
        };
        let name = h.name;
        if shared && limit != 0 {
            return Some(Out::Error(other_limit(limit)));
        }
        // A queued semaphore request set the key's limit: no read lock can be made.
        if let Some(queued) = entry.limit().filter(|l| !shared && *l != 0) {
            return Some(Out::Error(other_limit(queued)));
        }
        self.confirm(name);
        if !shared {
            let entry = self.keys.entry(key).or_default();
            entry.shared = true;
            entry.limit = 0;
            self.give_to_next(key);
        }
        Some(Out::Hold(name))
    }

    /// `LOCK.MACQUIRE` of two keys: exclusive holds on both or on neither.
    fn macquire(&mut self, (a, b): (u8, u8), owner: u8, ttl: u64) -> Option<Out> {
        let now = self.now;
        let mut taken = false;
        for key in [a, b] {
            self.settle_for_command(key);
            if let Some(error) = self.conflict(key, owner, Mode::Exclusive) {
                return Some(error);
            }
            let entry = self.keys.entry(key).or_default();
            let mine = entry.held_by(owner).is_some();
            let free = entry.queue.is_empty() && entry.room(Mode::Exclusive);
            if !mine && !free {
                taken = true;
            }
        }
        if taken {
            return Some(Out::Nil);
        }
        let mut names = Vec::new();
        for key in [a, b] {
            let entry = self.keys.entry(key).or_default();
            let name = match entry.held_by(owner) {
                Some(h) => {
                    h.expires = now + ttl;
                    let name = h.name;
                    self.confirm(name);
                    name
                }
                None => self.new_hold(key, owner, ttl, Mode::Exclusive),
            };
            names.push(name);
        }
        Some(Out::Group(names))
    }

    /// Time passes: every key with waiters is served, then each lock with waiters passes on the
    /// millisecond after its first hold expires, in time order.
    fn advance(&mut self, ms: u64) -> Option<Out> {
        self.run_revokes();
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

    fn release_and_hang_up(&mut self, key: u8, owner: u8, nth: usize) -> Option<Out> {
        let mut ids: Vec<u64> = self
            .keys
            .values()
            .flat_map(|e| e.queue.iter().map(|(id, ..)| *id))
            .collect();
        ids.sort_unstable();
        let out = self.apply_op(&Op::Release {
            key,
            owner,
            from: None,
        });
        if let Some(&id) = ids.get(nth % ids.len().max(1)) {
            self.hung_up = Some(id);
            for entry in self.keys.values_mut() {
                entry.queue.retain(|(w, ..)| *w != id);
            }
        }
        out
    }

    fn leave(&mut self, nth: usize) -> Option<Out> {
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

    /// `LOCK.ACQUIRE`, `LOCK.WAIT` or `LOCK.REENTER`.
    fn take(&mut self, op: &Op, key: u8, owner: u8, ttl: u64, mode: u8) -> Option<Out> {
        let now = self.now;
        let mode = mode_of(mode);
        let (reenter, from) = match *op {
            Op::Reenter { from, .. } => (true, from),
            _ => (false, None),
        };
        self.settle_for_command(key);
        if let Some(error) = self.conflict(key, owner, mode) {
            return Some(error);
        }
        let entry = self.keys.entry(key).or_default();
        if let (Some(h), Some(c)) = (entry.held_by(owner), from) {
            let c = u64::from(c);
            if h.count == c + 1 {
                // A repeat of the step: its answer again, nothing changes.
                let (count, name) = (h.count, h.name);
                self.confirm(name);
                return Some(Out::Integer(count));
            }
            if h.count != c {
                return Some(Out::Error(format!(
                    "ERR hold count is {}, not {c}",
                    h.count
                )));
            }
        }
        let entry = self.keys.entry(key).or_default();
        if from.is_some_and(|c| c >= 1) && entry.held_by(owner).is_none() {
            // The outer hold is gone: never a fresh one.
            return Some(Out::Nil);
        }
        if let Some(h) = entry.held_by(owner) {
            if reenter {
                if h.count == u64::from(u32::MAX) {
                    return Some(Out::Limit);
                }
                h.count += 1;
            }
            h.expires = now + ttl;
            let (count, name) = (h.count, h.name);
            self.confirm(name);
            return Some(if reenter {
                Out::Integer(count)
            } else {
                Out::Hold(name)
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

    fn release(&mut self, key: u8, owner: u8, from: Option<u32>) -> Option<Out> {
        self.settle_for_command(key);
        let entry = self.keys.entry(key).or_default();
        let Some(h) = entry.held_by(owner) else {
            return Some(Out::Nil);
        };
        if let Some(c) = from {
            if h.count + 1 == u64::from(c) {
                // A repeat of the step: its answer again, nothing changes.
                let (count, name) = (h.count, h.name);
                self.confirm(name);
                return Some(Out::Integer(count));
            }
            if let Some(error) = release_mismatch(h.count, c) {
                return Some(error);
            }
        }
        h.count -= 1;
        let (left, name) = (h.count, h.name);
        self.confirm(name);
        let entry = self.keys.entry(key).or_default();
        if left == 0 {
            entry.holders.retain(|h| h.owner != owner);
            self.give_to_next(key);
        }
        Some(Out::Integer(left))
    }

    fn renew(&mut self, key: u8, owner: u8, ttl: u64, now: u64) -> Option<Out> {
        self.settle_for_command(key);
        let entry = self.keys.entry(key).or_default();
        match entry.held_by(owner) {
            Some(h) => {
                h.expires = now + ttl;
                let name = h.name;
                self.confirm(name);
                Some(Out::Hold(name))
            }
            None => Some(Out::Nil),
        }
    }

    fn force(&mut self, key: u8) -> Option<Out> {
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

/// The error of a release `FROM c` on a hold at `count`: neither the step (count c) nor its
/// repeat (count c - 1).
fn release_mismatch(count: u64, c: u32) -> Option<Out> {
    let c = u64::from(c);
    (count != c && count + 1 != c)
        .then(|| Out::Error(format!("ERR hold count is {count}, not {c}")))
}

// ---------------------------------------------------------------------------------------------

/// Operations on `keys` keys by `owners` owners; hand-offs (waits, and releases with a hang-up
/// in the same step) weigh `handoffs` times as much as each other kind.
fn op(keys: u8, owners: u8, handoffs: u32) -> impl Strategy<Value = Op> {
    let key = 0u8..keys;
    let owner = 0u8..owners;
    let ttl = 1u64..200;
    prop_oneof![
        1 => (key.clone(), owner.clone(), ttl.clone(), 0u8..MODES).prop_map(|(key, owner, ttl, mode)| {
            Op::Acquire {
                key,
                owner,
                ttl,
                mode,
            }
        }),
        1 => (key.clone(), owner.clone(), ttl.clone(), 0u8..MODES, proptest::option::of(0u32..4)).prop_map(|(key, owner, ttl, mode, from)| {
            Op::Reenter {
                key,
                owner,
                ttl,
                mode,
                from,
            }
        }),
        1 => (key.clone(), owner.clone(), proptest::option::of(1u32..4)).prop_map(|(key, owner, from)| Op::Release { key, owner, from }),
        handoffs => (key.clone(), owner.clone(), 0usize..8)
            .prop_map(|(key, owner, nth)| Op::ReleaseAndHangUp { key, owner, nth }),
        1 => (key.clone(), owner.clone(), ttl.clone()).prop_map(|(key, owner, ttl)| Op::Renew {
            key,
            owner,
            ttl
        }),
        1 => key.clone().prop_map(|key| Op::Force { key }),
        handoffs => (key.clone(), owner.clone(), ttl.clone(), 0u8..MODES).prop_map(|(key, owner, ttl, mode)| Op::Wait {
            key,
            owner,
            ttl,
            mode
        }),
        1 => (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Downgrade { key, owner }),
        1 => (key.clone(), 1..keys.max(2), owner.clone(), ttl).prop_map(move |(a, step, owner, ttl)| {
            Op::MAcquire { keys: (a, (a + step) % keys.max(2)), owner, ttl }
        }),
        1 => (key, 1..keys.max(2), owner, proptest::option::of(1u32..4)).prop_map(move |(a, step, owner, from)| {
            Op::MRelease { keys: (a, (a + step) % keys.max(2)), owner, from }
        }),
        1 => (0usize..8).prop_map(|nth| Op::Leave { nth }),
        1 => (0u8..keys).prop_map(|key| Op::Delete { key }),
        1 => Just(Op::Serve),
        1 => (0u64..150).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Runs `ops` on the engine and on the reference; they must agree at every step, and the
/// lock's invariants must hold after.
fn check(ops: &[Op]) -> Result<(), TestCaseError> {
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
        prop_assert_eq!(
            &got_grants,
            &want_grants,
            "grants after step {} {:?}",
            i,
            op
        );
        // A semaphore's live holds never hold more permits than its limit.
        let now = machine.sim.now();
        for key in 0..3u8 {
            if let Some((shared, _)) = machine.sim.shared(&key_bytes(key)) {
                let limit = u64::from(shared.limit());
                prop_assert!(
                    limit == 0 || shared.live_permits(now) <= limit,
                    "key {} holds {} permits of {} after step {} {:?}",
                    key,
                    shared.live_permits(now),
                    limit,
                    i,
                    op
                );
            }
        }
        // A lease not yet removed is ended by a timer, lapsed or not: the key's lapse timer,
        // armed for no later than the millisecond after its first lease ends, unless every
        // lease ends together and the key's expiry (this host is a master) is that end, so
        // that Redis ends the key. Checked when nothing is queued for now (the step's jobs
        // may still arm it).
        if machine.sim.next_timer_due().is_none_or(|due| due > now) {
            for key in 0..3u8 {
                let Some((shared, expiry)) = machine.sim.shared(&key_bytes(key)) else {
                    continue;
                };
                let Some((first, _)) = shared.first_lease_end() else {
                    continue;
                };
                let ends_with_key = shared.last_lease_end() == Some(first) && expiry == Some(first);
                let timer = machine.sim.engine.lapse_timer_at(0, &key_bytes(key));
                prop_assert!(
                    ends_with_key || timer.is_some_and(|at| at <= first + 1),
                    "key {}: first lease ends {} (last {:?}, key expiry {:?}), lapse timer {:?}, after step {} {:?}",
                    key,
                    first,
                    shared.last_lease_end(),
                    expiry,
                    timer,
                    i,
                    op
                );
            }
        }
    }

    // Invariants of the lock itself.
    // Every new hold's token is larger than every token before it (the holds of one group
    // grant share one: checked where they are granted).
    let issued = &machine.issued;
    prop_assert!(
        issued.windows(2).all(|w| w[0] <= w[1]),
        "tokens {:?}",
        issued
    );
    // A waiter is granted at most once, and each key serves its waiters in queue order.
    let mut ids: Vec<u64> = machine.grants.iter().map(|g| g.2).collect();
    for key in 0..3u8 {
        let order: Vec<u64> = machine
            .grants
            .iter()
            .filter(|g| g.1 == key)
            .map(|g| g.2)
            .collect();
        prop_assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "key {} order {:?}",
            key,
            order
        );
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
    Ok(())
}

/// `default`, unless `PROPTEST_CASES` asks for another number.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

proptest! {
    // 512 cases a run; `PROPTEST_CASES=n` for a longer hunt.
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference_model(ops in proptest::collection::vec(op(3, 4, 1), 1..120)) {
        check(&ops)?;
    }

    /// One key and two owners: the same owner often waits on two connections, so a hand-off
    /// answers one as a new grant and the other as a re-acquire, and a hang-up in the same
    /// step loses one of the two answers.
    #[test]
    fn one_key_two_owners_matches_reference_model(ops in proptest::collection::vec(op(1, 2, 4), 1..80)) {
        check(&ops)?;
    }
}

/// The case the one-key run exists for, spelled out: the new grant's connection hangs up in the
/// step that granted it, the re-acquire answer of the same owner's other connection is delivered,
/// and the hold must survive the deferred work.
#[test]
fn a_lost_new_grant_beside_a_delivered_reacquire_keeps_the_hold() {
    let ops = [
        Op::Acquire {
            key: 0,
            owner: 0,
            ttl: 100,
            mode: 0,
        },
        Op::Wait {
            key: 0,
            owner: 1,
            ttl: 100,
            mode: 0,
        },
        Op::Wait {
            key: 0,
            owner: 1,
            ttl: 100,
            mode: 0,
        },
        Op::ReleaseAndHangUp {
            key: 0,
            owner: 0,
            nth: 0,
        },
        Op::Serve,
        Op::Acquire {
            key: 0,
            owner: 0,
            ttl: 100,
            mode: 0,
        },
        Op::Release {
            key: 0,
            owner: 1,
            from: None,
        },
    ];
    check(&ops).unwrap();
}

/// A reader granted in a step whose answer was lost downgrades (already shared: its token):
/// the owner acted on its hold, so the deferred revoke must not end it.
#[test]
fn a_downgrade_of_a_lost_shared_grant_keeps_the_hold() {
    let ops = [
        Op::Wait {
            key: 0,
            owner: 0,
            ttl: 1,
            mode: 0,
        },
        Op::Wait {
            key: 0,
            owner: 1,
            ttl: 1,
            mode: 1,
        },
        Op::ReleaseAndHangUp {
            key: 0,
            owner: 0,
            nth: 0,
        },
        Op::Downgrade { key: 0, owner: 1 },
        Op::Serve,
        Op::ReleaseAndHangUp {
            key: 0,
            owner: 1,
            nth: 0,
        },
    ];
    check(&ops).unwrap();
}
