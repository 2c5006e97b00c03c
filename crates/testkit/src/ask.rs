//! One probe per question a test asks the server about a key, each reading the module's
//! replies by field name (a RESP2 flat array of pairs or a RESP3 map), never by position:
//! `lock_fields` (`LOCK.INFO`), `waiters` (`LOCK.WAITERS`), and `holders` (`LOCK.HOLDERS`) with the shapes the
//! tests compare.
use std::collections::HashMap;

use redis::{Connection, Value};

use crate::reply::{fields, int, text};
use crate::Server;

/// `LOCK.INFO key` as its fields by name, or `None` when there is no lock at `key`.
pub fn lock_fields(
    c: &mut Connection,
    key: impl redis::ToRedisArgs,
) -> Option<HashMap<String, Value>> {
    crate::lock_info_pairs(c, key)
        .map(|pairs| pairs.into_iter().map(|(k, v)| (text(&k), v)).collect())
}

/// How many wait at `key`: the length of its queue (`LOCK.WAITERS key COUNT 0`), which a key
/// has also while nobody holds it (in the restart grace, `LOCK.INFO` is nil there).
pub fn waiters(c: &mut Connection, key: impl redis::ToRedisArgs) -> i64 {
    let list: Vec<Value> = crate::cmd!("LOCK.WAITERS", key, "COUNT", 0)
        .query(c)
        .expect("LOCK.WAITERS");
    list.len() as i64
}

/// One entry of `LOCK.HOLDERS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: Vec<u8>,
    pub token: i64,
    pub count: i64,
    /// Milliseconds left of this holder's lease.
    pub ttl: i64,
    pub permits: i64,
}

/// Every holder of `key` (`LOCK.HOLDERS key COUNT 0`), in token order; none when there is no
/// lock at `key`.
pub fn holders(c: &mut Connection, key: impl redis::ToRedisArgs) -> Vec<Holder> {
    let reply: Value = redis::cmd("LOCK.HOLDERS")
        .arg(key)
        .arg("COUNT")
        .arg(0)
        .query(c)
        .expect("LOCK.HOLDERS");
    let entries = match reply {
        Value::Nil => return Vec::new(),
        Value::Array(entries) => entries,
        other => panic!("LOCK.HOLDERS replied {other:?}"),
    };
    entries
        .iter()
        .map(|entry| {
            let f = fields(entry);
            let Value::BulkString(owner) = &f["owner"] else {
                panic!("LOCK.HOLDERS owner: {f:?}")
            };
            Holder {
                owner: owner.clone(),
                token: int(&f["token"]),
                count: int(&f["count"]),
                ttl: int(&f["ttl"]),
                permits: int(&f["permits"]),
            }
        })
        .collect()
}

/// The holders as (owner, token): who holds, under which token.
pub fn owner_token(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64)> {
    holders(c, key)
        .into_iter()
        .map(|h| (h.owner, h.token))
        .collect()
}

/// The holders as (owner, token, count): what survives a restart or a copy (no lease left).
pub fn owner_token_count(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64, i64)> {
    holders(c, key)
        .into_iter()
        .map(|h| (h.owner, h.token, h.count))
        .collect()
}

/// The holders as (owner, token, permits).
pub fn owner_token_permits(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64, i64)> {
    holders(c, key)
        .into_iter()
        .map(|h| (h.owner, h.token, h.permits))
        .collect()
}

/// The holders as (owner as text, token, count, permits).
pub fn named_token_count_permits(c: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64)> {
    holders(c, key)
        .into_iter()
        .map(|h| {
            (
                String::from_utf8_lossy(&h.owner).into_owned(),
                h.token,
                h.count,
                h.permits,
            )
        })
        .collect()
}

/// The holders as (owner as text, permits).
pub fn named_permits(c: &mut Connection, key: &str) -> Vec<(String, i64)> {
    holders(c, key)
        .into_iter()
        .map(|h| (String::from_utf8_lossy(&h.owner).into_owned(), h.permits))
        .collect()
}

/// `LOCK.INFO key` as (mode, count or -1 where it is not a number, holders); `None` for nil.
pub fn mode_of(c: &mut Connection, key: &str) -> Option<(String, i64, i64)> {
    let f = lock_fields(c, key)?;
    let count = match &f["count"] {
        Value::Int(n) => *n,
        _ => -1,
    };
    Some((text(&f["mode"]), count, int(&f["holders"])))
}

