//! The client cases (spec/client-cases/) against the real module: the reply samples of every
//! read command a client decodes (`replies.json`), taken under RESP2 and RESP3 from a fresh
//! server each, must be what the checked-in file holds; and every error case the module (or
//! Redis) decides (`errors.json` cases with a `module` field) must be the error text the server
//! sends today. A change of a reply or an error text fails here, and the Rust, Python and Node
//! suites read the same files, so the change reaches every client at once.
//!
//! `RELOCK_WRITE_CASES=1` rewrites the samples (`resp2`, `resp3`) in `replies.json`, keeping
//! each case's hand-written `why` and `decoded`; a new scenario gets `decoded: null`, which the
//! client suites refuse until someone writes what it must decode to.
use relock_testkit as common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use common::ask::waiters;
use common::raw::{Raw, Reply};
use common::{eventually, Server};
use redis::{Connection, Value};
use serde_json::{json, Value as Json};

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("spec")
        .join("client-cases")
}

fn load(name: &str) -> Json {
    let path = cases_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A case file as written: its fields, then one case per line (the way the client suites'
/// diffs stay readable).
fn dump(doc: &Json) -> String {
    let mut out = String::from("{\n");
    let obj = doc.as_object().expect("a case file is an object");
    for (k, v) in obj {
        if k != "cases" {
            out += &format!(" {}: {},\n", json!(k), v);
        }
    }
    out += " \"cases\": [\n";
    // Each case's fields in the order people read them, then any others.
    const ORDER: [&str; 6] = ["name", "why", "command", "decoded", "resp2", "resp3"];
    let cases: Vec<String> = obj["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let fields = c.as_object().expect("a case is an object");
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort_by_key(|k| ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len()));
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", json!(k), fields[k.as_str()]))
                .collect();
            format!("  {{{}}}", parts.join(","))
        })
        .collect();
    out += &cases.join(",\n");
    out += "\n ]\n}\n";
    out
}

// --- replies as JSON ------------------------------------------------------------------------

/// A reply as the case files write it (see spec/client-cases/README.md).
fn tree(v: &Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Int(n) => json!({ "int": n }),
        Value::BulkString(b) => json!({ "bulk": String::from_utf8_lossy(b) }),
        Value::SimpleString(s) => json!({ "simple": s }),
        Value::Okay => json!({ "simple": "OK" }),
        Value::Double(d) => json!({ "double": d }),
        Value::Boolean(b) => json!({ "bool": b }),
        Value::Array(items) => json!({ "array": items.iter().map(tree).collect::<Vec<_>>() }),
        Value::Set(items) => json!({ "set": items.iter().map(tree).collect::<Vec<_>>() }),
        Value::Map(pairs) => json!({
            "map": pairs.iter().map(|(k, v)| json!([tree(k), tree(v)])).collect::<Vec<_>>()
        }),
        Value::VerbatimString { text, .. } => json!({ "verbatim": text }),
        Value::BigNumber(n) => json!({ "big": n.to_string() }),
        other => panic!("a reply the case format has no word for: {other:?}"),
    }
}

/// Fixes the fields whose values change from run to run (times, ttls left, tokens, client
/// ids) to stand-ins of the same type, so that a sample changes only when the reply's shape or
/// a stable value does. Tokens are numbered 1001, 1002, ... in the order they first appear in
/// one run, so that the same hold has the same token in every sample.
struct Stable {
    tokens: HashMap<i64, i64>,
}

