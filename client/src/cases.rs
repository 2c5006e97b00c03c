//! The client cases every relock client runs (spec/client-cases/, see its README.md): the
//! round's verdicts, the validity arithmetic, the classification of failures and the decoding
//! of the read commands' replies, run here against relock-client's own rules. The Python and
//! Node packages run the same files; a case that is wrong for one client fails its suite.
//!
//! A unit test module (not a `tests/` binary) because the round, the classification and the
//! decoders are crate-private: the cases test them as they are, without a public API for tests.
//!
//! A case whose `diverges` names `rust` is one relock-client is known to get wrong: it must
//! still fail here (so that fixing it means removing the mark), and it is reported.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use serde_json::{json, Value as Json};
use tokio::time::Instant;

use crate::error::{Error, NodeFailure};
use crate::info::{parse_holders, parse_info};
use crate::loss::parse_history;
use crate::mode::Mode;
use crate::round::{Progress, Released, Reply, Round, RoundState, Until};
use crate::validity::{drift, validity};

fn load(name: &str) -> Json {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/client-cases")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `check` on every case of `file`: a case must pass, unless its `diverges` names rust,
/// then it must fail. Panics with every case that did otherwise.
fn run_all(file: &str, check: impl Fn(&Json) -> Result<(), String>) {
    let doc = load(file);
    let cases = doc["cases"].as_array().expect("cases");
    assert!(!cases.is_empty(), "{file}: no cases");
    let mut wrong = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(case)))
            .unwrap_or_else(|p| {
                Err(p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into()))
            });
        let diverges = case["diverges"].get("rust");
        match (outcome, diverges) {
            (Ok(()), None) | (Err(_), Some(_)) => {}
            (Err(why), None) => wrong.push(format!("{file}: {name}: {why}")),
            (Ok(()), Some(_)) => wrong.push(format!(
                "{file}: {name}: passes now; remove its `diverges.rust` mark"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn eq(what: &str, got: Json, want: &Json) -> Result<(), String> {
    if &got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, want {want}"))
    }
}

// --- failures ---------------------------------------------------------------------------------

/// A failure as redis-rs reports it: `-TEXT` an error reply off the wire, `timeout`, `down`.
fn failure(reply: &str) -> NodeFailure {
    match reply {
        "timeout" => NodeFailure::Timeout(Duration::from_millis(100)),
        "down" => NodeFailure::from(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))),
        line if line.starts_with('-') => {
            let wire = format!("{line}\r\n");
            match redis::parse_redis_value(wire.as_bytes()).and_then(Value::extract_error) {
                Err(e) => NodeFailure::from(e).classified(),
                Ok(v) => panic!("{line:?} parsed as {v:?}"),
            }
        }
        other => panic!("not a failure: {other:?}"),
    }
}

/// A failure as the case files name it: class and kind.
fn classify(f: &NodeFailure) -> Json {
    let class = if f.is_permanent() {
        "permanent"
    } else {
        "transient"
    };
    let (kind, limit) = match f {
        NodeFailure::OtherLimit { limit } => (json!("other_limit"), Some(*limit)),
        NodeFailure::OtherMode => (json!("other_mode"), None),
        NodeFailure::OtherPermits => (json!("other_permits"), None),
        NodeFailure::RestartGrace { .. } => (json!("grace"), None),
        NodeFailure::TtlRefused => (json!("bad_ttl"), None),
        _ => (Json::Null, None),
    };
    let mut out = json!({ "class": class, "kind": kind });
    if let Some(limit) = limit {
        out["limit"] = json!(limit);
    }
    out
}

#[test]
fn error_cases() {
    run_all("errors.json", |case| {
        let reply = case["reply"].as_str().expect("reply");
        eq("class", classify(&failure(reply)), &case["expect"])
    });
}

// --- validity ---------------------------------------------------------------------------------

#[test]
fn validity_cases() {
    run_all("validity.json", |case| {
        let ttl = Duration::from_millis(case["ttl_ms"].as_u64().expect("ttl_ms"));
        let elapsed = Duration::from_micros(case["elapsed_us"].as_u64().expect("elapsed_us"));
        eq(
            "drift_us",
            json!(drift(ttl).as_micros() as u64),
            &case["drift_us"],
        )?;
        let got = validity(ttl, elapsed).map(|v| v.as_micros() as u64);
        eq("validity_us", json!(got), &case["validity_us"])
    });
}

// --- the round --------------------------------------------------------------------------------

fn reply_of(reply: &str) -> Reply<u64> {
    match reply {
        "nil" => Ok(None),
        r if r.starts_with("grant ") => Ok(Some(r[6..].parse().expect("grant n"))),
        r => Err(failure(r)),
    }
}

