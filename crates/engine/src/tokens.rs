//! Fencing tokens: every new hold gets a token greater than every token this server issued or
//! saw before, for any key.
//!
//! The counter is persisted (RDB aux data, and with every hold in RDB, AOF and the replication
//! stream), and each token is also floored at `FLOOR_PER_MS` times the wall clock in
//! milliseconds. The floor is what keeps tokens increasing after a restart that lost the
//! counter (no persistence at all): as long as the clock did not go backwards and the server
//! issued fewer than `FLOOR_PER_MS` tokens per millisecond on average, which is far beyond what
//! one Redis can do, the new floor is above every token issued before.
//!
//! That holds only if no token this server issued was above its own clock's floor by more than
//! the current millisecond's tokens ([`SLACK`]). A counter can be ahead of the clock by more:
//! raised by a token from elsewhere (a master whose clock is ahead, whose replica is then
//! promoted; an RDB or AOF written by such a server). Issuing just above such a token, and then
//! restarting without persistence, would issue from the lower floor: tokens going backwards,
//! though this server's clock never did. So the counter never issues above `floor + SLACK`:
//! [`Tokens::issue`] refuses with the ms until the clock catches up, and the engine makes new
//! holds wait that long (as in the restart grace). The cost is unavailability for new holds as
//! long as the skew between the servers that issued the tokens.
//!
//! Up to [`MAX_CATCH_UP_MS`]: a counter further ahead than that (a clock set wrong by more, a
//! hand-raised `LOCK.COUNTER`) would stop new holds on every server that received its tokens
//! until the clocks get there, for years perhaps. Such a counter is not waited for: tokens go on
//! above it, and only that case keeps the old exposure (a restart without persistence within
//! that lead issues lower tokens). Once tokens went out above such a lead, it stays accepted
//! as it shrinks with the clock (waiting then would protect nothing and stop new holds for up
//! to a minute a second later); only a lead beyond it is waited for.

use std::time::{SystemTime, UNIX_EPOCH};

pub use relock_protocol::bounds::{MAX_TOKEN, TOKEN_BITS};

/// Tokens per wall-clock millisecond of floor. At 1000, the floor reaches `MAX_TOKEN` in the
/// year 2255.
pub const FLOOR_PER_MS: u64 = 1000;

/// Tokens a server issues above its own clock's floor at most: those of the current millisecond
/// (a token issued at `ms` is below `(ms + 1) * FLOOR_PER_MS`, the floor of any later ms).
pub const SLACK: u64 = FLOOR_PER_MS - 1;

/// The longest wait for the clock to catch up with the counter: a lead beyond it is not waited
/// for (see the module doc).
pub const MAX_CATCH_UP_MS: u64 = 60_000;

/// Why no token is issued now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every token has been issued.
    Exhausted,
    /// The next token is above the clock's floor by more than [`SLACK`]: this many ms until the
    /// clock catches up.
    AheadMs(u64),
}

/// A source of wall-clock time in Unix milliseconds.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// The token counter.
#[derive(Debug, Default, Clone)]
pub struct Tokens {
    last: u64,
    /// The lead over the clock (ms) accepted when a token was issued more than
    /// [`MAX_CATCH_UP_MS`] ahead: not waited for afterwards, while it shrinks with the clock
    /// (those tokens are out; waiting would protect nothing). Only a lead beyond it waits.
    /// Shrinks with the lead at each token; 0 again once a token from elsewhere raises the
    /// counter (judged afresh).
    accepted_ms: u64,
}

impl Tokens {
    /// A counter that has issued nothing yet.
    pub const fn new() -> Tokens {
        Tokens {
            last: 0,
            accepted_ms: 0,
        }
    }

    /// The largest token issued or observed so far (0 if none).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Ms until the next token can be issued (see [`Refused::AheadMs`]); `None` if it can now
    /// (or never: the space is exhausted, which [`Tokens::issue`] says), or if the counter is
    /// more than [`MAX_CATCH_UP_MS`] ahead of the clock.
    pub fn ahead_ms(&self, clock: &impl Clock) -> Option<u64> {
        let lead = self.lead_ms(clock.now_ms())?;
        Some(lead.saturating_sub(self.accepted_ms)).filter(|ms| (1..=MAX_CATCH_UP_MS).contains(ms))
    }

    /// The ms from `now` until the clock's ceiling reaches the next token; `None` if it does
    /// now, or the space is exhausted.
    fn lead_ms(&self, now: u64) -> Option<u64> {
        let ceiling = now.saturating_mul(FLOOR_PER_MS).saturating_add(SLACK);
        let next = self.last.checked_add(1)?;
        if next <= ceiling || next > MAX_TOKEN {
            return None;
        }
        // The first millisecond whose ceiling reaches `next`.
        let at = (next - SLACK).div_ceil(FLOOR_PER_MS);
        Some(at.saturating_sub(now).max(1))
    }

