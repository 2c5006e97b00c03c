//! Why a hold was lost: the masters' journals (`LOCK.HISTORY`), asked once when a guard loses
//! its lock, read into a typed [`LossReason`] and a sentence a person can act on.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Value};
use relock_protocol::cmd::History;
use tokio::sync::watch;

use crate::error::NodeFailure;
use crate::info::refused;
use crate::reply::reply_of;
use crate::wire;

/// How many journal entries of the key one question asks for: enough for the entries a few
/// flushes and other holders' endings add after ours, bounded so the answer stays small.
pub(crate) const HISTORY_COUNT: u32 = 16;

/// Why the server ended a hold, as its journal (`LOCK.HISTORY`) says, or that nobody can say.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// Its ttl (or a shared hold's lease) ran out: it was not renewed in time.
    Expired,
    /// `LOCK.FORCERELEASE`: an operator broke it.
    ForceReleased,
    /// `DEL`, `UNLINK`, `GETDEL`, an `EXPIRE` in the past, `MIGRATE` away, or the key
    /// overwritten by another value (`SET`, `RENAME` onto it).
    Deleted,
    /// `maxmemory` eviction.
    Evicted,
    /// Granted to a waiter that hung up before the answer reached it.
    Revoked,
    /// Replaced by `RESTORE ... REPLACE` or `COPY ... REPLACE`.
    Restored,
    /// `RENAME` or `MOVE` away: the hold lives on under another name or db.
    Moved,
    /// `FLUSHDB` or `FLUSHALL`.
    Flushed,
    /// `SWAPDB`.
    Swapped,
    /// A reason this version of the client does not know (a newer module), as the server
    /// spelled it.
    Other(String),
    /// No master's journal has the hold: a failover or a restart (the journal is per node and
    /// in memory), the journal turned off, full or without that reason, a module without
    /// `LOCK.HISTORY`, or masters that did not answer. Nobody can say why.
    Unknown,
}

impl LossReason {
    /// The reason as the module spells it (`expired`, `forcereleased`...); `unknown` when
    /// nobody can say.
    pub fn as_str(&self) -> &str {
        match self {
            LossReason::Expired => "expired",
            LossReason::ForceReleased => "forcereleased",
            LossReason::Deleted => "deleted",
            LossReason::Evicted => "evicted",
            LossReason::Revoked => "revoked",
            LossReason::Restored => "restored",
            LossReason::Moved => "moved",
            LossReason::Flushed => "flushed",
            LossReason::Swapped => "swapped",
            LossReason::Other(s) => s,
            LossReason::Unknown => "unknown",
        }
    }

