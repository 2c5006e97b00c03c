//! An in-memory server for the engine: a keyspace with lazy expiry, timers on a simulated
//! clock, blocked clients and their answers. The unit tests, the model test and the fuzz
//! targets drive the real [`Engine`] through it.
//!
//! [`Sim`] plays the part of Redis around the engine: it opens keys for commands (expiring
//! them lazily, as Redis does on lookup), reports keys changed behind the engine's back, fires
//! timers in time order as the clock advances, and delivers answers to blocked clients.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use super::engine::{Engine, Reply, Wait};
use super::host::{Event, Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
use super::packed::{Hold, LockRef, LockValue};
use super::shared::{Holder, Mode, Shared};

/// A value in the simulated keyspace.
#[derive(Debug)]
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

/// What a change to a lock key replicates (what Redis sends to replicas and the AOF).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// `LOCK.APPLY key owner token count [PXAT at]`.
    Apply {
        key: Vec<u8>,
        owner: Vec<u8>,
        token: u64,
        count: u32,
        at: Option<i64>,
    },
    /// `LOCK.APPLY key owner token count PXAT lease_end SHARED [LIMIT n]`: one shared holder.
    ApplyHolder {
        key: Vec<u8>,
        owner: Vec<u8>,
        holder: Holder,
        limit: u32,
    },
    /// `LOCK.DROP key owner`: one shared holder removed.
    Drop { key: Vec<u8>, owner: Vec<u8> },
    /// `PEXPIREAT key at`.
    Expire { key: Vec<u8>, at: i64 },
    /// `DEL key`.
    Del { key: Vec<u8> },
}

#[derive(Default, Debug)]
struct Keyspace {
    now: i64,
    keys: HashMap<(i32, Vec<u8>), Entry>,
    /// Keys that expired on lookup; reported to the engine once it returns, as Redis's
    /// `expired` notification is.
    expired: Vec<KeyId>,
    effects: Vec<Effect>,
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
    fn write(&mut self, effect: Effect) {
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
        space.effects.push(effect);
    }

    /// The exclusive hold's effect.
    fn write_hold(&mut self) {
        let effect = match &self.value {
            Some(LockValue::Exclusive(hold)) => Effect::Apply {
                key: self.name.clone(),
                owner: hold.owner().to_vec(),
                token: hold.token(),
                count: hold.count(),
                at: self.expires_at,
            },
            _ => Effect::Del {
                key: self.name.clone(),
            },
        };
        self.write(effect);
    }
}

impl Key for MemKey {
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

    fn put_holder(&mut self, limit: u32, owner: &[u8], holder: Holder) {
        if !matches!(self.value, Some(LockValue::Shared(_))) {
            self.value = Some(LockValue::Shared(Shared::new(limit)));
        }
        if let Some(LockValue::Shared(shared)) = self.value.as_mut() {
            shared.insert(owner, holder);
            self.expires_at = shared.last_lease_end();
        }
        let effect = Effect::ApplyHolder {
            key: self.name.clone(),
            owner: owner.to_vec(),
            holder,
            limit,
        };
        self.write(effect);
    }

    fn remove_holder(&mut self, owner: &[u8]) {
        if let Some(LockValue::Shared(shared)) = self.value.as_mut() {
            shared.remove(owner);
            self.expires_at = shared.last_lease_end();
            if shared.is_empty() {
                self.value = None;
            }
        }
        let effect = Effect::Drop {
            key: self.name.clone(),
            owner: owner.to_vec(),
        };
        self.write(effect);
    }

    fn cap_expiry(&mut self, at: i64) {
        self.expires_at = Some(at);
        let effect = Effect::Expire {
            key: self.name.clone(),
            at,
        };
        self.write(effect);
    }

