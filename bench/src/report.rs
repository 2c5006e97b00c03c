//! The results table (markdown on stdout and in results.md, and results.json).

use std::fmt::Write as _;

/// The approaches, in table column order.
pub const APPROACHES: [&str; 5] = [
    "relock",
    "A: SET NX PX + Lua del",
    "B: hash HINCRBY Lua",
    "C: spin (A + back-off)",
    "D: pub/sub (B + channel)",
];

/// One row: a measure, its value for each approach that has one, and the goal it is held to.
pub struct Row {
    pub case: String,
    pub measure: String,
    pub values: [Option<String>; 5],
    pub goal: String,
    /// None when the row is informational (no goal).
    pub pass: Option<bool>,
    pub detail: String,
    /// The row's ratio within the run (relock against its baseline, or one size against
    /// another), which the "since" column compares with the last release's (bench/baseline.json).
    pub figure: Option<Figure>,
}

/// A ratio measured within one run, so it compares across machines, and which way is better.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    pub ratio: f64,
    pub higher_is_better: bool,
}

impl Figure {
    /// A ratio where more is better (relock's rate ÷ a recipe's).
    pub fn higher(ratio: f64) -> Option<Figure> {
        Some(Figure {
            ratio,
            higher_is_better: true,
        })
    }

    /// A ratio where less is better (5 masters' latency ÷ 1 master's, bytes ÷ a recipe's).
    pub fn lower(ratio: f64) -> Option<Figure> {
        Some(Figure {
            ratio,
            higher_is_better: false,
        })
    }
}

/// A row falling more than this far below its baseline figure is marked in the "since" column.
pub const SINCE_MARK: f64 = 0.95;

/// One row's figure in the baseline file.
pub struct Entry {
    pub case: String,
    pub measure: String,
    pub ratio: f64,
    pub higher_is_better: bool,
    /// Where the figure comes from (a run's date, a docs table).
    pub source: String,
}

/// The figures of the last release (bench/baseline.json), by case and measure label.
#[derive(Default)]
pub struct Baseline {
    pub source: String,
    pub entries: Vec<Entry>,
}

impl Baseline {
    pub fn parse(text: &str) -> Result<Baseline, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let source = v["source"].as_str().unwrap_or_default().to_string();
        let rows = v["rows"].as_array().ok_or("no \"rows\" array")?;
        let mut entries = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let text = |k: &str| {
                r[k].as_str()
                    .map(str::to_string)
                    .ok_or(format!("row {i}: no string \"{k}\""))
            };
            let better = text("better")?;
            if better != "higher" && better != "lower" {
                return Err(format!(
                    "row {i}: \"better\" is {better:?}, not higher or lower"
                ));
            }
            entries.push(Entry {
                case: text("case")?,
                measure: text("measure")?,
                ratio: r["ratio"]
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or(format!("row {i}: no positive number \"ratio\""))?,
                higher_is_better: better == "higher",
                source: r["source"].as_str().unwrap_or_default().to_string(),
            });
        }
        Ok(Baseline { source, entries })
    }

    pub fn get(&self, case: &str, measure: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.case == case && e.measure == measure)
    }

    /// This baseline with the figures of `rows` put in (a row measured again replaces its
    /// entry; the rows not run keep theirs), as the file's JSON.
    pub fn updated(mut self, rows: &[Row], source: &str) -> String {
        for r in rows {
            let Some(f) = r.figure.filter(|f| f.ratio.is_finite() && f.ratio > 0.0) else {
                continue;
            };
            let entry = Entry {
                case: r.case.clone(),
                measure: r.measure.clone(),
                ratio: f.ratio,
                higher_is_better: f.higher_is_better,
                source: source.to_string(),
            };
            match self
                .entries
                .iter_mut()
                .find(|e| e.case == r.case && e.measure == r.measure)
            {
                Some(e) => *e = entry,
                None => self.entries.push(entry),
            }
        }
        self.source = source.to_string();
        let mut j = String::from("{\n  \"source\": ");
        j.push_str(&json_str(&self.source));
        j.push_str(",\n  \"rows\": [\n");
        let rows: Vec<String> = self
            .entries
            .iter()
            .map(|e| {
                format!(
                    "    {{\"case\": {}, \"measure\": {}, \"ratio\": {}, \"better\": \"{}\", \"source\": {}}}",
                    json_str(&e.case),
                    json_str(&e.measure),
                    // Four significant digits: the runs differ far more than that.
                    format_ratio(e.ratio),
                    if e.higher_is_better { "higher" } else { "lower" },
                    json_str(&e.source)
                )
            })
            .collect();
        j.push_str(&rows.join(",\n"));
        j.push_str("\n  ]\n}\n");
        j
    }
}

