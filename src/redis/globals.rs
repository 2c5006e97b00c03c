//! The module's global state: all of it is here, each item with who changes it, who reads it
//! and why it cannot live anywhere narrower.
//!
//! Redis runs every module callback on its main thread (commands, timers, notifications, server
//! events, RDB/AOF callbacks; a fork child runs `rdb_save`/`aux_save` on its copy of that
//! thread), so the state is thread-local and needs no lock, with one exception: `LIVE`, which
//! the data type's `free` callback may change from a background thread (`FLUSHALL ASYNC`,
//! lazy-free), and the flags read on every write command, which are atomics so that reading
//! them costs one load.
//!
//! **The engine is borrowed by one callback at a time.** A Redis call the engine makes can call
//! back into the module before it returns: opening a key can expire it, and Redis then sends the
//! `expired` notification at once. Such a nested callback finds the engine busy; it queues its
//! [`Report`] in `LATE`, and the outer call hands the queue to the engine before it lets go.
//! Nothing reported is lost, nothing panics on a double borrow.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use redis_module::raw;

use super::acl::Caller;
use super::migration::Migrations;
use super::unlinked::{Gone, Serialized, Unlinked};
use crate::lock::shared::Garbage;
use crate::lock::{Engine, Handles, Host, KeyId, KeyRef, LockValue, Reason, Watch};

/// A blocked client, as the engine names it.
pub type Client = *mut raw::RedisModuleBlockedClient;

/// The handles the Redis host gives the engine: blocked clients, module timers, and the user
/// and arguments of a `LOCK.WAIT` for its ACL re-check.
pub struct RedisHandles;

impl Handles for RedisHandles {
    type Client = Client;
    type Timer = raw::RedisModuleTimerID;
    type Caller = Caller;
}

/// What applies the settings a `CONFIG SET` left pending (see `UNSETTLED`).
pub type Settle = fn(&mut Engine<RedisHandles>);

thread_local! {
    /// Every lock decision, queue, timer, the token counter and the counters of `INFO`.
    static ENGINE: RefCell<Engine<RedisHandles>> = RefCell::new(Engine::new());

    /// What applies the settings a `CONFIG SET` recorded but left pending (`config`'s settle),
    /// while any are: run before anything else uses the engine. A hook `config` sets, so that
    /// it (which changes the engine through this module) and this module do not import each
    /// other.
    static UNSETTLED: Cell<Option<Settle>> = const { Cell::new(None) };

    /// Reports that arrived while the engine was busy; drained by the call that holds it.
    static LATE: RefCell<Vec<Report>> = const { RefCell::new(Vec::new()) };

    /// The atomic slot migrations under way (Valkey 9): written by their server events, read
    /// when the module opens a key for its own work and when it decides how to propagate.
    static MIGRATIONS: RefCell<Migrations> = RefCell::new(Migrations::default());

    /// The locks Redis unlinked last, until the keyspace notification that says why (see
    /// `unlinked`). Written by the data type's `unlink2` callback, read by the notification
    /// that follows; cleared when the module deletes or replaces a lock itself (no
    /// notification follows that).
    static UNLINKED: RefCell<Unlinked> = RefCell::new(Unlinked::default());

    /// The lock values the running command serialized (see `unlinked::Serialized`): written by
    /// the data type's `rdb_save` on the main thread, outside saves (see `SAVING`), read by
    /// its `unlink2` and the notification after, to tell `MIGRATE`'s deletion of a lock from
    /// `DEL`'s; given back by the cron tick after the command.
    static SERIALIZED: RefCell<Serialized> = RefCell::new(Serialized::default());

    /// The flushes seen and not yet written to the journal, oldest first: `DEBUG RELOAD`
    /// flushes before loading, and then no lock was lost; a load that starts in the same
    /// command cancels the flush right before it. Written to the journal by the next cron tick,
    /// or before the journal is read.
    static PENDING_FLUSHES: RefCell<Vec<PendingFlush>> = const { RefCell::new(Vec::new()) };

    /// Set while the module itself deletes or replaces a lock (see [`unlinking_own`]).
    static OWN_UNLINK: Cell<bool> = const { Cell::new(false) };
    /// While the server loads (an RDB, the AOF's preamble, a full sync, `DEBUG RELOAD`): the
    /// shared keys loaded so far, for their lapse timers (`Engine::loaded`). Started by the
    /// loading event, filled by the data type's `rdb_load`, handed to the engine when the load
    /// ends (dropped when it fails). `None` outside loads (`RESTORE` is told by its own
    /// notification).
    static LOADED_SHARED: RefCell<Option<Vec<KeyId>>> = const { RefCell::new(None) };
}

