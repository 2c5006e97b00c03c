//! Every redis-cli session shown in the docs is replayed with the real `redis-cli` against a
//! fresh server with the module, and what redis-cli prints is compared with what the docs show.
//! A doc example that drifts from the module fails the build.
//!
//! # Which blocks
//! Every fenced code block of every Markdown file in the repository (README.md, docs/**,
//! examples/**, ...; not target/, node_modules/ or hidden folders) that holds a redis-cli
//! session: a line with a redis-cli prompt (`127.0.0.1:6379> LOCK.INFO k`, any host:port, an
//! optional `[db]`) or a shell line `$ redis-cli [options] [command]`. A block that shows
//! replies (`(integer) ...`, `(nil)`, `(error) ...`) but no such line fails, so a transcript
//! cannot go unchecked by accident.
//!
//! # How a block reads
//! - `host:port> COMMAND args`: typed into a redis-cli session (one per terminal, see below).
//! - `$ redis-cli [options] COMMAND args`: a one-shot redis-cli run on a connection of its own.
//!   `$ redis-cli [options]` alone starts the terminal's interactive session with those options.
//!   `-h`, `-p`, `-u` and `-s` are replaced by the test server's address; other options stay.
//! - Every other line is reply, exactly as redis-cli prints it on a terminal: `(integer) 1`,
//!   `(nil)`, `(error) ERR invalid ttl_ms`, ` 1) "owner"`, `1# "owner" => "a"` under RESP3.
//! - `  # text` (two spaces or more, then `# `, outside quotes) to the end of a line is a
//!   comment, on command and reply lines alike.
//! - `...` alone on a line stands for any number of reply lines (an elided part).
//! - `(N.NNs)` is the elapsed time redis-cli prints after a command that took 0.5 s or more:
//!   matched by pattern; it must be 0.50 s or more, and the command must really have taken at
//!   least 0.5 s (unless it was blocked until another terminal acted).
//!
//! # What is matched by pattern
//! - **Tokens**: any number of 15 digits or more. The first time the doc shows a number it is
//!   bound to what the server answered there; the same documented number must then always be the
//!   same actual token, different documented numbers different tokens, in the same order (the
//!   doc's larger token must be the larger one). A bound token in a later command is replaced by
//!   its actual value before the command is sent.
//! - **TTLs**: the integer after a `"ttl"` field (LOCK.INFO, RESP2 array or RESP3 map) and the
//!   reply of `PTTL`/`TTL`. A documented -1 or -2 is exact; a positive one matches any positive
//!   value up to the documented one rounded up to two significant digits (29873: 1..=30000).
//! - Everything else is compared exactly.
//!
//! # Which server a block runs on
//! Without an annotation each block replays on a fresh server of its own. The fence's info
//! string can say more, after the language (GitHub shows only the first word):
//! - ```` ```console replay=NAME ````: the blocks of one file with the same NAME share one
//!   server, its terminals and its tokens, replayed in file order, so a later block continues
//!   where an earlier one left off.
//! - ```` ```console replay=skip REASON ````: not replayed; the reason is printed and required.
//!
//! # Several terminals
//! A block whose first line names terminals in columns (`# terminal 1` ... `# terminal 2` ...)
//! has one redis-cli session per column. Lines are replayed from top to bottom, each going to the
//! terminal in whose column its text starts (so a line holds one terminal's text). A command
//! whose first reply line is `(blocks ...)` must block: the test waits until the server counts it
//! as a blocked client, checks that nothing was answered, and goes on with the other terminals;
//! its reply is read where the block shows it.
//!
//! The test prints how many blocks and commands it replayed and which it skipped, and fails if it
//! replayed none. A failure names the file and line, and shows what redis-cli printed next to
//! what the doc shows. `REDIS_CLI` picks the redis-cli binary (`REDIS_SERVER`, the server).
use relock_testkit as common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use common::{eventually, Server};
use relock_testkit::workspace_root as repo_root;

/// How long a command's reply may take. Documented waits are a few seconds at most.
const REPLY_DEADLINE: Duration = Duration::from_secs(30);
/// How long a `(blocks ...)` command may take to be counted as blocked.
const BLOCKED_DEADLINE: Duration = Duration::from_secs(10);
/// redis-cli prints the elapsed time of a command that took this long or longer.
const TIMING_SHOWN_FROM: Duration = Duration::from_millis(500);
/// Documented numbers this long or longer are fencing tokens.
const TOKEN_DIGITS: usize = 15;

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

// ---------------------------------------------------------------------------------------------
// Finding the blocks

/// How a block is replayed, from its fence's info string.
#[derive(Debug, Clone, PartialEq)]
enum Replay {
    /// On a fresh server of its own.
    Alone,
    /// On the server the file's blocks with this name share.
    Shared(String),
    /// Not at all, for this reason.
    Skip(String),
}

/// A fenced code block: where it is, its info string and its lines (with line numbers).
struct CodeBlock {
    file: String,
    line: usize,
    info: String,
    lines: Vec<(usize, String)>,
}

