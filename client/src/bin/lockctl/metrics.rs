//! `lockctl metrics --listen ADDR`: `/metrics` for Prometheus. Each scrape reads every master
//! once ([`sample`]: `INFO relock`, `LOCK.STATS` and `LOCK.INFO` of the hottest keys), bounded
//! by `--scrape-timeout`, and encodes the answers with prometheus-client (OpenMetrics text).
//! Nothing is kept between scrapes: a master or key that is gone leaves the output, and
//! Prometheus marks its series stale.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{CounterVec, Encoder, GaugeVec, Opts, Registry, TextEncoder};
use relock_client::Relock;
use tokio::sync::Semaphore;

use crate::output::say;
use crate::sample::{sample, Ask, HotKey, MasterSample, RelockInfo};

/// What a scrape answers with.
/// Scrapes read the masters at most this many at once; more wait their turn.
const CONCURRENT_SCRAPES: usize = 4;
/// The longest key label, in bytes; a longer key is cut and given a hash of the whole, so
/// that two keys never share a series.
const KEY_LABEL_BYTES: usize = 200;

/// How an `INFO relock` field becomes a metric.
struct Field {
    /// In `INFO relock`, without the `relock_` prefix.
    info: &'static str,
    /// The metric's name, without the prefix and without `_total` or the unit.
    name: &'static str,
    help: &'static str,
    counter: bool,
    /// What one unit of the field is in seconds (1 for a count).
    scale: f64,
}

const fn gauge(info: &'static str, name: &'static str, help: &'static str) -> Field {
    Field {
        info,
        name,
        help,
        counter: false,
        scale: 1.0,
    }
}

const fn counter(info: &'static str, name: &'static str, help: &'static str) -> Field {
    Field {
        info,
        name,
        help,
        counter: true,
        scale: 1.0,
    }
}

const fn seconds(info: &'static str, name: &'static str, help: &'static str, scale: f64) -> Field {
    Field {
        info,
        name,
        help,
        counter: false,
        scale,
    }
}

/// Every field of `INFO relock` (docs/operating.md lists the same names).
const FIELDS: &[Field] = &[
    gauge("locks", "locks", "Lock values (keys of the relock type)."),
    gauge("holds", "holds", "Live holds, exclusive and shared."),
    gauge("waiters", "waiters", "Clients queued in LOCK.WAIT."),
    gauge("timers", "timers", "Armed lease and wait timers."),
    gauge("last_token", "last_token", "The last fencing token issued."),
    gauge(
        "log_len",
        "log_entries",
        "Entries in the journal (LOCK.LOG).",
    ),
    counter(
        "acquired_total",
        "acquired",
        "Holds granted by LOCK.ACQUIRE and LOCK.REENTER.",
    ),
    counter("released_total", "released", "Holds ended by their owner."),
    counter("renewed_total", "renewed", "Renewals."),
    counter(
        "contended_total",
        "contended",
        "Acquisitions answered nil (held by another).",
    ),
    counter("granted_total", "granted", "Grants to waiters (hand-offs)."),
    counter(
        "expired_total",
        "expired",
        "Holds whose ttl or lease ran out.",
    ),
    counter(
        "wait_timeouts_total",
        "wait_timeouts",
        "Waits that timed out.",
    ),
    counter(
        "forcereleased_total",
        "forcereleased",
        "Holds ended by LOCK.FORCERELEASE.",
    ),
    counter(
        "downgraded_total",
        "downgraded",
        "Exclusive holds downgraded to shared.",
    ),
    seconds(
        "longest_turn_us",
        "longest_turn",
        "The longest the module's own work took in one event-loop turn.",
        1e-6,
    ),
    seconds(
        "longest_apply_us",
        "longest_apply",
        "The longest one replicated change took to apply (LOCK.APPLY, LOCK.DROP).",
        1e-6,
    ),
    seconds(
        "restart_grace_ms",
        "restart_grace",
        "relock.restart-grace-ms, the configured restart grace.",
        1e-3,
    ),
    seconds(
        "grace_left_ms",
        "grace_left",
        "What is left of the restart grace (0: over).",
        1e-3,
    ),
];

