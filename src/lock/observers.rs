//! Who observes which key (`LOCK.OBSERVE`): each blocked observer, the token it knows of, and,
//! per key, its observers grouped by that token, so that a change wakes exactly those whose
//! token is no longer the key's, and a renewal (same token) looks at no observer at all.
//!
//! Observers take no place in any queue and change no hold. Nothing is kept for a key nobody
//! observes. Invariants: every client of a group has an [`Observer`] naming that key and token;
//! no group and no key entry is empty.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::host::{Handles, KeyId, KeyRef};
use super::schedule::TimerId;

/// A blocked `LOCK.OBSERVE`.
pub struct Observer<T: Handles> {
    pub key: KeyId,
    /// The token it knows of (0: no holder).
    pub known: u64,
    /// The timer that ends its wait (none for timeout 0).
    pub timeout: Option<TimerId>,
    /// Who asked, for the read-permission re-check before an answer that shows a hold.
    pub caller: Option<T::Caller>,
}

/// One observed key.
struct Watched<T: Handles> {
    /// Known token -> its observers.
    groups: HashMap<u64, HashSet<T::Client>>,
    /// The timer armed for the hold's expiry (its id, when it fires), on a master.
    deadline: Option<(TimerId, i64)>,
}

/// Every observer.
pub struct Observers<T: Handles> {
    keys: HashMap<i32, HashMap<Rc<[u8]>, Watched<T>>>,
    clients: HashMap<T::Client, Observer<T>>,
}

impl<T: Handles> Default for Observers<T> {
    fn default() -> Self {
        Observers {
            keys: HashMap::new(),
            clients: HashMap::new(),
        }
    }
}

impl<T: Handles> Observers<T> {
    /// Blocked observers over all keys.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Whether nobody observes anything.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Whether anyone observes `key`.
    pub fn watched(&self, key: KeyRef<'_>) -> bool {
        self.keys
            .get(&key.db)
            .is_some_and(|keys| keys.contains_key(key.name))
    }

    /// Adds `client`, observing `observer.key`.
    pub fn add(&mut self, client: T::Client, observer: Observer<T>) {
        let watched = self
            .keys
            .entry(observer.key.db)
            .or_default()
            .entry(observer.key.name.clone())
            .or_insert_with(|| Watched {
                groups: HashMap::new(),
                deadline: None,
            });
        watched
            .groups
            .entry(observer.known)
            .or_default()
            .insert(client);
        self.clients.insert(client, observer);
    }

    /// Takes `client` out; returns its observer, and the key's deadline timer when the key has
    /// no observer left (the caller stops it).
    pub fn remove(&mut self, client: T::Client) -> Option<(Observer<T>, Option<TimerId>)> {
        let observer = self.clients.remove(&client)?;
        let mut deadline = None;
        if let Some(keys) = self.keys.get_mut(&observer.key.db) {
            if let Some(watched) = keys.get_mut(&observer.key.name) {
                if let Some(group) = watched.groups.get_mut(&observer.known) {
                    group.remove(&client);
                    if group.is_empty() {
                        watched.groups.remove(&observer.known);
                    }
                }
                if watched.groups.is_empty() {
                    deadline = watched.deadline.map(|(timer, _)| timer);
                    keys.remove(&observer.key.name);
                }
            }
            if keys.is_empty() {
                self.keys.remove(&observer.key.db);
            }
        }
        Some((observer, deadline))
    }

    /// At most `max` observers of `key` whose known token is not `current`, taken out.
    pub fn take_changed(&mut self, key: KeyRef<'_>, current: u64, max: usize) -> Vec<T::Client> {
        let Some(watched) = self.keys.get(&key.db).and_then(|k| k.get(key.name)) else {
            return Vec::new();
        };
        let clients: Vec<T::Client> = watched
            .groups
            .iter()
            .filter(|(known, _)| **known != current)
            .flat_map(|(_, group)| group.iter().copied())
            .take(max)
            .collect();
        clients
    }

    /// Whether an observer of `key` knows a token other than `current`.
    pub fn any_changed(&self, key: KeyRef<'_>, current: u64) -> bool {
        self.keys
            .get(&key.db)
            .and_then(|k| k.get(key.name))
            .is_some_and(|w| w.groups.keys().any(|known| *known != current))
    }

    /// At most `max` observers of `key`, whatever they know.
    pub fn some_of(&self, key: KeyRef<'_>, max: usize) -> Vec<T::Client> {
        self.keys
            .get(&key.db)
            .and_then(|k| k.get(key.name))
            .map(|w| {
                w.groups
                    .values()
                    .flat_map(|g| g.iter().copied())
                    .take(max)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The observed keys of `db` (all dbs if `None`).
    pub fn keys(&self, db: Option<i32>) -> Vec<KeyId> {
        self.keys
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

    /// The key's expiry timer, if armed.
    pub fn deadline(&self, key: KeyRef<'_>) -> Option<(TimerId, i64)> {
        self.keys
            .get(&key.db)
            .and_then(|k| k.get(key.name))
            .and_then(|w| w.deadline)
    }

    /// Records the key's expiry timer (none: disarmed); ignored for a key nobody observes.
    pub fn set_deadline(&mut self, key: KeyRef<'_>, deadline: Option<(TimerId, i64)>) {
        if let Some(w) = self.keys.get_mut(&key.db).and_then(|k| k.get_mut(key.name)) {
            w.deadline = deadline;
        }
    }

    /// The observer of `client`, if it observes.
    pub fn get(&self, client: T::Client) -> Option<&Observer<T>> {
        self.clients.get(&client)
    }
}
