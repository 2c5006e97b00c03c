//! What the engine needs from the server it runs in: the [`Host`] trait, an open [`Key`], and
//! the small types that cross between them.
//!
//! The Redis module implements these in `src/redis/host.rs`; [`super::memory`] implements them
//! in memory for unit tests, the model test and the fuzz targets. The engine never sees a
//! pointer, a Redis string or a context.

use std::fmt::Debug;
use std::hash::Hash;
use std::rc::Rc;

use super::errors::LockError;
use super::packed::{Hold, LockRef};
use super::reply::Info;
use super::shared::{Holder, Shared};

/// The server's role and phase, as far as writing locks is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// Loading an RDB or AOF: nothing is served until it ends.
    Loading,
    /// A replica: only the master's stream (and AOF replay) may change locks.
    Replica,
    /// A master whose writes are paused: expiry is paused too, and a key that has logically
    /// expired is still in the keyspace, so writing it would corrupt the db.
    Paused,
    /// A master free to write.
    #[default]
    Master,
}

/// Keyspace events the engine emits for a key (Redis: class `d`, named `lock.<event>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new hold, or the holder re-acquired (`LOCK.ACQUIRE`, `LOCK.REENTER`, `LOCK.WAIT`).
    Acquired,
    /// The holder released its last level, or a hold was revoked.
    Released,
    /// The module ended one shared holder's lapsed lease while the key lives on.
    Expired,
    /// The holder renewed its lease.
    Renewed,
    /// The lock was handed to a waiter.
    Granted,
    /// `LOCK.FORCERELEASE` ended a hold.
    ForceReleased,
    /// `LOCK.DOWNGRADE` made the exclusive hold a shared one.
    Downgraded,
}

/// What a blocked client is finally answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Granted: the token of its new hold.
    Token(u64),
    /// Its wait ended without the lock (timeout, or it hung up): nil.
    TimedOut,
    /// An error reply (the key changed type, this server became a replica, a redirect...).
    Error(LockError),
    /// An observer's answer: `LOCK.INFO`'s reply (none: nil).
    Info(Option<Box<Info>>),
}

/// A key in a db, as the engine keeps it in its queues and timers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyId {
    pub db: i32,
    pub name: Rc<[u8]>,
}

/// A key named by a running command (borrowed from its arguments).
#[derive(Clone, Copy, Debug)]
pub struct KeyRef<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

impl KeyRef<'_> {
    /// An owned id for queues and timers.
    pub fn to_id(self) -> KeyId {
        KeyId {
            db: self.db,
            name: Rc::from(self.name),
        }
    }
}

impl KeyId {
    /// A borrowed view.
    pub fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            db: self.db,
            name: &self.name,
        }
    }
}

/// Why a key could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// It holds a value of another type.
    WrongType,
    /// The host could not open it at all (no such db, out of memory); nothing is done.
    Unavailable,
}

/// A key opened for writing, empty or holding a lock. Every change is durable and replicated
/// by the host as its effect (the resulting hold and absolute expiry, or the deletion), and
/// signalled to watchers; the engine decides and the key applies.
pub trait Key {
    /// Where the key is: its db and name.
    fn id(&self) -> KeyRef<'_>;
    /// The lock here, if there is one (a shared key's lapsed leases included: the engine ends
    /// them).
    fn lock(&self) -> Option<LockRef<'_>>;
    /// The hold here, if the key is held exclusively.
    fn hold(&self) -> Option<&Hold> {
        match self.lock()? {
            LockRef::Exclusive(hold) => Some(hold),
            LockRef::Shared(_) => None,
        }
    }
    /// The holders here, if the key is shared.
    fn shared(&self) -> Option<&Shared> {
        match self.lock()? {
            LockRef::Shared(shared) => Some(shared),
            LockRef::Exclusive(_) => None,
        }
    }
    /// Absolute expiry in Unix ms, if the key has one.
    fn expires_at(&self) -> Option<i64>;
    /// Stores `hold` with expiry `at` (none: no expiry), replacing whatever is here.
    fn put(&mut self, hold: Box<Hold>, at: Option<i64>);
    /// Sets the hold's reentrancy count and, if given, a new expiry `at`.
    fn update(&mut self, count: u32, at: Option<i64>);
    /// Adds or replaces `owner`'s hold in a shared key with `limit` (0: none), making an empty
    /// key shared; the key's expiry becomes the latest lease end. Replicated as this one holder.
    /// False, and nothing changes, if a new holder does not fit
    /// ([`super::shared::MAX_OWNER_BYTES`]).
    fn put_holder(&mut self, limit: u32, owner: &[u8], holder: Holder) -> bool;
    /// Removes `owner`'s hold from a shared key, and the key with its last holder; the key's
    /// expiry becomes the latest lease end left. Replicated as this one removal.
    fn remove_holder(&mut self, owner: &[u8]);
    /// Removes `owner`'s lapsed hold as [`Key::remove_holder`] does, but compacts nothing: for
    /// removing many in bounded slices, with [`Key::tidy`] once done.
    fn end_lapsed(&mut self, owner: &[u8]);
    /// Compacts a shared key's holder set where much of it is unused.
    fn tidy(&mut self);
    /// Sets the key's expiry to `at` (a shared key whose TTL a user extended past its leases);
    /// replicated as `PEXPIREAT`.
    fn cap_expiry(&mut self, at: i64);
    /// Deletes the lock (every hold of a shared key).
    fn remove(&mut self);
    /// Emits keyspace event `event` for this key.
    fn notify(&mut self, event: Event);
}