    /// A new token, greater than every token before, at least the clock's floor and at most
    /// [`SLACK`] above it.
    pub fn issue(&mut self, clock: &impl Clock) -> Result<u64, Refused> {
        if let Some(ms) = self.ahead_ms(clock) {
            return Err(Refused::AheadMs(ms));
        }
        let now = clock.now_ms();
        // Not waited for: either within the accepted lead, or beyond the longest catch-up
        // (then accepted); a smaller lead shrinks what stays accepted.
        let lead = self.lead_ms(now).unwrap_or(0);
        self.accepted_ms = if lead > self.accepted_ms.saturating_add(MAX_CATCH_UP_MS) {
            lead
        } else {
            self.accepted_ms.min(lead)
        };
        let floor = now.saturating_mul(FLOOR_PER_MS);
        let next = self
            .last
            .checked_add(1)
            .ok_or(Refused::Exhausted)?
            .max(floor);
        if next > MAX_TOKEN {
            return Err(Refused::Exhausted);
        }
        self.last = next;
        Ok(next)
    }

    /// The lead (ms) accepted by the last tokens issued (see [`Tokens::issue`]): saved with the
    /// counter in this server's own RDB, so a restart that loads it does not wait for a lead its
    /// tokens already went out with.
    pub fn accepted_ms(&self) -> u64 {
        self.accepted_ms
    }

    /// Restores the counter and accepted lead this server saved itself (its own RDB, loaded on
    /// a master): as [`Tokens::observe`], and the accepted lead stays accepted unless the
    /// counter already went above `last` (a token from elsewhere, judged afresh).
    pub fn restore(&mut self, last: u64, accepted_ms: u64) {
        let last = last.min(MAX_TOKEN);
        if last >= self.last {
            self.last = last;
            self.accepted_ms = accepted_ms;
        }
    }

    /// Records a token issued elsewhere (loaded from RDB/AOF, replicated from a master), so
    /// later tokens are above it.
    pub fn observe(&mut self, token: u64) {
        let token = token.min(MAX_TOKEN);
        if token > self.last {
            self.last = token;
            self.accepted_ms = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct FakeClock(Cell<u64>);
    impl Clock for FakeClock {
        fn now_ms(&self) -> u64 {
            self.0.get()
        }
    }

    #[test]
    fn strictly_increasing_within_one_millisecond() {
        let clock = FakeClock(Cell::new(5));
        let mut tokens = Tokens::new();
        let a = tokens.issue(&clock).unwrap();
        let b = tokens.issue(&clock).unwrap();
        let c = tokens.issue(&clock).unwrap();
        assert_eq!((a, b, c), (5000, 5001, 5002));
        for _ in 3..1000 {
            tokens.issue(&clock).unwrap();
        }
        assert_eq!(tokens.last(), 5999, "the millisecond's 1000 tokens");
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(1)));
        clock.0.set(6);
        assert_eq!(tokens.issue(&clock), Ok(6000));
    }

    #[test]
    fn floor_jumps_ahead_with_the_clock() {
        let clock = FakeClock(Cell::new(5));
        let mut tokens = Tokens::new();
        tokens.issue(&clock).unwrap();
        clock.0.set(9);
        assert_eq!(tokens.issue(&clock), Ok(9000));
    }

