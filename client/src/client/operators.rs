//! What operators' tools ask of the masters (lockctl waiters, log, top, metrics): replies of
//! commands the client has no type for, from every master, or every master of a cluster.
//!
//! The commands and replies are relock-client's own types ([`Command`], [`Reply`]), so that
//! the public API does not depend on the Redis library the client is built on.

use crate::error::NodeFailure;
use crate::masters::NodeReport;

use super::Relock;

/// A command to send as it is (`LOCK.WAITERS key 10`, `INFO relock`): its name, then its
/// arguments, each sent as a bulk string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    args: Vec<Vec<u8>>,
}

impl Command {
    /// The command `name`, without arguments yet.
    pub fn new(name: &str) -> Command {
        Command {
            args: vec![name.as_bytes().to_vec()],
        }
    }

    /// The command with one more argument (a string, a number: anything `Display`s).
    #[must_use]
    pub fn arg(mut self, arg: impl std::fmt::Display) -> Command {
        self.args.push(arg.to_string().into_bytes());
        self
    }

    /// The command with one more argument, as raw bytes.
    #[must_use]
    pub fn arg_bytes(mut self, arg: &[u8]) -> Command {
        self.args.push(arg.to_vec());
        self
    }

    /// The name and the arguments, in order.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args.iter().map(Vec::as_slice)
    }

    fn to_redis(&self) -> redis::Cmd {
        let mut args = self.args.iter();
        let mut cmd =
            redis::cmd(std::str::from_utf8(args.next().map_or(&[][..], |a| a)).unwrap_or(""));
        for arg in args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

/// A server's reply, as RESP2 or RESP3 has it.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Nil (a missing key, a null).
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string, as bytes.
    Bulk(Vec<u8>),
    /// A simple string (`+OK`).
    Simple(String),
    /// A verbatim string (RESP3), without its format.
    Verbatim(String),
    /// An array (RESP2 maps come as arrays of pairs).
    Array(Vec<Reply>),
    /// A set (RESP3).
    Set(Vec<Reply>),
    /// A map (RESP3), its pairs in the order they came.
    Map(Vec<(Reply, Reply)>),
    /// A double (RESP3).
    Double(f64),
    /// A boolean (RESP3).
    Boolean(bool),
    /// An error reply inside a reply (an array's element, for instance), as text.
    Error(String),
    /// A big number (RESP3), as its digits.
    BigNumber(String),
    /// Something else (an attribute, a push message), as the client described it.
    Other(String),
}

impl Reply {
    /// The reply as text, when it is a string of any kind (bulk strings lossily as UTF-8).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Reply::Simple(s) | Reply::Verbatim(s) => Some(s.clone()),
            _ => None,
        }
    }

    pub(crate) fn from_redis(value: redis::Value) -> Reply {
        use redis::Value;
        match value {
            Value::Nil => Reply::Nil,
            Value::Int(n) => Reply::Int(n),
            Value::BulkString(b) => Reply::Bulk(b),
            Value::SimpleString(s) => Reply::Simple(s),
            Value::Okay => Reply::Simple("OK".to_owned()),
            Value::VerbatimString { text, .. } => Reply::Verbatim(text),
            Value::Array(items) => Reply::Array(items.into_iter().map(Reply::from_redis).collect()),
            Value::Set(items) => Reply::Set(items.into_iter().map(Reply::from_redis).collect()),
            Value::Map(pairs) => Reply::Map(
                pairs
                    .into_iter()
                    .map(|(k, v)| (Reply::from_redis(k), Reply::from_redis(v)))
                    .collect(),
            ),
            Value::Double(d) => Reply::Double(d),
            Value::Boolean(b) => Reply::Boolean(b),
            Value::ServerError(e) => Reply::Error(format!("{e:?}")),
            Value::BigNumber(n) => Reply::BigNumber(n.to_string()),
            other => Reply::Other(format!("{other:?}")),
        }
    }
}

fn reply(value: redis::Value) -> Result<Reply, NodeFailure> {
    Ok(Reply::from_redis(value))
}

impl Relock {
    /// `cmd`, a command about `key` (`LOCK.WAITERS key`, `LOCK.HISTORY key`), on every master
    /// (in a cluster, the key's master), concurrently, with each master's reply as it came:
    /// for operators' tools that read what the client has no type for.
    pub async fn query_about(&self, key: &str, cmd: &Command) -> Vec<NodeReport<Reply>> {
        self.masters.ask_each(key, &cmd.to_redis(), reply).await
    }

    /// `cmd`, a command about a whole server (`INFO relock`, `LOCK.STATS`, `LOCK.LOG`), on
    /// every master concurrently (every master of a cluster, from its slot map), with each
    /// master's reply as it came. Reports name the masters `host:port`; a cluster whose slot
    /// map cannot be read is one failed report.
    pub async fn query_masters(&self, cmd: &Command) -> Vec<NodeReport<Reply>> {
        self.masters.ask_every_master(&cmd.to_redis(), reply).await
    }

    /// `cmd` on one master, named as [`Relock::query_masters`] reports it (in a cluster, not
    /// routed by any key: a key that master's `LOCK.STATS` named, for instance).
    pub async fn query_master(&self, master: &str, cmd: &Command) -> Result<Reply, NodeFailure> {
        self.masters
            .ask_master(master, &cmd.to_redis(), reply)
            .await
    }

    /// The database number of the first server's URL (`redis://host:port/3`: 3; 0 when the
    /// URL names none): the database the client's connections select.
    pub fn db(&self) -> i64 {
        self.masters.db()
    }
}
