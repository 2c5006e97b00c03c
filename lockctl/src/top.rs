//! `lockctl top`: every master's rates and percentiles, and the hottest keys with their
//! holders and queues, read again every `--interval`; a live terminal view (ratatui), or one
//! plain or JSON snapshot with `--once` / `--json`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use relock_client::Relock;
use serde_json::json;
use tokio::time::Instant;

use crate::ops::{self, json_text, ms, printable, table, utc};
use crate::output::out;
use crate::sample::{sample, Ask, MasterSample, RelockInfo};
use crate::waiters::{self, Waiter};

/// How many waiters of each hot key are read (the queue pane shows the selected key's).
const QUEUE_HEAD: u32 = 20;
/// How many characters of a key or an owner the view shows.
const KEY_WIDTH: usize = 40;
const OWNER_WIDTH: usize = 32;

/// What `lockctl top` was asked for.
pub struct View {
    pub interval: Duration,
    /// How many hot keys, per master.
    pub keys: usize,
    pub cluster: bool,
    /// The db lockctl's connections use.
    pub db: i64,
}

impl View {
    fn ask(&self) -> Ask {
        Ask {
            keys: self.keys,
            queue: QUEUE_HEAD,
            db: self.db,
        }
    }
}

/// A master's line: its latest reading, with rates from the one before.
struct MasterRow {
    master: String,
    error: Option<String>,
    info: RelockInfo,
    /// Per second: acquires, hand-offs (grants to waiters), wait timeouts.
    rates: Option<[f64; 3]>,
}

/// A hot key's line.
struct KeyRow<'a> {
    master: &'a str,
    hot: &'a crate::sample::HotKey,
}

/// One screen's worth: masters, then hot keys (hottest first over every master).
struct Screen<'a> {
    masters: Vec<MasterRow>,
    keys: Vec<KeyRow<'a>>,
}

const RATE_FIELDS: [&str; 3] = ["acquired_total", "granted_total", "wait_timeouts_total"];

fn screen<'a>(prev: Option<&[MasterSample]>, cur: &'a [MasterSample], keys: usize) -> Screen<'a> {
    let masters = cur
        .iter()
        .map(|r| {
            let before = prev.and_then(|p| p.iter().find(|b| b.master == r.master));
            let rates = match (before.map(|b| (&b.info, b.at)), &r.info) {
                (Some((Ok(b), at)), Ok(now)) if r.at > at => {
                    let dt = (r.at - at).as_secs_f64();
                    let rate = |f: &str| {
                        let d = now.get(f).unwrap_or(0.0) - b.get(f).unwrap_or(0.0);
                        // A counter that went back: the server restarted.
                        d.max(0.0) / dt
                    };
                    Some(RATE_FIELDS.map(rate))
                }
                _ => None,
            };
            MasterRow {
                master: r.master.clone(),
                error: r.info.as_ref().err().cloned(),
                info: r.info.clone().unwrap_or_default(),
                rates,
            }
        })
        .collect();
    let mut rows: Vec<KeyRow<'a>> = cur
        .iter()
        .flat_map(|r| {
            r.hot.iter().flatten().map(move |hot| KeyRow {
                master: &r.master,
                hot,
            })
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.hot.stats.wait_ms_total));
    rows.truncate(keys.max(1) * cur.len().max(1));
    Screen {
        masters,
        keys: rows,
    }
}

/// Milliseconds with a decimal, for percentiles.
fn ms_f(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        Some(v) if v < 1000.0 => format!("{v:.1}ms"),
        Some(v) => format!("{:.2}s", v / 1000.0),
    }
}

fn rate(r: Option<[f64; 3]>, i: usize) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{:.1}", r[i]))
}

const MASTER_HEADER: [&str; 10] = [
    "MASTER",
    "LOCKS",
    "HOLDS",
    "WAITERS",
    "ACQUIRES/S",
    "HAND-OFFS/S",
    "TIMEOUTS/S",
    "WAIT P50",
    "WAIT P99",
    "HOLD P99",
];