/// Serves `/metrics` on `listen` until killed.
pub async fn serve(relock: Relock, listen: SocketAddr, keys: usize, timeout: Duration) -> ExitCode {
    let server = match tiny_http::Server::http(listen) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            say!("cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = server
        .server_addr()
        .to_ip()
        .map_or_else(|| listen.to_string(), |a| a.to_string());
    say!("serving metrics on http://{bound}/metrics");
    let scrapes = Arc::new(Semaphore::new(CONCURRENT_SCRAPES));
    loop {
        let waiting = Arc::clone(&server);
        let request = match tokio::task::spawn_blocking(move || waiting.recv()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                say!("cannot accept a request: {e}");
                continue;
            }
            Err(e) => {
                say!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let relock = relock.clone();
        let scrapes = Arc::clone(&scrapes);
        tokio::spawn(async move {
            let is_get = matches!(
                request.method(),
                tiny_http::Method::Get | tiny_http::Method::Head
            );
            let path = request.url().split('?').next().unwrap_or("").to_string();
            let response = answer(&relock, is_get, &path, keys, timeout, &scrapes).await;
            // Writing may block on a slow reader: not on the runtime's threads.
            let _ = tokio::task::spawn_blocking(move || request.respond(response)).await;
        });
    }
}

async fn answer(
    relock: &Relock,
    is_get: bool,
    path: &str,
    keys: usize,
    timeout: Duration,
    scrapes: &Semaphore,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let text =
        |status: u16, body: &str| tiny_http::Response::from_string(body).with_status_code(status);
    if !is_get {
        return text(405, "only GET\n");
    }
    match path {
        "/metrics" => {}
        "/" => return text(200, "relock metrics: /metrics\n"),
        _ => return text(404, "not found: relock metrics are at /metrics\n"),
    }
    let Ok(_turn) = scrapes.acquire().await else {
        return text(503, "shutting down\n");
    };
    let ask = Ask {
        keys,
        queue: 0,
        db: 0,
    };
    let readings = match tokio::time::timeout(timeout, sample(relock, ask)).await {
        Ok(r) => r,
        // Every master took too long (each command is bounded by --node-timeout, so only a
        // timeout shorter than a few of those gets here): every master is down this time.
        Err(_) => relock
            .nodes()
            .iter()
            .map(|n| MasterSample {
                master: n.to_string(),
                at: tokio::time::Instant::now(),
                took: timeout,
                info: Err("scrape timeout".into()),
                hot: Err("scrape timeout".into()),
            })
            .collect(),
    };
    match exposition(&readings) {
        Ok(body) => {
            let header =
                tiny_http::Header::from_bytes("Content-Type", TextEncoder::new().format_type())
                    .expect("a valid header");
            tiny_http::Response::from_string(body).with_header(header)
        }
        Err(e) => text(500, &format!("cannot encode: {e}\n")),
    }
}

/// A key as a label: as it is when it is UTF-8 of at most [`KEY_LABEL_BYTES`]; otherwise
/// its start (lossy) and `…#` and a hash of every byte, so two keys never share a series.
pub fn key_label(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if key.len() <= KEY_LABEL_BYTES => text.to_string(),
        _ => {
            let end = key.len().min(KEY_LABEL_BYTES);
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut hasher);
            let start = String::from_utf8_lossy(&key[..end]);
            format!("{start}…#{:016x}", hasher.finish())
        }
    }
}

/// One scrape's text.
pub fn exposition(readings: &[MasterSample]) -> prometheus::Result<String> {
    let families = Families(Registry::new_custom(Some("relock".into()), None)?);
    let masters = MasterFamilies::new(&families)?;
    let keys = KeyFamilies::new(&families)?;
    record_other_fields(&families, readings)?;
    for reading in readings {
        if !masters.record(reading) {
            continue;
        }
        if let Ok(hot) = &reading.hot {
            keys.record(&reading.master, hot);
        }
    }
    TextEncoder::new().encode_to_string(&families.0.gather())
}

/// Makes the families of one scrape, registered in its registry.
struct Families(Registry);

impl Families {
    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<GaugeVec> {
        let g = GaugeVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(g.clone()))?;
        Ok(g)
    }

    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<CounterVec> {
        let c = CounterVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }
}

/// The percentiles of the wait and hold times, with their labels.
const PERCENTILES: [(f64, &str); 4] = [(0.5, "50"), (0.9, "90"), (0.99, "99"), (0.999, "99.9")];

