//! lockctl for operators: `waiters`, `log`, `top` and `metrics`, which read what the servers
//! know about their locks (`LOCK.WAITERS`, `LOCK.LOG`, `LOCK.HISTORY`, `LOCK.STATS`,
//! `INFO relock`) and show it to a person, a script (`--json`) or Prometheus.
//!
//! Everything a reply carries that a client chose (keys, owners, client names) is shown with
//! its control characters escaped and, in tables, cut to a width: an owner of 1 MB or one
//! with terminal escape sequences must not take over an operator's screen. `--json` keeps
//! them whole.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use relock_client::limits::parse_timeout;
use relock_client::Relock;

use crate::output::{out, say};

/// The node timeout of the operators' subcommands (and of `info` and `force-release`) unless
/// `--node-timeout` says: a journal of thousands of entries with keys of a megabyte takes more
/// than a lock's 100ms to send.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// The operators' subcommands, flattened into lockctl's own.
#[derive(Subcommand)]
pub enum Ops {
    /// Show who waits for KEY on each master, in queue order: owner, mode, limit, permits,
    /// the waiting connection's client id, how long it has waited, its timeout left and the
    /// ttl it asked for (LOCK.WAITERS).
    Waiters {
        /// The lock's key.
        key: String,
        /// At most this many waiters per master (0: all; at most 4294967295, as the server).
        #[arg(long, default_value_t = 100)]
        count: u32,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show holds that ended other than by their owner (expired, force-released, deleted...),
    /// newest first, with the reason and who ended them: of KEY (LOCK.HISTORY), or of every
    /// key (LOCK.LOG, which needs the admin ACL category).
    Log {
        /// Only this key's holds.
        key: Option<String>,
        /// At most this many entries per master (at most 4294967295, as the server).
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A live view of every master (rates, wait and hold percentiles) and of the hottest keys
    /// (LOCK.STATS) with their holders and queues; q quits, the arrows select a key.
    Top {
        /// How often to read the masters again.
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
        /// How many of the hottest keys to show, per master.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
        keys: u64,
        /// Print one plain snapshot (two readings `--interval` apart, for the rates) and exit.
        #[arg(long)]
        once: bool,
        /// Print one snapshot as JSON and exit (implies --once).
        #[arg(long)]
        json: bool,
    },
    /// Serve /metrics in the Prometheus (OpenMetrics) text format: every scrape reads
    /// INFO relock and LOCK.STATS of every master, each metric labelled `master`.
    Metrics {
        /// Where to listen, host:port (port 0: any free port; the address is said on stderr).
        #[arg(long, default_value = "127.0.0.1:9411")]
        listen: SocketAddr,
        /// How many of the hottest keys to export, per master (label `key`; 0: none).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1000))]
        keys: u64,
        /// The most one scrape may take; a master that has not answered by then is down
        /// for that scrape.
        #[arg(long, default_value = "5s", value_parser = parse_interval)]
        scrape_timeout: Duration,
    },
}

/// A duration of at least 10ms and at most 1000000000s (no deadline computed from it can
/// overflow).
fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse_timeout(text)?;
    if d < Duration::from_millis(10) {
        return Err(format!("{text:?} is too short (at least 10ms)"));
    }
    Ok(d)
}

/// Runs an operators' subcommand.
pub async fn run(relock: Relock, cluster: bool, db: i64, command: Ops) -> ExitCode {
    match command {
        Ops::Waiters { key, count, json } => crate::waiters::show(&relock, &key, count, json).await,
        Ops::Log { key, count, json } => {
            crate::log::show(&relock, key.as_deref(), count, json).await
        }
        Ops::Top {
            interval,
            keys,
            once,
            json,
        } => {
            let view = crate::top::View {
                interval,
                keys: keys as usize,
                cluster,
                db,
            };
            if once || json {
                crate::top::once(&relock, &view, json).await
            } else {
                crate::top::live(relock, view).await
            }
        }
        Ops::Metrics {
            listen,
            keys,
            scrape_timeout,
        } => crate::metrics::serve(relock, listen, keys as usize, scrape_timeout).await,
    }
}

/// The exit status of a listing: failure when any master failed.
pub fn status(failed: bool) -> ExitCode {
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints a JSON document on stdout.
pub fn print_json(doc: &serde_json::Value) {
    out!("{doc}");
}

/// Says why a reply could not be read.
pub fn bad_reply(what: &str, why: &str) -> String {
    format!("unexpected {what} reply: {why}")
}

/// A hold's mode as lockctl shows it: `exclusive` or `shared`, and its limit (0: none; an
/// exclusive hold's is `exclusive_limit`, as the command's reply says it).
pub fn mode_words(mode: relock_protocol::Mode, exclusive_limit: i64) -> (&'static str, i64) {
    match mode {
        relock_protocol::Mode::Exclusive => ("exclusive", exclusive_limit),
        relock_protocol::Mode::Shared { limit } => ("shared", limit.map_or(0, i64::from)),
    }
}

/// A count of a decoded reply as the signed number lockctl's tables and JSON keep.
pub fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Bytes a client chose, for a person: lossy UTF-8, control characters escaped (`\x1b`,
/// `\n`), cut to `width` characters with `…` when longer (0: whole).
pub fn printable(bytes: &[u8], width: usize) -> String {
    // Past this many characters nothing more is shown: no need to escape a megabyte.
    let enough = if width == 0 { usize::MAX } else { width + 1 };
    let pieces: Vec<String> = String::from_utf8_lossy(bytes)
        .chars()
        .take(enough)
        .map(|c| match c {
            '\n' => "\\n".to_string(),
            '\t' => "\\t".to_string(),
            '\r' => "\\r".to_string(),
            c if c.is_control() && (c as u32) < 0x100 => format!("\\x{:02x}", c as u32),
            c if c.is_control() => format!("\\u{{{:x}}}", c as u32),
            c => c.to_string(),
        })
        .collect();
    let total: usize = pieces.iter().map(|p| p.chars().count()).sum();
    if width == 0 || total <= width {
        return pieces.concat();
    }
    // An escape is never cut in half; one column is left for the ellipsis.
    let mut shown = String::new();
    let mut used = 0;
    for piece in pieces {
        let n = piece.chars().count();
        if used + n > width - 1 {
            break;
        }
        shown.push_str(&piece);
        used += n;
    }
    shown.push('…');
    shown
}

/// `command` as relock-client sends it: its whole argv, written by relock-protocol's type for
/// it (the types the module parses with), so that lockctl writes no command's arguments itself.
pub fn query<'a, C: relock_protocol::Command<'a>>(command: &C) -> relock_client::Command {
    command
        .args()
        .iter()
        .fold(relock_client::Command::new(C::NAME), |cmd, arg| {
            cmd.arg_bytes(arg)
        })
}

/// An error for a person, control characters escaped as [`printable`] does: what a server
/// says may quote the key or the owner a client chose (`ERR unknown command 'LOCK.INFO', with
/// args beginning with: '<key>'` from a server without the module), and those bytes must not
/// reach a terminal raw.
pub fn shown_error(why: impl std::fmt::Display) -> String {
    printable(why.to_string().as_bytes(), 0)
}

/// Bytes as a JSON string (lossy UTF-8; JSON escapes the control characters).
pub fn json_text(bytes: &[u8]) -> serde_json::Value {
    serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned())
}

/// Milliseconds for a person: `850ms`, `12.3s`, `4m05s`, `2h10m`; `-` for none.
pub fn ms(ms: Option<i64>) -> String {
    let Some(ms) = ms.filter(|m| *m >= 0) else {
        return "-".to_string();
    };
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A Unix time in ms as `2026-11-25 03:40:12.345Z` (UTC).
pub fn utc(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let milli = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{milli:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A plain text table: a header row and rows, columns padded to their widest cell and two
/// spaces apart, no trailing blanks.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut text = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths.get(i).copied().unwrap_or(0);
            let _ = write!(line, "{cell:<pad$}  ");
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text.pop();
    text
}

/// Says an error that ends a subcommand, with status 1.
pub fn fail(why: impl std::fmt::Display) -> ExitCode {
    say!("{why}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use relock_client::Reply as Value;

    #[test]
    fn a_query_is_the_protocol_types_argv() {
        let cmd = query(&relock_protocol::cmd::Waiters {
            key: b"k",
            count: Some(20),
        });
        let argv: Vec<&[u8]> = cmd.args().collect();
        assert_eq!(argv, [&b"LOCK.WAITERS"[..], b"k", b"COUNT", b"20"]);
    }

    #[test]
    fn printable_escapes_and_cuts() {
        assert_eq!(printable(b"web-3/42/abc", 0), "web-3/42/abc");
        assert_eq!(printable(b"a\x1b[2Jb\n", 0), "a\\x1b[2Jb\\n");
        assert_eq!(printable(b"abcdef", 4), "abc…");
        assert_eq!(printable(b"abcd", 4), "abcd");
        assert_eq!(printable(&vec![b'x'; 1 << 20], 40).chars().count(), 40);
        assert_eq!(printable(b"\xff\xfe", 0), "\u{fffd}\u{fffd}");
        // An escape is never cut in half.
        assert_eq!(printable(b"abc\x1b", 5), "abc…");
    }

    #[test]
    fn times_read_well() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc(1_795_262_129_362), "2026-11-21 11:55:29.362Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000Z");
        assert_eq!(ms(Some(850)), "850ms");
        assert_eq!(ms(Some(12_345)), "12.3s");
        assert_eq!(ms(Some(245_000)), "4m05s");
        assert_eq!(ms(Some(7_800_000)), "2h10m");
        assert_eq!(ms(Some(-1)), "-");
        assert_eq!(ms(None), "-");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "LONG HEADER"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A    LONG HEADER\nxyz  1\nq    22");
    }

    #[test]
    fn replies_of_both_protocols() {
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let fields = [
            ("owner", bulk("w")),
            ("mode", bulk("shared")),
            ("limit", Value::Int(3)),
            ("client", Value::Int(17)),
            ("waited", Value::Int(5)),
            ("timeout", Value::Int(-1)),
            ("ttl", Value::Int(900)),
        ];
        let resp2 = Value::Array(vec![Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [bulk(k), v.clone()])
                .collect(),
        )]);
        let resp3 = Value::Array(vec![Value::Map(
            fields
                .iter()
                .map(|(k, v)| (Value::Simple((*k).into()), v.clone()))
                .collect(),
        )]);
        for v in [resp2, resp3] {
            let w = crate::waiters::parse(&v).expect("waiters");
            assert_eq!(
                (w[0].owner.as_slice(), w[0].mode.as_str()),
                (&b"w"[..], "shared")
            );
            assert_eq!((w[0].limit, w[0].permits, w[0].timeout_ms), (3, 1, -1));
            assert_eq!(w[0].mode_text(), "shared limit 3");
        }
        let missing = Value::Array(vec![Value::Array(vec![bulk("owner"), bulk("w")])]);
        assert_eq!(
            crate::waiters::parse(&missing),
            Err("unexpected LOCK.WAITERS reply: no field client".to_string())
        );
        assert_eq!(crate::waiters::parse(&Value::Nil), Ok(vec![]));
        assert!(crate::log::parse(&Value::Int(1)).is_err());
    }
}
