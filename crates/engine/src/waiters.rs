//! Who waits for which key: each key's FIFO queue (its *line*), where every blocked client
//! stands (its *ticket*), and the answers in flight that carry a hold nobody knows of yet.
//!
//! [`Waiters`] owns all of it and keeps its counts in step itself; the engine asks it to add,
//! take out or look, and it hands back what the engine must do about the rest (a timer to stop).
//! Invariants, checked by [`Waiters::check`] in the tests:
//! - `live` is the number of queued waiters over all lines; no line is empty;
//! - each line's `shared` is the number of shared requests in its queue, and while it is not 0,
//!   `limit` is the limit they all asked for;
//! - every queued waiter's client has a `Waiting` ticket naming its line and place, and no other
//!   ticket is `Waiting`;
//! - a `Granted` ticket names a token of `unconfirmed`, whose `answers` counts those tickets.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::decide::Queued;
use super::host::{Handles, KeyId, KeyRef};
use super::queue::{Queue, WaiterId};
use super::schedule::TimerId;
use super::shared::Mode;

/// A blocked `LOCK.WAIT`.
pub struct Waiter<T: Handles> {
    pub client: T::Client,
    pub owner: Box<[u8]>,
    pub mode: Mode,
    /// The lease of the hold it gets.
    pub ttl_ms: u64,
    /// Who asked, to re-check their permissions when the lock is handed over.
    pub caller: Option<T::Caller>,
    /// The timer that ends the wait (none for timeout 0).
    pub timeout: Option<TimerId>,
    /// When it queued (the host's monotonic µs).
    pub since_us: u64,
    /// Its connection's id.
    pub connection: u64,
    /// When its wait times out (Unix ms; none for timeout 0).
    pub times_out_at: Option<i64>,
}

/// A line's deadline: the timer armed for when its head may be let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    pub timer: TimerId,
    /// When it fires (Unix ms).
    pub fires_at: i64,
}

/// A waiter taken out of its line.
pub struct Removed<T: Handles> {
    pub waiter: Waiter<T>,
    /// The line's deadline timer, when the line is gone with this waiter: the engine stops it.
    pub deadline: Option<TimerId>,
}

/// One key's queue.
struct Line<T: Handles> {
    queue: Queue<Waiter<T>>,
    deadline: Option<Deadline>,
    /// Shared requests queued, and the limit they all asked for.
    shared: usize,
    limit: u32,
}

/// Where a blocked client stands.
enum Ticket {
    Waiting {
        key: KeyId,
        id: WaiterId,
    },
    /// Answered with the token of a hold nobody knows of yet; the answer is on its way.
    Granted {
        token: u64,
    },
}

/// A hold granted through answers none of which has reached a client yet.
struct Unconfirmed {
    key: KeyId,
    owner: Box<[u8]>,
    /// Answers carrying the hold's token still on their way.
    answers: u32,
}

/// Every key's line, every blocked client's ticket, every unconfirmed hold.
pub struct Waiters<T: Handles> {
    /// db -> key -> line, only for keys with live waiters.
    lines: HashMap<i32, HashMap<Rc<[u8]>, Line<T>>>,
    tickets: HashMap<T::Client, Ticket>,
    live: usize,
    next_id: WaiterId,
    /// Keys whose value changed behind the engine's back since they were last served: their whole
    /// queue is checked against it.
    arrived: HashSet<KeyId>,
    /// Token -> the hold granted through answers still in flight.
    unconfirmed: HashMap<u64, Unconfirmed>,
}

impl<T: Handles> Default for Waiters<T> {
    fn default() -> Self {
        Waiters {
            lines: HashMap::new(),
            tickets: HashMap::new(),
            live: 0,
            next_id: 0,
            arrived: HashSet::new(),
            unconfirmed: HashMap::new(),
        }
    }
}

impl<T: Handles> Waiters<T> {
    // --- Lines -----------------------------------------------------------------------------------

