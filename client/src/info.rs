//! What `LOCK.INFO` and `LOCK.HOLDERS` say about a lock on one master.

use std::time::Duration;

use redis::Value;

use crate::error::NodeFailure;
use crate::mode::Mode;
use crate::reply::reply_of;

/// The state of a lock on one master, as `LOCK.INFO` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner id (non-UTF-8 bytes shown lossily); `None` for a shared lock, whose
    /// holders [`Relock::holders`](crate::Relock::holders) lists.
    pub owner: Option<String>,
    /// The hold's fencing token; `None` for a shared lock.
    pub token: Option<u64>,
    /// The reentrancy count (>= 1); `None` for a shared lock.
    pub count: Option<u64>,
    /// The time left before it expires (for a shared lock, before its latest lease ends);
    /// `None` when it has no expiry (an exclusive lock's key was `PERSIST`ed: the module
    /// answers ttl -1), never to be read as expired.
    pub ttl: Option<Duration>,
    /// How many clients wait in `LOCK.WAIT` for it.
    pub waiters: u64,
    /// How it is held (a module without shared holds reports no mode: exclusive).
    pub mode: Mode,
    /// How many holds it has (1 for an exclusive lock).
    pub holders: u64,
}

/// One holder of a lock on one master, as `LOCK.HOLDERS` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// Its owner id (non-UTF-8 bytes shown lossily).
    pub owner: String,
    /// Its fencing token.
    pub token: u64,
    /// Its reentrancy count (>= 1).
    pub count: u64,
    /// The time left before its hold (its lease, for a shared one) ends; `None` when it has
    /// no expiry (a `PERSIST`ed exclusive lock: the module answers ttl -1).
    pub ttl: Option<Duration>,
}

impl LockInfo {
    fn of(info: relock_protocol::LockInfo) -> LockInfo {
        LockInfo {
            owner: info.owner.map(|raw| lossy(&raw)),
            token: info.token,
            count: info.count,
            ttl: info.ttl,
            waiters: info.waiters,
            mode: match info.mode {
                relock_protocol::Mode::Exclusive => Mode::Exclusive,
                relock_protocol::Mode::Shared { limit } => Mode::Shared { limit },
            },
            holders: info.holders,
        }
    }
}

fn lossy(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

/// A decoder's refusal as the client reports a reply it cannot read.
pub(crate) fn refused(e: relock_protocol::DecodeError) -> NodeFailure {
    NodeFailure::Protocol(e.to_string())
}

/// `LOCK.INFO`'s reply as a [`LockInfo`] (relock-protocol decodes it); `None` when there is
/// no lock.
pub(crate) fn parse_info(value: Value) -> Result<Option<LockInfo>, NodeFailure> {
    let info = relock_protocol::LockInfo::decode(&reply_of(value)).map_err(refused)?;
    Ok(info.map(LockInfo::of))
}

/// `LOCK.HOLDERS`'s reply as the holders in token order (relock-protocol decodes it); `None`
/// when there is no lock.
pub(crate) fn parse_holders(value: Value) -> Result<Option<Vec<HolderInfo>>, NodeFailure> {
    let holders = relock_protocol::Holder::decode_all(&reply_of(value)).map_err(refused)?;
    Ok(holders.map(|holders| {
        holders
            .into_iter()
            .map(|h| HolderInfo {
                owner: lossy(&h.owner),
                token: h.token,
                count: h.count,
                ttl: h.ttl,
            })
            .collect()
    }))
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
        assert_eq!(info.owner.as_deref(), Some("me"));
        assert_eq!(info.token, Some(1_800_000_000_000_001));
        assert_eq!(info.count, Some(2));
        assert_eq!(info.ttl, Some(Duration::from_millis(1500)));
        assert_eq!(info.waiters, 3);
        // Five fields: a module from before shared holds.
        assert_eq!((info.mode, info.holders), (Mode::Exclusive, 1));
    }

    fn info_of(
        owner: Value,
        token: Value,
        count: Value,
        mode: &str,
        holders: i64,
        limit: i64,
    ) -> Value {
        Value::Array(vec![
            bulk("owner"),
            owner,
            bulk("token"),
            token,
            bulk("count"),
            count,
            bulk("ttl"),
            Value::Int(900),
            bulk("waiters"),
            Value::Int(1),
            bulk("mode"),
            bulk(mode),
            bulk("holders"),
            Value::Int(holders),
            bulk("limit"),
            Value::Int(limit),
        ])
    }

    #[test]
    fn parses_the_mode_fields() {
        let shared = info_of(Value::Nil, Value::Nil, Value::Nil, "shared", 3, 5);
        let info = parse_info(shared).unwrap().unwrap();
        assert_eq!((info.owner, info.token, info.count), (None, None, None));
        assert_eq!((info.mode, info.holders), (Mode::limited(5), 3));
        assert_eq!(info.ttl, Some(Duration::from_millis(900)));
        let read = info_of(Value::Nil, Value::Nil, Value::Nil, "shared", 2, 0);
        assert_eq!(parse_info(read).unwrap().unwrap().mode, Mode::shared());
        let exclusive = info_of(bulk("w"), Value::Int(9), Value::Int(1), "exclusive", 1, 1);
        let info = parse_info(exclusive).unwrap().unwrap();
        assert_eq!((info.mode, info.token), (Mode::Exclusive, Some(9)));
        // RESP3: a map.
        let Value::Array(items) = info_of(Value::Nil, Value::Nil, Value::Nil, "shared", 1, 0)
        else {
            unreachable!()
        };
        let mut it = items.into_iter();
        let mut map = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            map.push((k, v));
        }
        assert_eq!(parse_info(Value::Map(map)).unwrap().unwrap().holders, 1);
        // Nonsense is an error, not a guess.
        let odd = info_of(Value::Nil, Value::Nil, Value::Nil, "both", 1, 0);
        assert!(parse_info(odd).is_err());
        let ownerless = info_of(Value::Nil, Value::Nil, Value::Nil, "exclusive", 1, 1);
        assert!(parse_info(ownerless).is_err());
    }

    #[test]
    fn parses_holders_in_both_protocols() {
        let flat = Value::Array(vec![
            bulk("owner"),
            bulk("a"),
            bulk("token"),
            Value::Int(7),
            bulk("count"),
            Value::Int(1),
            bulk("ttl"),
            Value::Int(500),
        ]);
        let map = Value::Map(vec![
            (bulk("owner"), bulk("b")),
            (bulk("token"), Value::Int(8)),
            (bulk("count"), Value::Int(2)),
            (bulk("ttl"), Value::Int(-3)),
        ]);
        let holders = parse_holders(Value::Array(vec![flat, map]))
            .unwrap()
            .unwrap();
        assert_eq!(
            holders,
            [
                HolderInfo {
                    owner: "a".into(),
                    token: 7,
                    count: 1,
                    ttl: Some(Duration::from_millis(500))
                },
                HolderInfo {
                    owner: "b".into(),
                    token: 8,
                    count: 2,
                    ttl: Some(Duration::ZERO)
                },
            ]
        );
        assert_eq!(parse_holders(Value::Nil).unwrap(), None);
        assert_eq!(parse_holders(Value::Array(vec![])).unwrap(), Some(vec![]));
        assert!(parse_holders(Value::Int(1)).is_err());
        assert!(parse_holders(Value::Array(vec![Value::Array(vec![bulk("owner")])])).is_err());
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
