//! Where redis-rs's replies become relock-protocol's [`Reply`], which its decoders read.

use relock_protocol::Reply;

/// redis-rs's reply as a [`Reply`]: the one place the client's Redis library meets the
/// decoders (relock-protocol names no Redis library).
pub(crate) fn reply_of(value: redis::Value) -> Reply {
    use redis::Value;
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Bulk(b),
        Value::SimpleString(s) => Reply::Simple(s),
        Value::Okay => Reply::Simple("OK".to_owned()),
        Value::VerbatimString { text, .. } => Reply::Verbatim(text),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        Value::Set(items) => Reply::Set(items.into_iter().map(reply_of).collect()),
        Value::Map(pairs) => Reply::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (reply_of(k), reply_of(v)))
                .collect(),
        ),
        Value::Double(d) => Reply::Double(d),
        Value::Boolean(b) => Reply::Boolean(b),
        Value::ServerError(e) => Reply::Error(format!("{e:?}")),
        Value::BigNumber(n) => Reply::BigNumber(n.to_string()),
        other => Reply::Other(format!("{other:?}")),
    }
}
