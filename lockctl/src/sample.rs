//! One reading of every master, what `lockctl top` shows and `lockctl metrics` exports:
//! `INFO relock`, the hottest keys of `LOCK.STATS`, and for each of them `LOCK.INFO` and the
//! head of its queue (`LOCK.WAITERS`). Every command is bounded by the node timeout, and the
//! masters and keys are read concurrently, so one reading takes a few round trips whatever
//! the number of masters.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::join_all;
use relock_client::Relock;
use relock_client::{Command, Reply as Value};
use relock_protocol::args::Listing;
use relock_protocol::cmd::{Info, Stats};
use serde_json::json;
use tokio::time::Instant;

use crate::ops::{self, bad_reply, json_text, query};
use crate::waiters::{self, Waiter};

/// The `INFO relock` section of one master.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelockInfo {
    /// Every numeric field, by its name without the `relock_` prefix (`acquired_total`).
    pub fields: BTreeMap<String, f64>,
    /// `wait_percentiles_ms`: (quantile, ms), e.g. (0.99, 12.5).
    pub wait: Vec<(f64, f64)>,
    /// `hold_percentiles_ms`.
    pub hold: Vec<(f64, f64)>,
}

impl RelockInfo {
    pub fn get(&self, field: &str) -> Option<f64> {
        self.fields.get(field).copied()
    }

    /// A quantile of a distribution, in ms.
    pub fn quantile(of: &[(f64, f64)], q: f64) -> Option<f64> {
        of.iter()
            .find(|(at, _)| (at - q).abs() < 1e-9)
            .map(|(_, ms)| *ms)
    }
}

/// Reads `INFO relock`'s text.
pub fn parse_info(text: &str) -> Result<RelockInfo, String> {
    let mut info = RelockInfo::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.strip_prefix("relock_").unwrap_or(name);
        if let Ok(n) = value.parse::<f64>() {
            info.fields.insert(name.to_string(), n);
        } else if name.ends_with("_percentiles_ms") {
            let points = value
                .split(',')
                .filter_map(|p| {
                    let (q, v) = p.split_once('=')?;
                    let q: f64 = q.strip_prefix('p')?.parse().ok()?;
                    Some((q / 100.0, v.parse().ok()?))
                })
                .collect();
            match name {
                "wait_percentiles_ms" => info.wait = points,
                "hold_percentiles_ms" => info.hold = points,
                _ => {}
            }
        }
    }
    if info.fields.is_empty() {
        return Err(
            "INFO relock has no fields: is the relock module loaded on this server?".to_string(),
        );
    }
    Ok(info)
}

/// A reply's text (a bulk or verbatim string).
fn text_of(value: &Value) -> Result<String, String> {
    match value {
        Value::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::Verbatim(text) | Value::Simple(text) => Ok(text.clone()),
        other => Err(bad_reply("INFO", &format!("{other:?}"))),
    }
}

/// One entry of `LOCK.STATS`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyStats {
    pub key: Vec<u8>,
    pub db: i64,
    pub waits: i64,
    pub granted: i64,
    pub timeouts: i64,
    pub contended: i64,
    pub wait_ms_total: i64,
    /// How much `wait_ms_total` may overstate (the top-k's error bound).
    pub error: i64,
    pub wait_ms_max: i64,
}

/// Reads a `LOCK.STATS` reply.
pub fn parse_stats(value: &Value) -> Result<Vec<KeyStats>, String> {
    let stats = relock_protocol::KeyStats::decode_all(value)
        .map_err(|e| bad_reply(e.command(), e.why()))?;
    Ok(stats
        .into_iter()
        .map(|s| KeyStats {
            key: s.key,
            db: s.db,
            waits: s.waits,
            granted: s.granted,
            timeouts: s.timeouts,
            contended: s.contended,
            wait_ms_total: s.wait_ms_total,
            error: s.error,
            wait_ms_max: s.wait_ms_max,
        })
        .collect())
}

/// What `LOCK.INFO` says of a key now.
#[derive(Debug, Clone, PartialEq)]
pub struct LockState {
    /// The exclusive holder (none for a shared lock).
    pub owner: Option<Vec<u8>>,
    pub mode: String,
    pub holders: i64,
    pub waiters: i64,
    pub limit: i64,
    pub ttl_ms: i64,
}

/// Reads a `LOCK.INFO` reply: `None` when the key is not locked.
pub fn parse_lock_info(value: &Value) -> Result<Option<LockState>, String> {
    let info =
        relock_protocol::LockInfo::decode(value).map_err(|e| bad_reply(e.command(), e.why()))?;
    Ok(info.map(|i| {
        // An exclusive lock's limit is 1, as the module says it.
        let (mode, limit) = ops::mode_words(i.mode, 1);
        LockState {
            owner: i.owner.filter(|o| !o.is_empty()),
            mode: mode.to_string(),
            holders: ops::int(i.holders),
            waiters: ops::int(i.waiters),
            limit,
            ttl_ms: i.ttl.map_or(-1, |t| ops::int(t.as_millis())),
        }
    }))
}

