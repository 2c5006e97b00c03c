//! Several keys held together: [`LockGroup`], taken all or nothing with `LOCK.MACQUIRE`
//! ([`Relock::acquire_all`](crate::Relock::acquire_all)) or waited for key by key in sorted
//! order ([`Relock::wait_all`](crate::Relock::wait_all)), renewed with `LOCK.MRENEW` and
//! released with `LOCK.MRELEASE`, under one owner.
//!
//! On a Redis Cluster the keys of one hash slot are one part (one `LOCK.MACQUIRE`); keys of
//! several slots are taken part by part in sorted order, and what was taken is released when a
//! later part fails. Over independent masters every master takes the whole group, and a quorum
//! of masters must have all of it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Value};
use relock_protocol::cmd::{MAcquire, MRelease, MRenew};
use tokio::time::Instant;

use crate::error::{Error, NodeFailure};
use crate::masters::{parts_of, BackgroundReleases, Masters};
use crate::mode::Mode;
use crate::round::{Released, Reply, Round, Until};
use crate::wire;

/// The most keys one group may have: the most one `LOCK.MACQUIRE` takes.
pub const MAX_KEYS: usize = 256;

/// Checks a group's keys for `mode` before any server is asked: 1 to [`MAX_KEYS`] keys, none
/// twice, held exclusively. Returns them sorted: the order every waiter takes them in.
pub(crate) fn check_keys<S: AsRef<str>>(keys: &[S], mode: Mode) -> Result<Vec<String>, Error> {
    if mode != Mode::Exclusive {
        return Err(Error::InvalidKeys(format!(
            "several keys are held exclusively ({mode} asked; LOCK.MACQUIRE has no shared mode)"
        )));
    }
    if keys.is_empty() {
        return Err(Error::InvalidKeys("no keys".into()));
    }
    if keys.len() > MAX_KEYS {
        return Err(Error::InvalidKeys(format!(
            "{} keys, at most {MAX_KEYS} in one group",
            keys.len()
        )));
    }
    let mut seen = HashSet::with_capacity(keys.len());
    for key in keys {
        if !seen.insert(key.as_ref()) {
            return Err(Error::InvalidKeys(format!(
                "{:?} is given twice",
                key.as_ref()
            )));
        }
    }
    let mut sorted: Vec<String> = keys.iter().map(|k| k.as_ref().to_string()).collect();
    sorted.sort();
    Ok(sorted)
}

/// How errors name a group: its one key, or its first key and how many more.
pub(crate) fn group_name(keys: &[String]) -> String {
    match keys {
        [] => String::new(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (+{} more)", rest.len()),
    }
}

/// A group command's keys, as relock-protocol's types take them.
fn key_list(keys: &[String]) -> Vec<&[u8]> {
    keys.iter().map(String::as_bytes).collect()
}

fn first_reply(replies: &[Value]) -> Result<&Value, NodeFailure> {
    replies
        .first()
        .ok_or_else(|| NodeFailure::Protocol("no reply".into()))
}

/// `LOCK.MACQUIRE`'s reply: every key's token, or nil.
fn parse_tokens(n: usize) -> impl Fn(Vec<Value>) -> Reply<Vec<u64>> + Clone + Send + 'static {
    move |replies| {
        let tokens = Option::<Vec<u64>>::from_redis_value(first_reply(&replies)?)?;
        match tokens {
            Some(t) if t.len() != n => Err(NodeFailure::Protocol(format!(
                "LOCK.MACQUIRE: {} tokens for {n} keys",
                t.len()
            ))),
            other => Ok(other),
        }
    }
}

/// `LOCK.MRENEW`'s reply, the keys the owner held: agreed only when it held all `n`.
fn parse_all_held(n: usize) -> impl Fn(Vec<Value>) -> Reply<u64> + Clone + Send + 'static {
    move |replies| {
        let held = u64::from_redis_value(first_reply(&replies)?)?;
        Ok((held == n as u64).then_some(held))
    }
}

/// `LOCK.MRELEASE`'s reply: released where the owner held any of the keys.
fn parse_released(replies: Vec<Value>) -> Reply<Released> {
    let held = u64::from_redis_value(first_reply(&replies)?)?;
    Ok((held > 0).then_some(Released { holds_left: 0 }))
}

