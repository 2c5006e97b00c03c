//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`): the source streams a slot's keys
//! to the target as commands (each lock through the type's `aof_rewrite`, then every later
//! change), pauses writes for the handover, and deletes its copy once the target owns the slot.
//! Valkey refuses to start one unless every module declares it can take part, so relock does,
//! after seeing to what would make it unsafe (the events are followed in `events`):
//!
//! - **While exporting**, everything the module propagates goes to the target too, even on a
//!   node with no replica and no AOF: lock changes must go out as their effects, never as the
//!   client's command replayed there (whose decision depends on time and state), so
//!   [`Migrations::exporting`] makes `effects_needed` true.
//! - **While importing**, the target holds keys of slots it does not own yet; only the import
//!   stream may touch them. The module opens none of them for its own work (timers, deferred
//!   jobs): [`Migrations::importing`] makes the host refuse to open them, so no lapsed lease is pruned, no
//!   TTL capped, no lazy expiry propagated into a slot the target does not own.
//! - **When the export completes**, the source deletes the keys (one `del` notification each)
//!   with the slot already owned elsewhere: every waiter is served again, and gets `MOVED`.
//!   Writes during the handover's pause are deferred like any other pause. Those deletions are
//!   moves, not ends, as a `MIGRATE`'s are: [`Migrations::handed_over`] tells the journal so.
//!   Valkey sends them right after the export's completion event, where nobody else can delete
//!   a key of those slots (this node no longer serves them); the slots are remembered until a
//!   cron tick passes with no deletion in them (or this node imports them again).
//!
//! Nothing else changes: the stream carries holds with their tokens (which the target
//! observes), lease ends are absolute. As with `MIGRATE`, queued waiters do not move: they are
//! redirected and queue again on the target.
//!
//! Redis 8.4's atomic slot migration (`CLUSTER MIGRATION IMPORT`, and `redis-cli --cluster
//! reshard` once every node is 8.4+) needs no declaration: its source forks and sends each key
//! as `RESTORE ... ABSTTL` (the type's `rdb_save`), then every later change of the slot, and
//! trims its copy after the handover. Its events (a different number and different subevents:
//! [`REDIS_EVENT`]) are mapped onto the same [`Migrations`], so the same three rules hold. The
//! trim is where it differs: by default Redis frees the slot's keys in a background thread with
//! no per-key notification (the holds would vanish from the source's journal unexplained); with a
//! module subscribed to `key_trimmed` it deletes them on the main thread, a few per cron tick,
//! each followed by that notification, which relock logs as `moved` (see `unlinked::reason`) and
//! which serves the key's waiters (they get `MOVED`). relock subscribes: see the deployment docs
//! for what it costs.
//!
//! **An import that fails** (or is cancelled, `CLUSTER MIGRATION CANCEL`) leaves the target with
//! the keys it received so far, of slots it never owned; it deletes them (Redis trims them, one
//! `key_trimmed` each). Those holds were never the target's and did not move (the source still
//! serves them): [`Migrations::import_dropped`] tells the journal to say nothing of them. The
//! slots are remembered as handed-over ones are (until a quiet cron tick, or an import of them
//! starts again).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9.0).
pub const OPTION_HANDLES_SLOT_MIGRATION: c_int = 1 << 5;

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (Valkey 9.0) and its subevents.
pub const EVENT: u64 = 19;
const IMPORT_STARTED: u64 = 0;
pub const EXPORT_STARTED: u64 = 1;
const IMPORT_ABORTED: u64 = 2;
const EXPORT_ABORTED: u64 = 3;
pub const IMPORT_COMPLETED: u64 = 4;
pub const EXPORT_COMPLETED: u64 = 5;

/// `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION` (Redis 8.4) and its subevents.
pub const REDIS_EVENT: u64 = 18;
const REDIS_IMPORT_STARTED: u64 = 0;
const REDIS_IMPORT_FAILED: u64 = 1;
const REDIS_IMPORT_COMPLETED: u64 = 2;
const REDIS_MIGRATE_STARTED: u64 = 3;
const REDIS_MIGRATE_FAILED: u64 = 4;
const REDIS_MIGRATE_COMPLETED: u64 = 5;
/// `REDISMODULE_NOTIFY_KEY_TRIMMED` (Redis 8.4): a key of a slot that moved away, deleted.
pub const NOTIFY_KEY_TRIMMED: c_int = 1 << 17;

