//! The code's layout rules, checked: the engine (crates/engine) depends on no Redis crate and
//! has no Redis imports; every `unsafe` is in the Redis host (`src/redis/`) or the engine's packed
//! hold layout, each block with a `// SAFETY:` comment; no two modules import each other, directly
//! or round a circle (module, engine and client).

use relock_testkit::workspace_root as root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(super) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without comments and string literals (so words in them do not count).
pub(super) fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' => {
                out.push('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push('"');
            }
            '\'' => {
                // A char literal ('x', '\n', '"') or a lifetime ('a): skip a literal whole.
                let rest: String = chars.clone().take(4).collect();
                let len = if rest.starts_with('\\') {
                    rest.find('\'').map(|i| i + 1)
                } else if rest.chars().nth(1) == Some('\'') {
                    Some(2)
                } else {
                    None
                };
                out.push('\'');
                if let Some(len) = len {
                    for _ in 0..len {
                        chars.next();
                    }
                    out.push('\'');
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The module path of a file under a crate's `src/` (`lib.rs` -> [], `redis/mod.rs` ->
/// ["redis"], `engine/group.rs` -> ["engine", "group"]).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "mod" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Paths named in `use` declarations and in code (`crate::a::b`, `super::c`), absolute.
fn referenced_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let resolve = |path: &str| -> Option<Vec<String>> {
        let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
        let mut abs = match segments.next()? {
            "crate" => Vec::new(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            "self" => module.to_vec(),
            _ => return None,
        };
        for s in segments {
            if s == "super" {
                abs.pop();
            } else {
                abs.push(s.to_string());
            }
        }
        Some(abs)
    };
    let mut out = Vec::new();
    // `use` declarations, braces expanded.
    for decl in code.split("use ").skip(1) {
        let Some(end) = decl.find(';') else { continue };
        for path in expand(&decl[..end]) {
            if let Some(p) = resolve(&path) {
                out.push(p);
            }
        }
    }
    // Paths in code.
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(code.len() - at);
            // `super::{a, b}` is a `use` tree, read above.
            if code[at + len..].starts_with('{') {
                continue;
            }
            if let Some(p) = resolve(&code[at..at + len]).filter(|p| !p.is_empty()) {
                out.push(p);
            }
        }
    }
    out
}

/// `a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"].
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or("").to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut last) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[last..i]);
                last = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[last..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// Module -> modules it imports, for the crate whose sources are in `src`.
fn import_graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files: Vec<PathBuf> = rust_files(src)
        .into_iter()
        .filter(|f| !f.starts_with(src.join("bin")))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        let code = code_only(&std::fs::read_to_string(file).expect("read"));
        let mut deps = BTreeSet::new();
        for path in referenced_paths(&code, &module) {
            // The longest prefix of the path that is a module of this crate.
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p));
            if let Some(target) = target {
                // A module naming its own items, or a parent naming a child through its
                // declaration, is not an import of another module.
                if target != module && !target.starts_with(&module) {
                    deps.insert(target);
                }
            }
        }
        graph.insert(module, deps);
    }
    graph
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|n| n == node) {
            let mut cycle: Vec<String> = stack[i..].iter().map(|m| m.join("::")).collect();
            cycle.push(node.join("::"));
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_circles_in_the_module() {
    let graph = import_graph(&root().join("src"));
    assert!(graph.len() > 15, "found only {} modules", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle: {}", cycle.join(" -> "));
    }
}

#[test]
fn no_import_circles_in_the_engine() {
    let graph = import_graph(&root().join("crates/engine/src"));
    assert!(graph.len() > 20, "found only {} modules", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle: {}", cycle.join(" -> "));
    }
}

#[test]
fn no_import_circles_in_the_client() {
    let graph = import_graph(&root().join("client/src"));
    assert!(graph.len() > 5, "found only {} modules", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let m = |s: &str| vec![s.to_string()];
    let mut graph = BTreeMap::new();
    graph.insert(m("a"), BTreeSet::from([m("b")]));
    graph.insert(m("b"), BTreeSet::from([m("c")]));
    graph.insert(m("c"), BTreeSet::from([m("a")]));
    assert!(find_cycle(&graph).is_some());
    graph.insert(m("c"), BTreeSet::new());
    assert!(find_cycle(&graph).is_none());
    let code = code_only("use super::{host::{Key, KeyRef}, queue};\nfn f() { crate::lock::x(); }");
    let paths = referenced_paths(&code, &["lock".into(), "engine".into()]);
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        [
            "lock::host::Key",
            "lock::host::KeyRef",
            "lock::queue",
            "lock::x"
        ]
    );
}

/// The crates a manifest depends on, in any `[*dependencies]` table (normal, dev, build, or one
/// per target): the keys of those tables, `[dependencies.x]` tables, and `package = "..."`
/// renames.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            let table = line.trim_matches(['[', ']']);
            in_deps = table.ends_with("dependencies");
            if let Some((_, name)) = table.split_once("dependencies.") {
                out.push(name.to_string());
            }
            continue;
        }
        if !in_deps || line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            out.push(key.trim().trim_matches('"').to_string());
            if let Some((_, renamed)) = value.split_once("package") {
                let name = renamed.split('"').nth(1).unwrap_or_default();
                out.push(name.to_string());
            }
        }
    }
    out
}