impl CodeBlock {
    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    fn replay(&self) -> Result<Replay, String> {
        let mut words = self.info.split_whitespace().skip(1);
        let mut replay = Replay::Alone;
        while let Some(word) = words.next() {
            let Some(value) = word.strip_prefix("replay=") else {
                continue;
            };
            replay = match value {
                "skip" => {
                    let reason = words.by_ref().collect::<Vec<_>>().join(" ");
                    if reason.is_empty() {
                        return Err(format!(
                            "{}: `replay=skip` needs a reason after it",
                            self.place()
                        ));
                    }
                    Replay::Skip(reason)
                }
                "" => return Err(format!("{}: `replay=` needs a name", self.place())),
                name => Replay::Shared(name.to_string()),
            };
        }
        Ok(replay)
    }

    fn is_transcript(&self) -> bool {
        self.lines.iter().any(|(_, l)| {
            prompt_command(l.trim_start()).is_some() || shell_redis_cli(l.trim_start()).is_some()
        })
    }

    /// Shows replies as redis-cli prints them, whatever else it holds.
    fn shows_replies(&self) -> bool {
        self.lines.iter().any(|(_, l)| {
            let l = l.trim_start();
            l.starts_with("(integer) ") || l.starts_with("(error) ") || l.starts_with("(nil)")
        })
    }
}

/// The fenced code blocks of a Markdown text (backtick or tilde fences, any indentation).
fn code_blocks(file: &str, text: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, char, usize, CodeBlock)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence = trimmed
            .chars()
            .next()
            .filter(|c| *c == '`' || *c == '~')
            .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
            .filter(|(_, n)| *n >= 3);
        match (&mut open, fence) {
            (None, Some((c, n))) => {
                let block = CodeBlock {
                    file: file.to_string(),
                    line: i + 1,
                    info: trimmed[n..].trim().to_string(),
                    lines: Vec::new(),
                };
                open = Some((indent, c, n, block));
            }
            (Some((_, c, n, _)), Some((c2, n2)))
                if c2 == *c && n2 >= *n && trimmed[n2..].trim().is_empty() =>
            {
                if let Some((_, _, _, block)) = open.take() {
                    blocks.push(block);
                }
            }
            (Some((indent, _, _, block)), _) => {
                let strip = line.chars().take(*indent).take_while(|c| *c == ' ').count();
                block
                    .lines
                    .push((i + 1, line[strip..].trim_end().to_string()));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The Markdown files of the repository, in a stable order.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = ["target", "node_modules", "data"];
                if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                    walk(&path, found);
                }
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&repo_root(), &mut found);
    found.sort();
    found
}

// ---------------------------------------------------------------------------------------------
// Reading a transcript

/// `127.0.0.1:6379> CMD args` (any host:port, optional `[db]`): the command text.
fn prompt_command(line: &str) -> Option<&str> {
    let (head, command) = line.split_once("> ")?;
    let head = match head.strip_suffix(']') {
        Some(h) => {
            let (h, db) = h.rsplit_once('[')?;
            if db.is_empty() || !db.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            h
        }
        None => head,
    };
    let (host, port) = head.rsplit_once(':')?;
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_[]:".contains(&b));
    let port_ok = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (host_ok && port_ok).then_some(command)
}

/// `$ redis-cli ...`: the words after `redis-cli`.
fn shell_redis_cli(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("$ ")?.trim_start();
    let after = rest.strip_prefix("redis-cli")?;
    (after.is_empty() || after.starts_with(' ')).then(|| after.trim())
}

/// Splits shell words: quotes and backslashes as sh does. Pipes, redirections and command lists
/// cannot be replayed.
fn shell_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("unterminated '".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err("unterminated \"".into()),
                        },
                        Some(c) => w.push(c),
                        None => return Err("unterminated \"".into()),
                    }
                }
            }
            '\\' => {
                if let Some(c) = chars.next() {
                    word.get_or_insert_with(String::new).push(c);
                }
            }
            '|' | '>' | '<' | ';' | '&' | '`' | '$' => {
                return Err(format!(
                    "`{c}`: shell pipelines and expansions cannot be replayed"
                ))
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// redis-cli's options that take a value (the first other word starts the command).
const VALUE_OPTIONS: &[&str] = &[
    "-h",
    "-p",
    "-s",
    "-a",
    "-u",
    "-r",
    "-i",
    "-n",
    "-d",
    "-D",
    "--user",
    "--pass",
    "--sni",
    "--cacert",
    "--cacertdir",
    "--cert",
    "--key",
    "--tls-ciphers",
    "--tls-ciphersuites",
    "--eval",
    "--rdb",
    "--functions-rdb",
    "--pipe-timeout",
    "--memkeys-samples",
    "--pattern",
    "--count",
    "--quoted-pattern",
];
/// Options that name the server: the test's own replace them.
const ADDRESS_OPTIONS: &[&str] = &["-h", "-p", "-s", "-u"];

/// `$ redis-cli` words: (options to keep, the command's words, if any).
fn split_redis_cli(words: &[String]) -> (Vec<String>, Vec<String>) {
    let mut options = Vec::new();
    let mut i = 0;
    while i < words.len() && words[i].starts_with('-') {
        let takes_value = VALUE_OPTIONS.contains(&words[i].as_str());
        let keep = !ADDRESS_OPTIONS.contains(&words[i].as_str());
        let end = (i + 1 + usize::from(takes_value)).min(words.len());
        if keep {
            options.extend_from_slice(&words[i..end]);
        }
        i = end;
    }
    (options, words[i..].to_vec())
}

/// Removes a trailing comment: two spaces or more, then `# `, outside double quotes.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut quoted = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'#' if !quoted
                && i >= 2
                && bytes[i - 1] == b' '
                && bytes[i - 2] == b' '
                && (i + 1 == bytes.len() || bytes[i + 1] == b' ') =>
            {
                return line[..i].trim_end();
            }
            _ => {}
        }
        i += 1;
    }
    line.trim_end()
}

