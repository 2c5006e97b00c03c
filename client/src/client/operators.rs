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

/// A server's reply, as RESP2 or RESP3 has it: relock-protocol's, which decodes the replies
/// relock-client has types for.
pub use relock_protocol::Reply;

use crate::reply::reply_of;

fn reply(value: redis::Value) -> Result<Reply, NodeFailure> {
    Ok(reply_of(value))
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