    /// Queued waiters over all keys.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether nobody waits anywhere.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Waiters queued for `key`.
    pub fn queued(&self, key: KeyRef<'_>) -> usize {
        self.line_ref(key).map_or(0, |line| line.queue.len())
    }

    /// What a request at `key` finds in its queue.
    pub fn facts(&self, key: KeyRef<'_>) -> Queued {
        match self.line_ref(key) {
            None => Queued::default(),
            Some(line) => Queued {
                any: !line.queue.is_empty(),
                shared_limit: (line.shared > 0).then_some(line.limit),
            },
        }
    }

    /// Queues `waiter` at the end of `key`'s line.
    pub fn join(&mut self, key: &KeyId, waiter: Waiter<T>) -> WaiterId {
        self.next_id += 1;
        let id = self.next_id;
        let client = waiter.client;
        let line = self
            .lines
            .entry(key.db)
            .or_default()
            .entry(key.name.clone())
            .or_insert_with(|| Line {
                queue: Queue::new(),
                deadline: None,
                shared: 0,
                limit: 0,
            });
        if let Mode::Shared { limit, .. } = waiter.mode {
            line.shared += 1;
            line.limit = limit;
        }
        line.queue.push(id, waiter);
        self.live += 1;
        self.tickets.insert(
            client,
            Ticket::Waiting {
                key: key.clone(),
                id,
            },
        );
        id
    }

    /// The first waiter of `key`'s line.
    pub fn head(&mut self, key: &KeyId) -> Option<&Waiter<T>> {
        self.line(key)?.queue.front().map(|(_, waiter)| waiter)
    }

    /// Takes the first waiter out of `key`'s line.
    pub fn pop_head(&mut self, key: &KeyId) -> Option<Removed<T>> {
        let id = self.line(key)?.queue.front()?.0;
        self.remove(key, id)
    }

    /// Takes waiter `id` out of `key`'s line.
    pub fn remove(&mut self, key: &KeyId, id: WaiterId) -> Option<Removed<T>> {
        let line = self.line(key)?;
        let waiter = line.queue.remove(id)?;
        if matches!(waiter.mode, Mode::Shared { .. }) {
            line.shared -= 1;
        }
        self.live -= 1;
        if matches!(
            self.tickets.get(&waiter.client),
            Some(Ticket::Waiting { .. })
        ) {
            self.tickets.remove(&waiter.client);
        }
        let deadline = self.drop_line_if_empty(key);
        Some(Removed { waiter, deadline })
    }

    /// Takes a waiting `client` out of its line, wherever it stands; with its key and whether it
    /// was the head.
    pub fn leave(&mut self, client: T::Client) -> Option<(KeyId, bool, Removed<T>)> {
        let (key, id) = match self.tickets.get(&client)? {
            Ticket::Waiting { key, id } => (key.clone(), *id),
            Ticket::Granted { .. } => return None,
        };
        let was_head = self
            .line(&key)
            .and_then(|line| line.queue.front())
            .is_some_and(|(head, _)| head == id);
        let removed = self.remove(&key, id)?;
        Some((key, was_head, removed))
    }

    /// Takes every waiter out of `key`'s line, in queue order, with the line's deadline timer.
    pub fn take_all(&mut self, key: &KeyId) -> (Vec<Waiter<T>>, Option<TimerId>) {
        let Some(keys) = self.lines.get_mut(&key.db) else {
            return (Vec::new(), None);
        };
        let Some(mut line) = keys.remove(&key.name) else {
            return (Vec::new(), None);
        };
        if keys.is_empty() {
            self.lines.remove(&key.db);
        }
        self.arrived.remove(key);
        let waiters: Vec<Waiter<T>> = line.queue.drain().map(|(_, w)| w).collect();
        self.live -= waiters.len();
        for waiter in &waiters {
            self.tickets.remove(&waiter.client);
        }
        (waiters, line.deadline.map(|d| d.timer))
    }

