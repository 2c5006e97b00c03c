//! Reaching a server: addresses as they are written in messages and read from redirections,
//! connections made within a timeout, what tells two URLs apart, and the errors that mean a
//! server's role is changing under us.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind};

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
        Err(e) => Err(NodeFailure::Redis(e)),
    }
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