/// The owners of `key`'s queue, in queue order (`LOCK.WAITERS key COUNT 0`).
pub fn queued(c: &mut Connection, key: &str) -> Vec<String> {
    crate::reply::entries(c, crate::cmd!("LOCK.WAITERS", key, "COUNT", 0))
        .iter()
        .map(|e| text(&e["owner"]))
        .collect()
}

/// `LOCK.HISTORY key` as (reason, owner) pairs, newest first.
pub fn history(c: &mut Connection, key: &str) -> Vec<(String, String)> {
    crate::reply::entries(c, crate::cmd!("LOCK.HISTORY", key, 100))
        .iter()
        .map(|e| (text(&e["reason"]), text(&e["owner"])))
        .collect()
}

/// `DEBUG DIGEST`: equal on two servers when their keyspaces are.
pub fn digest(c: &mut Connection) -> String {
    crate::cmd!("DEBUG", "DIGEST")
        .query(c)
        .expect("DEBUG DIGEST")
}

/// A number of the server's own `INFO section` (`blocked_clients` of `clients`, `used_memory`
/// of `memory`), `None` when the section has no such field.
pub fn server_field(c: &mut Connection, section: &str, field: &str) -> Option<i64> {
    let info: String = crate::cmd!("INFO", section).query(c).expect("INFO");
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .find(|(name, _)| *name == field)
        .and_then(|(_, v)| v.parse().ok())
}

/// The server's CPU time so far (`INFO cpu`: system plus user), in seconds.
pub fn cpu_seconds(c: &mut Connection) -> f64 {
    let info: String = crate::cmd!("INFO", "cpu").query(c).expect("INFO cpu");
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .filter(|(name, _)| *name == "used_cpu_sys" || *name == "used_cpu_user")
        .map(|(_, v)| v.parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// Whether the server has a command (`COMMAND INFO name`), e.g. `CLUSTER|MIGRATESLOTS`.
fn has_command(c: &mut Connection, name: &str) -> bool {
    let docs: Value = crate::cmd!("COMMAND", "INFO", name)
        .query(c)
        .expect("COMMAND INFO");
    matches!(docs, Value::Array(ref items) if items.first().is_some_and(|i| *i != Value::Nil))
}

/// Whether this server has Valkey 9's atomic slot migration: `CLUSTER MIGRATESLOTS` exists.
pub fn migrateslots_supported(c: &mut Connection) -> bool {
    has_command(c, "CLUSTER|MIGRATESLOTS")
}

/// Whether this server has Redis's atomic slot migration (8.4+): `CLUSTER MIGRATION` exists.
pub fn cluster_migration_supported(c: &mut Connection) -> bool {
    has_command(c, "CLUSTER|MIGRATION")
}

/// The state of the newest migration job `CLUSTER GETSLOTMIGRATIONS` lists on `c` (Valkey 9).
pub fn job_state(c: &mut Connection) -> Option<String> {
    let jobs: Value = crate::cmd!("CLUSTER", "GETSLOTMIGRATIONS").query(c).ok()?;
    let Value::Array(jobs) = jobs else {
        return None;
    };
    let Value::Array(fields) = jobs.last()? else {
        return None;
    };
    fields.chunks(2).find_map(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] if name == b"state" => {
            Some(String::from_utf8_lossy(value).into_owned())
        }
        _ => None,
    })
}

/// A field of the task `CLUSTER MIGRATION STATUS ID id` shows on `c` (Redis 8.4+).
pub fn task_field(c: &mut Connection, id: &str, field: &str) -> Option<String> {
    let v: Value = crate::cmd!("CLUSTER", "MIGRATION", "STATUS", "ID", id)
        .query(c)
        .ok()?;
    let Value::Array(tasks) = v else { return None };
    let fields = match tasks.first()? {
        Value::Array(f) => f.clone(),
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        _ => return None,
    };
    fields.chunks(2).find_map(|pair| match pair {
        [Value::BulkString(name), value] if name == field.as_bytes() => Some(match value {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        }),
        _ => None,
    })
}

/// `LOCK.INFO key` on `server` as text fields (integers in decimal, nil as `nil`), `None` when
/// there is no lock at `key`.
pub fn info_text(server: &Server, key: &str) -> Option<HashMap<String, String>> {
    lock_fields(&mut server.conn(), key).map(|fields| {
        fields
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::Int(n) => n.to_string(),
                    Value::Nil => "nil".to_string(),
                    other => redis::from_redis_value(&other).expect("text"),
                };
                (k, text)
            })
            .collect()
    })
}