/// `(1.23s)`: the seconds.
fn timing_line(line: &str) -> Option<f64> {
    let inner = line.trim().strip_prefix('(')?.strip_suffix("s)")?;
    let (whole, frac) = inner.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && frac.len() == 2 && digits(frac))
        .then(|| inner.parse().ok())
        .flatten()
}

fn is_blocks_line(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("(blocks") && l.ends_with(')')
}

/// A command of a transcript.
#[derive(Debug, Clone, PartialEq)]
enum Typed {
    /// A line typed at the terminal's redis-cli prompt.
    Prompt(String),
    /// `$ redis-cli options command...`: a one-shot run.
    OneShot {
        options: Vec<String>,
        command: Vec<String>,
    },
    /// `$ redis-cli options`: (re)start the terminal's interactive session.
    Session { options: Vec<String> },
}

/// One command with the reply the doc shows for it.
#[derive(Debug)]
struct Step {
    terminal: usize,
    line: usize,
    typed: Typed,
    /// Its first reply line is `(blocks ...)`.
    blocks: bool,
    /// The reply lines (comments removed), without `(blocks ...)` and timing lines.
    expected: Vec<(usize, String)>,
    /// A documented `(N.NNs)`.
    timing: Option<(usize, f64)>,
}

/// In the order of the doc's lines: start step i, or read the reply of blocked step i.
#[derive(Debug, PartialEq)]
enum Action {
    Start(usize),
    ReadBlocked(usize),
}

/// A transcript block, parsed: its steps and the order to play them in.
#[derive(Debug)]
struct Transcript {
    steps: Vec<Step>,
    actions: Vec<Action>,
}