fn master_cells(m: &MasterRow) -> Vec<String> {
    if let Some(e) = &m.error {
        let mut cells = vec![
            m.master.clone(),
            format!("down: {}", printable(e.as_bytes(), 60)),
        ];
        cells.resize(MASTER_HEADER.len(), String::new());
        return cells;
    }
    let n = |f: &str| m.info.get(f).map_or("-".to_string(), |v| format!("{v}"));
    vec![
        m.master.clone(),
        n("locks"),
        n("holds"),
        n("waiters"),
        rate(m.rates, 0),
        rate(m.rates, 1),
        rate(m.rates, 2),
        ms_f(RelockInfo::quantile(&m.info.wait, 0.5)),
        ms_f(RelockInfo::quantile(&m.info.wait, 0.99)),
        ms_f(RelockInfo::quantile(&m.info.hold, 0.99)),
    ]
}

const KEY_HEADER: [&str; 9] = [
    "KEY", "MASTER", "HELD BY", "QUEUE", "WAITS", "GRANTED", "TIMEOUTS", "WAITED", "LONGEST",
];

fn held_by(hot: &crate::sample::HotKey) -> String {
    match &hot.lock {
        Err(why) => printable(why.as_bytes(), 30),
        Ok(None) => "free".to_string(),
        Ok(Some(l)) => match &l.owner {
            Some(owner) => printable(owner, OWNER_WIDTH),
            None if l.mode == "shared" && l.limit > 0 => {
                format!("{} holders (limit {})", l.holders, l.limit)
            }
            None => format!("{} holders", l.holders),
        },
    }
}

fn key_cells(k: &KeyRow<'_>) -> Vec<String> {
    let s = &k.hot.stats;
    let key = printable(&s.key, KEY_WIDTH);
    vec![
        if s.db == 0 {
            key
        } else {
            format!("db {}: {key}", s.db)
        },
        k.master.to_string(),
        held_by(k.hot),
        match &k.hot.lock {
            Ok(l) => l.as_ref().map_or(0, |l| l.waiters).to_string(),
            Err(_) => "-".to_string(),
        },
        s.waits.to_string(),
        s.granted.to_string(),
        s.timeouts.to_string(),
        if s.error > 0 {
            format!("{} ±{}", ms(Some(s.wait_ms_total)), ms(Some(s.error)))
        } else {
            ms(Some(s.wait_ms_total))
        },
        ms(Some(s.wait_ms_max)),
    ]
}

fn queue_title(k: Option<&KeyRow<'_>>) -> String {
    match k {
        None => "queue (no contended key yet)".to_string(),
        Some(k) => {
            let total = match &k.hot.lock {
                Ok(l) => l.as_ref().map_or(0, |l| l.waiters),
                Err(_) => k.hot.queue.len() as i64,
            };
            format!(
                "queue of {} on {} ({} waiting{})",
                printable(&k.hot.stats.key, KEY_WIDTH),
                k.master,
                total,
                if total > k.hot.queue.len() as i64 {
                    format!(", the first {} shown", k.hot.queue.len())
                } else {
                    String::new()
                }
            )
        }
    }
}

fn queue_rows(queue: &[Waiter]) -> Vec<Vec<String>> {
    waiters::rows(queue, OWNER_WIDTH)
}