/// `LOCK.MRELEASE numkeys key... owner FROM 1`: a group's holds are a fresh owner's grants
/// (count 1), so a release sent twice releases once.
fn mrelease(keys: &[String], owner: &str) -> redis::Cmd {
    wire::cmd(&MRelease {
        keys: key_list(keys),
        owner: owner.as_bytes(),
        from: Some(1),
    })
}

/// One round of `LOCK.MACQUIRE` of `part` under `owner`.
pub(crate) async fn take_part(
    masters: &Arc<Masters>,
    part: &[String],
    owner: &str,
    ttl: Duration,
) -> Round<Vec<u64>> {
    let mut pipe = redis::pipe();
    pipe.add_command(wire::cmd(&MAcquire {
        keys: key_list(part),
        owner: owner.as_bytes(),
        ttl_ms: ttl.as_millis() as u64,
    }));
    let route = part.first().cloned().unwrap_or_default();
    masters
        .group_round(
            &route,
            pipe,
            Until::Decided,
            parse_tokens(part.len()),
            Some(mrelease(part, owner)),
        )
        .await
}

/// One round of `LOCK.MRENEW` of `part`: agreed by the masters where `owner` still holds all
/// of it.
async fn renew_part(
    masters: &Arc<Masters>,
    part: &[String],
    owner: &str,
    ttl: Duration,
) -> Round<u64> {
    let mut pipe = redis::pipe();
    pipe.add_command(wire::cmd(&MRenew {
        keys: key_list(part),
        owner: owner.as_bytes(),
        ttl_ms: ttl.as_millis() as u64,
    }));
    let route = part.first().cloned().unwrap_or_default();
    masters
        .group_round(
            &route,
            pipe,
            Until::Decided,
            parse_all_held(part.len()),
            None,
        )
        .await
}

/// `LOCK.MRELEASE` of `part` on every master, waiting for every answer.
async fn release_part(masters: &Arc<Masters>, part: &[String], owner: &str) -> Round<Released> {
    let mut pipe = redis::pipe();
    pipe.add_command(mrelease(part, owner));
    let route = part.first().cloned().unwrap_or_default();
    masters
        .group_round(&route, pipe, Until::AllAnswered, parse_released, None)
        .await
}

/// Renews every part of `keys` (sorted) for `ttl`: the earliest validity of the parts, or why
/// not (a part gone from a quorum is [`Error::Lost`]).
pub(crate) async fn renew_keys(
    masters: &Arc<Masters>,
    keys: &[String],
    owner: &str,
    ttl: Duration,
) -> Result<Instant, Error> {
    let mut valid_until: Option<Instant> = None;
    for part in parts_of(masters.is_cluster(), keys) {
        let round = renew_part(masters, &part, owner, ttl).await;
        let Some(v) = round.valid_until(ttl) else {
            return Err(round.into_renew_error(&group_name(&part), ttl));
        };
        valid_until = Some(valid_until.map_or(v, |u| u.min(v)));
    }
    valid_until.ok_or_else(|| Error::InvalidKeys("no keys".into()))
}