    /// The module's word, read.
    pub(crate) fn parse(word: &str) -> LossReason {
        match word {
            "expired" => LossReason::Expired,
            "forcereleased" => LossReason::ForceReleased,
            "deleted" => LossReason::Deleted,
            "evicted" => LossReason::Evicted,
            "revoked" => LossReason::Revoked,
            "restored" => LossReason::Restored,
            "moved" => LossReason::Moved,
            "flushed" => LossReason::Flushed,
            "swapped" => LossReason::Swapped,
            other => LossReason::Other(other.to_string()),
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lost hold, explained: what the client saw, and what the masters' journals say ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The lock's key (for a group, the key whose journal explained it, else the first).
    pub key: String,
    /// Why, as the journal says; [`LossReason::Unknown`] when none has the hold.
    pub reason: LossReason,
    /// The master whose journal said it (`host:port`).
    pub node: Option<String>,
    /// Who ended it, as `CLIENT LIST` shows a client (`id=17 addr=... name=ops user=admin
    /// ...`), where the server lets the module know: always for `LOCK.FORCERELEASE`, never for
    /// the other reasons (see docs/commands.md).
    pub by: Option<String>,
    /// How long before the question the hold ended, by the master's clock.
    pub ago: Option<Duration>,
    /// How long the hold had lasted when it ended (from its grant), if the server knows.
    pub held: Option<Duration>,
    /// How long it had gone without a successful renewal (or since it was granted) when the
    /// client saw it lost.
    pub unrenewed: Duration,
    /// What the client itself saw: the renewal's answer, or its validity running out.
    pub seen: String,
}

impl Loss {
    /// `by` as people read it: `client 17 (name ops, user admin, addr 10.0.0.5:51234)`.
    pub fn by_whom(&self) -> Option<String> {
        self.by.as_deref().map(describe_client)
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let on = self
            .node
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        let ago = self
            .ago
            .map(|a| format!(" {} ago", secs(a)))
            .unwrap_or_default();
        let by = self
            .by_whom()
            .map(|b| format!(" by {b}"))
            .unwrap_or_default();
        match &self.reason {
            LossReason::Expired => write!(
                f,
                "lock {key:?} expired{on}{ago}: not renewed for {}",
                secs(self.unrenewed)
            ),
            LossReason::ForceReleased => write!(f, "lock {key:?} was force-released{on}{by}{ago}"),
            LossReason::Deleted => write!(
                f,
                "lock {key:?} was deleted{on}{by}{ago} (DEL, UNLINK, an EXPIRE in the past, \
                 MIGRATE, or the key overwritten by another value)"
            ),
            LossReason::Evicted => write!(
                f,
                "lock {key:?} was evicted{on}{ago} (maxmemory; use noeviction where locks live)"
            ),
            LossReason::Revoked => write!(
                f,
                "lock {key:?} was revoked{on}{ago} (granted to a connection that hung up before \
                 the answer reached it)"
            ),
            LossReason::Restored => write!(
                f,
                "lock {key:?} was replaced{on}{by}{ago} (RESTORE or COPY ... REPLACE)"
            ),
            LossReason::Moved => write!(
                f,
                "lock {key:?} was renamed or moved away{on}{by}{ago} (RENAME, MOVE or MIGRATE)"
            ),
            LossReason::Flushed => write!(
                f,
                "lock {key:?} was flushed{on}{by}{ago} (FLUSHDB or FLUSHALL)"
            ),
            LossReason::Swapped => write!(
                f,
                "lock {key:?} went with its database{on}{by}{ago} (SWAPDB)"
            ),
            LossReason::Other(word) => {
                write!(f, "lock {key:?} ended{on}{by}{ago}: {word}")
            }
            LossReason::Unknown => write!(
                f,
                "lock {key:?} was lost ({}); no master's LOCK.HISTORY has it (a failover or a \
                 restart empties the journal, which may also be off or full, or the module \
                 older), so relock cannot know why",
                self.seen
            ),
        }
    }
}

/// Seconds with one decimal: `1.2s`.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A `CLIENT LIST` line (`id=17 addr=... name=ops ... user=admin ...`) as `client 17 (name
/// ops, user admin, addr ...)`; a line of another shape as it is.
pub(crate) fn describe_client(info: &str) -> String {
    let field = |name: &str| {
        info.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .filter(|v| !v.is_empty())
    };
    let Some(id) = field("id") else {
        return info.to_string();
    };
    let details: Vec<String> = [("name", "name"), ("user", "user"), ("addr", "addr")]
        .iter()
        .filter_map(|(f, label)| field(f).map(|v| format!("{label} {v}")))
        .chain(field("via").map(|v| format!("via {v}")))
        .collect();
    if details.is_empty() {
        format!("client {id}")
    } else {
        format!("client {id} ({})", details.join(", "))
    }
}

/// One entry of a `LOCK.HISTORY` reply (relock-protocol's).
pub(crate) use relock_protocol::Entry;

/// `LOCK.HISTORY`'s reply: its entries, newest first (relock-protocol decodes it).
pub(crate) fn parse_history(value: Value) -> Result<Vec<Entry>, NodeFailure> {
    Entry::decode_all(&reply_of(value)).map_err(refused)
}

/// `TIME`'s reply as Unix ms.
pub(crate) fn parse_time(value: &Value) -> Result<i64, NodeFailure> {
    let (secs, micros): (String, String) = FromRedisValue::from_redis_value(value)?;
    match (secs.parse::<i64>(), micros.parse::<i64>()) {
        (Ok(s), Ok(us)) => Ok(s.saturating_mul(1000).saturating_add(us / 1000)),
        _ => Err(NodeFailure::Protocol(format!("TIME: {value:?}"))),
    }
}

/// What one master's journal says about `owner`'s hold (its `token` there, if known), asked
/// at `now_ms` by that master's clock, for a hold last proven `unrenewed` before the question:
/// the owner's own entry if there is one, else a flush or swap of its db since that proof.
pub(crate) fn find_entry<'a>(
    entries: &'a [Entry],
    owner: &str,
    token: Option<u64>,
    now_ms: i64,
    unrenewed: Duration,
) -> Option<&'a Entry> {
    let ours = entries.iter().find(|e| {
        e.owner == owner.as_bytes() && token.is_none_or(|t| t == e.token || e.token == 0)
    });
    if ours.is_some() {
        return ours;
    }
    let since = now_ms.saturating_sub(i64::try_from(unrenewed.as_millis()).unwrap_or(i64::MAX));
    entries
        .iter()
        .find(|e| e.is_whole_db() && e.time_ms >= since)
}