/// (owner, token) of the lock at `key` on `server` ([`lock_fields`]), `None` when free.
pub fn holder(server: &Server, key: &str) -> Option<(String, u64)> {
    lock_fields(&mut server.conn(), key).map(|i| {
        (
            redis::from_redis_value(&i["owner"]).expect("owner"),
            redis::from_redis_value(&i["token"]).expect("token"),
        )
    })
}

/// (owner, token, count) of the lock at `key` on `server` ([`lock_fields`]), `None` when free:
/// [`holder`] with the reentry count.
pub fn holder_count(server: &Server, key: &str) -> Option<(String, u64, u64)> {
    lock_fields(&mut server.conn(), key).map(|i| {
        (
            redis::from_redis_value(&i["owner"]).expect("owner"),
            redis::from_redis_value(&i["token"]).expect("token"),
            redis::from_redis_value(&i["count"]).expect("count"),
        )
    })
}

/// `LOCK.ACQUIRE` as `owner` on `server`: the token, if granted (`None` when someone else
/// holds it; [`crate::acquire`] is for a lock the test knows is free).
pub fn acquire_as(server: &Server, key: &str, owner: &str, ttl_ms: u64) -> Option<u64> {
    crate::cmd!("LOCK.ACQUIRE", key, owner, ttl_ms)
        .query(&mut server.conn())
        .expect("LOCK.ACQUIRE")
}

/// `LOCK.FORCERELEASE` on `server`.
pub fn force_release(server: &Server, key: &str) {
    let _: i64 = crate::cmd!("LOCK.FORCERELEASE", key)
        .query(&mut server.conn())
        .expect("LOCK.FORCERELEASE");
}

/// How many times `server` ran `command` (`lock.renew`; module commands show in upper
/// case, so case does not matter).
pub fn calls(server: &Server, command: &str) -> u64 {
    command_stat(server, command, "calls")
}

/// How many times `server` refused to run `command` (ACL, arity...): `rejected_calls`.
pub fn rejected(server: &Server, command: &str) -> u64 {
    command_stat(server, command, "rejected_calls")
}

/// One field of `command`'s line of `INFO commandstats` (0 when it never ran).
fn command_stat(server: &Server, command: &str, field: &str) -> u64 {
    let info: String = crate::cmd!("INFO", "commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{}:", command.to_lowercase());
    info.lines()
        .find_map(|l| {
            l.trim()
                .to_lowercase()
                .strip_prefix(&prefix)?
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}="))?.parse().ok())
        })
        .unwrap_or(0)
}

/// Waits (at most 15 s) until `key`'s queue has `n` waiters ([`waiters`]).
pub fn await_waiters(c: &mut Connection, key: &str, n: i64) {
    assert!(
        crate::eventually(std::time::Duration::from_secs(15), || waiters(c, key) == n),
        "{key} never had {n} waiters (has {})",
        waiters(c, key)
    );
}

/// Asserts that the server spent under half a second of CPU time in one second while the test
/// sent nothing (no timer or loop spinning): [`cpu_seconds`] before and after.
pub fn assert_idle(c: &mut Connection, what: &str) {
    let before = cpu_seconds(c);
    crate::wait_out_ttl(std::time::Duration::from_secs(1)); // the idle second measured
    let used = cpu_seconds(c) - before;
    assert!(
        used < 0.5,
        "{what}: the server used {used:.2} s of CPU in 1 s while idle (spinning)"
    );
}

/// `PTTL key` in ms (-2: no key, -1: no expiry).
pub fn pttl(c: &mut Connection, key: impl redis::ToRedisArgs) -> i64 {
    crate::int_or_nil(c, crate::cmd!("PTTL", key)).expect("PTTL")
}

/// `EXISTS key`: 1 or 0.
pub fn exists(c: &mut Connection, key: impl redis::ToRedisArgs) -> i64 {
    crate::int_or_nil(c, crate::cmd!("EXISTS", key)).expect("EXISTS")
}

/// The owner and token `LOCK.INFO key` shows ([`lock_fields`]), `None` when there is no lock.
pub fn owner_and_token(c: &mut Connection, key: &str) -> Option<(String, i64)> {
    lock_fields(c, key).map(|i| {
        (
            String::from_utf8_lossy(&crate::reply::bytes(&i["owner"])).into_owned(),
            int(&i["token"]),
        )
    })
}