/// The subevent of Valkey's event that a Redis subevent means (`None`: one relock ignores,
/// `MIGRATE_MODULE_PROPAGATE`).
pub fn redis_subevent(subevent: u64) -> Option<u64> {
    match subevent {
        REDIS_IMPORT_STARTED => Some(IMPORT_STARTED),
        REDIS_IMPORT_FAILED => Some(IMPORT_ABORTED),
        REDIS_IMPORT_COMPLETED => Some(IMPORT_COMPLETED),
        REDIS_MIGRATE_STARTED => Some(EXPORT_STARTED),
        REDIS_MIGRATE_FAILED => Some(EXPORT_ABORTED),
        REDIS_MIGRATE_COMPLETED => Some(EXPORT_COMPLETED),
        _ => None,
    }
}

/// `RedisModuleSlotRange`.
#[repr(C)]
struct RedisSlotRange {
    start: u16,
    end: u16,
}

/// `RedisModuleSlotRangeArray` (its ranges follow the count).
#[repr(C)]
struct RedisSlotRangeArray {
    num_ranges: i32,
    ranges: [RedisSlotRange; 0],
}

/// `RedisModuleClusterSlotMigrationInfoV1`, the data of Redis's event.
#[repr(C)]
struct RedisMigrationInfo {
    version: u64,
    source_node_id: [c_char; 41],
    destination_node_id: [c_char; 41],
    task_id: *const c_char,
    slots: *const RedisSlotRangeArray,
}

/// The task id and slot ranges of a Redis migration event's data.
///
/// # Safety
/// `data` must be the `RedisModuleClusterSlotMigrationInfoV1` Redis passes with the event,
/// valid for the length of the callback.
pub unsafe fn redis_event_data(data: *mut c_void) -> Option<(String, Vec<(u16, u16)>)> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; the id and ranges are copied out here.
    unsafe {
        let info = &*data.cast::<RedisMigrationInfo>();
        let job = if info.task_id.is_null() {
            String::new()
        } else {
            CStr::from_ptr(info.task_id).to_string_lossy().into_owned()
        };
        let ranges = if info.slots.is_null() {
            Vec::new()
        } else {
            let array = &*info.slots;
            let n = usize::try_from(array.num_ranges).unwrap_or(0);
            std::slice::from_raw_parts(array.ranges.as_ptr(), n)
                .iter()
                .map(|r| (r.start, r.end))
                .collect()
        };
        Some((job, ranges))
    }
}

/// `ValkeyModuleSlotRange`.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`, the event's data.
#[repr(C)]
struct MigrationInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *mut SlotRange,
    num_slot_ranges: u32,
}

/// The slot migrations under way on this node, by job name.
#[derive(Default)]
pub struct Migrations {
    importing: Vec<(String, Vec<(u16, u16)>)>,
    exporting: Vec<(String, Vec<(u16, u16)>)>,
    /// The slots of exports that just completed, whose keys Valkey deletes next.
    handed_over: Vec<(u16, u16)>,
    /// Whether a deletion was in them (or they were handed over) since the last cron tick.
    handed_over_lately: bool,
    /// The slots of imports that failed or were cancelled, whose keys this node deletes next
    /// (Redis trims them, one `key_trimmed` each): holds that were never this node's.
    dropped: Vec<(u16, u16)>,
    /// Whether a deletion was in them (or they were dropped) since the last cron tick.
    dropped_lately: bool,
}

impl Migrations {
    /// Applies one event: a job starts (its ranges are added) or ends (removed).
    pub fn apply(&mut self, subevent: u64, job: String, ranges: Vec<(u16, u16)>) {
        match subevent {
            IMPORT_STARTED => {
                // Keys of these slots are this node's again once imported.
                let overlaps =
                    |&(lo, hi): &(u16, u16)| ranges.iter().any(|&(l, h)| lo <= h && l <= hi);
                self.handed_over.retain(|r| !overlaps(r));
                self.dropped.retain(|r| !overlaps(r));
                self.importing.push((job, ranges));
            }
            EXPORT_STARTED => self.exporting.push((job, ranges)),
            IMPORT_ABORTED => {
                // The event's ranges, or else the job's own.
                let mut dropped = ranges;
                self.importing.retain(|(j, r)| {
                    if *j == job && dropped.is_empty() {
                        dropped = r.clone();
                    }
                    *j != job
                });
                self.dropped.extend(dropped);
                self.dropped_lately = true;
            }
            IMPORT_COMPLETED => self.importing.retain(|(j, _)| *j != job),
            EXPORT_ABORTED => self.exporting.retain(|(j, _)| *j != job),
            EXPORT_COMPLETED => {
                self.exporting.retain(|(j, _)| *j != job);
                self.handed_over.extend(ranges);
                self.handed_over_lately = true;
            }
            _ => {}
        }
    }

