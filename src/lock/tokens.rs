//! Fencing tokens: every new hold gets a token greater than every token this server issued or
//! saw before, for any key.
//!
//! The counter is persisted (RDB aux data, and with every hold in RDB, AOF and the replication
//! stream), and each token is also floored at `FLOOR_PER_MS` times the wall clock in
//! milliseconds. The floor is what keeps tokens increasing after a restart that lost the
//! counter (no persistence at all): as long as the clock did not go backwards and the server
//! issued fewer than `FLOOR_PER_MS` tokens per millisecond on average, which is far beyond what
//! one Redis can do, the new floor is above every token issued before.

use std::time::{SystemTime, UNIX_EPOCH};

/// Bits of a token: tokens stay below 2^53 so they are exact as JSON / JavaScript numbers (and
/// the packed hold and holder records keep the owner's length in the bits above).
pub const TOKEN_BITS: u32 = 53;

/// Largest token.
pub const MAX_TOKEN: u64 = (1 << TOKEN_BITS) - 1;

/// Tokens per wall-clock millisecond of floor. At 1000, the floor reaches `MAX_TOKEN` in the
/// year 2255.
pub const FLOOR_PER_MS: u64 = 1000;

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
}

impl Tokens {
    /// A counter that has issued nothing yet.
    pub const fn new() -> Tokens {
        Tokens { last: 0 }
    }

    /// The largest token issued or observed so far (0 if none).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// A new token, greater than every token before and at least the clock's floor; `None`
    /// once the token space is exhausted.
    pub fn issue(&mut self, clock: &impl Clock) -> Option<u64> {
        let floor = clock.now_ms().saturating_mul(FLOOR_PER_MS);
        let next = self.last.checked_add(1)?.max(floor);
        if next > MAX_TOKEN {
            return None;
        }
        self.last = next;
        Some(next)
    }

    /// Records a token issued elsewhere (loaded from RDB/AOF, replicated from a master), so
    /// later tokens are above it.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token.min(MAX_TOKEN));
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
    }

    #[test]
    fn floor_jumps_ahead_with_the_clock() {
        let clock = FakeClock(Cell::new(5));
        let mut tokens = Tokens::new();
        tokens.issue(&clock);
        clock.0.set(9);
        assert_eq!(tokens.issue(&clock), Some(9000));
    }

    #[test]
    fn clock_going_backwards_never_moves_tokens_back() {
        let clock = FakeClock(Cell::new(100));
        let mut tokens = Tokens::new();
        let before = tokens.issue(&clock).unwrap();
        clock.0.set(1);
        assert_eq!(tokens.issue(&clock), Some(before + 1));
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

    #[test]
    fn observed_tokens_raise_the_counter() {
        let clock = FakeClock(Cell::new(1));
        let mut tokens = Tokens::new();
        tokens.observe(1 << 50);
        tokens.observe(3); // lower: ignored
        assert_eq!(tokens.last(), 1 << 50);
        assert_eq!(tokens.issue(&clock), Some((1 << 50) + 1));
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let clock = FakeClock(Cell::new(0));
        let mut tokens = Tokens::new();
        tokens.observe(MAX_TOKEN - 1);
        assert_eq!(tokens.issue(&clock), Some(MAX_TOKEN));
        assert_eq!(tokens.issue(&clock), None);
        assert_eq!(tokens.last(), MAX_TOKEN);
        tokens.observe(u64::MAX);
        assert_eq!(tokens.last(), MAX_TOKEN);
    }

    #[test]
    fn clock_floor_overflow_does_not_panic() {
        let clock = FakeClock(Cell::new(u64::MAX));
        assert_eq!(Tokens::new().issue(&clock), None);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
