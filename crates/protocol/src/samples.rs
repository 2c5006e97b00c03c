//! Every reply sample of `spec/client-cases/replies.json` (taken from the real module by the
//! module's tests/it/meta/client_cases.rs), under RESP2 and RESP3, decoded and compared with
//! the sample's `decoded`, field by field: a change of a reply breaks this test.

use serde_json::{json, Value as Json};

use crate::{Entry, Holder, KeyStats, LockInfo, Mode, Reply, Waiter};

/// A reply as the case files write it.
fn reply(t: &Json) -> Reply {
    if t.is_null() {
        return Reply::Nil;
    }
    let (tag, v) = t
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a tagged reply");
    let list = |v: &Json| v.as_array().expect("a list").iter().map(reply).collect();
    match tag.as_str() {
        "int" => Reply::Int(v.as_i64().expect("int")),
        "bulk" => Reply::Bulk(v.as_str().expect("bulk").as_bytes().to_vec()),
        "simple" => Reply::Simple(v.as_str().expect("simple").to_string()),
        "double" => Reply::Double(v.as_f64().expect("double")),
        "bool" => Reply::Boolean(v.as_bool().expect("bool")),
        "array" => Reply::Array(list(v)),
        "set" => Reply::Set(list(v)),
        "map" => Reply::Map(
            v.as_array()
                .expect("map")
                .iter()
                .map(|p| (reply(&p[0]), reply(&p[1])))
                .collect(),
        ),
        other => panic!("unknown reply tag {other}"),
    }
}

fn text(b: &[u8]) -> Json {
    json!(String::from_utf8_lossy(b))
}

fn ttl_ms(ttl: Option<std::time::Duration>) -> Json {
    ttl.map_or(json!(-1), |d| json!(d.as_millis() as u64))
}

/// The mode as the case files write it: its name and its limit (an exclusive hold's is 1 in
/// `LOCK.INFO`, 0 in `LOCK.WAITERS`).
fn mode(m: Mode, exclusive_limit: u32) -> (&'static str, u32) {
    match m {
        Mode::Exclusive => ("exclusive", exclusive_limit),
        Mode::Shared { limit } => ("shared", limit.unwrap_or(0)),
    }
}

/// A decoded reply in the case files' shape; `who` as whether there is one (the crate keeps
/// client-info as the server's text).
fn decode(command: &str, r: &Reply) -> Result<Json, crate::DecodeError> {
    Ok(match command {
        "LOCK.INFO" => LockInfo::decode(r)?.map_or(Json::Null, |i| {
            let (mode, limit) = mode(i.mode, 1);
            json!({
                "owner": i.owner.as_deref().map(text), "token": i.token, "count": i.count,
                "ttl_ms": ttl_ms(i.ttl), "waiters": i.waiters, "mode": mode,
                "holders": i.holders, "limit": limit, "permits_free": i.permits_free,
            })
        }),
        "LOCK.HOLDERS" => json!(Holder::decode_all(r)?.map(|hs| hs
            .into_iter()
            .map(|h| json!({
                "owner": text(&h.owner), "token": h.token, "count": h.count,
                "ttl_ms": ttl_ms(h.ttl), "permits": h.permits,
            }))
            .collect::<Vec<_>>())),
        "LOCK.WAITERS" => json!(Waiter::decode_all(r)?
            .into_iter()
            .map(|w| {
                let (mode, limit) = mode(w.mode, 0);
                json!({
                    "owner": text(&w.owner), "mode": mode, "limit": limit, "permits": w.permits,
                    "client": w.client, "waited_ms": w.waited_ms, "timeout_ms": w.timeout_ms,
                    "ttl_ms": w.ttl_ms,
                })
            })
            .collect::<Vec<_>>()),
        "LOCK.HISTORY" | "LOCK.LOG" => json!(Entry::decode_all(r)?
            .into_iter()
            .map(|e| json!({
                "id": e.id, "time_ms": e.time_ms, "db": e.db, "key": text(&e.key),
                "owner": text(&e.owner), "token": e.token, "reason": e.reason,
                "held_ms": e.held_ms, "who": !e.client_info.is_empty(), "waiters": e.waiters,
            }))
            .collect::<Vec<_>>()),
        // The case's `decoded` names no db (every sample is in db 0).
        "LOCK.STATS" => json!(KeyStats::decode_all(r)?
            .into_iter()
            .map(|s| json!({
                "key": text(&s.key), "waits": s.waits, "granted": s.granted,
                "timeouts": s.timeouts, "contended": s.contended,
                "wait_ms_total": s.wait_ms_total, "error": s.error, "wait_ms_max": s.wait_ms_max,
            }))
            .collect::<Vec<_>>()),
        other => panic!("replies.json samples {other}, which this crate does not decode"),
    })
}

/// `who` reduced to whether there is one.
fn fold_who(v: &mut Json) {
    if let Some(items) = v.as_array_mut() {
        items.iter_mut().for_each(fold_who);
    } else if let Some(who) = v.get_mut("who") {
        *who = json!(!who.is_null());
    }
}

#[test]
fn every_sample_decodes_as_the_case_says() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/client-cases/replies.json"
    );
    let file: Json =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("replies.json");
    let cases = file["cases"].as_array().expect("cases");
    let mut commands = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for case in cases {
        let command = case["command"][0].as_str().expect("command");
        commands.insert(command);
        let mut want = case["decoded"].clone();
        fold_who(&mut want);
        for resp in ["resp2", "resp3"] {
            match decode(command, &reply(&case[resp])) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!("{} ({resp}): {got} != {want}", case["name"])),
                Err(e) => failures.push(format!("{} ({resp}): {e}", case["name"])),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every command the crate decodes has samples.
    let all = [
        "LOCK.HISTORY",
        "LOCK.HOLDERS",
        "LOCK.INFO",
        "LOCK.LOG",
        "LOCK.STATS",
        "LOCK.WAITERS",
    ];
    assert_eq!(commands.into_iter().collect::<Vec<_>>(), all);
}