    /// Whether a key of `slot` being deleted now is one an export handed over: its holds live
    /// on at the target.
    pub fn handed_over(&mut self, slot: u16) -> bool {
        let hit = in_ranges(&self.handed_over, slot);
        self.handed_over_lately |= hit;
        hit
    }

    /// Whether a key of `slot` being deleted now is one of an import that failed: its holds were
    /// never this node's (the source still has them).
    pub fn import_dropped(&mut self, slot: u16) -> bool {
        let hit = in_ranges(&self.dropped, slot);
        self.dropped_lately |= hit;
        hit
    }

    /// The server's cron tick: handed-over (or dropped) slots none of whose keys were deleted
    /// since the last tick are forgotten (their keys are gone).
    pub fn tick(&mut self) {
        if !self.handed_over_lately && !self.handed_over.is_empty() {
            self.handed_over = Vec::new();
        }
        self.handed_over_lately = false;
        if !self.dropped_lately && !self.dropped.is_empty() {
            self.dropped = Vec::new();
        }
        self.dropped_lately = false;
    }

    /// Whether `slot` is being imported.
    pub fn importing(&self, slot: u16) -> bool {
        self.importing
            .iter()
            .any(|(_, ranges)| in_ranges(ranges, slot))
    }

    /// Whether any slot is being imported.
    pub fn importing_any(&self) -> bool {
        !self.importing.is_empty()
    }

    /// Whether any slot is being exported.
    pub fn exporting(&self) -> bool {
        !self.exporting.is_empty()
    }
}

fn in_ranges(ranges: &[(u16, u16)], slot: u16) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
}