/// How many holds of a lock Redis unlinks the engine wants described (`Engine::describes`),
/// kept here for the `unlink2` callback, which must not borrow the engine. Set at load and
/// whenever the settings change.
static DESCRIBES: AtomicUsize = AtomicUsize::new(0);

/// Lock values alive in memory (the `locks` INFO field). Changed by the data type's
/// constructors and `free` callback, which Redis may call from a background thread.
static LIVE: AtomicU64 = AtomicU64::new(0);

/// Holds in lock values alive in memory (the `holds` INFO field): 1 per exclusive lock, one per
/// holder of a shared key. Changed as `LIVE` is, and when a holder joins or leaves a shared key.
static HOLDS: AtomicU64 = AtomicU64::new(0);

/// Shared lock values alive in memory. Changed as `LIVE` is. While it is 0 (a server that uses
/// no shared holds), TTL changes of keys cost the module nothing.
static SHARED_VALUES: AtomicU64 = AtomicU64::new(0);

/// The longest turn the module started by itself (a timer and the jobs it runs), in µs of the
/// main thread's CPU time, since the module loaded (the `longest_turn_us` INFO field). Only the timer callback writes it.
static LONGEST_TURN_US: AtomicU64 = AtomicU64::new(0);

/// Whether anything can receive propagated commands (AOF on, a replication backlog, replicas).
/// Conservatively true at load; set true the instant a fork child is born (every full sync and
/// every AOF rewrite starts with one) and recomputed on the cron tick, which clears it only when
/// none of those exist. Read by every lock change to skip building its effect when nobody can
/// receive it.
static EFFECTS_NEEDED: AtomicBool = AtomicBool::new(true);

/// Whether this server is a replica: learned at load and kept from the role-change event, so a
/// master's write commands pay no `RedisModule_GetContextFlags` call on the hot path.
static REPLICA: AtomicBool = AtomicBool::new(false);

/// Whether the server is saving its dataset (an RDB, an AOF rewrite's preamble, a full sync),
/// from its persistence event's start to its end: set in a fork child by the child's own event,
/// and around `SAVE` and `DEBUG RELOAD` on the main thread. What is serialized then is every
/// lock, deleted by nobody: `rdb_save` does not remember it (see `unlinked::Serialized`).
static SAVING: AtomicBool = AtomicBool::new(false);

/// `aof_rewrites` when the token counter was last written to the AOF (-1: never). Only the cron
/// tick reads and writes it.
static COUNTED_AT_REWRITE: AtomicI64 = AtomicI64::new(-1);

/// Something the host tells the engine.
pub enum Report {
    /// A user set or removed a key's TTL.
    TtlChanged { db: c_int, name: Vec<u8> },
    /// A key changed behind the engine's back; `arrived`: a value was brought to it.
    KeyChanged {
        db: c_int,
        name: Vec<u8>,
        arrived: bool,
    },
    /// A lock Redis unlinked is gone, for `reason`.
    Lost { reason: Reason, gone: Gone },
    /// Two dbs were swapped while locks existed.
    Swapped(c_int, c_int),
    /// Every key of a db (all dbs if `None`) may have changed.
    DbChanged(Option<c_int>),
    /// A load ended; the shared keys it brought.
    Loaded(Vec<KeyId>),
    /// An atomic slot migration's import completed.
    SlotsImported,
    /// This server became a replica.
    BecameReplica,
    /// This server started as a master, or was promoted: the restart grace starts.
    Promoted,
    /// A timer the engine armed fired.
    Timer(u64),
    /// A blocked client's answer was delivered.
    Replied(Client),
    /// A blocked client hung up.
    Gone(Client),
    /// A token seen in persisted or replicated data.
    Token(u64),
}

