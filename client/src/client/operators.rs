//! What operators' tools ask of the masters (lockctl waiters, log, top, metrics): raw replies
//! of commands the client has no type for, from every master, or every master of a cluster.

use crate::error::NodeFailure;
use crate::masters::NodeReport;

use super::Relock;

impl Relock {
    /// `cmd`, a command about `key` (`LOCK.WAITERS key`, `LOCK.HISTORY key`), on every master
    /// (in a cluster, the key's master), concurrently, with each master's reply as it came:
    /// for operators' tools that read what the client has no type for.
    pub async fn query_about(&self, key: &str, cmd: &redis::Cmd) -> Vec<NodeReport<redis::Value>> {
        self.masters.ask_each(key, cmd, Ok).await
    }

    /// `cmd`, a command about a whole server (`INFO relock`, `LOCK.STATS`, `LOCK.LOG`), on
    /// every master concurrently (every master of a cluster, from its slot map), with each
    /// master's reply as it came. Reports name the masters `host:port`; a cluster whose slot
    /// map cannot be read is one failed report.
    pub async fn query_masters(&self, cmd: &redis::Cmd) -> Vec<NodeReport<redis::Value>> {
        self.masters.ask_every_master(cmd, Ok).await
    }

    /// `cmd` on one master, named as [`Relock::query_masters`] reports it (in a cluster, not
    /// routed by any key: a key that master's `LOCK.STATS` named, for instance).
    pub async fn query_master(
        &self,
        master: &str,
        cmd: &redis::Cmd,
    ) -> Result<redis::Value, NodeFailure> {
        self.masters.ask_master(master, cmd, Ok).await
    }
}
