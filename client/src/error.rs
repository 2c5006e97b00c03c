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
    Redis(ServerError),
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
    /// The master (or cluster) replied something the client cannot use: a reply the LOCK.*
    /// contract does not allow, no master for the key's slot, too many redirections.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// A shared request whose limit is not the one the key has there (`ERR lock has another
    /// limit (n)`): the key is a semaphore of `limit` holders (0: a read lock without limit).
    #[error("the lock has another limit there ({limit}; 0 means none)")]
    OtherLimit {
        /// The key's limit on that master.
        limit: u32,
    },
    /// The owner holds the key in the other mode there (`ERR lock is held in another mode`):
    /// there is no upgrade from shared to exclusive, nor downgrade.
    #[error("the owner holds the lock in the other mode there (no upgrade; downgrade with Lock::downgrade)")]
    OtherMode,
    /// The owner holds the semaphore there with another number of permits (`ERR lock is held
    /// with other permits`): one owner, one hold, with the permits it was granted.
    #[error("the owner holds the lock with other permits there")]
    OtherPermits,
    /// The master is in its restart grace (`TRYAGAIN relock restart grace, <ms> ms left`):
    /// after a restart or a promotion it grants no new hold for `relock.restart-grace-ms`, so
    /// that a hold it may have forgotten has surely ended. It counts as a master that did not
    /// grant; asking again after the grace can succeed.
    #[error("in its restart grace for {left_ms} ms more: grants no new hold yet")]
    RestartGrace {
        /// What is left of the grace, as the master said.
        left_ms: u64,
    },
    /// The master refused the ttl asked for (`ERR ttl_ms exceeds relock.restart-grace-ms`:
    /// with a restart grace configured, no hold may outlive it) and changed nothing. Permanent
    /// for that ttl; a hold it was asked to renew is still held there, with its ttl.
    #[error("the ttl exceeds relock.restart-grace-ms there: refused, nothing changed")]
    TtlRefused,
}

impl NodeFailure {
    /// Whether asking again cannot help: the master answered with an error that stays true
    /// until someone changes its configuration or the key (the module is not loaded, the login
    /// was refused, the key holds another type, an argument was refused, a reply made no
    /// sense to the client). Refusals, timeouts, lost connections, missing acknowledgements, a
    /// cluster without a master for the key, and the errors of a master that is loading, busy,
    /// out of memory or changing roles are not permanent.
    ///
    /// This is the one place where relock-client tells the two apart; a round whose permanent
    /// failures leave too few masters for a quorum fails at once with [`Error::Permanent`].
    pub fn is_permanent(&self) -> bool {
        match self {
            NodeFailure::NotGranted
            | NodeFailure::Timeout(_)
            | NodeFailure::ReplicaAcks { .. }
            | NodeFailure::Protocol(_) => false,
            NodeFailure::Redis(e) => is_permanent_redis_error(&e.0),
            NodeFailure::OtherLimit { .. }
            | NodeFailure::OtherMode
            | NodeFailure::OtherPermits
            | NodeFailure::TtlRefused => true,
            NodeFailure::RestartGrace { .. } => false,
        }
    }

    /// The failure with the module's mode and limit refusals told apart from other error
    /// replies ([`NodeFailure::OtherLimit`], [`NodeFailure::OtherMode`]).
    pub(crate) fn classified(self) -> NodeFailure {
        let NodeFailure::Redis(e) = &self else {
            return self;
        };
        if e.code() == Some("TRYAGAIN") {
            let left = e
                .detail()
                .unwrap_or_default()
                .strip_prefix("relock restart grace, ")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|ms| ms.parse().ok());
            return match left {
                Some(left_ms) => NodeFailure::RestartGrace { left_ms },
                None => self,
            };
        }
        if e.0.kind() != redis::ErrorKind::ResponseError {
            return self;
        }
        let detail = e.detail().unwrap_or_default().trim_end();
        if detail.starts_with("lock is held with other permits") {
            return NodeFailure::OtherPermits;
        }
        if detail.starts_with("ttl_ms exceeds") {
            return NodeFailure::TtlRefused;
        }
        // The text goes on to name LOCK.DOWNGRADE since the module has one.
        if detail.starts_with("lock is held in another mode") {
            return NodeFailure::OtherMode;
        }
        let limit = detail
            .strip_prefix("lock has another limit (")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|n| n.parse().ok());
        match limit {
            Some(limit) => NodeFailure::OtherLimit { limit },
            None => self,
        }
    }
}