impl Report {
    fn apply(self, engine: &mut Engine<RedisHandles>, host: &mut impl Host<RedisHandles>) {
        match self {
            Report::KeyChanged { db, name, arrived } => {
                let key = KeyRef { db, name: &name };
                if arrived {
                    engine.value_arrived(host, key);
                } else {
                    engine.key_changed(host, key);
                }
            }
            Report::Lost { reason, gone } => {
                if reason == Reason::Expired {
                    engine.count_expired(gone.holds);
                }
                // A replica applies what its master decided: its journal stays empty.
                if !is_replica() {
                    let key = KeyRef {
                        db: gone.db,
                        name: &gone.name,
                    };
                    engine.holds_lost(key, host.now_ms(), reason, &gone.described);
                }
            }
            Report::Swapped(first, second) => {
                if !is_replica() {
                    engine.all_lost(host.now_ms(), Some((first, second)), Reason::Swapped);
                }
            }
            Report::TtlChanged { db, name } => engine.ttl_changed(host, KeyRef { db, name: &name }),
            Report::DbChanged(db) => engine.db_changed(host, db),
            Report::Loaded(shared) => engine.loaded(host, shared),
            Report::SlotsImported => engine.slots_imported(host),
            Report::BecameReplica => engine.became_replica(host),
            Report::Promoted => engine.start_grace(host),
            Report::Timer(number) => engine.on_timer(host, number),
            Report::Replied(client) => engine.replied(client),
            Report::Gone(client) => engine.client_gone(host, client),
            Report::Token(token) => engine.observe_token(token),
        }
    }
}

thread_local! {
    /// Whether anyone observes a key (`LOCK.OBSERVE`): written after each use of the engine, read
    /// by every change to a lock (one load, so that no change pays for observers when there are
    /// none).
    static OBSERVING: Cell<bool> = const { Cell::new(false) };
    /// Keys the engine changed while someone observed: their observers are looked at once the
    /// engine's call is done.
    static WRITTEN: RefCell<Vec<KeyId>> = const { RefCell::new(Vec::new()) };
}

/// Whether anyone observes a key: a write notes its key ([`note_written`]) only then.
#[inline]
pub fn observing() -> bool {
    OBSERVING.with(Cell::get)
}

/// A lock changed at `key` (the host wrote it) while someone observes a key.
pub fn note_written(key: KeyRef<'_>) {
    WRITTEN.with(|w| w.borrow_mut().push(key.to_id()));
}

/// Runs `f` on the engine with `host`, then applies what was reported meanwhile. `None` only
/// if the engine is already borrowed further up this call stack.
pub fn with_engine<H: Host<RedisHandles>, T>(
    host: &mut H,
    f: impl FnOnce(&mut Engine<RedisHandles>, &mut H) -> T,
) -> Option<T> {
    ENGINE.with(|cell| {
        let mut engine = cell.try_borrow_mut().ok()?;
        settle(&mut engine);
        let out = f(&mut engine, host);
        loop {
            let late = LATE.with(|late| std::mem::take(&mut *late.borrow_mut()));
            if late.is_empty() {
                break;
            }
            for report in late {
                report.apply(&mut engine, host);
            }
        }
        if OBSERVING.with(Cell::get) {
            let written = WRITTEN.with(|w| std::mem::take(&mut *w.borrow_mut()));
            for key in written {
                engine.observed_changed(host, key.as_ref());
            }
        }
        OBSERVING.with(|o| o.set(engine.observers() > 0));
        Some(out)
    })
}

