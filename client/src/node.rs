//! One master (or one Redis Cluster): its name, a cached multiplexed connection, and the
//! per-node timeout.
//!
//! A cluster is routed here, not by redis-rs's cluster client: every request is bounded by
//! the caller's timeout, and a master that times out or answers as a replica makes the client
//! re-read the slot map from the other nodes and try the key's (new) master once more, so a
//! lock follows an automatic failover instead of being renewed on a stopped master.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, IntoConnectionInfo,
    Pipeline, Value,
};
use tokio::sync::Mutex;

use crate::conn::{
    connect, display_addr, host_port, is_topology_change, lock_within, normalize_addr,
    server_identity, split_addr, with_addr, Resend,
};
use crate::error::{Error, NodeFailure, ServerError};
use crate::sentinel::{is_sentinel_url, Sentinel};
use crate::tls::Tls;

/// How many redirections (MOVED, ASK) or topology changes one command follows.
const MAX_REDIRECTS: u32 = 16;
/// The least time a slot-map refresh gets (connecting to a node and `CLUSTER SLOTS`), however
/// short the caller's timeout.
const MIN_TOPOLOGY_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a client blocked in a cluster `LOCK.WAIT` checks that the master it waits on
/// still answers (a stopped master never unblocks it; its replica may have taken over).
const WATCH_MASTER_EVERY: Duration = Duration::from_secs(1);
/// How often a client blocked in `LOCK.WAIT` asks the server, over another connection,
/// whether its waiting connection is still blocked there: a connection that died silently
/// (half-open TCP: a crashed host, a dropped NAT entry, a stuck middlebox) never delivers the
/// grant, nor an error.
const WATCH_WAIT_EVERY: Duration = Duration::from_secs(1);
/// How many checks in a row without an answer make a waiting connection count as dead (the
/// server, or the way to it, is gone or stuck).
const UNANSWERED_CHECKS: u32 = 3;

/// Replica acknowledgements asked after a write (`WAIT replicas timeout`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// A master of the lock, or a whole Redis Cluster acting as one, reached through redis-rs.
pub(crate) struct Node {
    /// `host:port` (`[v6]:port`; for a cluster, `cluster[seed,...]`), used in every error and
    /// log line.
    pub(crate) name: String,
    backend: Backend,
}

enum Backend {
    Server {
        client: Client,
        /// Shared by every non-blocking command; re-established after an I/O error.
        conn: Mutex<Option<MultiplexedConnection>>,
    },
    // Without the cluster or sentinel feature, nothing makes one of these (the constructor is
    // not built); the code that serves them is.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Cluster(Cluster),
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Sentinel(Sentinel),
}

/// A Redis Cluster, routed by our own slot map.
struct Cluster {
    /// How to reach any one node: the first seed's settings (auth, db, protocol).
    template: ConnectionInfo,
    /// The nodes we were given, as `host:port`.
    seeds: Vec<String>,
    /// The slot map from the last `CLUSTER SLOTS` (empty: to be read again), and every node
    /// seen in any map, to ask for the next one.
    topology: Mutex<Topology>,
    /// One multiplexed connection per node, shared by the non-blocking commands.
    conns: std::sync::Mutex<HashMap<String, MultiplexedConnection>>,
}

#[derive(Default)]
struct Topology {
    /// (first slot, last slot, master `host:port`).
    ranges: Vec<(u16, u16, String)>,
    known: Vec<String>,
}