/// The case's round, fed its replies (`grant n` given to the round as `grant(n)`), finished
/// `elapsed_ms` after it started; with the progress after each reply and the start.
fn feed<T>(case: &Json, grant: impl Fn(u64) -> T) -> (Round<T>, Vec<Progress>, Instant) {
    let masters = case["masters"].as_u64().expect("masters") as usize;
    let names: Arc<[String]> = (0..masters).map(|i| format!("m{i}")).collect();
    let until = match case["until"].as_str() {
        Some("all") => Until::AllAnswered,
        _ => Until::Decided,
    };
    let started = Instant::now();
    let mut state = RoundState::new(names, until, started);
    let progress = case["replies"]
        .as_array()
        .expect("replies")
        .iter()
        .map(|r| {
            let master = r[0].as_u64().expect("master") as usize;
            let reply = reply_of(r[1].as_str().expect("reply")).map(|g| g.map(&grant));
            state.on_reply(master, reply)
        })
        .collect();
    let elapsed = Duration::from_secs_f64(case["elapsed_ms"].as_f64().unwrap_or(5.0) / 1000.0);
    (state.finish(started + elapsed), progress, started)
}

fn round_of(case: &Json) -> (Round<u64>, Vec<Progress>, Instant) {
    feed(case, |token| token)
}

fn progress_word(p: Progress) -> &'static str {
    match p {
        Progress::Pending => "pending",
        Progress::Won => "won",
        Progress::Lost => "lost",
    }
}

/// An acquisition's error as the case files name it.
fn verdict(e: &Error) -> &'static str {
    match e {
        Error::OtherLimit { .. } => "other_limit",
        Error::OtherMode { .. } => "other_mode",
        Error::OtherPermits { .. } => "other_permits",
        e if e.is_permanent() => "permanent",
        _ => "not_acquired",
    }
}

fn check_round(case: &Json) -> Result<(), String> {
    let expect = &case["expect"];
    let ttl = Duration::from_millis(case["ttl_ms"].as_u64().unwrap_or(10_000));
    let masters = case["masters"].as_u64().expect("masters") as usize;
    let fresh = || round_of(case).0;
    if let Some(want) = expect.get("progress") {
        let (_, progress, _) = round_of(case);
        let got: Vec<_> = progress.into_iter().map(progress_word).collect();
        eq("progress", json!(got), want)?;
    }
    if let Some(want) = expect.get("tokens") {
        eq("tokens", json!(fresh().answers()), want)?;
    }
    if let Some(want) = expect.get("may_hold") {
        eq("may_hold", json!(fresh().may_hold()), want)?;
    }
    if let Some(want) = expect.get("give_back_later") {
        // relock-client gives back in the background at every master that may hold a grant
        // (Masters::release_failed): a superset of the case's, allowed by the README where the
        // extra masters are ones that granted (released now too) or said nil.
        let round = fresh();
        let later = round.may_hold();
        let granted = round.agreed_by();
        let refused: Vec<bool> = (0..masters)
            .map(|i| {
                case["replies"]
                    .as_array()
                    .expect("replies")
                    .iter()
                    .find(|r| r[0].as_u64() == Some(i as u64))
                    .is_some_and(|r| r[1] == "nil")
            })
            .collect();
        for (i, want) in want.as_array().expect("give_back_later").iter().enumerate() {
            let must = want.as_bool().expect("bool");
            let extra_ok = granted[i] || refused[i];
            if later[i] != must && !(later[i] && extra_ok) {
                return Err(format!(
                    "give_back_later[{i}]: got {}, want {must}",
                    later[i]
                ));
            }
        }
    }
    if let Some(want) = expect.get("validity_ms") {
        let got = fresh().validity(ttl).map(|v| v.as_secs_f64() * 1000.0);
        let same = match (got, want.as_f64()) {
            (None, None) => true,
            (Some(g), Some(w)) => (g - w).abs() < 1e-6,
            _ => false,
        };
        if !same {
            return Err(format!("validity_ms: got {got:?}, want {want}"));
        }
    }
    if let Some(want) = expect.get("acquire") {
        let (round, _, _) = round_of(case);
        let got = match round.valid_until(ttl) {
            Some(_) => "acquired",
            None => verdict(&round.into_acquire_error("k", ttl)),
        };
        eq("acquire", json!(got), want)?;
    }
    if let Some(want) = expect.get("renew") {
        let round = fresh();
        let got = match round.valid_until(ttl) {
            Some(_) => "renewed",
            // The guard's rule (guard.rs): Lost, or an error retrying cannot fix, ends the
            // hold, but a refused ttl keeps it; any other failure is retried within the
            // validity.
            None => match round.into_renew_error("k", ttl) {
                Error::Lost { .. } => "lost",
                Error::TtlRefused { .. } => "kept",
                e if e.is_permanent() => "lost",
                _ => "retry",
            },
        };
        eq("renew", json!(got), want)?;
    }
    if let Some(want) = expect.get("release") {
        let released = release_round(case);
        let got = match released.into_release_result("k") {
            Ok(()) => "released",
            Err(Error::Lost { .. }) => "lost",
            Err(e) if e.is_permanent() => "permanent",
            Err(_) => "no_quorum",
        };
        eq("release", json!(got), want)?;
    }
    for (field, deadline_passed) in [("wait", false), ("wait_at_deadline", true)] {
        if let Some(want) = expect.get(field) {
            let round = fresh();
            let got = match round.after_failed_wait("k", deadline_passed, Duration::from_secs(1)) {
                Ok(_) => "again",
                Err(e) if e.is_permanent() => verdict(&e),
                Err(_) => "stop",
            };
            eq(field, json!(got), want)?;
        }
    }
    Ok(())
}