fn format_ratio(x: f64) -> String {
    let digits = (3 - x.abs().log10().floor() as i32).clamp(0, 8) as usize;
    format!("{x:.digits$}")
}

/// Now against the baseline, oriented so that below 1 is worse: rate-like figures now ÷ then,
/// cost-like ones then ÷ now.
pub fn since_ratio(now: Figure, then: f64) -> f64 {
    if now.higher_is_better {
        now.ratio / then
    } else {
        then / now.ratio
    }
}

/// The "since" cell: `1.02× (0.97 → 0.99)`, `▼ 0.82× (0.97 → 0.80)` when it fell more than 5 %,
/// `new` when the baseline has no figure for the row, `—` when the row has none.
pub fn since(row: &Row, baseline: Option<&Baseline>) -> String {
    let Some(now) = row.figure else {
        return "—".into();
    };
    let Some(then) = baseline.and_then(|b| b.get(&row.case, &row.measure)) else {
        return "new".into();
    };
    let s = since_ratio(now, then.ratio);
    if s.is_nan() {
        return "n/a".into();
    }
    let mark = if s < SINCE_MARK { "▼ " } else { "" };
    format!(
        "{mark}{}× ({} → {})",
        num(s),
        num(then.ratio),
        num(now.ratio)
    )
}

impl Row {
    pub fn result(&self) -> String {
        let word = match self.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "info",
        };
        if self.detail.is_empty() {
            word.to_string()
        } else {
            format!("{word} ({})", self.detail)
        }
    }
}

