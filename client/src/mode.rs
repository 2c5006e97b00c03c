//! How a lock is held: by one owner (exclusive), or by several at once (shared: a read lock,
//! or a counting semaphore with a limit).

use crate::error::Error;

/// The most holders a shared lock's `LIMIT` may allow (the module refuses more).
pub const MAX_LIMIT: u32 = 1_000_000;

/// How an acquisition holds its key. Set it with [`Relock::with_mode`](crate::Relock::with_mode).
///
/// Default: [`Mode::Exclusive`], the one-owner lock of every `LOCK.*` command without a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// One owner at a time: a mutex, or the write side of a read-write lock.
    #[default]
    Exclusive,
    /// Several owners at once (`SHARED`), each a hold of its own with its own token, count and
    /// ttl. Without a limit it is the read side of a read-write lock (an exclusive request on
    /// the key waits for every reader, and readers arriving after a queued writer wait for it).
    /// With `limit: Some(n)` (`SHARED LIMIT n`, 1 ..= [`MAX_LIMIT`]) it is a counting
    /// semaphore: at most `n` owners hold the key at once. A limit needs one server or a Redis
    /// Cluster; see [`Error::UnsoundSemaphore`].
    Shared {
        /// At most this many holders at once; `None`: no limit.
        limit: Option<u32>,
    },
}

impl Mode {
    /// A shared hold without a limit: the read side of a read-write lock.
    pub const fn shared() -> Mode {
        Mode::Shared { limit: None }
    }

    /// A permit of a counting semaphore that `n` owners may hold at once.
    pub const fn limited(n: u32) -> Mode {
        Mode::Shared { limit: Some(n) }
    }

    /// Whether holds of this mode are shared.
    pub fn is_shared(self) -> bool {
        matches!(self, Mode::Shared { .. })
    }

    /// The limit, if this is a semaphore.
    pub fn limit(self) -> Option<u32> {
        match self {
            Mode::Exclusive => None,
            Mode::Shared { limit } => limit,
        }
    }

    /// The words that follow an acquiring command's arguments: none, `SHARED`, or
    /// `SHARED LIMIT n`.
    #[cfg(test)]
    pub(crate) fn args(self) -> Vec<String> {
        Ask::from(self).args()
    }

    fn words(self) -> Vec<String> {
        match self {
            Mode::Exclusive => Vec::new(),
            Mode::Shared { limit: None } => vec!["SHARED".into()],
            Mode::Shared { limit: Some(n) } => vec!["SHARED".into(), "LIMIT".into(), n.to_string()],
        }
    }
}

/// What one acquisition asks for: a mode, and for a semaphore how many of its permits
/// (`SHARED LIMIT n PERMITS p`; 1, the default, is not sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) mode: Mode,
    pub(crate) permits: u32,
}

impl From<Mode> for Ask {
    fn from(mode: Mode) -> Ask {
        Ask { mode, permits: 1 }
    }
}

impl Ask {
    pub(crate) fn is_shared(self) -> bool {
        self.mode.is_shared()
    }

    /// The words that follow an acquiring command's arguments: none, `SHARED`,
    /// `SHARED LIMIT n`, or `SHARED LIMIT n PERMITS p`.
    pub(crate) fn args(self) -> Vec<String> {
        let mut words = self.mode.words();
        if self.permits > 1 && self.mode.limit().is_some() {
            words.push("PERMITS".into());
            words.push(self.permits.to_string());
        }
        words
    }
}

/// Checks `permits` for `mode`: several permits need a semaphore ([`Mode::limited`]), and at
/// most its limit.
pub(crate) fn check_permits(mode: Mode, permits: u32) -> Result<(), Error> {
    match mode.limit() {
        Some(n) if (1..=n).contains(&permits) => Ok(()),
        None if permits == 1 => Ok(()),
        limit => Err(Error::InvalidPermits { permits, limit }),
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Shared { limit: None } => f.write_str("shared"),
            Mode::Shared { limit: Some(n) } => write!(f, "shared, limit {n}"),
        }
    }
}

