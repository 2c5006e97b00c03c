//! One master: its name, a cached multiplexed connection, and the per-node timeout.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, Pipeline, Value};
use tokio::sync::Mutex;

use crate::error::{Error, NodeError, NodeFailure};
use crate::LockInfo;

/// A master of the lock, reached through redis-rs.
pub(crate) struct Node {
    /// `host:port`, used in every error and log line.
    pub(crate) name: String,
    client: Client,
    /// Shared by every non-blocking command; re-established after an I/O error.
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl Node {
    pub(crate) fn open(url: &str) -> Result<Node, Error> {
        let client = Client::open(url).map_err(|source| Error::InvalidUrl {
            url: url.to_string(),
            source,
        })?;
        let name = client.get_connection_info().addr.to_string();
        Ok(Node {
            name,
            client,
            conn: Mutex::new(None),
        })
    }

    pub(crate) fn error(&self, failure: NodeFailure) -> NodeError {
        NodeError {
            node: self.name.clone(),
            failure,
        }
    }

    async fn shared_conn(&self) -> redis::RedisResult<MultiplexedConnection> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let conn = self.client.get_multiplexed_async_connection().await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn forget_conn(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs a non-blocking command on the shared connection; connecting counts against
    /// `timeout` too, so a dead or paused master costs at most `timeout`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        self.run(timeout, |mut conn| async move {
            cmd.query_async::<T>(&mut conn).await
        })
        .await
    }

    /// Runs a pipeline (a `MULTI`/`EXEC` block when atomic) like [`Node::query`].
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        pipe: &Pipeline,
        timeout: Duration,
    ) -> Result<T, NodeFailure> {
        self.run(timeout, |mut conn| async move {
            pipe.query_async::<T>(&mut conn).await
        })
        .await
    }

    async fn run<T, F, Fut>(&self, timeout: Duration, call: F) -> Result<T, NodeFailure>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let attempt = async {
            let conn = self.shared_conn().await?;
            call(conn).await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Err(_) => Err(NodeFailure::Timeout(timeout)),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.forget_conn().await;
                }
                Err(NodeFailure::Redis(e))
            }
        }
    }

    /// Runs a blocking command (`LOCK.WAIT`) on a connection of its own, so that it never stalls
    /// the shared one; dropping the future closes that connection, which takes us out of the
    /// master's wait queue.
    pub(crate) async fn blocking_query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        connect_timeout: Duration,
    ) -> Result<T, NodeFailure> {
        let config = AsyncConnectionConfig::new().set_connection_timeout(connect_timeout);
        let mut conn = match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) if e.is_timeout() => return Err(NodeFailure::Timeout(connect_timeout)),
            Err(e) => return Err(NodeFailure::Redis(e)),
        };
        Ok(cmd.query_async::<T>(&mut conn).await?)
    }
}

/// `LOCK.INFO`'s reply (flat array under RESP2, map under RESP3) as a [`LockInfo`].
pub(crate) fn parse_info(value: Value) -> Result<Option<LockInfo>, NodeFailure> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Nil => return Ok(None),
        Value::Map(m) => m,
        Value::Array(items) => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => return Err(NodeFailure::Protocol(format!("LOCK.INFO: {other:?}"))),
    };
    let mut owner = None;
    let (mut token, mut count, mut ttl, mut waiters) = (None, None, None, None);
    for (k, v) in pairs {
        let field: String = FromRedisValue::from_redis_value(&k)?;
        match field.as_str() {
            "owner" => {
                let raw: Vec<u8> = FromRedisValue::from_redis_value(&v)?;
                owner = Some(String::from_utf8_lossy(&raw).into_owned());
            }
            "token" => token = Some(u64::from_redis_value(&v)?),
            "count" => count = Some(u64::from_redis_value(&v)?),
            "ttl" => ttl = Some(i64::from_redis_value(&v)?),
            "waiters" => waiters = Some(u64::from_redis_value(&v)?),
            _ => {}
        }
    }
    match (owner, token, count, ttl, waiters) {
        (Some(owner), Some(token), Some(count), Some(ttl), Some(waiters)) => Ok(Some(LockInfo {
            owner,
            token,
            count,
            ttl: Duration::from_millis(ttl.max(0) as u64),
            waiters,
        })),
        _ => Err(NodeFailure::Protocol("LOCK.INFO: missing fields".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_resp2_info() {
        let v = Value::Array(vec![
            bulk("owner"),
            bulk("me"),
            bulk("token"),
            Value::Int(1_800_000_000_000_001),
            bulk("count"),
            Value::Int(2),
            bulk("ttl"),
            Value::Int(1500),
            bulk("waiters"),
            Value::Int(3),
        ]);
        let info = parse_info(v).unwrap().unwrap();
        assert_eq!(info.owner, "me");
        assert_eq!(info.token, 1_800_000_000_000_001);
        assert_eq!(info.count, 2);
        assert_eq!(info.ttl, Duration::from_millis(1500));
        assert_eq!(info.waiters, 3);
    }

    #[test]
    fn nil_info_is_none() {
        assert!(parse_info(Value::Nil).unwrap().is_none());
    }

    #[test]
    fn incomplete_info_is_an_error() {
        let v = Value::Array(vec![bulk("owner"), bulk("me")]);
        assert!(parse_info(v).is_err());
    }
}