/// A load starts: the shared keys it brings are noted from now on.
pub fn loading_started() {
    LOADED_SHARED.with(|l| *l.borrow_mut() = Some(Vec::new()));
}

/// `rdb_load` loaded a shared key: noted if a load is under way.
pub fn note_loaded_shared(db: c_int, name: &[u8]) {
    LOADED_SHARED.with(|l| {
        if let Some(keys) = l.borrow_mut().as_mut() {
            keys.push(KeyRef { db, name }.to_id());
        }
    });
}

/// Whether a load is under way (shared keys loaded are noted).
pub fn noting_loaded() -> bool {
    LOADED_SHARED.with(|l| l.borrow().is_some())
}

/// The load ended (`Some`: the shared keys it brought) or failed (`None`).
pub fn loading_ended(ok: bool) -> Option<Vec<KeyId>> {
    LOADED_SHARED.with(|l| l.borrow_mut().take()).filter(|_| ok)
}

/// Sets (or clears) what applies pending config settings before the engine's next use.
pub fn set_unsettled(apply: Option<Settle>) {
    UNSETTLED.with(|u| u.set(apply));
}

/// Applies pending config settings, if any (see `UNSETTLED`).
fn settle(engine: &mut Engine<RedisHandles>) {
    if let Some(apply) = UNSETTLED.with(Cell::take) {
        apply(engine);
    }
}

/// Reads the engine (INFO, RDB aux data); `None` only while it is borrowed mutably.
pub fn read_engine<T>(f: impl FnOnce(&Engine<RedisHandles>) -> T) -> Option<T> {
    ENGINE.with(|cell| {
        if UNSETTLED.with(Cell::get).is_some() {
            if let Ok(mut engine) = cell.try_borrow_mut() {
                settle(&mut engine);
            }
        }
        cell.try_borrow().ok().map(|engine| f(&engine))
    })
}

/// Tells the engine `report` now, or as soon as the call that holds it is done.
pub fn report(host: &mut impl Host<RedisHandles>, report: Report) {
    let mut pending = Some(report);
    let _ = with_engine(host, |engine, host| {
        if let Some(report) = pending.take() {
            report.apply(engine, host);
        }
    });
    if let Some(report) = pending {
        LATE.with(|late| late.borrow_mut().push(report));
    }
}

/// A keyspace notification for `name`: the fast path (nobody waits for anything, no lapse timer
/// armed) costs no allocation.
pub fn key_changed(host: &mut impl Host<RedisHandles>, db: c_int, name: &[u8], arrived: bool) {
    let done = with_engine(host, |engine, host| {
        // A key with a lapse timer that goes (DEL, UNLINK, RENAME...) stops it. Only that key's
        // waiters and timer matter: any other key's do not take the slow path.
        let key = KeyRef { db, name };
        if engine.watches(key) {
            if arrived {
                engine.value_arrived(host, key);
            } else {
                engine.key_changed(host, key);
            }
        }
    });
    if done.is_none() {
        let name = name.to_vec();
        let report = Report::KeyChanged { db, name, arrived };
        LATE.with(|late| late.borrow_mut().push(report));
    }
}

/// Restores the counter and accepted lead saved in this server's own RDB (aux data loaded on a
/// master; a replica judges the lead afresh: it was not its own).
pub fn restore_tokens(last: u64, accepted_ms: u64) {
    let done = ENGINE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut engine) => {
            engine.restore_tokens(last, accepted_ms);
            true
        }
        Err(_) => false,
    });
    if !done {
        LATE.with(|late| late.borrow_mut().push(Report::Token(last)));
    }
}

/// A token seen where no context is at hand (RDB load): observed at once, or queued.
pub fn observe_token(token: u64) {
    let done = ENGINE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut engine) => {
            engine.observe_token(token);
            true
        }
        Err(_) => false,
    });
    if !done {
        LATE.with(|late| late.borrow_mut().push(Report::Token(token)));
    }
}