/// The job name and slot ranges of a migration event's data.
///
/// # Safety
/// `data` must be the `ValkeyModuleAtomicSlotMigrationInfoV1` Valkey passes with the event
/// (dataver 1), valid for the length of the callback.
pub unsafe fn event_data(data: *mut c_void) -> Option<(String, Vec<(u16, u16)>)> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; the ranges are copied out here.
    unsafe {
        let info = &*data.cast::<MigrationInfo>();
        let job = CStr::from_ptr(info.job_name.as_ptr())
            .to_string_lossy()
            .into_owned();
        let ranges = if info.slot_ranges.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
                .iter()
                .filter_map(|r| Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?)))
                .collect()
        };
        Some((job, ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_subevents_mean_valkeys() {
        let mut m = Migrations::default();
        let apply = |m: &mut Migrations, sub, job: &str, ranges| {
            m.apply(redis_subevent(sub).expect("known"), job.into(), ranges)
        };
        apply(&mut m, REDIS_IMPORT_STARTED, "i", vec![(3, 4)]);
        assert!(m.importing(3) && !m.exporting());
        apply(&mut m, REDIS_IMPORT_FAILED, "i", vec![(3, 4)]);
        assert!(!m.importing(3));
        apply(&mut m, REDIS_IMPORT_STARTED, "j", vec![(3, 4)]);
        apply(&mut m, REDIS_IMPORT_COMPLETED, "j", vec![(3, 4)]);
        assert!(!m.importing_any());
        apply(&mut m, REDIS_MIGRATE_STARTED, "e", vec![(9, 9)]);
        assert!(m.exporting());
        apply(&mut m, REDIS_MIGRATE_FAILED, "e", vec![(9, 9)]);
        assert!(!m.exporting());
        apply(&mut m, REDIS_MIGRATE_STARTED, "f", vec![(9, 9)]);
        apply(&mut m, REDIS_MIGRATE_COMPLETED, "f", vec![(9, 9)]);
        assert!(!m.exporting() && m.handed_over(9));
        assert_eq!(redis_subevent(6), None, "MIGRATE_MODULE_PROPAGATE");
    }

    #[test]
    fn redis_event_data_is_read_as_laid_out() {
        #[repr(C)]
        struct Ranges {
            num_ranges: i32,
            ranges: [RedisSlotRange; 2],
        }
        let ranges = Ranges {
            num_ranges: 2,
            ranges: [
                RedisSlotRange { start: 1, end: 2 },
                RedisSlotRange { start: 7, end: 7 },
            ],
        };
        let mut info = RedisMigrationInfo {
            version: 1,
            source_node_id: [0; 41],
            destination_node_id: [0; 41],
            task_id: c"task-1".as_ptr(),
            slots: (&raw const ranges).cast(),
        };
        // SAFETY: `info` is laid out as Redis passes it and outlives the call.
        let got = unsafe { redis_event_data((&raw mut info).cast()) };
        assert_eq!(got, Some(("task-1".into(), vec![(1, 2), (7, 7)])));
        assert_eq!(std::mem::offset_of!(RedisMigrationInfo, task_id), 96);
    }

    #[test]
    fn jobs_add_and_remove_their_ranges() {
        let mut m = Migrations::default();
        m.apply(IMPORT_STARTED, "a".into(), vec![(0, 10), (100, 100)]);
        m.apply(EXPORT_STARTED, "b".into(), vec![(50, 60)]);
        assert!(m.importing(0) && m.importing(10) && m.importing(100));
        assert!(!m.importing(11) && !m.importing(55));
        assert!(m.exporting());
        m.apply(IMPORT_COMPLETED, "a".into(), Vec::new());
        assert!(!m.importing(5));
        m.apply(EXPORT_ABORTED, "b".into(), Vec::new());
        assert!(!m.exporting());
        m.apply(IMPORT_STARTED, "c".into(), vec![(7, 7)]);
        m.apply(IMPORT_ABORTED, "c".into(), Vec::new());
        assert!(!m.importing(7));
        m.apply(99, "d".into(), vec![(1, 1)]);
        assert!(!m.importing(1), "unknown subevents change nothing");
    }

    #[test]
    fn a_failed_imports_deletions_are_dropped_until_a_quiet_tick() {
        let mut m = Migrations::default();
        m.apply(IMPORT_STARTED, "i".into(), vec![(5, 9)]);
        assert!(!m.import_dropped(5), "importing: not dropped yet");
        m.apply(IMPORT_ABORTED, "i".into(), Vec::new());
        assert!(!m.importing(5));
        assert!(m.import_dropped(5) && m.import_dropped(9) && !m.import_dropped(10));
        assert!(!m.handed_over(5), "a failed import hands nothing over");
        m.tick();
        assert!(m.import_dropped(7), "deletions went on: kept a tick more");
        m.tick();
        m.tick();
        assert!(!m.import_dropped(7), "a quiet tick forgets them");
        let apply = |m: &mut Migrations, sub, job: &str, ranges| {
            m.apply(redis_subevent(sub).expect("known"), job.into(), ranges)
        };
        apply(&mut m, REDIS_IMPORT_STARTED, "j", vec![(3, 4)]);
        apply(&mut m, REDIS_IMPORT_FAILED, "j", vec![(3, 4)]);
        assert!(m.import_dropped(3));
        apply(&mut m, REDIS_IMPORT_STARTED, "k", vec![(4, 4)]);
        assert!(!m.import_dropped(3), "imported again: this node's keys");
    }

    #[test]
    fn an_exports_deletions_are_moves_until_a_quiet_tick() {
        let mut m = Migrations::default();
        m.apply(EXPORT_STARTED, "e".into(), vec![(5, 9)]);
        assert!(!m.handed_over(5), "still this node's while exporting");
        m.apply(EXPORT_COMPLETED, "e".into(), Vec::from([(5, 9)]));
        assert!(m.handed_over(5) && m.handed_over(9) && !m.handed_over(10));
        m.tick();
        assert!(m.handed_over(7), "deletions went on: kept a tick more");
        m.tick();
        m.tick();
        assert!(!m.handed_over(7), "a quiet tick forgets them");
        m.apply(EXPORT_COMPLETED, "f".into(), vec![(1, 3)]);
        m.tick();
        assert!(m.handed_over(2), "a whole tick for the deletions to start");
        m.apply(IMPORT_STARTED, "g".into(), vec![(3, 4)]);
        assert!(!m.handed_over(2), "imported again: this node's keys");
    }
}
