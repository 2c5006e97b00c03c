//! relock: a distributed lock that lives inside Redis.
//!
//! The module declaration only: its name, data type and entry point. The lock itself is the
//! engine, the crate `relock_engine` (crates/engine: pure Rust, without a Redis dependency), known
//! here as `lock`; `redis` is the Redis host around it, the one place with FFI and `unsafe`
//! besides the engine's packed holds. docs/commands.md documents every command. Loaded into a server
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

// `crate::lock::...` in src/redis: the engine's paths as they were when it was src/lock/.
use relock_engine as lock;
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

/// The module's version as `MODULE LIST` shows it (`ver`), encoded as RedisJSON and RediSearch
/// encode theirs: major * 10000 + minor * 100 + patch, from the workspace version (0.2.0 is 200).
const MODULE_VERSION: i32 = module_version(env!("CARGO_PKG_VERSION"));

/// `"1.2.3"` (a pre-release or build suffix ignored) as 10203. A version this encoding cannot
/// hold (minor or patch over 99, no three numbers) stops the build: it is evaluated at compile
/// time.
const fn module_version(version: &str) -> i32 {
    let bytes = version.as_bytes();
    let mut parts = [0i32; 3];
    let mut part = 0;
    let mut digits = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => {
                parts[part] = parts[part] * 10 + (bytes[i] - b'0') as i32;
                digits += 1;
            }
            b'.' if part < 2 && digits > 0 => {
                part += 1;
                digits = 0;
            }
            b'-' | b'+' => break,
            _ => panic!("the crate version is not major.minor.patch"),
        }
        i += 1;
    }
    assert!(
        part == 2 && digits > 0,
        "the crate version is not major.minor.patch"
    );
    assert!(
        parts[1] < 100 && parts[2] < 100,
        "minor and patch must be below 100"
    );
    parts[0] * 10000 + parts[1] * 100 + parts[2]
}

redis_module! {
    name: "relock",
    version: MODULE_VERSION,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE],
    init: init,
}

#[cfg(test)]
mod tests {
    use super::module_version;

    #[test]
    fn module_version_is_encoded_as_redisjson_does() {
        assert_eq!(module_version("0.2.0"), 200);
        assert_eq!(module_version("1.0.0"), 10000);
        assert_eq!(module_version("2.8.13"), 20813);
        assert_eq!(module_version("0.3.0-rc.1"), 300);
        assert_eq!(module_version("1.2.3+build.5"), 10203);
        let ours: Vec<i32> = env!("CARGO_PKG_VERSION")
            .split(['-', '+'])
            .next()
            .unwrap_or_default()
            .split('.')
            .map(|n| n.parse().unwrap_or(-1))
            .collect();
        assert_eq!(
            super::MODULE_VERSION,
            ours[0] * 10000 + ours[1] * 100 + ours[2]
        );
    }

    #[test]
    #[should_panic(expected = "not major.minor.patch")]
    fn a_version_without_three_numbers_is_refused() {
        module_version("1.2");
    }

    #[test]
    #[should_panic(expected = "below 100")]
    fn a_minor_over_99_is_refused() {
        module_version("1.100.0");
    }
}