/// An error reply of a master, or a failed connection to it (`NodeFailure::Redis`), or why a
/// server URL was refused (`Error::InvalidUrl`): relock-client's own type, so that the public
/// API does not depend on the Redis library the client is built on.
#[derive(Debug)]
pub struct ServerError(pub(crate) redis::RedisError);

impl ServerError {
    /// The error reply's code (`ERR`, `WRONGTYPE`, `NOAUTH`, `TRYAGAIN`...), when the master
    /// replied with an error.
    pub fn code(&self) -> Option<&str> {
        self.0.code()
    }

    /// The error reply's text after its code, when there is one.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail()
    }

    /// Whether the connection failed (refused, reset, closed, a TLS handshake refused), as
    /// opposed to an error reply.
    pub fn is_io_error(&self) -> bool {
        self.0.is_io_error()
    }

    /// Whether the connection or a reply timed out.
    pub fn is_timeout(&self) -> bool {
        self.0.is_timeout()
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe_redis_error(&self.0))
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

// For `?` inside the crate. A trait impl cannot be private: hidden from the documentation, it
// is the one place the public API still names a redis-rs type (no user needs it).
#[doc(hidden)]
impl From<redis::RedisError> for NodeFailure {
    fn from(e: redis::RedisError) -> NodeFailure {
        NodeFailure::Redis(ServerError(e))
    }
}

/// The classification behind [`NodeFailure::is_permanent`] for errors from redis-rs.
fn is_permanent_redis_error(e: &redis::RedisError) -> bool {
    use redis::ErrorKind as K;
    if is_tls_failure(e) {
        return true;
    }
    match e.kind() {
        // Unknown command, syntax, invalid ttl_ms, DB index out of range, reentrancy limit...
        // except the few ERR replies of an overloaded server.
        K::ResponseError => !e
            .detail()
            .is_some_and(|d| d.starts_with("max number of clients reached")),
        K::AuthenticationFailed
        | K::TypeError
        | K::InvalidClientConfig
        | K::CrossSlot
        | K::ClientError
        | K::NoScriptError
        | K::ExecAbortError
        | K::RESP3NotSupported => true,
        // A Redis Cluster node answering a client that does not route by slot: every key of
        // another node's slots gets this answer, however often it is asked. (A cluster client
        // follows redirections and never reports one as a failure.)
        K::Moved | K::Ask => true,
        // WRONGTYPE, NOAUTH, WRONGPASS, NOPERM and other codes Redis may add are permanent;
        // these are the transient ones.
        K::ExtensionError => !matches!(
            e.code(),
            Some("OOM" | "BUSY" | "UNBLOCKED" | "NOREPLICAS" | "MISCONF" | "NOTREADY")
        ),
        _ => false,
    }
}

/// Whether a connection failed in its TLS handshake or session (an untrusted or expired
/// certificate, a name that does not match, a client certificate refused or missing, a
/// plain-text server behind a `rediss://` URL): no retry changes that. redis-rs keeps the
/// rustls error only as text, in the I/O error it reports.
fn is_tls_failure(e: &redis::RedisError) -> bool {
    if !e.is_io_error() {
        return false;
    }
    const RUSTLS: [&str; 9] = [
        "invalid peer certificate",
        "received fatal alert",
        "peer sent no certificates",
        "peer is incompatible",
        "peer misbehaved",
        "received corrupt message",
        "received unexpected message",
        "received unexpected handshake message",
        "presented server name type wasn't supported",
    ];
    let text = e.to_string();
    RUSTLS.iter().any(|t| text.contains(t))
}