/// Releases every part of `keys` under `owner`, all at once; the first part's error if any.
pub(crate) async fn release_keys(
    masters: &Arc<Masters>,
    keys: &[String],
    owner: &str,
) -> Result<(), Error> {
    let parts = parts_of(masters.is_cluster(), keys);
    let rounds = futures_util::future::join_all(
        parts
            .iter()
            .map(|part| async move { (part, release_part(masters, part, owner).await) }),
    )
    .await;
    let mut result = Ok(());
    for (part, round) in rounds {
        let r = round.into_release_result(&group_name(part));
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// Releases `keys` under `owner` in the background, now and once more a little later (a
/// master may still take a request whose round was decided without it), as
/// [`Masters::release_late`] does for one key.
pub(crate) fn release_keys_late(masters: &Arc<Masters>, keys: &[String], owner: &str) {
    let (m, keys, owner) = (masters.clone(), keys.to_vec(), owner.to_string());
    masters.background().spawn(async move {
        let _ = release_keys(&m, &keys, &owner).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = release_keys(&m, &keys, &owner).await;
    });
}

/// A group acquisition under way: if it is dropped before it is decided, what it took is
/// released in the background.
pub(crate) struct Abandoned {
    masters: Arc<Masters>,
    keys: Vec<String>,
    owner: String,
    armed: bool,
}

impl Abandoned {
    pub(crate) fn new(masters: &Arc<Masters>, keys: &[String], owner: &str) -> Abandoned {
        Abandoned {
            masters: masters.clone(),
            keys: keys.to_vec(),
            owner: owner.to_string(),
            armed: true,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(
                keys = self.keys.len(),
                "group acquisition abandoned; releasing"
            );
            release_keys_late(&self.masters, &self.keys, &self.owner);
        }
    }
}

/// Several keys held exclusively together under one owner: taken all or nothing
/// ([`Relock::acquire_all`](crate::Relock::acquire_all)) or waited for in sorted order
/// ([`Relock::wait_all`](crate::Relock::wait_all)).
///
/// Release it with [`LockGroup::release`]; dropped unreleased, it is released in the
/// background like a [`Lock`](crate::Lock). [`LockGroup::keep_alive`] renews it in the
/// background, as one: the group is lost when any of its keys is.
pub struct LockGroup {
    masters: Arc<Masters>,
    /// Sorted.
    keys: Vec<String>,
    owner: String,
    ttl: Duration,
    /// Per key (in `keys`' order), per master, the token it granted.
    tokens: Vec<Vec<Option<u64>>>,
    valid_until: Instant,
    released: bool,
}

impl std::fmt::Debug for LockGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGroup")
            .field("keys", &self.keys)
            .field("owner", &self.owner)
            .field("tokens", &self.tokens)
            .field("valid_until", &self.valid_until)
            .finish()
    }
}

impl LockGroup {
    /// One attempt at `keys` (checked, sorted) under `owner`: a `LOCK.MACQUIRE` round per part
    /// in order. On failure everything taken is released (at once where it was granted, and in
    /// the background once more), and the failed part's error is returned.
    pub(crate) async fn attempt(
        masters: &Arc<Masters>,
        keys: &[String],
        owner: &str,
        ttl: Duration,
    ) -> Result<LockGroup, Error> {
        let abandoned = Abandoned::new(masters, keys, owner);
        let mut tokens = vec![vec![None; masters.names().len()]; keys.len()];
        let mut valid_until: Option<Instant> = None;
        for part in parts_of(masters.is_cluster(), keys) {
            let round = take_part(masters, &part, owner, ttl).await;
            let Some(v) = round.valid_until(ttl) else {
                abandoned.disarm();
                let _ = release_keys(masters, keys, owner).await;
                release_keys_late(masters, keys, owner);
                return Err(round.into_acquire_error(&group_name(&part), ttl));
            };
            valid_until = Some(valid_until.map_or(v, |u| u.min(v)));
            for (m, answer) in round.answers().iter().enumerate() {
                let Some(granted) = answer else { continue };
                for (key, token) in part.iter().zip(granted) {
                    if let Ok(i) = keys.binary_search(key) {
                        tokens[i][m] = Some(*token);
                    }
                }
            }
        }
        abandoned.disarm();
        let valid_until = valid_until.ok_or_else(|| Error::InvalidKeys("no keys".into()))?;
        tracing::debug!(keys = keys.len(), owner, ?valid_until, "group acquired");
        Ok(LockGroup::held(
            masters,
            keys,
            owner,
            ttl,
            tokens,
            valid_until,
        ))
    }

    pub(crate) fn held(
        masters: &Arc<Masters>,
        keys: &[String],
        owner: &str,
        ttl: Duration,
        tokens: Vec<Vec<Option<u64>>>,
        valid_until: Instant,
    ) -> LockGroup {
        LockGroup {
            masters: masters.clone(),
            keys: keys.to_vec(),
            owner: owner.to_string(),
            ttl,
            tokens,
            valid_until,
            released: false,
        }
    }

