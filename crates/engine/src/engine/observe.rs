//! `LOCK.OBSERVE`: blocked readers answered with `LOCK.INFO`'s reply when the hold of their key
//! changes. A change anywhere (a command of the engine, a key changed behind its back, a flush,
//! the master's stream on a replica) only queues a [`Job::Observe`] for the key when someone
//! observes it; the job runs after the command that made the change, so one atomic step (a
//! release and its hand-off) wakes each observer once, with the final state. It answers at most
//! what is left of the turn's [`TURN_BUDGET`] and leaves the rest to the next turn.

use super::{Engine, TURN_BUDGET};
use crate::errors::LockError;
use crate::host::{Handles, Host, Key, KeyId, KeyRef, OpenError, Outcome, State};
use crate::observers::Observer;
use crate::reply::{Info, Reply};
use crate::schedule::{Due, Job};
use crate::shared::Mode;

/// What an observer of a key would be answered now, with the key's current token (0: none).
enum Seen {
    Lock(Option<Box<Info>>, u64),
    Error(LockError),
    /// The key cannot be looked at now (an import owns it): try later.
    Unavailable,
}

impl<T: Handles> Engine<T> {
    /// `LOCK.OBSERVE key known_token timeout_ms`: `LOCK.INFO`'s reply at once when the key's
    /// token is not `known` (0: no holder), or when the client may not block; else blocks it
    /// until the token changes, the hold ends, or the timeout passes.
    pub fn observe<H: Host<T>>(
        &mut self,
        host: &mut H,
        key: &H::Key,
        known: u64,
        timeout_ms: u64,
    ) -> Reply {
        let (info, current) = match self.seen_in(host, key) {
            Seen::Lock(info, current) => (info, current),
            Seen::Error(error) => return Reply::Error(error),
            Seen::Unavailable => return Reply::Nil,
        };
        if current != known {
            return info.map_or(Reply::Nil, |info| Reply::Info(*info));
        }
        let Some(blocked) = host.block() else {
            return info.map_or(Reply::Nil, |info| Reply::Info(*info));
        };
        // The timeout is kept in the observer's entry (a step of 5 ms), not by a timer of its
        // own: one timer fires at the first step due. Not Redis's blocked-client timeout, which
        // may come in the same event-loop turn as an answer the module already gave and then
        // drop it (7.0) or answer twice.
        let now = host.now_ms();
        let until = (timeout_ms > 0)
            .then(|| now.saturating_add(i64::try_from(timeout_ms).unwrap_or(i64::MAX)));
        let client = blocked.client;
        let added = self
            .observers
            .add(client, key.id().to_id(), known, blocked.caller, until, now);
        let Ok(far) = added else {
            // Already blocked: answered through the host, like any observer.
            host.unblock(client, Outcome::Error(LockError::TooManyObservers));
            return Reply::Blocked;
        };
        if let (true, Some(at)) = (far, until) {
            let timer = self.schedule.start(host, at, Due::ObserveEnds(client));
            self.observers.set_far(client, timer);
        }
        self.arm_observe_timeouts(host);
        self.arm_observed_deadline(host, key);
        Reply::Blocked
    }

    /// `LOCK.STATS RESET`: clears the observers' counter (`observe_wakeups_total`).
    pub fn reset_observe_counters(&mut self) {
        self.stats.observe_wakeups = 0;
    }

    /// Observers blocked now.
    pub fn observers(&self) -> usize {
        self.observers.len()
    }

    /// A key may have changed (the host saw it written): its observers, if any, are looked at
    /// after the current command.
    pub fn observed_changed<H: Host<T>>(&mut self, host: &mut H, key: KeyRef<'_>) {
        if !self.observers.is_empty() && self.observers.watched(key) {
            self.schedule.push(host, Job::Observe(key.to_id()));
        }
    }

    /// Every observed key of `db` (all if `None`) may have changed.
    pub(super) fn observed_db_changed<H: Host<T>>(&mut self, host: &mut H, db: Option<i32>) {
        if self.observers.is_empty() {
            return;
        }
        for key in self.observers.keys(db) {
            self.schedule.push(host, Job::Observe(key));
        }
    }

    /// This server became a replica: every observer gets Redis's `UNBLOCKED`.
    pub(super) fn observers_demoted<H: Host<T>>(&mut self, host: &mut H) {
        for key in self.observers.keys(None) {
            self.fail_observers(host, &key, &LockError::Unblocked);
        }
    }