/// A client the host blocked for a `LOCK.WAIT`.
pub struct Blocked<T: Handles> {
    pub client: T::Client,
    /// Who asked, for a permission re-check at hand-off.
    pub caller: Option<T::Caller>,
    /// Its connection's id, as `CLIENT LIST` shows it.
    pub id: u64,
}

/// The kinds of handle a host hands out and takes back, which the engine keeps: `Client` names
/// a blocked client, `Timer` a timer the host armed, `Caller` who ran a `LOCK.WAIT` (for a
/// permission re-check at hand-off).
pub trait Handles {
    type Client: Copy + Eq + Hash + Debug;
    type Timer: Copy + Debug;
    /// Compared to share one caller among the observers of a key.
    type Caller: PartialEq;
}

/// The server the engine runs in, handing out the handles of `T`.
///
/// Timers carry only the engine's number; when one fires the host calls
/// [`super::Engine::on_timer`] with it.
pub trait Host<T: Handles> {
    type Key: Key;

    /// Current Unix time in ms, as the server sees it (what key expiry is measured against).
    fn now_ms(&self) -> i64;
    /// The server's state, for work the engine does on its own (timers, deferred jobs).
    fn state(&self) -> State;
    /// Opens `key` for writing, from a timer (no command is running).
    fn open(&mut self, key: &KeyId) -> Result<Self::Key, OpenError>;
    /// Arms a timer that calls the engine back with `number` after `delay_ms` (0 or more; the
    /// engine keeps delays at most 30 minutes).
    fn start_timer(&mut self, delay_ms: i64, number: u64) -> T::Timer;
    /// Stops a timer; false if it already fired or was stopped.
    fn stop_timer(&mut self, timer: T::Timer) -> bool;
    /// A monotonic clock in µs (waits are measured with it).
    fn now_us(&self) -> u64;
    /// Blocks the client running the current command (a `LOCK.WAIT` that must queue) and says
    /// who it is; `None` when it may not block (MULTI, a script, the master's stream, the AOF),
    /// or no command is running.
    fn block(&mut self) -> Option<Blocked<T>>;
    /// The client running the current command, as `CLIENT LIST` shows it (empty if none): who
    /// ended a hold, for the journal.
    fn caller_info(&mut self) -> String;
    /// Answers a blocked client `outcome`. Called exactly once per blocked client.
    fn unblock(&mut self, client: T::Client, outcome: Outcome);
    /// Whether `caller` may still run the `LOCK.WAIT` it queued (ACL rules may have changed).
    fn permitted(&mut self, caller: &T::Caller) -> bool;
    /// In cluster mode, where a waiter for `key` must go instead when this node no longer serves
    /// its slot (an `ASK`/`MOVED`/`TRYAGAIN` error text); `None` when this node serves it.
    fn redirect(&mut self, key: &[u8]) -> Option<String>;
    /// Whether the running command must not add a hold or a level: the server is out of memory
    /// (`maxmemory`, after what eviction could free) and the command comes from a client, not
    /// the master's stream or the AOF. `LOCK.REENTER` is no `deny-oom` command, so that a repeat
    /// of its step (which adds nothing) is answered out of memory too.
    fn out_of_memory(&self) -> bool {
        false
    }
}