/// Checks that `mode` can be asked of `masters` independent masters (a Redis Cluster counts as
/// one): a limit in 1 ..= [`MAX_LIMIT`], and no limit over more than one master.
///
/// A quorum makes a sound read-write lock (any two majorities share a master, and a master
/// never holds a reader and a writer at once) but not a sound semaphore: with limit 2 on
/// masters A, B and C, three clients can each win a majority, {A,B}, {B,C} and {A,C}, and so
/// three hold a permit of two.
pub(crate) fn check_mode(mode: Mode, masters: usize) -> Result<(), Error> {
    match mode.limit() {
        None => Ok(()),
        Some(n) if !(1..=MAX_LIMIT).contains(&n) => Err(Error::InvalidLimit(n)),
        Some(n) if masters > 1 => Err(Error::UnsoundSemaphore { limit: n, masters }),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_exclusive() {
        assert_eq!(Mode::default(), Mode::Exclusive);
        assert!(Mode::default().args().is_empty());
    }

    #[test]
    fn modes_as_command_words() {
        assert_eq!(Mode::shared().args(), ["SHARED"]);
        assert_eq!(Mode::limited(3).args(), ["SHARED", "LIMIT", "3"]);
        assert_eq!(Mode::limited(3).limit(), Some(3));
        assert!(Mode::shared().is_shared() && !Mode::Exclusive.is_shared());
    }

    #[test]
    fn a_limit_over_independent_masters_is_refused() {
        for masters in [2, 3, 5] {
            let err = check_mode(Mode::limited(2), masters).expect_err("unsound");
            assert!(
                matches!(err, Error::UnsoundSemaphore { limit: 2, masters: m } if m == masters),
                "{err}"
            );
            assert!(err.is_permanent());
            let text = err.to_string();
            assert!(text.contains("{A,B}, {B,C} and {A,C}"), "{text}");
            // A read-write lock over a quorum is sound.
            assert!(check_mode(Mode::shared(), masters).is_ok());
            assert!(check_mode(Mode::Exclusive, masters).is_ok());
        }
        // One server, or one Redis Cluster.
        assert!(check_mode(Mode::limited(2), 1).is_ok());
    }

    #[test]
    fn permits_need_a_semaphore_and_fit_its_limit() {
        assert!(check_permits(Mode::limited(10), 1).is_ok());
        assert!(check_permits(Mode::limited(10), 10).is_ok());
        assert!(check_permits(Mode::Exclusive, 1).is_ok());
        assert!(check_permits(Mode::shared(), 1).is_ok());
        for (mode, p) in [
            (Mode::limited(10), 0),
            (Mode::limited(10), 11),
            (Mode::Exclusive, 2),
            (Mode::shared(), 3),
        ] {
            let err = check_permits(mode, p).expect_err("refused");
            assert!(matches!(err, Error::InvalidPermits { permits, .. } if permits == p));
            assert!(err.is_permanent());
        }
        let ask = Ask {
            mode: Mode::limited(10),
            permits: 3,
        };
        assert_eq!(ask.args(), ["SHARED", "LIMIT", "10", "PERMITS", "3"]);
        assert_eq!(
            Ask::from(Mode::limited(10)).args(),
            ["SHARED", "LIMIT", "10"]
        );
    }

    #[test]
    fn limits_are_bounded_like_the_module() {
        assert!(check_mode(Mode::limited(1), 1).is_ok());
        assert!(check_mode(Mode::limited(MAX_LIMIT), 1).is_ok());
        for bad in [0, MAX_LIMIT + 1, u32::MAX] {
            assert!(matches!(
                check_mode(Mode::limited(bad), 1),
                Err(Error::InvalidLimit(n)) if n == bad
            ));
        }
        // The range is checked first, whatever the masters.
        assert!(matches!(
            check_mode(Mode::limited(0), 3),
            Err(Error::InvalidLimit(0))
        ));
    }
}