/// The loss `entry` (from master `node`, asked at `now_ms`) explains.
pub(crate) fn explained(
    key: &str,
    node: &str,
    entry: &Entry,
    now_ms: i64,
    unrenewed: Duration,
    seen: &str,
) -> Loss {
    let ms = |n: i64| Duration::from_millis(n.max(0) as u64);
    Loss {
        key: key.to_string(),
        reason: LossReason::parse(&entry.reason),
        node: Some(node.to_string()),
        by: (!entry.client_info.is_empty()).then(|| entry.client_info.clone()),
        ago: Some(ms(now_ms.saturating_sub(entry.time_ms))),
        held: entry.held_ms.map(ms),
        unrenewed,
        seen: seen.to_string(),
    }
}

/// A loss no journal explains.
pub(crate) fn unexplained(key: &str, unrenewed: Duration, seen: &str) -> Loss {
    Loss {
        key: key.to_string(),
        reason: LossReason::Unknown,
        node: None,
        by: None,
        ago: None,
        held: None,
        unrenewed,
        seen: seen.to_string(),
    }
}

/// Asks every master's journal why `owner`'s hold of `keys` ended, and explains the loss the
/// client saw (`seen`) after `unrenewed` without a successful renewal. One round trip per
/// master (per hash slot on a cluster, those concurrently): `LOCK.HISTORY key 16` for every
/// key and `TIME` in one pipeline, each bounded by the node timeout. `tokens` are the hold's
/// tokens per master (in the client's order), where known.
pub(crate) async fn explain(
    masters: &crate::masters::Masters,
    keys: &[String],
    owner: &str,
    tokens: &[Option<u64>],
    unrenewed: Duration,
    seen: &str,
) -> Loss {
    let first = keys.first().map(String::as_str).unwrap_or_default();
    let parts = crate::masters::parts_of(masters.is_cluster(), keys);
    let asked = futures_util::future::join_all(parts.iter().map(|part| async move {
        let mut pipe = redis::pipe();
        for key in part {
            pipe.add_command(wire::cmd(&History {
                key: key.as_bytes(),
                count: Some(HISTORY_COUNT),
            }));
        }
        pipe.cmd("TIME");
        let route = part.first().map(String::as_str).unwrap_or_default();
        (part, masters.ask_each_pipeline(route, &pipe).await)
    }))
    .await;
    for (part, reports) in asked {
        for (i, report) in reports.into_iter().enumerate() {
            let mut values = match report.result {
                Ok(values) if values.len() == part.len() + 1 => values,
                Ok(values) => {
                    tracing::debug!(node = %report.node, ?values, "LOCK.HISTORY: odd reply");
                    continue;
                }
                Err(e) => {
                    tracing::debug!(node = %report.node, error = %e, "no LOCK.HISTORY");
                    continue;
                }
            };
            let Some(Ok(now_ms)) = values.pop().as_ref().map(parse_time) else {
                continue;
            };
            let token = tokens.get(i).copied().flatten();
            for (key, history) in part.iter().zip(values) {
                let Ok(entries) = parse_history(history) else {
                    continue;
                };
                if let Some(entry) = find_entry(&entries, owner, token, now_ms, unrenewed) {
                    return explained(key, &report.node, entry, now_ms, unrenewed, seen);
                }
            }
        }
    }
    unexplained(first, unrenewed, seen)
}

/// The explanation of a guard's loss, once it is known: [`LossWatch::get`] at once,
/// [`LossWatch::explained`] when it comes (one bounded round trip after the loss signal,
/// [`GuardedLock::lost`](crate::GuardedLock::lost), which never waits for it).
#[derive(Debug, Clone)]
pub struct LossWatch(pub(crate) watch::Receiver<Option<Arc<Loss>>>);

impl LossWatch {
    /// The explanation, if the lock was lost and it is known already.
    pub fn get(&self) -> Option<Arc<Loss>> {
        self.0.borrow().clone()
    }

    /// Waits for the explanation of the loss; `None` once the guard ended without one (it was
    /// released, not lost).
    pub async fn explained(&self) -> Option<Arc<Loss>> {
        let mut rx = self.0.clone();
        let found = match rx.wait_for(Option::is_some).await {
            Ok(loss) => loss.clone(),
            Err(_) => None,
        };
        found.or_else(|| rx.borrow().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(owner: &str, token: i64, reason: &str, time: i64, client: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            Value::Int(1),
            bulk("time"),
            Value::Int(time),
            bulk("db"),
            Value::Int(0),
            bulk("key"),
            bulk(if owner.is_empty() { "" } else { "job3" }),
            bulk("owner"),
            bulk(owner),
            bulk("token"),
            Value::Int(token),
            bulk("reason"),
            bulk(reason),
            bulk("held"),
            if owner.is_empty() {
                Value::Nil
            } else {
                Value::Int(900)
            },
            bulk("client-info"),
            bulk(client),
            bulk("waiters"),
            Value::Int(0),
        ])
    }

