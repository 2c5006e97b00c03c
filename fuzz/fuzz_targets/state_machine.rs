//! The lock engine itself (the code that runs inside Redis), on the in-memory host, driven by
//! arbitrary sequences of commands (exclusive, shared, several permits, downgrades, groups of
//! keys), waits, hang-ups, deletes, time steps and server states.
//! Checks after every step: tokens only rise (a group's new holds share one), counts stay >= 1,
//! a semaphore's holds never hold more permits than its limit, nobody barges past a queue,
//! each key serves its waiters first come first served, a granted waiter holds the lock, a hold
//! some client was told of is never lost before its lease ends unless a command ended it (a
//! hang-up may revoke only a hold no answer reached), every blocked client is answered at most
//! once (the host asserts it), and once everyone has left nothing is left waiting and no timer is
//! left armed.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use relock_engine::memory::Sim;
use relock_engine::{KeyRef, Mode, Outcome, Reply, State};

const OWNERS: [&[u8]; 4] = [b"a", b"b", b"\x00\xff", b"dddddddddddddddddddddddddddddddddddd"];
const KEYS: [&[u8]; 2] = [b"k0", b"k1"];

fuzz_target!(|data: &[u8]| {
    let mut sim = Sim::new(1_800_000_000_000);
    let mut last_token = 0u64;
    // Blocked client -> (key, owner, ttl).
    let mut waiting: HashMap<u64, (usize, &'static [u8], u64)> = HashMap::new();
    // (key, owner) -> (token, earliest possible lease end) of holds a client was told of.
    let mut told: HashMap<(usize, &'static [u8]), (u64, i64)> = HashMap::new();
    // Per key, the last client granted (clients are numbered in the order they waited).
    let mut last_granted: [u64; 2] = [0, 0];
    let mut order: Vec<u64> = Vec::new();

    for chunk in data.chunks(3) {
        let op = chunk[0];
        let arg = chunk.get(1).copied().unwrap_or(0);
        let more = chunk.get(2).copied().unwrap_or(0);
        let k = usize::from(arg & 1);
        let key = KEYS[k];
        let who = OWNERS[usize::from(arg >> 1) % OWNERS.len()];
        let ttl = u64::from(more) * 4 + 1;
        let mode = match more % 5 {
            0 => Mode::Exclusive,
            1 => Mode::shared(0),
            n => Mode::Shared {
                limit: 3,
                permits: u32::from(n - 1),
            },
        };
        let queued = sim.engine.queued(KeyRef { db: 0, name: key });
        let queued_all: Vec<usize> = KEYS
            .iter()
            .map(|name| sim.engine.queued(KeyRef { db: 0, name }))
            .collect();
        let held_before = holds(&mut sim, key, who);
        let held_before_all: Vec<Option<u64>> = KEYS.iter().map(|k| holds(&mut sim, k, who)).collect();
        let before = sim.now();
        // Answers lost with their client in this step: (key, owner, earliest lease end).
        let mut lost: Vec<(usize, &'static [u8], i64)> = Vec::new();
        let reply = match op % 18 {
            0 => Some(sim.acquire_as(key, who, ttl, mode)),
            1 => Some(sim.reenter_as(key, who, ttl, mode)),
            2 => Some(sim.release(key, who)),
            3 => Some(sim.renew(key, who, ttl)),
            4 => Some(sim.force_release(key)),
            5 | 6 => {
                let timeout = if op % 18 == 5 { 0 } else { u64::from(more) * 3 };
                let (reply, client) = sim.wait_as(key, who, ttl, timeout, mode);
                if reply == Reply::Blocked {
                    waiting.insert(client, (k, who, ttl));
                    order.push(client);
                }
                Some(reply)
            }
            14 => {
                // A release, and in the same step (before answers are delivered) a client that
                // waited hangs up: if the release granted it, its answer is lost.
                let reply = sim.release(key, who);
                if let Some(&client) = order.get(usize::from(more) % order.len().max(1)) {
                    if let Some((k, owner, ttl)) = waiting.remove(&client) {
                        // A lost re-acquire answer still refreshed its owner's lease.
                        let answered = sim.pending().iter().any(|(c, o)| {
                            *c == client && matches!(o, Outcome::Token(_))
                        });
                        if answered {
                            lost.push((k, owner, before + ttl as i64));
                        }
                    }
                    sim.hang_up(client);
                }
                Some(reply)
            }
            7 => {
                // A waiter (or a client granted but not yet answered) hangs up.
                if let Some(&client) = order.get(usize::from(more) % order.len().max(1)) {
                    waiting.remove(&client);
                    sim.hang_up(client);
                }
                None
            }
            8 => {
                sim.delete(key);
                None
            }
            9 => {
                sim.settle();
                None
            }
            10 => {
                sim.advance(i64::from(more));
                None
            }
            11 => {
                let state = match more % 4 {
                    0 => State::Paused,
                    1 => State::Loading,
                    _ => State::Master,
                };
                sim.set_state(state);
                None
            }
            12 => {
                // A waiter loses its permission.
                if let Some(&client) = order.get(usize::from(more) % order.len().max(1)) {
                    sim.host.denied.insert(client);
                }
                None
            }
            15 => Some(sim.downgrade(key, who)),
            16 => Some(sim.macquire(&KEYS, who, ttl)),
            17 => Some(sim.mrelease(&KEYS, who)),
            _ => {
                sim.expire_all();
                None
            }
        };
        // A group: all or nothing, one new token for its new holds, above every earlier one,
        // and no key taken past its queue.
        if let Some(Reply::Tokens(tokens)) = &reply {
            assert_eq!(tokens.len(), KEYS.len());
            let fresh: Vec<u64> = tokens
                .iter()
                .zip(&held_before_all)
                .filter(|(t, before)| **before != Some(**t))
                .map(|(t, _)| *t)
                .collect();
            assert!(fresh.windows(2).all(|w| w[0] == w[1]), "one token per group: {tokens:?}");
            assert!(fresh.iter().all(|t| *t > last_token), "a group's token is new");
            for (i, name) in KEYS.iter().enumerate() {
                assert_eq!(holds(&mut sim, name, who), Some(tokens[i]), "the group holds key {i}");
                assert!(queued_all[i] == 0 || held_before_all[i].is_some(), "group barged past key {i}'s queue");
            }
        }

        // A semaphore's holds, lapsed or not, never hold more permits than its limit; the
        // holders list is in grant order.
        if let Some((shared, _)) = sim.shared(key) {
            let limit = u64::from(shared.limit());
            let permits = shared.permits_total();
            assert!(limit == 0 || permits <= limit, "{permits} permits, limit {limit}");
            let tokens: Vec<u64> = shared.iter().map(|(_, h)| h.token).collect();
            assert!(tokens.windows(2).all(|w| w[0] < w[1]));
            assert!(shared.iter().all(|(_, h)| h.count >= 1));
        }
        // Tokens only rise.
        let last = sim.engine.last_token();
        assert!(last >= last_token, "token counter went back: {last} < {last_token}");
        last_token = last;
        if let Some((_, token, count, _)) = sim.lock(key) {
            assert!(count >= 1);
            assert!(token <= last);
        }
        // Answers: grants go first come first served per key, to a waiter that holds the lock.
        let mut granted_now = Vec::new();
        for (client, outcome) in sim.deliver() {
            let Some((k, owner, ttl)) = waiting.remove(&client) else {
                continue;
            };
            if let Outcome::Token(token) = outcome {
                // Granted at some time within this step.
                told.insert((k, owner), (token, before + ttl as i64));
                granted_now.push(token);
                assert!(client > last_granted[k], "key {k}: {client} after {}", last_granted[k]);
                assert!(token <= sim.engine.last_token());
                last_granted[k] = client;
                // Within one step of time a granted hold may already have expired and passed on.
                if op % 18 != 10 {
                    assert_eq!(holds(&mut sim, KEYS[k], owner), Some(token), "granted, held");
                }
            }
        }
        // Nobody barges past a queue: a command that got a hold while waiters were queued got
        // it as a holder already, or through its own waiter served first in this very step.
        if let Some(Reply::Integer(_)) = &reply {
            if matches!(op % 18, 0 | 1 | 5 | 6) && queued > 0 && held_before.is_none() {
                let now_held = holds(&mut sim, key, who);
                assert!(
                    now_held.is_some_and(|t| granted_now.contains(&t)),
                    "op {op}: took the key past {queued} waiters"
                );
            }
        }

        for (k, owner, end) in lost {
            if let Some(told) = told.get_mut(&(k, owner)) {
                told.1 = told.1.min(end);
            }
        }
        // What the command did to holds clients were told of.
        match (op % 18, &reply) {
            // Its own command ends or may end the hold.
            (2 | 14, _) => {
                told.remove(&(k, who));
            }
            (17, _) => told.retain(|(_, owner), _| *owner != who),
            (16, Some(Reply::Tokens(tokens))) => {
                for (i, token) in tokens.iter().enumerate() {
                    told.insert((i, who), (*token, sim.now() + ttl as i64));
                }
            }
            (4 | 8, _) => told.retain(|(key, _), _| *key != k),
            (13, _) => told.clear(),
            // A re-acquire or renewal sets the lease from now.
            (0 | 1 | 3 | 5 | 6, Some(Reply::Integer(_))) => {
                if let Some(token) = holds(&mut sim, key, who) {
                    told.insert((k, who), (token, sim.now() + ttl as i64));
                }
            }
            _ => {}
        }
        // A hold a client was told of lasts until its lease ends, unless a command ended it.
        for (&(k, owner), &(token, lease_end)) in &told {
            if sim.now() < lease_end {
                assert_eq!(
                    holds(&mut sim, KEYS[k], owner),
                    Some(token),
                    "op {op}: key {k}, owner {owner:?} lost hold {token} before its lease ended"
                );
            }
        }
    }

    // Everyone leaves: nothing waits, and no timer is left behind.
    sim.set_state(State::Master);
    for client in order {
        sim.hang_up(client);
    }
    sim.advance(60_000);
    assert_eq!(sim.engine.waiters(), 0);
    assert_eq!(sim.engine.armed_timers(), 0);
    assert_eq!(sim.host_timers(), 0);
});

/// The token of `owner`'s live hold of `key`, exclusive or shared.
fn holds(sim: &mut Sim, key: &[u8], owner: &[u8]) -> Option<u64> {
    match sim.holders(key, Some(owner), 0) {
        Reply::Holders(list) => list.first().map(|h| h.token),
        _ => None,
    }
}
