//! An in-memory server for the engine: a keyspace with lazy expiry, timers on a simulated
//! clock, blocked clients and their answers. The unit tests, the model test and the fuzz
//! targets drive the real [`Engine`] through it.
//!
//! [`Sim`] plays the part of Redis around the engine: it opens keys for commands (expiring
//! them lazily, as Redis does on lookup), reports keys changed behind the engine's back, fires
//! timers in time order as the clock advances, and delivers answers to blocked clients.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use super::effect::Effect;
use super::engine::{Engine, Reply, Request, Wait};
use super::host::{Blocked, Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
use super::packed::{Hold, LockRef, LockValue};
use super::shared::{Holder, Mode, Shared};

/// A value in the simulated keyspace. A lock's value is kept in place, as the module keeps it
/// in Redis's own value: the test host holds few keys, so the unboxed size costs nothing.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Value {
    Lock(LockValue),
    /// Any other type (a string, say).
    Other,
}

#[derive(Debug)]
struct Entry {
    value: Value,
    expires_at: Option<i64>,
}

/// An effect as the in-memory host records it: the command's words, the key's name in place
/// (what Redis would send replicas and the AOF, spelled by [`Effect::argv`]).
pub type Replicated = Vec<Vec<u8>>;

#[derive(Default, Debug)]
struct Keyspace {
    now: i64,
    keys: HashMap<(i32, Vec<u8>), Entry>,
    /// Keys that expired on lookup; reported to the engine once it returns, as Redis's
    /// `expired` notification is.
    expired: Vec<KeyId>,
    effects: Vec<Replicated>,
    events: Vec<(Vec<u8>, Event)>,
}

impl Keyspace {
    /// Looks `key` up, deleting it first if it expired (Redis: expired once now > expiry).
    fn lookup(&mut self, db: i32, name: &[u8]) -> Option<&mut Entry> {
        let id = (db, name.to_vec());
        let now = self.now;
        if self
            .keys
            .get(&id)
            .is_some_and(|e| e.expires_at.is_some_and(|at| now > at))
        {
            self.keys.remove(&id);
            self.expired.push(KeyId {
                db,
                name: Rc::from(name),
            });
        }
        self.keys.get_mut(&id)
    }
}

fn copy_of(value: &LockValue) -> LockValue {
    match value {
        LockValue::Exclusive(hold) => LockValue::Exclusive(hold.to_boxed()),
        LockValue::Shared(shared) => LockValue::Shared(shared.clone()),
    }
}

/// A key opened for the engine. It keeps a copy of the lock (the engine borrows it) and writes
/// every change through to the keyspace at once.
pub struct MemKey {
    space: Rc<RefCell<Keyspace>>,
    db: i32,
    name: Vec<u8>,
    value: Option<LockValue>,
    expires_at: Option<i64>,
}

impl MemKey {
    /// Stores the copy in the keyspace, replicating `effect`.
    fn write(&mut self, effect: Effect<'_>) {
        let words = effect.words(&self.name);
        self.record(words);
    }

    /// The exclusive hold's effect.
    fn write_hold(&mut self) {
        let words = match &self.value {
            Some(LockValue::Exclusive(hold)) => Effect::Hold {
                owner: hold.owner(),
                token: hold.token(),
                count: hold.count(),
                expires_at: self.expires_at,
                granted_at: hold.granted_at(),
            }
            .words(&self.name),
            _ => Effect::Delete.words(&self.name),
        };
        self.record(words);
    }

    /// Stores the copy in the keyspace, replicating the effect spelled as `words`.
    fn record(&mut self, words: Replicated) {
        let mut space = self.space.borrow_mut();
        let id = (self.db, self.name.clone());
        match &self.value {
            Some(value) => {
                space.keys.insert(
                    id,
                    Entry {
                        value: Value::Lock(copy_of(value)),
                        expires_at: self.expires_at,
                    },
                );
            }
            None => {
                space.keys.remove(&id);
            }
        }
        space.effects.push(words);
    }
}

impl MemKey {
    /// Removes `owner`'s holder, compacting the set after if `tidy`.
    fn drop_holder(&mut self, owner: &[u8], tidy: bool) {
        if let Some(LockValue::Shared(shared)) = self.value.as_mut() {
            if tidy {
                shared.remove(owner);
            } else {
                shared.remove_keeping_room(owner);
                shared.compact_lazily();
            }
            self.expires_at = shared.last_lease_end();
            if shared.is_empty() {
                self.value = None;
            }
        }
        self.write(Effect::Drop { owner });
    }
}

