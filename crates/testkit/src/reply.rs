//! Readers of replies and of the module's listings, the same in every suite: a value as an
//! integer, bytes, text or a field map (RESP2 flat pairs or a RESP3 map), a listing as entries,
//! the reasons of a journal listing, `used_memory`, a config change. Each panics with what it
//! got when the reply is not what it reads.
use std::collections::HashMap;

use redis::{Connection, Value};

pub fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// A string reply's bytes; nil reads as none.
pub fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::VerbatimString { text, .. } => text.clone().into_bytes(),
        Value::Okay => b"OK".to_vec(),
        Value::Nil => Vec::new(),
        other => panic!("not a string: {other:?}"),
    }
}

pub fn text(v: &Value) -> String {
    String::from_utf8_lossy(&bytes(v)).into_owned()
}

/// A map entry (RESP3) or a flat array of pairs (RESP2) as names to values.
pub fn fields(v: &Value) -> HashMap<String, Value> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
        other => panic!("not an entry: {other:?}"),
    };
    pairs.into_iter().map(|(k, v)| (text(&k), v)).collect()
}

/// A listing's entries as field maps.
pub fn entries(c: &mut Connection, cmd: redis::Cmd) -> Vec<HashMap<String, Value>> {
    match cmd.query::<Value>(c) {
        Ok(Value::Array(items)) => items.iter().map(fields).collect(),
        other => panic!("{}: {other:?}", super::show(&cmd)),
    }
}

/// The reasons of a journal listing (`LOCK.LOG n`, `LOCK.HISTORY key n`), newest first.
pub fn reasons(c: &mut Connection, cmd: redis::Cmd) -> Vec<String> {
    entries(c, cmd).iter().map(|e| text(&e["reason"])).collect()
}

/// The error a command answers, as the client shows it (panics on a success).
pub fn error(c: &mut Connection, cmd: redis::Cmd) -> String {
    match cmd.query::<Value>(c) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{} answered {v:?}", super::show(&cmd)),
    }
}

/// The error a command that must fail answers, as Redis wrote it: `CODE detail` (e.g. `ERR
/// invalid ttl_ms`). Takes the command or a reference to it.
pub fn error_reply(c: &mut Connection, cmd: impl std::borrow::Borrow<redis::Cmd>) -> String {
    let cmd = cmd.borrow();
    match cmd.query::<Value>(c) {
        Ok(v) => panic!("{} replied {v:?}, expected an error", super::show(cmd)),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => e.to_string(),
        }
        .trim()
        .to_string(),
    }
}

/// `used_memory` of `INFO memory`.
pub fn used_memory(c: &mut Connection) -> i64 {
    memory_field(c, "used_memory").expect("used_memory")
}

/// An integer field of `INFO memory`, if the server has it.
pub fn memory_field(c: &mut Connection, name: &str) -> Option<i64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(c)
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

pub fn config_set(c: &mut Connection, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap_or_else(|e| panic!("CONFIG SET {name}: {e}"));
}

/// The reasons of the journal's newest `n` entries, newest first.
pub fn log_reasons(c: &mut Connection, n: usize) -> Vec<String> {
    reasons(c, redis::cmd("LOCK.LOG").arg(n).clone())
}

/// The reasons of `key`'s newest journal entries (up to 100), newest first.
pub fn history_reasons(c: &mut Connection, key: &str) -> Vec<String> {
    reasons(c, redis::cmd("LOCK.HISTORY").arg(key).arg(100).clone())
}