    /// `key`'s waiters in queue order.
    pub fn iter(&self, key: KeyRef<'_>) -> impl Iterator<Item = (WaiterId, &Waiter<T>)> {
        self.line_ref(key)
            .into_iter()
            .flat_map(|line| line.queue.iter())
    }

    /// Sets the limit of `key`'s shared waiters (after those with another were failed).
    pub fn set_limit(&mut self, key: &KeyId, limit: u32) {
        if let Some(line) = self.line(key).filter(|line| line.shared > 0) {
            line.limit = limit;
        }
    }

    /// Keys with waiters, in `db` (every db if `None`).
    pub fn keys(&self, db: Option<i32>) -> Vec<KeyId> {
        self.lines
            .iter()
            .filter(|(d, _)| db.is_none_or(|db| db == **d))
            .flat_map(|(d, keys)| {
                keys.keys().map(|name| KeyId {
                    db: *d,
                    name: name.clone(),
                })
            })
            .collect()
    }

    /// Where a waiting `client` stands, if it does.
    pub fn waiting(&self, client: T::Client) -> Option<(&KeyId, WaiterId)> {
        match self.tickets.get(&client)? {
            Ticket::Waiting { key, id } => Some((key, *id)),
            Ticket::Granted { .. } => None,
        }
    }

    // --- Deadlines -----------------------------------------------------------------------------

    /// `key`'s line deadline, if one is armed.
    pub fn deadline(&self, key: KeyRef<'_>) -> Option<Deadline> {
        self.line_ref(key)?.deadline
    }

    /// Sets `key`'s deadline; returns the one it replaces (the engine stops its timer), or hands
    /// `deadline` back when `key` has no line (nobody waits: the engine stops that timer).
    pub fn set_deadline(
        &mut self,
        key: &KeyId,
        deadline: Deadline,
    ) -> Result<Option<Deadline>, Deadline> {
        match self.line(key) {
            Some(line) => Ok(line.deadline.replace(deadline)),
            None => Err(deadline),
        }
    }

    /// `key`'s deadline timer fired (the only one armed for it): forget it.
    pub fn deadline_fired(&mut self, key: &KeyId) {
        if let Some(line) = self.line(key) {
            line.deadline = None;
        }
    }

    /// Waiter `id` of `key` has its wait-end timer.
    pub fn set_timeout(&mut self, key: &KeyId, id: WaiterId, timer: TimerId) {
        if let Some(waiter) = self.line(key).and_then(|line| line.queue.get_mut(id)) {
            waiter.timeout = Some(timer);
        }
    }

    // --- Values arriving ------------------------------------------------------------------------

    /// The value at `key` may have been replaced by any other.
    pub fn mark_arrived(&mut self, key: &KeyId) {
        self.arrived.insert(key.clone());
    }

    /// Whether a value arrived at `key` since it was last served (and forget it).
    pub fn take_arrived(&mut self, key: &KeyId) -> bool {
        self.arrived.remove(key)
    }

    // --- Answers in flight -----------------------------------------------------------------------

    /// `client` was answered `token`: a new hold (`new`), or a re-acquire of `owner`'s hold at
    /// `key`. A new hold is unconfirmed until an answer carrying it is delivered; a re-acquire
    /// of a hold already known needs no ticket.
    pub fn answered(
        &mut self,
        client: T::Client,
        token: u64,
        key: &KeyId,
        owner: &[u8],
        new: bool,
    ) {
        if new {
            let hold = Unconfirmed {
                key: key.clone(),
                owner: owner.into(),
                answers: 1,
            };
            self.unconfirmed.insert(token, hold);
        } else {
            match self.unconfirmed.get_mut(&token) {
                Some(hold) => hold.answers += 1,
                None => return,
            }
        }
        self.tickets.insert(client, Ticket::Granted { token });
    }

