//! relock: a distributed lock that lives inside Redis.
//!
//! The module declaration only: its name, data type and entry point. The lock itself is the
//! engine in [`lock`] (pure Rust, no Redis imports); `redis` is the Redis host around it, the one
//! place with FFI and `unsafe`. docs/commands.md documents every command. Loaded into a server
//! (`make run` starts one on 127.0.0.1:6379):
//!
//! ```text
//! $ redis-cli LOCK.ACQUIRE orders:42 worker-a 30000
//! (integer) 1795262129362000          # the fencing token
//! $ redis-cli LOCK.WAIT orders:42 worker-b 30000 5000
//! ... blocks until worker-a releases, then the token of worker-b's hold
//! $ redis-cli LOCK.RELEASE orders:42 worker-a
//! (integer) 0                         # released, and handed to worker-b in the same step
//! ```
//!
//! (A doctest cannot load the crate: outside Redis its allocator is unavailable.)

pub mod lock;
mod redis;

use redis_module::redis_module;

use crate::redis::datatype::LOCK_TYPE;
use crate::redis::init::init;

#[cfg(not(any(test, feature = "system-alloc")))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(any(test, feature = "system-alloc")))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
// Unit tests run without Redis, so they cannot use its allocator.
#[cfg(any(test, feature = "system-alloc"))]
type Allocator = std::alloc::System;
#[cfg(any(test, feature = "system-alloc"))]
const ALLOCATOR: Allocator = std::alloc::System;

redis_module! {
    name: "relock",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
}