    #[test]
    fn clock_going_backwards_never_moves_tokens_back() {
        let clock = FakeClock(Cell::new(100));
        let mut tokens = Tokens::new();
        let before = tokens.issue(&clock).unwrap();
        clock.0.set(1);
        // The counter is now ahead of the clock: no token until the clock is back.
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(99)));
        clock.0.set(100);
        assert_eq!(tokens.issue(&clock), Ok(before + 1));
    }

    #[test]
    fn restart_without_counter_is_above_everything_issued() {
        // Issue a burst far faster than any server could, then "restart" with a fresh counter
        // one millisecond later.
        let clock = FakeClock(Cell::new(1_800_000_000_000));
        let mut tokens = Tokens::new();
        let mut last = 0;
        for _ in 0..999 {
            last = tokens.issue(&clock).unwrap();
        }
        clock.0.set(1_800_000_000_001);
        let mut restarted = Tokens::new();
        assert!(restarted.issue(&clock).unwrap() > last);
    }

    /// Found by an attack (issue 30): a restart that loads its own RDB judged an accepted lead
    /// afresh, so a lead that had shrunk below the cap stopped new holds for up to a minute.
    #[test]
    fn a_restored_accepted_lead_stays_accepted() {
        let now = 1_800_000_000_000;
        let clock = FakeClock(Cell::new(now));
        let mut tokens = Tokens::new();
        tokens.observe((now + MAX_CATCH_UP_MS + 1_000) * FLOOR_PER_MS);
        let first = tokens.issue(&clock).unwrap();
        clock.0.set(now + 1_001);
        let (last, accepted) = (tokens.last(), tokens.accepted_ms());
        let mut judged_afresh = Tokens::new();
        judged_afresh.observe(last);
        assert!(judged_afresh.issue(&clock).is_err(), "observed: waits");
        let mut restarted = Tokens::new();
        restarted.restore(last, accepted);
        assert_eq!(restarted.issue(&clock), Ok(first + 1));
        // A token from elsewhere above it is judged afresh; a lower restore changes nothing.
        let mut raised = Tokens::new();
        raised.observe(last + 5 * FLOOR_PER_MS);
        raised.restore(last, accepted);
        assert_eq!(raised.last(), last + 5 * FLOOR_PER_MS);
        assert_eq!(raised.accepted_ms(), 0, "judged afresh");
    }

    #[test]
    fn observed_tokens_raise_the_counter() {
        let clock = FakeClock(Cell::new(1));
        let mut tokens = Tokens::new();
        tokens.observe(1 << 50);
        tokens.observe(3); // lower: ignored
        assert_eq!(tokens.last(), 1 << 50);
        // Ages ahead of the clock: not waited for.
        assert_eq!(tokens.issue(&clock), Ok((1 << 50) + 1));
    }

    #[test]
    fn a_lead_beyond_the_longest_catch_up_is_not_waited_for() {
        let now = 1_800_000_000_000;
        let clock = FakeClock(Cell::new(now));
        let mut tokens = Tokens::new();
        tokens.observe((now + MAX_CATCH_UP_MS) * FLOOR_PER_MS + SLACK - 1);
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(MAX_CATCH_UP_MS)));
        tokens.observe((now + MAX_CATCH_UP_MS) * FLOOR_PER_MS + SLACK);
        let beyond = tokens.last() + 1;
        assert_eq!(tokens.issue(&clock), Ok(beyond));
    }

    /// A replica promoted with its master's tokens 20 s above its own clock: no token for 20 s,
    /// then tokens just above the master's; a restart that loses the counter one ms after the
    /// last of them issues above every one of them.
    #[test]
    fn a_counter_ahead_of_the_clock_waits_for_it() {
        let now = 1_800_000_000_000;
        let clock = FakeClock(Cell::new(now));
        let mut tokens = Tokens::new();
        let masters = (now + 20_000) * FLOOR_PER_MS + 7;
        tokens.observe(masters);
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(20_000)));
        assert_eq!(tokens.ahead_ms(&clock), Some(20_000));
        assert_eq!(tokens.last(), masters, "a refusal issues nothing");
        clock.0.set(now + 19_999);
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(1)));
        clock.0.set(now + 20_000);
        assert_eq!(tokens.ahead_ms(&clock), None);
        let mut last = 0;
        while let Ok(token) = tokens.issue(&clock) {
            last = token;
        }
        assert_eq!(
            last,
            (now + 20_001) * FLOOR_PER_MS - 1,
            "up to the ms's last token"
        );
        clock.0.set(now + 20_001);
        assert!(Tokens::new().issue(&clock).unwrap() > last, "restarted");
    }

    /// A lead beyond the longest catch-up, once tokens were issued above it, is not waited for
    /// a second later either (when it has shrunk below the cap): those tokens are out, waiting
    /// now would protect nothing and stop new holds for a minute. Only the lead that grows
    /// beyond the accepted one (a burst over 1000 a ms, a new token from elsewhere) waits.
    #[test]
    fn an_accepted_lead_is_not_waited_for_once_it_shrinks_below_the_cap() {
        let now = 1_800_000_000_000;
        let clock = FakeClock(Cell::new(now));
        let mut tokens = Tokens::new();
        tokens.observe((now + MAX_CATCH_UP_MS + 1_000) * FLOOR_PER_MS);
        let first = tokens.issue(&clock).unwrap();
        clock.0.set(now + 1_001);
        assert_eq!(tokens.ahead_ms(&clock), None);
        let second = tokens.issue(&clock).unwrap();
        assert_eq!(second, first + 1);
        // More than the ms's 1000 tokens above the accepted lead wait for the next ms.
        for _ in 0..FLOOR_PER_MS {
            if tokens.issue(&clock).is_err() {
                break;
            }
        }
        assert_eq!(tokens.issue(&clock), Err(Refused::AheadMs(1)));
        clock.0.set(now + 1_002);
        assert!(tokens.issue(&clock).is_ok());
        // A token from elsewhere raising the counter is judged afresh: the 21 s of lead left,
        // plus 30 s, is waited for.
        clock.0.set(now + 40_000);
        tokens.issue(&clock).unwrap();
        tokens.observe(tokens.last() + 30_000 * FLOOR_PER_MS);
        assert!(matches!(
            tokens.issue(&clock),
            Err(Refused::AheadMs(ms)) if (51_000..51_010).contains(&ms)
        ));
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let clock = FakeClock(Cell::new(MAX_TOKEN / FLOOR_PER_MS));
        let mut tokens = Tokens::new();
        tokens.observe(MAX_TOKEN - 1);
        assert_eq!(tokens.issue(&clock), Ok(MAX_TOKEN));
        assert_eq!(tokens.issue(&clock), Err(Refused::Exhausted));
        assert_eq!(tokens.ahead_ms(&clock), None);
        assert_eq!(tokens.last(), MAX_TOKEN);
        tokens.observe(u64::MAX);
        assert_eq!(tokens.last(), MAX_TOKEN);
    }

    #[test]
    fn clock_floor_overflow_does_not_panic() {
        let clock = FakeClock(Cell::new(u64::MAX));
        assert_eq!(Tokens::new().issue(&clock), Err(Refused::Exhausted));
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
