//! The documentation holds together: every relative link in the Markdown files (README, docs/,
//! examples/, CHANGELOG) points to a file that exists and, with `#anchor`, to a heading that
//! exists there (GitHub's anchor rules), and no page names a folder of one machine.
//! No server needed.

use relock_testkit::workspace_root as root;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Markdown pages: README.md, CHANGELOG.md, ARCHITECTURE.md and every .md under docs/ and
/// examples/
/// (dependency folders left out).
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "node_modules" || name == "target" {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![
        root().join("README.md"),
        root().join("CHANGELOG.md"),
        root().join("ARCHITECTURE.md"),
    ];
    walk(&root().join("docs"), &mut out);
    walk(&root().join("examples"), &mut out);
    out
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; a repeated
/// heading gets -1, -2...
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    prose(text)
        .into_iter()
        .filter_map(|line| {
            let heading = line.trim_start_matches('#');
            (line.starts_with('#') && heading.starts_with(' ')).then_some(heading.trim())
        })
        .map(|heading| {
            let slug: String = heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            let anchor = if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            };
            *n += 1;
            anchor
        })
        .collect()
}

/// `[label](target)` links in the prose (inline code spans left out).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut code = false;
        let bytes: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                '`' => code = !code,
                ']' if !code && bytes.get(i + 1) == Some(&'(') => {
                    let rest: String = bytes[i + 2..].iter().collect();
                    if let Some(end) = rest.find(')') {
                        out.push(rest[..end].to_string());
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

#[test]
fn every_link_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let shown = page.strip_prefix(root()).unwrap_or(&page).display();
            if !file.exists() {
                broken.push(format!("{shown}: ({target}) no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let there = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&there).iter().any(|a| a == anchor) {
                    broken.push(format!("{shown}: ({target}) no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 30, "only {checked} links checked");
    eprintln!("docs: {checked} links resolve");
}

#[test]
fn no_page_names_a_machine_folder() {
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        // Spelled from parts so that this file does not itself name those folders.
        for bad in ["work", "root", "home", "tmp"].map(|dir| format!("/{dir}/")) {
            assert!(
                !text.contains(&bad),
                "{} names a machine folder ({bad})",
                page.display()
            );
        }
    }
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("make run") && readme.contains("make test"));
    assert!(
        readme.len() < 12 * 1024,
        "README.md is {} bytes: detail belongs in docs/",
        readme.len()
    );
}

#[test]
fn anchors_follow_github() {
    let text = "# Title\n## Deployment: which topology, and what it guarantees\n## A b\n## A b\n```\n# not a heading\n```\n";
    assert_eq!(
        anchors(text),
        [
            "title",
            "deployment-which-topology-and-what-it-guarantees",
            "a-b",
            "a-b-1"
        ]
    );
    assert_eq!(links("see [x](a.md#b) and `[no](c.md)`"), ["a.md#b"]);
}
