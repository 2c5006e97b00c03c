//! `lockctl waiters KEY`: the queue of a key on each master, from `LOCK.WAITERS`.

use std::process::ExitCode;

use relock_client::Relock;
use relock_client::{Command, Reply as Value};
use relock_protocol::cmd::Waiters;
use serde_json::json;

use crate::ops::{self, bad_reply, json_text, ms, printable, query, table};
use crate::output::out;

/// How many characters of an owner a table shows.
pub const OWNER_WIDTH: usize = 48;

/// One entry of `LOCK.WAITERS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiter {
    pub owner: Vec<u8>,
    /// `exclusive` or `shared`.
    pub mode: String,
    /// A shared waiter's limit (0: none, or exclusive).
    pub limit: i64,
    pub permits: i64,
    /// The waiting connection's id, as `CLIENT LIST` shows it.
    pub client: i64,
    pub waited_ms: i64,
    /// -1: no timeout.
    pub timeout_ms: i64,
    pub ttl_ms: i64,
}

/// `LOCK.WAITERS key COUNT n`.
pub fn command(key: &[u8], count: u32) -> Command {
    query(&Waiters {
        key,
        count: Some(count),
    })
}

/// Reads a `LOCK.WAITERS` reply.
pub fn parse(value: &Value) -> Result<Vec<Waiter>, String> {
    let waiters =
        relock_protocol::Waiter::decode_all(value).map_err(|e| bad_reply(e.command(), e.why()))?;
    Ok(waiters
        .into_iter()
        .map(|w| {
            let (mode, limit) = ops::mode_words(w.mode, 0);
            Waiter {
                owner: w.owner,
                mode: mode.to_string(),
                limit,
                permits: ops::int(w.permits),
                client: w.client,
                waited_ms: w.waited_ms,
                timeout_ms: w.timeout_ms.unwrap_or(-1),
                ttl_ms: w.ttl_ms,
            }
        })
        .collect())
}

impl Waiter {
    /// The mode as a table shows it: `exclusive`, `shared`, `shared limit 3`, `shared limit 5
    /// permits 2`.
    pub fn mode_text(&self) -> String {
        match (self.mode.as_str(), self.limit, self.permits) {
            ("shared", 0, _) => "shared".to_string(),
            ("shared", limit, 1) => format!("shared limit {limit}"),
            ("shared", limit, p) => format!("shared limit {limit} permits {p}"),
            (mode, _, _) => mode.to_string(),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "owner": json_text(&self.owner),
            "mode": self.mode,
            "limit": self.limit,
            "permits": self.permits,
            "client": self.client,
            "waited_ms": self.waited_ms,
            "timeout_ms": self.timeout_ms,
            "ttl_ms": self.ttl_ms,
        })
    }
}

/// The table rows of a queue, first waiter first.
pub fn rows(waiters: &[Waiter], owner_width: usize) -> Vec<Vec<String>> {
    waiters
        .iter()
        .enumerate()
        .map(|(i, w)| {
            vec![
                (i + 1).to_string(),
                printable(&w.owner, owner_width),
                w.mode_text(),
                w.client.to_string(),
                ms(Some(w.waited_ms)),
                if w.timeout_ms < 0 {
                    "none".to_string()
                } else {
                    ms(Some(w.timeout_ms))
                },
                ms(Some(w.ttl_ms)),
            ]
        })
        .collect()
}

pub const HEADER: [&str; 7] = [
    "#",
    "OWNER",
    "MODE",
    "CLIENT",
    "WAITED",
    "TIMEOUT LEFT",
    "TTL",
];

pub async fn show(relock: &Relock, key: &str, count: u32, json: bool) -> ExitCode {
    let reports = relock
        .query_about(key, &command(key.as_bytes(), count))
        .await;
    let mut failed = false;
    let mut docs = Vec::new();
    for report in reports {
        let queue = report
            .result
            .map_err(|e| e.to_string())
            .and_then(|v| parse(&v));
        match queue {
            Ok(queue) if json => docs.push(json!({
                "master": report.node,
                "waiters": queue.iter().map(Waiter::json).collect::<Vec<_>>(),
            })),
            Ok(queue) if queue.is_empty() => {
                out!(
                    "{}: nobody waits for {}",
                    report.node,
                    printable(key.as_bytes(), 0)
                )
            }
            Ok(queue) => {
                out!(
                    "{}: {} waiting for {}{}",
                    report.node,
                    queue.len(),
                    printable(key.as_bytes(), 0),
                    if count > 0 && queue.len() as u64 == u64::from(count) {
                        " (the first of them; --count 0 shows all)"
                    } else {
                        ""
                    }
                );
                out!("{}", table(&HEADER, &rows(&queue, OWNER_WIDTH)));
            }
            Err(why) => {
                failed = true;
                if json {
                    docs.push(json!({"master": report.node, "error": why}));
                } else {
                    out!("{}: error: {}", report.node, ops::shown_error(why));
                }
            }
        }
    }
    if json {
        ops::print_json(&json!({"key": key, "masters": docs}));
    }
    ops::status(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(mode: &str, limit: i64, permits: i64) -> Waiter {
        Waiter {
            owner: b"web-3/42/abc".to_vec(),
            mode: mode.into(),
            limit,
            permits,
            client: 17,
            waited_ms: 1200,
            timeout_ms: -1,
            ttl_ms: 30_000,
        }
    }

    #[test]
    fn modes_read_well() {
        assert_eq!(waiter("exclusive", 0, 1).mode_text(), "exclusive");
        assert_eq!(waiter("shared", 0, 1).mode_text(), "shared");
        assert_eq!(waiter("shared", 3, 1).mode_text(), "shared limit 3");
        assert_eq!(
            waiter("shared", 5, 2).mode_text(),
            "shared limit 5 permits 2"
        );
    }

    #[test]
    fn rows_in_queue_order() {
        let rows = rows(&[waiter("exclusive", 0, 1), waiter("shared", 3, 1)], 20);
        assert_eq!(
            rows[0],
            [
                "1",
                "web-3/42/abc",
                "exclusive",
                "17",
                "1.2s",
                "none",
                "30.0s"
            ]
        );
        assert_eq!(rows[1][0], "2");
    }
}