    /// `client`'s answer was delivered: a hold it carried is known to its owner now.
    pub fn delivered(&mut self, client: T::Client) {
        if let Some(Ticket::Granted { token }) = self.tickets.remove(&client) {
            self.unconfirmed.remove(&token);
        }
    }

    /// `client`, answered but not yet delivered, hung up: the token to revoke if that was the
    /// last answer carrying its hold.
    pub fn answer_lost(&mut self, client: T::Client) -> Option<u64> {
        let Some(&Ticket::Granted { token }) = self.tickets.get(&client) else {
            return None;
        };
        self.tickets.remove(&client);
        let hold = self.unconfirmed.get_mut(&token)?;
        hold.answers -= 1;
        (hold.answers == 0).then_some(token)
    }

    /// The owner acted on the hold with `token`: it knows of it.
    pub fn confirm(&mut self, token: u64) {
        if !self.unconfirmed.is_empty() {
            self.unconfirmed.remove(&token);
        }
    }

    /// The hold with `token` if every answer carrying it was lost and nothing confirmed it since
    /// (forgotten here: the engine revokes it): its key and owner.
    pub fn take_lost(&mut self, token: u64) -> Option<(KeyId, Box<[u8]>)> {
        if self.unconfirmed.get(&token)?.answers > 0 {
            return None;
        }
        let hold = self.unconfirmed.remove(&token)?;
        Some((hold.key, hold.owner))
    }

    // --- Inside ---------------------------------------------------------------------------------

    fn line(&mut self, key: &KeyId) -> Option<&mut Line<T>> {
        self.lines.get_mut(&key.db)?.get_mut(&key.name)
    }

    fn line_ref(&self, key: KeyRef<'_>) -> Option<&Line<T>> {
        self.lines.get(&key.db)?.get(key.name)
    }

    /// Removes `key`'s line if it is empty; its deadline timer, for the engine to stop.
    fn drop_line_if_empty(&mut self, key: &KeyId) -> Option<TimerId> {
        let keys = self.lines.get_mut(&key.db)?;
        if !keys.get(&key.name)?.queue.is_empty() {
            return None;
        }
        let line = keys.remove(&key.name)?;
        if keys.is_empty() {
            self.lines.remove(&key.db);
        }
        self.arrived.remove(key);
        line.deadline.map(|d| d.timer)
    }

    /// Panics if an invariant of the module docs does not hold (tests only).
    #[cfg(test)]
    pub fn check(&self) {
        let mut live = 0;
        for (db, keys) in &self.lines {
            for (name, line) in keys {
                assert!(!line.queue.is_empty(), "an empty line is kept");
                live += line.queue.len();
                let shared: Vec<u32> = line
                    .queue
                    .iter()
                    .filter_map(|(_, w)| match w.mode {
                        Mode::Shared { limit, .. } => Some(limit),
                        Mode::Exclusive => None,
                    })
                    .collect();
                assert_eq!(line.shared, shared.len(), "shared count");
                assert!(
                    shared.iter().all(|l| *l == line.limit),
                    "one limit per line"
                );
                for (id, w) in line.queue.iter() {
                    match self.tickets.get(&w.client) {
                        Some(Ticket::Waiting { key, id: at }) => {
                            assert!(key.db == *db && key.name == *name && *at == id, "ticket");
                        }
                        _ => panic!("a queued waiter without its ticket"),
                    }
                }
            }
        }
        assert_eq!(self.live, live, "live count");
        let waiting = self
            .tickets
            .values()
            .filter(|t| matches!(t, Ticket::Waiting { .. }))
            .count();
        assert_eq!(waiting, live, "Waiting tickets");
        let mut answers: HashMap<u64, u32> = HashMap::new();
        for ticket in self.tickets.values() {
            if let Ticket::Granted { token } = ticket {
                *answers.entry(*token).or_default() += 1;
            }
        }
        for (token, n) in answers {
            if let Some(hold) = self.unconfirmed.get(&token) {
                assert_eq!(hold.answers, n, "answers in flight of {token}");
            }
        }
    }
}
