//! The bounds every duration is held to, in one place for the library and `lockctl`: the
//! ttl and wait limits the `LOCK.*` commands accept, and the options' timeouts, so that no
//! arithmetic on them can overflow and no server is asked for what it will refuse.

use std::time::Duration;

use crate::duration::parse_duration;
use crate::error::Error;
use crate::options::Options;

/// The largest `ttl_ms` and `timeout_ms` the `LOCK.*` commands accept: 10^12 ms (31.7 years).
pub const MAX_MS: u64 = 1_000_000_000_000;

/// [`MAX_MS`] as a `Duration`.
pub const MAX: Duration = Duration::from_millis(MAX_MS);

/// The smallest usable ttl in milliseconds: 5 ms, the least ttl whose validity after the
/// drift allowance ([`drift`](crate::validity::drift): 1 % of the ttl + 2 ms) is at least
/// half the ttl even for a round that took no time at all.
///
/// Below it the lock is worthless: 1 and 2 ms never leave any validity (every acquisition
/// fails, and a wait starts again forever), 3 and 4 ms leave less than 2 ms, less than one
/// renewal (every ttl / 3) and its round can fit in, so the lock is lost as soon as it is
/// granted. 5 ms leaves 2.95 ms, room for a renewal at 1.67 ms on a fast local link: the
/// bound is what the arithmetic allows, not a ttl to use (see [`Options::node_timeout`]).
///
/// [`Options::node_timeout`]: crate::Options::node_timeout
pub const MIN_TTL_MS: u64 = 5;

/// [`MIN_TTL_MS`] as a `Duration`.
pub const MIN_TTL: Duration = Duration::from_millis(MIN_TTL_MS);

/// Checks a lock ttl: [`MIN_TTL`] (5 ms) to 10^12 ms (the most `ttl_ms` accepts). Returns it
/// cut to whole milliseconds, which is what the servers are sent and so what validity is
/// computed from. Fails with [`Error::InvalidTtl`] before any server is asked.
pub fn check_ttl(ttl: Duration) -> Result<Duration, Error> {
    ttl_ms(ttl)
        .filter(|ms| *ms >= MIN_TTL_MS)
        .map(Duration::from_millis)
        .ok_or(Error::InvalidTtl(ttl))
}

/// Parses a ttl the way `lockctl --ttl` does: a duration ([`parse_duration`]) that passes
/// [`check_ttl`].
///
/// [`parse_duration`]: crate::parse_duration
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    check_ttl(ttl).map_err(|_| {
        if ttl < MIN_TTL {
            format!(
                "{text:?} is too short: the smallest usable ttl is {MIN_TTL_MS}ms (the drift \
                 allowance, 1% + 2ms, would leave less than half of it valid)"
            )
        } else {
            format!(
                "{text:?} is out of range (a ttl is {MIN_TTL_MS}ms to {}s)",
                MAX.as_secs()
            )
        }
    })
}

/// Parses a timeout or a period the way `lockctl` does (`--node-timeout`, `--grace`, `top
/// --interval`...): a duration ([`parse_duration`]) of at most 10^12 ms, the bound of every
/// timeout here, so that no deadline computed from it can overflow an `Instant`.
///
/// [`parse_duration`]: crate::parse_duration
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout > MAX {
        return Err(format!(
            "{text:?} is out of range (a timeout is at most {}s)",
            MAX.as_secs()
        ));
    }
    Ok(timeout)
}

/// A wait limit as it is used: anything above 10^12 ms (the most `LOCK.WAIT` accepts, 31.7
/// years) is taken as 10^12 ms, so that it is neither refused by every master nor overflows an
/// `Instant`.
pub fn clamp_wait(timeout: Duration) -> Duration {
    timeout.min(MAX)
}

/// Checks the durations of `options`: a node timeout of at least 1 ms (a zero timeout fails
/// every request), and no timeout or delay above 10^12 ms.
pub fn check_options(options: &Options) -> Result<(), Error> {
    let invalid = |name: &'static str, value: Duration, reason: &str| Error::InvalidOption {
        name,
        reason: format!("{value:?} {reason}"),
    };
    let above = format!("is above the maximum of {}s", MAX.as_secs());
    if options.node_timeout < Duration::from_millis(1) {
        return Err(invalid(
            "node_timeout",
            options.node_timeout,
            "is below 1ms: every request would time out",
        ));
    }
    for (name, value) in [
        ("node_timeout", options.node_timeout),
        ("retry_delay", options.retry_delay),
        ("max_partial_hold", options.max_partial_hold),
        ("replica_ack_timeout", options.replica_ack_timeout),
    ] {
        if value > MAX {
            return Err(invalid(name, value, &above));
        }
    }
    Ok(())
}