impl Node {
    /// The server at `url` (`redis://` or `rediss://`, with `tls` for the latter), or the
    /// master a Sentinel names (`redis+sentinel://`, see [`Sentinel`]).
    pub(crate) fn open(url: &str, tls: &Tls) -> Result<Node, Error> {
        crate::tls::check_scheme(url)?;
        #[cfg(not(feature = "sentinel"))]
        if is_sentinel_url(url) {
            return Err(Error::InvalidUrl {
                url: url.to_string(),
                source: ServerError(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "redis+sentinel:// needs relock-client's sentinel feature, which this build \
                     does not have",
                ))),
            });
        }
        #[cfg(feature = "sentinel")]
        if is_sentinel_url(url) {
            let sentinel = Sentinel::open(url, tls)?;
            return Ok(Node {
                name: format!(
                    "{}@sentinel[{}]",
                    sentinel.master_name,
                    sentinel.sentinel_names.join(",")
                ),
                backend: Backend::Sentinel(sentinel),
            });
        }
        let info = url
            .into_connection_info()
            .map_err(|source| Error::InvalidUrl {
                url: url.to_string(),
                source: ServerError(source),
            })?;
        let client = tls.client(info, url)?;
        let name = display_addr(&client.get_connection_info().addr);
        Ok(Node {
            name,
            backend: Backend::Server {
                client,
                conn: Mutex::new(None),
            },
        })
    }

    /// The database number the node's connections select (the first seed's, the Sentinel
    /// URL's).
    pub(crate) fn db(&self) -> i64 {
        match &self.backend {
            Backend::Server { client, .. } => client.get_connection_info().redis.db,
            Backend::Cluster(cluster) => cluster.template.redis.db,
            Backend::Sentinel(sentinel) => sentinel.db(),
        }
    }

    /// One Redis Cluster, known by some of its nodes (`seeds`; every node is reached the way
    /// the first seed is, with `tls` for `rediss://`). No connection is made here.
    #[cfg(feature = "cluster")]
    pub(crate) fn open_cluster(seeds: &[&str], tls: &Tls) -> Result<Node, Error> {
        let infos = seeds
            .iter()
            .map(|u| {
                crate::tls::check_scheme(u)?;
                u.into_connection_info()
                    .map_err(|source| Error::InvalidUrl {
                        url: u.to_string(),
                        source: ServerError(source),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let first = infos.first().cloned().ok_or(Error::NoServers)?;
        // With the certificates in it, for every node.
        let template = tls
            .client(first, seeds.first().copied().unwrap_or_default())?
            .get_connection_info()
            .clone();
        let mut names: Vec<String> = Vec::new();
        for info in &infos {
            let name = display_addr(&info.addr);
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(Node {
            name: format!("cluster[{}]", names.join(",")),
            backend: Backend::Cluster(Cluster {
                template,
                seeds: names,
                topology: Mutex::new(Topology::default()),
                conns: std::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// What tells this master from another in one client's list: the addresses it is reached
    /// at (for a cluster, the first seed's; for a Sentinel-managed master, its name at each
    /// sentinel). Two masters that share one are one.
    pub(crate) fn identity(&self) -> Vec<String> {
        match &self.backend {
            Backend::Server { client, .. } => server_identity(&client.get_connection_info().addr),
            Backend::Cluster(c) => server_identity(&c.template.addr),
            Backend::Sentinel(s) => s
                .sentinel_names
                .iter()
                .flat_map(|addr| match split_addr(addr) {
                    Some((host, port)) => {
                        server_identity(&ConnectionAddr::Tcp(host.to_string(), port))
                    }
                    None => vec![addr.clone()],
                })
                .map(|addr| format!("{} at sentinel {addr}", s.master_name))
                .collect(),
        }
    }

    /// Runs a non-blocking command about `key` on the shared connection; connecting counts
    /// against `timeout` too, so a dead or paused master costs at most `timeout` (in a
    /// cluster, at most twice that and a slot-map refresh when the key's master changed).
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        key: &str,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        self.query_with(key, cmd, timeout, Resend::AfterAnyFailure)
            .await
    }

    /// [`Node::query`], sent to a new master after a failure only as `resend` allows.
    pub(crate) async fn query_with<T: FromRedisValue>(
        &self,
        key: &str,
        cmd: &Cmd,
        timeout: Duration,
        resend: Resend,
    ) -> Result<T, NodeFailure> {
        match &self.backend {
            Backend::Server { client, conn } => {
                let attempt = async {
                    let mut c = shared_conn(client, conn).await?;
                    cmd.query_async::<T>(&mut c).await
                };
                self.server_reply(tokio::time::timeout(timeout, attempt).await, timeout)
                    .await
            }
            Backend::Cluster(_) | Backend::Sentinel(_) => {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd.clone());
                let mut values = match &self.backend {
                    Backend::Cluster(cluster) => cluster.call(key, &pipe, timeout, resend).await?,
                    _ => self.routed(key, &pipe, timeout, resend).await?,
                };
                match values.pop() {
                    Some(v) => Ok(T::from_redis_value(&v)?),
                    None => Err(NodeFailure::Protocol("no reply".into())),
                }
            }
        }
    }

    /// Runs the commands of `pipe` about `key` (not wrapped in `MULTI`; put `MULTI`/`EXEC` in
    /// it for a transaction) and then, when `acks` asks for it, `WAIT replicas timeout_ms` on
    /// the same connection, so that the count covers these writes. Returns `pipe`'s replies and
    /// how many replicas acknowledged (0 when not asked).
    pub(crate) async fn query_acked(
        &self,
        key: &str,
        pipe: &Pipeline,
        acks: Option<Acks>,
        timeout: Duration,
    ) -> Result<(Vec<Value>, u64), NodeFailure> {
        self.query_acked_or_take_back(key, pipe, acks, timeout, None)
            .await
    }

    /// [`Node::query_acked`]; when `pipe`'s answer does not come in time, `take_back` (if
    /// given) is sent on the same connection, behind it, so that the server runs it after
    /// `pipe` (if `pipe` reached it at all), before that connection is given up. Only a
    /// single server's connection offers that order; a cluster or Sentinel-managed master
    /// sends nothing more.
    pub(crate) async fn query_acked_or_take_back(
        &self,
        key: &str,
        pipe: &Pipeline,
        acks: Option<Acks>,
        timeout: Duration,
        take_back: Option<&Cmd>,
    ) -> Result<(Vec<Value>, u64), NodeFailure> {
        let mut pipe = pipe.clone();
        if let Some(a) = acks {
            // WAIT 0 would mean "forever".
            let ms = u64::try_from(a.timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            pipe.cmd("WAIT").arg(a.replicas).arg(ms);
        }
        let mut values: Vec<Value> = match &self.backend {
            Backend::Server { client, conn } => {
                let sent = std::sync::Mutex::new(None);
                let attempt = async {
                    let mut c = shared_conn(client, conn).await?;
                    *sent.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
                    pipe.query_async::<Vec<Value>>(&mut c).await
                };
                let result = tokio::time::timeout(timeout, attempt).await;
                let sent = sent.into_inner().unwrap_or_else(|p| p.into_inner());
                if let (Err(_), Some(take_back), Some(mut c)) = (&result, take_back, sent) {
                    let answer =
                        tokio::time::timeout(timeout, take_back.query_async::<Value>(&mut c)).await;
                    tracing::debug!(key, ?answer, "a write without an answer, taken back");
                }
                // The connection ended before the answer came: the write may have run (the
                // server runs what it read before it sees the end). Taken back on a new
                // connection, since the old one is gone: if it ran, its step comes off; if
                // not, the take-back is a repeat and changes nothing.
                let ended = matches!(&result, Ok(Err(e)) if connection_ended(e));
                let reply = self.server_reply(result, timeout).await;
                if let (true, Some(take_back)) = (ended, take_back) {
                    let answer = self.query::<Value>(key, take_back, timeout).await;
                    tracing::debug!(key, ?answer, "a write whose connection ended, taken back");
                }
                reply?
            }
            Backend::Cluster(cluster) => {
                cluster
                    .call(key, &pipe, timeout, Resend::AfterAnyFailure)
                    .await?
            }
            Backend::Sentinel(sentinel) => {
                sentinel
                    .call(&pipe, timeout, Resend::AfterAnyFailure)
                    .await?
            }
        };
        let acked = match acks {
            None => 0,
            Some(_) => match values.pop() {
                Some(v) => u64::from_redis_value(&v)?,
                None => return Err(NodeFailure::Protocol("WAIT: no reply".into())),
            },
        };
        Ok((values, acked))
    }

    /// `pipe` through a routed backend (a Sentinel-managed master).
    async fn routed(
        &self,
        _key: &str,
        pipe: &Pipeline,
        timeout: Duration,
        resend: Resend,
    ) -> Result<Vec<Value>, NodeFailure> {
        match &self.backend {
            Backend::Sentinel(sentinel) => sentinel.call(pipe, timeout, resend).await,
            _ => Err(NodeFailure::Protocol("not a routed master".into())),
        }
    }

    /// How many replicas the master of `key` has connected right now (`ROLE`). Fails when the
    /// node that answers is not a master (any more): a write it just took was not made on the
    /// key's master, whatever its replicas say.
    pub(crate) async fn connected_replicas(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<u64, NodeFailure> {
        let role: Value = self.query(key, &redis::cmd("ROLE"), timeout).await?;
        parse_role_replicas(&role)
    }

    /// A single server's reply, with its shared connection dropped after an I/O error.
    async fn server_reply<T>(
        &self,
        result: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        match result {
            Err(_) => {
                // A connection that went silent (half-open) would time out every request from
                // now on: the next one connects again.
                if let Backend::Server { conn, .. } = &self.backend {
                    *conn.lock().await = None;
                }
                Err(NodeFailure::Timeout(timeout))
            }
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    if let Backend::Server { conn, .. } = &self.backend {
                        *conn.lock().await = None;
                    }
                }
                Err(NodeFailure::from(e))
            }
        }
    }

    /// Runs a blocking command (`LOCK.WAIT`) on a connection of its own, so that it never stalls
    /// the shared one; dropping the future closes that connection, which takes us out of the
    /// master's wait queue.
    ///
    /// While it waits, the server is asked every second over another connection whether the
    /// waiting connection is still blocked there (`CLIENT LIST ID`). One the server no longer
    /// knows, one it answered (the grant) without the answer arriving within the node timeout,
    /// or no answer to [`UNANSWERED_CHECKS`] checks in a row, means the connection died
    /// silently: it is closed there (`CLIENT KILL`, best effort) and the same command is sent
    /// again on a new connection. That is safe because the owner is the same: a grant the
    /// dead connection never delivered is answered again at once, as a re-acquire. A wait
    /// notices such a death within about 1 s + 2 × `timeout` once the server answered (and
    /// within 3 × (1 s + max(`timeout`, 1 s)) when the server stops answering: a slow link
    /// must not cost a waiter its place in the queue). Where an ACL forbids `CLIENT`, the
    /// check is a `PING` of the server, which notices only a server that stopped answering.
    ///
    /// In a cluster the connection goes to the master of `key`'s slot; a `MOVED` is followed to
    /// the new master, an `ASK` with `ASKING`, and a topology change under way (`TRYAGAIN`,
    /// `CLUSTERDOWN`, `READONLY`, a waiter unblocked because its master became a replica, a
    /// refused connection) re-reads the slot map after a short pause. While it waits, the master
    /// is pinged every second; one that stops answering while the slot map names another
    /// master for the key is left for that one.
    pub(crate) async fn blocking_query<T: FromRedisValue>(
        &self,
        key: &str,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        match &self.backend {
            Backend::Server { client, conn } => {
                self.blocking_server(client, conn, key, cmd, connect_timeout)
                    .await
            }
            Backend::Sentinel(sentinel) => {
                self.blocking_sentinel(sentinel, key, cmd, connect_timeout)
                    .await
            }
            Backend::Cluster(cluster) => {
                self.blocking_cluster(cluster, key, cmd, connect_timeout)
                    .await
            }
        }
    }

    /// [`Node::blocking_query`] on one server: waits on a connection of its own, watched, and
    /// again on a new one when it went silent.
    async fn blocking_server<T: FromRedisValue>(
        &self,
        client: &Client,
        conn: &Mutex<Option<MultiplexedConnection>>,
        key: &str,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let via = Via::Server(client, conn);
        // Once a wait went silent, its grant may be on its way to nobody: the same owner must
        // ask again, however long the server takes to answer again.
        let mut went_silent = false;
        loop {
            let info = client.get_connection_info().clone();
            let (mut waiting, id) = match start_waiting(info, connect_timeout).await {
                Ok(started) => started,
                Err(e) if went_silent && !e.is_permanent() => {
                    tracing::debug!(node = %self.name, key, error = %e, "cannot wait again yet");
                    tokio::time::sleep(WATCH_WAIT_EVERY).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            tokio::select! {
                result = cmd.query_async::<T>(&mut waiting) => return Ok(result?),
                () = watch_wait(id, &via, connect_timeout) => {
                    tracing::warn!(node = %self.name, key, "a waiting connection went silent; waiting again on a new one");
                    kill_waiting(id, &via, connect_timeout).await;
                    went_silent = true;
                }
            }
        }
    }

    /// [`Node::blocking_query`] on a Redis Cluster: on the master of `key`'s slot, following
    /// redirections and topology changes, and another master when this one stops answering.
    async fn blocking_cluster<T: FromRedisValue>(
        &self,
        cluster: &Cluster,
        key: &str,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let mut redirect: Option<(String, bool)> = None;
        let mut last = None;
        for attempt in 0..MAX_REDIRECTS {
            let (addr, asking) = match redirect.take() {
                Some(r) => r,
                None => (cluster.master_of(key, connect_timeout).await?, false),
            };
            let wait = wait_on_cluster_node(cluster, &addr, asking, key, cmd, connect_timeout);
            let outcome: Result<Option<Result<T, NodeFailure>>, NodeFailure> = tokio::select! {
                result = wait => result,
                () = cluster.watch_master(key, &addr, connect_timeout) => {
                    tracing::debug!(key, node = %addr, "master stopped answering; waiting on the new one");
                    continue;
                }
            };
            let result = match outcome {
                Ok(Some(result)) => result,
                // Silent: the same node again, on a new connection.
                Ok(None) => {
                    redirect = Some((addr.clone(), asking));
                    continue;
                }
                Err(e) => Err(e),
            };
            let e = match result {
                Err(NodeFailure::Redis(e)) => e,
                Err(NodeFailure::Timeout(t)) if attempt + 1 < MAX_REDIRECTS => {
                    // The master did not even take the connection in time: stopped, or gone.
                    tracing::debug!(key, node = %addr, "no connection within {t:?}; re-resolving");
                    cluster.forget_conn(&addr);
                    cluster.forget_slots();
                    continue;
                }
                other => return other,
            };
            match (e.0.kind(), e.0.redirect_node()) {
                (ErrorKind::Moved, Some((to, _))) => {
                    tracing::debug!(key, from = %addr, to, "blocking command moved");
                    redirect = Some((normalize_addr(to), false));
                    cluster.forget_slots();
                }
                (ErrorKind::Ask, Some((to, _))) => redirect = Some((normalize_addr(to), true)),
                _ if is_topology_change(&e.0) => {
                    tracing::debug!(key, node = %addr, error = %e, "cluster changing; re-resolving");
                    cluster.forget_slots();
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
                }
                _ => return Err(NodeFailure::Redis(e)),
            }
            last = Some(e);
        }
        // Not the last redirection itself: for a cluster client a redirection is the cluster
        // moving, worth another try later, while a bare MOVED is a permanent failure.
        Err(NodeFailure::Protocol(match last {
            Some(e) => format!("too many redirections or topology changes (last: {e})"),
            None => "too many redirections".into(),
        }))
    }

    /// [`Node::blocking_query`] on a Sentinel-managed master: on a connection of its own to
    /// the master the sentinels name, watched as every wait is, and moved (the same command,
    /// the same owner) to the master they name after a failover, or after an error that says
    /// this one no longer is one (`READONLY`, a waiter unblocked by a role change, a lost
    /// connection).
    async fn blocking_sentinel<T: FromRedisValue>(
        &self,
        sentinel: &Sentinel,
        key: &str,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let via = Via::Sentinel(sentinel);
        let mut last = None;
        for attempt in 0..MAX_REDIRECTS {
            let addr = match sentinel.master(connect_timeout).await {
                Ok(addr) => addr,
                Err(e) if attempt > 0 && !e.is_permanent() => {
                    tokio::time::sleep(WATCH_WAIT_EVERY).await;
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let wait = async {
                let (mut conn, id) =
                    start_waiting(sentinel.master_info(&addr)?, connect_timeout).await?;
                tokio::select! {
                    result = cmd.query_async::<T>(&mut conn) => Ok(Some(result.map_err(NodeFailure::from))),
                    () = watch_wait(id, &via, connect_timeout) => {
                        tracing::warn!(node = %addr, key, "a waiting connection went silent; waiting again on a new one");
                        kill_waiting(id, &via, connect_timeout).await;
                        Ok(None)
                    }
                }
            };
            let outcome: Result<Option<Result<T, NodeFailure>>, NodeFailure> = tokio::select! {
                outcome = wait => outcome,
                () = sentinel.watch_failover(&addr, connect_timeout) => {
                    tracing::debug!(key, node = %addr, "the sentinels name a new master; waiting there");
                    continue;
                }
            };
            let failure = match outcome {
                Ok(Some(Ok(value))) => return Ok(value),
                Ok(None) => continue,
                Ok(Some(Err(NodeFailure::Redis(e)))) | Err(NodeFailure::Redis(e))
                    if is_topology_change(&e.0) =>
                {
                    NodeFailure::Redis(e)
                }
                Ok(Some(Err(failure @ NodeFailure::Timeout(_))))
                | Err(failure @ NodeFailure::Timeout(_)) => failure,
                Ok(Some(Err(other))) | Err(other) => return Err(other),
            };
            tracing::debug!(key, node = %addr, error = %failure, "master changing; asking the sentinels again");
            sentinel.forget();
            tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
            last = Some(failure);
        }
        Err(NodeFailure::Protocol(match last {
            Some(e) => format!("too many master changes (last: {e})"),
            None => "too many master changes".into(),
        }))
    }

    /// The `host:port` of the master serving `key`: for a cluster from its slot map, for a
    /// Sentinel-managed master what the sentinels say, for a single server the server itself.
    pub(crate) async fn master_of(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<String, NodeFailure> {
        match &self.backend {
            Backend::Server { .. } => Ok(self.name.clone()),
            Backend::Cluster(cluster) => cluster.master_of(key, timeout).await,
            Backend::Sentinel(sentinel) => sentinel.master(timeout).await,
        }
    }

    /// The name to report for `key`: in a cluster its master's `host:port` (best effort).
    pub(crate) async fn name_for(&self, key: &str, timeout: Duration) -> String {
        match self.master_of(key, timeout).await {
            Ok(addr) => addr,
            Err(_) => self.name.clone(),
        }
    }

    /// The masters this node stands for: itself (a server, or the master the sentinels
    /// name), or every master of a cluster's slot map, by `host:port`.
    pub(crate) async fn masters(&self, timeout: Duration) -> Result<Vec<String>, NodeFailure> {
        match &self.backend {
            Backend::Cluster(cluster) => cluster.masters(timeout).await,
            Backend::Server { .. } | Backend::Sentinel(_) => Ok(vec![self.name.clone()]),
        }
    }

    /// `cmd` on `master`, one of [`Node::masters`], routed by no key: for what a whole server
    /// answers (`INFO`, `LOCK.STATS`, `LOCK.LOG`), and for a key that master named.
    pub(crate) async fn query_master<T: FromRedisValue>(
        &self,
        master: &str,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        match &self.backend {
            Backend::Cluster(cluster) => cluster.query_at(master, cmd, timeout).await,
            Backend::Server { .. } | Backend::Sentinel(_) => self.query("", cmd, timeout).await,
        }
    }
}

/// `cmd` (a blocking one) on the cluster node `addr` (after `ASKING` when `asking`), on a
/// connection of its own, watched as every wait is: `Ok(None)` when that connection went
/// silent (it is closed there, and the caller waits again).
async fn wait_on_cluster_node<T: FromRedisValue>(
    cluster: &Cluster,
    addr: &str,
    asking: bool,
    key: &str,
    cmd: &Cmd,
    connect_timeout: Duration,
) -> Result<Option<Result<T, NodeFailure>>, NodeFailure> {
    let via = Via::Cluster(cluster, addr);
    let (mut conn, id) =
        start_waiting(with_addr(&cluster.template, addr)?, connect_timeout).await?;
    if asking {
        redis::cmd("ASKING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(NodeFailure::from)?;
    }
    tokio::select! {
        result = cmd.query_async::<T>(&mut conn) => Ok(Some(result.map_err(NodeFailure::from))),
        () = watch_wait(id, &via, connect_timeout) => {
            tracing::warn!(node = %addr, key, "a waiting connection went silent; waiting again on a new one");
            kill_waiting(id, &via, connect_timeout).await;
            Ok(None)
        }
    }
}

/// How a waiting connection is watched: over the shared connection to the same server.
enum Via<'a> {
    Server(&'a Client, &'a Mutex<Option<MultiplexedConnection>>),
    Cluster(&'a Cluster, &'a str),
    Sentinel(&'a Sentinel),
}

impl Via<'_> {
    /// `cmd` over the shared connection, within `timeout`; a connection that does not answer
    /// in time is dropped, so that the next check connects again.
    async fn ask<T: FromRedisValue>(&self, cmd: &Cmd, timeout: Duration) -> Result<T, NodeFailure> {
        let attempt = async {
            let mut conn = match self {
                Via::Server(client, slot) => shared_conn(client, slot).await?,
                Via::Cluster(cluster, addr) => cluster.conn(addr, timeout).await?,
                Via::Sentinel(sentinel) => sentinel.shared(timeout).await?,
            };
            Ok::<T, NodeFailure>(cmd.query_async::<T>(&mut conn).await?)
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(NodeFailure::Timeout(timeout)),
        };
        if let Err(e) = &result {
            if !matches!(e, NodeFailure::Redis(r) if is_error_reply(&r.0)) {
                match self {
                    Via::Server(_, slot) => *slot.lock().await = None,
                    Via::Cluster(cluster, addr) => cluster.forget_conn(addr),
                    Via::Sentinel(sentinel) => sentinel.forget(),
                }
            }
        }
        result
    }
}

/// What the server says of a waiting connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Blocked in its wait (or, without its id, the server answers).
    Blocked,
    /// Connected, not blocked: its answer was sent (or its command never arrived).
    Answered,
    /// Not connected any more.
    Gone,
    /// No answer.
    Unknown,
}

/// A new connection for `LOCK.WAIT`, and how the server knows it (`CLIENT ID`; `None` where
/// an ACL forbids `CLIENT`: then only the server's answers are checked).
async fn start_waiting(
    info: ConnectionInfo,
    timeout: Duration,
) -> Result<(MultiplexedConnection, Option<i64>), NodeFailure> {
    let mut conn = connect(info, timeout).await?;
    let id = match tokio::time::timeout(
        timeout,
        redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut conn),
    )
    .await
    {
        Ok(Ok(id)) => Some(id),
        // NOPERM and the like: watch without it.
        Ok(Err(e)) if is_error_reply(&e) => None,
        Ok(Err(e)) => return Err(NodeFailure::from(e)),
        Err(_) => return Err(NodeFailure::Timeout(timeout)),
    };
    Ok((conn, id))
}

/// Whether the server answered with an error (rather than the connection failing).
fn is_error_reply(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::ResponseError || e.code().is_some()
}

/// Returns once the waiting connection known as `id` counts as dead (see
/// [`Node::blocking_query`]); never while it is fine.
async fn watch_wait(mut id: Option<i64>, via: &Via<'_>, timeout: Duration) {
    let (mut answered, mut unanswered) = (0u32, 0u32);
    // A check that goes unanswered may only mean a slow link, and taking a waiting
    // connection for dead costs its place in the queue: a check gets at least a second.
    let check_within = timeout.max(WATCH_WAIT_EVERY);
    loop {
        // A connection seen answered gets `timeout` for the answer to arrive.
        let next_check = if answered > 0 {
            timeout
        } else {
            WATCH_WAIT_EVERY
        };
        tokio::time::sleep(next_check).await;
        let seen = match id {
            Some(client) => {
                let mut list = redis::cmd("CLIENT");
                list.arg("LIST").arg("ID").arg(client);
                match via.ask::<String>(&list, check_within).await {
                    Ok(text) => parse_client_list(&text),
                    Err(NodeFailure::Redis(e)) if is_error_reply(&e.0) => {
                        // CLIENT LIST forbidden: check the server only.
                        id = None;
                        continue;
                    }
                    Err(_) => Seen::Unknown,
                }
            }
            None => match via.ask::<Value>(&redis::cmd("PING"), check_within).await {
                Ok(_) => Seen::Blocked,
                Err(_) => Seen::Unknown,
            },
        };
        match seen {
            Seen::Blocked => (answered, unanswered) = (0, 0),
            Seen::Gone => return,
            Seen::Answered => {
                answered += 1;
                if answered >= 2 {
                    return;
                }
            }
            Seen::Unknown => {
                answered = 0;
                unanswered += 1;
                if unanswered >= UNANSWERED_CHECKS {
                    return;
                }
            }
        }
    }
}

/// Closes a dead waiting connection on the server's side too, if the server still has it
/// (so that it leaves the queue), best effort.
async fn kill_waiting(id: Option<i64>, via: &Via<'_>, timeout: Duration) {
    if let Some(id) = id {
        let mut kill = redis::cmd("CLIENT");
        kill.arg("KILL").arg("ID").arg(id);
        let _ = via.ask::<Value>(&kill, timeout).await;
    }
}

/// `CLIENT LIST ID n`: one line (`id=n addr=... flags=b ...`) while the client is connected,
/// `flags` holding `b` while it is blocked; nothing once it is gone.
fn parse_client_list(text: &str) -> Seen {
    let Some(line) = text.lines().find(|l| !l.trim().is_empty()) else {
        return Seen::Gone;
    };
    let flags = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("flags="));
    match flags {
        Some(flags) if flags.contains('b') => Seen::Blocked,
        Some(_) => Seen::Answered,
        None => Seen::Unknown,
    }
}

async fn shared_conn(
    client: &Client,
    slot: &Mutex<Option<MultiplexedConnection>>,
) -> redis::RedisResult<MultiplexedConnection> {
    if let Some(c) = slot.lock().await.as_ref() {
        return Ok(c.clone());
    }
    // Connected without the slot held: a caller whose future is not polled for a while (a
    // `select!` busy in another branch) must not make every other caller wait for it. Two
    // callers may both connect; the first connection stored is kept.
    let c = client.get_multiplexed_async_connection().await?;
    Ok(slot.lock().await.get_or_insert(c).clone())
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384. The client's own, so
/// that cluster support costs no crate.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16_xmodem(tagged.unwrap_or(key)) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

impl Cluster {
    /// Sends `pipe` to the master of `key`, each attempt bounded by `timeout`. Follows `MOVED`
    /// and `ASK`. When the master does not answer in time, or answers that it is changing
    /// role, the slot map is read again and, if it names another master for the key, the
    /// pipeline is sent there once more (as far as `resend` allows).
    async fn call(
        &self,
        key: &str,
        pipe: &Pipeline,
        timeout: Duration,
        resend: Resend,
    ) -> Result<Vec<Value>, NodeFailure> {
        let mut redirect: Option<(String, bool)> = None;
        let mut rerouted = false;
        for _ in 0..MAX_REDIRECTS {
            let (addr, asking) = match redirect.take() {
                Some(r) => r,
                None => (self.master_of(key, timeout).await?, false),
            };
            let attempt = async {
                let mut conn = self.conn(&addr, timeout).await?;
                let result = if asking {
                    let mut asked = redis::pipe();
                    asked.cmd("ASKING").ignore();
                    for cmd in pipe.cmd_iter() {
                        asked.add_command(cmd.clone());
                    }
                    asked.query_async::<Vec<Value>>(&mut conn).await
                } else {
                    pipe.query_async::<Vec<Value>>(&mut conn).await
                };
                result.map_err(NodeFailure::from)
            };
            let failure = match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(values)) => {
                    tracing::trace!(key, node = %addr, "answered");
                    return Ok(values);
                }
                Err(_) => NodeFailure::Timeout(timeout),
                Ok(Err(NodeFailure::Redis(e))) => match (e.0.kind(), e.0.redirect_node()) {
                    (ErrorKind::Moved, Some((to, _))) => {
                        tracing::debug!(key, from = %addr, to, "moved");
                        self.forget_slots();
                        redirect = Some((normalize_addr(to), false));
                        continue;
                    }
                    (ErrorKind::Ask, Some((to, _))) => {
                        redirect = Some((normalize_addr(to), true));
                        continue;
                    }
                    _ if is_topology_change(&e.0) => NodeFailure::Redis(e),
                    _ => return Err(NodeFailure::Redis(e)),
                },
                Ok(Err(failure @ NodeFailure::Timeout(_))) => failure,
                Ok(Err(other)) => return Err(other),
            };
            // The master did not answer, or is changing role: its slot may have a new master.
            self.forget_conn(&addr);
            self.forget_slots();
            if rerouted || !resend.allows(&failure) {
                return Err(failure);
            }
            rerouted = true;
            match self.master_of(key, timeout).await {
                Ok(next) if next != addr => {
                    tracing::debug!(key, from = %addr, to = %next, error = %failure, "master changed");
                }
                _ => return Err(failure),
            }
        }
        Err(NodeFailure::Protocol("too many redirections".into()))
    }

    /// Every master of the slot map (read first if there is none), in slot order.
    async fn masters(&self, timeout: Duration) -> Result<Vec<String>, NodeFailure> {
        let timeout = timeout.max(MIN_TOPOLOGY_TIMEOUT);
        let mut topology = lock_within(&self.topology, timeout).await?;
        if topology.ranges.is_empty() {
            self.refresh(&mut topology, timeout).await?;
        }
        let mut masters: Vec<String> = Vec::new();
        for (_, _, addr) in &topology.ranges {
            if !masters.contains(addr) {
                masters.push(addr.clone());
            }
        }
        Ok(masters)
    }

    /// `cmd` on the node at `addr`, within `timeout`, following no redirection. A node that
    /// does not answer makes the next call read the slot map again (a failover may be under
    /// way).
    async fn query_at<T: FromRedisValue>(
        &self,
        addr: &str,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let attempt = async {
            let mut conn = self.conn(addr, timeout).await?;
            cmd.query_async::<T>(&mut conn)
                .await
                .map_err(NodeFailure::from)
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(NodeFailure::Timeout(timeout)),
        };
        if let Err(e) = &result {
            if !matches!(e, NodeFailure::Redis(r) if is_error_reply(&r.0)) {
                self.forget_conn(addr);
                self.forget_slots();
            }
        }
        result
    }

    /// The shared connection to `addr`, made (within `timeout`) if there is none.
    async fn conn(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, NodeFailure> {
        if let Some(c) = self.cached(addr) {
            return Ok(c);
        }
        let c = connect(with_addr(&self.template, addr)?, timeout).await?;
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        Ok(conns.entry(addr.to_string()).or_insert(c).clone())
    }

    fn cached(&self, addr: &str) -> Option<MultiplexedConnection> {
        let conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.get(addr).cloned()
    }

    fn forget_conn(&self, addr: &str) {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.remove(addr);
    }

    /// Drops the slot map, so that the next request reads it again. Never waits: a caller
    /// holding it is reading the map again already, or will find out again on its own.
    fn forget_slots(&self) {
        if let Ok(mut topology) = self.topology.try_lock() {
            topology.ranges.clear();
        }
    }

    /// The master of `key`'s slot, from the slot map, read first if there is none.
    async fn master_of(&self, key: &str, timeout: Duration) -> Result<String, NodeFailure> {
        let slot = key_slot(key.as_bytes());
        let find = |ranges: &[(u16, u16, String)]| {
            ranges
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, addr)| addr.clone())
        };
        // Held while refreshing, so that concurrent callers wait for one refresh (within
        // their timeout).
        let timeout = timeout.max(MIN_TOPOLOGY_TIMEOUT);
        let mut topology = lock_within(&self.topology, timeout).await?;
        if topology.ranges.is_empty() {
            self.refresh(&mut topology, timeout).await?;
        }
        find(&topology.ranges)
            .ok_or_else(|| NodeFailure::Protocol(format!("no master serves slot {slot}")))
    }

    /// Asks every node we know (seeds and every node of earlier maps) for `CLUSTER SLOTS` at
    /// once and takes the first complete answer: a stopped node cannot hold it up.
    async fn refresh(&self, topology: &mut Topology, timeout: Duration) -> Result<(), NodeFailure> {
        let mut candidates = self.seeds.clone();
        for addr in &topology.known {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        let mut asks: FuturesUnordered<_> = candidates
            .iter()
            .map(|addr| async move {
                let ask = async {
                    let mut conn = self.conn(addr, timeout).await?;
                    let reply: Value = redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async(&mut conn)
                        .await?;
                    parse_slots(&reply, addr)
                };
                let result = match tokio::time::timeout(timeout, ask).await {
                    Ok(r) => r,
                    Err(_) => Err(NodeFailure::Timeout(timeout)),
                };
                if result.is_err() {
                    self.forget_conn(addr);
                }
                result
            })
            .collect();
        let mut last = NodeFailure::Protocol("no node to ask for the slot map".into());
        while let Some(result) = asks.next().await {
            match result {
                Ok(map) if !map.ranges.is_empty() => {
                    topology.ranges = map.ranges;
                    for addr in map.nodes {
                        if !topology.known.contains(&addr) {
                            topology.known.push(addr);
                        }
                    }
                    return Ok(());
                }
                Ok(_) => last = NodeFailure::Protocol("CLUSTER SLOTS: no slots".into()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Returns once the master at `addr` stops answering `PING` while the slot map names
    /// another master for `key`; never otherwise.
    async fn watch_master(&self, key: &str, addr: &str, timeout: Duration) {
        loop {
            tokio::time::sleep(WATCH_MASTER_EVERY).await;
            let ping = tokio::time::timeout(timeout, async {
                let mut conn = self.conn(addr, timeout).await?;
                redis::cmd("PING")
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(NodeFailure::from)
            })
            .await;
            if matches!(ping, Ok(Ok(()))) {
                continue;
            }
            self.forget_conn(addr);
            self.forget_slots();
            if self
                .master_of(key, timeout)
                .await
                .is_ok_and(|now| now != addr)
            {
                return;
            }
        }
    }
}

/// The replicas a `ROLE` reply lists, if it is a master's (`["master", offset, [replica...]]`).
fn parse_role_replicas(role: &Value) -> Result<u64, NodeFailure> {
    let bad = || NodeFailure::Protocol(format!("ROLE: {role:?}"));
    let Value::Array(items) = role else {
        return Err(bad());
    };
    let name = items
        .first()
        .and_then(|v| String::from_redis_value(v).ok())
        .ok_or_else(bad)?;
    if name != "master" {
        return Err(NodeFailure::Protocol(format!(
            "the node is a {name} now, not a master"
        )));
    }
    match items.get(2) {
        Some(Value::Array(replicas)) => Ok(replicas.len() as u64),
        _ => Ok(0),
    }
}

/// A parsed `CLUSTER SLOTS`: the ranges and every node it names (masters and replicas).
struct SlotMap {
    ranges: Vec<(u16, u16, String)>,
    nodes: Vec<String>,
}

/// `CLUSTER SLOTS`, asked of `from` (whose host stands in for an empty or `?` one).
fn parse_slots(reply: &Value, from: &str) -> Result<SlotMap, NodeFailure> {
    let bad = || NodeFailure::Protocol(format!("CLUSTER SLOTS: {reply:?}"));
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let from_host = split_addr(from).map_or("", |(h, _)| h);
    let mut map = SlotMap {
        ranges: Vec::with_capacity(ranges.len()),
        nodes: Vec::new(),
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(start), Some(end)) = (fields.first(), fields.get(1)) else {
            return Err(bad());
        };
        let mut addrs = Vec::new();
        for node in &fields[2..] {
            let Value::Array(node) = node else {
                return Err(bad());
            };
            let (Some(host), Some(port)) = (node.first(), node.get(1)) else {
                return Err(bad());
            };
            let host = String::from_redis_value(host)?;
            let host = if host.is_empty() || host == "?" {
                from_host
            } else {
                host.as_str()
            };
            addrs.push(host_port(host, u16::from_redis_value(port)?));
        }
        let Some(master) = addrs.first().cloned() else {
            return Err(bad());
        };
        map.ranges.push((
            u16::from_redis_value(start)?,
            u16::from_redis_value(end)?,
            master,
        ));
        for addr in addrs {
            if !map.nodes.contains(&addr) {
                map.nodes.push(addr);
            }
        }
    }
    Ok(map)
}

/// Whether a command's connection ended before its answer came (it may have run); not an
/// answer, an error reply included, nor a timeout, nor a connection refused (nothing sent).
pub(crate) fn connection_ended(failure: &redis::RedisError) -> bool {
    (failure.is_io_error() || failure.is_connection_dropped()) && !failure.is_connection_refusal()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build without the sentinel or tls feature refuses the URLs that need it, saying so,
    /// before any connection.
    #[test]
    fn urls_of_a_missing_feature_are_refused() {
        let refused = |url: &str| match Node::open(url, &Tls::default()) {
            Err(Error::InvalidUrl { source, .. }) => source.to_string(),
            Err(e) => panic!("{url}: {e}"),
            Ok(_) => String::new(),
        };
        let sentinel = refused("redis+sentinel://127.0.0.1:26379/m");
        assert_eq!(
            sentinel.contains("sentinel feature"),
            cfg!(not(feature = "sentinel")),
            "{sentinel}"
        );
        let tls = refused("rediss://127.0.0.1:6380/");
        assert_eq!(
            tls.contains("tls feature"),
            cfg!(not(feature = "tls")),
            "{tls}"
        );
    }

    /// The slots Redis Cluster gives (CLUSTER KEYSLOT; the spec's CRC16 check value for
    /// "123456789" is 0x31C3), hash tags included.
    #[test]
    fn key_slots_are_redis_clusters() {
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        // An empty tag is no tag; only the first { counts.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A caller whose connect is left pending (its task busy in another branch of a
    /// `select!`, or stopped) must not hold the shared slot: lockctl waited forever for a slot
    /// held by its own starved acquisition.
    #[tokio::test]
    async fn a_pending_connect_does_not_hold_the_shared_slot() {
        // Accepts connections (in its backlog) and never answers the connection's setup.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = Client::open(format!("redis://{}", silent.local_addr().expect("addr")))
            .expect("client");
        let slot = Mutex::new(None);
        let mut pending = Box::pin(shared_conn(&client, &slot));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut pending)
                .await
                .is_err(),
            "the silent server answered"
        );
        assert!(
            slot.try_lock().is_ok(),
            "a pending connect holds the shared slot"
        );
        drop(pending);
    }

    #[test]
    fn parses_cluster_slots() {
        let node = |port: i64| Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]);
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node(7000),
                node(7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7001)]),
        ]);
        let map = parse_slots(&v, "127.0.0.1:7000").unwrap();
        assert_eq!(
            map.ranges,
            vec![
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 16383, "127.0.0.1:7001".to_string())
            ]
        );
        assert_eq!(
            map.nodes,
            ["127.0.0.1:7000", "127.0.0.1:7003", "127.0.0.1:7001"]
        );
        assert!(parse_slots(&Value::Int(1), "127.0.0.1:7000").is_err());
    }

    /// A renewal counts with fewer acknowledgements only on a node that is still a master:
    /// an old master that just became a replica has no replicas either.
    #[test]
    fn role_replicas_only_of_a_master() {
        let master = Value::Array(vec![
            bulk("master"),
            Value::Int(100),
            Value::Array(vec![Value::Array(vec![
                bulk("127.0.0.1"),
                bulk("7003"),
                bulk("100"),
            ])]),
        ]);
        assert_eq!(parse_role_replicas(&master).ok(), Some(1));
        let alone = Value::Array(vec![bulk("master"), Value::Int(0), Value::Array(vec![])]);
        assert_eq!(parse_role_replicas(&alone).ok(), Some(0));
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(7001),
            bulk("connected"),
            Value::Int(100),
        ]);
        let err = parse_role_replicas(&replica).expect_err("a replica");
        assert!(err.to_string().contains("slave now"), "{err}");
        assert!(parse_role_replicas(&Value::Nil).is_err());
    }

    #[test]
    fn client_list_lines() {
        let line = "id=7 addr=127.0.0.1:5 laddr=127.0.0.1:6 fd=9 name= age=3 idle=3 flags=b db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=20 multi-mem=0 rbs=1024 rbp=0 obl=0 oll=0 omem=0 tot-mem=1800 events=r cmd=lock.wait user=default redir=-1 resp=2\n";
        assert_eq!(parse_client_list(line), Seen::Blocked);
        assert_eq!(
            parse_client_list(&line.replace("flags=b", "flags=N")),
            Seen::Answered
        );
        assert_eq!(parse_client_list(""), Seen::Gone);
        assert_eq!(parse_client_list("\n"), Seen::Gone);
        assert_eq!(parse_client_list("garbage"), Seen::Unknown);
    }

    #[test]
    fn readdresses_a_template() {
        let t = "redis://:pw@10.0.0.1:7000/0"
            .into_connection_info()
            .unwrap();
        let info = with_addr(&t, "127.0.0.1:7005").unwrap();
        assert_eq!(info.addr.to_string(), "127.0.0.1:7005");
        assert_eq!(info.redis.password.as_deref(), Some("pw"));
        assert!(with_addr(&t, "nope").is_err());
        let v6 = with_addr(&t, "[::1]:7001").unwrap();
        assert_eq!(v6.addr, ConnectionAddr::Tcp("::1".into(), 7001));
        assert_eq!(display_addr(&v6.addr), "[::1]:7001");
        assert_eq!(normalize_addr("::1:7002"), "[::1]:7002");
        assert_eq!(normalize_addr("10.0.0.1:7002"), "10.0.0.1:7002");
    }

    #[test]
    fn ipv6_slot_maps_and_empty_hosts() {
        let node = |host: &str, port: i64| Value::Array(vec![bulk(host), Value::Int(port)]);
        let v = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            node("::1", 7000),
            node("", 7001),
        ])]);
        let map = parse_slots(&v, "[fe80::2]:7005").unwrap();
        assert_eq!(map.ranges, vec![(0, 16383, "[::1]:7000".to_string())]);
        assert_eq!(map.nodes, ["[::1]:7000", "[fe80::2]:7001"]);
    }
}
