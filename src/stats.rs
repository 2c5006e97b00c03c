//! Counters for the `INFO relock` section.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use crate::{datatype, fencing, rm, waiters};

/// A monotonically increasing event counter.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    /// Counts one event.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// New holds taken with `LOCK.ACQUIRE`, `LOCK.REENTER` or an immediate `LOCK.WAIT`.
pub static ACQUIRED: Counter = Counter::new();
/// Holds ended by `LOCK.RELEASE`.
pub static RELEASED: Counter = Counter::new();
/// Successful `LOCK.RENEW` calls.
pub static RENEWED: Counter = Counter::new();
/// Acquire attempts that found the lock taken (refused, or queued by `LOCK.WAIT`).
pub static CONTENDED: Counter = Counter::new();
/// Hand-offs to a waiter.
pub static GRANTED: Counter = Counter::new();
/// Holds that ended because their TTL ran out.
pub static EXPIRED: Counter = Counter::new();
/// `LOCK.WAIT` calls that timed out.
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Holds broken by `LOCK.FORCERELEASE`.
pub static FORCERELEASED: Counter = Counter::new();

/// The `INFO` callback: one section, `relock` (Redis prefixes each field with `relock_`).
pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    crate::guard((), || {
        let fields: [(&std::ffi::CStr, u64); 12] = [
            (c"locks", datatype::live_count()),
            (c"waiters", waiters::live_total() as u64),
            (c"timers", waiters::armed_timers() as u64),
            (c"acquired_total", ACQUIRED.get()),
            (c"released_total", RELEASED.get()),
            (c"renewed_total", RENEWED.get()),
            (c"contended_total", CONTENDED.get()),
            (c"granted_total", GRANTED.get()),
            (c"expired_total", EXPIRED.get()),
            (c"wait_timeouts_total", WAIT_TIMEOUTS.get()),
            (c"forcereleased_total", FORCERELEASED.get()),
            (c"last_token", fencing::last()),
        ];
        unsafe {
            rm!(RedisModule_InfoAddSection(ctx, c"".as_ptr()));
            for (name, value) in fields {
                rm!(RedisModule_InfoAddFieldULongLong(ctx, name.as_ptr(), value));
            }
        }
    })
}
