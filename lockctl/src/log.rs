//! `lockctl log [KEY]`: holds that ended other than by their owner, from `LOCK.HISTORY key`
//! (one key, on the masters that serve it) or `LOCK.LOG` (every key, every master).

use std::process::ExitCode;

use relock_client::{Relock, Reply as Value};
use relock_protocol::args::Listing;
use relock_protocol::cmd::{History, Log};
use serde_json::json;

use crate::ops::{self, bad_reply, json_text, ms, printable, query, table, utc};
use crate::output::out;

/// How many characters of a key or an owner a table shows.
const WIDTH: usize = 40;

/// One journal entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: i64,
    /// Unix ms.
    pub time: i64,
    pub db: i64,
    /// Empty for a flush or a swap.
    pub key: Vec<u8>,
    pub owner: Vec<u8>,
    pub token: i64,
    pub reason: String,
    /// From grant to end; unknown for holds granted before the server started.
    pub held_ms: Option<i64>,
    /// Who ended it, as `CLIENT LIST` shows a client; empty where the server cannot tell.
    pub client_info: String,
    pub waiters: i64,
}

/// Reads a `LOCK.LOG` or `LOCK.HISTORY` reply.
pub fn parse(value: &Value) -> Result<Vec<Entry>, String> {
    let entries =
        relock_protocol::Entry::decode_all(value).map_err(|e| bad_reply("LOCK.LOG", e.why()))?;
    Ok(entries
        .into_iter()
        .map(|e| Entry {
            id: ops::int(e.id),
            time: e.time_ms,
            db: e.db,
            key: e.key,
            owner: e.owner,
            token: ops::int(e.token),
            reason: e.reason,
            held_ms: e.held_ms,
            client_info: e.client_info,
            waiters: ops::int(e.waiters),
        })
        .collect())
}

/// The parts of a `client-info` that say who: `id=17 name=ops user=admin addr=10.0.0.5:51234`
/// (an empty name left out); `-` when the server could not tell.
pub fn who(client_info: &str) -> String {
    let wanted = ["id", "name", "user", "addr"];
    let parts: Vec<String> = wanted
        .iter()
        .filter_map(|w| {
            client_info
                .split(' ')
                .find_map(|kv| kv.strip_prefix(w).and_then(|r| r.strip_prefix('=')))
                .filter(|v| !v.is_empty())
                .map(|v| format!("{w}={}", printable(v.as_bytes(), WIDTH)))
        })
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(" ")
    }
}

impl Entry {
    pub fn json(&self, master: &str) -> serde_json::Value {
        json!({
            "master": master,
            "id": self.id,
            "time": self.time,
            "db": self.db,
            "key": json_text(&self.key),
            "owner": json_text(&self.owner),
            "token": self.token,
            "reason": self.reason,
            "held_ms": self.held_ms,
            "client_info": self.client_info,
            "waiters": self.waiters,
        })
    }

    /// The key as a table shows it (`db 3: key` outside db 0; `(every key)` for a flush).
    fn key_text(&self) -> String {
        let key = if self.key.is_empty() {
            "(every key)".to_string()
        } else {
            printable(&self.key, WIDTH)
        };
        if self.db == 0 {
            key
        } else {
            format!("db {}: {key}", self.db)
        }
    }
}

pub async fn show(relock: &Relock, key: Option<&str>, count: u32, json: bool) -> ExitCode {
    let reports = match key {
        Some(key) => {
            let cmd = query(&History {
                key: key.as_bytes(),
                count: Some(count),
            });
            relock.query_about(key, &cmd).await
        }
        None => {
            let cmd = query(&Log {
                what: Some(Listing::First(count as usize)),
            });
            relock.query_masters(&cmd).await
        }
    };
    let several = reports.len() > 1;
    let mut failed = false;
    let mut found: Vec<(String, Entry)> = Vec::new();
    let mut errors = Vec::new();
    for report in reports {
        match report
            .result
            .map_err(|e| e.to_string())
            .and_then(|v| parse(&v))
        {
            Ok(list) => found.extend(list.into_iter().map(|e| (report.node.clone(), e))),
            Err(why) => {
                failed = true;
                errors.push((report.node, why));
            }
        }
    }
    // Newest first, over every master.
    found.sort_by(|(_, a), (_, b)| b.time.cmp(&a.time).then(b.id.cmp(&a.id)));
    if json {
        ops::print_json(&json!({
            "key": key,
            "entries": found.iter().map(|(m, e)| e.json(m)).collect::<Vec<_>>(),
            "errors": errors.iter().map(|(m, why)| json!({"master": m, "error": why})).collect::<Vec<_>>(),
        }));
        return ops::status(failed);
    }
    for (master, why) in &errors {
        out!("{master}: error: {}", ops::shown_error(why));
    }
    if found.is_empty() {
        if errors.is_empty() {
            match key {
                Some(k) => out!(
                    "no hold of {} ended other than by its owner (that this journal remembers)",
                    printable(k.as_bytes(), 0)
                ),
                None => out!("no hold ended other than by its owner (that the journal remembers)"),
            }
        }
        return ops::status(failed);
    }
    print_table(&found, key, several);
    ops::status(failed)
}

/// The entries `found` (with their masters), newest first, as a table: a column for the
/// master when there are `several`, one for the key when no `key` was asked for.
fn print_table(found: &[(String, Entry)], key: Option<&str>, several: bool) {
    let mut header = vec!["TIME (UTC)"];
    if several {
        header.push("MASTER");
    }
    if key.is_none() {
        header.push("KEY");
    }
    header.extend(["OWNER", "TOKEN", "REASON", "HELD", "WAITERS", "ENDED BY"]);
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|(master, e)| {
            let mut row = vec![utc(e.time)];
            if several {
                row.push(master.clone());
            }
            if key.is_none() {
                row.push(e.key_text());
            }
            row.extend([
                if e.owner.is_empty() {
                    "-".to_string()
                } else {
                    printable(&e.owner, WIDTH)
                },
                e.token.to_string(),
                printable(e.reason.as_bytes(), WIDTH),
                ms(e.held_ms),
                e.waiters.to_string(),
                who(&e.client_info),
            ]);
            row
        })
        .collect();
    out!("{}", table(&header, &rows));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_names_the_client() {
        let info = "id=17 addr=127.0.0.1:51234 laddr=127.0.0.1:6379 fd=9 name=ops age=3 \
                    idle=0 flags=N db=0 user=admin cmd=lock.forcerelease";
        assert_eq!(who(info), "id=17 name=ops user=admin addr=127.0.0.1:51234");
        assert_eq!(
            who("id=3 name= user=default addr=x:1"),
            "id=3 user=default addr=x:1"
        );
        assert_eq!(who(""), "-");
        assert_eq!(who("id=3 name=\x1b[31mred"), "id=3 name=\\x1b[31mred");
    }
}