    /// The masters it is held on.
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }

    pub(crate) fn background(&self) -> BackgroundReleases {
        self.masters.background().clone()
    }

    /// The keys, sorted.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The owner id every key is held under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The ttl last asked for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fencing token of `key` on the first master (in the client's order) that granted it.
    pub fn token_of(&self, key: &str) -> Option<u64> {
        let i = self.keys.binary_search_by(|k| k.as_str().cmp(key)).ok()?;
        self.tokens.get(i)?.iter().flatten().next().copied()
    }

    /// Per key (sorted), per master that granted it, `(master, token)`.
    pub fn tokens(&self) -> Vec<(&str, Vec<(&str, u64)>)> {
        self.keys
            .iter()
            .zip(&self.tokens)
            .map(|(key, per_master)| {
                let granted = self
                    .masters
                    .names()
                    .iter()
                    .zip(per_master)
                    .filter_map(|(name, t)| t.map(|t| (name.as_str(), t)))
                    .collect();
                (key.as_str(), granted)
            })
            .collect()
    }

    /// The group's fencing token, the largest of its keys' ([`LockGroup::token_of`]). Keys
    /// taken by one `LOCK.MACQUIRE` share one token, greater than every token the server
    /// issued before; keys waited for one by one each have their own, and the largest is
    /// still greater than every token that server issued before the group was complete (on
    /// one server; tokens of different masters or cluster nodes are unrelated numbers).
    pub fn token(&self) -> Option<u64> {
        self.keys.iter().filter_map(|k| self.token_of(k)).max()
    }

    /// Until when every key is ours for sure (the earliest of its parts' validities).
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether [`LockGroup::valid_until`] is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// Renews every key for `ttl` with `LOCK.MRENEW` (per part). Succeeds when a quorum of
    /// masters still holds every key of every part; fails with [`Error::Lost`] when the
    /// validity is over or a part is gone from too many masters.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl = crate::limits::check_ttl(ttl)?;
        if Instant::now() >= self.valid_until {
            return Err(Error::Lost {
                key: group_name(&self.keys),
                cause: None,
            });
        }
        self.valid_until = renew_keys(&self.masters, &self.keys, &self.owner, ttl).await?;
        self.ttl = ttl;
        Ok(())
    }

    /// Releases every key with `LOCK.MRELEASE`, all parts at once.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        release_keys(&self.masters, &self.keys, &self.owner).await
    }

    pub(crate) async fn release_quietly(mut self) {
        self.released = true;
        let _ = release_keys(&self.masters, &self.keys, &self.owner).await;
    }

    /// Asks the masters' journals why the group was lost (the first key with an answer).
    pub(crate) async fn explain_loss(&self, unrenewed: Duration, seen: &str) -> crate::Loss {
        let per_master = self.masters.names().len();
        // A key's tokens are per master; the journal of each key is asked in turn.
        let tokens: Vec<Option<u64>> = (0..per_master)
            .map(|m| {
                let mut t = self
                    .tokens
                    .iter()
                    .filter_map(|k| k.get(m).copied().flatten());
                let first = t.next();
                first.filter(|f| t.all(|o| o == *f))
            })
            .collect();
        crate::loss::explain(
            &self.masters,
            &self.keys,
            &self.owner,
            &tokens,
            unrenewed,
            seen,
        )
        .await
    }
}

impl Drop for LockGroup {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        release_keys_late(&self.masters, &self.keys, &self.owner);
    }
}

/// A random pause around `base`: `[base / 2, base * 3 / 2]`.
fn jitter(base: Duration) -> Duration {
    let spread = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
    base / 2 + Duration::from_micros(fastrand::u64(0..=spread))
}

/// How one try at waiting for a group ended, if not with the group.
enum Waited {
    /// A key already held was lost while waiting for the next one: start again.
    Again,
    /// Stop: the wait ran out, or an error retrying cannot fix.
    Fail(Error),
}

