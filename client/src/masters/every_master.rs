//! Whole-server questions (`INFO relock`, `LOCK.STATS`, `LOCK.LOG`) on every master, and on
//! every master of a cluster, for operators' tools.

use redis::FromRedisValue;

use super::{Masters, NodeReport};
use crate::error::NodeFailure;

impl Masters {
    /// `cmd` on every master, concurrently (on every master of a cluster, which
    /// [`Node::masters`] lists), each reply read by `parse`: what a whole server answers.
    /// A cluster whose slot map cannot be read is one failed report.
    pub(crate) async fn ask_every_master<R, T>(
        &self,
        cmd: &redis::Cmd,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Vec<NodeReport<T>>
    where
        R: FromRedisValue,
    {
        let timeout = self.options.node_timeout;
        let parse = &parse;
        let per_node = futures_util::future::join_all(self.nodes.iter().map(|n| async move {
            let masters = match n.masters(timeout).await {
                Ok(masters) => masters,
                Err(e) => {
                    return vec![NodeReport {
                        node: n.name.clone(),
                        result: Err(e),
                    }]
                }
            };
            futures_util::future::join_all(masters.into_iter().map(|master| async move {
                let reply: Result<R, _> = n.query_master(&master, cmd, timeout).await;
                NodeReport {
                    node: master,
                    result: reply.and_then(parse),
                }
            }))
            .await
        }));
        per_node.await.into_iter().flatten().collect()
    }

    /// `cmd` on `master`, a name [`Masters::ask_every_master`] reported, read by `parse`.
    pub(crate) async fn ask_master<R, T>(
        &self,
        master: &str,
        cmd: &redis::Cmd,
        parse: impl Fn(R) -> Result<T, NodeFailure>,
    ) -> Result<T, NodeFailure>
    where
        R: FromRedisValue,
    {
        let timeout = self.options.node_timeout;
        for node in &self.nodes {
            if node.name == master || node.masters(timeout).await?.iter().any(|m| m == master) {
                let reply: R = node.query_master(master, cmd, timeout).await?;
                return parse(reply);
            }
        }
        Err(NodeFailure::Protocol(format!("no master {master}")))
    }
}
