//! How a lock is held: by one owner (exclusive), or by several at once (shared: a read lock,
//! or a counting semaphore with a limit).

use relock_protocol::Ask;

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

    /// A request of `permits` permits in this mode, as the wire has it (relock-protocol's
    /// [`Ask`], which writes its words: no limit is limit 0, and 1 permit is not sent).
    pub(crate) fn ask(self, permits: u32) -> Ask {
        match self {
            Mode::Exclusive => Ask::Exclusive,
            Mode::Shared { limit } => Ask::Shared {
                limit: limit.unwrap_or(0),
                permits,
            },
        }
    }

    /// The mode `ask` holds its key in.
    pub(crate) fn of(ask: Ask) -> Mode {
        match ask {
            Ask::Exclusive => Mode::Exclusive,
            Ask::Shared { limit: 0, .. } => Mode::shared(),
            Ask::Shared { limit, .. } => Mode::limited(limit),
        }
    }
}

/// How many permits `ask` takes (1 unless a semaphore's request asks for more).
pub(crate) fn permits_of(ask: Ask) -> u32 {
    match ask {
        Ask::Exclusive => 1,
        Ask::Shared { permits, .. } => permits,
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

    /// The words a request of `permits` in `mode` sends after an acquiring command's arguments.
    fn words(mode: Mode, permits: u32) -> Vec<String> {
        let ask = mode.ask(permits);
        assert_eq!((Mode::of(ask), permits_of(ask)), (mode, permits));
        ask.words()
            .into_iter()
            .map(|w| String::from_utf8(w).expect("ascii"))
            .collect()
    }

    #[test]
    fn the_default_is_exclusive() {
        assert_eq!(Mode::default(), Mode::Exclusive);
        assert!(words(Mode::default(), 1).is_empty());
    }

    #[test]
    fn modes_as_command_words() {
        assert_eq!(words(Mode::shared(), 1), ["SHARED"]);
        assert_eq!(words(Mode::limited(3), 1), ["SHARED", "LIMIT", "3"]);
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
        assert_eq!(
            words(Mode::limited(10), 3),
            ["SHARED", "LIMIT", "10", "PERMITS", "3"]
        );
        assert_eq!(words(Mode::limited(10), 1), ["SHARED", "LIMIT", "10"]);
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
