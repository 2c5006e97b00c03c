//! Errors, each naming the master (node) that failed.

use std::fmt;
use std::time::Duration;

/// Why one master did not do what was asked of it.
#[derive(Debug, thiserror::Error)]
pub enum NodeFailure {
    /// The master answered nil: the lock is held by another owner (or, for renew and release,
    /// no longer held by us).
    #[error("not granted (held by another owner or not held by us)")]
    NotGranted,
    /// The master did not answer within the per-node timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The connection failed or the master replied with an error.
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    /// The write was done, but fewer replicas than [`Options::replica_acks`] acknowledged it
    /// within [`Options::replica_ack_timeout`] (`WAIT`); an acquisition was undone on that
    /// master, an extension does not count.
    ///
    /// [`Options::replica_acks`]: crate::Options::replica_acks
    /// [`Options::replica_ack_timeout`]: crate::Options::replica_ack_timeout
    #[error("{}", replica_acks_message(*.acked, *.wanted, *.timeout, .master.as_deref()))]
    ReplicaAcks {
        /// How many replicas acknowledged.
        acked: u64,
        /// How many were required.
        wanted: u32,
        /// How long the master waited for them.
        timeout: Duration,
        /// In cluster mode, the master (`host:port`) that served the key.
        master: Option<String>,
    },
    /// The master replied something the LOCK.* contract does not allow.
    #[error("unexpected reply: {0}")]
    Protocol(String),
}

fn replica_acks_message(
    acked: u64,
    wanted: u32,
    timeout: Duration,
    master: Option<&str>,
) -> String {
    let on = master.map(|m| format!("master {m}: ")).unwrap_or_default();
    format!("{on}only {acked} of {wanted} required replica acknowledgements within {timeout:?}")
}

/// A [`NodeFailure`] together with the master it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{node}: {failure}")]
pub struct NodeError {
    /// The master, as `host:port`.
    pub node: String,
    /// What went wrong there.
    #[source]
    pub failure: NodeFailure,
}

/// The list of failed masters in a quorum error, printed as `a: why; b: why`.
#[derive(Debug, Default)]
pub struct NodeErrors(pub Vec<NodeError>);

impl fmt::Display for NodeErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no master failed");
        }
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl NodeErrors {
    /// The names of the masters that failed.
    pub fn nodes(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.node.as_str()).collect()
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client was built without any server URL.
    #[error("no servers given")]
    NoServers,
    /// A server URL could not be parsed.
    #[error("invalid server URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why redis-rs rejected it.
        #[source]
        source: redis::RedisError,
    },
    /// The ttl is outside 1 ms ..= 10^12 ms.
    #[error("invalid ttl {0:?} (must be 1 ms to 10^12 ms)")]
    InvalidTtl(Duration),
    /// Fewer than a quorum of masters granted (or renewed) the lock.
    #[error("lock {key:?}: no quorum, {granted} of {nodes} masters granted, {quorum} needed ({failures})")]
    NoQuorum {
        /// The lock's key.
        key: String,
        /// How many masters granted.
        granted: usize,
        /// How many masters there are.
        nodes: usize,
        /// How many grants were needed (nodes / 2 + 1).
        quorum: usize,
        /// The masters that did not grant, and why.
        failures: NodeErrors,
    },
    /// A quorum granted, but the round took so long that no validity was left.
    #[error(
        "lock {key:?}: quorum reached after {elapsed:?}, leaving no validity of the {ttl:?} ttl"
    )]
    ValidityExhausted {
        /// The lock's key.
        key: String,
        /// Time the round took.
        elapsed: Duration,
        /// The ttl asked for.
        ttl: Duration,
    },
    /// A blocking acquisition did not get the lock before its timeout.
    #[error("lock {key:?}: not acquired within {timeout:?}")]
    WaitTimeout {
        /// The lock's key.
        key: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The lock was lost: it expired or was taken away (for example by `LOCK.FORCERELEASE`).
    #[error("lock {key:?} was lost")]
    Lost {
        /// The lock's key.
        key: String,
    },
    /// A single-master operation (such as `info`) failed.
    #[error(transparent)]
    Node(#[from] NodeError),
}

impl Error {
    /// The masters named in this error (empty when none is to blame).
    pub fn failed_nodes(&self) -> Vec<&str> {
        match self {
            Error::NoQuorum { failures, .. } => failures.nodes(),
            Error::Node(e) => vec![e.node.as_str()],
            _ => Vec::new(),
        }
    }
}
