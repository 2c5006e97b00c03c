//! The client: a set of independent masters, the Redlock rounds, and the ways to acquire.

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::ConnectionAddr;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::error::{Error, NodeError, NodeErrors, NodeFailure};
use crate::info::{parse_info, LockInfo};
use crate::limits::{check_options, check_ttl, clamp_wait, wait_ms};
use crate::lock::Lock;
use crate::node::{display_addr, Node};
use crate::options::Options;
use crate::validity::validity;

/// What one master answered to an operator's query.
#[derive(Debug)]
pub struct NodeReport<T> {
    /// The master, as `host:port`.
    pub node: String,
    /// Its answer, or why there was none.
    pub result: Result<T, NodeFailure>,
}

pub(crate) struct Inner {
    pub(crate) nodes: Vec<Node>,
    pub(crate) options: Options,
    /// Releases running in the background (dropped locks and guards, abandoned or failed
    /// acquisitions), so that [`Relock::settle`] can wait for them.
    pub(crate) background: TaskTracker,
}

/// A client of one relock server (plain locking), of N independent masters (Redlock), or of
/// one Redis Cluster ([`Relock::cluster`]).
///
/// Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Relock {
    pub(crate) inner: Arc<Inner>,
}

/// The outcome of one round over the masters.
pub(crate) struct Round {
    /// Per master, the token it granted (if it did, as far as we saw).
    pub(crate) tokens: Vec<Option<u64>>,
    /// The masters that did not grant, and why.
    pub(crate) failures: Vec<NodeError>,
    /// When the round started (before the first request was sent).
    pub(crate) started: Instant,
    /// How long it took until it was decided.
    pub(crate) elapsed: Duration,
}

impl Round {
    pub(crate) fn granted(&self) -> usize {
        self.tokens.iter().filter(|t| t.is_some()).count()
    }

    /// How many masters positively said "not yours".
    pub(crate) fn refused(&self) -> usize {
        self.failures
            .iter()
            .filter(|e| matches!(e.failure, NodeFailure::NotGranted))
            .count()
    }

    /// Per master, whether it may hold a grant of this round: all but those that failed
    /// permanently (they never granted, and releasing there would fail the same way).
    pub(crate) fn may_hold(&self, nodes: &[Node]) -> Vec<bool> {
        nodes
            .iter()
            .map(|n| {
                !self
                    .failures
                    .iter()
                    .any(|f| f.node == n.name && f.failure.is_permanent())
            })
            .collect()
    }

    /// How many masters failed in a way retrying cannot fix ([`NodeFailure::is_permanent`]).
    pub(crate) fn permanent(&self) -> usize {
        self.failures
            .iter()
            .filter(|e| e.failure.is_permanent())
            .count()
    }
}