    const OPS: &str = "id=17 addr=127.0.0.1:51234 laddr=127.0.0.1:6379 fd=9 name=ops age=3 \
                       idle=0 flags=N db=0 cmd=lock.forcerelease user=default resp=2";

    #[test]
    fn reads_history_and_finds_our_entry() {
        let reply = Value::Array(vec![
            entry("someone-else", 9, "expired", 5_000, ""),
            entry("me", 7, "forcereleased", 4_000, OPS),
            entry("me", 3, "expired", 1_000, ""),
        ]);
        let entries = parse_history(reply).unwrap();
        assert_eq!(entries.len(), 3);
        let found = find_entry(&entries, "me", Some(7), 5_200, Duration::from_secs(1)).unwrap();
        assert_eq!(found.reason, "forcereleased");
        // An older hold of the same owner with another token is not ours.
        let found = find_entry(&entries, "me", Some(3), 5_200, Duration::from_secs(1)).unwrap();
        assert_eq!(found.reason, "expired");
        assert!(find_entry(&entries, "nobody", None, 5_200, Duration::from_secs(1)).is_none());
        let loss = explained("job3", "m1", found, 5_200, Duration::from_secs(10), "nil");
        assert_eq!(loss.reason, LossReason::Expired);
        assert_eq!(loss.ago, Some(Duration::from_millis(4_200)));
        assert_eq!(loss.held, Some(Duration::from_millis(900)));
        assert_eq!(
            loss.to_string(),
            "lock \"job3\" expired on m1 4.2s ago: not renewed for 10.0s"
        );
    }

    #[test]
    fn a_flush_counts_only_after_the_last_proof() {
        let reply = Value::Array(vec![entry("", 0, "flushed", 10_000, "")]);
        let entries = parse_history(reply).unwrap();
        // Proven 3 s before the question at 12 s: the flush at 10 s came after.
        let found = find_entry(&entries, "me", Some(7), 12_000, Duration::from_secs(3));
        assert_eq!(found.map(|e| e.reason.as_str()), Some("flushed"));
        // Proven 1 s before: the flush was before our hold.
        assert!(find_entry(&entries, "me", Some(7), 12_000, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn force_release_names_the_client() {
        let entries = parse_history(Value::Array(vec![entry(
            "me",
            7,
            "forcereleased",
            1_000,
            OPS,
        )]))
        .unwrap();
        let loss = explained("job3", "m1", &entries[0], 2_200, Duration::ZERO, "nil");
        assert_eq!(
            loss.to_string(),
            "lock \"job3\" was force-released on m1 by client 17 (name ops, user default, \
             addr 127.0.0.1:51234) 1.2s ago"
        );
        assert_eq!(
            describe_client("user=app via=script"),
            "user=app via=script",
            "no id: as it is"
        );
        assert_eq!(
            describe_client("id=3 name= user=default"),
            "client 3 (user default)"
        );
    }

    #[test]
    fn reasons_round_trip_and_unknown_ones_are_kept() {
        for word in [
            "expired",
            "forcereleased",
            "deleted",
            "evicted",
            "revoked",
            "restored",
            "moved",
            "flushed",
            "swapped",
        ] {
            let reason = LossReason::parse(word);
            assert!(!matches!(reason, LossReason::Other(_)), "{word}");
            assert_eq!(reason.as_str(), word);
        }
        assert_eq!(
            LossReason::parse("teleported"),
            LossReason::Other("teleported".into())
        );
        let loss = unexplained("job3", Duration::from_secs(2), "LOCK.RENEW answered nil");
        assert!(loss.to_string().contains("cannot know why"), "{loss}");
    }

    #[test]
    fn bad_replies_are_errors() {
        assert!(parse_history(Value::Int(3)).is_err());
        assert!(parse_history(Value::Array(vec![Value::Array(vec![bulk("owner")])])).is_err());
        assert_eq!(parse_history(Value::Array(vec![])).unwrap(), vec![]);
        let time = Value::Array(vec![bulk("1700000000"), bulk("123456")]);
        assert_eq!(parse_time(&time).unwrap(), 1_700_000_000_123);
        assert!(parse_time(&Value::Int(1)).is_err());
    }
}