/// Counts a lock value created (`true`) or freed (`false`) with `holds` holds in it.
pub fn count_lock_value(created: bool, holds: u64) {
    if created {
        LIVE.fetch_add(1, Ordering::Relaxed);
        HOLDS.fetch_add(holds, Ordering::Relaxed);
    } else {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        HOLDS.fetch_sub(holds, Ordering::Relaxed);
    }
}

/// Counts a holder joining (`true`) or leaving (`false`) a shared key in place.
pub fn count_holder(joined: bool) {
    if joined {
        HOLDS.fetch_add(1, Ordering::Relaxed);
    } else {
        HOLDS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Holds in memory.
pub fn holds() -> u64 {
    HOLDS.load(Ordering::Relaxed)
}

/// Whether any shared lock value is alive (only then are TTL changes watched).
pub fn shared_values_exist() -> bool {
    SHARED_VALUES.load(Ordering::Relaxed) > 0
}

/// Counts a shared lock value created (`true`) or freed (`false`).
pub fn count_shared_value(created: bool) {
    if created {
        SHARED_VALUES.fetch_add(1, Ordering::Relaxed);
    } else {
        SHARED_VALUES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Lock values in memory.
pub fn lock_values() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// Redis unlinked a lock.
pub fn push_unlinked(gone: Gone) {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            unlinked.push(gone);
        }
    });
}

/// The lock just unlinked at (db, name), if a notification of that key explains it now.
pub fn take_unlinked(db: c_int, name: &[u8], event: &CStr) -> Option<Gone> {
    UNLINKED.with(|cell| cell.try_borrow_mut().ok()?.take(db, name, event))
}

/// The running command, which started at `started_us`, serialized `value`.
pub fn push_serialized(started_us: i64, value: usize, processed: impl FnOnce() -> Option<i64>) {
    SERIALIZED.with(|cell| {
        if let Ok(mut serialized) = cell.try_borrow_mut() {
            serialized.push(started_us, value, processed);
        }
    });
}

/// `total_commands_processed` of the command that serialized `value`, if it started at
/// `started_us`.
pub fn serialized_by(started_us: i64, value: usize) -> Option<i64> {
    SERIALIZED.with(|cell| cell.try_borrow().ok()?.by(started_us, value))
}

/// `total_commands_processed` of the running command, which started at `started_us`: `read`
/// once after each serialization, remembered for the deletions that follow.
pub fn processed_now(started_us: i64, read: impl FnOnce() -> Option<i64>) -> Option<i64> {
    SERIALIZED.with(|cell| cell.try_borrow_mut().ok()?.processed(started_us, read))
}

/// Gives back the values serialized by a command other than the one that started at
/// `started_us` (none runs on the cron tick).
pub fn forget_serialized(started_us: Option<i64>) {
    SERIALIZED.with(|cell| {
        if let Ok(mut serialized) = cell.try_borrow_mut() {
            serialized.forget_unless(started_us);
        }
    });
}

/// A save starts (`true`) or ends.
pub fn set_saving(saving: bool) {
    SAVING.store(saving, Ordering::Relaxed);
}

/// Whether the server is saving its dataset.
pub fn saving() -> bool {
    SAVING.load(Ordering::Relaxed)
}

/// Forgets the unlinked locks (cheap when there is none).
pub fn forget_unlinked() {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            unlinked.clear();
        }
    });
}

/// Runs `unlink`, in which the module itself deletes or replaces a lock (`RedisModule_DeleteKey`,
/// `RedisModule_ModuleTypeSetValue`): no keyspace notification follows to say why, so the data
/// type's `unlink2` keeps nothing of it ([`own_unlink`]): describing it cost every
/// `LOCK.RELEASE` an allocation of the key's name and of its owner, and a fifth of its time.
/// Then forgets what was unlinked before (nothing explains it any more).
pub fn unlinking_own<T>(unlink: impl FnOnce() -> T) -> T {
    OWN_UNLINK.with(|own| own.set(true));
    let out = unlink();
    OWN_UNLINK.with(|own| own.set(false));
    forget_unlinked();
    out
}