impl Stable {
    fn value(&mut self, command: &str, field: &str, v: &mut Json) {
        let Some(n) = v.get("int").and_then(Json::as_i64) else {
            if field == "client-info" {
                if let Some(s) = v.get("bulk").and_then(Json::as_str) {
                    *v = json!({ "bulk": stable_client_info(s) });
                }
            }
            return;
        };
        let fixed = match (command, field) {
            (_, "token") => {
                let next = 1001 + self.tokens.len() as i64;
                *self.tokens.entry(n).or_insert(next)
            }
            ("LOCK.INFO" | "LOCK.HOLDERS", "ttl") if n >= 0 => 59_000,
            ("LOCK.WAITERS", "client") => 42,
            ("LOCK.WAITERS", "waited") => 5,
            ("LOCK.WAITERS", "timeout") if n >= 0 => 59_000,
            ("LOCK.LOG" | "LOCK.HISTORY", "time") => 1_767_225_600_000,
            ("LOCK.LOG" | "LOCK.HISTORY", "held") => 25,
            ("LOCK.STATS", "wait_ms_total" | "wait_ms_max") => 50,
            _ => n,
        };
        *v = json!({ "int": fixed });
    }

    /// Walks a reply; in a map, or an array of name/value pairs, fixes the volatile values.
    fn walk(&mut self, command: &str, v: &mut Json) {
        if let Some(pairs) = v.get_mut("map").and_then(Json::as_array_mut) {
            for pair in pairs {
                let field = pair[0]["bulk"].as_str().unwrap_or_default().to_string();
                self.value(command, &field, &mut pair[1]);
                self.walk(command, &mut pair[1]);
            }
            return;
        }
        let Some(items) = v.get_mut("array").and_then(Json::as_array_mut) else {
            return;
        };
        let pairs = items.len() % 2 == 0
            && !items.is_empty()
            && items.iter().step_by(2).all(|k| k.get("bulk").is_some());
        if pairs {
            for i in (0..items.len()).step_by(2) {
                let field = items[i]["bulk"].as_str().unwrap_or_default().to_string();
                self.value(command, &field, &mut items[i + 1]);
            }
        } else {
            for item in items {
                self.walk(command, item);
            }
        }
    }
}

