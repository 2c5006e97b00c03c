//! A master managed by Redis Sentinel, known by a `redis+sentinel://` URL: the sentinels say
//! which server is the master (`SENTINEL get-master-addr-by-name`), asked again at most a
//! second before any request and at once after a failure, so that renewals, releases and
//! waits follow a failover to the promoted replica.
//!
//! ```text
//! redis+sentinel://[user:password@]host[:port][,host[:port]...]/master-name[/db]
//!     [?sentinel_username=...&sentinel_password=...]
//! rediss+sentinel://...   (TLS to the master and to the sentinels)
//! ```
//!
//! The user and password authenticate to the master (and its replicas); the sentinels'
//! own, if they have one, go in the query. The port defaults to 26379.

// Without the sentinel feature, no URL reaches this code (Node::open refuses them).
#![cfg_attr(not(feature = "sentinel"), allow(dead_code))]

use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionInfo, IntoConnectionInfo, Pipeline, Value};
use tokio::sync::Mutex;

use crate::conn::{
    connect, host_port, is_topology_change, lock_within, split_addr, with_addr, Resend,
};
use crate::error::{Error, NodeFailure, ServerError};
use crate::tls::Tls;

/// How long an answer of the sentinels is used before they are asked again.
const RESOLVED_FOR: Duration = Duration::from_secs(1);
/// The least time asking the sentinels gets, however short the caller's timeout.
const MIN_RESOLVE_TIMEOUT: Duration = Duration::from_millis(500);
/// The sentinels' port when a URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// The sentinels' own login from a URL's query (`sentinel_username=...&sentinel_password=...`),
/// as the `user:password@` part of their URLs (empty without a password); why not, for an
/// unknown parameter.
fn sentinel_auth(query: &str) -> Result<String, String> {
    let (mut user, mut password) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_username", v)) => user = Some(percent_decode(v)),
            Some(("sentinel_password", v)) => password = Some(percent_decode(v)),
            _ => return Err(format!("unknown parameter {pair:?}")),
        }
    }
    Ok(match (&user, &password) {
        (Some(u), Some(p)) => format!("{}:{}@", percent_encode(u), percent_encode(p)),
        (None, Some(p)) => format!(":{}@", percent_encode(p)),
        _ => String::new(),
    })
}

/// Whether `url` names a Sentinel-managed master.
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    scheme.eq_ignore_ascii_case("redis+sentinel") || scheme.eq_ignore_ascii_case("rediss+sentinel")
}

/// A Sentinel-managed master.
pub(crate) struct Sentinel {
    /// The name the sentinels monitor it by.
    pub(crate) master_name: String,
    /// How to reach each sentinel.
    sentinels: Vec<ConnectionInfo>,
    /// The sentinels as `host:port`, for messages.
    pub(crate) sentinel_names: Vec<String>,
    /// How to reach the master (auth, db, TLS); the address is what the sentinels say.
    template: ConnectionInfo,
    current: Mutex<Option<Current>>,
}

/// The master as last resolved, and the shared connection to it.
struct Current {
    addr: String,
    conn: Option<MultiplexedConnection>,
    resolved_at: Instant,
}

impl Sentinel {
    /// The database number the master's connections select.
    pub(crate) fn db(&self) -> i64 {
        self.template.redis.db
    }