/// The families of each master: whether it answered, how long it took, the `INFO relock`
/// fields lockctl knows ([`FIELDS`]) and the percentiles of waits and holds.
struct MasterFamilies {
    up: GaugeVec,
    took: GaugeVec,
    gauges: Vec<(&'static Field, GaugeVec)>,
    counters: Vec<(&'static Field, CounterVec)>,
    wait: GaugeVec,
    hold: GaugeVec,
}

impl MasterFamilies {
    fn new(families: &Families) -> prometheus::Result<MasterFamilies> {
        let master = ["master"];
        let up = families.gauge("up", "1 if the master answered this scrape", &master)?;
        let took = families.gauge(
            "scrape_duration_seconds",
            "How long reading the master took in this scrape",
            &master,
        )?;
        let mut gauges = Vec::new();
        let mut counters = Vec::new();
        for field in FIELDS {
            let unit = if field.scale != 1.0 { "_seconds" } else { "" };
            if field.counter {
                let name = format!("{}{unit}_total", field.name);
                counters.push((field, families.counter(&name, field.help, &master)?));
            } else {
                let name = format!("{}{unit}", field.name);
                gauges.push((field, families.gauge(&name, field.help, &master)?));
            }
        }
        let wait = families.gauge(
            "wait_percentile_seconds",
            "Server-wide time from queueing to grant (timed-out waits with their wait), by percentile",
            &["master", "percentile"],
        )?;
        let hold = families.gauge(
            "hold_percentile_seconds",
            "Server-wide time from grant to the end of a hold, by percentile",
            &["master", "percentile"],
        )?;
        Ok(MasterFamilies {
            up,
            took,
            gauges,
            counters,
            wait,
            hold,
        })
    }

    /// Records what `reading` says of its master; whether the master answered.
    fn record(&self, reading: &MasterSample) -> bool {
        let m = [reading.master.as_str()];
        self.took
            .with_label_values(&m)
            .set(reading.took.as_secs_f64());
        let Ok(info) = &reading.info else {
            self.up.with_label_values(&m).set(0.0);
            return false;
        };
        self.up.with_label_values(&m).set(1.0);
        for (field, family) in &self.gauges {
            if let Some(v) = info.get(field.info) {
                family.with_label_values(&m).set(v * field.scale);
            }
        }
        for (field, family) in &self.counters {
            if let Some(v) = info.get(field.info) {
                family
                    .with_label_values(&m)
                    .inc_by((v * field.scale).max(0.0));
            }
        }
        for (points, family) in [(&info.wait, &self.wait), (&info.hold, &self.hold)] {
            for (q, name) in PERCENTILES {
                if let Some(ms) = RelockInfo::quantile(points, q) {
                    family
                        .with_label_values(&[reading.master.as_str(), name])
                        .set(ms / 1000.0);
                }
            }
        }
        true
    }
}

/// The families of the hottest keys (`LOCK.STATS`, `LOCK.INFO`), by master, db and key.
struct KeyFamilies {
    wait: CounterVec,
    wait_max: GaugeVec,
    /// Waits, grants, timeouts and contended acquisitions.
    counts: [CounterVec; 4],
    waiters: GaugeVec,
    holders: GaugeVec,
}

impl KeyFamilies {
    fn new(families: &Families) -> prometheus::Result<KeyFamilies> {
        let key = ["master", "db", "key"];
        Ok(KeyFamilies {
            wait: families.counter(
                "key_wait_seconds_total",
                "Time waited for the key (LOCK.STATS wait_ms_total; may overstate by its error)",
                &key,
            )?,
            wait_max: families.gauge(
                "key_wait_max_seconds",
                "The longest wait for the key",
                &key,
            )?,
            counts: [
                families.counter("key_waits_total", "Waits queued for the key", &key)?,
                families.counter(
                    "key_granted_total",
                    "Waits for the key that were granted",
                    &key,
                )?,
                families.counter(
                    "key_timeouts_total",
                    "Waits for the key that timed out",
                    &key,
                )?,
                families.counter(
                    "key_contended_total",
                    "Acquisitions of the key answered nil",
                    &key,
                )?,
            ],
            waiters: families.gauge("key_waiters", "Clients queued for the key now", &key)?,
            holders: families.gauge("key_holders", "Holders of the key now", &key)?,
        })
    }

    /// Records the hot keys of `master`.
    fn record(&self, master: &str, hot: &[HotKey]) {
        for k in hot {
            let s = &k.stats;
            let db = s.db.to_string();
            let name = key_label(&s.key);
            let labels = [master, db.as_str(), name.as_str()];
            self.wait
                .with_label_values(&labels)
                .inc_by(s.wait_ms_total.max(0) as f64 / 1000.0);
            self.wait_max
                .with_label_values(&labels)
                .set(s.wait_ms_max.max(0) as f64 / 1000.0);
            for (family, v) in self
                .counts
                .iter()
                .zip([s.waits, s.granted, s.timeouts, s.contended])
            {
                family.with_label_values(&labels).inc_by(v.max(0) as f64);
            }
            if let Ok(lock) = &k.lock {
                let (holders, waiters) = lock.as_ref().map_or((0, 0), |l| (l.holders, l.waiters));
                self.holders.with_label_values(&labels).set(holders as f64);
                self.waiters.with_label_values(&labels).set(waiters as f64);
            }
        }
    }
}

/// Fields of a newer module that lockctl does not know yet, by the names they get
/// ([`other_metric`]): a family for each, made as they come.
fn record_other_fields(families: &Families, readings: &[MasterSample]) -> prometheus::Result<()> {
    let mut others: BTreeMap<String, Other> = BTreeMap::new();
    for reading in readings {
        let Ok(info) = &reading.info else { continue };
        for (field, value) in &info.fields {
            if FIELDS.iter().any(|f| f.info == field) {
                continue;
            }
            let Some((name, scale, counter)) = other_metric(field) else {
                continue;
            };
            if !others.contains_key(&name) {
                let help = format!("INFO relock_{field}");
                let family = if counter {
                    Other::Counter(families.counter(&name, &help, &["master"])?)
                } else {
                    Other::Gauge(families.gauge(&name, &help, &["master"])?)
                };
                others.insert(name.clone(), family);
            }
            match others.get(&name) {
                Some(Other::Counter(c)) => c
                    .with_label_values(&[reading.master.as_str()])
                    .inc_by((value * scale).max(0.0)),
                Some(Other::Gauge(g)) => g
                    .with_label_values(&[reading.master.as_str()])
                    .set(value * scale),
                None => {}
            }
        }
    }
    Ok(())
}

/// A family made for a field lockctl does not know.
enum Other {
    Gauge(GaugeVec),
    Counter(CounterVec),
}

/// The metric an unknown `INFO relock` field becomes: its name without the prefix, the scale
/// to seconds, whether a counter; `None` for a name Prometheus would refuse.
fn other_metric(field: &str) -> Option<(String, f64, bool)> {
    if field.is_empty()
        || !field
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    if let Some(base) = field.strip_suffix("_total") {
        return Some((format!("{base}_total"), 1.0, true));
    }
    if let Some(base) = field.strip_suffix("_ms") {
        return Some((format!("{base}_seconds"), 1e-3, false));
    }
    if let Some(base) = field.strip_suffix("_us") {
        return Some((format!("{base}_seconds"), 1e-6, false));
    }
    Some((field.to_string(), 1.0, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_cannot_break_out() {
        let long = vec![b'k'; 1 << 20];
        let label = key_label(&long);
        assert!(label.len() < KEY_LABEL_BYTES + 40, "{}", label.len());
        let mut other = long.clone();
        *other.last_mut().expect("bytes") = b'j';
        assert_ne!(label, key_label(&other));
        assert_ne!(key_label(b"\xff"), key_label(b"\xfe"));
        assert_eq!(key_label(b"orders:7"), "orders:7");
    }

    #[test]
    fn fields_of_a_newer_module_are_exported() {
        assert_eq!(
            other_metric("queued_total"),
            Some(("queued_total".into(), 1.0, true))
        );
        assert_eq!(
            other_metric("longest_sweep_us"),
            Some(("longest_sweep_seconds".into(), 1e-6, false))
        );
        assert_eq!(
            other_metric("lag_ms"),
            Some(("lag_seconds".into(), 1e-3, false))
        );
        assert_eq!(other_metric("shards"), Some(("shards".into(), 1.0, false)));
        assert_eq!(other_metric("Bad-Name"), None);
    }
}
