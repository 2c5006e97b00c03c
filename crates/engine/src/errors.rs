//! The errors the engine answers, as data ([`LockError`]), and their texts (part of the
//! contract), rendered in one place ([`LockError::text`]).

use std::borrow::Cow;

/// `LOCK.REENTER` at the highest count.
pub const REENTRANCY_LIMIT: &str = "ERR reentrancy limit reached";
/// Every token below 2^53 has been issued.
pub const NO_TOKENS: &str = "ERR fencing token space exhausted";
/// The key holds another type (Redis's own wording).
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A replica refuses lock changes, and fails its waiters (Redis's own wording).
pub const READONLY: &str = "READONLY You can't write against a read only replica.";
/// A waiter's user lost the right to run `LOCK.WAIT` on its key while it waited.
pub const NOPERM: &str =
    "NOPERM No permissions any more to run the 'lock.wait' command or to access its key";
/// `LOCK.OBSERVE` on a shared key, or its key became shared while observed.
pub const SHARED: &str = "ERR lock is shared";
/// An observer whose server became a replica (Redis's own text for its blocked clients).
pub const UNBLOCKED: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";
/// An observer's user lost the right to read its key while it observed.
pub const NOPERM_OBSERVE: &str =
    "NOPERM No permissions any more to run the 'lock.observe' command or to access its key";
/// A `LOCK.OBSERVE` that would block when the observers' tables, which count in 32 bits, are
/// full (more blocked clients than a server can have: kept as an error, not a crash).
pub const TOO_MANY_OBSERVERS: &str = "ERR too many observers";
/// An owner that holds a key asks for it in the other mode (no upgrade; a downgrade is its own
/// command).
pub const OTHER_MODE: &str =
    "ERR lock is held in another mode (to go from exclusive to shared, use LOCK.DOWNGRADE)";
/// An owner that holds a semaphore asks for it with other permits.
pub const OTHER_PERMITS: &str = "ERR lock is held with other permits";
/// A new holder's owner does not fit beside the key's others (owners take 4 GiB in all).
pub const TOO_MANY_HOLDERS: &str = "ERR lock has too many holders";

/// A step that adds a hold or a level while the server is out of memory (Redis's own text for a
/// `deny-oom` command).
pub const OUT_OF_MEMORY: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// A ttl longer than the restart grace, while one is configured.
pub const TTL_ABOVE_GRACE: &str = "ERR ttl_ms exceeds relock.restart-grace-ms";

/// A request for a new hold during the restart grace (`ms` left).
pub fn grace(ms: u64) -> String {
    format!("TRYAGAIN relock restart grace, {ms} ms left")
}

/// A step `FROM from` on a hold whose count is `held`, neither before nor after that step.
pub fn other_count(held: u32, from: u32) -> String {
    format!("ERR hold count is {held}, not {from}")
}

/// A request for a new hold while the token counter is ahead of this server's clock (`ms`
/// until the clock catches up): the restart grace's error, which every client reads as a
/// server that grants nothing new yet, with the reason after it.
pub fn clock(ms: u64) -> String {
    format!("TRYAGAIN relock restart grace, {ms} ms left (tokens ahead of this server's clock)")
}

/// A shared request whose limit is not the key's (`limit`).
pub fn other_limit(limit: u32) -> String {
    format!("ERR lock has another limit ({limit})")
}

/// Why a request is refused: it can never be granted as asked, or no hold can be made. Nothing
/// changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The holder's count is at its highest.
    ReentrancyLimit,
    /// The owner holds the key in the other mode.
    OtherMode,
    /// A shared request whose limit is not the key's (this one).
    OtherLimit(u32),
    /// The owner holds the semaphore with other permits.
    OtherPermits,
    /// Every token has been issued.
    NoTokens,
    /// The key's holders take all the room a key has.
    TooManyHolders,
    /// The restart grace is under way: no new hold for this many more ms.
    Grace(u64),
    /// A ttl longer than the configured restart grace.
    TtlAboveGrace,
    /// A step `FROM from` on a hold whose count is `held`: neither the count it moves from nor
    /// the one it leaves (a repeat).
    OtherCount { held: u32, from: u32 },
    /// The token counter is ahead of this server's clock (tokens from a server whose clock is
    /// ahead): no new hold for this many more ms.
    Clock(u64),
    /// A hold or a level to add while the server is out of memory (`maxmemory`).
    OutOfMemory,
}

impl Refusal {
    /// The error reply.
    pub fn text(self) -> Cow<'static, str> {
        match self {
            Refusal::ReentrancyLimit => Cow::Borrowed(REENTRANCY_LIMIT),
            Refusal::OtherMode => Cow::Borrowed(OTHER_MODE),
            Refusal::OtherLimit(limit) => Cow::Owned(other_limit(limit)),
            Refusal::OtherPermits => Cow::Borrowed(OTHER_PERMITS),
            Refusal::NoTokens => Cow::Borrowed(NO_TOKENS),
            Refusal::TooManyHolders => Cow::Borrowed(TOO_MANY_HOLDERS),
            Refusal::Grace(ms) => Cow::Owned(grace(ms)),
            Refusal::TtlAboveGrace => Cow::Borrowed(TTL_ABOVE_GRACE),
            Refusal::OtherCount { held, from } => Cow::Owned(other_count(held, from)),
            Refusal::Clock(ms) => Cow::Owned(clock(ms)),
            Refusal::OutOfMemory => Cow::Borrowed(OUT_OF_MEMORY),
        }
    }
}

/// Every error the engine answers, a command's or a blocked client's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockError {
    /// The request can never be granted as asked, or no hold can be made.
    Refused(Refusal),
    /// The key holds (or came to hold) another type.
    WrongType,
    /// This server is (or became) a replica.
    ReadOnly,
    /// A waiter's user lost the right to its wait.
    NoPerm,
    /// The key's slot is served elsewhere: the host's `ASK`, `MOVED` or `TRYAGAIN` error.
    Redirect(String),
    /// `LOCK.OBSERVE` on a shared key.
    Shared,
    /// An observer's server became a replica.
    Unblocked,
    /// An observer's user lost the right to read its key.
    NoPermObserve,
    /// A `LOCK.OBSERVE` the observers' tables have no room for.
    TooManyObservers,
}

impl LockError {
    /// The error reply.
    pub fn text(&self) -> Cow<'static, str> {
        match self {
            LockError::Refused(refusal) => refusal.text(),
            LockError::WrongType => Cow::Borrowed(WRONGTYPE),
            LockError::ReadOnly => Cow::Borrowed(READONLY),
            LockError::NoPerm => Cow::Borrowed(NOPERM),
            LockError::Redirect(text) => Cow::Owned(text.clone()),
            LockError::Shared => Cow::Borrowed(SHARED),
            LockError::Unblocked => Cow::Borrowed(UNBLOCKED),
            LockError::NoPermObserve => Cow::Borrowed(NOPERM_OBSERVE),
            LockError::TooManyObservers => Cow::Borrowed(TOO_MANY_OBSERVERS),
        }
    }
}

impl From<Refusal> for LockError {
    fn from(refusal: Refusal) -> LockError {
        LockError::Refused(refusal)
    }
}
