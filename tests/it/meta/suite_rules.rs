//! The Rust suites' own rules, checked on their files (as `test_suite_rules.py` and
//! `suite-rules.test.mjs` check the Python and Node suites): no test lets a fixed time pass
//! other than through `wait_out_ttl` (a ttl, a timeout, a stall or a quiet window that has to
//! run its length), everything else waits for its event (`eventually`, a reply with a
//! deadline); and a helper is defined once, in the test kit or in one file of a binary.
//!
//! The suites: the module's (`tests/`), relock-client's, lockctl's, the chaos smoke test and the
//! bench's smoke test. The test kit (`crates/testkit/src`) is where the waits themselves and
//! the fakes that stall on purpose live: its sleeps are its own, its helpers count.
//! A pause that is not a wait (work under a lock, a load's pace, a fake server's delay) is
//! marked `(not a wait)` on its line.

use super::layout::{code_only, rust_files};
use relock_testkit::workspace_root as root;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SUITES: [&str; 5] = [
    "tests",
    "client/tests",
    "lockctl/tests",
    "chaos/tests",
    "bench/tests",
];
const KIT: &str = "crates/testkit/src";

fn suite_files() -> Vec<PathBuf> {
    SUITES
        .iter()
        .flat_map(|dir| rust_files(&root().join(dir)))
        .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The lines (1-based) of `source` that call a sleep (`thread::sleep`, `tokio::time::sleep`,
/// `sleep_until`, a bare `sleep` imported), unless marked `(not a wait)`. Comments and string
/// literals do not count, nor does the definition of a function named so.
fn sleeps(source: &str) -> Vec<usize> {
    let code = code_only(source);
    let original: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let calls = ["sleep", "sleep_until"].iter().any(|name| {
            line.match_indices(name).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let word_start = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
                let after = line[at + name.len()..].trim_start();
                let defined = line[..at].trim_end().ends_with("fn");
                word_start && after.starts_with('(') && !defined
            })
        });
        if calls && !original.get(i).is_some_and(|l| l.contains("(not a wait)")) {
            found.push(i + 1);
        }
    }
    found
}

#[test]
fn no_fixed_sleep_outside_wait_out_ttl() {
    let found: BTreeMap<String, Vec<usize>> = suite_files()
        .iter()
        .filter_map(|path| {
            let lines = sleeps(&std::fs::read_to_string(path).expect("read"));
            (!lines.is_empty()).then(|| (relative(path), lines))
        })
        .collect();
    assert!(
        found.is_empty(),
        "fixed sleeps in the Rust suites (use wait_out_ttl / wait_out_ttl_async for a time that \
         must run its length, or wait for the event: eventually, eventually_async; mark a pause \
         that is not a wait `(not a wait)`): {found:#?}"
    );
}

#[test]
fn the_sleep_rule_finds_a_sleep() {
    assert_eq!(
        sleeps("fn f() {\n    std::thread::sleep(Duration::from_millis(5));\n}\n"),
        [2]
    );
    assert_eq!(
        sleeps("async fn f() {\n    tokio::time::sleep(d).await;\n}\n"),
        [2]
    );
    assert_eq!(sleeps("    tokio::time::sleep_until(at).await;\n"), [1]);
    assert_eq!(
        sleeps("use std::thread::sleep;\nfn f() { sleep (d) }\n"),
        [2]
    );
    assert_eq!(
        sleeps("    sleep(d); // the work under the lock (not a wait)\n"),
        Vec::<usize>::new()
    );
    assert_eq!(
        sleeps("// thread::sleep(d)\nlet s = \"sleep(1)\";\n"),
        Vec::<usize>::new()
    );
    assert_eq!(
        sleeps("fn sleep_until(at: i64) {}\nwait_out_ttl(d);\n"),
        Vec::<usize>::new()
    );
}

/// The functions `source` defines at its top level (not methods, not nested, not tests).
fn helpers(source: &str) -> Vec<String> {
    let code = code_only(source);
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut rest = *line;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(rest) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The attributes above it (comments are blank lines in `code`).
        let is_test = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.is_empty() || l.starts_with("#["))
            .any(|l| l.starts_with("#[") && l.contains("test") && !l.contains("cfg("));
        if !is_test && name != "main" {
            out.push(name);
        }
    }
    out
}

#[test]
fn no_helper_is_defined_in_two_files() {
    let mut files = suite_files();
    files.extend(rust_files(&root().join(KIT)));
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in &files {
        let mut names = helpers(&std::fs::read_to_string(path).expect("read"));
        names.sort();
        names.dedup();
        for name in names {
            defined.entry(name).or_default().push(relative(path));
        }
    }
    defined.retain(|_, files| files.len() > 1);
    assert!(
        defined.is_empty(),
        "helpers defined in more than one file (define it once: in the test kit, or in one \
         file of the binary that the others use): {defined:#?}"
    );
}

#[test]
fn the_helper_rule_sees_top_level_helpers_only() {
    let source = "fn one() {}\npub(crate) async fn two() {}\n#[test]\nfn a_test() {}\n\
                  #[tokio::test(flavor = \"multi_thread\")]\n// why\nasync fn another() {}\n\
                  impl X {\n    fn method() {}\n}\nfn main() {}\n";
    assert_eq!(helpers(source), ["one", "two"]);
}
