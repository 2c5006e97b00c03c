//! The error replies the engine gives, in one place (their texts are part of the contract).

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
/// An owner that holds a key asks for it in the other mode (no upgrade or downgrade).
pub const OTHER_MODE: &str = "ERR lock is held in another mode";

/// A shared request whose limit is not the key's (`limit`).
pub fn other_limit(limit: u32) -> String {
    format!("ERR lock has another limit ({limit})")
}