    /// The client hung up, or Redis unblocked it (`CLIENT UNBLOCK`): it stops observing. Returns
    /// the answer it would get now (for `CLIENT UNBLOCK ... TIMEOUT`, which answers as a
    /// timeout), none if it did not observe. The host is told to unblock it either way.
    pub fn observer_unblocked<H: Host<T>>(
        &mut self,
        host: &mut H,
        client: T::Client,
    ) -> Option<Outcome> {
        let outcome = self.outcome_now(host, client)?;
        self.leave_observing(host, client);
        host.unblock(client, Outcome::TimedOut);
        Some(outcome)
    }

    /// The client hung up: if it observed, it stops (and is unblocked, as the host requires).
    pub(super) fn observer_gone<H: Host<T>>(&mut self, host: &mut H, client: T::Client) -> bool {
        if self.leave_observing(host, client).is_none() {
            return false;
        }
        host.unblock(client, Outcome::TimedOut);
        true
    }

    /// Takes `client` out of the observers, stopping its timers.
    fn leave_observing<H: Host<T>>(&mut self, host: &mut H, client: T::Client) -> Option<Observer> {
        let (observer, far, deadline) = self.observers.remove(client)?;
        self.stop_timers(host, far, deadline);
        if self.observers.is_empty() {
            self.observers.timeouts.clear();
            if let Some((timer, _)) = self.observers.timeout_timer.take() {
                self.schedule.stop(host, timer);
            }
        }
        Some(observer)
    }

    /// Arms the timer that turns the event loop at the first observer timeout (or moves it).
    fn arm_observe_timeouts<H: Host<T>>(&mut self, host: &mut H) {
        let first = self.observers.timeouts.first().copied();
        let armed = self.observers.timeout_timer;
        if armed.map(|(_, at)| at) == first {
            return;
        }
        if let Some((timer, _)) = armed {
            self.schedule.stop(host, timer);
        }
        self.observers.timeout_timer =
            first.map(|at| (self.schedule.start(host, at, Due::ObserveTimeouts), at));
    }

    /// A step of observers' timeouts came due: the observers whose timeout passed are answered
    /// the current state, a turn's budget at a time (the rest at once in the next turn); the
    /// timer moves to the next step.
    pub(super) fn observe_timeouts_due<H: Host<T>>(&mut self, host: &mut H) {
        self.observers.timeout_timer = None;
        let now = host.now_ms();
        let budget = TURN_BUDGET.saturating_sub(self.work).max(1);
        let due = self.observers.timed_out(now, budget);
        self.work += due.len();
        let more = due.len() == budget;
        for client in due {
            self.observe_ends(host, client);
        }
        while self.observers.timeouts.first().is_some_and(|at| *at <= now) {
            self.observers.timeouts.pop_first();
        }
        if more && !self.observers.is_empty() {
            self.observers.timeouts.insert(now);
        }
        self.arm_observe_timeouts(host);
    }

    /// An observer's timeout passed: it is answered the current state.
    pub(super) fn observe_ends<H: Host<T>>(&mut self, host: &mut H, client: T::Client) {
        if let Some(outcome) = self.outcome_now(host, client) {
            self.leave_observing(host, client);
            host.unblock(client, outcome);
        }
    }

    /// The observed key's expiry timer fired: on a master the key is looked at (an expired key
    /// goes, and its observers are answered nil); a replica waits for its master's word.
    pub(super) fn observed_deadline<H: Host<T>>(&mut self, host: &mut H, key: KeyId) {
        if self.observers.deadline(key.as_ref()).is_none() {
            return;
        }
        self.observers.set_deadline(key.as_ref(), None);
        if host.state() != State::Replica {
            self.schedule.push(host, Job::Observe(key));
        }
    }