/// A redis-rs error as the server said it (`WRONGTYPE Operation against a key...`), with a
/// hint where the cause is a classic one.
fn describe_redis_error(e: &redis::RedisError) -> String {
    let text = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {}", detail.trim_end()),
        _ => e.to_string(),
    };
    let detail = e.detail().unwrap_or_default();
    if detail.starts_with("unknown command") && detail.contains("'LOCK.") {
        format!("{text} (is the relock module loaded on this server?)")
    } else if is_tls_failure(e) {
        format!(
            "TLS: {text} (check the CA that signed the server's certificate, lockctl --tls-ca, \
             and the client certificate if the server asks for one, --tls-cert and --tls-key)"
        )
    } else if matches!(e.kind(), redis::ErrorKind::Moved | redis::ErrorKind::Ask) {
        format!(
            "{text} (this server is a Redis Cluster node: use a cluster client, \
             Relock::cluster, or lockctl --cluster)"
        )
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        format!("{text} (check the user and password in the server URL)")
    } else {
        text
    }
}

fn lost_message(key: &str, cause: Option<&crate::Loss>) -> String {
    match cause {
        Some(loss) => loss.to_string(),
        None => format!("lock {key:?} was lost"),
    }
}

fn no_quorum_message(
    key: &str,
    granted: usize,
    nodes: usize,
    quorum: usize,
    failures: &NodeErrors,
) -> String {
    if nodes == 1 {
        // One server, one vote: "0 of 1 masters granted, 1 needed" says nothing the server's
        // own answer does not say better.
        return format!("lock {key:?}: {failures}");
    }
    format!("lock {key:?}: no quorum, {granted} of {nodes} masters granted, {quorum} needed ({failures})")
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
        /// Why it was rejected.
        #[source]
        source: ServerError,
    },
    /// The ttl is outside 5 ms ..= 10^12 ms: below [`MIN_TTL`](crate::limits::MIN_TTL) the
    /// drift allowance leaves less than half of it valid (1 and 2 ms nothing at all), above
    /// 10^12 ms the servers refuse it.
    #[error(
        "invalid ttl {0:?} (must be 5 ms to 10^12 ms; the smallest usable ttl is 5 ms, since \
         the drift allowance of 1 % + 2 ms leaves less than half of a shorter one valid)"
    )]
    InvalidTtl(Duration),
    /// An [`Options`](crate::Options) field is out of range (see [`crate::limits`]).
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The field.
        name: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Two URLs of one Redlock client name the same server (after resolving host names):
    /// it would count twice toward the quorum.
    #[error(
        "{first:?} and {second:?} are the same server ({address}): \
         Redlock needs independent masters"
    )]
    DuplicateServer {
        /// The first URL naming it.
        first: String,
        /// The second one.
        second: String,
        /// The address both resolve to.
        address: String,
    },
    /// Masters answered with errors that retrying cannot fix (see
    /// [`NodeFailure::is_permanent`]), and too few are left for a quorum. Returned at once,
    /// whatever the retry count or wait limit.
    #[error("lock {key:?}: {failures} (retrying cannot help)")]
    Permanent {
        /// The lock's key.
        key: String,
        /// The masters that failed permanently, and why.
        failures: NodeErrors,
    },
    /// Fewer than a quorum of masters granted (or renewed) the lock. With one server, the
    /// message says only what that server did (`lock "k": 10.0.0.1:6379: no reply within
    /// 100ms`); with several, how many granted of how many, and what each other one did.
    #[error("{}", no_quorum_message(key, *granted, *nodes, *quorum, failures))]
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
    /// A renewal whose ttl masters refused ([`NodeFailure::TtlRefused`]: longer than their
    /// `relock.restart-grace-ms`). They changed nothing: the hold is still held with its
    /// previous ttl and validity, and a [`LockGuard`](crate::LockGuard) keeps it (renewing
    /// again until its validity ends). Permanent for that ttl: ask for a shorter one.
    #[error("lock {key:?}: renewal to a ttl of {ttl:?} refused ({failures}); the hold is kept with its ttl (ask for a shorter ttl)")]
    TtlRefused {
        /// The lock's key.
        key: String,
        /// The ttl asked for.
        ttl: Duration,
        /// The masters that refused it.
        failures: NodeErrors,
    },
    /// The lock was lost: it expired or was taken away (for example by `LOCK.FORCERELEASE`).
    #[error("{}", lost_message(key, cause.as_deref()))]
    Lost {
        /// The lock's key.
        key: String,
        /// Why, when a guard asked the masters' journals (`LOCK.HISTORY`); `None` where
        /// nobody asked (a plain [`Lock::extend`](crate::Lock::extend) or release).
        cause: Option<Box<crate::Loss>>,
    },
    /// A single-master operation (such as `info`) failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A [`Mode::Shared`](crate::Mode::Shared) limit outside 1 ..= [`MAX_LIMIT`](crate::MAX_LIMIT).
    #[error("invalid limit {0} (must be 1 to 1000000)")]
    InvalidLimit(u32),
    /// A semaphore ([`Mode::Shared`](crate::Mode::Shared) with a limit) was asked of several
    /// independent masters. Refused before any server is asked: a quorum cannot bound the
    /// number of holders.
    #[error(
        "a limit ({limit}) needs one server or a Redis Cluster, not {masters} independent \
         masters: a quorum cannot count permits (with limit 2 on masters A, B and C, three \
         clients can hold {{A,B}}, {{B,C}} and {{A,C}}); a shared lock without a limit is sound \
         over a quorum"
    )]
    UnsoundSemaphore {
        /// The limit asked for.
        limit: u32,
        /// How many masters the client has.
        masters: usize,
    },
    /// A shared request named a limit other than the one the key has on `node`
    /// (`ERR lock has another limit (n)`). Every user of one semaphore must ask with one limit.
    #[error("lock {key:?} on {node}: it has another limit there ({limit}; 0 means none)")]
    OtherLimit {
        /// The lock's key.
        key: String,
        /// The (first) master that refused, as `host:port`.
        node: String,
        /// The key's limit there (0: shared without limit).
        limit: u32,
    },
    /// The owner already holds the key in the other mode on `node` (`ERR lock is held in
    /// another mode`): holds are never upgraded; an exclusive holder downgrades with
    /// [`Lock::downgrade`](crate::Lock::downgrade).
    #[error(
        "lock {key:?} on {node}: the owner holds it in the other mode (no upgrade; an exclusive \
         holder downgrades with Lock::downgrade)"
    )]
    OtherMode {
        /// The lock's key.
        key: String,
        /// The (first) master that refused, as `host:port`.
        node: String,
    },
    /// The owner already holds the semaphore on `node` with another number of permits
    /// (`ERR lock is held with other permits`).
    #[error("lock {key:?} on {node}: the owner holds it with other permits")]
    OtherPermits {
        /// The lock's key.
        key: String,
        /// The (first) master that refused, as `host:port`.
        node: String,
    },
    /// A group of keys that cannot be asked for: none, more than 256 (the most one
    /// `LOCK.MACQUIRE` takes), a key given twice, or a mode other than exclusive.
    #[error("invalid keys: {0}")]
    InvalidKeys(String),
    /// An election ([`Relock::campaign`](crate::Relock::campaign),
    /// [`Relock::leader`](crate::Relock::leader), [`Relock::observe`](crate::Relock::observe))
    /// asked of a client that cannot hold one: several independent masters (a term must come
    /// from one sequence of tokens, and FIFO order does not compose across independent
    /// queues), a client whose mode is not exclusive, or a key that is shared. Refused before
    /// any server is asked (a shared key: once its master said so).
    #[error("election on {key:?} refused: {why}")]
    ElectionRefused {
        /// The election's key.
        key: String,
        /// Why.
        why: String,
    },
    /// `LOCK.FENCED` asked of a hold of several independent masters: each master has its own
    /// tokens, so no one token proves the hold, and a write through a minority of masters is
    /// not fenced. Refused before any server is asked.
    #[error(
        "LOCK.FENCED on {key:?} needs a hold of one master or a Redis Cluster, not of \
         {masters} independent masters: each master has its own tokens, so no one token \
         proves the hold"
    )]
    FencedRefused {
        /// The hold's key.
        key: String,
        /// How many masters the client has.
        masters: usize,
    },
    /// `LOCK.FENCED` refused the write: the token is not that of a live hold of the key any
    /// more (`-FENCED stale token <token>, current <token | shared | none>`), and nothing ran.
    /// Never retried: the hold that the token proved is gone.
    #[error("lock {key:?} on {node}: write refused, {message}")]
    Fenced {
        /// The hold's key.
        key: String,
        /// The master that refused, as `host:port`.
        node: String,
        /// The server's text after `FENCED` (`stale token 7, current 9`).
        message: String,
    },
    /// Permits asked of a mode that is not a semaphore, or outside 1 ..= its limit
    /// ([`Relock::with_permits`](crate::Relock::with_permits)).
    #[error("invalid permits {permits}: {}", match limit {
        Some(n) => format!("a semaphore of limit {n} takes 1 to {n}"),
        None => "several permits need a semaphore (Mode::limited)".to_string(),
    })]
    InvalidPermits {
        /// The permits asked for.
        permits: u32,
        /// The mode's limit, if it is a semaphore.
        limit: Option<u32>,
    },
}

