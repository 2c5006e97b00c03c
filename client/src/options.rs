//! Tuning of a client: every option with its default.

use std::time::Duration;

use crate::node::Acks;
use crate::tls::Tls;

/// Tuning of a [`Relock`](crate::Relock) client. Every field has a default, given in its doc.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long one master may take to answer one command (connecting included) before it
    /// counts as failed for that round. Keep it much smaller than the ttl.
    /// Default: 100 ms.
    pub node_timeout: Duration,
    /// How many more rounds [`Relock::acquire`](crate::Relock::acquire) tries after a failed one.
    /// Default: 3 (so 4 rounds at most).
    pub retry_count: u32,
    /// The mean pause before a retry; each pause is drawn uniformly from
    /// `[retry_delay / 2, retry_delay * 3 / 2]` so that contenders do not retry in lock-step.
    /// Default: 200 ms.
    pub retry_delay: Duration,
    /// With several masters, [`Relock::acquire_wait`](crate::Relock::acquire_wait) keeps the masters that granted it while it
    /// waits for the rest for at most this long (and never longer than ttl / 4) before it
    /// releases them and retries; this is what keeps contenders that each hold a minority from
    /// waiting on one another forever.
    /// Default: 500 ms.
    pub max_partial_hold: Duration,
    /// How many replicas of a master must acknowledge an acquire or extend (`WAIT replicas
    /// timeout`, sent on the same connection right after the write) before it counts. When
    /// fewer do within [`Options::replica_ack_timeout`], an acquisition is released again on
    /// that master and that master counts as failed (the error, [`NodeFailure::ReplicaAcks`](crate::NodeFailure::ReplicaAcks),
    /// names it and says how many acknowledged); an extension does not count (the lock stays
    /// held until its previous validity runs out), except on a master with fewer replicas
    /// connected than asked (the promoted replica after a failover, its old master down),
    /// where it counts once every connected replica acknowledged it, with a warning logged.
    /// Applies per master in Redlock mode and to
    /// the key's master in cluster mode. It narrows, not closes, the window in which a failover
    /// loses a lock: replication stays asynchronous.
    /// Default: 0 (off).
    pub replica_acks: u32,
    /// How long a master waits for [`Options::replica_acks`] acknowledgements. It adds to the
    /// time a round may take (each request is bounded by `node_timeout + replica_ack_timeout`)
    /// and so to what is taken off the validity.
    /// Default: 500 ms.
    pub replica_ack_timeout: Duration,
    /// The certificates for `rediss://` servers: the CA to trust and a client certificate
    /// ([`Tls`]). Checked when the client is built.
    /// Default: the system's certificate store, no client certificate.
    pub tls: Tls,
    /// What comes before the random part of every owner this client makes (`<prefix>/<32 hex
    /// digits>`): `None` for `<host>/<pid>`, so that `LOCK.INFO`, `LOCK.HOLDERS`,
    /// `LOCK.WAITERS` and `LOCK.LOG` say which process holds or waits; `Some("")` for the
    /// random part alone. A prefix is cut to fit the module's 256 bytes, never the random part
    /// (128 bits, which keeps two holders from ever sharing an owner). Owners are no secret
    /// from anyone allowed to read the key.
    /// Default: `None` (`<host>/<pid>`).
    pub owner_prefix: Option<String>,
}

impl Options {
    pub(crate) fn acks(&self) -> Option<Acks> {
        (self.replica_acks > 0).then_some(Acks {
            replicas: self.replica_acks,
            timeout: self.replica_ack_timeout,
        })
    }

    /// The bound on one write that may wait for replica acknowledgements.
    pub(crate) fn write_timeout(&self) -> Duration {
        match self.acks() {
            Some(a) => self.node_timeout + a.timeout,
            None => self.node_timeout,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node_timeout: Duration::from_millis(100),
            retry_count: 3,
            retry_delay: Duration::from_millis(200),
            max_partial_hold: Duration::from_millis(500),
            replica_acks: 0,
            replica_ack_timeout: Duration::from_millis(500),
            tls: Tls::default(),
            owner_prefix: None,
        }
    }
}
