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

/// Checks a lock ttl: 1 ms to 10^12 ms, the range of `ttl_ms`. Returns it cut to whole
/// milliseconds, which is what the servers are sent and so what validity is computed from.
pub fn check_ttl(ttl: Duration) -> Result<Duration, Error> {
    ttl_ms(ttl)
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
        format!(
            "{text:?} is out of range (a ttl is 1ms to {}s)",
            MAX.as_secs()
        )
    })
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
        assert_eq!(check_ttl(Duration::from_micros(1_500)).ok(), Some(ms(1)));
        assert!(matches!(
            check_ttl(Duration::ZERO),
            Err(Error::InvalidTtl(_))
        ));
    }

    #[test]
    fn ttl_text() {
        assert_eq!(parse_ttl("30s"), Ok(ms(30_000)));
        assert_eq!(parse_ttl("1ms"), Ok(ms(1)));
        for bad in ["0", "0.5ms", "2000000000s", "ten", "-1s"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
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
