//! What `LOCK.INFO` says about a lock on one master.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::error::NodeFailure;

/// The state of a lock on one master, as `LOCK.INFO` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner id (non-UTF-8 bytes shown lossily).
    pub owner: String,
    /// The hold's fencing token.
    pub token: u64,
    /// The reentrancy count (>= 1).
    pub count: u64,
    /// The time left before it expires.
    pub ttl: Duration,
    /// How many clients wait in `LOCK.WAIT` for it.
    pub waiters: u64,
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
