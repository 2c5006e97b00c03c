//! One master (or one Redis Cluster): its name, a cached multiplexed connection, and the
//! per-node timeout.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue,
    IntoConnectionInfo, Pipeline, RedisFuture, Value,
};
use tokio::sync::Mutex;

use crate::error::{Error, NodeError, NodeFailure};
use crate::LockInfo;

/// How many redirections (MOVED, ASK) or topology changes a blocking command follows.
const MAX_REDIRECTS: u32 = 16;
/// The least time a cluster client gets to connect to the seeds and learn the slot map.
const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a cluster client may take to start (connect to the nodes, read the slot map); a
/// paused node costs a connection or response timeout at each of those steps.
const CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Replica acknowledgements asked after a write (`WAIT replicas timeout`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// A master of the lock, or a whole Redis Cluster acting as one, reached through redis-rs.
pub(crate) struct Node {
    /// `host:port` (for a cluster, `cluster[seed,...]`), used in every error and log line.
    pub(crate) name: String,
    backend: Backend,
}

enum Backend {
    Server {
        client: Client,
        /// Shared by every non-blocking command; re-established after an I/O error.
        conn: Mutex<Option<MultiplexedConnection>>,
    },
    Cluster {
        client: ClusterClient,
        /// How to reach any one node: the first seed's settings (auth, db, protocol).
        template: ConnectionInfo,
        /// The cluster client's connection (it follows MOVED/ASK and refreshes its slot map).
        conn: Mutex<Option<ClusterConnection>>,
        /// Slot ranges and their masters from the last `CLUSTER SLOTS`, for blocking commands.
        slots: Mutex<Vec<(u16, u16, String)>>,
    },
}

/// Either kind of shared connection, used through one interface.
#[derive(Clone)]
enum Conn {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Node {
    pub(crate) fn open(url: &str) -> Result<Node, Error> {
        let client = Client::open(url).map_err(|source| Error::InvalidUrl {
            url: url.to_string(),
            source,
        })?;
        let name = client.get_connection_info().addr.to_string();
        Ok(Node {
            name,
            backend: Backend::Server {
                client,
                conn: Mutex::new(None),
            },
        })
    }

    /// One Redis Cluster, known by some of its nodes (`seeds`).
    /// `response_timeout` bounds every reply on the cluster client's connections (it must
    /// cover a `WAIT` for replica acknowledgements); without one a paused node would hold up
    /// the client's start forever.
    pub(crate) fn open_cluster(
        seeds: &[&str],
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Node, Error> {
        let infos = seeds
            .iter()
            .map(|u| {
                u.into_connection_info()
                    .map_err(|source| Error::InvalidUrl {
                        url: u.to_string(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let template = infos.first().cloned().ok_or(Error::NoServers)?;
        let names: Vec<String> = infos.iter().map(|i| i.addr.to_string()).collect();
        let client = ClusterClient::builder(infos)
            .connection_timeout(connect_timeout.max(CLUSTER_CONNECT_TIMEOUT))
            .response_timeout(response_timeout.max(CLUSTER_CONNECT_TIMEOUT))
            .build()
            .map_err(|source| Error::InvalidUrl {
                url: seeds.join(","),
                source,
            })?;
        Ok(Node {
            name: format!("cluster[{}]", names.join(",")),
            backend: Backend::Cluster {
                client,
                template,
                conn: Mutex::new(None),
                slots: Mutex::new(Vec::new()),
            },
        })
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster { .. })
    }

    pub(crate) fn error(&self, failure: NodeFailure) -> NodeError {
        NodeError {
            node: self.name.clone(),
            failure,
        }
    }

    async fn shared_conn(&self) -> redis::RedisResult<Conn> {
        match &self.backend {
            Backend::Server { client, conn } => {
                let mut slot = conn.lock().await;
                if let Some(c) = slot.as_ref() {
                    return Ok(Conn::Server(c.clone()));
                }
                let c = client.get_multiplexed_async_connection().await?;
                *slot = Some(c.clone());
                Ok(Conn::Server(c))
            }
            Backend::Cluster { client, conn, .. } => {
                let mut slot = conn.lock().await;
                if let Some(c) = slot.as_ref() {
                    return Ok(Conn::Cluster(c.clone()));
                }
                let c = client.get_async_connection().await?;
                *slot = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
        }
    }

    async fn forget_conn(&self) {
        match &self.backend {
            Backend::Server { conn, .. } => *conn.lock().await = None,
            Backend::Cluster { conn, slots, .. } => {
                *conn.lock().await = None;
                slots.lock().await.clear();
            }
        }
    }

    /// Runs a non-blocking command on the shared connection; connecting counts against
    /// `timeout` too, so a dead or paused master costs at most `timeout`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        self.run(timeout, |mut conn| async move {
            cmd.query_async::<T>(&mut conn).await
        })
        .await
    }

    /// Runs the commands of `pipe` (not wrapped in `MULTI`; put `MULTI`/`EXEC` in it for a
    /// transaction) and then, when `acks` asks for it, `WAIT replicas timeout_ms` on the same
    /// connection, so that the count covers these writes. Returns `pipe`'s replies and how many
    /// replicas acknowledged (0 when not asked). In a cluster the whole pipeline goes to the
    /// master of the key of its first keyed command.
    pub(crate) async fn query_acked(
        &self,
        pipe: &Pipeline,
        acks: Option<Acks>,
        timeout: Duration,
    ) -> Result<(Vec<Value>, u64), NodeFailure> {
        let mut pipe = pipe.clone();
        if let Some(a) = acks {
            // WAIT 0 would mean "forever".
            let ms = u64::try_from(a.timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            pipe.cmd("WAIT").arg(a.replicas).arg(ms);
        }
        let pipe = &pipe;
        let mut values: Vec<Value> = self
            .run(timeout, |mut conn| async move {
                pipe.query_async::<Vec<Value>>(&mut conn).await
            })
            .await?;
        let acked = match acks {
            None => 0,
            Some(_) => match values.pop() {
                Some(v) => u64::from_redis_value(&v)?,
                None => return Err(NodeFailure::Protocol("WAIT: no reply".into())),
            },
        };
        Ok((values, acked))
    }

    async fn run<T, F, Fut>(&self, timeout: Duration, call: F) -> Result<T, NodeFailure>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let result = if self.is_cluster() {
            // A cluster client connects to every node and reads the slot map first; a node that
            // is down or paused holds that up to its connection timeout, once, which must not
            // fail every command of a short per-node timeout.
            let connect = tokio::time::timeout(CLUSTER_START_TIMEOUT, self.shared_conn());
            match connect.await {
                Err(_) => return Err(NodeFailure::Timeout(CLUSTER_START_TIMEOUT)),
                Ok(Err(e)) => Ok(Err(e)),
                Ok(Ok(conn)) => tokio::time::timeout(timeout, call(conn)).await,
            }
        } else {
            let attempt = async {
                let conn = self.shared_conn().await?;
                call(conn).await
            };
            tokio::time::timeout(timeout, attempt).await
        };
        match result {
            Err(_) => Err(NodeFailure::Timeout(timeout)),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.forget_conn().await;
                }
                Err(NodeFailure::Redis(e))
            }
        }
    }

    /// Runs a blocking command (`LOCK.WAIT`) on a connection of its own, so that it never stalls
    /// the shared one; dropping the future closes that connection, which takes us out of the
    /// master's wait queue.
    ///
    /// In a cluster the connection goes to the master of `key`'s slot (from `CLUSTER SLOTS`);
    /// a `MOVED` is followed to the new master, an `ASK` with `ASKING`, and a topology change
    /// under way (`TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, a waiter unblocked because its master
    /// became a replica, a refused connection) re-reads the slot map after a short pause.
    pub(crate) async fn blocking_query<T: FromRedisValue>(
        &self,
        key: &str,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let template = match &self.backend {
            Backend::Server { client, .. } => {
                let mut conn =
                    connect(client.get_connection_info().clone(), connect_timeout).await?;
                return Ok(cmd.query_async::<T>(&mut conn).await?);
            }
            Backend::Cluster { template, .. } => template,
        };
        let mut redirect: Option<(String, bool)> = None;
        let mut last = None;
        for attempt in 0..MAX_REDIRECTS {
            let (addr, asking) = match redirect.take() {
                Some(r) => r,
                None => (self.master_of(key, connect_timeout).await?, false),
            };
            let result = async {
                let mut conn = connect(with_addr(template, &addr)?, connect_timeout).await?;
                if asking {
                    redis::cmd("ASKING")
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(NodeFailure::Redis)?;
                }
                cmd.query_async::<T>(&mut conn)
                    .await
                    .map_err(NodeFailure::Redis)
            }
            .await;
            let e = match result {
                Err(NodeFailure::Redis(e)) => e,
                other => return other,
            };
            match (e.kind(), e.redirect_node()) {
                (ErrorKind::Moved, Some((to, _))) => {
                    tracing::debug!(key, from = %addr, to, "blocking command moved");
                    redirect = Some((to.to_string(), false));
                    self.forget_slots().await;
                }
                (ErrorKind::Ask, Some((to, _))) => redirect = Some((to.to_string(), true)),
                _ if is_topology_change(&e) => {
                    tracing::debug!(key, node = %addr, error = %e, "cluster changing; re-resolving");
                    self.forget_slots().await;
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
                }
                _ => return Err(NodeFailure::Redis(e)),
            }
            last = Some(e);
        }
        Err(last.map_or_else(
            || NodeFailure::Protocol("too many redirections".into()),
            NodeFailure::Redis,
        ))
    }

    /// The `host:port` of the master serving `key`: for a cluster from its slot map, for a
    /// single server the server itself.
    pub(crate) async fn master_of(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<String, NodeFailure> {
        let Backend::Cluster { slots, .. } = &self.backend else {
            return Ok(self.name.clone());
        };
        let slot = redis::cluster_routing::get_slot(key.as_bytes());
        let find = |map: &[(u16, u16, String)]| {
            map.iter()
                .find(|(s, e, _)| (*s..=*e).contains(&slot))
                .map(|(_, _, a)| a.clone())
        };
        if let Some(addr) = find(&slots.lock().await) {
            return Ok(addr);
        }
        let reply: Value = self
            .query(
                redis::cmd("CLUSTER").arg("SLOTS"),
                timeout.max(CLUSTER_CONNECT_TIMEOUT),
            )
            .await?;
        let map = parse_slots(&reply)?;
        let addr = find(&map);
        *slots.lock().await = map;
        addr.ok_or_else(|| NodeFailure::Protocol(format!("no master serves slot {slot}")))
    }

    /// The name to report for `key`: in a cluster its master's `host:port` (best effort).
    pub(crate) async fn name_for(&self, key: &str, timeout: Duration) -> String {
        if !self.is_cluster() {
            return self.name.clone();
        }
        match self.master_of(key, timeout).await {
            Ok(addr) => addr,
            Err(_) => self.name.clone(),
        }
    }

    async fn forget_slots(&self) {
        if let Backend::Cluster { slots, .. } = &self.backend {
            slots.lock().await.clear();
        }
    }
}

async fn connect(
    info: ConnectionInfo,
    timeout: Duration,
) -> Result<MultiplexedConnection, NodeFailure> {
    let client = Client::open(info)?;
    let config = AsyncConnectionConfig::new().set_connection_timeout(timeout);
    match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(c) => Ok(c),
        Err(e) if e.is_timeout() => Err(NodeFailure::Timeout(timeout)),
        Err(e) => Err(NodeFailure::Redis(e)),
    }
}

/// `template` (auth, db, protocol) pointed at `addr` (`host:port`).
fn with_addr(template: &ConnectionInfo, addr: &str) -> Result<ConnectionInfo, NodeFailure> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| NodeFailure::Protocol(format!("bad node address {addr:?}")))?;
    let mut info = template.clone();
    info.addr = match &template.addr {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    Ok(info)
}

/// Errors that mean the cluster's topology is changing under us: worth re-resolving.
fn is_topology_change(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::TryAgain | ErrorKind::ClusterDown | ErrorKind::ReadOnly | ErrorKind::MasterDown
    ) || e.code() == Some("UNBLOCKED")
        || e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
}

/// `CLUSTER SLOTS` as (first slot, last slot, master `host:port`).
fn parse_slots(reply: &Value) -> Result<Vec<(u16, u16, String)>, NodeFailure> {
    let bad = || NodeFailure::Protocol(format!("CLUSTER SLOTS: {reply:?}"));
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(start), Some(end), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let (Some(host), Some(port)) = (master.first(), master.get(1)) else {
            return Err(bad());
        };
        let host = String::from_redis_value(host)?;
        map.push((
            u16::from_redis_value(start)?,
            u16::from_redis_value(end)?,
            format!("{host}:{}", u16::from_redis_value(port)?),
        ));
    }
    Ok(map)
}

