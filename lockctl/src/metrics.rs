//! `lockctl metrics --listen ADDR`: `/metrics` for Prometheus. Each scrape reads every master
//! once ([`sample`]: `INFO relock`, `LOCK.STATS` and `LOCK.INFO` of the hottest keys), bounded
//! by `--scrape-timeout`, and encodes the answers with the `prometheus` crate's text encoder.
//! Nothing is kept between scrapes: a master or key that is gone leaves the output, and
//! Prometheus marks its series stale. Scrapes that arrive while a reading is under way share
//! it (one reading of the masters at a time, however many clients ask).
//!
//! The HTTP server is hyper's HTTP/1 server (on the tokio runtime lockctl already runs) with
//! its limits set, and the few hyper leaves to its user: a cap on connections (a new one
//! evicts the oldest), requests per connection, a write timeout, a lifetime per connection.
//! tiny_http, which lockctl had, has no limit on a request head and answers from a blocking
//! pool that 1,500 pipelined requests never read filled: the endpoint stopped. hyper is
//! maintained, already serves heads of bounded size with 431, times out a head that does not
//! arrive, and serves a connection's pipelined requests one at a time in a task of its own.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{FutureExt, Shared};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{CounterVec, GaugeVec, Opts, Registry, TextEncoder};
use relock_client::Relock;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio_io_timeout::TimeoutStream;
use tokio_util::sync::CancellationToken;

use crate::output::say;
use crate::sample::{sample, Ask, HotKey, MasterSample, RelockInfo};

/// The longest key label before the cut, in bytes ([`key_label`]).
const KEY_LABEL_BYTES: usize = 200;

/// The HTTP server's limits (docs/operating.md lists them). A scrape is one small request
/// (Prometheus sends about 300 bytes of head) and one answer; everything here is far above
/// what a scraper needs and far below what would let one client hold the endpoint.
pub mod limits {
    use std::time::Duration;

    /// The largest request head (request line and headers), in bytes: past it, 431 and the
    /// connection is closed.
    pub const HEAD_BYTES: usize = 8 << 10;
    /// What hyper reads ahead of the request it serves (pipelined requests included), in
    /// bytes (hyper's least).
    pub const READ_BUFFER_BYTES: usize = 8 << 10;
    /// The most headers in one request (431 past it).
    pub const HEADERS: usize = 64;
    /// A request head must have arrived whole this long after the connection was opened or
    /// its previous answer written (idle keep-alive included); else the connection is closed.
    pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
    /// An answer whose writing makes no progress this long (a client that does not read)
    /// closes the connection.
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Requests served on one connection; the last is answered with `Connection: close`.
    pub const REQUESTS_PER_CONNECTION: usize = 100;
    /// How long one connection may stay open; then it is closed once its request in
    /// progress is answered (or after [`WRITE_TIMEOUT`] more).
    pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
    /// Connections open at once; one more closes the oldest (a scraper's connection is
    /// seconds old at most when it asks; a hostile client's are the old ones).
    pub const CONNECTIONS: usize = 128;
}

/// Serves `/metrics` on `listen` until killed.
pub async fn serve(relock: Relock, listen: SocketAddr, keys: usize, timeout: Duration) -> ExitCode {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            say!("cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = listener
        .local_addr()
        .map_or_else(|_| listen.to_string(), |a| a.to_string());
    say!("serving metrics on http://{bound}/metrics");
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits::HEAD_TIMEOUT)
        .max_header_size(limits::HEAD_BYTES)
        .max_buf_size(limits::READ_BUFFER_BYTES)
        .max_headers(limits::HEADERS)
        .keep_alive(true);
    let readings = Arc::new(Readings {
        relock,
        keys,
        timeout,
        current: Mutex::new(None),
    });
    let open = Arc::new(Open::default());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, mostly: they come back as connections end.
                say!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, evicted) = open.admit();
        let open = Arc::clone(&open);
        let readings = Arc::clone(&readings);
        let http = http.clone();
        tokio::spawn(async move {
            connection(&http, stream, readings, evicted).await;
            open.leave(id);
        });
    }
}

/// The connections open, oldest first, each with what closes it.
#[derive(Default)]
struct Open {
    next: AtomicU64,
    tokens: Mutex<BTreeMap<u64, CancellationToken>>,
}

impl Open {
    /// Counts a new connection in, closing the oldest beyond [`limits::CONNECTIONS`].
    fn admit(&self) -> (u64, CancellationToken) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        while tokens.len() >= limits::CONNECTIONS {
            match tokens.pop_first() {
                Some((_, oldest)) => oldest.cancel(),
                None => break,
            }
        }
        tokens.insert(id, token.clone());
        (id, token)
    }

    fn leave(&self, id: u64) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens.remove(&id);
    }
}

