//! The `INFO relock` section.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::raw;

use super::ffi;
use super::globals;
use crate::lock::contention::Histogram;

/// `relock_version`: the workspace version the module was built from, e.g. `0.2.0` (`MODULE LIST`
/// shows it encoded, 200).
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the crate version holds a NUL byte"),
    };

/// The `INFO` callback: one section, `relock` (Redis prefixes each field with `relock_`).
pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    ffi::guard((), || {
        // While the engine is busy (only in a crash report from inside it) its fields read 0.
        let (waiters, timers, stats, last_token) =
            globals::read_engine(|e| (e.waiters(), e.armed_timers(), e.stats(), e.last_token()))
                .unwrap_or_default();
        let lapse_timers = globals::read_engine(|e| e.lapse_timers()).unwrap_or_default();
        let observers = globals::read_engine(|e| e.observers()).unwrap_or_default();
        let (grace_ms, grace_left_ms) =
            globals::read_engine(|e| e.grace_ms(ffi::monotonic_us())).unwrap_or_default();
        let (waits, holds, log_len) = globals::read_engine(|e| {
            let w = e.watch();
            (
                percentiles(&w.contention.waits),
                percentiles(&w.contention.holds),
                w.journal.len() as u64,
            )
        })
        .unwrap_or_default();
        let fields: [(&std::ffi::CStr, u64); 25] = [
            (c"locks", globals::lock_values()),
            (c"holds", globals::holds()),
            (c"waiters", waiters as u64),
            (c"timers", timers as u64),
            (c"lapse_timers", lapse_timers as u64),
            (c"acquired_total", stats.acquired),
            (c"released_total", stats.released),
            (c"renewed_total", stats.renewed),
            (c"contended_total", stats.contended),
            (c"granted_total", stats.granted),
            (c"expired_total", stats.expired),
            (c"wait_timeouts_total", stats.wait_timeouts),
            (c"forcereleased_total", stats.forcereleased),
            (c"downgraded_total", stats.downgraded),
            (c"observers", observers as u64),
            (c"observe_wakeups_total", stats.observe_wakeups),
            (c"fenced_total", stats.fenced),
            (c"fenced_stale_total", stats.fenced_stale),
            (c"fenced_refused_total", stats.fenced_refused),
            (c"last_token", last_token),
            (c"longest_turn_us", globals::longest_turn_us()),
            (c"longest_apply_us", globals::longest_apply_us()),
            (c"log_len", log_len),
            (c"restart_grace_ms", grace_ms),
            (c"grace_left_ms", grace_left_ms),
        ];
        // SAFETY: `ctx` is the INFO context Redis passed; names are static C strings.
        unsafe {
            rm!(RedisModule_InfoAddSection(ctx, c"".as_ptr()));
            rm!(RedisModule_InfoAddFieldCString(
                ctx,
                c"version".as_ptr(),
                VERSION.as_ptr()
            ));
            for (name, value) in fields {
                rm!(RedisModule_InfoAddFieldULongLong(ctx, name.as_ptr(), value));
            }
            for (name, value) in [
                (c"wait_percentiles_ms", waits),
                (c"hold_percentiles_ms", holds),
            ] {
                let value = CString::new(value).unwrap_or_default();
                rm!(RedisModule_InfoAddFieldCString(
                    ctx,
                    name.as_ptr(),
                    value.as_ptr()
                ));
            }
        }
    })
}

/// A distribution as `INFO latencystats` shows one: `p50=...,p90=...,p99=...,p99.9=...`, in ms
/// with three decimals.
fn percentiles(histogram: &Histogram) -> String {
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")]
        .iter()
        .map(|(q, name)| format!("{name}={:.3}", histogram.quantile(q / 100.0) / 1000.0))
        .collect::<Vec<_>>()
        .join(",")
}