impl Key for MemKey {
    fn id(&self) -> KeyRef<'_> {
        KeyRef {
            db: self.db,
            name: &self.name,
        }
    }

    fn lock(&self) -> Option<LockRef<'_>> {
        match self.value.as_ref()? {
            LockValue::Exclusive(hold) => Some(LockRef::Exclusive(hold)),
            LockValue::Shared(shared) => Some(LockRef::Shared(shared)),
        }
    }

    fn expires_at(&self) -> Option<i64> {
        self.expires_at
    }

    fn put(&mut self, hold: Box<Hold>, at: Option<i64>) {
        self.value = Some(LockValue::Exclusive(hold));
        self.expires_at = at;
        self.write_hold();
    }

    fn update(&mut self, count: u32, at: Option<i64>) {
        if let Some(LockValue::Exclusive(hold)) = self.value.as_mut() {
            hold.set_count(count);
        }
        if at.is_some() {
            self.expires_at = at;
        }
        self.write_hold();
    }

    fn put_holder(&mut self, limit: u32, owner: &[u8], holder: Holder) -> bool {
        let mut shared = match self.value.take() {
            Some(LockValue::Shared(shared)) => shared,
            other => {
                self.value = other;
                Shared::new(limit)
            }
        };
        let stored = shared.insert(owner, holder).is_ok();
        if stored {
            self.expires_at = shared.last_lease_end();
        }
        if stored || !shared.is_empty() {
            self.value = Some(LockValue::Shared(shared));
        }
        if !stored {
            return false;
        }
        self.write(Effect::Holder {
            limit,
            owner,
            holder,
        });
        true
    }

    fn remove_holder(&mut self, owner: &[u8]) {
        self.drop_holder(owner, true);
    }

    fn end_lapsed(&mut self, owner: &[u8]) {
        self.drop_holder(owner, false);
    }

    fn tidy(&mut self) {
        if let Some(LockValue::Shared(shared)) = self.value.as_mut() {
            drop(shared.tidy());
        }
    }

    fn cap_expiry(&mut self, at: i64) {
        self.expires_at = Some(at);
        self.write(Effect::Expire { at });
    }

    fn remove(&mut self) {
        self.value = None;
        self.expires_at = None;
        self.write(Effect::Delete);
    }

    fn notify(&mut self, event: Event) {
        self.space
            .borrow_mut()
            .events
            .push((self.name.clone(), event));
    }
}

/// The in-memory host.
#[derive(Default)]
pub struct MemHost {
    space: Rc<RefCell<Keyspace>>,
    /// What [`Host::state`] answers.
    pub state: State,
    /// Armed timers: (due time, sequence) -> the engine's number.
    timers: BTreeMap<(i64, u64), u64>,
    due_of: HashMap<u64, i64>,
    next_seq: u64,
    /// Answers given to blocked clients and not yet delivered.
    unblocked: Vec<(u64, Outcome)>,
    /// Clients that lost their permission.
    pub denied: HashSet<u64>,
    /// If set, every waiter is redirected with this error (a slot that moved away).
    pub redirect: Option<String>,
    /// The client the running command may block as (its caller has its number too); `None`
    /// when no command runs or it may not block.
    blockable: Option<u64>,
    /// What [`Host::caller_info`] answers.
    pub caller_info: String,
}

impl Handles for MemHost {
    type Client = u64;
    type Timer = u64;
    type Caller = u64;
}

impl Host<MemHost> for MemHost {
    type Key = MemKey;

    fn now_ms(&self) -> i64 {
        self.space.borrow().now
    }

    fn state(&self) -> State {
        self.state
    }

    fn open(&mut self, key: &KeyId) -> Result<MemKey, OpenError> {
        self.open_key(key.as_ref())
    }

    fn start_timer(&mut self, delay_ms: i64, number: u64) -> u64 {
        assert!(
            (0..=super::engine::MAX_TIMER_MS).contains(&delay_ms),
            "timer delay {delay_ms}"
        );
        self.next_seq += 1;
        let due = self.now_ms() + delay_ms;
        self.timers.insert((due, self.next_seq), number);
        self.due_of.insert(self.next_seq, due);
        self.next_seq
    }