/// Whether the lock being unlinked is the module's own doing (see [`unlinking_own`]).
pub fn own_unlink() -> bool {
    OWN_UNLINK.with(Cell::get)
}

/// How many holds of a lock being unlinked to describe.
pub fn describes() -> usize {
    DESCRIBES.load(Ordering::Relaxed)
}

/// Changes the journal's or the statistics' settings; false if the engine is busy.
pub fn configure(f: impl FnOnce(&mut Watch)) -> bool {
    configure_engine(|engine| {
        settle(engine);
        f(engine.watch_mut())
    })
}

/// Changes an engine setting (the configs); false if the engine is busy.
pub fn configure_engine(f: impl FnOnce(&mut Engine<RedisHandles>)) -> bool {
    ENGINE.with(|cell| {
        let Ok(mut engine) = cell.try_borrow_mut() else {
            return false;
        };
        f(&mut engine);
        DESCRIBES.store(engine.describes(), Ordering::Relaxed);
        true
    })
}

/// A flush not yet in the journal.
struct PendingFlush {
    /// When, in Unix ms.
    at: i64,
    /// The db, or -1 for all.
    db: c_int,
    /// The server's `total_commands_processed` then: the command that flushed is not counted
    /// yet, so a load that starts while it still runs (`DEBUG RELOAD`) sees the same number.
    command: Option<i64>,
}

/// At most this many flushes wait for the cron tick; beyond, they are written at once.
const PENDING_FLUSHES_MAX: usize = 64;

/// A flush began (db, or -1 for all) while `command` commands had been processed: noted if any
/// lock may be lost with it.
pub fn note_flush(db: c_int, command: Option<i64>) {
    if lock_values() > 0 && !is_replica() {
        let at = crate::redis::ffi::now_ms();
        let full = PENDING_FLUSHES.with(|p| {
            let mut pending = p.borrow_mut();
            pending.push(PendingFlush { at, db, command });
            pending.len() > PENDING_FLUSHES_MAX
        });
        if full {
            journal_pending_flush();
        }
    }
}

/// A load began while `command` commands had been processed: a flush noted in the same
/// command (`DEBUG RELOAD` flushes, then loads) lost no lock. A flush of an earlier command
/// did, and stays.
pub fn cancel_flush(command: Option<i64>) {
    PENDING_FLUSHES.with(|p| {
        let mut pending = p.borrow_mut();
        if pending
            .last()
            .is_some_and(|f| f.command.is_some() && f.command == command)
        {
            pending.pop();
        }
    });
}

/// Writes the noted flushes to the journal now (the cron tick).
pub fn journal_pending_flush() {
    if PENDING_FLUSHES.with(|p| !p.borrow().is_empty()) {
        ENGINE.with(|cell| {
            if let Ok(mut engine) = cell.try_borrow_mut() {
                journal_flush(&mut engine);
            }
        });
    }
}

/// Writes the noted flushes to the journal, oldest first.
fn journal_flush(engine: &mut Engine<RedisHandles>) {
    for flush in PENDING_FLUSHES.with(|p| std::mem::take(&mut *p.borrow_mut())) {
        let dbs = (flush.db >= 0).then_some((flush.db, flush.db));
        engine.all_lost(flush.at, dbs, Reason::Flushed);
    }
}

/// Records whether lock changes must be propagated as effects.
pub fn set_effects_needed(needed: bool) {
    EFFECTS_NEEDED.store(needed, Ordering::Relaxed);
}

/// Whether lock changes must be propagated as effects.
pub fn effects_needed() -> bool {
    EFFECTS_NEEDED.load(Ordering::Relaxed)
}

/// Records the server's role (at load and on every role change).
pub fn set_replica(replica: bool) {
    REPLICA.store(replica, Ordering::Relaxed);
}

/// Whether this server is a replica, as last learned.
pub fn is_replica() -> bool {
    REPLICA.load(Ordering::Relaxed)
}