/// Formats a number with a sensible precision for the table.
pub fn num(x: f64) -> String {
    if x.is_nan() {
        "n/a".into()
    } else if x.abs() >= 1000.0 {
        let n = x.round() as i64;
        // Thousands separators make ops/s readable.
        let s = n.abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

pub fn markdown(
    header: &str,
    rows: &[Row],
    notes: &[String],
    baseline: Option<&Baseline>,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{header}\n");
    let _ = writeln!(
        md,
        "| Case | Measure | {} | Goal | Result | Since |",
        APPROACHES.join(" | ")
    );
    let _ = writeln!(
        md,
        "|---|---|{}---|---|---|",
        "---:|".repeat(APPROACHES.len())
    );
    for r in rows {
        let cells: Vec<String> = r
            .values
            .iter()
            .map(|v| v.clone().unwrap_or_else(|| "—".into()))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            r.case,
            r.measure,
            cells.join(" | "),
            r.goal,
            r.result(),
            since(r, baseline)
        );
    }
    let pass = rows.iter().filter(|r| r.pass == Some(true)).count();
    let miss = rows.iter().filter(|r| r.pass == Some(false)).count();
    let fell = rows
        .iter()
        .filter(|r| since(r, baseline).starts_with('▼'))
        .count();
    let _ = writeln!(
        md,
        "\nGoals: {pass} PASS, {miss} MISS. Since the baseline: {fell} row(s) fell more than 5 % (▼).\n"
    );
    for n in notes {
        let _ = writeln!(md, "- {n}");
    }
    md
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn json(
    machine: &[(String, String)],
    rows: &[Row],
    notes: &[String],
    baseline: Option<&Baseline>,
) -> String {
    let mut j = String::from("{\n  \"machine\": {");
    let fields: Vec<String> = machine
        .iter()
        .map(|(k, v)| format!("{}: {}", json_str(k), json_str(v)))
        .collect();
    j.push_str(&fields.join(", "));
    j.push_str("},\n  \"rows\": [\n");
    let rows_json: Vec<String> = rows
        .iter()
        .map(|r| {
            let values: Vec<String> = r
                .values
                .iter()
                .zip(APPROACHES)
                .filter_map(|(v, a)| v.as_ref().map(|v| format!("{}: {}", json_str(a), json_str(v))))
                .collect();
            format!(
                "    {{\"case\": {}, \"measure\": {}, \"values\": {{{}}}, \"goal\": {}, \"pass\": {}, \"detail\": {}, \"figure\": {}, \"since\": {}}}",
                json_str(&r.case),
                json_str(&r.measure),
                values.join(", "),
                json_str(&r.goal),
                match r.pass {
                    Some(p) => p.to_string(),
                    None => "null".into(),
                },
                json_str(&r.detail),
                match r.figure {
                    Some(f) if f.ratio.is_finite() => format_ratio(f.ratio),
                    _ => "null".into(),
                },
                json_str(&since(r, baseline))
            )
        })
        .collect();
    j.push_str(&rows_json.join(",\n"));
    j.push_str("\n  ],\n  \"notes\": [");
    let notes_json: Vec<String> = notes.iter().map(|n| json_str(n)).collect();
    j.push_str(&notes_json.join(", "));
    j.push_str("]\n}\n");
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: &str, measure: &str, figure: Option<Figure>) -> Row {
        Row {
            case: case.into(),
            measure: measure.into(),
            values: Default::default(),
            goal: String::new(),
            pass: None,
            detail: String::new(),
            figure,
        }
    }

    const BASELINE: &str = r#"{"source": "test", "rows": [
        {"case": "1", "measure": "rate", "ratio": 1.0, "better": "higher"},
        {"case": "5", "measure": "cost", "ratio": 1.5, "better": "lower"}
    ]}"#;

    /// Below 1 is worse whichever way the figure goes; only a fall of more than 5 % is marked.
    #[test]
    fn since_marks_a_fall_of_more_than_five_percent() {
        let b = Baseline::parse(BASELINE).expect("parse");
        let cases = [
            (
                row("1", "rate", Figure::higher(0.96)),
                "0.960× (1.00 → 0.960)",
            ),
            (
                row("1", "rate", Figure::higher(0.94)),
                "▼ 0.940× (1.00 → 0.940)",
            ),
            (row("1", "rate", Figure::higher(1.2)), "1.20× (1.00 → 1.20)"),
            (row("5", "cost", Figure::lower(1.5)), "1.00× (1.50 → 1.50)"),
            (
                row("5", "cost", Figure::lower(2.0)),
                "▼ 0.750× (1.50 → 2.00)",
            ),
            (row("5", "cost", Figure::lower(1.0)), "1.50× (1.50 → 1.00)"),
            (row("7", "other", Figure::higher(1.0)), "new"),
            (row("1", "rate", None), "—"),
        ];
        for (r, want) in cases {
            assert_eq!(since(&r, Some(&b)), want, "{} {:?}", r.measure, r.figure);
        }
        assert_eq!(since(&row("1", "rate", Figure::higher(1.0)), None), "new");
    }

    #[test]
    fn a_baseline_without_a_direction_is_refused() {
        let bad = r#"{"rows": [{"case": "1", "measure": "m", "ratio": 1.0}]}"#;
        assert!(Baseline::parse(bad).is_err());
        let bad = r#"{"rows": [{"case": "1", "measure": "m", "ratio": 0, "better": "higher"}]}"#;
        assert!(Baseline::parse(bad).is_err());
    }

    /// Saving keeps the rows not run, replaces those run, and reads back the same figures.
    #[test]
    fn saved_baselines_read_back() {
        let b = Baseline::parse(BASELINE).expect("parse");
        let rows = [
            row("1", "rate", Figure::higher(0.9123456)),
            row("9", "new row", Figure::lower(62.3)),
            row("2", "no figure", None),
        ];
        let text = b.updated(&rows, "a run");
        let again = Baseline::parse(&text).expect("parse saved");
        assert_eq!(again.source, "a run");
        assert_eq!(again.entries.len(), 3, "{text}");
        assert_eq!(again.get("1", "rate").map(|e| e.ratio), Some(0.9123));
        assert_eq!(again.get("5", "cost").map(|e| e.ratio), Some(1.5));
        let new = again.get("9", "new row").expect("new row");
        assert!(!new.higher_is_better && new.ratio == 62.30, "{text}");
    }
}