/// Serves one connection within its limits.
async fn connection(
    http: &http1::Builder,
    stream: TcpStream,
    readings: Arc<Readings>,
    evicted: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let mut io = TimeoutStream::new(stream);
    io.set_write_timeout(Some(limits::WRITE_TIMEOUT));
    let served = Arc::new(AtomicUsize::new(0));
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let readings = Arc::clone(&readings);
        let n = served.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let mut response = answer(&readings, request.method(), request.uri().path()).await;
            if n >= limits::REQUESTS_PER_CONNECTION {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let conn = http.serve_connection(TokioIo::new(Box::pin(io)), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = evicted.cancelled() => return,
        _ = tokio::time::sleep(limits::CONNECTION_LIFETIME) => {}
    }
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = conn => {}
        _ = evicted.cancelled() => {}
        _ = tokio::time::sleep(limits::WRITE_TIMEOUT) => {}
    }
}

async fn answer(readings: &Readings, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => {}
        "/" => return text(StatusCode::OK, "relock metrics: /metrics\n"),
        _ => {
            return text(
                StatusCode::NOT_FOUND,
                "not found: relock metrics are at /metrics\n",
            )
        }
    }
    match readings.read().await {
        Ok(body) => {
            let mut r = Response::new(Full::new(body));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(prometheus::TEXT_FORMAT),
            );
            r
        }
        Err(e) => {
            let mut r = Response::new(Full::new(Bytes::from(format!("cannot encode: {e}\n"))));
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r
        }
    }
}

/// One scrape's text, or why it could not be encoded.
type Scrape = Result<Bytes, Arc<str>>;

/// The reading under way, shared by every scrape that asks while it runs: however many
/// clients ask at once, the masters are read once at a time.
struct Readings {
    relock: Relock,
    keys: usize,
    timeout: Duration,
    current: Mutex<Option<Shared<futures_util::future::BoxFuture<'static, Scrape>>>>,
}

impl Readings {
    /// The text of the reading under way, or of a new one.
    async fn read(&self) -> Scrape {
        let reading = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            match &*current {
                Some(r) if r.peek().is_none() => r.clone(),
                _ => {
                    // A task of its own: it ends, bounded by the scrape timeout, even when
                    // every client that asked has gone.
                    let task =
                        tokio::spawn(read_masters(self.relock.clone(), self.keys, self.timeout));
                    let r = async move {
                        task.await
                            .unwrap_or_else(|e| Err(Arc::from(e.to_string().as_str())))
                    }
                    .boxed()
                    .shared();
                    *current = Some(r.clone());
                    r
                }
            }
        };
        reading.await
    }
}

