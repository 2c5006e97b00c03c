//! The bounds of every field a lock value holds, in one place. The three readers of a value
//! from outside — `LOCK.APPLY` (what replicas and the AOF replay), the RDB loader (`RESTORE`
//! takes any payload) and the effect encoder (what the master sends) — all ask these, so a
//! value one of them takes is a value the others take too: a master never sends what its
//! replica refuses, and a server never holds what it cannot load back.

/// Bits of a token: tokens stay below 2^53 so they are exact as JSON / JavaScript numbers (and
/// the engine's packed hold and holder records keep the owner's length in the bits above).
pub const TOKEN_BITS: u32 = 53;

/// Largest token.
pub const MAX_TOKEN: u64 = (1 << TOKEN_BITS) - 1;

/// Largest reentrancy count.
pub const MAX_COUNT: u32 = u32::MAX;

/// The largest limit a semaphore may have.
pub const MAX_LIMIT: u32 = 1_000_000;

/// The most holders one key may have (with 1-byte owners, about 5 GB): a new holder past it is
/// refused, as RDB loading refuses a value with more.
pub const MAX_HOLDERS: usize = 100_000_000;

/// Bits of a holder record's packed words that hold a time (Unix ms, until the year 2527).
pub const TIME_BITS: u32 = 44;

/// The latest lease end a holder can have (the year 2527): a later one is kept as this.
pub const MAX_LEASE_END: i64 = (1 << TIME_BITS) - 1;

/// Longest owner, in bytes.
pub const MAX_OWNER_LEN: usize = 256;

/// The latest absolute expiry (Unix ms) an effect carries: 2^62, some 146 million years away.
/// An exclusive lock's expiry is its key's own, which a user may set later still (Redis takes
/// `PEXPIREAT key 9223372036854775806`); when the module next writes such a lock it cuts the
/// key's expiry to this, and the effect says the same ([`expiry`]), so the replica ends with
/// exactly the master's. A shared holder's lease end is taken in the same range and kept as
/// its record keeps it ([`lease_end`]), on the master and the replica alike.
pub const MAX_EXPIRY_MS: i64 = 1 << 62;

/// The latest time a holder record keeps (Unix ms, the year 2527): a shared holder's lease end
/// (a later one is kept as this) and any hold's grant time (a later one is refused).
pub const MAX_TIME_MS: i64 = MAX_LEASE_END;

/// An owner: 1 to 256 bytes, any bytes.
pub fn is_owner(owner: &[u8]) -> bool {
    (1..=MAX_OWNER_LEN).contains(&owner.len())
}

/// A fencing token: 1 <= token < 2^53.
pub fn is_token(token: u64) -> bool {
    (1..=MAX_TOKEN).contains(&token)
}

/// A reentrancy count: 1 <= count <= 2^32 - 1.
pub fn is_count(count: u64) -> bool {
    (1..=u64::from(MAX_COUNT)).contains(&count)
}

/// A key's limit: 0 (none) to 10^6.
pub fn is_limit(limit: u64) -> bool {
    limit <= u64::from(MAX_LIMIT)
}

/// The permits of one hold on a key with `limit`: one on a key without a limit, 1 to the limit
/// on a semaphore.
pub fn is_permits(permits: u64, limit: u64) -> bool {
    if limit == 0 {
        permits == 1
    } else {
        (1..=limit).contains(&permits)
    }
}

/// How many holders one shared key may have.
pub fn is_holders(holders: u64) -> bool {
    (1..=MAX_HOLDERS as u64).contains(&holders)
}

/// An absolute expiry or lease end, Unix ms: 1 to [`MAX_EXPIRY_MS`].
pub fn is_expiry(at: i64) -> bool {
    (1..=MAX_EXPIRY_MS).contains(&at)
}

/// A grant time, Unix ms (0: unknown).
pub fn is_grant_time(at: i64) -> bool {
    (0..=MAX_TIME_MS).contains(&at)
}

/// `at` as the lease end a holder record keeps: a later one is cut to [`MAX_TIME_MS`] (a lock
/// whose key a user made expire past the year 2527, then downgraded).
pub fn lease_end(at: i64) -> i64 {
    at.clamp(1, MAX_TIME_MS)
}

/// `at` as an expiry `LOCK.APPLY` takes (and the key's, when the module writes it).
pub fn expiry(at: i64) -> i64 {
    at.clamp(1, MAX_EXPIRY_MS)
}

/// `at` as a grant time a record keeps (0 stays unknown).
pub fn grant_time(at: i64) -> i64 {
    at.clamp(0, MAX_TIME_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_and_its_clamp_agree() {
        for at in [i64::MIN, -1, 0, 1, MAX_TIME_MS, MAX_TIME_MS + 1, i64::MAX] {
            assert!((1..=MAX_TIME_MS).contains(&lease_end(at)), "{at}");
            assert!(is_expiry(expiry(at)), "{at}");
            assert!(is_grant_time(grant_time(at)), "{at}");
        }
        assert!(is_expiry(MAX_EXPIRY_MS) && !is_expiry(MAX_EXPIRY_MS + 1) && !is_expiry(0));
        assert!(is_grant_time(0) && is_grant_time(MAX_TIME_MS) && !is_grant_time(1 << 44));
        assert!(is_permits(1, 0) && !is_permits(2, 0));
        assert!(is_permits(3, 3) && !is_permits(4, 3) && !is_permits(0, 3));
        assert!(is_holders(1) && is_holders(MAX_HOLDERS as u64) && !is_holders(0));
        assert!(!is_holders(MAX_HOLDERS as u64 + 1));
        assert!(is_limit(0) && is_limit(1_000_000) && !is_limit(1_000_001));
    }
}