    fn stop_timer(&mut self, timer: u64) -> bool {
        match self.due_of.remove(&timer) {
            Some(due) => self.timers.remove(&(due, timer)).is_some(),
            None => false,
        }
    }

    fn now_us(&self) -> u64 {
        // The simulated clock is the only clock: waits are measured in its ms.
        u64::try_from(self.now_ms())
            .unwrap_or(0)
            .saturating_mul(1000)
    }

    fn block(&mut self) -> Option<Blocked<MemHost>> {
        self.blockable.take().map(|client| Blocked {
            client,
            caller: Some(client),
            id: client,
        })
    }

    fn caller_info(&mut self) -> String {
        self.caller_info.clone()
    }

    fn unblock(&mut self, client: u64, outcome: Outcome) {
        assert!(
            !self.unblocked.iter().any(|(c, _)| *c == client),
            "client {client} unblocked twice"
        );
        self.unblocked.push((client, outcome));
    }

    fn permitted(&mut self, caller: &u64) -> bool {
        !self.denied.contains(caller)
    }

    fn redirect(&mut self, _key: &[u8]) -> Option<String> {
        self.redirect.clone()
    }
}

impl MemHost {
    fn open_key(&mut self, at: KeyRef<'_>) -> Result<MemKey, OpenError> {
        let mut space = self.space.borrow_mut();
        let (value, expires_at) = match space.lookup(at.db, at.name) {
            None => (None, None),
            Some(Entry {
                value: Value::Lock(value),
                expires_at,
            }) => (Some(copy_of(value)), *expires_at),
            Some(Entry {
                value: Value::Other,
                ..
            }) => return Err(OpenError::WrongType),
        };
        Ok(MemKey {
            space: self.space.clone(),
            db: at.db,
            name: at.name.to_vec(),
            value,
            expires_at,
        })
    }

    /// Timers armed and not yet fired or stopped.
    pub fn timers(&self) -> usize {
        self.timers.len()
    }

    /// When the next armed timer is due.
    pub fn next_timer_due(&self) -> Option<i64> {
        self.timers.first_key_value().map(|(&(due, _), _)| due)
    }

    /// Takes the next armed timer, moving the clock to its due time if that is later; returns
    /// the number it carries.
    pub fn fire_next_timer(&mut self) -> Option<u64> {
        let (&(due, seq), &number) = self.timers.first_key_value()?;
        self.timers.remove(&(due, seq));
        self.due_of.remove(&seq);
        let mut space = self.space.borrow_mut();
        space.now = space.now.max(due);
        Some(number)
    }

    /// Sets the clock (Unix ms).
    pub fn set_now(&mut self, now: i64) {
        self.space.borrow_mut().now = now;
    }
}

/// An acquiring request.
fn request(owner: &[u8], ttl_ms: u64, mode: Mode) -> Request<'_> {
    Request {
        owner,
        mode,
        ttl_ms,
    }
}

/// A client of the simulated server.
pub type Client = u64;

/// The engine on the in-memory host, driven the way Redis drives it.
pub struct Sim {
    pub engine: Engine<MemHost>,
    pub host: MemHost,
    next_client: Client,
    /// Every answer delivered to a blocked client, in order.
    pub answers: Vec<(Client, Outcome)>,
    /// Clients still blocked.
    pub blocked: HashSet<Client>,
}

const DB: i32 = 0;

impl Sim {
    /// A server whose clock starts at `now` (Unix ms).
    pub fn new(now: i64) -> Sim {
        let host = MemHost::default();
        host.space.borrow_mut().now = now;
        Sim {
            engine: Engine::new(),
            host,
            next_client: 0,
            answers: Vec::new(),
            blocked: HashSet::new(),
        }
    }

    /// The clock, Unix ms.
    pub fn now(&self) -> i64 {
        self.host.now_ms()
    }

    /// Runs a command on `key` the way the Redis module does: open the key (expiring it lazily,
    /// which Redis reports before the command runs), then the engine, then whatever the host
    /// noticed meanwhile. Another type at the key answers WRONGTYPE.
    fn command(
        &mut self,
        name: &[u8],
        run: impl FnOnce(&mut Engine<MemHost>, &mut MemHost, &mut MemKey) -> Reply,
    ) -> Reply {
        let at = KeyRef { db: DB, name };
        let opened = self.host.open_key(at);
        self.report_changes();
        let mut key = match opened {
            Ok(key) => key,
            Err(_) => return Reply::Error(super::errors::LockError::WrongType),
        };
        let reply = run(&mut self.engine, &mut self.host, &mut key);
        self.host.blockable = None;
        self.report_changes();
        reply
    }