/// Records `rewrites` as the AOF rewrite the counter was written after; returns whether it is
/// a new one.
pub fn note_aof_rewrite(rewrites: i64) -> bool {
    COUNTED_AT_REWRITE.swap(rewrites, Ordering::Relaxed) != rewrites
}

/// The longest replicated change applied (`LOCK.APPLY`, `LOCK.DROP`: what a replica and an AOF
/// load run), in µs of the main thread's CPU time since the module loaded (the
/// `longest_apply_us` INFO field): each must be O(log H), never a copy of a whole lock.
static LONGEST_APPLY_US: AtomicU64 = AtomicU64::new(0);

/// Records a replicated change that took `us` µs of CPU time.
pub fn record_apply(us: u64) {
    LONGEST_APPLY_US.fetch_max(us, Ordering::Relaxed);
}

/// The longest replicated change applied, in µs.
pub fn longest_apply_us() -> u64 {
    LONGEST_APPLY_US.load(Ordering::Relaxed)
}

/// Records a turn the module started by itself that took `us` µs of CPU time.
pub fn record_turn(us: u64) {
    LONGEST_TURN_US.fetch_max(us, Ordering::Relaxed);
}

/// The longest turn the module started by itself, in µs.
pub fn longest_turn_us() -> u64 {
    LONGEST_TURN_US.load(Ordering::Relaxed)
}

/// Arrays larger than this are freed off the main thread: returning tens of MB to the kernel
/// takes milliseconds.
const FREE_IN_BACKGROUND_BYTES: usize = 1 << 20;

thread_local! {
    /// The queue of the thread that frees large arrays, started the first time one comes.
    static RECLAIMER: RefCell<Option<std::sync::mpsc::Sender<Box<dyn Send>>>> = const { RefCell::new(None) };
}

/// The thread Redis runs commands on (set at load).
static MAIN_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();

/// Records the thread the module was loaded on: the one Redis runs commands on.
pub fn note_main_thread() {
    let _ = MAIN_THREAD.set(std::thread::current().id());
}

/// Frees `garbage`: at once if it is small, else on a thread of its own (as Redis's lazy free
/// does with large values), so that no turn of the main thread waits for the kernel. The
/// allocator is Redis's, which may be called from any thread.
pub fn free(garbage: Garbage) {
    let bytes = garbage.bytes();
    free_sized(garbage, bytes);
}

/// Frees a lock value (Redis's `free` callback): a large one off the main thread. (Redis may
/// call the callback from its own background thread already; then it is freed there.)
pub fn free_value(value: LockValue) {
    let bytes = match &value {
        LockValue::Shared(shared) => shared.heap_size(),
        LockValue::Exclusive(_) => 0,
    };
    free_sized(value, bytes);
}

fn free_sized<T: Send + 'static>(garbage: T, bytes: usize) {
    let main = MAIN_THREAD
        .get()
        .is_some_and(|t| *t == std::thread::current().id());
    if bytes < FREE_IN_BACKGROUND_BYTES || !main {
        return;
    }
    let garbage: Box<dyn Send> = Box::new(garbage);
    let garbage = RECLAIMER.with(|cell| {
        let Ok(mut sender) = cell.try_borrow_mut() else {
            return Some(garbage);
        };
        if sender.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Send>>();
            let spawned = std::thread::Builder::new()
                .name("relock-free".into())
                .spawn(move || rx.into_iter().for_each(drop));
            if spawned.is_ok() {
                *sender = Some(tx);
            }
        }
        match sender.as_ref() {
            Some(tx) => tx.send(garbage).err().map(|e| e.0),
            None => Some(garbage),
        }
    });
    // No thread (none could be started): freed here after all.
    drop(garbage);
}

/// Runs `f` on the slot migrations under way (`None` only if called from inside `f`).
pub fn with_migrations<T>(f: impl FnOnce(&mut Migrations) -> T) -> Option<T> {
    MIGRATIONS.with(|cell| cell.try_borrow_mut().ok().map(|mut m| f(&mut m)))
}