impl Relock {
    /// A client of the masters at `urls` (`redis://host:port[/db]`) with default [`Options`].
    /// One URL gives plain single-server locking; N give Redlock with a quorum of N / 2 + 1.
    /// No connection is made until the first command.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> Result<Relock, Error> {
        Relock::with_options(urls, Options::default())
    }

    /// Like [`Relock::new`], with the given options.
    ///
    /// Fails with [`Error::DuplicateServer`] when two URLs name the same server (their host
    /// names are resolved here, once, to compare addresses; `127.0.0.1` and `localhost` are one
    /// server, and so are two databases of it), and with [`Error::InvalidOption`] when an
    /// option is out of range (see [`crate::limits::check_options`]).
    pub fn with_options<S: AsRef<str>>(urls: &[S], options: Options) -> Result<Relock, Error> {
        if urls.is_empty() {
            return Err(Error::NoServers);
        }
        check_options(&options)?;
        let nodes = urls
            .iter()
            .map(|u| Node::open(u.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.len() > 1 {
            check_distinct(urls, &nodes)?;
        }
        Ok(Relock {
            inner: Arc::new(Inner {
                nodes,
                options,
                background: TaskTracker::new(),
            }),
        })
    }

    /// A client of one Redis Cluster, known by some of its nodes (`seeds`, `redis://host:port`;
    /// one is enough, more help when some are down), with the given options.
    ///
    /// Each lock lives on the master of its key's hash slot, so this is single-lock locking
    /// (quorum 1), not Redlock; use hash tags (`{order:42}:row`) to keep related locks on one
    /// master. Combine with [`Options::replica_acks`] so that a lock survives a failover.
    /// No connection is made until the first command.
    ///
    /// The client routes by a slot map of its own (`CLUSTER SLOTS`, asked of every known node
    /// at once; the first answer wins) over one shared connection per node, and follows `MOVED`
    /// and `ASK`. A master that does not answer within the request's timeout, or answers that it
    /// is a replica now, makes it read the map again and, if the key has a new master, send the
    /// request there once more: renewals and releases follow an automatic failover instead of
    /// going to a stopped master. `LOCK.WAIT` blocks on a connection of its own to the key's
    /// master, re-resolved and retried on `MOVED` or a failover, and moved to the new master
    /// when the one it waits on stops answering pings while another master serves the key.
    pub fn cluster<S: AsRef<str>>(seeds: &[S], options: Options) -> Result<Relock, Error> {
        if seeds.is_empty() {
            return Err(Error::NoServers);
        }
        check_options(&options)?;
        let seeds: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        let node = Node::open_cluster(&seeds)?;
        Ok(Relock {
            inner: Arc::new(Inner {
                nodes: vec![node],
                options,
                background: TaskTracker::new(),
            }),
        })
    }

    /// Whether this is a cluster client ([`Relock::cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.inner.nodes.iter().any(Node::is_cluster)
    }

    /// The masters' names (`host:port`), in the order they were given. A cluster client has one
    /// entry, `cluster[seed,...]`.
    pub fn nodes(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// How many masters must grant a lock: N / 2 + 1.
    pub fn quorum(&self) -> usize {
        self.inner.nodes.len() / 2 + 1
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// A fresh owner id (a UUID v4), the only proof of ownership of a lock.
    pub fn new_owner() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    /// One Redlock round with `LOCK.ACQUIRE` under a fresh owner, no retry.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        self.attempt(key, &Relock::new_owner(), ttl, false).await
    }

    /// Acquires `key` for `ttl` under a fresh owner, retrying up to
    /// [`Options::retry_count`] times with a random pause around [`Options::retry_delay`].
    /// Fails with the last round's error (for instance [`Error::NoQuorum`], naming the masters
    /// that did not grant), or at once with an error retrying cannot fix
    /// ([`Error::is_permanent`]: an invalid ttl, the module missing, a refused login...).
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        let mut tries_left = self.inner.options.retry_count;
        loop {
            // A new owner per round: the background release of a failed round can then never
            // hit a later round's grants.
            match self.attempt(key, &Relock::new_owner(), ttl, false).await {
                Ok(lock) => return Ok(lock),
                Err(e) if e.is_permanent() => return Err(e),
                Err(e) if tries_left == 0 => return Err(e),
                Err(e) => {
                    tracing::debug!(key, error = %e, "acquire round failed, retrying");
                    tries_left -= 1;
                    tokio::time::sleep(self.jitter()).await;
                }
            }
        }
    }

    /// Reentrant acquisition with `LOCK.REENTER`: the first call for `owner` takes the lock, each
    /// further call by the same owner adds one to its hold count (and resets the ttl); the lock is
    /// gone after as many releases. One round, no retry. See also [`Lock::reenter`].
    pub async fn reenter(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        self.attempt(key, owner, ttl, true).await
    }

    /// Blocking acquisition with `LOCK.WAIT`: waits, without polling, until the lock is granted
    /// or `timeout` passes (`None`: no limit; `Some(ZERO)`: one non-blocking round; a limit
    /// above 10^12 ms, the most `LOCK.WAIT` accepts, counts as 10^12 ms).
    ///
    /// With one master this is a plain `LOCK.WAIT` in the master's FIFO queue. With several,
    /// it waits on every master at once, each on a connection of its own; once one master has
    /// granted, it waits at most [`Options::max_partial_hold`] for a quorum, and otherwise
    /// releases what it holds and starts again after a random pause, so that contenders holding
    /// a minority each can never wait on one another forever. The validity of the result is
    /// measured from a `LOCK.RENEW` round made right after the grant.
    ///
    /// Fails at once, whatever the limit, with an error retrying cannot fix
    /// ([`Error::is_permanent`]). Dropping the future while it waits leaves nothing behind:
    /// grants that land anyway are released in the background (see [`Relock::settle`]).
    pub async fn acquire_wait(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Lock, Error> {
        let ttl = check_ttl(ttl)?;
        let timeout = timeout.map(clamp_wait);
        if timeout == Some(Duration::ZERO) {
            return self.try_acquire(key, ttl).await;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut failed_rounds = 0u64;
        loop {
            // A new owner per round, so that the late release below can only ever hit this
            // round's grants, never a later round's.
            let owner = Relock::new_owner();
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining == Some(Duration::ZERO) {
                return Err(Error::WaitTimeout {
                    key: key.to_string(),
                    timeout: timeout.unwrap_or_default(),
                });
            }
            // Released in the background if this future is dropped before the round is decided.
            let abandoned = Abandoned::new(self, key, &owner);
            let round = self.wait_round(key, &owner, ttl, remaining).await;
            if round.granted() >= self.quorum() {
                abandoned.disarm();
                let mut lock = Lock::new(self.clone(), key, &owner, ttl, round.tokens, false);
                // The grant's ttl counts from a moment we cannot see; a renew round gives a
                // start time we did measure.
                match lock.renew(ttl, false).await {
                    Ok(()) => {
                        tracing::debug!(key, owner, valid_until = ?lock.valid_until, "lock acquired");
                        return Ok(lock);
                    }
                    Err(e) => {
                        tracing::debug!(key, error = %e, "renew after wait failed, retrying");
                        lock.release_quietly().await;
                    }
                }
            } else {
                abandoned.disarm();
                self.release_failed(key, &owner, &round).await;
                let round = self.permanent_failure(key, round)?;
                let errors_only = round.failures.iter().all(|f| {
                    !matches!(f.failure, NodeFailure::NotGranted | NodeFailure::Timeout(_))
                });
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    if errors_only && !round.failures.is_empty() {
                        return Err(self.no_quorum(key, round));
                    }
                    return Err(Error::WaitTimeout {
                        key: key.to_string(),
                        timeout: timeout.unwrap_or_default(),
                    });
                }
                if round.refused() < round.failures.len() {
                    // Say it once, then now and then: an unlimited wait may go on for long.
                    failed_rounds += 1;
                    if failed_rounds % 50 == 1 {
                        tracing::warn!(key, failures = %NodeErrors(round.failures), "waiting: some masters failed");
                    }
                }
            }
            let mut pause = self.jitter();
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(Instant::now()));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Waits until every release this client started in the background has finished: those
    /// of dropped [`Lock`]s and [`LockGuard`](crate::LockGuard)s, of failed acquisition rounds,
    /// and of acquisitions abandoned by dropping their future. Each is bounded by the node
    /// timeout. Call it before a process exits right after such a drop or failure, so that
    /// the releases are not cut off (the locks would stay held until their ttl).
    pub async fn settle(&self) {
        let background = &self.inner.background;
        background.close();
        background.wait().await;
        background.reopen();
    }

    /// Runs `release` in the background (on the current runtime, if any), counted by
    /// [`Relock::settle`].
    pub(crate) fn in_background<F>(&self, release: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.inner.background.track_future(release));
        }
    }

    /// Undoes a failed round of a fresh `owner`: the masters that granted are released before
    /// this returns (they just answered, so they answer at once), so that the caller's next
    /// round finds them free; every other master that may hold a grant (one still to answer,
    /// one that timed out) is released in the background, so that a stopped master does not
    /// hold the caller up a second time.
    async fn release_failed(&self, key: &str, owner: &str, round: &Round) {
        // The background part first: it still runs if this future is dropped while waiting.
        self.release_late(key, owner, Some(round.may_hold(&self.inner.nodes)));
        let granted: Vec<bool> = round.tokens.iter().map(Option::is_some).collect();
        if granted.contains(&true) {
            self.release_targets(key, owner, Some(&granted)).await;
        }
    }

    /// Releases `owner`'s grants of `key` now, and once more a little later, in the
    /// background: a master may still grant a request whose connection we closed (or whose
    /// round we stopped waiting for) before it notices.
    ///
    /// `targets` limits it to some masters (all when `None`).
    pub(crate) fn release_late(&self, key: &str, owner: &str, targets: Option<Vec<bool>>) {
        let (relock, key, owner) = (self.clone(), key.to_string(), owner.to_string());
        self.in_background(async move {
            relock
                .release_targets(&key, &owner, targets.as_deref())
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            relock
                .release_targets(&key, &owner, targets.as_deref())
                .await;
        });
    }

    /// `Err(`[`Error::Permanent`]`)` when the round's permanent failures leave too few masters
    /// for a quorum; otherwise the round, for the caller to judge.
    pub(crate) fn permanent_failure(&self, key: &str, round: Round) -> Result<Round, Error> {
        let nodes = self.inner.nodes.len();
        if nodes - round.permanent() >= self.quorum() {
            return Ok(round);
        }
        let failures = round
            .failures
            .into_iter()
            .filter(|f| f.failure.is_permanent())
            .collect();
        Err(Error::Permanent {
            key: key.to_string(),
            failures: NodeErrors(failures),
        })
    }

    /// `LOCK.INFO key` on every master, concurrently.
    pub async fn info(&self, key: &str) -> Vec<NodeReport<Option<LockInfo>>> {
        let mut cmd = redis::cmd("LOCK.INFO");
        cmd.arg(key);
        let timeout = self.inner.options.node_timeout;
        let cmd = &cmd;
        let replies = futures_util::future::join_all(self.inner.nodes.iter().map(|n| async move {
            let reply: Result<redis::Value, _> = n.query(key, cmd, timeout).await;
            NodeReport {
                node: n.name_for(key, timeout).await,
                result: reply.and_then(parse_info),
            }
        }));
        replies.await
    }

    /// `LOCK.FORCERELEASE key` on every master, concurrently: breaks the lock whoever holds it.
    /// Each report says whether that master had a lock to remove. For operators only.
    pub async fn force_release(&self, key: &str) -> Vec<NodeReport<bool>> {
        let mut cmd = redis::cmd("LOCK.FORCERELEASE");
        cmd.arg(key);
        let timeout = self.inner.options.node_timeout;
        let cmd = &cmd;
        let replies = futures_util::future::join_all(self.inner.nodes.iter().map(|n| async move {
            let reply: Result<i64, _> = n.query(key, cmd, timeout).await;
            NodeReport {
                node: n.name_for(key, timeout).await,
                result: reply.map(|r| r == 1),
            }
        }));
        replies.await
    }

    /// A random pause in `[retry_delay / 2, retry_delay * 3 / 2]`.
    pub(crate) fn jitter(&self) -> Duration {
        let base = self.inner.options.retry_delay;
        let half = base / 2;
        let spread = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }

    pub(crate) fn no_quorum(&self, key: &str, round: Round) -> Error {
        Error::NoQuorum {
            key: key.to_string(),
            granted: round.granted(),
            nodes: self.inner.nodes.len(),
            quorum: self.quorum(),
            failures: NodeErrors(round.failures),
        }
    }

    /// One non-blocking Redlock round with `LOCK.ACQUIRE` (or `LOCK.REENTER`); on failure the
    /// masters are released at once (in the background for `LOCK.ACQUIRE`, whose owner is
    /// never used again, so that a stopped master does not hold up the caller twice).
    async fn attempt(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        reentrant: bool,
    ) -> Result<Lock, Error> {
        let ttl = check_ttl(ttl)?;
        let ttl_ms = ttl.as_millis() as u64;
        let write = if reentrant {
            Write::Reenter
        } else {
            Write::Acquire
        };
        // A reentrant hold cannot be undone blindly: only the counts it added are released.
        let abandoned = (!reentrant).then(|| Abandoned::new(self, key, owner));
        let round = self.write_round(key, owner, ttl_ms, write).await;
        if let Some(abandoned) = abandoned {
            abandoned.disarm();
        }
        let targets: Option<Vec<bool>> =
            reentrant.then(|| round.tokens.iter().map(Option::is_some).collect());
        let left = if round.granted() < self.quorum() {
            None
        } else {
            validity(ttl, round.elapsed)
        };
        let Some(left) = left else {
            if reentrant {
                self.release_targets(key, owner, targets.as_deref()).await;
            } else {
                self.release_failed(key, owner, &round).await;
            }
            if round.granted() < self.quorum() {
                let round = self.permanent_failure(key, round)?;
                return Err(self.no_quorum(key, round));
            }
            return Err(Error::ValidityExhausted {
                key: key.to_string(),
                elapsed: round.elapsed,
                ttl,
            });
        };
        let mut lock = Lock::new(self.clone(), key, owner, ttl, round.tokens, reentrant);
        lock.valid_until = round.started + left;
        tracing::debug!(key, owner, validity = ?left, "lock acquired");
        Ok(lock)
    }

    /// One round of `LOCK.WAIT` on every master at once, each on its own connection.
    async fn wait_round(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        remaining: Option<Duration>,
    ) -> Round {
        let n = self.inner.nodes.len();
        let quorum = self.quorum();
        let node_timeout = self.inner.options.node_timeout;
        let mut cmd = redis::cmd("LOCK.WAIT");
        cmd.arg(key)
            .arg(owner)
            .arg(ttl.as_millis() as u64)
            .arg(wait_ms(remaining));
        let cmd = &cmd;
        let started = Instant::now();
        let mut pending: FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| async move {
                let call = node.blocking_query::<Option<u64>>(key, cmd, node_timeout);
                // A master that stops answering (paused, partitioned) must not outlast the wait.
                let result = match remaining {
                    None => call.await,
                    Some(r) => match tokio::time::timeout(r + node_timeout, call).await {
                        Ok(r) => r,
                        Err(_) => Err(NodeFailure::Timeout(r + node_timeout)),
                    },
                };
                (i, result)
            })
            .collect();
        let mut tokens = vec![None; n];
        let mut failures = Vec::new();
        let partial_limit = self.inner.options.max_partial_hold.min(ttl / 4);
        let mut partial_deadline: Option<Instant> = None;
        loop {
            let granted = tokens.iter().filter(|t| t.is_some()).count();
            if granted >= quorum || failures.len() > n - quorum || pending.is_empty() {
                break;
            }
            let next = match partial_deadline {
                None => pending.next().await,
                Some(d) => tokio::select! {
                    next = pending.next() => next,
                    _ = tokio::time::sleep_until(d) => {
                        tracing::debug!(key, granted, "no quorum within the partial-hold limit");
                        break;
                    }
                },
            };
            let Some((i, result)) = next else { break };
            let node = &self.inner.nodes[i];
            match result {
                Ok(Some(token)) => {
                    tokens[i] = Some(token);
                    partial_deadline.get_or_insert_with(|| Instant::now() + partial_limit);
                }
                Ok(None) => failures.push(node.error(NodeFailure::NotGranted)),
                Err(f) => failures.push(node.error(f)),
            }
        }
        Round {
            tokens,
            failures,
            started,
            elapsed: started.elapsed(),
        }
    }

    /// Sends one request per master concurrently and collects the answers. With `early`, it
    /// returns as soon as a quorum is won or lost. Each request runs in a task of its own, so
    /// one still in flight when the round is decided goes on to completion (bounded by the node
    /// timeout) instead of being cut off half-way: a late grant or renewal still lands, and the
    /// release and renew paths address every master, so a late grant is never orphaned.
    pub(crate) async fn round<F, Fut>(&self, early: bool, call: F) -> Round
    where
        F: Fn(Arc<Inner>, usize) -> Fut,
        Fut: Future<Output = Result<Option<u64>, NodeFailure>> + Send + 'static,
    {
        let n = self.inner.nodes.len();
        let quorum = self.quorum();
        let started = Instant::now();
        let mut pending: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let task = tokio::spawn(call(self.inner.clone(), i));
                async move {
                    let result = task.await.unwrap_or_else(|e| {
                        Err(NodeFailure::Protocol(format!("request task failed: {e}")))
                    });
                    (i, result)
                }
            })
            .collect();
        let mut tokens = vec![None; n];
        let mut failures = Vec::new();
        while let Some((i, result)) = pending.next().await {
            let node = &self.inner.nodes[i];
            match result {
                Ok(Some(token)) => tokens[i] = Some(token),
                Ok(None) => failures.push(node.error(NodeFailure::NotGranted)),
                Err(f) => failures.push(node.error(f)),
            }
            let granted = tokens.iter().filter(|t| t.is_some()).count();
            if early && (granted >= quorum || failures.len() > n - quorum) {
                break;
            }
        }
        Round {
            tokens,
            failures,
            started,
            elapsed: started.elapsed(),
        }
    }

    /// A round of one write whose reply is a token or nil, followed on each master by `WAIT`
    /// when [`Options::replica_acks`] asks for acknowledgements. A master whose replicas did not
    /// acknowledge counts as failed, and an acquisition there is undone at once (so that a
    /// reentrant round's release never needs to know about it).
    pub(crate) async fn write_round(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        write: Write,
    ) -> Round {
        let options = &self.inner.options;
        let (acks, timeout, node_timeout) = (
            options.acks(),
            options.write_timeout(),
            options.node_timeout,
        );
        let mut pipe = redis::pipe();
        match write {
            Write::Acquire => {
                pipe.cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl_ms);
            }
            Write::Renew => {
                pipe.cmd("LOCK.RENEW").arg(key).arg(owner).arg(ttl_ms);
            }
            Write::Reenter => {
                // The token must be the one of the hold we counted into: read it in the same
                // transaction.
                pipe.cmd("MULTI")
                    .cmd("LOCK.REENTER")
                    .arg(key)
                    .arg(owner)
                    .arg(ttl_ms)
                    .cmd("LOCK.INFO")
                    .arg(key)
                    .cmd("EXEC");
            }
        }
        let mut undo = redis::cmd("LOCK.RELEASE");
        undo.arg(key).arg(owner);
        let key = key.to_string();
        // A reentrant round waits for every master, so that the release of a failed round
        // only undoes the counts it really added.
        let early = !matches!(write, Write::Reenter);
        self.round(early, move |inner, i| {
            let (pipe, undo, key) = (pipe.clone(), undo.clone(), key.clone());
            async move {
                let node = &inner.nodes[i];
                let (replies, acked) = node.query_acked(&key, &pipe, acks, timeout).await?;
                let token = write.token(replies)?;
                match (token, acks) {
                    // A renewal extends a hold its replicas acknowledged when it was granted.
                    // On a master left with fewer replicas than asked (the promoted replica
                    // after a failover, while the old master is down), it counts once every
                    // replica still there acknowledged it: that master holds the only copy of
                    // the lock anyway, and refusing would give an acknowledged lock up for
                    // want of a replica that no longer exists. New grants stay strict.
                    (Some(t), Some(a))
                        if write == Write::Renew
                            && acked < u64::from(a.replicas)
                            && node.connected_replicas(&key, node_timeout).await.is_ok_and(
                                |connected| connected < u64::from(a.replicas) && acked >= connected,
                            ) =>
                    {
                        let master = node.name_for(&key, node_timeout).await;
                        tracing::warn!(
                            key,
                            master = %master,
                            acked,
                            wanted = a.replicas,
                            "renewed on a master with fewer replicas than replica_acks asks; \
                             counted with every connected replica's acknowledgement"
                        );
                        Ok(Some(t))
                    }
                    (Some(_), Some(a)) if acked < u64::from(a.replicas) => {
                        if write != Write::Renew {
                            let _ = node.query::<Option<u64>>(&key, &undo, timeout).await;
                        }
                        let master = if node.is_cluster() {
                            Some(node.name_for(&key, node_timeout).await)
                        } else {
                            None
                        };
                        Err(NodeFailure::ReplicaAcks {
                            acked,
                            wanted: a.replicas,
                            timeout: a.timeout,
                            master,
                        })
                    }
                    _ => Ok(token),
                }
            }
        })
        .await
    }

    /// `LOCK.RELEASE` on the masters in `targets` (all when `None`), all at once, waiting for
    /// every answer (each bounded by the node timeout, plus the replica-ack timeout when
    /// acknowledgements are on: a release queues behind a `WAIT` of ours on the shared
    /// connection). Returns the round: a "token" here is the remaining count + 1, so
    /// `granted()` counts the masters where we held the lock.
    pub(crate) async fn release_targets(
        &self,
        key: &str,
        owner: &str,
        targets: Option<&[bool]>,
    ) -> Round {
        let timeout = self.inner.options.write_timeout();
        let mut cmd = redis::cmd("LOCK.RELEASE");
        cmd.arg(key).arg(owner);
        let targets: Option<Vec<bool>> = targets.map(<[bool]>::to_vec);
        let key = key.to_string();
        self.round(false, move |inner, i| {
            let (cmd, key) = (cmd.clone(), key.clone());
            let skip = targets
                .as_ref()
                .is_some_and(|t| !t.get(i).copied().unwrap_or(false));
            async move {
                if skip {
                    return Err(NodeFailure::NotGranted);
                }
                let left: Option<u64> = inner.nodes[i].query(&key, &cmd, timeout).await?;
                Ok(left.map(|c| c + 1))
            }
        })
        .await
    }
}