/// `client-info` with its per-run numbers (id, address, port, memory) fixed.
fn stable_client_info(s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    s.split(' ')
        .map(|part| match part.split_once('=') {
            Some(("id", _)) => "id=7".to_string(),
            Some(("addr", _)) => "addr=127.0.0.1:50000".to_string(),
            Some(("laddr", _)) => "laddr=127.0.0.1:6379".to_string(),
            Some((
                k @ ("fd" | "age" | "idle" | "qbuf" | "qbuf-free" | "argv-mem" | "multi-mem"
                | "rbs" | "rbp" | "obl" | "oll" | "omem" | "tot-mem" | "io-thread"),
                _,
            )) => format!("{k}=0"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

// --- the scenarios ----------------------------------------------------------------------------

/// Runs the command `words` and returns its reply; panics on an error reply.
fn query_words(c: &mut Connection, words: &[&str]) -> Value {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

/// Runs every scenario on a fresh server speaking `resp` and returns each sample by name,
/// with the command it came from.
fn samples(resp: u8) -> Vec<(String, Vec<String>, Json)> {
    let server = Server::start();
    let mut c = if resp == 3 {
        server.conn_resp3()
    } else {
        server.conn()
    };
    let mut stable = Stable {
        tokens: HashMap::new(),
    };
    let mut out = Vec::new();
    let mut sample = |c: &mut Connection, name: &str, words: &[&str]| {
        let mut t = tree(&query_words(c, words));
        stable.walk(words[0], &mut t);
        out.push((
            name.to_string(),
            words.iter().map(|w| w.to_string()).collect(),
            t,
        ));
    };
    let due = Duration::from_secs(10);

    sample(&mut c, "info none", &["LOCK.INFO", "none"]);
    query_words(&mut c, &["LOCK.ACQUIRE", "k1", "alice", "60000"]);
    query_words(&mut c, &["LOCK.REENTER", "k1", "alice", "60000"]);
    sample(&mut c, "info exclusive", &["LOCK.INFO", "k1"]);
    sample(&mut c, "holders exclusive", &["LOCK.HOLDERS", "k1"]);
    query_words(
        &mut c,
        &[
            "LOCK.ACQUIRE",
            "k2",
            "r1",
            "60000",
            "SHARED",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
        ],
    );
    query_words(
        &mut c,
        &["LOCK.ACQUIRE", "k2", "r2", "60000", "SHARED", "LIMIT", "3"],
    );
    sample(&mut c, "info semaphore", &["LOCK.INFO", "k2"]);
    sample(&mut c, "holders semaphore", &["LOCK.HOLDERS", "k2"]);
    query_words(&mut c, &["LOCK.ACQUIRE", "k3", "r1", "60000", "SHARED"]);
    sample(&mut c, "info read lock", &["LOCK.INFO", "k3"]);
    sample(&mut c, "holders none", &["LOCK.HOLDERS", "none"]);

    // The journal: a force-release by a named client, an expiry.
    query_words(&mut c, &["CLIENT", "SETNAME", "ops"]);
    query_words(&mut c, &["LOCK.ACQUIRE", "k4", "carol", "60000"]);
    query_words(&mut c, &["LOCK.FORCERELEASE", "k4"]);
    query_words(&mut c, &["LOCK.ACQUIRE", "k5", "dave", "20"]);
    assert!(
        eventually(due, || query_words(&mut c, &["LOCK.INFO", "k5"])
            == Value::Nil),
        "k5 expired"
    );
    sample(&mut c, "history forcereleased", &["LOCK.HISTORY", "k4"]);
    sample(&mut c, "history expired", &["LOCK.HISTORY", "k5"]);
    sample(&mut c, "history none", &["LOCK.HISTORY", "none"]);
    sample(&mut c, "log", &["LOCK.LOG", "2"]);

    // Contention: a refusal and a wait that times out on k6.
    query_words(&mut c, &["LOCK.ACQUIRE", "k6", "a", "60000"]);
    query_words(&mut c, &["LOCK.ACQUIRE", "k6", "b", "60000"]);
    query_words(&mut c, &["LOCK.WAIT", "k6", "c", "60000", "50"]);
    sample(&mut c, "stats", &["LOCK.STATS"]);

    // Two waiters queued behind alice on k1: one exclusive without a timeout, one shared with.
    let mut bob = Raw::connect(&server);
    bob.send(&[b"LOCK.WAIT", b"k1", b"bob", b"30000", b"0"]);
    assert!(eventually(due, || waiters(&mut c, "k1") == 1), "bob queued");
    let mut carl = Raw::connect(&server);
    carl.send(&[b"LOCK.WAIT", b"k1", b"carl", b"20000", b"60000", b"SHARED"]);
    assert!(
        eventually(due, || waiters(&mut c, "k1") == 2),
        "carl queued"
    );
    sample(&mut c, "waiters", &["LOCK.WAITERS", "k1"]);
    sample(&mut c, "info with waiters", &["LOCK.INFO", "k1"]);
    sample(&mut c, "waiters none", &["LOCK.WAITERS", "none"]);
    drop((bob, carl));

    // A lock made persistent (PERSIST): its ttl is -1, no expiry.
    query_words(&mut c, &["LOCK.ACQUIRE", "k7", "pat", "60000"]);
    query_words(&mut c, &["PERSIST", "k7"]);
    sample(&mut c, "info persisted", &["LOCK.INFO", "k7"]);
    sample(&mut c, "holders persisted", &["LOCK.HOLDERS", "k7"]);
    out
}

/// The reply samples of `replies.json` are what the module answers today, under RESP2 and
/// RESP3 (`RELOCK_WRITE_CASES=1` rewrites them).
#[test]
fn reply_samples_are_what_the_module_answers() {
    let resp2 = samples(2);
    let resp3 = samples(3);
    let mut doc = load("replies.json");
    let write = std::env::var("RELOCK_WRITE_CASES").is_ok_and(|v| v == "1");
    let cases = doc["cases"].as_array_mut().expect("cases");
    let mut wrong = Vec::new();
    for ((name, command, r2), (name3, _, r3)) in resp2.iter().zip(&resp3) {
        assert_eq!(name, name3);
        let at = cases.iter().position(|c| c["name"] == json!(name));
        let case = match at {
            Some(i) => &mut cases[i],
            None if write => {
                cases.push(json!({ "name": name, "why": "", "decoded": null }));
                cases.last_mut().expect("pushed")
            }
            None => {
                wrong.push(format!("{name}: no such case in replies.json"));
                continue;
            }
        };
        for (field, got) in [
            ("command", json!(command)),
            ("resp2", r2.clone()),
            ("resp3", r3.clone()),
        ] {
            if case.get(field) != Some(&got) {
                if write {
                    case[field] = got;
                } else {
                    wrong.push(format!(
                        "{name} {field}:\n  file:   {}\n  module: {got}",
                        case[field]
                    ));
                }
            }
        }
    }
    let known: Vec<&String> = resp2.iter().map(|(n, _, _)| n).collect();
    for case in cases.iter() {
        let name = case["name"].as_str().unwrap_or_default().to_string();
        if !known.contains(&&name) {
            wrong.push(format!("{name}: a case no scenario produces"));
        }
    }
    if write {
        std::fs::write(cases_dir().join("replies.json"), dump(&doc)).expect("write replies.json");
        return;
    }
    assert!(
        wrong.is_empty(),
        "replies.json is not what the module answers (RELOCK_WRITE_CASES=1 rewrites the \
         samples; then fix each case's `decoded` and every client):\n{}",
        wrong.join("\n")
    );
}

/// Every error case the server decides (`module`) is the error text the server sends.
#[test]
fn error_texts_are_what_the_server_sends() {
    let doc = load("errors.json");
    let mut servers: HashMap<String, Server> = HashMap::new();
    let mut checked = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let Some(module) = case.get("module") else {
            continue;
        };
        let name = case["name"].as_str().expect("name");
        let which = module.get("server").cloned().unwrap_or(Json::Null);
        let server = servers
            .entry(which.to_string())
            .or_insert_with(|| match &which {
                Json::Null => Server::start(),
                Json::String(s) if s == "without_module" => Server::without_module(&[]),
                Json::Array(args) => {
                    let args: Vec<&str> = args.iter().map(|a| a.as_str().expect("arg")).collect();
                    Server::with_args(&args)
                }
                other => panic!("{name}: server {other}"),
            });
        let mut raw = Raw::connect(server);
        raw.send(&[b"FLUSHALL"]);
        raw.read(Duration::from_secs(10));
        let steps = module["steps"].as_array().expect("steps");
        let mut last = None;
        for (i, step) in steps.iter().enumerate() {
            let words: Vec<&[u8]> = step
                .as_array()
                .expect("a step")
                .iter()
                .map(|w| w.as_str().expect("a word").as_bytes())
                .collect();
            raw.send(&words);
            let reply = raw.read(Duration::from_secs(10));
            if i + 1 < steps.len() {
                assert!(
                    !matches!(reply, Reply::Error(_)),
                    "{name}: step {step}: {reply:?}"
                );
            } else {
                last = Some(reply);
            }
        }
        let want = case["reply"]
            .as_str()
            .expect("reply")
            .trim_start_matches('-');
        let Some(Reply::Error(got)) = last else {
            panic!("{name}: the last step answered {last:?}, not {want:?}");
        };
        let digits = |s: &str| -> String {
            let mut out = String::new();
            for ch in s.chars() {
                if ch.is_ascii_digit() {
                    if !out.ends_with('#') {
                        out.push('#');
                    }
                } else {
                    out.push(ch);
                }
            }
            out
        };
        if module.get("digits_vary") == Some(&json!(true)) {
            assert_eq!(digits(&got), digits(want), "{name}");
        } else {
            assert_eq!(got, want, "{name}");
        }
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} error cases were checked against a server"
    );
}
