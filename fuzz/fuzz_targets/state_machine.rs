//! The pure lock state machine driven by arbitrary operation sequences: one key, a FIFO queue
//! of waiters, the token counter on a clock that only moves forward. Checks the contract's
//! invariants after every step: counts >= 1, every new hold's token above every token before,
//! holders refreshing keep their token, nobody barges past the queue, hand-off goes to the head.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relock::lock::hold::{acquire, reenter, release, renew, force_release};
use relock::lock::{Clock, Decision, Found, Hold, Queue, Step, Tokens};

struct FakeClock(u64);

impl Clock for FakeClock {
    fn now_ms(&self) -> u64 {
        self.0
    }
}

const OWNERS: [&[u8]; 4] = [b"a", b"b", b"\x00\xff", b"dddddddddddddddddddddddddddddddddddd"];

fuzz_target!(|data: &[u8]| {
    let mut clock = FakeClock(1_700_000_000_000);
    let mut tokens = Tokens::new();
    let mut hold: Option<Box<Hold>> = None;
    let mut queue: Queue<&'static [u8]> = Queue::new();
    let mut next_waiter = 0u64;
    let mut last_token = 0u64;

    for pair in data.chunks(2) {
        let op = pair[0];
        let who = OWNERS[usize::from(pair.get(1).copied().unwrap_or(0)) % OWNERS.len()];
        let found = match hold.as_deref() {
            Some(h) => Found::Held(h),
            None => Found::Free { queued: !queue.is_empty() },
        };
        let before = hold.as_ref().map(|h| (h.token(), h.count()));
        let decision = match op % 9 {
            0 => acquire(found, who),
            1 => reenter(found, who),
            2 => release(found, who),
            3 => renew(found, who),
            4 => force_release(found),
            5 => {
                // A waiter queues (LOCK.WAIT that could not take the lock at once).
                next_waiter += 1;
                queue.push(next_waiter, who);
                continue;
            }
            6 => {
                // A waiter leaves (timeout or disconnect).
                let _ = queue.remove(u64::from(pair.get(1).copied().unwrap_or(0)) % (next_waiter + 1));
                continue;
            }
            7 => {
                // The hold expires: it ends like a release.
                if hold.take().is_some() {
                    hand_off(&mut hold, &mut queue, &mut tokens, &clock, &mut last_token);
                }
                continue;
            }
            _ => {
                clock.0 += u64::from(pair.get(1).copied().unwrap_or(1));
                continue;
            }
        };
        if let (Found::Free { queued: true }, Decision::Token(_) | Decision::Integer(Step::Grant, _)) =
            (found, decision)
        {
            panic!("barged past the queue: {decision:?}");
        }
        match decision.step() {
            Step::Nothing => assert_eq!(hold.as_ref().map(|h| (h.token(), h.count())), before),
            Step::Grant => {
                assert!(hold.is_none());
                let token = tokens.issue(&clock).expect("token space");
                assert!(token > last_token, "token {token} after {last_token}");
                last_token = token;
                hold = Some(Hold::new(who, token, 1));
            }
            Step::Refresh { count } | Step::Decrement { count } => {
                let h = hold.as_mut().expect("refresh of a hold");
                assert!(h.is_held_by(who) && count >= 1);
                let token = h.token();
                h.set_count(count);
                assert_eq!(h.token(), token, "a refresh keeps the token");
            }
            Step::End => {
                assert!(hold.take().is_some());
                hand_off(&mut hold, &mut queue, &mut tokens, &clock, &mut last_token);
            }
        }
        if let Some(h) = hold.as_ref() {
            assert!(h.count() >= 1);
        }
    }
});

/// The lock ended: the head waiter, if any, gets a new hold with a new token.
fn hand_off(
    hold: &mut Option<Box<Hold>>,
    queue: &mut Queue<&'static [u8]>,
    tokens: &mut Tokens,
    clock: &FakeClock,
    last_token: &mut u64,
) {
    if let Some((_, waiter)) = queue.pop() {
        let token = tokens.issue(clock).expect("token space");
        assert!(token > *last_token);
        *last_token = token;
        *hold = Some(Hold::new(waiter, token, 1));
    }
}
