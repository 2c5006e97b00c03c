//! Validity arithmetic of the Redlock algorithm, in checked `Duration` math that cannot
//! underflow: a round that took longer than the ttl leaves no validity, never a huge one.

use std::time::Duration;

/// The clock drift allowed for a lock of `ttl`: 1 % of the ttl plus 2 ms (the Redlock paper's
/// figure, covering both the masters' and our own clock rate errors).
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The validity left after a round that took `elapsed`: `ttl - elapsed - drift(ttl)`, or
/// `None` when nothing (or exactly nothing) is left.
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl))
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn validity_table() {
        // (ttl ms, elapsed ms, expected validity ms)
        let cases: &[(u64, u64, Option<u64>)] = &[
            (10_000, 0, Some(9_898)),
            (10_000, 100, Some(9_798)),
            (10_000, 9_898, None),
            (10_000, 9_897, Some(1)),
            (10_000, 10_000, None),
            (10_000, u64::MAX / 2, None),
            (u64::MAX / 2, u64::MAX / 2, None),
            (1, 0, None),
            (2, 0, None),
            (1_000, 0, Some(988)),
        ];
        for &(ttl, elapsed, want) in cases {
            let got = validity(ms(ttl), ms(elapsed));
            assert_eq!(got, want.map(ms), "ttl {ttl} elapsed {elapsed}");
        }
    }
}
