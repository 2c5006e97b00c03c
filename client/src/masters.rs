//! The masters a client locks on, and the rounds of commands sent to all of them at once:
//! the writes (acquire, reenter, renew, each with its replica acknowledgements), the releases
//! and the waits. Each request goes to one [`Node`]; the replies are judged by the pure
//! [`RoundState`], fed by [`fanout::collect`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;
use relock_protocol::cmd::{Acquire, Downgrade, Holders, Info, Reenter, Release, Renew, Wait};
use relock_protocol::Ask;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::conn::Resend;
use crate::error::{Error, NodeFailure};
use crate::fanout::{self, spawned};
use crate::info::{parse_holders, parse_info};
use crate::limits::{check_options, wait_ms};
use crate::node::{connection_ended, key_slot, Node};
use crate::options::Options;
use crate::round::{quorum, Released, Reply, Round, RoundState, Until};
use crate::wire;

/// What one master answered to an operator's query.
#[derive(Debug)]
pub struct NodeReport<T> {
    /// The master, as `host:port`.
    pub node: String,
    /// Its answer, or why there was none.
    pub result: Result<T, NodeFailure>,
}

/// The masters of one client (one server, N independent masters, or one Redis Cluster acting
/// as one master), its options, and the releases it runs in the background.
pub(crate) struct Masters {
    nodes: Vec<Node>,
    /// The nodes' names, in their order, shared with every round.
    names: Arc<[String]>,
    options: Options,
    background: BackgroundReleases,
}

impl Masters {
    /// The masters at `urls`, refusing one server named twice.
    pub(crate) fn open<S: AsRef<str>>(urls: &[S], options: Options) -> Result<Masters, Error> {
        if urls.is_empty() {
            return Err(Error::NoServers);
        }
        check_options(&options)?;
        let nodes = urls
            .iter()
            .map(|u| Node::open(u.as_ref(), &options.tls))
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.len() > 1 {
            check_distinct(urls, &nodes)?;
        }
        Ok(Masters::of(nodes, options))
    }

    /// One Redis Cluster, known by some of its nodes, as a single master.
    #[cfg(feature = "cluster")]
    pub(crate) fn open_cluster<S: AsRef<str>>(
        seeds: &[S],
        options: Options,
    ) -> Result<Masters, Error> {
        if seeds.is_empty() {
            return Err(Error::NoServers);
        }
        check_options(&options)?;
        let seeds: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        let node = Node::open_cluster(&seeds, &options.tls)?;
        Ok(Masters::of(vec![node], options))
    }

    fn of(nodes: Vec<Node>, options: Options) -> Masters {
        Masters {
            names: nodes.iter().map(|n| n.name.clone()).collect(),
            nodes,
            options,
            background: BackgroundReleases::default(),
        }
    }

    /// The masters' names (`host:port`), in the order they were given.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The database number of the first master's connections.
    pub(crate) fn db(&self) -> i64 {
        self.nodes.first().map_or(0, Node::db)
    }

    /// How many masters must agree: N / 2 + 1.
    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    pub(crate) fn options(&self) -> &Options {
        &self.options
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.nodes.iter().any(Node::is_cluster)
    }

    pub(crate) fn background(&self) -> &BackgroundReleases {
        &self.background
    }

    fn new_round<T>(&self, until: Until) -> RoundState<T> {
        RoundState::new(self.names.clone(), until, Instant::now())
    }