/// The columns of a `# terminal 1   # terminal 2` header: (terminal number, start column).
fn terminal_columns(line: &str) -> Option<Vec<(usize, usize)>> {
    let chars: Vec<char> = line.chars().collect();
    let text: String = chars.iter().collect();
    let mut columns = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("# terminal ") {
        let start = from + at;
        let digits: String = text[start + 11..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let number = digits.parse().ok()?;
        columns.push((number, text[..start].chars().count()));
        from = start + 11 + digits.len();
    }
    (!columns.is_empty() && line.trim_start().starts_with("# terminal ")).then_some(columns)
}

fn parse_transcript(block: &CodeBlock) -> Result<Transcript, String> {
    // (line number, terminal, text) in the doc's order.
    let mut cells: Vec<(usize, usize, String)> = Vec::new();
    let first = block.lines.iter().position(|(_, l)| !l.trim().is_empty());
    let columns = first.and_then(|i| terminal_columns(&block.lines[i].1));
    match (&columns, first) {
        (Some(columns), Some(header)) => {
            // A line belongs to the terminal whose column its text starts in.
            for (n, line) in &block.lines[header + 1..] {
                let text_at = line.chars().take_while(|c| *c == ' ').count();
                if text_at == line.chars().count() {
                    continue;
                }
                let Some((terminal, start)) = columns.iter().rev().find(|(_, s)| *s <= text_at)
                else {
                    return Err(format!(
                        "{}:{n}: text left of the first terminal's column",
                        block.file
                    ));
                };
                let cell: String = line.chars().skip(*start).collect();
                cells.push((*n, *terminal, cell));
            }
        }
        _ => {
            for (n, line) in &block.lines {
                if !line.trim().is_empty() {
                    cells.push((*n, 1, line.to_string()));
                }
            }
        }
    }

    let mut steps: Vec<Step> = Vec::new();
    let mut actions = Vec::new();
    let mut current: BTreeMap<usize, usize> = BTreeMap::new(); // terminal -> its latest step
    for (n, terminal, text) in cells {
        let where_ = format!("{}:{n}", block.file);
        let text = strip_comment(&text).to_string();
        let typed = if let Some(command) = prompt_command(text.trim_start()) {
            Some(Typed::Prompt(command.trim().to_string()))
        } else if let Some(args) = shell_redis_cli(text.trim_start()) {
            let words = shell_words(args).map_err(|e| format!("{where_}: {e}"))?;
            let (options, command) = split_redis_cli(&words);
            Some(if command.is_empty() {
                Typed::Session { options }
            } else {
                Typed::OneShot { options, command }
            })
        } else if text.trim_start().starts_with("$ ") {
            return Err(format!(
                "{where_}: `{}` is not redis-cli and cannot be replayed; mark the block \
                 `replay=skip REASON`",
                text.trim()
            ));
        } else {
            None
        };
        if let Some(typed) = typed {
            current.insert(terminal, steps.len());
            actions.push(Action::Start(steps.len()));
            steps.push(Step {
                terminal,
                line: n,
                typed,
                blocks: false,
                expected: Vec::new(),
                timing: None,
            });
            continue;
        }
        let Some(&i) = current.get(&terminal) else {
            return Err(format!(
                "{where_}: reply line `{text}` before any command of terminal {terminal}"
            ));
        };
        let step = &mut steps[i];
        if is_blocks_line(&text) {
            if !step.expected.is_empty() || step.blocks {
                return Err(format!(
                    "{where_}: `(blocks ...)` must be the first line of a reply"
                ));
            }
            if !matches!(step.typed, Typed::Prompt(_)) {
                return Err(format!(
                    "{where_}: only a command at a prompt can block (one-shot runs cannot)"
                ));
            }
            step.blocks = true;
            continue;
        }
        if let Some(seconds) = timing_line(&text) {
            if seconds < TIMING_SHOWN_FROM.as_secs_f64() {
                return Err(format!(
                    "{where_}: `{text}`: redis-cli prints the elapsed time only from 0.50 s on"
                ));
            }
            step.timing = Some((n, seconds));
            continue;
        }
        if step.blocks && step.expected.is_empty() {
            actions.push(Action::ReadBlocked(i));
        }
        step.expected.push((n, text));
    }
    for (i, step) in steps.iter().enumerate() {
        if step.blocks && !actions.contains(&Action::ReadBlocked(i)) {
            return Err(format!(
                "{}:{}: the block never shows the reply of this blocked command",
                block.file, step.line
            ));
        }
    }
    Ok(Transcript { steps, actions })
}

// ---------------------------------------------------------------------------------------------
// Matching replies

/// Documented tokens and the actual ones they stand for, in one replay group.
#[derive(Debug, Clone, Default)]
struct Tokens {
    bound: Vec<(u128, u128)>,
}

impl Tokens {
    /// Binds a documented token to an actual one, or checks an earlier binding.
    fn bind(&mut self, doc: u128, actual: u128) -> Result<(), String> {
        for &(d, a) in &self.bound {
            if d == doc {
                return if a == actual {
                    Ok(())
                } else {
                    Err(format!(
                        "token {doc} stands for {a} earlier in the doc, but here the server answered {actual}"
                    ))
                };
            }
            if a == actual {
                return Err(format!(
                    "the server answered token {actual} here and earlier, but the doc shows two different tokens ({d} and {doc})"
                ));
            }
            if (d < doc) != (a < actual) {
                return Err(format!(
                    "the doc shows token {doc} {} {d}, but the server's {actual} is {} {a}",
                    if doc > d { "after" } else { "before" },
                    if actual > a { "after" } else { "before" },
                ));
            }
        }
        self.bound.push((doc, actual));
        Ok(())
    }

    /// A command with every bound documented token replaced by its actual value.
    fn substitute(&self, text: &str) -> String {
        let mut out = String::new();
        for (digits, run) in digit_runs(text) {
            let actual = (digits && run.len() >= TOKEN_DIGITS)
                .then(|| run.parse::<u128>().ok())
                .flatten()
                .and_then(|doc| self.bound.iter().find(|(d, _)| *d == doc))
                .map(|(_, a)| a.to_string());
            out.push_str(actual.as_deref().unwrap_or(run));
        }
        out
    }
}

/// The text cut into runs of ASCII digits and runs of other characters: (is digits, run).
fn digit_runs(text: &str) -> Vec<(bool, &str)> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut kind = None;
    for (i, c) in text.char_indices() {
        let digit = c.is_ascii_digit();
        if kind.is_some_and(|k| k != digit) {
            runs.push((!digit, &text[start..i]));
            start = i;
        }
        kind = Some(digit);
    }
    if let Some(k) = kind {
        runs.push((k, &text[start..]));
    }
    runs
}

/// `prefix(integer) N`: the prefix and N.
fn integer_reply(line: &str) -> Option<(&str, i64)> {
    let at = line.find("(integer) ")?;
    let n = line[at + 10..].parse().ok()?;
    Some((&line[..at], n))
}

/// The documented ttl rounded up to two significant digits: the most a replay may show.
fn ttl_ceiling(doc: i64) -> i64 {
    let mut unit = 1;
    while doc / unit >= 100 {
        unit *= 10;
    }
    (doc + unit - 1) / unit * unit
}