impl Error {
    /// The masters named in this error (empty when none is to blame).
    pub fn failed_nodes(&self) -> Vec<&str> {
        match self {
            Error::NoQuorum { failures, .. }
            | Error::Permanent { failures, .. }
            | Error::TtlRefused { failures, .. } => failures.nodes(),
            Error::Node(e) => vec![e.node.as_str()],
            Error::OtherLimit { node, .. }
            | Error::OtherMode { node, .. }
            | Error::OtherPermits { node, .. }
            | Error::Fenced { node, .. } => vec![node.as_str()],
            _ => Vec::new(),
        }
    }

    /// Whether the same call cannot succeed by being retried: a usage error (no servers, a bad
    /// URL, ttl, option or limit, one server named twice, a limit over several masters),
    /// [`Error::Permanent`], a mode or limit conflict ([`Error::OtherLimit`],
    /// [`Error::OtherMode`]), an election or fenced write refused ([`Error::ElectionRefused`],
    /// [`Error::FencedRefused`]), or a fenced write refused for a stale token
    /// ([`Error::Fenced`]: the hold is gone).
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::NoServers
            | Error::InvalidUrl { .. }
            | Error::InvalidTtl(_)
            | Error::InvalidOption { .. }
            | Error::DuplicateServer { .. }
            | Error::Permanent { .. }
            | Error::InvalidLimit(_)
            | Error::UnsoundSemaphore { .. }
            | Error::OtherLimit { .. }
            | Error::OtherMode { .. }
            | Error::OtherPermits { .. }
            | Error::InvalidPermits { .. }
            | Error::InvalidKeys(_)
            | Error::ElectionRefused { .. }
            | Error::FencedRefused { .. }
            | Error::Fenced { .. }
            | Error::TtlRefused { .. } => true,
            Error::Node(e) => e.failure.is_permanent(),
            Error::NoQuorum { .. }
            | Error::ValidityExhausted { .. }
            | Error::WaitTimeout { .. }
            | Error::Lost { .. } => false,
        }
    }
}