    /// Parses `url` (see the module's documentation). Nothing is asked here.
    pub(crate) fn open(url: &str, tls: &Tls) -> Result<Sentinel, Error> {
        let invalid = |why: &str| Error::InvalidUrl {
            url: url.to_string(),
            source: ServerError(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "invalid Sentinel URL",
                format!(
                    "{why} (redis+sentinel://[user:password@]host[:port][,host[:port]...]/\
                     master-name[/db])"
                ),
            ))),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        let secure = scheme.to_ascii_lowercase().starts_with("rediss");
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = rest
            .split_once('/')
            .ok_or_else(|| invalid("no master name"))?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let master_name = parts
            .next()
            .map(percent_decode)
            .ok_or_else(|| invalid("no master name"))?;
        let db = parts.next().unwrap_or("0");
        if parts.next().is_some() || db.parse::<i64>().is_err() {
            return Err(invalid("the path is /master-name or /master-name/db"));
        }
        let auth = sentinel_auth(query.unwrap_or_default()).map_err(|why| invalid(&why))?;
        let plain = if secure { "rediss" } else { "redis" };
        let mut sentinels = Vec::new();
        let mut sentinel_names = Vec::new();
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            let addr = if split_addr(host).is_some() && !host.ends_with(']') {
                host.to_string()
            } else {
                format!("{host}:{SENTINEL_PORT}")
            };
            let info = format!("{plain}://{auth}{addr}/0")
                .into_connection_info()
                .map_err(|e| invalid(&format!("sentinel {host:?}: {e}")))?;
            let info = tls.client(info, url)?.get_connection_info().clone();
            let (h, p) = split_addr(&addr).ok_or_else(|| invalid("a sentinel's address"))?;
            sentinel_names.push(host_port(h, p));
            sentinels.push(info);
        }
        if sentinels.is_empty() {
            return Err(invalid("no sentinel"));
        }
        // The master's settings, for an address filled in later.
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let template = format!("{plain}://{auth}127.0.0.1:6379/{db}")
            .into_connection_info()
            .map_err(|e| invalid(&e.to_string()))?;
        let template = tls.client(template, url)?.get_connection_info().clone();
        Ok(Sentinel {
            master_name,
            sentinels,
            sentinel_names,
            template,
            current: Mutex::new(None),
        })
    }

    /// The master's `host:port` as last resolved, if it has been.
    /// Never waits: while another caller resolves or connects, that is not known yet.
    pub(crate) fn last_known(&self) -> Option<String> {
        let current = self.current.try_lock().ok()?;
        current.as_ref().map(|c| c.addr.clone())
    }

    /// Asks every sentinel at once which server is the master and takes the first answer.
    /// A name no sentinel monitors is a permanent failure.
    pub(crate) async fn resolve(&self, timeout: Duration) -> Result<String, NodeFailure> {
        let timeout = timeout.max(MIN_RESOLVE_TIMEOUT);
        let mut asks: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|info| async move {
                let ask = async {
                    let mut conn = connect(info.clone(), timeout).await?;
                    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&self.master_name)
                        .query_async(&mut conn)
                        .await?;
                    Ok::<_, NodeFailure>(reply)
                };
                match tokio::time::timeout(timeout, ask).await {
                    Ok(r) => r,
                    Err(_) => Err(NodeFailure::Timeout(timeout)),
                }
            })
            .collect();
        let (mut unknown, mut last) = (0, None);
        while let Some(answer) = asks.next().await {
            match answer {
                Ok(Some((host, port))) => return Ok(host_port(&host, port)),
                Ok(None) => unknown += 1,
                Err(e) => last = Some(e),
            }
        }
        if unknown > 0 && last.is_none() {
            return Err(NodeFailure::from(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no sentinel monitors a master named",
                self.master_name.clone(),
            ))));
        }
        Err(last.unwrap_or_else(|| NodeFailure::Protocol("no sentinel answered".into())))
    }

    /// The master's address and a shared connection to it: the one in use while the
    /// sentinels' answer is fresh, a new one when they name another master now.
    async fn conn(
        &self,
        timeout: Duration,
    ) -> Result<(String, MultiplexedConnection), NodeFailure> {
        let mut current = lock_within(&self.current, timeout).await?;
        let fresh = current
            .as_ref()
            .is_some_and(|c| c.resolved_at.elapsed() < RESOLVED_FOR && c.conn.is_some());
        if !fresh {
            match self.resolve(timeout).await {
                Ok(addr) => {
                    let keep = current.as_ref().is_some_and(|c| c.addr == addr);
                    if keep {
                        if let Some(c) = current.as_mut() {
                            c.resolved_at = Instant::now();
                        }
                    } else {
                        if let Some(old) = current.as_ref() {
                            tracing::info!(master = %self.master_name, from = %old.addr, to = %addr, "the sentinels name a new master");
                        }
                        *current = Some(Current {
                            addr,
                            conn: None,
                            resolved_at: Instant::now(),
                        });
                    }
                }
                // The sentinels do not answer: go on with the master we know, if any.
                Err(e) if current.is_some() && !e.is_permanent() => {
                    tracing::debug!(master = %self.master_name, error = %e, "sentinels not answering");
                }
                Err(e) => return Err(e),
            }
        }
        let Some(c) = current.as_mut() else {
            return Err(NodeFailure::Protocol("no master known".into()));
        };
        if c.conn.is_none() {
            c.conn = Some(connect(with_addr(&self.template, &c.addr)?, timeout).await?);
        }
        match &c.conn {
            Some(conn) => Ok((c.addr.clone(), conn.clone())),
            None => Err(NodeFailure::Protocol("no connection".into())),
        }
    }

    /// Drops what is known of the master: the next request asks the sentinels first.
    /// Never waits: a caller holding it is resolving the master again already.
    pub(crate) fn forget(&self) {
        if let Ok(mut current) = self.current.try_lock() {
            *current = None;
        }
    }

    /// The shared connection to the master (for the checks of a wait).
    pub(crate) async fn shared(
        &self,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, NodeFailure> {
        self.conn(timeout).await.map(|(_, conn)| conn)
    }

    /// The master's `host:port` now.
    pub(crate) async fn master(&self, timeout: Duration) -> Result<String, NodeFailure> {
        self.conn(timeout).await.map(|(addr, _)| addr)
    }

    /// How to reach the master at `addr` on a connection of its own (for a blocking command).
    pub(crate) fn master_info(&self, addr: &str) -> Result<ConnectionInfo, NodeFailure> {
        with_addr(&self.template, addr)
    }

    /// Sends `pipe` to the master, within `timeout` per attempt. A master that does not answer
    /// in time, or answers that it is a replica (`READONLY`), or whose connection failed,
    /// makes the sentinels be asked again, and, if they name another master, the pipeline is
    /// sent there once more (as far as `resend` allows).
    pub(crate) async fn call(
        &self,
        pipe: &Pipeline,
        timeout: Duration,
        resend: Resend,
    ) -> Result<Vec<Value>, NodeFailure> {
        let mut rerouted = false;
        loop {
            let before = self.last_known();
            let attempt = async {
                let (_, mut conn) = self.conn(timeout).await?;
                pipe.query_async::<Vec<Value>>(&mut conn)
                    .await
                    .map_err(NodeFailure::from)
            };
            let failure = match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(values)) => return Ok(values),
                Ok(Err(NodeFailure::Redis(e))) if is_topology_change(&e.0) => NodeFailure::Redis(e),
                Ok(Err(failure @ NodeFailure::Timeout(_))) => failure,
                Ok(Err(other)) => return Err(other),
                Err(_) => NodeFailure::Timeout(timeout),
            };
            self.forget();
            if rerouted || !resend.allows(&failure) {
                return Err(failure);
            }
            rerouted = true;
            match self.resolve(timeout).await {
                Ok(next) if Some(&next) != before.as_ref() => {
                    tracing::debug!(master = %self.master_name, to = %next, error = %failure, "master changed");
                }
                _ => return Err(failure),
            }
        }
    }

    /// Returns once the sentinels name another master than `addr` (checked every second);
    /// never otherwise.
    pub(crate) async fn watch_failover(&self, addr: &str, timeout: Duration) {
        loop {
            tokio::time::sleep(RESOLVED_FOR).await;
            if self.resolve(timeout).await.is_ok_and(|now| now != addr) {
                self.forget();
                return;
            }
        }
    }
}

