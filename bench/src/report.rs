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

pub fn markdown(header: &str, rows: &[Row], notes: &[String]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{header}\n");
    let _ = writeln!(
        md,
        "| Case | Measure | {} | Goal | Result |",
        APPROACHES.join(" | ")
    );
    let _ = writeln!(md, "|---|---|{}---|---|", "---:|".repeat(APPROACHES.len()));
    for r in rows {
        let cells: Vec<String> = r
            .values
            .iter()
            .map(|v| v.clone().unwrap_or_else(|| "—".into()))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.case,
            r.measure,
            cells.join(" | "),
            r.goal,
            r.result()
        );
    }
    let pass = rows.iter().filter(|r| r.pass == Some(true)).count();
    let miss = rows.iter().filter(|r| r.pass == Some(false)).count();
    let _ = writeln!(md, "\nGoals: {pass} PASS, {miss} MISS.\n");
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

pub fn json(machine: &[(String, String)], rows: &[Row], notes: &[String]) -> String {
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
                "    {{\"case\": {}, \"measure\": {}, \"values\": {{{}}}, \"goal\": {}, \"pass\": {}, \"detail\": {}}}",
                json_str(&r.case),
                json_str(&r.measure),
                values.join(", "),
                json_str(&r.goal),
                match r.pass {
                    Some(p) => p.to_string(),
                    None => "null".into(),
                },
                json_str(&r.detail)
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
