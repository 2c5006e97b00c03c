//! Reaching a server: addresses as they are written in messages and read from redirections,
//! connections made within a timeout, what tells two URLs apart, and the errors that mean a
//! server's role is changing under us.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind};

use tokio::sync::{Mutex, MutexGuard};

use crate::error::NodeFailure;

/// A multiplexed connection to `info`, made within `timeout` (a timeout is
/// [`NodeFailure::Timeout`]).
pub(crate) async fn connect(
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
        Err(e) => Err(NodeFailure::from(e)),
    }
}

/// `mutex` locked within `timeout` (a timeout is [`NodeFailure::Timeout`]). A lock held across
/// a request is held by a future that its task may stop polling for a while (a `select!` busy
/// in another branch): no other caller may wait for it longer than its own timeout.
pub(crate) async fn lock_within<T>(
    mutex: &Mutex<T>,
    timeout: Duration,
) -> Result<MutexGuard<'_, T>, NodeFailure> {
    tokio::time::timeout(timeout, mutex.lock())
        .await
        .map_err(|_| NodeFailure::Timeout(timeout))
}

/// `host:port`, with an IPv6 host in brackets (`[::1]:6379`); a unix socket's path.
pub(crate) fn display_addr(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            host_port(host, *port)
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
    }
}

pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A node address from a `MOVED`/`ASK` (`::1:7000` for IPv6) in our form (`[::1]:7000`).
pub(crate) fn normalize_addr(addr: &str) -> String {
    match split_addr(addr) {
        Some((host, port)) => host_port(host, port),
        None => addr.to_string(),
    }
}

/// `host:port` or `[v6]:port` (or a bare `v6:port`) as host and port.
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// `template` (auth, db, protocol) pointed at `addr` (`host:port`).
pub(crate) fn with_addr(
    template: &ConnectionInfo,
    addr: &str,
) -> Result<ConnectionInfo, NodeFailure> {
    let (host, port) = split_addr(addr)
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

/// Errors that mean the server's role (a cluster's topology, a Sentinel's master) is changing
/// under us: worth asking again where the master is.
pub(crate) fn is_topology_change(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::TryAgain | ErrorKind::ClusterDown | ErrorKind::ReadOnly | ErrorKind::MasterDown
    ) || e.code() == Some("UNBLOCKED")
        || e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
}

/// Whether a request may be sent again to a new master after its first master failed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resend {
    /// After any failure that may mean a failover (no answer in time, a dropped connection, a
    /// refusal as a replica): the lock commands, which are safe to run twice, and reads.
    AfterAnyFailure,
    /// Only after a refusal that says the first master did not run it (`READONLY`,
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`): a write through `LOCK.FENCED`, which would
    /// apply twice if the first master ran it and its reply was lost (the promoted replica has
    /// the same hold, so the token passes again).
    OnlyUnrun,
}

impl Resend {
    /// Whether `failure` of the first master allows sending the request again.
    pub(crate) fn allows(self, failure: &NodeFailure) -> bool {
        match (self, failure) {
            (Resend::AfterAnyFailure, _) => true,
            (Resend::OnlyUnrun, NodeFailure::Redis(e)) => matches!(
                e.0.kind(),
                ErrorKind::TryAgain
                    | ErrorKind::ClusterDown
                    | ErrorKind::ReadOnly
                    | ErrorKind::MasterDown
            ),
            (Resend::OnlyUnrun, _) => false,
        }
    }
}

/// The addresses a server URL reaches, in a comparable form.
pub(crate) fn server_identity(addr: &ConnectionAddr) -> Vec<String> {
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

/// An address as the server it reaches: an IPv4-mapped IPv6 address as the IPv4 address it
/// is, and the unspecified address (`0.0.0.0`, `::`), which a connection takes for this host's
/// own, as the loopback address (`127.0.0.1`, `::1`).
fn canonical(addr: SocketAddr) -> SocketAddr {
    let port = addr.port();
    match addr {
        SocketAddr::V4(v4) if v4.ip().is_unspecified() => (Ipv4Addr::LOCALHOST, port).into(),
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => (Ipv6Addr::LOCALHOST, port).into(),
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => canonical((v4, port).into()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_compare_as_the_server_they_reach() {
        let addr = |s: &str| s.parse::<SocketAddr>().expect("address");
        assert_eq!(canonical(addr("0.0.0.0:6379")), addr("127.0.0.1:6379"));
        assert_eq!(canonical(addr("[::]:6379")), addr("[::1]:6379"));
        assert_eq!(
            canonical(addr("[::ffff:10.0.0.1]:6379")),
            addr("10.0.0.1:6379")
        );
        assert_eq!(
            canonical(addr("[::ffff:0.0.0.0]:6379")),
            addr("127.0.0.1:6379")
        );
        assert_eq!(canonical(addr("10.0.0.1:6379")), addr("10.0.0.1:6379"));
        let same = |a: &str, b: &str| {
            let ident = |u: &str| server_identity(&ConnectionAddr::Tcp(u.to_string(), 6379));
            ident(a).iter().any(|x| ident(b).contains(x))
        };
        assert!(same("127.0.0.1", "0.0.0.0"));
        assert!(!same("127.0.0.1", "127.0.0.2"));
    }
}