/// A ttl as the `ttl_ms` argument of the LOCK.* commands, if it is in 1 ..= 10^12 ms.
pub(crate) fn ttl_ms(ttl: Duration) -> Option<u64> {
    let ms = u64::try_from(ttl.as_millis()).ok()?;
    (1..=MAX_MS).contains(&ms).then_some(ms)
}

/// What is left of a wait as `LOCK.WAIT`'s `timeout_ms`: 0 (no limit) for `None`, otherwise
/// 1 ..= 10^12 (a positive remainder below 1 ms still waits 1 ms rather than forever).
pub(crate) fn wait_ms(remaining: Option<Duration>) -> u64 {
    match remaining {
        None => 0,
        Some(r) => u64::try_from(r.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, MAX_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(ttl_ms(Duration::ZERO), None);
        assert_eq!(ttl_ms(Duration::from_micros(999)), None);
        assert_eq!(ttl_ms(ms(1)), Some(1));
        assert_eq!(ttl_ms(Duration::from_secs(30)), Some(30_000));
        assert_eq!(
            ttl_ms(Duration::from_secs(1_000_000_000)),
            Some(1_000_000_000_000)
        );
        assert_eq!(ttl_ms(Duration::from_secs(1_000_000_001)), None);
        assert_eq!(ttl_ms(Duration::MAX), None);
        assert_eq!(check_ttl(Duration::from_micros(5_500)).ok(), Some(ms(5)));
        for unusable in [0, 1, 2, 3, 4] {
            assert!(
                matches!(check_ttl(ms(unusable)), Err(Error::InvalidTtl(_))),
                "{unusable} ms"
            );
        }
        assert_eq!(check_ttl(MIN_TTL).ok(), Some(MIN_TTL));
        assert_eq!(check_ttl(MAX).ok(), Some(MAX));
    }

    /// The smallest usable ttl is the first whose validity for an instant round is at least
    /// half of it; every shorter one leaves less (1 and 2 ms nothing at all).
    #[test]
    fn the_smallest_usable_ttl_keeps_half_of_itself_valid() {
        use crate::validity::validity;
        let half_valid =
            |ttl: Duration| validity(ttl, Duration::ZERO).is_some_and(|v| v >= ttl / 2);
        assert!(half_valid(MIN_TTL));
        for shorter in 1..MIN_TTL_MS {
            assert!(!half_valid(ms(shorter)), "{shorter} ms");
        }
        assert_eq!(validity(ms(1), Duration::ZERO), None);
        assert_eq!(validity(ms(2), Duration::ZERO), None);
    }

    #[test]
    fn ttl_text() {
        assert_eq!(parse_ttl("30s"), Ok(ms(30_000)));
        assert_eq!(parse_ttl("5ms"), Ok(ms(5)));
        for bad in [
            "0",
            "0.5ms",
            "1ms",
            "2ms",
            "3ms",
            "4ms",
            "4.9ms",
            "2000000000s",
            "ten",
            "-1s",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
        let short = parse_ttl("3ms").unwrap_err();
        assert!(short.contains("smallest usable ttl is 5ms"), "{short}");
    }

    #[test]
    fn timeout_text() {
        assert_eq!(parse_timeout("10s"), Ok(ms(10_000)));
        assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("1000000000s"), Ok(MAX));
        for bad in ["1000000001s", "1e19s", "1e300s", "ten", "-1s"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
        assert!(parse_timeout("1e19s")
            .unwrap_err()
            .contains("at most 1000000000s"));
    }

    #[test]
    fn waits_are_clamped() {
        assert_eq!(clamp_wait(ms(5)), ms(5));
        assert_eq!(clamp_wait(Duration::MAX), MAX);
        assert_eq!(wait_ms(None), 0);
        assert_eq!(wait_ms(Some(Duration::ZERO)), 1);
        assert_eq!(wait_ms(Some(Duration::from_micros(10))), 1);
        assert_eq!(wait_ms(Some(ms(1_500))), 1_500);
        assert_eq!(wait_ms(Some(Duration::MAX)), MAX_MS);
    }

    #[test]
    fn options_are_checked() {
        assert!(check_options(&Options::default()).is_ok());
        let zero = Options {
            node_timeout: Duration::ZERO,
            ..Options::default()
        };
        assert!(matches!(
            check_options(&zero),
            Err(Error::InvalidOption {
                name: "node_timeout",
                ..
            })
        ));
        let huge = Options {
            retry_delay: Duration::MAX,
            ..Options::default()
        };
        assert!(check_options(&huge).is_err());
    }
}