/// `LOCK.INFO`'s reply (flat array under RESP2, map under RESP3) as a [`LockInfo`].
pub(crate) fn parse_info(value: Value) -> Result<Option<LockInfo>, NodeFailure> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Nil => return Ok(None),
        Value::Map(m) => m,
        Value::Array(items) => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => return Err(NodeFailure::Protocol(format!("LOCK.INFO: {other:?}"))),
    };
    let mut owner = None;
    let (mut token, mut count, mut ttl, mut waiters) = (None, None, None, None);
    for (k, v) in pairs {
        let field: String = FromRedisValue::from_redis_value(&k)?;
        match field.as_str() {
            "owner" => {
                let raw: Vec<u8> = FromRedisValue::from_redis_value(&v)?;
                owner = Some(String::from_utf8_lossy(&raw).into_owned());
            }
            "token" => token = Some(u64::from_redis_value(&v)?),
            "count" => count = Some(u64::from_redis_value(&v)?),
            "ttl" => ttl = Some(i64::from_redis_value(&v)?),
            "waiters" => waiters = Some(u64::from_redis_value(&v)?),
            _ => {}
        }
    }
    match (owner, token, count, ttl, waiters) {
        (Some(owner), Some(token), Some(count), Some(ttl), Some(waiters)) => Ok(Some(LockInfo {
            owner,
            token,
            count,
            ttl: Duration::from_millis(ttl.max(0) as u64),
            waiters,
        })),
        _ => Err(NodeFailure::Protocol("LOCK.INFO: missing fields".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_resp2_info() {
        let v = Value::Array(vec![
            bulk("owner"),
            bulk("me"),
            bulk("token"),
            Value::Int(1_800_000_000_000_001),
            bulk("count"),
            Value::Int(2),
            bulk("ttl"),
            Value::Int(1500),
            bulk("waiters"),
            Value::Int(3),
        ]);
        let info = parse_info(v).unwrap().unwrap();
        assert_eq!(info.owner, "me");
        assert_eq!(info.token, 1_800_000_000_000_001);
        assert_eq!(info.count, 2);
        assert_eq!(info.ttl, Duration::from_millis(1500));
        assert_eq!(info.waiters, 3);
    }

    #[test]
    fn nil_info_is_none() {
        assert!(parse_info(Value::Nil).unwrap().is_none());
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
        assert_eq!(
            parse_slots(&v).unwrap(),
            vec![
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 16383, "127.0.0.1:7001".to_string())
            ]
        );
        assert!(parse_slots(&Value::Int(1)).is_err());
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
    }

    #[test]
    fn incomplete_info_is_an_error() {
        let v = Value::Array(vec![bulk("owner"), bulk("me")]);
        assert!(parse_info(v).is_err());
    }
}
