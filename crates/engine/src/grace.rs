//! Redlock's "delayed restart", done by the server: for `relock.restart-grace-ms` after this
//! server starts as a master, or a replica is promoted, no hold gets a new token. A master that
//! restarted without its locks (no persistence, or the last second of `appendfsync everysec`)
//! cannot know which it granted; while the grace lasts, every hold it may have forgotten ends.
//! [`Grace`] keeps the setting and the current grace; the engine asks it before each new hold.

/// The setting and the grace under way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grace {
    /// `relock.restart-grace-ms` (0: none).
    ms: u64,
    /// When the grace under way ends (the host's monotonic µs).
    until_us: Option<u64>,
}

impl Grace {
    /// Sets `relock.restart-grace-ms`. A grace starts only with a start or a promotion, and a
    /// grace under way keeps its end: it must outlast the holds granted under the setting it
    /// started with (lowering the setting does not shorten it, raising it does not lengthen it).
    pub fn configure(&mut self, ms: u64) {
        self.ms = ms;
    }

    /// The setting.
    pub fn configured_ms(&self) -> u64 {
        self.ms
    }

    /// The server starts, or is promoted, at `now_us`: a grace starts if one is configured.
    /// Returns its length in ms.
    pub fn start(&mut self, now_us: u64) -> Option<u64> {
        if self.ms == 0 {
            self.until_us = None;
            return None;
        }
        self.until_us = Some(now_us.saturating_add(self.ms.saturating_mul(1000)));
        Some(self.ms)
    }

    /// The server became a replica: a grace under way ends (a replica grants nothing anyway).
    pub fn end(&mut self) {
        self.until_us = None;
    }

    /// Ms left of the grace at `now_us` (at least 1), or `None` outside one.
    pub fn left_ms(&self, now_us: u64) -> Option<u64> {
        self.until_us
            .filter(|until| *until > now_us)
            .map(|until| (until - now_us).div_ceil(1000))
    }

    /// Whether a grace was started and not ended (only then does [`Grace::left_ms`] need the
    /// clock: an acquire reads none outside a grace).
    pub fn started(&self) -> bool {
        self.until_us.is_some()
    }

    /// Whether a hold of `ttl_ms` may be granted while the grace is configured: it must end
    /// within a grace, so that a restart's grace covers every hold this server may forget.
    pub fn allows_ttl(&self, ttl_ms: u64) -> bool {
        self.ms == 0 || ttl_ms <= self.ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grace_starts_with_a_start_and_ends_on_time() {
        let mut g = Grace::default();
        assert_eq!(g.start(0), None, "nothing configured");
        assert!(g.allows_ttl(u64::MAX));
        g.configure(5_000);
        assert_eq!(g.left_ms(0), None, "configuring starts no grace");
        assert_eq!(g.start(1_000_000), Some(5_000));
        assert_eq!(g.left_ms(1_000_000), Some(5_000));
        assert_eq!(g.left_ms(5_999_001), Some(1), "rounded up");
        assert_eq!(g.left_ms(6_000_000), None);
        assert!(g.allows_ttl(5_000) && !g.allows_ttl(5_001));
        assert_eq!(g.start(10_000_000), Some(5_000));
        g.configure(1_000);
        assert_eq!(
            g.left_ms(10_000_000),
            Some(5_000),
            "lowering keeps the grace's end"
        );
        g.configure(0);
        assert_eq!(g.left_ms(14_999_999), Some(1), "so does switching it off");
        assert_eq!(g.start(7_000_000), None, "switched off: no grace");
        assert_eq!(g.left_ms(7_000_000), None);
    }
}