/// Two readings `--interval` apart, printed once.
pub async fn once(relock: &Relock, view: &View, json: bool) -> ExitCode {
    let first = sample(relock, view.ask()).await;
    let next = first
        .iter()
        .map(|r| r.at)
        .max()
        .unwrap_or_else(Instant::now)
        + view.interval;
    tokio::time::sleep_until(next).await;
    let second = sample(relock, view.ask()).await;
    let s = screen(Some(&first), &second, view.keys);
    let failed = s.masters.iter().any(|m| m.error.is_some());
    if json {
        ops::print_json(&snapshot_json(&s));
        return ops::status(failed);
    }
    out!("relock top, {}", utc(now_ms()));
    let masters: Vec<Vec<String>> = s.masters.iter().map(master_cells).collect();
    out!("{}", table(&MASTER_HEADER, &masters));
    out!("");
    if s.keys.is_empty() {
        if second.iter().any(|r| r.hot.is_ok()) {
            out!("no contended key (LOCK.STATS is empty)");
        }
    } else {
        out!("hottest keys, by total wait:");
        let keys: Vec<Vec<String>> = s.keys.iter().map(key_cells).collect();
        out!("{}", table(&KEY_HEADER, &keys));
        out!("");
        out!("{}:", queue_title(s.keys.first()));
        if let Some(k) = s.keys.first() {
            out!("{}", table(&waiters::HEADER, &queue_rows(&k.hot.queue)));
        }
    }
    for r in &second {
        if let Err(e) = &r.hot {
            out!(
                "{}: hottest keys unknown: {}",
                r.master,
                ops::shown_error(e)
            );
        }
    }
    ops::status(failed)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn snapshot_json(s: &Screen<'_>) -> serde_json::Value {
    let masters: Vec<serde_json::Value> = s
        .masters
        .iter()
        .map(|m| {
            let dist = |points: &[(f64, f64)]| {
                points
                    .iter()
                    .map(|(q, v)| (format!("p{}", q * 100.0), json!(v)))
                    .collect::<serde_json::Map<_, _>>()
            };
            json!({
                "master": m.master,
                "up": m.error.is_none(),
                "error": m.error,
                "info": m.info.fields,
                "wait_percentiles_ms": dist(&m.info.wait),
                "hold_percentiles_ms": dist(&m.info.hold),
                "per_second": m.rates.map(|r| json!({
                    "acquired": r[0], "granted": r[1], "wait_timeouts": r[2],
                })),
            })
        })
        .collect();
    let keys: Vec<serde_json::Value> = s
        .keys
        .iter()
        .map(|k| {
            let lock = match &k.hot.lock {
                Ok(Some(l)) => json!({
                    "owner": l.owner.as_deref().map(json_text),
                    "mode": l.mode,
                    "holders": l.holders,
                    "waiters": l.waiters,
                    "limit": l.limit,
                    "ttl_ms": l.ttl_ms,
                }),
                Ok(None) => serde_json::Value::Null,
                Err(e) => json!({ "error": e }),
            };
            json!({
                "master": k.master,
                "stats": k.hot.stats.json(),
                "lock": lock,
                "queue": k.hot.queue.iter().map(Waiter::json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "time": now_ms(), "masters": masters, "keys": keys })
}

/// The live view, until q, Esc, Ctrl-C, SIGTERM or SIGHUP. Not at a terminal, one plain
/// snapshot.
pub async fn live(relock: Relock, view: View) -> ExitCode {
    if !std::io::stdout().is_terminal() {
        return once(&relock, &view, false).await;
    }
    let colour = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let (readings_tx, mut readings) = tokio::sync::mpsc::channel::<Vec<MasterSample>>(1);
    let ask = view.ask();
    let interval = view.interval;
    let sampler = tokio::spawn(async move {
        loop {
            let next = Instant::now() + interval;
            let reading = sample(&relock, ask).await;
            if readings_tx.send(reading).await.is_err() {
                return;
            }
            tokio::time::sleep_until(next).await;
        }
    });
    let (keys_tx, mut keys) = tokio::sync::mpsc::unbounded_channel::<Event>();
    // crossterm's read blocks: a thread of its own, which ends with the process.
    std::thread::spawn(move || {
        while let Ok(event) = crossterm::event::read() {
            if keys_tx.send(event).is_err() {
                return;
            }
        }
    });
    let (mut term, mut hup) = match (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()),
    ) {
        (Ok(t), Ok(h)) => (t, h),
        (Err(e), _) | (_, Err(e)) => return ops::fail(format!("cannot handle signals: {e}")),
    };
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => return ops::fail(format!("cannot use the terminal: {e}")),
    };
    let mut app = App {
        prev: None,
        cur: Vec::new(),
        selected: 0,
        view,
        colour,
        started: Instant::now(),
    };
    let status = loop {
        if let Err(e) = terminal.draw(|frame| app.draw(frame)) {
            break Err(format!("cannot draw: {e}"));
        }
        tokio::select! {
            Some(reading) = readings.recv() => {
                app.prev = Some(std::mem::replace(&mut app.cur, reading));
            }
            Some(event) = keys.recv() => match event {
                Event::Key(k) if k.kind != KeyEventKind::Release => match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => break Ok(()),
                    KeyCode::Up | KeyCode::Char('k') => app.selected = app.selected.saturating_sub(1),
                    KeyCode::Down | KeyCode::Char('j') => app.selected += 1,
                    _ => {}
                },
                _ => {}
            },
            _ = term.recv() => break Ok(()),
            _ = hup.recv() => break Ok(()),
        }
    };
    sampler.abort();
    ratatui::restore();
    match status {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => ops::fail(why),
    }
}

struct App {
    prev: Option<Vec<MasterSample>>,
    cur: Vec<MasterSample>,
    selected: usize,
    view: View,
    colour: bool,
    started: Instant,
}

impl App {
    fn style(&self, colour: Color) -> Style {
        if self.colour {
            Style::default().fg(colour)
        } else {
            Style::default()
        }
    }

    /// The first line: what this is, how often it reads the masters, and when it last did.
    fn title(&self) -> Paragraph<'static> {
        let status = if self.cur.is_empty() {
            format!(
                "reading the masters… ({:.0}s)",
                self.started.elapsed().as_secs_f64()
            )
        } else {
            utc(now_ms())
        };
        Paragraph::new(Line::from(format!(
            "relock top{}  every {}  {}  q quits, ↑↓ select a key",
            if self.view.cluster { " (cluster)" } else { "" },
            ms(Some(self.view.interval.as_millis() as i64)),
            status
        )))
    }

    /// One line per master, in red when it did not answer.
    fn masters_table(&self, masters: &[MasterRow], header_style: Style) -> Table<'static> {
        let rows: Vec<Row> = masters
            .iter()
            .map(|m| {
                let row = Row::new(master_cells(m));
                if m.error.is_some() {
                    row.style(self.style(Color::Red))
                } else {
                    row
                }
            })
            .collect();
        Table::new(
            rows,
            widths(&MASTER_HEADER, &[21, 7, 7, 8, 10, 11, 10, 9, 9, 9]),
        )
        .header(Row::new(MASTER_HEADER).style(header_style))
        .block(Block::default().borders(Borders::TOP).title("masters"))
    }

    fn draw(&mut self, frame: &mut Frame<'_>) {
        let s = screen(self.prev.as_deref(), &self.cur, self.view.keys);
        self.selected = self.selected.min(s.keys.len().saturating_sub(1));
        let header_style = self.style(Color::Cyan).add_modifier(Modifier::BOLD);
        let [title, masters_area, keys_area, queue_area] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(s.masters.len().max(1) as u16 + 3),
            // The keys as many lines as they need (the queue below gets the rest).
            Constraint::Length(s.keys.len().max(3) as u16 + 3),
            Constraint::Min(5),
        ])
        .areas(frame.area());
        frame.render_widget(self.title(), title);
        frame.render_widget(self.masters_table(&s.masters, header_style), masters_area);
        let keys: Vec<Row> = s
            .keys
            .iter()
            .map(|k| Row::new(key_cells(k).into_iter().map(Cell::from)))
            .collect();
        let mut state =
            TableState::default().with_selected((!s.keys.is_empty()).then_some(self.selected));
        frame.render_stateful_widget(
            Table::new(
                keys,
                widths(
                    &KEY_HEADER,
                    &[KEY_WIDTH as u16, 21, OWNER_WIDTH as u16, 6, 7, 8, 9, 14, 8],
                ),
            )
            .header(Row::new(KEY_HEADER).style(header_style))
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(keys_title(&self.cur)),
            ),
            keys_area,
            &mut state,
        );
        let selected = s.keys.get(self.selected);
        let queue: Vec<Row> = selected
            .map(|k| queue_rows(&k.hot.queue))
            .unwrap_or_default()
            .into_iter()
            .map(Row::new)
            .collect();
        frame.render_widget(
            Table::new(
                queue,
                widths(&waiters::HEADER, &[4, OWNER_WIDTH as u16, 24, 8, 9, 13, 9]),
            )
            .header(Row::new(waiters::HEADER).style(header_style))
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(queue_title(selected)),
            ),
            queue_area,
        );
    }
}