/// A hot key: its statistics, and what holds and waits for it now.
#[derive(Debug, Clone)]
pub struct HotKey {
    pub stats: KeyStats,
    /// `LOCK.INFO`: `Ok(None)` when not locked; an error when it could not be asked (a key of
    /// another db than lockctl's connection, a slot that moved).
    pub lock: Result<Option<LockState>, String>,
    /// The head of its queue (empty when not asked for).
    pub queue: Vec<Waiter>,
}

/// One master's reading.
#[derive(Debug, Clone)]
pub struct MasterSample {
    pub master: String,
    /// When the reading was taken (for rates).
    pub at: Instant,
    /// How long it took.
    pub took: Duration,
    pub info: Result<RelockInfo, String>,
    /// The hottest keys, hottest first (`LOCK.STATS` needs the admin ACL category).
    pub hot: Result<Vec<HotKey>, String>,
}

/// What to read.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// How many hot keys per master (0: none).
    pub keys: usize,
    /// How many waiters of each hot key (0: none).
    pub queue: u32,
    /// The db lockctl's connections use: `LOCK.INFO` is asked only of keys in it.
    pub db: i64,
}

/// Reads every master once.
pub async fn sample(relock: &Relock, ask: Ask) -> Vec<MasterSample> {
    let start = Instant::now();
    let info_cmd = Command::new("INFO").arg("relock");
    let stats_cmd = query(&Stats {
        what: Some(Listing::First(ask.keys.max(1))),
    });
    let (infos, stats) = if ask.keys > 0 {
        tokio::join!(
            relock.query_masters(&info_cmd),
            relock.query_masters(&stats_cmd)
        )
    } else {
        (relock.query_masters(&info_cmd).await, Vec::new())
    };
    let readings = infos.into_iter().map(|report| {
        let stats = stats.iter().find(|s| s.node == report.node);
        async move {
            let info = report
                .result
                .map_err(|e| e.to_string())
                .and_then(|v| text_of(&v))
                .and_then(|t| parse_info(&t));
            let hot = match (ask.keys, stats) {
                (0, _) => Ok(Vec::new()),
                (_, None) => Err("no LOCK.STATS reply".to_string()),
                (_, Some(s)) => match &s.result {
                    Ok(v) => match parse_stats(v) {
                        Ok(list) => Ok(hot_keys(relock, &report.node, list, ask).await),
                        Err(why) => Err(why),
                    },
                    Err(e) => Err(e.to_string()),
                },
            };
            let now = Instant::now();
            MasterSample {
                master: report.node,
                at: now,
                took: now - start,
                info,
                hot,
            }
        }
    });
    join_all(readings).await
}

/// `LOCK.INFO` and the head of the queue of each key, on `master`, concurrently.
async fn hot_keys(relock: &Relock, master: &str, list: Vec<KeyStats>, ask: Ask) -> Vec<HotKey> {
    join_all(list.into_iter().take(ask.keys).map(|stats| async move {
        if stats.db != ask.db {
            return HotKey {
                lock: Err(format!("in db {}", stats.db)),
                queue: Vec::new(),
                stats,
            };
        }
        let key = stats.key.as_slice();
        let info_cmd = query(&Info { key });
        let queue_cmd = waiters::command(key, ask.queue);
        let (lock, queue) = if ask.queue > 0 {
            let (l, q) = tokio::join!(
                relock.query_master(master, &info_cmd),
                relock.query_master(master, &queue_cmd)
            );
            (l, Some(q))
        } else {
            (relock.query_master(master, &info_cmd).await, None)
        };
        HotKey {
            lock: lock
                .map_err(|e| e.to_string())
                .and_then(|v| parse_lock_info(&v)),
            queue: queue
                .and_then(|q| q.ok())
                .and_then(|v| waiters::parse(&v).ok())
                .unwrap_or_default(),
            stats,
        }
    }))
    .await
}

impl KeyStats {
    pub fn json(&self) -> serde_json::Value {
        json!({
            "key": json_text(&self.key),
            "db": self.db,
            "waits": self.waits,
            "granted": self.granted,
            "timeouts": self.timeouts,
            "contended": self.contended,
            "wait_ms_total": self.wait_ms_total,
            "error": self.error,
            "wait_ms_max": self.wait_ms_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_read() {
        let text = "# relock\r\nrelock_locks:3\r\nrelock_acquired_total:12\r\n\
                    relock_wait_percentiles_ms:p50=1.000,p90=2.500,p99=10.000,p99.9=20.000\r\n\
                    relock_hold_percentiles_ms:p50=0.000,p90=0.000,p99=0.000,p99.9=0.000\r\n";
        let info = parse_info(text).expect("info");
        assert_eq!(info.get("locks"), Some(3.0));
        assert_eq!(info.get("acquired_total"), Some(12.0));
        assert_eq!(RelockInfo::quantile(&info.wait, 0.99), Some(10.0));
        assert_eq!(RelockInfo::quantile(&info.wait, 0.999), Some(20.0));
        assert!(parse_info("# relock\r\n").is_err());
    }
}