/// Whether the doc line at `i` is a ttl (see the top of this file).
fn is_ttl_line(expected: &[String], i: usize, ttl_command: bool) -> bool {
    let line = &expected[i];
    let Some((prefix, _)) = integer_reply(line) else {
        return false;
    };
    let after_ttl_field = i > 0 && expected[i - 1].trim_end().ends_with("\"ttl\"");
    after_ttl_field || prefix.ends_with("\"ttl\" => ") || (ttl_command && prefix.is_empty())
}

fn match_line(doc: &str, actual: &str, ttl: bool, tokens: &mut Tokens) -> Result<(), String> {
    if ttl {
        if let (Some((dp, d)), Some((ap, a))) = (integer_reply(doc), integer_reply(actual)) {
            let fits = if d <= 0 {
                a == d
            } else {
                a > 0 && a <= ttl_ceiling(d)
            };
            if dp == ap && fits {
                return Ok(());
            }
            if dp == ap {
                return Err(format!(
                    "ttl {a} does not fit the documented {d} (expected {})",
                    if d <= 0 {
                        format!("exactly {d}")
                    } else {
                        format!("1..={}", ttl_ceiling(d))
                    }
                ));
            }
        }
        return Err("differs".into());
    }
    let (d, a) = (digit_runs(doc), digit_runs(actual));
    if d.len() != a.len() {
        return Err("differs".into());
    }
    for (&(digits, dr), &(_, ar)) in d.iter().zip(&a) {
        if digits && dr.len() >= TOKEN_DIGITS {
            match (dr.parse::<u128>(), ar.parse::<u128>()) {
                (Ok(dv), Ok(av)) => tokens.bind(dv, av)?,
                _ => return Err("differs".into()),
            }
        } else if dr != ar {
            return Err("differs".into());
        }
    }
    Ok(())
}

/// Matches the documented reply lines (with `...`) against what redis-cli printed, binding
/// tokens on success.
fn match_reply(
    expected: &[String],
    actual: &[String],
    ttl_command: bool,
    tokens: &mut Tokens,
) -> Result<(), String> {
    fn go(
        expected: &[String],
        at: usize,
        actual: &[String],
        ttl_command: bool,
        tokens: &Tokens,
    ) -> Result<Tokens, String> {
        let Some(doc) = expected.get(at) else {
            return if actual.is_empty() {
                Ok(tokens.clone())
            } else {
                Err(format!(
                    "more lines than the doc shows, from `{}`",
                    actual[0]
                ))
            };
        };
        if doc == "..." {
            let mut last = Err("nothing".to_string());
            for skip in 0..=actual.len() {
                last = go(expected, at + 1, &actual[skip..], ttl_command, tokens);
                if last.is_ok() {
                    return last;
                }
            }
            return last;
        }
        let Some(line) = actual.first() else {
            return Err(format!("the doc shows more lines, from `{doc}`"));
        };
        let mut tokens = tokens.clone();
        match_line(
            doc,
            line,
            is_ttl_line(expected, at, ttl_command),
            &mut tokens,
        )
        .map_err(|why| format!("`{line}` where the doc shows `{doc}`: {why}"))?;
        go(expected, at + 1, &actual[1..], ttl_command, &tokens)
    }
    *tokens = go(expected, 0, actual, ttl_command, tokens)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Replaying

/// An interactive redis-cli (stdin and stdout piped; `--no-raw` so that it prints as on a
/// terminal). The end of each reply is found by an `ECHO` marker sent after the command.
struct Session {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<String>,
    markers: u64,
    in_multi: bool,
}

/// What ends the reply of a command sent to a session.
enum ReplyEnd {
    Marker(String),
    OneLine,
}

impl Session {
    fn start(port: u16, options: &[String]) -> Session {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 2>&1")
            .arg(redis_cli())
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--no-raw"])
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", redis_cli()));
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        let (send, out) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            child,
            stdin,
            out,
            markers: 0,
            in_multi: false,
        }
    }

    /// Types a command. Inside MULTI, commands answer one line (`QUEUED`) and a marker would be
    /// queued too, so none is sent.
    fn send(&mut self, command: &str) -> Result<ReplyEnd, String> {
        let name = command
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let one_line = name == "MULTI" || (self.in_multi && name != "EXEC" && name != "DISCARD");
        match name.as_str() {
            "MULTI" => self.in_multi = true,
            "EXEC" | "DISCARD" => self.in_multi = false,
            _ => {}
        }
        let end = if one_line {
            ReplyEnd::OneLine
        } else {
            self.markers += 1;
            ReplyEnd::Marker(format!("relock-transcript-marker-{}", self.markers))
        };
        let mut text = format!("{command}\n");
        if let ReplyEnd::Marker(m) = &end {
            text.push_str(&format!("ECHO {m}\n"));
        }
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("redis-cli is gone: {e}"))?;
        Ok(end)
    }

    /// The lines printed for a command, without timing lines.
    fn read_reply(&mut self, end: &ReplyEnd) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + REPLY_DEADLINE;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(line) => match end {
                    ReplyEnd::Marker(m) if line == format!("\"{m}\"") || line == *m => break,
                    ReplyEnd::OneLine => {
                        lines.push(line);
                        break;
                    }
                    _ => lines.push(line),
                },
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "no reply within {REPLY_DEADLINE:?} (printed so far: {lines:?}); a \
                         command that waits for another terminal needs a `(blocks ...)` line"
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("redis-cli exited (printed: {lines:?})"))
                }
            }
        }
        lines.retain(|l| timing_line(l).is_none());
        Ok(lines)
    }

    /// Something printed already?
    fn has_output(&mut self) -> Option<String> {
        self.out.try_recv().ok()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-shot `redis-cli options command...`: what it printed (stdout and stderr).
fn one_shot(port: u16, options: &[String], command: &[String]) -> Result<Vec<String>, String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 2>&1")
        .arg(redis_cli())
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--no-raw"])
        .args(options)
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", redis_cli()))?;
    let mut stdout = child.stdout.take().expect("stdout piped");
    let reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let mut failed = None;
    let exited = eventually(REPLY_DEADLINE, || match child.try_wait() {
        Ok(status) => status.is_some(),
        Err(e) => {
            failed = Some(e.to_string());
            true
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("no reply within {REPLY_DEADLINE:?}"));
    }
    let text = reader.join().unwrap_or_default();
    Ok(text.lines().map(str::to_string).collect())
}

/// A server and what its blocks share: terminals and tokens.
struct Group {
    server: Server,
    side: redis::Connection,
    terminals: BTreeMap<usize, Session>,
    tokens: Tokens,
}

impl Group {
    fn new() -> Group {
        let server = Server::start();
        let side = server.conn();
        Group {
            server,
            side,
            terminals: BTreeMap::new(),
            tokens: Tokens::default(),
        }
    }

    fn terminal(&mut self, number: usize) -> &mut Session {
        let port = self.server.port;
        self.terminals
            .entry(number)
            .or_insert_with(|| Session::start(port, &[]))
    }

    fn blocked_clients(&mut self) -> i64 {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut self.side)
            .expect("INFO clients");
        info.lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("blocked_clients in INFO clients")
    }
}