    /// Runs a command on several keys, as [`Sim::command`] does on one.
    fn command_on_keys(
        &mut self,
        names: &[&[u8]],
        run: impl FnOnce(&mut Engine<MemHost>, &mut MemHost, &mut [MemKey]) -> Reply,
    ) -> Reply {
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            let opened = self.host.open_key(KeyRef { db: DB, name });
            self.report_changes();
            match opened {
                Ok(key) => keys.push(key),
                Err(_) => return Reply::Error(super::errors::LockError::WrongType),
            }
        }
        let reply = run(&mut self.engine, &mut self.host, &mut keys);
        self.report_changes();
        reply
    }

    /// `LOCK.MACQUIRE numkeys key... owner ttl`.
    pub fn macquire(&mut self, keys: &[&[u8]], owner: &[u8], ttl: u64) -> Reply {
        self.command_on_keys(keys, |e, h, k| e.macquire(h, k, owner, ttl))
    }

    /// `LOCK.MRELEASE numkeys key... owner`.
    pub fn mrelease(&mut self, keys: &[&[u8]], owner: &[u8]) -> Reply {
        self.mrelease_from(keys, owner, None)
    }

    /// `LOCK.MRELEASE numkeys key... owner [FROM c]`.
    pub fn mrelease_from(&mut self, keys: &[&[u8]], owner: &[u8], from: Option<u32>) -> Reply {
        self.command_on_keys(keys, |e, h, k| e.mrelease(h, k, owner, from))
    }

    /// `LOCK.MRENEW numkeys key... owner ttl`.
    pub fn mrenew(&mut self, keys: &[&[u8]], owner: &[u8], ttl: u64) -> Reply {
        self.command_on_keys(keys, |e, h, k| e.mrenew(h, k, owner, ttl))
    }

    /// `LOCK.ACQUIRE key owner ttl`.
    pub fn acquire(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.acquire_as(key, owner, ttl, Mode::Exclusive)
    }

    /// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n]]`.
    pub fn acquire_as(&mut self, key: &[u8], owner: &[u8], ttl: u64, mode: Mode) -> Reply {
        self.command(key, |e, h, k| e.acquire(h, k, request(owner, ttl, mode)))
    }

    /// `LOCK.REENTER key owner ttl`.
    pub fn reenter(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.reenter_as(key, owner, ttl, Mode::Exclusive)
    }

    /// `LOCK.REENTER key owner ttl [SHARED [LIMIT n]]`.
    pub fn reenter_as(&mut self, key: &[u8], owner: &[u8], ttl: u64, mode: Mode) -> Reply {
        self.reenter_from(key, owner, ttl, mode, None)
    }

    /// `LOCK.REENTER key owner ttl [SHARED [LIMIT n]] [FROM c]`.
    pub fn reenter_from(
        &mut self,
        key: &[u8],
        owner: &[u8],
        ttl: u64,
        mode: Mode,
        from: Option<u32>,
    ) -> Reply {
        self.command(key, |e, h, k| {
            e.reenter(h, k, request(owner, ttl, mode), from)
        })
    }

    /// `LOCK.RELEASE key owner`.
    pub fn release(&mut self, key: &[u8], owner: &[u8]) -> Reply {
        self.release_from(key, owner, None)
    }

    /// `LOCK.RELEASE key owner [FROM c]`.
    pub fn release_from(&mut self, key: &[u8], owner: &[u8], from: Option<u32>) -> Reply {
        self.command(key, |e, h, k| e.release(h, k, owner, from))
    }

    /// `LOCK.RENEW key owner ttl`.
    pub fn renew(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.command(key, |e, h, k| e.renew(h, k, owner, ttl))
    }

    /// `relock.restart-grace-ms` is `ms` and the server starts now.
    pub fn start_grace(&mut self, ms: u64) {
        self.engine.configure_grace(ms);
        self.engine.start_grace(&mut self.host);
    }

    /// `LOCK.DOWNGRADE key owner`.
    pub fn downgrade(&mut self, key: &[u8], owner: &[u8]) -> Reply {
        self.command(key, |e, h, k| e.downgrade(h, k, owner))
    }

    /// `LOCK.APPLY key owner ... SHARED LIMIT limit PERMITS ...`: one shared holder exactly as
    /// a master sent it.
    pub fn apply_holder(&mut self, key: &[u8], limit: u32, owner: &[u8], holder: Holder) -> Reply {
        self.command(key, |e, h, k| e.apply_holder(h, k, limit, owner, holder))
    }

    /// Replays an effect another server replicated (`words`, as [`Sim::take_effects`] gives
    /// them), parsed as the Redis host parses it: what a replica or an AOF load does with it.
    pub fn replay(&mut self, words: &[Vec<u8>]) -> Result<Reply, super::ArgError> {
        use super::args;
        let word = |i: usize| words.get(i).map_or(&[][..], |w| w.as_slice());
        let (name, key) = (word(0), word(1));
        match name {
            b"LOCK.APPLY" => {
                let owner = args::owner(word(2))?.to_vec();
                let (token, count) = (args::token(word(3))?, args::count(word(4))?);
                let rest: Vec<&[u8]> = words.iter().skip(5).map(|w| w.as_slice()).collect();
                let tail = args::apply_tail(&rest)?;
                let Some((limit, permits)) = tail.shared else {
                    let hold = Hold::new(&owner, token, count, tail.granted_at);
                    let at = tail.expires_at;
                    return Ok(self.command(key, |e, h, k| e.apply(h, k, hold, at)));
                };
                let holder = Holder {
                    token,
                    count,
                    lease_end: tail.expires_at.ok_or(super::ArgError::Syntax)?,
                    permits,
                    granted_at: tail.granted_at,
                };
                Ok(self.apply_holder(key, limit, &owner, holder))
            }
            b"LOCK.DROP" => {
                let owner = args::owner(word(2))?.to_vec();
                Ok(self.command(key, |e, h, k| e.drop_holder(h, k, &owner)))
            }
            b"DEL" => {
                self.delete(key);
                Ok(Reply::Ok)
            }
            b"PEXPIREAT" => {
                let at = args::parse_integer(word(2)).ok_or(super::ArgError::Expiry)?;
                self.user_expiry(key, Some(at));
                Ok(Reply::Ok)
            }
            _ => Err(super::ArgError::Syntax),
        }
    }

    /// `LOCK.FORCERELEASE key`.
    pub fn force_release(&mut self, key: &[u8]) -> Reply {
        self.command(key, |e, h, k| e.force_release(h, k, None))
    }

    /// `LOCK.FORCERELEASE key owner`.
    pub fn force_release_of(&mut self, key: &[u8], owner: &[u8]) -> Reply {
        self.command(key, |e, h, k| e.force_release(h, k, Some(owner)))
    }

    /// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`.
    pub fn holders(&mut self, key: &[u8], owner: Option<&[u8]>, count: usize) -> Reply {
        self.command(key, |e, h, k| e.holders(h, k, owner, count))
    }

    /// `LOCK.INFO key`.
    pub fn info(&mut self, key: &[u8]) -> Reply {
        self.command(key, |e, h, k| e.info(h, k))
    }

    /// `LOCK.FENCED`'s check of `token` on `key` (the inner command is the host's).
    pub fn fence(&mut self, key: &[u8], token: u64) -> crate::Fence {
        let mut fence = None;
        self.command(key, |e, h, k| {
            fence = Some(e.fence(k, token, h.now_ms()));
            Reply::Ok
        });
        fence.expect("the key opened")
    }

    /// `LOCK.WAIT key owner ttl timeout` from a new client. Returns the reply and the client
    /// (blocked when the reply is [`Reply::Blocked`]).
    pub fn wait(&mut self, key: &[u8], owner: &[u8], ttl: u64, timeout: u64) -> (Reply, Client) {
        self.wait_as(key, owner, ttl, timeout, Mode::Exclusive)
    }

    /// `LOCK.WAIT key owner ttl timeout [SHARED [LIMIT n]]` from a new client.
    pub fn wait_as(
        &mut self,
        key: &[u8],
        owner: &[u8],
        ttl: u64,
        timeout: u64,
        mode: Mode,
    ) -> (Reply, Client) {
        self.next_client += 1;
        let client = self.next_client;
        self.host.blockable = Some(client);
        let wait = Wait {
            request: request(owner, ttl, mode),
            timeout_ms: timeout,
        };
        let reply = self.command(key, |e, h, k| e.wait(h, k, wait));
        if reply == Reply::Blocked {
            self.blocked.insert(client);
        }
        (reply, client)
    }

    /// `LOCK.WAIT` where blocking is not allowed (MULTI, a script): answers at once.
    pub fn wait_unblockable(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        let wait = Wait {
            request: request(owner, ttl, Mode::Exclusive),
            timeout_ms: 0,
        };
        self.command(key, |e, h, k| e.wait(h, k, wait))
    }

    /// Deletes `key` behind the engine's back (DEL, FLUSHALL...); Redis then notifies.
    pub fn delete(&mut self, key: &[u8]) {
        self.host
            .space
            .borrow_mut()
            .keys
            .remove(&(DB, key.to_vec()));
        self.engine
            .key_changed(&mut self.host, KeyRef { db: DB, name: key });
    }

    /// Overwrites `key` with another type (SET).
    pub fn overwrite(&mut self, key: &[u8]) {
        self.host.space.borrow_mut().keys.insert(
            (DB, key.to_vec()),
            Entry {
                value: Value::Other,
                expires_at: None,
            },
        );
        self.engine
            .key_changed(&mut self.host, KeyRef { db: DB, name: key });
    }

    /// Puts a shared value at `key` behind the engine's back (RENAME, RESTORE), expiring at its
    /// latest lease end.
    pub fn bring_shared(&mut self, key: &[u8], shared: Shared) {
        self.place_shared(key, shared);
        self.engine
            .value_arrived(&mut self.host, KeyRef { db: DB, name: key });
    }

    /// `SWAPDB` brings `shared` to `key`: the server reports the whole db changed, not the key.
    pub fn swap_in_shared(&mut self, key: &[u8], shared: Shared) {
        self.place_shared(key, shared);
        self.engine.db_changed(&mut self.host, Some(DB));
    }

    fn place_shared(&mut self, key: &[u8], shared: Shared) {
        let expires_at = shared.last_lease_end();
        self.host.space.borrow_mut().keys.insert(
            (DB, key.to_vec()),
            Entry {
                value: Value::Lock(LockValue::Shared(shared)),
                expires_at,
            },
        );
    }

    /// Sets `key`'s expiry behind the engine's back (PEXPIREAT).
    pub fn set_expiry(&mut self, key: &[u8], at: Option<i64>) {
        if let Some(entry) = self
            .host
            .space
            .borrow_mut()
            .keys
            .get_mut(&(DB, key.to_vec()))
        {
            entry.expires_at = at;
        }
        self.engine
            .key_changed(&mut self.host, KeyRef { db: DB, name: key });
    }

    /// Sets or removes `key`'s TTL as a user would (`PEXPIREAT`, `PERSIST`); Redis notifies.
    pub fn user_expiry(&mut self, key: &[u8], at: Option<i64>) {
        if let Some(entry) = self
            .host
            .space
            .borrow_mut()
            .keys
            .get_mut(&(DB, key.to_vec()))
        {
            entry.expires_at = at;
        }
        self.engine
            .ttl_changed(&mut self.host, KeyRef { db: DB, name: key });
    }

    /// Lets `ms` pass, firing every timer that falls due, in time order, at its time.
    pub fn advance(&mut self, ms: i64) {
        let until = self.now().saturating_add(ms);
        while self.turn_by(until) {}
        self.host.space.borrow_mut().now = until;
    }

    /// One event-loop turn of the engine's own work: fires the next host timer if it falls due
    /// by `until` (Unix ms), at its time. Returns whether one fired.
    pub fn turn_by(&mut self, until: i64) -> bool {
        let Some((&(due, seq), &number)) = self.host.timers.first_key_value() else {
            return false;
        };
        if due > until {
            return false;
        }
        self.host.timers.remove(&(due, seq));
        self.host.due_of.remove(&seq);
        {
            let mut space = self.host.space.borrow_mut();
            space.now = space.now.max(due);
        }
        self.engine.on_timer(&mut self.host, number);
        self.report_changes();
        true
    }

    /// When the next host timer (a deadline, a lapse, or a job queued for now) is due.
    #[cfg(test)]
    pub(crate) fn next_timer_due(&self) -> Option<i64> {
        self.host.timers.first_key_value().map(|(&(due, _), _)| due)
    }

    /// Runs what is due now (the 0 ms jobs after a command).
    pub fn settle(&mut self) {
        self.advance(0);
    }

    /// Redis's active expiry: deletes every lock past its expiry and reports it.
    pub fn expire_all(&mut self) {
        let keys: Vec<(i32, Vec<u8>)> = self.host.space.borrow().keys.keys().cloned().collect();
        for (db, name) in keys {
            let _ = self.host.space.borrow_mut().lookup(db, &name);
        }
        self.report_changes();
    }

    /// Delivers the answers given to blocked clients; returns them.
    pub fn deliver(&mut self) -> Vec<(Client, Outcome)> {
        let answered = std::mem::take(&mut self.host.unblocked);
        for (client, outcome) in &answered {
            self.engine.replied(*client);
            self.blocked.remove(client);
            self.answers.push((*client, outcome.clone()));
        }
        answered
    }

    /// The answers given to blocked clients and not yet delivered, in the order given.
    pub fn pending(&self) -> &[(Client, Outcome)] {
        &self.host.unblocked
    }

    /// `client` hangs up. If it was answered but the answer not yet delivered, the answer is
    /// lost with it.
    pub fn hang_up(&mut self, client: Client) {
        self.engine.client_gone(&mut self.host, client);
        // An answer given before or because of the hang-up never reaches it.
        self.host.unblocked.retain(|(c, _)| *c != client);
        self.blocked.remove(&client);
    }

    /// The server becomes a replica (or a master again).
    pub fn set_state(&mut self, state: State) {
        self.host.state = state;
        if state == State::Replica {
            self.engine.became_replica(&mut self.host);
        }
    }

    /// FLUSHDB.
    pub fn flush(&mut self) {
        self.host.space.borrow_mut().keys.clear();
        self.engine.db_changed(&mut self.host, Some(DB));
    }

    /// The lock at `key`: (owner, token, count, expiry), if there is a live one.
    pub fn lock(&self, key: &[u8]) -> Option<(Vec<u8>, u64, u32, Option<i64>)> {
        let space = self.host.space.borrow();
        let now = space.now;
        match space.keys.get(&(DB, key.to_vec())) {
            Some(Entry {
                value: Value::Lock(LockValue::Exclusive(hold)),
                expires_at,
            }) if expires_at.is_none_or(|at| now <= at) => Some((
                hold.owner().to_vec(),
                hold.token(),
                hold.count(),
                *expires_at,
            )),
            _ => None,
        }
    }

    /// The holders of a shared `key` and its expiry, lapsed leases included.
    pub fn shared(&self, key: &[u8]) -> Option<(Shared, Option<i64>)> {
        let space = self.host.space.borrow();
        let now = space.now;
        match space.keys.get(&(DB, key.to_vec())) {
            Some(Entry {
                value: Value::Lock(LockValue::Shared(shared)),
                expires_at,
            }) if expires_at.is_none_or(|at| now <= at) => Some((shared.clone(), *expires_at)),
            _ => None,
        }
    }

    /// Effects replicated so far (and forgets them).
    pub fn take_effects(&mut self) -> Vec<Replicated> {
        std::mem::take(&mut self.host.space.borrow_mut().effects)
    }

    /// Keyspace events emitted so far (and forgets them).
    pub fn take_events(&mut self) -> Vec<(Vec<u8>, Event)> {
        std::mem::take(&mut self.host.space.borrow_mut().events)
    }

    /// Timers armed in the host right now.
    pub fn host_timers(&self) -> usize {
        self.host.timers()
    }

    /// Reports keys that expired on lookup, as Redis's `expired` notification does.
    fn report_changes(&mut self) {
        loop {
            let expired = std::mem::take(&mut self.host.space.borrow_mut().expired);
            if expired.is_empty() {
                return;
            }
            for key in expired {
                self.engine.count_expired(1);
                self.engine.key_changed(&mut self.host, key.as_ref());
            }
        }
    }
}

/// An error answer's text, for assertions.
pub fn error_text(outcome: &Outcome) -> Option<String> {
    match outcome {
        Outcome::Error(error) => Some(error.text().into_owned()),
        _ => None,
    }
}