    fn remove(&mut self) {
        self.value = None;
        self.expires_at = None;
        let effect = Effect::Del {
            key: self.name.clone(),
        };
        self.write(effect);
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
        run: impl FnOnce(&mut Engine<MemHost>, &mut MemHost, &mut MemKey, KeyRef<'_>) -> Reply,
    ) -> Reply {
        let at = KeyRef { db: DB, name };
        let opened = self.host.open_key(at);
        self.report_changes();
        let mut key = match opened {
            Ok(key) => key,
            Err(_) => return Reply::Error(super::errors::WRONGTYPE.into()),
        };
        let reply = run(&mut self.engine, &mut self.host, &mut key, at);
        self.report_changes();
        reply
    }

    /// `LOCK.ACQUIRE key owner ttl`.
    pub fn acquire(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.acquire_as(key, owner, ttl, Mode::Exclusive)
    }

    /// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n]]`.
    pub fn acquire_as(&mut self, key: &[u8], owner: &[u8], ttl: u64, mode: Mode) -> Reply {
        self.command(key, |e, h, k, at| e.acquire(h, k, at, owner, ttl, mode))
    }

    /// `LOCK.REENTER key owner ttl`.
    pub fn reenter(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.reenter_as(key, owner, ttl, Mode::Exclusive)
    }

    /// `LOCK.REENTER key owner ttl [SHARED [LIMIT n]]`.
    pub fn reenter_as(&mut self, key: &[u8], owner: &[u8], ttl: u64, mode: Mode) -> Reply {
        self.command(key, |e, h, k, at| e.reenter(h, k, at, owner, ttl, mode))
    }

    /// `LOCK.RELEASE key owner`.
    pub fn release(&mut self, key: &[u8], owner: &[u8]) -> Reply {
        self.command(key, |e, h, k, at| e.release(h, k, at, owner))
    }

    /// `LOCK.RENEW key owner ttl`.
    pub fn renew(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        self.command(key, |e, h, k, at| e.renew(h, k, at, owner, ttl))
    }

    /// `LOCK.FORCERELEASE key`.
    pub fn force_release(&mut self, key: &[u8]) -> Reply {
        self.command(key, |e, h, k, at| e.force_release(h, k, at, None))
    }

    /// `LOCK.FORCERELEASE key owner`.
    pub fn force_release_of(&mut self, key: &[u8], owner: &[u8]) -> Reply {
        self.command(key, |e, h, k, at| e.force_release(h, k, at, Some(owner)))
    }

    /// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`.
    pub fn holders(&mut self, key: &[u8], owner: Option<&[u8]>, count: usize) -> Reply {
        self.command(key, |e, h, k, _| e.holders(h, k, owner, count))
    }

    /// `LOCK.INFO key`.
    pub fn info(&mut self, key: &[u8]) -> Reply {
        self.command(key, |e, h, k, at| e.info(h, k, at))
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
        let reply = self.command(key, |e, h, k, at| {
            let wait = Wait {
                owner,
                mode,
                ttl_ms: ttl,
                timeout_ms: timeout,
            };
            e.wait(
                h,
                k,
                at,
                wait,
                Some(|_: &mut MemHost| Some((client, Some(client)))),
            )
        });
        if reply == Reply::Blocked {
            self.blocked.insert(client);
        }
        (reply, client)
    }

    /// `LOCK.WAIT` where blocking is not allowed (MULTI, a script): answers at once.
    pub fn wait_unblockable(&mut self, key: &[u8], owner: &[u8], ttl: u64) -> Reply {
        type Never = fn(&mut MemHost) -> Option<(u64, Option<u64>)>;
        self.command(key, |e, h, k, at| {
            let wait = Wait {
                owner,
                mode: Mode::Exclusive,
                ttl_ms: ttl,
                timeout_ms: 0,
            };
            e.wait(h, k, at, wait, None::<Never>)
        })
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
            .key_changed(&mut self.host, KeyRef { db: DB, name: key });
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
        while let Some((&(due, seq), &number)) = self.host.timers.first_key_value() {
            if due > until {
                break;
            }
            self.host.timers.remove(&(due, seq));
            self.host.due_of.remove(&seq);
            {
                let mut space = self.host.space.borrow_mut();
                space.now = space.now.max(due);
            }
            self.engine.on_timer(&mut self.host, number);
            self.report_changes();
        }
        self.host.space.borrow_mut().now = until;
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
    pub fn take_effects(&mut self) -> Vec<Effect> {
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
pub fn error_text(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Error(Cow::Borrowed(text)) => Some(text),
        Outcome::Error(Cow::Owned(text)) => Some(text),
        _ => None,
    }
}