    /// `cmd` about `key` on every master, concurrently, each answer read by `parse`.
    pub(crate) async fn ask_each<R, T>(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Vec<NodeReport<T>>
    where
        R: FromRedisValue,
    {
        self.ask_each_within(key, cmd, self.options.node_timeout, parse)
            .await
    }

    /// [`Masters::ask_each`] with each request bounded by `timeout` instead of the node timeout.
    pub(crate) async fn ask_each_within<R, T>(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        timeout: Duration,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Vec<NodeReport<T>>
    where
        R: FromRedisValue,
    {
        self.ask_each_as(key, cmd, timeout, Resend::AfterAnyFailure, parse)
            .await
    }

    /// [`Masters::ask_each`] for a command that must not run twice (`LOCK.FORCERELEASE`: run
    /// again after its reply was lost, it would remove a hold taken since): in a cluster or
    /// behind Sentinel it goes to a new master only after a refusal that says the first did
    /// not run it, never after a timeout or a dropped connection.
    pub(crate) async fn ask_each_once<R, T>(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Vec<NodeReport<T>>
    where
        R: FromRedisValue,
    {
        self.ask_each_as(
            key,
            cmd,
            self.options.node_timeout,
            Resend::OnlyUnrun,
            parse,
        )
        .await
    }

    async fn ask_each_as<R, T>(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        timeout: Duration,
        resend: Resend,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Vec<NodeReport<T>>
    where
        R: FromRedisValue,
    {
        let parse = &parse;
        let replies = futures_util::future::join_all(self.nodes.iter().map(|n| async move {
            let reply: Result<R, _> = n.query_with(key, cmd, timeout, resend).await;
            NodeReport {
                node: n.name_for(key, timeout).await,
                result: reply.and_then(parse),
            }
        }));
        replies.await
    }

    /// `cmd` about `key` on the one master of a single-server or cluster client (the key's
    /// master in a cluster), bounded by the node timeout, sent once; in a cluster or behind
    /// Sentinel sent once more to a new master after a failure as `resend` allows:
    /// [`Resend::AfterAnyFailure`] for the elections' reads (`LOCK.INFO`, harmless twice), [`Resend::OnlyUnrun`] for a
    /// command that must not run twice (`LOCK.FENCED`: only after the first master refused it
    /// without running it, never after a timeout or a dropped connection). For elections and
    /// fenced writes, which the callers allow on such clients only.
    pub(crate) async fn ask_one(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        resend: Resend,
    ) -> Result<redis::Value, crate::error::NodeError> {
        let timeout = self.options.node_timeout;
        let node = self.only_node()?;
        match node
            .query_with::<redis::Value>(key, cmd, timeout, resend)
            .await
        {
            Ok(reply) => Ok(reply),
            Err(failure) => Err(crate::error::NodeError {
                node: node.name_for(key, timeout).await,
                failure,
            }),
        }
    }

    /// A blocking `cmd` about `key` (`LOCK.OBSERVE`) on the one master of a single-server or
    /// cluster client, on a connection of its own, watched (see [`Node::blocking_query`]).
    pub(crate) async fn blocking_one(
        &self,
        key: &str,
        cmd: &redis::Cmd,
    ) -> Result<redis::Value, crate::error::NodeError> {
        let node = self.only_node()?;
        let timeout = self.options.node_timeout;
        match node.blocking_query::<redis::Value>(key, cmd, timeout).await {
            Ok(reply) => Ok(reply),
            Err(failure) => Err(crate::error::NodeError {
                node: node.name_for(key, timeout).await,
                failure,
            }),
        }
    }

    fn only_node(&self) -> Result<&Node, crate::error::NodeError> {
        match self.nodes.as_slice() {
            [node] => Ok(node),
            _ => Err(crate::error::NodeError {
                node: self.names.join(","),
                failure: NodeFailure::Protocol("one master expected".into()),
            }),
        }
    }

    /// The commands of `pipe` about `key` on every master, concurrently, each bounded by the
    /// node timeout: per master (in the client's order) its name and replies, or why there are
    /// none.
    pub(crate) async fn ask_each_pipeline(
        &self,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> Vec<NodeReport<Vec<redis::Value>>> {
        let timeout = self.options.node_timeout;
        let replies = futures_util::future::join_all(self.nodes.iter().map(|n| async move {
            let reply = n.query_acked(key, pipe, None, timeout).await;
            NodeReport {
                node: n.name_for(key, timeout).await,
                result: reply.map(|(values, _)| values),
            }
        }));
        replies.await
    }

    /// A round of one write whose reply is a token or nil, followed on each master by `WAIT`
    /// when [`Options::replica_acks`] asks for acknowledgements. A master whose replicas did not
    /// acknowledge counts as failed, and an acquisition there is undone at once (so that a
    /// reentrant round's release never needs to know about it).
    ///
    /// Each request runs in a task of its own, so one still in flight when the round is
    /// decided goes on to completion (bounded by the node timeout) instead of being cut off
    /// half-way: a late grant or renewal still lands, and the release and renew paths address
    /// every master, so a late grant is never orphaned.
    pub(crate) async fn write_round(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        write: Write,
    ) -> Round<u64> {
        self.write_round_from(key, owner, ttl_ms, write, None)
            .await
            .0
    }

    /// [`Masters::write_round`], and for a re-entry (`LOCK.REENTER ... FROM c`) each master's
    /// count before the step in `from` (`None`, or a master's entry `None`: read there first,
    /// `LOCK.HOLDERS key OWNER owner`). Also returns, per master, the count its hold has after
    /// the step where it granted (c + 1: the step applied, or a repeat of it that did), and
    /// whether each master's request has landed, which goes on after the round is decided.
    pub(crate) async fn write_round_from(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        write: Write,
        from: Option<&[Option<u32>]>,
    ) -> (Round<u64>, Vec<Option<u32>>, Landed) {
        let after = Arc::new(std::sync::Mutex::new(vec![None; self.nodes.len()]));
        let landed = Landed::new(self.nodes.len());
        // A reentrant round waits for every master, so that the release of a failed round
        // only undoes the counts it really added.
        let until = match write {
            Write::Reenter(_) => Until::AllAnswered,
            Write::Acquire(_) | Write::Renew | Write::Downgrade => Until::Decided,
        };
        let round = self.new_round(until);
        let requests: Vec<_> = (0..self.nodes.len())
            .map(|i| {
                let (masters, key, owner, after) = (
                    self.clone(),
                    key.to_string(),
                    owner.to_string(),
                    after.clone(),
                );
                let from = from.and_then(|f| f.get(i).copied().flatten());
                let mut lands = landed.on(i);
                spawned(async move {
                    let step = Step {
                        key: &key,
                        owner: &owner,
                        ttl_ms,
                        write,
                    };
                    let reply = masters.write_on(i, step, from, &after).await;
                    lands.answered(reply.is_ok());
                    reply
                })
            })
            .collect();
        let round = fanout::collect(round, requests, None).await;
        let after = after.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (round, after, landed)
    }

    /// A round of `pipe` (a group's `LOCK.MACQUIRE`, `LOCK.MRENEW` or `LOCK.MRELEASE`, routed by
    /// `route`, a key of the group's slot) on every master, each reply read by `parse`, each
    /// request in a task of its own (see [`Masters::write_round`]). With
    /// [`Options::replica_acks`], a master whose replicas did not acknowledge counts as failed,
    /// and `undo` (the group's release, for an acquisition) is sent there at once.
    pub(crate) async fn group_round<T, P>(
        self: &Arc<Self>,
        route: &str,
        pipe: redis::Pipeline,
        until: Until,
        parse: P,
        undo: Option<redis::Cmd>,
    ) -> Round<T>
    where
        T: Send + 'static,
        P: Fn(Vec<redis::Value>) -> Reply<T> + Clone + Send + 'static,
    {
        let round = self.new_round(until);
        let requests: Vec<_> = (0..self.nodes.len())
            .map(|i| {
                let (masters, pipe, undo, route, parse) = (
                    self.clone(),
                    pipe.clone(),
                    undo.clone(),
                    route.to_string(),
                    parse.clone(),
                );
                spawned(async move {
                    let node = masters.nodes.get(i).ok_or_else(|| no_master(i))?;
                    let acks = masters.options.acks();
                    let timeout = masters.options.write_timeout();
                    let (replies, acked) = node.query_acked(&route, &pipe, acks, timeout).await?;
                    let value = parse(replies)?;
                    match (value, acks) {
                        (Some(_), Some(a)) if acked < u64::from(a.replicas) => {
                            if let Some(undo) = &undo {
                                let _ = node.query::<redis::Value>(&route, undo, timeout).await;
                            }
                            Err(NodeFailure::ReplicaAcks {
                                acked,
                                wanted: a.replicas,
                                timeout: a.timeout,
                                master: None,
                            })
                        }
                        (value, _) => Ok(value),
                    }
                })
            })
            .collect();
        fanout::collect(round, requests, None).await
    }

    /// The write of [`Masters::write_round`] on master `i`; a re-entry's count after it goes
    /// to `after`.
    async fn write_on(
        &self,
        i: usize,
        step: Step<'_>,
        from: Option<u32>,
        after: &std::sync::Mutex<Vec<Option<u32>>>,
    ) -> Reply<u64> {
        let Step {
            key,
            owner,
            ttl_ms,
            write,
        } = step;
        let node = self.nodes.get(i).ok_or_else(|| no_master(i))?;
        let (acks, timeout, node_timeout) = (
            self.options.acks(),
            self.options.write_timeout(),
            self.options.node_timeout,
        );
        // A re-entry names the count it moves from, read first where it is not known.
        let from = match (write, from) {
            (Write::Reenter(_), Some(c)) => Some(c),
            (Write::Reenter(_), None) => Some(own_count(node, key, owner, node_timeout).await?),
            _ => None,
        };
        let pipe = write.pipe(key, owner, ttl_ms, from);
        // What takes the step back: the count it added, or the grant (built only where it may
        // be sent: a re-entry, or a write waiting for replicas).
        let undo = (from.is_some() || acks.is_some()).then(|| {
            wire::cmd(&Release {
                key: key.as_bytes(),
                owner: owner.as_bytes(),
                from: Some(from.map_or(1, |c| c.saturating_add(1))),
            })
        });
        // A re-entry whose answer never came is taken back on its own connection, behind it:
        // the count it added (if it ran) comes off, and if it never ran, nothing does.
        let take_back = undo.as_ref().filter(|_| from.is_some());
        let (replies, acked) = node
            .query_acked_or_take_back(key, &pipe, acks, timeout, take_back)
            .await?;
        let token = write.token(replies)?;
        if let (Some(_), Some(c)) = (token, from) {
            if let Some(slot) = after.lock().unwrap_or_else(|p| p.into_inner()).get_mut(i) {
                *slot = c.checked_add(1);
            }
        }
        match (token, acks) {
            // A renewal extends a hold its replicas acknowledged when it was granted. On a
            // master left with fewer replicas than asked (the promoted replica after a
            // failover, while the old master is down), it counts once every replica still
            // there acknowledged it: that master holds the only copy of the lock anyway, and
            // refusing would give an acknowledged lock up for want of a replica that no longer
            // exists. New grants stay strict.
            (Some(t), Some(a))
                if write == Write::Renew
                    && acked < u64::from(a.replicas)
                    && node.connected_replicas(key, node_timeout).await.is_ok_and(
                        |connected| connected < u64::from(a.replicas) && acked >= connected,
                    ) =>
            {
                let master = node.name_for(key, node_timeout).await;
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
                // Only a new grant is undone: a renewal or a downgrade changed a hold we keep.
                if let (false, Some(undo)) =
                    (matches!(write, Write::Renew | Write::Downgrade), &undo)
                {
                    let _ = node.query::<Option<u64>>(key, undo, timeout).await;
                }
                let master = if node.is_cluster() {
                    Some(node.name_for(key, node_timeout).await)
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

    /// `LOCK.RELEASE` on the masters in `targets` (all when `None`), all at once, waiting for
    /// every answer (each bounded by the node timeout, plus the replica-ack timeout when
    /// acknowledgements are on: a release queues behind a `WAIT` of ours on the shared
    /// connection). A master left out counts as one that did not have the lock.
    pub(crate) async fn release_round(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        targets: Option<&[bool]>,
    ) -> Round<Released> {
        self.release_round_from(key, owner, targets, None).await
    }

    /// [`Masters::release_round`] naming the step (`LOCK.RELEASE ... FROM c`): `from` has each
    /// master's count before it (`None`, or a master's entry `None`: 1, a fresh owner's grant),
    /// so that a release sent twice takes one level off.
    pub(crate) async fn release_round_from(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        targets: Option<&[bool]>,
        from: Option<&[Option<u32>]>,
    ) -> Round<Released> {
        self.release_round_after(key, owner, targets, from, None)
            .await
            .0
    }

    /// [`Masters::release_round_from`] of a hold whose acquisition had not landed everywhere
    /// when its round was decided: on each master of `after`'s `masters`, the release is sent
    /// once that acquisition's request has landed (within the same time limit), so that it
    /// runs after it. Also returns, per master, whether it was sent after an answer to the
    /// acquisition (which then ran before it): the others may still see the acquisition after
    /// the release and must be released once more later ([`Masters::release_late`]).
    pub(crate) async fn release_round_after(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        targets: Option<&[bool]>,
        from: Option<&[Option<u32>]>,
        after: Option<(&Landed, &[bool])>,
    ) -> (Round<Released>, Vec<bool>) {
        let timeout = self.options.write_timeout();
        let round = self.new_round(Until::AllAnswered);
        let behind = Arc::new(
            (0..self.nodes.len())
                .map(|_| std::sync::atomic::AtomicBool::new(false))
                .collect::<Vec<_>>(),
        );
        let requests: Vec<_> = (0..self.nodes.len())
            .map(|i| {
                let from = from.and_then(|f| f.get(i).copied().flatten()).unwrap_or(1);
                let cmd = wire::cmd(&Release {
                    key: key.as_bytes(),
                    owner: owner.as_bytes(),
                    from: Some(from),
                });
                let (masters, key, behind) = (self.clone(), key.to_string(), behind.clone());
                let skip = targets.is_some_and(|t| !t.get(i).copied().unwrap_or(false));
                let landing = after
                    .filter(|(_, which)| which.get(i).copied().unwrap_or(false))
                    .map(|(landed, _)| landed.watch(i));
                spawned(async move {
                    if skip {
                        return Ok(None);
                    }
                    let node = masters.nodes.get(i).ok_or_else(|| no_master(i))?;
                    // The wait for the acquisition and the release share one time limit: a
                    // master that does not answer holds the round up once, as before.
                    let deadline = Instant::now() + timeout;
                    if let Some(landing) = landing {
                        if landing.answered_by(deadline).await {
                            behind[i].store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let first = node
                        .query::<Option<u64>>(&key, &cmd, left)
                        .await
                        .map_err(|e| match e {
                            NodeFailure::Timeout(_) => NodeFailure::Timeout(timeout),
                            e => e,
                        });
                    let left: Option<u64> = match first {
                        // The connection ended before the answer came: the release may have
                        // run. Sent once more, on a new connection: a release FROM c sent twice
                        // takes one level off, whichever copy runs first, and the second answer
                        // says where the hold is (nil after FROM 1: the first copy may have
                        // ended it, a release done). (Not after a timeout: a release round
                        // waits for every master, and a stopped one would hold it up twice.)
                        Err(NodeFailure::Redis(e)) if connection_ended(&e.0) => {
                            let again: Option<u64> = node.query(&key, &cmd, timeout).await?;
                            again.or((from == 1).then_some(0))
                        }
                        other => other?,
                    };
                    Ok(left.map(|holds_left| Released { holds_left }))
                })
            })
            .collect();
        let round = fanout::collect(round, requests, None).await;
        let behind = behind
            .iter()
            .map(|b| b.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        (round, behind)
    }

    /// One round of `LOCK.WAIT` (in `mode`) on every master at once, each on its own connection. Once a
    /// master granted, the others get at most [`Options::max_partial_hold`] (and never more
    /// than ttl / 4) to make a quorum. The requests still waiting when the round ends are
    /// dropped, which closes their connections and so takes us out of those masters' queues.
    pub(crate) async fn wait_round(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        remaining: Option<Duration>,
        mode: Ask,
    ) -> Round<u64> {
        let node_timeout = self.options.node_timeout;
        let cmd = &wire::cmd(&Wait {
            key: key.as_bytes(),
            owner: owner.as_bytes(),
            ttl_ms: ttl.as_millis() as u64,
            timeout_ms: wait_ms(remaining),
            ask: mode,
        });
        let round = self.new_round(Until::Decided);
        let requests: Vec<_> = self
            .nodes
            .iter()
            .map(|node| async move {
                let call = node.blocking_query::<Option<u64>>(key, cmd, node_timeout);
                // A master that stops answering (paused, partitioned) must not outlast the wait.
                match remaining {
                    None => call.await,
                    Some(r) => match tokio::time::timeout(r + node_timeout, call).await {
                        Ok(r) => r,
                        Err(_) => Err(NodeFailure::Timeout(r + node_timeout)),
                    },
                }
            })
            .collect();
        let partial_hold = self.options.max_partial_hold.min(ttl / 4);
        fanout::collect(round, requests, Some(partial_hold)).await
    }

    /// Undoes a failed round of a fresh `owner`: the masters that granted are released before
    /// this returns (they just answered, so they answer at once), so that the caller's next
    /// round finds them free; every other master that may hold a grant (one still to answer,
    /// one that timed out) is released in the background, so that a stopped master does not
    /// hold the caller up a second time.
    pub(crate) async fn release_failed(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        round: &Round<u64>,
    ) {
        // The background part first: it still runs if this future is dropped while waiting.
        self.release_late(key, owner, Some(round.may_hold()));
        let granted = round.agreed_by();
        if granted.contains(&true) {
            self.release_round(key, owner, Some(&granted)).await;
        }
    }

    /// Releases `owner`'s grants of `key` now, and once more a little later, in the
    /// background: a master may still grant a request whose connection we closed (or whose
    /// round we stopped waiting for) before it notices.
    ///
    /// `targets` limits it to some masters (all when `None`).
    pub(crate) fn release_late(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        targets: Option<Vec<bool>>,
    ) {
        let (masters, key, owner) = (self.clone(), key.to_string(), owner.to_string());
        self.background.spawn(async move {
            masters
                .release_round(&key, &owner, targets.as_deref())
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            masters
                .release_round(&key, &owner, targets.as_deref())
                .await;
        });
    }
}

/// Per master, whether the request of a write round has landed: `Some(true)` once its reply
/// came (the write ran there), `Some(false)` once it failed, timed out or was cancelled (it
/// may still run there), `None` while it is under way. The request goes on after its round
/// is decided, so a release can wait for it instead of guessing.
#[derive(Clone)]
pub(crate) struct Landed(Arc<[tokio::sync::watch::Sender<Option<bool>>]>);

impl Landed {
    fn new(masters: usize) -> Landed {
        Landed(
            (0..masters)
                .map(|_| tokio::sync::watch::Sender::new(None))
                .collect(),
        )
    }

    /// What master `i`'s request reports through; dropped without a report (a task cancelled
    /// or panicking), the request counts as not answered.
    fn on(&self, i: usize) -> Lands {
        Lands(self.0.get(i).cloned())
    }

    fn watch(&self, i: usize) -> Landing {
        Landing(self.0.get(i).map(tokio::sync::watch::Sender::subscribe))
    }
}

/// The report of one master's request to [`Landed`].
struct Lands(Option<tokio::sync::watch::Sender<Option<bool>>>);

impl Lands {
    fn answered(&mut self, answered: bool) {
        if let Some(tx) = self.0.take() {
            tx.send_replace(Some(answered));
        }
    }
}

impl Drop for Lands {
    fn drop(&mut self) {
        self.answered(false);
    }
}

/// A wait for one master's entry of [`Landed`].
struct Landing(Option<tokio::sync::watch::Receiver<Option<bool>>>);

impl Landing {
    /// Whether the request was answered, waiting for it until `deadline` at most.
    async fn answered_by(self, deadline: Instant) -> bool {
        let Some(mut rx) = self.0 else { return false };
        let landed = tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await;
        matches!(landed, Ok(Ok(answer)) if *answer == Some(true))
    }
}

fn no_master(i: usize) -> NodeFailure {
    NodeFailure::Protocol(format!("no master number {i}"))
}

/// Releases running in the background (of dropped locks and guards, of abandoned or failed
/// acquisitions), so that [`Relock::settle`](crate::Relock::settle) can wait for them.
#[derive(Clone, Default)]
pub(crate) struct BackgroundReleases(TaskTracker);

impl BackgroundReleases {
    /// Runs `release` in the background (on the current runtime, if any).
    pub(crate) fn spawn<F>(&self, release: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.0.track_future(release));
        }
    }

    /// Counts a release that is about to start elsewhere, until the token is dropped.
    pub(crate) fn token(&self) -> TaskTrackerToken {
        self.0.token()
    }

    /// Waits until every release counted here has finished.
    pub(crate) async fn settle(&self) {
        self.0.close();
        self.0.wait().await;
        self.0.reopen();
    }
}

/// An acquisition round under way: if its future is dropped before the round is decided (a
/// `select!`, a timeout, a signal), the grants that land anyway are released in the
/// background instead of being held until their ttl.
pub(crate) struct Abandoned {
    masters: Arc<Masters>,
    key: String,
    owner: String,
    armed: bool,
}

impl Abandoned {
    pub(crate) fn new(masters: &Arc<Masters>, key: &str, owner: &str) -> Abandoned {
        Abandoned {
            masters: masters.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            armed: true,
        }
    }

    /// The round was decided: its outcome is handled by the caller.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(key = %self.key, "acquisition abandoned; releasing what it got");
            self.masters.release_late(&self.key, &self.owner, None);
        }
    }
}

/// Fails when two of `nodes` are one server: their resolved addresses (or unix socket paths,
/// or for Sentinel-managed masters their name at a shared sentinel) overlap. A host name that
/// does not resolve is compared by name.
fn check_distinct<S: AsRef<str>>(urls: &[S], nodes: &[Node]) -> Result<(), Error> {
    let identities: Vec<Vec<String>> = nodes.iter().map(Node::identity).collect();
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

/// The writes that may wait for replica acknowledgements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// `LOCK.ACQUIRE` in a mode: the reply is the token or nil.
    Acquire(Ask),
    /// `MULTI`, `LOCK.REENTER` in a mode, `LOCK.INFO` (shared: `LOCK.HOLDERS key OWNER
    /// owner`), `EXEC`: the token is read from the info (the holder).
    Reenter(Ask),
    /// `LOCK.RENEW`: the reply is the token or nil.
    Renew,
    /// `LOCK.DOWNGRADE`: the reply is the token or nil.
    Downgrade,
}

/// One write of a round on one master: what [`Masters::write_on`] sends.
#[derive(Clone, Copy)]
struct Step<'a> {
    key: &'a str,
    owner: &'a str,
    ttl_ms: u64,
    write: Write,
}

/// The count of `owner`'s hold of `key` on `node` (0: none), for a re-entry that must name it.
async fn own_count(
    node: &Node,
    key: &str,
    owner: &str,
    timeout: Duration,
) -> Result<u32, NodeFailure> {
    let cmd = wire::cmd(&Holders {
        key: key.as_bytes(),
        owner: Some(owner.as_bytes()),
        count: None,
    });
    let holders = parse_holders(node.query::<redis::Value>(key, &cmd, timeout).await?)?;
    let count = holders
        .unwrap_or_default()
        .iter()
        .find(|h| h.owner == owner)
        .map_or(0, |h| h.count);
    u32::try_from(count).map_err(|_| NodeFailure::Protocol(format!("LOCK.HOLDERS count {count}")))
}

impl Write {
    /// The pipeline of this write of `key` by `owner`; `from` is a re-entry's count before it.
    fn pipe(self, key: &str, owner: &str, ttl_ms: u64, from: Option<u32>) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        let (key, owner) = (key.as_bytes(), owner.as_bytes());
        match self {
            Write::Acquire(ask) => {
                pipe.add_command(wire::cmd(&Acquire {
                    key,
                    owner,
                    ttl_ms,
                    ask,
                }));
            }
            Write::Renew => {
                pipe.add_command(wire::cmd(&Renew { key, owner, ttl_ms }));
            }
            Write::Downgrade => {
                pipe.add_command(wire::cmd(&Downgrade { key, owner }));
            }
            Write::Reenter(ask) => {
                // The token must be the one of the hold we counted into: read it in the same
                // transaction (a shared key's LOCK.INFO names no holder: ask for ours). The
                // count it moves from makes a repeat of the step change nothing.
                pipe.cmd("MULTI").add_command(wire::cmd(&Reenter {
                    key,
                    owner,
                    ttl_ms,
                    ask,
                    from: Some(from.unwrap_or(0)),
                }));
                if is_shared(ask) {
                    pipe.add_command(wire::cmd(&Holders {
                        key,
                        owner: Some(owner),
                        count: None,
                    }));
                } else {
                    pipe.add_command(wire::cmd(&Info { key }));
                }
                pipe.cmd("EXEC");
            }
        }
        pipe
    }

    /// The token granted (or renewed), or `None` for nil, from the pipeline's replies.
    fn token(self, replies: Vec<redis::Value>) -> Result<Option<u64>, NodeFailure> {
        let protocol = |what: &str| NodeFailure::Protocol(format!("{what}: {replies:?}"));
        match self {
            Write::Acquire(_) | Write::Renew | Write::Downgrade => {
                let first = replies.first().ok_or_else(|| protocol("no reply"))?;
                Ok(Option::<u64>::from_redis_value(first)?)
            }
            Write::Reenter(mode) => {
                // MULTI -> OK, REENTER -> QUEUED, INFO -> QUEUED, EXEC -> [count, info]
                let Some(redis::Value::Array(exec)) = replies.get(3) else {
                    return Err(protocol("EXEC"));
                };
                let (Some(count), Some(info)) = (exec.first(), exec.get(1)) else {
                    return Err(protocol("EXEC"));
                };
                // An error inside the transaction (a mode or limit refused) is the reply.
                if let redis::Value::ServerError(e) = count {
                    return Err(NodeFailure::from(redis::RedisError::from(e.clone())));
                }
                if Option::<u64>::from_redis_value(count)?.is_none() {
                    return Ok(None);
                }
                if is_shared(mode) {
                    let ours = parse_holders(info.clone())?.unwrap_or_default();
                    return Ok(ours.first().map(|h| h.token));
                }
                Ok(parse_info(info.clone())?.and_then(|i| i.token))
            }
        }
    }
}

/// Whether `ask` is a shared request.
fn is_shared(ask: Ask) -> bool {
    matches!(ask, Ask::Shared { .. })
}

/// `keys` (sorted) in the parts one command can take: one part, except on a Redis Cluster,
/// where each hash slot is a part; parts in the order of their first key.
pub(crate) fn parts_of(cluster: bool, keys: &[String]) -> Vec<Vec<String>> {
    if !cluster {
        return vec![keys.to_vec()];
    }
    let mut parts: Vec<(u16, Vec<String>)> = Vec::new();
    for key in keys {
        let slot = key_slot(key.as_bytes());
        match parts.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, part)) => part.push(key.clone()),
            None => parts.push((slot, vec![key.clone()])),
        }
    }
    parts.into_iter().map(|(_, part)| part).collect()
}

// Whole-server questions of operators' tools (every master of a cluster): a file of its own.
mod every_master;