/// The case's replies as a release round's (`grant n`: released, n holds left).
fn release_round(case: &Json) -> Round<Released> {
    feed(case, |holds_left| Released { holds_left }).0
}

#[test]
fn round_cases() {
    run_all("round.json", check_round);
}

// --- replies ----------------------------------------------------------------------------------

/// A reply as the case files write it, as redis-rs gives it.
fn value(t: &Json) -> Value {
    if t.is_null() {
        return Value::Nil;
    }
    let (tag, v) = t
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a tagged reply");
    match tag.as_str() {
        "int" => Value::Int(v.as_i64().expect("int")),
        "bulk" => Value::BulkString(v.as_str().expect("bulk").as_bytes().to_vec()),
        "simple" => Value::SimpleString(v.as_str().expect("simple").to_string()),
        "double" => Value::Double(v.as_f64().expect("double")),
        "bool" => Value::Boolean(v.as_bool().expect("bool")),
        "array" => Value::Array(v.as_array().expect("array").iter().map(value).collect()),
        "set" => Value::Set(v.as_array().expect("set").iter().map(value).collect()),
        "map" => Value::Map(
            v.as_array()
                .expect("map")
                .iter()
                .map(|p| (value(&p[0]), value(&p[1])))
                .collect(),
        ),
        other => panic!("unknown reply tag {other}"),
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A decoded ttl in the case files' form: ms left, or -1 for no expiry.
fn ttl_ms(ttl: Option<Duration>) -> i64 {
    ttl.map_or(-1, |d| ms(d) as i64)
}

/// What relock-client decodes of a sample, in the case files' shape, as far as it decodes
/// that command (the fields it has no place for are left out of the comparison); `None` for a
/// command it does not decode.
fn decode(command: &str, reply: Value) -> Option<Result<Json, String>> {
    let err = |e: NodeFailure| e.to_string();
    Some(match command {
        "LOCK.INFO" => parse_info(reply).map_err(err).map(|info| {
            info.map_or(Json::Null, |i| {
                let (mode, limit) = match i.mode {
                    Mode::Exclusive => ("exclusive", 1),
                    Mode::Shared { limit } => ("shared", limit.unwrap_or(0)),
                };
                json!({
                    "owner": i.owner, "token": i.token, "count": i.count, "ttl_ms": ttl_ms(i.ttl),
                    "waiters": i.waiters, "mode": mode, "holders": i.holders, "limit": limit,
                })
            })
        }),
        "LOCK.HOLDERS" => parse_holders(reply).map_err(err).map(|h| {
            json!(h.map(|h| h
                .into_iter()
                .map(|h| json!({
                    "owner": h.owner, "token": h.token, "count": h.count, "ttl_ms": ttl_ms(h.ttl),
                }))
                .collect::<Vec<_>>()))
        }),
        "LOCK.HISTORY" | "LOCK.LOG" => parse_history(reply).map_err(err).map(|entries| {
            json!(entries
                .into_iter()
                .map(|e| json!({
                    "time_ms": e.time_ms, "owner": String::from_utf8_lossy(&e.owner),
                    "token": e.token, "reason": e.reason, "held_ms": e.held_ms,
                    "who": if e.client_info.is_empty() { Json::Null } else { json!(e.client_info) },
                }))
                .collect::<Vec<_>>())
        }),
        _ => return None,
    })
}

/// `want` with only the fields `got` has (per entry of a list), and `who` reduced to whether
/// there is one (relock-client keeps client-info as text).
fn project(got: &Json, want: &Json) -> Json {
    match (got, want) {
        (Json::Object(g), Json::Object(w)) => {
            let mut out = serde_json::Map::new();
            for k in g.keys() {
                let v = w.get(k).cloned().unwrap_or(Json::Null);
                out.insert(k.clone(), v);
            }
            Json::Object(out)
        }
        (Json::Array(g), Json::Array(w)) if g.len() == w.len() => {
            Json::Array(g.iter().zip(w).map(|(g, w)| project(g, w)).collect())
        }
        _ => want.clone(),
    }
}

fn fold_who(v: &mut Json) {
    if let Some(items) = v.as_array_mut() {
        items.iter_mut().for_each(fold_who);
    } else if let Some(who) = v.get_mut("who") {
        if !who.is_null() {
            *who = json!(true);
        }
    }
}

#[test]
fn reply_cases() {
    run_all("replies.json", |case| {
        let command = case["command"][0].as_str().expect("command");
        if case.get("decoded").is_none() {
            return Err("no `decoded`".into());
        }
        for resp in ["resp2", "resp3"] {
            let Some(got) = decode(command, value(&case[resp])) else {
                return Ok(());
            };
            let mut got = got.map_err(|e| format!("{resp}: {e}"))?;
            let mut want = project(&got, &case["decoded"]);
            fold_who(&mut got);
            fold_who(&mut want);
            eq(resp, got, &want)?;
        }
        Ok(())
    });
}
