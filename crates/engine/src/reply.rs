//! What the engine answers ([`Reply`] and the listings it carries) and what it is asked
//! ([`Request`], [`Wait`]): plain data, turned into Redis replies by the host.

use super::errors::LockError;
use super::shared::Mode;

/// What a command answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Integer(u64),
    Nil,
    Ok,
    Error(LockError),
    /// `LOCK.INFO`'s map.
    Info(Info),
    /// `LOCK.HOLDERS`: one entry per holder, in grant order.
    Holders(Vec<HolderInfo>),
    /// `LOCK.WAITERS`: one entry per waiter, in queue order.
    Waiters(Vec<WaiterInfo>),
    /// `LOCK.MACQUIRE`: each key's token, in argument order.
    Tokens(Vec<u64>),
    /// The client is blocked; its answer comes later through [`Host::unblock`].
    Blocked,
}

/// One entry of `LOCK.WAITERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterInfo {
    pub owner: Box<[u8]>,
    pub mode: Mode,
    /// The waiting connection's id.
    pub client: u64,
    /// Ms since it queued.
    pub waited_ms: u64,
    /// Ms left before it times out, -1 without a timeout.
    pub timeout_ms: i64,
    /// The ttl it asked for.
    pub ttl_ms: u64,
}

/// An acquiring request: `LOCK.ACQUIRE`, `LOCK.REENTER`, and what `LOCK.WAIT` asks for.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    /// Exclusive, or shared (with a limit).
    pub mode: Mode,
    /// The lease of the hold it gets.
    pub ttl_ms: u64,
}

/// What a `LOCK.WAIT` asks for.
#[derive(Clone, Copy, Debug)]
pub struct Wait<'a> {
    pub request: Request<'a>,
    /// How long it waits at most (0: no limit).
    pub timeout_ms: u64,
}

/// What `LOCK.INFO` reports about a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The holder of an exclusive lock (none for a shared key).
    pub owner: Option<Box<[u8]>>,
    pub token: Option<u64>,
    pub count: Option<u32>,
    /// Remaining lifetime in ms (of the latest lease of a shared key), -1 without an expiry.
    pub ttl_ms: i64,
    pub waiters: usize,
    pub mode: Mode,
    /// Live holds.
    pub holders: usize,
    /// A semaphore's free permits; 0 for an exclusive lock, -1 for a shared key without limit.
    pub permits_free: i64,
}

/// One entry of `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    pub owner: Box<[u8]>,
    pub token: u64,
    pub count: u32,
    /// Remaining lease in ms, -1 without an expiry.
    pub ttl_ms: i64,
    /// The permits it holds (1 for an exclusive hold and a reader).
    pub permits: u32,
}