    /// [`Job::Observe`]: answers the observers of `id` whose token is no longer the key's.
    pub(super) fn observe_job<H: Host<T>>(&mut self, host: &mut H, id: &KeyId) {
        if !self.observers.watched(id.as_ref()) {
            return;
        }
        if host.state() == State::Loading {
            self.schedule.defer(Job::Observe(id.clone()));
            return;
        }
        let seen = match host.redirect(&id.name) {
            Some(to) => Seen::Error(LockError::Redirect(to)),
            None => match host.open(id) {
                Err(OpenError::WrongType) => Seen::Error(LockError::WrongType),
                Err(OpenError::Unavailable) => Seen::Unavailable,
                Ok(key) => {
                    let seen = self.seen_in(host, &key);
                    self.arm_observed_deadline(host, &key);
                    seen
                }
            },
        };
        let (info, current) = match seen {
            Seen::Lock(info, current) => (info, current),
            Seen::Error(error) => return self.fail_observers(host, id, &error),
            Seen::Unavailable => return,
        };
        let budget = TURN_BUDGET.saturating_sub(self.work).max(1);
        let woken = self.observers.take_changed(id.as_ref(), current, budget);
        self.work += woken.len();
        for client in woken {
            let outcome = self.permitted_outcome(host, client, info.clone());
            if self.leave_observing(host, client).is_some() {
                self.stats.observe_wakeups += 1;
                host.unblock(client, outcome);
            }
        }
        if self.observers.any_changed(id.as_ref(), current) {
            self.schedule.next_turn(Job::Observe(id.clone()));
        }
    }

    /// Answers every observer of `id` `error`, a turn's budget at a time.
    fn fail_observers<H: Host<T>>(&mut self, host: &mut H, id: &KeyId, error: &LockError) {
        let budget = TURN_BUDGET.saturating_sub(self.work).max(1);
        let clients = self.observers.some_of(id.as_ref(), budget);
        self.work += clients.len();
        for client in clients {
            if self.leave_observing(host, client).is_some() {
                self.stats.observe_wakeups += 1;
                host.unblock(client, Outcome::Error(error.clone()));
            }
        }
        if self.observers.watched(id.as_ref()) {
            self.schedule.next_turn(Job::Observe(id.clone()));
        }
    }

    /// What observer `client` would be answered now (its timeout, `CLIENT UNBLOCK`); none if
    /// it does not observe.
    fn outcome_now<H: Host<T>>(&mut self, host: &mut H, client: T::Client) -> Option<Outcome> {
        let key = self.observers.key_of(client)?.clone();
        if let Some(to) = host.redirect(&key.name) {
            return Some(Outcome::Error(LockError::Redirect(to)));
        }
        Some(match host.open(&key) {
            Err(OpenError::WrongType) => Outcome::Error(LockError::WrongType),
            Err(OpenError::Unavailable) => Outcome::Info(None),
            Ok(key) => match self.seen_in(host, &key) {
                Seen::Lock(info, _) => self.permitted_outcome(host, client, info),
                Seen::Error(error) => Outcome::Error(error),
                Seen::Unavailable => Outcome::Info(None),
            },
        })
    }

    /// `info` for observer `client` (before it leaves), unless it shows a hold its caller may
    /// no longer read.
    fn permitted_outcome<H: Host<T>>(
        &self,
        host: &mut H,
        client: T::Client,
        info: Option<Box<Info>>,
    ) -> Outcome {
        if info.is_some()
            && self
                .observers
                .caller_of(client)
                .is_some_and(|c| !host.permitted(c))
        {
            return Outcome::Error(LockError::NoPermObserve);
        }
        Outcome::Info(info)
    }

    /// `LOCK.INFO`'s reply for `key` and its token, or why an observer cannot watch it.
    fn seen_in<H: Host<T>>(&self, host: &H, key: &H::Key) -> Seen {
        match self.info(host, key) {
            Reply::Info(info) if matches!(info.mode, Mode::Shared { .. }) => {
                Seen::Error(LockError::Shared)
            }
            Reply::Info(info) => {
                let token = info.token.unwrap_or(0);
                Seen::Lock(Some(Box::new(info)), token)
            }
            _ => Seen::Lock(None, 0),
        }
    }

    /// On a master, arms the observed key's expiry timer at its hold's expiry (+1 ms, as for
    /// waiters), or moves or stops it.
    fn arm_observed_deadline<H: Host<T>>(&mut self, host: &mut H, key: &H::Key) {
        let id = key.id();
        if !self.observers.watched(id) {
            return;
        }
        let wanted = match (host.state(), key.hold()) {
            (State::Replica, _) | (_, None) => None,
            (_, Some(_)) => key.expires_at().map(|at| at.saturating_add(1)),
        };
        let armed = self.observers.deadline(id);
        if armed.map(|(_, at)| at) == wanted {
            return;
        }
        if let Some((timer, _)) = armed {
            self.schedule.stop(host, timer);
        }
        let deadline = wanted.map(|at| {
            let timer = self
                .schedule
                .start(host, at, Due::ObserveDeadline(id.to_id()));
            (timer, at)
        });
        self.observers.set_deadline(key.id(), deadline);
    }
}