/// "No Redis in the engine" is a missing dependency: the engine's crate cannot name Redis's
/// API because it cannot reach it. This keeps it missing.
#[test]
fn the_engine_depends_on_no_redis_crate() {
    let manifest = std::fs::read_to_string(root().join("crates/engine/Cargo.toml")).expect("read");
    let deps = dependencies(&manifest);
    assert!(deps.iter().any(|d| d == "proptest"), "parsed {deps:?}");
    for dep in &deps {
        assert!(
            !dep.contains("redis"),
            "crates/engine depends on {dep}: the engine reaches a server only through its Host"
        );
    }
    // The parser sees each way a manifest can name a crate.
    let sample = "[package]\nname = \"x\"\n[dependencies]\nredis-module = \"2\"\n\
        [target.'cfg(unix)'.dev-dependencies]\nr = { package = \"redis\", version = \"0.27\" }\n\
        [build-dependencies.redis-x]\nversion = \"1\"\n";
    assert_eq!(
        dependencies(sample),
        ["redis-module", "r", "redis", "redis-x"]
    );
}

/// The reply decoders (crates/protocol) take a neutral `Reply`, which each caller makes from its
/// own Redis library's value: the crate names none, so relock-client's choice of library stays
/// relock-client's, and the decoders have no I/O to do.
#[test]
fn the_protocol_depends_on_no_redis_crate() {
    let manifest =
        std::fs::read_to_string(root().join("crates/protocol/Cargo.toml")).expect("read");
    let deps = dependencies(&manifest);
    assert!(
        deps.iter().any(|d| d.starts_with("serde_json")),
        "parsed {deps:?}"
    );
    for dep in &deps {
        assert!(
            !dep.contains("redis") && !dep.contains("tokio"),
            "crates/protocol depends on {dep}: the decoders take a Reply and do no I/O"
        );
    }
    for file in rust_files(&root().join("crates/protocol/src")) {
        let code = code_only(&std::fs::read_to_string(&file).expect("read"));
        for banned in ["redis::", "std::net", "std::io"] {
            assert!(!code.contains(banned), "{} uses {banned}", file.display());
        }
    }
}

#[test]
fn the_engine_has_no_redis_imports() {
    for file in rust_files(&root().join("crates/engine/src")) {
        let code = code_only(&std::fs::read_to_string(&file).expect("read"));
        for banned in ["redis_module", "crate::redis", "raw::"] {
            assert!(!code.contains(banned), "{} uses {banned}", file.display());
        }
    }
}

#[test]
fn unsafe_only_in_the_redis_host_and_the_packed_hold_each_with_a_safety_comment() {
    let root = root();
    let mut blocks = 0;
    let files = [
        rust_files(&root.join("src")),
        rust_files(&root.join("crates/engine/src")),
    ];
    for file in files.concat() {
        let text = std::fs::read_to_string(&file).expect("read");
        let code = code_only(&text);
        let rel = file.strip_prefix(&root).expect("under the workspace");
        let allowed =
            rel.starts_with("src/redis") || rel == Path::new("crates/engine/src/packed.rs");
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in code.lines().enumerate() {
            let Some(col) = line.find("unsafe") else {
                continue;
            };
            let rest = &line[col + "unsafe".len()..];
            let is_keyword = !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                && (col == 0 || !line[..col].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
            if !is_keyword {
                continue;
            }
            // Unit tests may use the packed hold's unsafe API to test it.
            let in_tests = text[..text.lines().take(n).map(|l| l.len() + 1).sum::<usize>()]
                .contains("#[cfg(test)]");
            if in_tests && rel.starts_with("crates/engine") {
                continue;
            }
            assert!(
                allowed,
                "{}:{}: `unsafe` outside src/redis and crates/engine/src/packed.rs",
                rel.display(),
                n + 1
            );
            blocks += 1;
            // A `// SAFETY:` comment on this line or within the 4 lines above it, or a
            // `# Safety` section for an `unsafe fn`.
            let from = n.saturating_sub(4);
            let justified = lines[from..=n]
                .iter()
                .any(|l| l.contains("SAFETY:") || l.contains("# Safety"));
            assert!(
                justified,
                "{}:{}: `unsafe` without a `// SAFETY:` comment: {}",
                rel.display(),
                n + 1,
                lines[n].trim()
            );
        }
    }
    assert!(blocks > 50, "found only {blocks} unsafe uses");
}
