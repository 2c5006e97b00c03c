//! Small statistics helpers and server-side counters.

use std::collections::BTreeMap;
use std::io;

use crate::resp::Conn;

/// The median of `xs` (NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A latency histogram in nanoseconds.
pub fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("histogram bounds")
}

/// Quantile `q` of `h` in milliseconds (NaN when empty).
pub fn quantile_ms(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1e6
}

/// `INFO commandstats` as command name -> calls.
pub async fn command_calls(conn: &mut Conn) -> io::Result<BTreeMap<String, u64>> {
    let info = conn.ok(&["INFO", "commandstats"]).await?.text();
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(name) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        let n = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        calls.insert(name.to_string(), n);
    }
    Ok(calls)
}

/// Commands the server ran between two [`command_calls`] snapshots, leaving out the
/// benchmark's own bookkeeping (`INFO`, `CLIENT`, ...). Commands run inside Lua scripts count.
pub fn calls_between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    const BOOKKEEPING: &[&str] = &["info", "client|list", "client", "flushall", "ping"];
    after
        .iter()
        .filter(|(name, _)| !BOOKKEEPING.contains(&name.as_str()))
        .map(|(name, n)| n.saturating_sub(before.get(name).copied().unwrap_or(0)))
        .sum()
}

/// The server's CPU time so far (`used_cpu_sys` + `used_cpu_user`), in seconds.
pub async fn server_cpu_seconds(conn: &mut Conn) -> io::Result<f64> {
    let info = conn.ok(&["INFO", "cpu"]).await?.text();
    let field = |name: &str| {
        info.lines().find_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            (k == name).then(|| v.parse::<f64>().ok()).flatten()
        })
    };
    match (field("used_cpu_sys"), field("used_cpu_user")) {
        (Some(sys), Some(user)) => Ok(sys + user),
        _ => Err(io::Error::other(
            "INFO cpu lacks used_cpu_sys/used_cpu_user",
        )),
    }
}

/// One field of an `INFO` section as text.
pub async fn info_field(conn: &mut Conn, section: &str, field: &str) -> io::Result<String> {
    let info = conn.ok(&["INFO", section]).await?.text();
    Ok(info
        .lines()
        .find_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            (k == field).then(|| v.to_string())
        })
        .unwrap_or_default())
}

/// Waits until the only client left is the control connection and nothing is blocked, so the
/// next measurement starts on a quiet server.
pub async fn settle(conn: &mut Conn) -> io::Result<()> {
    for _ in 0..500 {
        let connected = info_field(conn, "clients", "connected_clients").await?;
        let blocked = info_field(conn, "clients", "blocked_clients").await?;
        if connected == "1" && blocked == "0" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    conn.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(())
}