/// An acquisition round under way: if its future is dropped before the round is decided (a
/// `select!`, a timeout, a signal), the grants that land anyway are released in the
/// background instead of being held until their ttl.
struct Abandoned {
    relock: Relock,
    key: String,
    owner: String,
    armed: bool,
}

impl Abandoned {
    fn new(relock: &Relock, key: &str, owner: &str) -> Abandoned {
        Abandoned {
            relock: relock.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            armed: true,
        }
    }

    /// The round was decided: its outcome is handled by the caller.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(key = %self.key, "acquisition abandoned; releasing what it got");
            self.relock.release_late(&self.key, &self.owner, None);
        }
    }
}

/// Fails when two of `nodes` are one server: their resolved addresses (or unix socket paths)
/// overlap. A host name that does not resolve is compared by name.
fn check_distinct<S: AsRef<str>>(urls: &[S], nodes: &[Node]) -> Result<(), Error> {
    let identities: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| server_identity(&n.connection_info().addr))
        .collect();
    for (i, mine) in identities.iter().enumerate() {
        for (j, earlier) in identities[..i].iter().enumerate() {
            if let Some(address) = mine.iter().find(|a| earlier.contains(a)) {
                return Err(Error::DuplicateServer {
                    first: urls[j].as_ref().to_string(),
                    second: urls[i].as_ref().to_string(),
                    address: address.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The addresses a server URL reaches, in a comparable form.
fn server_identity(addr: &ConnectionAddr) -> Vec<String> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            let resolved: Vec<String> = (host.as_str(), *port)
                .to_socket_addrs()
                .map(|addrs| addrs.map(|a| canonical(a).to_string()).collect())
                .unwrap_or_default();
            if resolved.is_empty() {
                vec![display_addr(addr).to_lowercase()]
            } else {
                resolved
            }
        }
        ConnectionAddr::Unix(path) => vec![std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string()],
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// The writes that may wait for replica acknowledgements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// `LOCK.ACQUIRE`: the reply is the token or nil.
    Acquire,
    /// `MULTI`, `LOCK.REENTER`, `LOCK.INFO`, `EXEC`: the token is read from the info.
    Reenter,
    /// `LOCK.RENEW`: the reply is the token or nil.
    Renew,
}

impl Write {
    /// The token granted (or renewed), or `None` for nil, from the pipeline's replies.
    fn token(self, replies: Vec<redis::Value>) -> Result<Option<u64>, NodeFailure> {
        use redis::FromRedisValue;
        let protocol = |what: &str| NodeFailure::Protocol(format!("{what}: {replies:?}"));
        match self {
            Write::Acquire | Write::Renew => {
                let first = replies.first().ok_or_else(|| protocol("no reply"))?;
                Ok(Option::<u64>::from_redis_value(first)?)
            }
            Write::Reenter => {
                // MULTI -> OK, REENTER -> QUEUED, INFO -> QUEUED, EXEC -> [count, info]
                let Some(redis::Value::Array(exec)) = replies.get(3) else {
                    return Err(protocol("EXEC"));
                };
                let (Some(count), Some(info)) = (exec.first(), exec.get(1)) else {
                    return Err(protocol("EXEC"));
                };
                if Option::<u64>::from_redis_value(count)?.is_none() {
                    return Ok(None);
                }
                Ok(parse_info(info.clone())?.map(|i| i.token))
            }
        }
    }
}