/// Whether a command's reply is a ttl (PTTL, TTL).
fn is_ttl_command(words: &str) -> bool {
    let name = words.split_whitespace().next().unwrap_or_default();
    name.eq_ignore_ascii_case("PTTL") || name.eq_ignore_ascii_case("TTL")
}

/// Replays one block on `group`: the number of commands replayed.
fn replay(block: &CodeBlock, transcript: &Transcript, group: &mut Group) -> Result<usize, String> {
    // For each started step: how its reply ends, and when it was sent.
    let mut pending: BTreeMap<usize, (ReplyEnd, Instant)> = BTreeMap::new();
    for action in &transcript.actions {
        let (i, started) = match *action {
            Action::Start(i) => (i, true),
            Action::ReadBlocked(i) => (i, false),
        };
        let step = &transcript.steps[i];
        let at = format!("{}:{}", block.file, step.line);
        let (shown, ttl_command, actual, elapsed) = match (&step.typed, started) {
            (Typed::Session { options }, _) => {
                let port = group.server.port;
                group
                    .terminals
                    .insert(step.terminal, Session::start(port, options));
                if !step.expected.is_empty() {
                    return Err(format!(
                        "{at}: `$ redis-cli` alone prints nothing to compare"
                    ));
                }
                continue;
            }
            (Typed::OneShot { options, command }, _) => {
                let command: Vec<String> =
                    command.iter().map(|w| group.tokens.substitute(w)).collect();
                let shown = format!(
                    "$ redis-cli {}",
                    [&options[..], &command[..]].concat().join(" ")
                );
                let sent = Instant::now();
                let actual = one_shot(group.server.port, options, &command)
                    .map_err(|e| format!("{at}: `{shown}`: {e}"))?;
                let ttl = is_ttl_command(&command.join(" "));
                (shown, ttl, actual, sent.elapsed())
            }
            (Typed::Prompt(text), true) => {
                let command = group.tokens.substitute(text);
                let before = if step.blocks {
                    group.blocked_clients()
                } else {
                    0
                };
                let session = group.terminal(step.terminal);
                let sent = Instant::now();
                let end = session
                    .send(&command)
                    .map_err(|e| format!("{at}: `{command}`: {e}"))?;
                if step.blocks {
                    let mut answered = None;
                    let blocked = eventually(BLOCKED_DEADLINE, || {
                        answered = group.terminal(step.terminal).has_output();
                        answered.is_some() || group.blocked_clients() > before
                    });
                    if let Some(line) = answered {
                        return Err(format!(
                            "{at}: `{command}`: the doc says it blocks, but it answered `{line}`"
                        ));
                    }
                    if !blocked {
                        return Err(format!(
                            "{at}: `{command}`: not counted as a blocked client within {BLOCKED_DEADLINE:?}"
                        ));
                    }
                    pending.insert(i, (end, sent));
                    continue;
                }
                let actual = group
                    .terminal(step.terminal)
                    .read_reply(&end)
                    .map_err(|e| format!("{at}: `{command}`: {e}"))?;
                (
                    command.clone(),
                    is_ttl_command(&command),
                    actual,
                    sent.elapsed(),
                )
            }
            (Typed::Prompt(text), false) => {
                let (end, sent) = pending
                    .remove(&i)
                    .ok_or_else(|| format!("{at}: reply of a command never sent"))?;
                let command = group.tokens.substitute(text);
                let actual = group
                    .terminal(step.terminal)
                    .read_reply(&end)
                    .map_err(|e| format!("{at}: `{command}`: {e}"))?;
                (
                    command.clone(),
                    is_ttl_command(&command),
                    actual,
                    sent.elapsed(),
                )
            }
        };
        let expected: Vec<String> = step.expected.iter().map(|(_, l)| l.clone()).collect();
        match_reply(&expected, &actual, ttl_command, &mut group.tokens).map_err(|why| {
            format!(
                "{at}: `{shown}` printed\n{}\nwhere the doc shows\n{}\n({why})",
                indent(&actual),
                indent(&expected)
            )
        })?;
        if let Some((line, seconds)) = step.timing {
            if !step.blocks && elapsed < TIMING_SHOWN_FROM {
                return Err(format!(
                    "{}:{line}: the doc shows `({seconds:.2}s)`, but `{shown}` took {elapsed:?}, \
                     and redis-cli prints the time only from 0.50 s",
                    block.file
                ));
            }
        }
    }
    Ok(transcript.steps.len())
}