/// Reads every master once, within `timeout`, and encodes what they said.
async fn read_masters(relock: Relock, keys: usize, timeout: Duration) -> Scrape {
    let ask = Ask {
        keys,
        queue: 0,
        db: 0,
    };
    let readings = match tokio::time::timeout(timeout, sample(&relock, ask)).await {
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
    exposition(&readings)
        .map(Bytes::from)
        .map_err(|e| Arc::from(e.to_string().as_str()))
}

/// A key as a label, one label per key (no two keys share a series, whatever their bytes):
/// - a key is percent-encoded where it is not printable text: `%` itself, control characters
///   and bytes that are not UTF-8 become `%XX` (`50%` is `50%25`, `x\xff` is `x%FF`), every
///   other character is itself, so distinct keys have distinct encodings;
/// - an encoding longer than [`KEY_LABEL_BYTES`] is cut there (never inside a `%XX`) and ends
///   in `…%#` and the SHA-256 of every byte of the key, in hex. No encoding has `%#` (a `%`
///   is always followed by two hex digits), so a cut label is never another key's whole one,
///   and two cut labels are equal only if two keys had the same SHA-256.
pub fn key_label(key: &[u8]) -> String {
    use std::fmt::Write;
    let mut label = String::new();
    let mut cut = false;
    'chunks: for chunk in key.utf8_chunks() {
        for c in chunk.valid().chars() {
            let escaped = c == '%' || c.is_control();
            let len = c.len_utf8() * if escaped { 3 } else { 1 };
            if label.len() + len > KEY_LABEL_BYTES {
                cut = true;
                break 'chunks;
            }
            if escaped {
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(label, "%{b:02X}");
                }
            } else {
                label.push(c);
            }
        }
        for b in chunk.invalid() {
            if label.len() + 3 > KEY_LABEL_BYTES {
                cut = true;
                break 'chunks;
            }
            let _ = write!(label, "%{b:02X}");
        }
    }
    if cut {
        label.push_str("…%#");
        for b in Sha256::digest(key) {
            let _ = write!(label, "{b:02x}");
        }
    }
    label
}

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
    // By metric name: the field that has it, and its family (`None`: the name is another
    // family's, one lockctl has or the key families', and the field is left out).
    let mut others: BTreeMap<String, (&str, Option<Other>)> = BTreeMap::new();
    for reading in readings {
        let Ok(info) = &reading.info else { continue };
        for (field, value) in &info.fields {
            if FIELDS.iter().any(|f| f.info == field) {
                continue;
            }
            let Some((name, scale, counter)) = other_metric(field) else {
                continue;
            };
            let (owner, family) = others.entry(name).or_insert_with_key(|name| {
                let help = format!("INFO relock_{field}");
                // A name already registered is refused: that field is left out, never the
                // whole scrape.
                let family = if counter {
                    families
                        .counter(name, &help, &["master"])
                        .ok()
                        .map(Other::Counter)
                } else {
                    families
                        .gauge(name, &help, &["master"])
                        .ok()
                        .map(Other::Gauge)
                };
                (field.as_str(), family)
            });
            // Two new fields with one name (`x_ms` and `x_us`): the first keeps it, so that
            // no series mixes the two.
            if *owner != field.as_str() {
                continue;
            }
            match family {
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
        assert!(
            label.len() <= KEY_LABEL_BYTES + 3 + 2 + 64,
            "{}",
            label.len()
        );
        let mut other = long.clone();
        *other.last_mut().expect("bytes") = b'j';
        assert_ne!(label, key_label(&other));
        assert_ne!(key_label(b"\xff"), key_label(b"\xfe"));
        assert_eq!(key_label(b"orders:7"), "orders:7");
        assert_eq!(key_label("wait…ü".as_bytes()), "wait…ü");
    }

    #[test]
    fn every_key_has_a_label_of_its_own() {
        assert_eq!(key_label(b"x\xff"), "x%FF");
        assert_eq!(key_label(b"50%"), "50%25");
        assert_eq!(key_label(b"a\tb\x1b"), "a%09b%1B");
        assert_eq!(key_label("\u{85}".as_bytes()), "%C2%85");
        // A key spelled as another key's label is not that key.
        let keys: Vec<Vec<u8>> = vec![
            b"x\xff".to_vec(),
            vec![b'k'; 300],
            vec![b'k'; 200],
            [vec![b'k'; 199], b"%".to_vec()].concat(),
            [vec![b'k'; 198], "é".as_bytes().to_vec()].concat(),
            [vec![b'k'; 199], "é".as_bytes().to_vec()].concat(),
            [vec![b'k'; 199], b"\xff".to_vec()].concat(),
            b"%".to_vec(),
            Vec::new(),
        ];
        let mut all = keys.clone();
        for k in &keys {
            all.push(key_label(k).into_bytes());
            all.push(key_label(key_label(k).as_bytes()).into_bytes());
        }
        all.sort();
        all.dedup();
        let mut labels: Vec<String> = all.iter().map(|k| key_label(k)).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), all.len(), "{labels:?}");
        // Cut at 200 bytes, never inside an escape.
        let cut = key_label(&[vec![b'k'; 199], b"%".to_vec()].concat());
        assert!(cut.starts_with(&"k".repeat(199)), "{cut}");
        assert!(cut[199..].starts_with("…%#"), "{cut}");
        assert_eq!(key_label(&[b'k'; 200]), "k".repeat(200));
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

    /// A field of a newer module whose metric name is taken (by a family lockctl has, by the
    /// key families, or by another new field: `x_ms` and `x_us` are both `x_seconds`) is left
    /// out: the scrape still answers, with every other series, and no series mixes two fields.
    #[test]
    fn a_new_field_with_a_taken_name_does_not_break_the_scrape() {
        let mut info = RelockInfo::default();
        for (field, value) in [
            ("acquired_total", 7.0),
            ("up", 5.0),
            ("log_entries", 9.0),
            ("key_waits_total", 3.0),
            ("scrape_duration_seconds", 4.0),
            ("lag_ms", 2000.0),
            ("lag_us", 1.0),
            ("queued_total", 11.0),
        ] {
            info.fields.insert(field.into(), value);
        }
        let reading = MasterSample {
            master: "m:1".into(),
            at: tokio::time::Instant::now(),
            took: Duration::from_millis(1),
            info: Ok(info),
            hot: Ok(Vec::new()),
        };
        let text = exposition(&[reading]).expect("the scrape answers");
        assert!(
            text.contains("relock_acquired_total{master=\"m:1\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("relock_queued_total{master=\"m:1\"} 11"),
            "{text}"
        );
        assert!(text.contains("relock_up{master=\"m:1\"} 1"), "{text}");
        assert!(
            !text.contains("relock_log_entries{master=\"m:1\"} 9"),
            "{text}"
        );
        // lag_ms (2 s) came first by name: lag_us does not overwrite it.
        assert!(
            text.contains("relock_lag_seconds{master=\"m:1\"} 2\n"),
            "{text}"
        );
    }
}
