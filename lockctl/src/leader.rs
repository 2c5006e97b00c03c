//! `lockctl leader KEY [--watch] [--json]`: who leads the election at KEY (its proclaimed
//! value and term), once or at every change seen.

use std::process::ExitCode;

use relock_client::{Error, Leader, LeaderChange, Relock};
use serde_json::json;

use crate::ops::{json_text, printable};
use crate::output::{out, say};
use crate::{EXIT_PERMANENT, EXIT_USAGE};

/// One line for a leader (or none): `value=<v> term=<t> ttl_ms=<ms>`, `no leader`, and
/// ` regressed` after a term lower than the last one seen.
pub(crate) fn line(leader: Option<&Leader>, regressed: bool) -> String {
    let mut text = match leader {
        Some(l) => format!(
            "value={} term={} ttl_ms={}",
            printable(l.value.as_bytes(), 0),
            l.term,
            l.ttl
                .map_or_else(|| "-1".to_string(), |t| t.as_millis().to_string())
        ),
        None => "no leader".to_string(),
    };
    if regressed {
        text.push_str(" regressed");
    }
    text
}

/// The JSON document of a leader (or none): `{"key", "leader": {"value", "term", "ttl_ms",
/// "owner"} | null, "regressed"}`.
pub(crate) fn document(key: &str, leader: Option<&Leader>, regressed: bool) -> serde_json::Value {
    json!({
        "key": json_text(key.as_bytes()),
        "leader": leader.map(|l| json!({
            "value": json_text(l.value.as_bytes()),
            "term": l.term,
            "ttl_ms": l.ttl.map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            "owner": json_text(l.owner.as_bytes()),
        })),
        "regressed": regressed,
    })
}

fn print(key: &str, change: &LeaderChange, json: bool) {
    if json {
        out!(
            "{}",
            document(key, change.leader.as_ref(), change.regressed)
        );
    } else {
        out!("{}", line(change.leader.as_ref(), change.regressed));
    }
}

/// The exit status for an error: 78 when retrying cannot help (a shared key, another type, an
/// ACL), 1 else.
fn failed(e: &Error) -> ExitCode {
    say!("{e}");
    ExitCode::from(if e.is_permanent() { EXIT_PERMANENT } else { 1 })
}

/// `lockctl leader`: prints the leader now (exit 0, whether someone leads or not), or with
/// `watch` one line per change seen until killed.
pub(crate) async fn show(relock: &Relock, key: &str, watch: bool, json: bool) -> ExitCode {
    // Found before any server is asked: a usage error.
    if let Err(e @ Error::ElectionRefused { .. }) = relock.observe(key) {
        say!("{e}");
        return ExitCode::from(EXIT_USAGE);
    }
    if !watch {
        return match relock.leader(key).await {
            Ok(leader) => {
                let change = LeaderChange {
                    leader,
                    regressed: false,
                };
                print(key, &change, json);
                ExitCode::SUCCESS
            }
            Err(e) => failed(&e),
        };
    }
    let mut observer = match relock.observe(key) {
        Ok(o) => o,
        Err(e) => return failed(&e),
    };
    loop {
        match observer.next().await {
            Ok(change) => print(key, &change, json),
            Err(e) => return failed(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lines_and_documents() {
        let leader = Leader {
            value: "web-1\n".into(),
            term: 12,
            ttl: Some(Duration::from_millis(900)),
            owner: "web-1\n/0123".into(),
        };
        assert_eq!(
            line(Some(&leader), false),
            "value=web-1\\n term=12 ttl_ms=900"
        );
        assert_eq!(
            line(Some(&leader), true),
            "value=web-1\\n term=12 ttl_ms=900 regressed"
        );
        assert_eq!(line(None, false), "no leader");
        let doc = document("k", Some(&leader), true);
        assert_eq!(doc["leader"]["term"], 12);
        assert_eq!(doc["leader"]["value"], "web-1\n");
        assert_eq!(doc["regressed"], true);
        assert!(document("k", None, false)["leader"].is_null());
    }
}