/// `%XX` escapes of a URL part, decoded (invalid ones are kept as they are).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL part with everything but unreserved characters escaped.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(url: &str) -> Result<Sentinel, Error> {
        Sentinel::open(url, &Tls::default())
    }

    #[test]
    fn urls() {
        let s = open("redis+sentinel://:pw@10.0.0.1:26380,10.0.0.2/orders/3").expect("valid");
        assert_eq!(s.master_name, "orders");
        assert_eq!(s.sentinel_names, ["10.0.0.1:26380", "10.0.0.2:26379"]);
        assert_eq!(s.template.redis.db, 3);
        assert_eq!(s.template.redis.password.as_deref(), Some("pw"));
        assert_eq!(
            s.sentinels[0].redis.password, None,
            "the master's password only"
        );
        let s = open("redis+sentinel://app:pw@[::1]:5000/my%20master?sentinel_password=s%40cret")
            .expect("valid");
        assert_eq!(s.master_name, "my master");
        assert_eq!(s.sentinel_names, ["[::1]:5000"]);
        assert_eq!(s.template.redis.username.as_deref(), Some("app"));
        assert_eq!(s.sentinels[0].redis.password.as_deref(), Some("s@cret"));
        assert!(matches!(
            open("rediss+sentinel://h/m").expect("TLS").template.addr,
            redis::ConnectionAddr::TcpTls { .. }
        ));
        for bad in [
            "redis+sentinel://h",
            "redis+sentinel://h/",
            "redis+sentinel:///m",
            "redis+sentinel://h/m/x",
            "redis+sentinel://h/m/1/2",
            "redis+sentinel://h/m?what=1",
        ] {
            assert!(open(bad).is_err(), "{bad}");
        }
        assert!(is_sentinel_url("REDIS+SENTINEL://h/m"));
        assert!(!is_sentinel_url("redis://h"));
    }

    #[test]
    fn escapes() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_encode("a b@c"), "a%20b%40c");
    }
}
