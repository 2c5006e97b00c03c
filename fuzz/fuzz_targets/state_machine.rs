//! The lock engine itself (the code that runs inside Redis), on the in-memory host, driven by
//! arbitrary sequences of commands, waits, hang-ups, deletes, time steps and server states.
//! Checks after every step: tokens only rise, counts stay >= 1, nobody barges past a queue,
//! each key serves its waiters first come first served, a granted waiter holds the lock, every
//! blocked client is answered at most once (the host asserts it), and once everyone has left
//! nothing is left waiting and no timer is left armed.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use relock::lock::memory::Sim;
use relock::lock::{KeyRef, Mode, Outcome, Reply, State};

const OWNERS: [&[u8]; 4] = [b"a", b"b", b"\x00\xff", b"dddddddddddddddddddddddddddddddddddd"];
const KEYS: [&[u8]; 2] = [b"k0", b"k1"];

fuzz_target!(|data: &[u8]| {
    let mut sim = Sim::new(1_800_000_000_000);
    let mut last_token = 0u64;
    // Blocked client -> (key, owner).
    let mut waiting: HashMap<u64, (usize, &'static [u8])> = HashMap::new();
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
        let mode = match more % 3 {
            0 => Mode::Exclusive,
            1 => Mode::Shared { limit: 0 },
            _ => Mode::Shared { limit: 2 },
        };
        let queued = sim.engine.queued(KeyRef { db: 0, name: key });
        let held_before = holds(&mut sim, key, who);
        let reply = match op % 14 {
            0 => Some(sim.acquire_as(key, who, ttl, mode)),
            1 => Some(sim.reenter_as(key, who, ttl, mode)),
            2 => Some(sim.release(key, who)),
            3 => Some(sim.renew(key, who, ttl)),
            4 => Some(sim.force_release(key)),
            5 | 6 => {
                let timeout = if op % 14 == 5 { 0 } else { u64::from(more) * 3 };
                let (reply, client) = sim.wait_as(key, who, ttl, timeout, mode);
                if reply == Reply::Blocked {
                    waiting.insert(client, (k, who));
                    order.push(client);
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
            _ => {
                sim.expire_all();
                None
            }
        };

        // A semaphore never has more holders than its limit; the holders list is in grant
        // order.
        if let Some((shared, _)) = sim.shared(key) {
            let limit = shared.limit() as usize;
            assert!(limit == 0 || shared.len() <= limit, "{} holders, limit {limit}", shared.len());
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
            let Some((k, owner)) = waiting.remove(&client) else {
                continue;
            };
            if let Outcome::Token(token) = outcome {
                granted_now.push(token);
                assert!(client > last_granted[k], "key {k}: {client} after {}", last_granted[k]);
                assert!(token <= sim.engine.last_token());
                last_granted[k] = client;
                // Within one step of time a granted hold may already have expired and passed on.
                if op % 14 != 10 {
                    assert_eq!(holds(&mut sim, KEYS[k], owner), Some(token), "granted, held");
                }
            }
        }
        // Nobody barges past a queue: a command that got a hold while waiters were queued got
        // it as a holder already, or through its own waiter served first in this very step.
        if let Some(Reply::Integer(_)) = &reply {
            if matches!(op % 14, 0 | 1 | 5 | 6) && queued > 0 && held_before.is_none() {
                let now_held = holds(&mut sim, key, who);
                assert!(
                    now_held.is_some_and(|t| granted_now.contains(&t)),
                    "op {op}: took the key past {queued} waiters"
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