/// The hot keys' title, with why some masters' are unknown (LOCK.STATS needs the admin ACL
/// category).
fn keys_title(readings: &[MasterSample]) -> String {
    let unknown: Vec<&String> = readings
        .iter()
        .filter_map(|r| r.hot.as_ref().err())
        .collect();
    match unknown.first() {
        None => "hottest keys, by total wait".to_string(),
        Some(why) => format!(
            "hottest keys, by total wait (unknown on {} master{}: {})",
            unknown.len(),
            if unknown.len() == 1 { "" } else { "s" },
            printable(why.as_bytes(), 80)
        ),
    }
}

/// Column widths: at least the header's.
fn widths(header: &[&str], want: &[u16]) -> Vec<Constraint> {
    header
        .iter()
        .zip(want)
        .map(|(h, w)| Constraint::Length((*w).max(h.chars().count() as u16)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{HotKey, KeyStats};

    fn reading(master: &str, at: Instant, acquired: f64, hot: &[(&str, i64)]) -> MasterSample {
        let mut info = RelockInfo::default();
        info.fields.insert("acquired_total".into(), acquired);
        info.fields.insert("granted_total".into(), 0.0);
        MasterSample {
            master: master.into(),
            at,
            took: Duration::ZERO,
            info: Ok(info),
            hot: Ok(hot
                .iter()
                .map(|(key, wait)| HotKey {
                    stats: KeyStats {
                        key: key.as_bytes().to_vec(),
                        db: 0,
                        waits: 1,
                        granted: 1,
                        timeouts: 0,
                        contended: 0,
                        wait_ms_total: *wait,
                        error: 0,
                        wait_ms_max: *wait,
                    },
                    lock: Ok(None),
                    queue: Vec::new(),
                })
                .collect()),
        }
    }

    #[test]
    fn rates_and_the_hottest_keys_over_masters() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let before = [reading("a", t0, 100.0, &[]), reading("b", t0, 50.0, &[])];
        let now = [
            reading("a", t1, 300.0, &[("k1", 10), ("k2", 500)]),
            // A restarted master: its counters went back, no negative rate.
            reading("b", t1, 10.0, &[("k3", 200)]),
        ];
        let s = screen(Some(&before), &now, 10);
        assert_eq!(s.masters[0].rates.map(|r| r[0]), Some(100.0));
        assert_eq!(s.masters[1].rates.map(|r| r[0]), Some(0.0));
        let keys: Vec<&[u8]> = s.keys.iter().map(|k| k.hot.stats.key.as_slice()).collect();
        assert_eq!(keys, [b"k2".as_slice(), b"k3", b"k1"]);
        assert_eq!(screen(None, &now, 10).masters[0].rates, None);
        let cells = master_cells(&s.masters[0]);
        assert_eq!(cells[4], "100.0");
    }
}