fn indent(lines: &[String]) -> String {
    if lines.is_empty() {
        return "    (nothing)".to_string();
    }
    lines
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Printed even when the test passes: cargo captures print!, not direct writes to stderr.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

#[test]
fn every_documented_redis_cli_session_replays() {
    let root = repo_root();
    let mut failures = Vec::new();
    let (mut replayed_blocks, mut replayed_commands, mut skipped) = (0, 0, Vec::new());
    let mut files_with_transcripts = 0;
    for path in markdown_files() {
        let file = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        let mut failed_groups: Vec<String> = Vec::new();
        let mut any = false;
        for block in code_blocks(&file, &text) {
            let replay_as = match block.replay() {
                Ok(r) => r,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            if let Replay::Skip(reason) = &replay_as {
                if block.is_transcript() || block.shows_replies() {
                    skipped.push(format!("{}: {reason}", block.place()));
                    any = true;
                }
                continue;
            }
            if !block.is_transcript() {
                if block.shows_replies() {
                    failures.push(format!(
                        "{}: shows redis-cli replies but no command line (`127.0.0.1:6379> ...` \
                         or `$ redis-cli ...`); add them, or mark it `replay=skip REASON`",
                        block.place()
                    ));
                }
                continue;
            }
            any = true;
            let transcript = match parse_transcript(&block) {
                Ok(t) => t,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            let (mut own, name) = match &replay_as {
                Replay::Shared(name) => (None, Some(name.clone())),
                _ => (Some(Group::new()), None),
            };
            if let Some(name) = &name {
                if failed_groups.contains(name) {
                    failures.push(format!(
                        "{}: not replayed: an earlier block of replay={name} failed",
                        block.place()
                    ));
                    continue;
                }
            }
            let group = match (&mut own, &name) {
                (Some(group), _) => group,
                (None, Some(name)) => groups.entry(name.clone()).or_insert_with(Group::new),
                (None, None) => unreachable!("a block replays alone or in a group"),
            };
            match replay(&block, &transcript, group) {
                Ok(commands) => {
                    replayed_blocks += 1;
                    replayed_commands += commands;
                }
                Err(e) => {
                    failures.push(e);
                    failed_groups.extend(name);
                }
            }
        }
        files_with_transcripts += usize::from(any);
    }
    say(&format!(
        "transcripts: replayed {replayed_blocks} blocks ({replayed_commands} commands) from \
         {files_with_transcripts} file(s); skipped {}",
        skipped.len()
    ));
    for s in &skipped {
        say(&format!("transcripts: skipped {s}"));
    }
    assert!(
        failures.is_empty(),
        "{} documented redis-cli transcript(s) do not match the module:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        replayed_blocks > 0,
        "found no redis-cli transcript to replay in README.md or docs/"
    );
}

// ---------------------------------------------------------------------------------------------
// The rules above, on small inputs.

fn block_of(text: &str) -> CodeBlock {
    let mut blocks = code_blocks("t.md", text);
    assert_eq!(blocks.len(), 1, "one block in {text:?}");
    blocks.remove(0)
}

#[test]
fn prompts_and_shell_lines_are_recognised() {
    assert_eq!(
        prompt_command("127.0.0.1:6379> LOCK.INFO k"),
        Some("LOCK.INFO k")
    );
    assert_eq!(prompt_command("localhost:7000[2]> GET k"), Some("GET k"));
    assert_eq!(prompt_command("(integer) 1"), None);
    assert_eq!(prompt_command("1# \"a\" => \"b\""), None);
    assert_eq!(shell_redis_cli("$ redis-cli -p 7 PING"), Some("-p 7 PING"));
    assert_eq!(shell_redis_cli("$ redis-cli"), Some(""));
    assert_eq!(shell_redis_cli("$ redis-client"), None);
    let words = shell_words(r#"-h x -p 1 -n 2 SET k "a b" 'c d'"#).unwrap();
    assert_eq!(
        split_redis_cli(&words),
        (
            vec!["-n".to_string(), "2".to_string()],
            vec!["SET", "k", "a b", "c d"]
                .into_iter()
                .map(String::from)
                .collect()
        )
    );
    assert!(shell_words("GET k | jq").is_err());
}

#[test]
fn comments_timings_and_fences() {
    assert_eq!(strip_comment("(integer) 1     # a comment"), "(integer) 1");
    assert_eq!(
        strip_comment("1# \"owner\" => \"a\""),
        "1# \"owner\" => \"a\""
    );
    assert_eq!(
        strip_comment("\"a  # not a comment\""),
        "\"a  # not a comment\""
    );
    assert_eq!(timing_line("(7.31s)"), Some(7.31));
    assert_eq!(timing_line("(integer) 1"), None);
    let block = block_of("x\n```console replay=skip needs two servers\n$ redis-cli PING\n```\n");
    assert_eq!(
        block.replay(),
        Ok(Replay::Skip("needs two servers".to_string()))
    );
    let block = block_of("  ```console replay=orders\n  127.0.0.1:6379> PING\n  PONG\n  ```\n");
    assert_eq!(block.replay(), Ok(Replay::Shared("orders".to_string())));
    assert_eq!(block.lines[0].1, "127.0.0.1:6379> PING");
    assert!(block_of("```console replay=skip\n```\n").replay().is_err());
}

#[test]
fn tokens_bind_consistently_and_in_order() {
    let mut t = Tokens::default();
    assert!(t.bind(1795262129362000, 1800000000000001).is_ok());
    assert!(t.bind(1795262129362000, 1800000000000001).is_ok());
    assert!(
        t.bind(1795262129362000, 1800000000000002).is_err(),
        "same doc token, other token"
    );
    assert!(
        t.bind(1795262131044000, 1800000000000001).is_err(),
        "other doc token, same token"
    );
    assert!(
        t.bind(1795262131044000, 1700000000000000).is_err(),
        "order reversed"
    );
    assert!(t.bind(1795262131044000, 1800000000000009).is_ok());
    assert_eq!(
        t.substitute("LOCK.COUNTER 1795262131044000"),
        "LOCK.COUNTER 1800000000000009"
    );
}

#[test]
fn replies_match_with_placeholders() {
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let mut t = Tokens::default();
    let info_doc = lines(&[" 7) \"ttl\"", " 8) (integer) 29873"]);
    assert!(match_reply(
        &info_doc,
        &lines(&[" 7) \"ttl\"", " 8) (integer) 29999"]),
        false,
        &mut t
    )
    .is_ok());
    assert!(match_reply(
        &info_doc,
        &lines(&[" 7) \"ttl\"", " 8) (integer) 59999"]),
        false,
        &mut t
    )
    .is_err());
    assert!(match_reply(
        &info_doc,
        &lines(&[" 7) \"ttl\"", " 8) (integer) -1"]),
        false,
        &mut t
    )
    .is_err());
    let elided = lines(&["...", "10) (integer) 1"]);
    assert!(match_reply(
        &elided,
        &lines(&["a", "b", "10) (integer) 1"]),
        false,
        &mut t
    )
    .is_ok());
    assert!(match_reply(&elided, &lines(&["10) (integer) 2"]), false, &mut t).is_err());
    assert!(match_reply(
        &lines(&["(integer) 0"]),
        &lines(&["(integer) 1"]),
        false,
        &mut t
    )
    .is_err());
    assert!(match_reply(
        &lines(&["(integer) 9995"]),
        &lines(&["(integer) 10000"]),
        true,
        &mut t
    )
    .is_ok());
    assert_eq!(ttl_ceiling(29873), 30000);
    assert_eq!(ttl_ceiling(95), 95);
}

#[test]
fn terminals_in_columns() {
    let text = r#"```console
# terminal 1            # terminal 2
127.0.0.1:6379> GET a
(nil)
                        127.0.0.1:6379> BLPOP q 0
                        (blocks ...)
127.0.0.1:6379> LPUSH q x
(integer) 1
                        1) "q"
                        2) "x"
```
"#;
    let t = parse_transcript(&block_of(text)).unwrap();
    assert_eq!(t.steps.len(), 3);
    assert_eq!(t.steps[1].terminal, 2);
    assert!(t.steps[1].blocks);
    assert_eq!(
        t.actions,
        vec![
            Action::Start(0),
            Action::Start(1),
            Action::Start(2),
            Action::ReadBlocked(1)
        ]
    );
    let mut group = Group::new();
    assert_eq!(replay(&block_of(text), &t, &mut group), Ok(3));
}