/// [`Relock::wait_all`](crate::Relock::wait_all) for `keys` (checked, sorted).
pub(crate) async fn wait_all(
    masters: &Arc<Masters>,
    keys: &[String],
    ttl: Duration,
    timeout: Option<Duration>,
    make_owner: impl Fn() -> String,
) -> Result<LockGroup, Error> {
    // All free now: one LOCK.MACQUIRE per part, one token.
    let owner = make_owner();
    match LockGroup::attempt(masters, keys, &owner, ttl).await {
        Ok(group) => return Ok(group),
        Err(e) if e.is_permanent() => return Err(e),
        Err(_) => {}
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        // A new owner for each try: the late releases of an earlier one never hit it.
        let owner = make_owner();
        match wait_in_order(masters, keys, &owner, ttl, deadline, timeout).await {
            Ok(group) => return Ok(group),
            Err(Waited::Fail(e)) => return Err(e),
            Err(Waited::Again) => {
                let mut pause = jitter(masters.options().retry_delay);
                if let Some(d) = deadline {
                    pause = pause.min(d.saturating_duration_since(Instant::now()));
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Waits for `keys` one by one in their (sorted) order under `owner`, renewing those held
/// meanwhile, and measures the group's validity with one renewal once it has all of them.
/// Every waiter takes the keys in the same order, so none waits for a key while holding one
/// that the holder of that key waits for: no deadlock; and each key's queue is FIFO: no
/// starvation.
async fn wait_in_order(
    masters: &Arc<Masters>,
    keys: &[String],
    owner: &str,
    ttl: Duration,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
) -> Result<LockGroup, Waited> {
    let abandoned = Abandoned::new(masters, keys, owner);
    let mut order = InOrder {
        masters,
        keys,
        owner,
        ttl,
        held: 0,
        next_renewal: Instant::now() + renewal_period(ttl),
    };
    let mut tokens = vec![vec![None; masters.names().len()]; keys.len()];
    let name = group_name(keys);
    while order.held < keys.len() {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if remaining == Some(Duration::ZERO) {
            let timeout = timeout.unwrap_or_default();
            return Err(order
                .give_up(Error::WaitTimeout { key: name, timeout })
                .await);
        }
        let round = order.wait_for_next(remaining).await?;
        if round.won() {
            for (slot, answer) in tokens[order.held].iter_mut().zip(round.answers()) {
                *slot = *answer;
            }
            order.held += 1;
            continue;
        }
        // Not this time: give back what this round got of the key (a master that grants late
        // is asked again by the next round, which is then answered at once, or released at
        // the end), so that contenders that each hold a minority of it do not wait on each
        // other.
        let granted = round.agreed_by();
        if granted.contains(&true) {
            masters
                .release_round(&keys[order.held], owner, Some(&granted))
                .await;
        }
        let deadline_passed = deadline.is_some_and(|d| Instant::now() >= d);
        if let Err(e) = round.after_failed_wait(&name, deadline_passed, timeout.unwrap_or_default())
        {
            return Err(order.give_up(e).await);
        }
        let mut pause = jitter(masters.options().retry_delay);
        if let Some(d) = deadline {
            pause = pause.min(d.saturating_duration_since(Instant::now()));
        }
        order.pause_until(Instant::now() + pause).await?;
    }
    // Every key is ours: the grants' ttls count from moments we cannot see; a renewal of the
    // whole group gives a start we did measure.
    match renew_keys(masters, keys, owner, ttl).await {
        Ok(valid_until) => {
            abandoned.disarm();
            Ok(LockGroup::held(
                masters,
                keys,
                owner,
                ttl,
                tokens,
                valid_until,
            ))
        }
        Err(e) if e.is_permanent() => Err(order.give_up(e).await),
        Err(_) => {
            let _ = release_keys(masters, keys, owner).await;
            Err(Waited::Again)
        }
    }
}

/// How often the keys held while waiting for the next are renewed: every ttl / 3.
fn renewal_period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// One try of [`wait_in_order`]: the first `held` of `keys` are held under `owner`.
struct InOrder<'a> {
    masters: &'a Arc<Masters>,
    keys: &'a [String],
    owner: &'a str,
    ttl: Duration,
    held: usize,
    /// When the keys held are renewed next.
    next_renewal: Instant,
}

impl<'a> InOrder<'a> {
    /// Waits (at most `remaining`) for the next key, renewing the keys held meanwhile.
    async fn wait_for_next(&mut self, remaining: Option<Duration>) -> Result<Round<u64>, Waited> {
        let (masters, keys): (&'a Arc<Masters>, &'a [String]) = (self.masters, self.keys);
        let wait = masters.wait_round(
            &keys[self.held],
            self.owner,
            self.ttl,
            remaining,
            relock_protocol::Ask::Exclusive,
        );
        tokio::pin!(wait);
        loop {
            tokio::select! {
                round = &mut wait => return Ok(round),
                _ = tokio::time::sleep_until(self.next_renewal), if self.held > 0 => {
                    self.renew_held().await?;
                }
            }
        }
    }

    /// Sleeps until `until`, renewing the keys held meanwhile.
    async fn pause_until(&mut self, until: Instant) -> Result<(), Waited> {
        while Instant::now() < until {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = tokio::time::sleep_until(self.next_renewal), if self.held > 0 => {
                    self.renew_held().await?;
                }
            }
        }
        Ok(())
    }

    /// Renews the keys held: `Err` when they were lost (released, to start again) or
    /// refused for good (released, to give up).
    async fn renew_held(&mut self) -> Result<(), Waited> {
        let every = renewal_period(self.ttl);
        match renew_keys(self.masters, &self.keys[..self.held], self.owner, self.ttl).await {
            Ok(_) => self.next_renewal = Instant::now() + every,
            Err(Error::Lost { .. }) => {
                tracing::debug!(keys = self.held, "held keys lost while waiting; again");
                let _ = release_keys(self.masters, self.keys, self.owner).await;
                return Err(Waited::Again);
            }
            Err(e) if e.is_permanent() => return Err(self.give_up(e).await),
            Err(_) => self.next_renewal = Instant::now() + every / 4,
        }
        Ok(())
    }

    /// Releases every key (those held, and any a late grant gave) and fails with `e`.
    async fn give_up(&self, e: Error) -> Waited {
        let _ = release_keys(self.masters, self.keys, self.owner).await;
        Waited::Fail(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_sorted() {
        assert_eq!(
            check_keys(&["b", "a", "c"], Mode::Exclusive).unwrap(),
            ["a", "b", "c"]
        );
        for (keys, why) in [
            (vec![], "no keys"),
            (vec!["a", "b", "a"], "\"a\" is given twice"),
        ] {
            let err = check_keys(&keys, Mode::Exclusive).expect_err("refused");
            assert!(err.to_string().contains(why), "{err}");
            assert!(err.is_permanent());
        }
        let many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        assert!(check_keys(&many, Mode::Exclusive).is_err());
        assert_eq!(
            check_keys(&many[..MAX_KEYS], Mode::Exclusive)
                .unwrap()
                .len(),
            MAX_KEYS
        );
        assert!(check_keys(&["a"], Mode::shared()).is_err());
    }

    #[test]
    fn cluster_parts_follow_hash_slots() {
        let keys: Vec<String> = ["{a}1", "{a}2", "{b}1", "{b}2"]
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(parts_of(false, &keys), vec![keys.clone()]);
        assert_eq!(
            parts_of(true, &keys),
            vec![vec!["{a}1", "{a}2"], vec!["{b}1", "{b}2"]]
        );
        assert_eq!(group_name(&keys), "{a}1 (+3 more)");
        assert_eq!(group_name(&keys[..1]), "{a}1");
    }

    #[test]
    fn group_replies() {
        let int = Value::Int;
        let tokens = parse_tokens(2);
        assert_eq!(
            tokens(vec![Value::Array(vec![int(5), int(5)])]).unwrap(),
            Some(vec![5, 5])
        );
        assert_eq!(tokens(vec![Value::Nil]).unwrap(), None);
        assert!(tokens(vec![Value::Array(vec![int(5)])]).is_err());
        assert!(tokens(vec![]).is_err());
        let all = parse_all_held(3);
        assert_eq!(all(vec![int(3)]).unwrap(), Some(3));
        assert_eq!(
            all(vec![int(2)]).unwrap(),
            None,
            "part of the group is gone"
        );
        assert_eq!(
            parse_released(vec![int(1)]).unwrap(),
            Some(Released { holds_left: 0 })
        );
        assert_eq!(parse_released(vec![int(0)]).unwrap(), None);
    }
}
