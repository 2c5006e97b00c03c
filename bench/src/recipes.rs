//! The lock recipes relock replaces, written as their users write them, and relock's own
//! commands, as the command lines each approach sends.

use std::io;

use relock_protocol::cmd::{Acquire, Release};
use relock_protocol::{Ask, Command};

use crate::resp::{Conn, Reply};

/// Recipe A's release: delete the key only if it still holds our owner (compare-and-delete).
pub const A_RELEASE: &str = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Recipe B's acquire (Redisson `RLock.tryLockInnerAsync`): a hash of owner -> reentrancy count;
/// nil when acquired, else the lock's PTTL. KEYS[1] = lock, ARGV[1] = ttl, ARGV[2] = owner.
pub const B_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";

/// Recipe B's release (Redisson `RLock.unlockInnerAsync`): count - 1, and at 0 delete the lock
/// and publish on its channel (what recipe D's waiters listen to). KEYS[1] = lock,
/// KEYS[2] = channel, ARGV[1] = message, ARGV[2] = ttl, ARGV[3] = owner.
pub const B_RELEASE: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

/// The SHA1s of the scripts, as `SCRIPT LOAD` returned them on the server under test.
#[derive(Clone, Debug)]
pub struct Scripts {
    pub a_release: String,
    pub b_acquire: String,
    pub b_release: String,
}

impl Scripts {
    pub async fn load(conn: &mut Conn) -> io::Result<Scripts> {
        let mut sha = Vec::new();
        for body in [A_RELEASE, B_ACQUIRE, B_RELEASE] {
            sha.push(conn.ok(&["SCRIPT", "LOAD", body]).await?.text());
        }
        Ok(Scripts {
            b_release: sha.pop().unwrap_or_default(),
            b_acquire: sha.pop().unwrap_or_default(),
            a_release: sha.pop().unwrap_or_default(),
        })
    }
}

/// Recipe D's per-lock channel (Redisson's naming).
pub fn channel(key: &str) -> String {
    format!("redisson_lock__channel:{{{key}}}")
}

/// The non-blocking acquire and the release of the approaches that have one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// `LOCK.ACQUIRE` / `LOCK.RELEASE`.
    Relock,
    /// `SET NX PX` / compare-and-delete Lua.
    SetNx,
    /// Hash + `HINCRBY` Lua / Redisson's unlock Lua.
    Hash,
}

impl Lock {
    pub fn push_acquire(self, c: &mut Conn, s: &Scripts, key: &str, owner: &str, ttl_ms: u64) {
        match self {
            Lock::Relock => c.push(
                &Acquire {
                    key: key.as_bytes(),
                    owner: owner.as_bytes(),
                    ttl_ms,
                    ask: Ask::Exclusive,
                }
                .to_args(),
            ),
            Lock::SetNx => c.push(&["SET", key, owner, "NX", "PX", &ttl_ms.to_string()]),
            Lock::Hash => c.push(&[
                "EVALSHA",
                &s.b_acquire,
                "1",
                key,
                &ttl_ms.to_string(),
                owner,
            ]),
        }
    }

    pub fn push_release(self, c: &mut Conn, s: &Scripts, key: &str, owner: &str, ttl_ms: u64) {
        match self {
            Lock::Relock => c.push(
                &Release {
                    key: key.as_bytes(),
                    owner: owner.as_bytes(),
                    from: None,
                }
                .to_args(),
            ),
            Lock::SetNx => c.push(&["EVALSHA", &s.a_release, "1", key, owner]),
            Lock::Hash => c.push(&[
                "EVALSHA",
                &s.b_release,
                "2",
                key,
                &channel(key),
                "0",
                &ttl_ms.to_string(),
                owner,
            ]),
        }
    }

    /// Whether an acquire reply means the lock was won.
    pub fn won(self, reply: &Reply) -> bool {
        match self {
            Lock::Relock => matches!(reply, Reply::Int(_)),
            Lock::SetNx => matches!(reply, Reply::Status(s) if s == "OK"),
            // Redisson's script answers nil on success and the PTTL otherwise.
            Lock::Hash => reply.is_nil(),
        }
    }

    /// Whether an acquire reply means the lock is held by another owner: nil for relock and
    /// `SET NX`, the holder's PTTL for Redisson's script.
    pub fn refused(self, reply: &Reply) -> bool {
        match self {
            Lock::Relock | Lock::SetNx => reply.is_nil(),
            Lock::Hash => matches!(reply, Reply::Int(_)),
        }
    }
}
