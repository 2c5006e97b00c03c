//! lockctl for operators against real servers: `waiters`, `log`, `top` (in a terminal, through
//! tmux, as a person sees it) and `metrics` (scraped by a real Prometheus, checked by
//! promtool). Every wait is bounded by an event (a queue length, a line on a screen, a
//! Prometheus answer) with a generous deadline, never a fixed sleep.
use crate::support;
use relock_testkit as common;
use relock_testkit::cluster as cluster_harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cluster_harness::Cluster;
use common::{eventually, Server};
use relock_testkit::ask::waiters;
use relock_testkit::raw::{pipeline_cmds, Raw, Reply};
use serde_json::Value as Json;
use support::{lockctl, lockctl_at, stdout, Spawned};

/// Generous: a debug build on a machine with one core kept busy.
const WITHIN: Duration = Duration::from_secs(30);

/// `LOCK.WAIT key owner ttl_ms timeout_ms [extra...]` on a connection of its own, in a thread;
/// returns once the waiter is queued (the queue of `key` is one longer), with its client id.
fn wait_in_queue(
    server: &Server,
    key: &[u8],
    owner: &[u8],
    ttl_ms: u64,
    timeout_ms: u64,
    extra: &[&str],
) -> (JoinHandle<()>, i64) {
    let before = waiters(&mut server.conn(), key);
    let mut conn = server.conn();
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut conn)
        .expect("CLIENT ID");
    let mut cmd = redis::cmd("LOCK.WAIT");
    cmd.arg(key).arg(owner).arg(ttl_ms).arg(timeout_ms);
    for a in extra {
        cmd.arg(*a);
    }
    let handle = std::thread::spawn(move || {
        // Ends with a grant, a timeout, or the server's end.
        let _: redis::RedisResult<redis::Value> = cmd.query(&mut conn);
    });
    assert!(
        eventually(WITHIN, || waiters(&mut server.conn(), key) == before + 1),
        "the waiter was not queued"
    );
    (handle, id)
}

/// One wait that ends (times out) on `key`, so that `LOCK.STATS` names the key.
fn one_timed_out_wait(server: &Server, key: &[u8]) {
    let reply: Option<i64> = redis::cmd("LOCK.WAIT")
        .arg(key)
        .arg("impatient")
        .arg(10_000)
        .arg(20)
        .query(&mut server.conn())
        .expect("LOCK.WAIT");
    assert_eq!(reply, None, "the wait timed out");
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("lockctl runs");
    assert!(
        out.status.success(),
        "{:?}: {}\n{}",
        out.status,
        stdout(&out),
        support::stderr(&out)
    );
    stdout(&out)
}

fn json_of(cmd: &mut Command) -> Json {
    let text = run_ok(cmd);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn waiters_lists_the_queue_in_order() {
    let server = Server::start();
    let key = b"orders:7";
    common::acquire(&mut server.conn(), key, b"web-1/100/holder", 60_000);
    let (_a, id_a) = wait_in_queue(&server, key, b"web-2/200/first", 15_000, 60_000, &[]);
    let (_b, id_b) = wait_in_queue(&server, key, b"web-3/300/second", 20_000, 0, &[]);
    let (_c, id_c) = wait_in_queue(
        &server,
        key,
        b"web-4/400/third",
        25_000,
        60_000,
        &["SHARED", "LIMIT", "5", "PERMITS", "2"],
    );

    let table = run_ok(lockctl(&[&server]).args(["waiters", "orders:7"]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].ends_with(": 3 waiting for orders:7"), "{table}");
    assert!(lines[1].starts_with("#  OWNER"), "{table}");
    let row = |i: usize| lines[i + 1].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        row(1)[..4],
        ["1", "web-2/200/first", "exclusive", &id_a.to_string()]
    );
    assert_eq!(
        row(2)[..4],
        ["2", "web-3/300/second", "exclusive", &id_b.to_string()]
    );
    assert_eq!(row(2)[5], "none", "no timeout: {table}");
    assert_eq!(
        row(3)[..7],
        [
            "3",
            "web-4/400/third",
            "shared",
            "limit",
            "5",
            "permits",
            "2"
        ]
    );

    let doc = json_of(lockctl(&[&server]).args(["waiters", "orders:7", "--json"]));
    let queue = &doc["masters"][0]["waiters"];
    let owners: Vec<&str> = (0..3)
        .map(|i| queue[i]["owner"].as_str().expect("owner"))
        .collect();
    assert_eq!(
        owners,
        ["web-2/200/first", "web-3/300/second", "web-4/400/third"]
    );
    let clients: Vec<i64> = (0..3)
        .map(|i| queue[i]["client"].as_i64().expect("id"))
        .collect();
    assert_eq!(clients, [id_a, id_b, id_c]);
    assert_eq!(queue[0]["ttl_ms"], 15_000);
    assert_eq!(queue[1]["timeout_ms"], -1);
    let left = queue[0]["timeout_ms"].as_i64().expect("timeout");
    assert!((1..=60_000).contains(&left), "{left}");
    assert!(queue[0]["waited_ms"].as_i64().expect("waited") >= 0);
    assert_eq!(
        (queue[2]["limit"].as_i64(), queue[2]["permits"].as_i64()),
        (Some(5), Some(2))
    );

    // --count cuts the listing and says so.
    let first = run_ok(lockctl(&[&server]).args(["waiters", "orders:7", "--count", "1"]));
    assert!(first.contains("the first of them"), "{first}");
    assert_eq!(first.lines().count(), 3, "{first}");

    let none = run_ok(lockctl(&[&server]).args(["waiters", "free"]));
    assert!(none.ends_with(": nobody waits for free\n"), "{none}");
}

#[test]
fn log_says_why_holds_ended_and_who_ended_them() {
    let server = Server::start();
    common::acquire(&mut server.conn(), b"job:expired", b"web-1/1/a", 30);
    assert!(eventually(WITHIN, || common::lock_info(
        &mut server.conn(),
        "job:expired"
    )
    .is_none()));
    common::acquire(&mut server.conn(), b"job:forced", b"web-2/2/b", 60_000);
    let mut ops = server.conn();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("ops")
        .query(&mut ops)
        .expect("name");
    let removed: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg("job:forced")
        .query(&mut ops)
        .expect("force");
    assert_eq!(removed, 1);

    let table = run_ok(lockctl(&[&server]).arg("log"));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("TIME (UTC)") && lines[0].contains("ENDED BY"),
        "{table}"
    );
    // Newest first.
    assert!(
        lines[1].contains("job:forced") && lines[1].contains("forcereleased"),
        "{table}"
    );
    assert!(lines[1].contains("name=ops user=default"), "{table}");
    assert!(
        lines[2].contains("job:expired") && lines[2].contains(" expired "),
        "{table}"
    );

    let doc = json_of(lockctl(&[&server]).args(["log", "job:forced", "--json"]));
    let entries = doc["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{doc}");
    assert_eq!(entries[0]["reason"], "forcereleased");
    assert_eq!(entries[0]["owner"], "web-2/2/b");
    assert!(entries[0]["client_info"]
        .as_str()
        .expect("who")
        .contains("name=ops"));
    assert!(entries[0]["held_ms"].as_i64().is_some());

    let quiet = run_ok(lockctl(&[&server]).args(["log", "job:never"]));
    assert!(quiet.starts_with("no hold of job:never ended"), "{quiet}");
}

/// Keys of 1 MB and owners of the most the server takes (256 bytes), with terminal escapes, and a journal of thousands: tables stay
/// narrow and free of escapes, JSON keeps every byte, and listing stays quick.
#[test]
fn log_and_waiters_survive_huge_and_hostile_names() {
    let server = Server::with_args(&["--proto-max-bulk-len", "8mb"]);
    let mut key = b"\x1b[2J\x1b[31mhuge:".to_vec();
    key.resize(1 << 20, b'k');
    let mut owner = b"owner\x1b]0;pwned\x07".to_vec();
    owner.resize(256, b'o');
    common::acquire(&mut server.conn(), &key, &owner, 60_000);
    let (_w, _) = wait_in_queue(&server, &key, &owner[..200], 10_000, 60_000, &[]);
    let removed: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg(&key)
        .arg(&owner)
        .query(&mut server.conn())
        .expect("force");
    assert_eq!(removed, 1);
    // A journal of thousands of entries.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("relock.log-max-len")
        .arg(10_000)
        .query(&mut server.conn())
        .expect("CONFIG SET");
    // Taken, then forced out (a resent acquire comes after its own force otherwise).
    let (mut taken, mut forced) = (Vec::new(), Vec::new());
    for i in 0..3000 {
        let mut acquire = redis::cmd("LOCK.ACQUIRE");
        acquire.arg(format!("many:{i}")).arg("o").arg(60_000);
        taken.push(acquire);
        let mut force = redis::cmd("LOCK.FORCERELEASE");
        force.arg(format!("many:{i}"));
        forced.push(force);
    }
    let ok = |r: &Reply| matches!(r, Reply::Int(_));
    let mut raw = Raw::connect(&server);
    pipeline_cmds(&mut raw, &taken, ok);
    pipeline_cmds(&mut raw, &forced, ok);

    let started = Instant::now();
    // The node timeout: a loaded machine may take longer than the operators' 2 s to send
    // thousands of entries from the debug build; what is checked here is what the table says.
    let table =
        run_ok(lockctl(&[&server]).args(["--node-timeout", "30s", "log", "--count", "5000"]));
    let took = started.elapsed();
    assert!(table.lines().count() > 3000, "{}", table.lines().count());
    assert!(
        !table.contains('\x1b') && !table.contains('\x07'),
        "escapes reach the terminal"
    );
    assert!(
        table.lines().all(|l| l.chars().count() < 400),
        "a table line is too wide"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");

    let doc = json_of(lockctl(&[&server]).args([
        "--node-timeout",
        "30s",
        "log",
        "--count",
        "5000",
        "--json",
    ]));
    let entries = doc["entries"].as_array().expect("entries");
    let huge = entries
        .iter()
        .find(|e| e["key"].as_str().is_some_and(|k| k.starts_with("\x1b[2J")))
        .expect("the huge key's entry");
    // The journal keeps a key's first 1024 bytes; JSON shows every one of them.
    assert_eq!(huge["key"].as_str().map(str::len), Some(1024));
    assert_eq!(huge["owner"].as_str().map(str::len), Some(256));

    // A hostile owner in a queue.
    common::acquire(&mut server.conn(), b"plain", b"someone", 60_000);
    let (_v, _) = wait_in_queue(&server, b"plain", &owner, 10_000, 60_000, &[]);
    let queue = run_ok(lockctl(&[&server]).args(["waiters", "plain"]));
    assert!(
        !queue.contains('\x1b') && !queue.contains('\x07'),
        "{queue}"
    );
    assert!(queue.contains("owner\\x1b]0;pwned\\x07oo"), "{queue}");
    assert!(queue.lines().all(|l| l.chars().count() < 200), "{queue}");
    let doc = json_of(lockctl(&[&server]).args(["waiters", "plain", "--json"]));
    let shown = doc["masters"][0]["waiters"][0]["owner"]
        .as_str()
        .map(str::as_bytes);
    assert_eq!(shown, Some(owner.as_slice()));
}

/// A tmux server of its own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(width: u16, height: u16, command: &str) -> Tmux {
        assert!(
            Command::new("tmux")
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success()),
            "tmux is not installed: scripts/setup (make test) installs it"
        );
        let socket = format!("relock-test-{}-{}", std::process::id(), fastrand::u64(..));
        let tmux = Tmux { socket };
        let ok = tmux
            .cmd()
            .args(["new-session", "-d", "-s", "top", "-x", &width.to_string()])
            .args(["-y", &height.to_string(), command])
            .status()
            .expect("tmux");
        assert!(ok.success());
        tmux
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"])
            .stdin(Stdio::null());
        c
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .expect("capture");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows now, with the escape sequences of its colours and attributes.
    fn screen_with_attributes(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-e", "-t", "top"])
            .output()
            .expect("capture");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(self
            .cmd()
            .args(["send-keys", "-t", "top", keys])
            .status()
            .expect("send")
            .success());
    }

    fn format(&self, format: &str) -> String {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "top", format])
            .output()
            .expect("display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the screen satisfies `check`; the last screen.
    fn until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let seen = eventually(WITHIN, || {
            last = self.screen();
            check(&last)
        });
        assert!(seen, "the screen never showed {what}:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// A key with a holder, two queued waiters and one wait that timed out (so LOCK.STATS
/// names it).
fn contended(server: &Server, key: &str) -> Vec<JoinHandle<()>> {
    common::acquire(
        &mut server.conn(),
        key.as_bytes(),
        b"web-1/100/holder",
        600_000,
    );
    one_timed_out_wait(server, key.as_bytes());
    let (a, _) = wait_in_queue(
        server,
        key.as_bytes(),
        b"web-2/200/next",
        30_000,
        600_000,
        &[],
    );
    let (b, _) = wait_in_queue(
        server,
        key.as_bytes(),
        b"web-3/300/after",
        30_000,
        600_000,
        &[],
    );
    vec![a, b]
}

#[test]
fn top_in_a_terminal_shows_the_hot_key_and_its_queue_and_q_restores_the_terminal() {
    let server = Server::start();
    let _waiters = contended(&server, "orders:hot");
    let lockctl = env!("CARGO_BIN_EXE_lockctl");
    // After lockctl exits, the shell says its status and the terminal's settings.
    let command = format!(
        "env -u NO_COLOR RELOCK_SERVERS={} {lockctl} top --interval 200ms; \
         echo EXITED $?; stty -a | tr ';' '\\n' | grep -Eo -- '-?(icanon|echo)\\b' | tr '\\n' ' '; \
         echo; sleep 600",
        server.url()
    );
    let tmux = Tmux::start(160, 40, &command);
    let screen = tmux.until("the hot key and its queue", |s| {
        s.contains("queue of orders:hot")
            && s.contains("web-2/200/next")
            && s.contains("web-3/300/after")
    });
    // The key's line: holder and queue length.
    let key_line = screen
        .lines()
        .find(|l| l.starts_with("orders:hot "))
        .unwrap_or_else(|| panic!("no line for the key:\n{screen}"));
    let cells: Vec<&str> = key_line.split_whitespace().collect();
    assert_eq!(cells[2..4], ["web-1/100/holder", "2"], "{screen}");
    // The queue in order.
    let next = screen.find("web-2/200/next").expect("next");
    let after = screen.find("web-3/300/after").expect("after");
    assert!(next < after, "{screen}");
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "1",
        "top uses the alternate screen"
    );

    // It keeps up: a new waiter shows within a few refreshes.
    let (_c, _) = wait_in_queue(
        &server,
        b"orders:hot",
        b"web-4/400/late",
        30_000,
        600_000,
        &[],
    );
    tmux.until("the new waiter", |s| s.contains("web-4/400/late"));

    tmux.keys("q");
    let screen = tmux.until("lockctl's exit and the terminal's settings", |s| {
        s.contains("EXITED") && s.contains("icanon")
    });
    assert!(screen.contains("EXITED 0"), "{screen}");
    let settings = screen
        .lines()
        .skip_while(|l| !l.contains("EXITED"))
        .nth(1)
        .unwrap_or("");
    assert!(
        settings.contains("icanon") && !settings.contains("-icanon") && !settings.contains("-echo"),
        "the terminal is left in raw mode: {settings:?}"
    );
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "0",
        "the alternate screen is left"
    );
    assert!(
        !screen.contains("hottest keys"),
        "the view is cleared:\n{screen}"
    );
}

/// The SGR sequences of `screen` (a pane captured with `-e`) that set a foreground or a
/// background colour, their parameters as written (`36`, `1;36`, `38;5;6`).
fn colours(screen: &str) -> Vec<String> {
    let is_colour = |p: &str| {
        matches!(
            p.parse::<u32>(),
            Ok(30..=38 | 40..=48 | 90..=97 | 100..=107)
        )
    };
    screen
        .split("\x1b[")
        .skip(1)
        .filter_map(|seq| {
            let end = seq.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (seq[end..].starts_with('m') && seq[..end].split(';').any(is_colour))
                .then(|| seq[..end].to_string())
        })
        .collect()
}

/// On a terminal `top` is coloured, unless `NO_COLOR` is set and not empty
/// (https://no-color.org); the view is the same either way.
#[test]
fn top_on_a_terminal_is_coloured_unless_no_color() {
    let server = Server::start();
    let _waiters = contended(&server, "orders:hot");
    let lockctl = env!("CARGO_BIN_EXE_lockctl");
    for (setting, coloured) in [
        ("env -u NO_COLOR", true),
        ("env NO_COLOR=", true),
        ("env NO_COLOR=1", false),
    ] {
        let command = format!(
            "{setting} RELOCK_SERVERS={} {lockctl} top --interval 200ms; sleep 600",
            server.url()
        );
        let tmux = Tmux::start(160, 40, &command);
        tmux.until("the hot key and its queue", |s| {
            s.contains("queue of orders:hot") && s.contains("web-3/300/after")
        });
        let screen = tmux.screen_with_attributes();
        let found = colours(&screen);
        assert_eq!(
            !found.is_empty(),
            coloured,
            "{setting}: colour sequences {found:?} on the screen:\n{screen:?}"
        );
        tmux.keys("q");
    }
}

#[test]
fn top_once_prints_a_snapshot_and_json() {
    let server = Server::start();
    let _waiters = contended(&server, "orders:hot");
    let text = run_ok(lockctl(&[&server]).args(["top", "--once", "--interval", "50ms"]));
    assert!(text.starts_with("relock top, "), "{text}");
    assert!(text.contains("ACQUIRES/S"), "{text}");
    let key_line = text
        .lines()
        .find(|l| l.starts_with("orders:hot "))
        .expect("the key");
    assert!(key_line.contains("web-1/100/holder"), "{text}");
    assert!(text.contains("queue of orders:hot"), "{text}");
    assert!(!text.contains('\x1b'), "no colour when not a terminal");

    let doc = json_of(lockctl(&[&server]).args(["top", "--json", "--interval", "50ms"]));
    let master = &doc["masters"][0];
    assert_eq!(master["up"], true);
    assert_eq!(master["info"]["waiters"], 2.0);
    assert!(master["per_second"]["acquired"].as_f64().is_some());
    assert!(master["wait_percentiles_ms"]["p99"].as_f64().is_some());
    let key = &doc["keys"][0];
    assert_eq!(key["stats"]["key"], "orders:hot");
    assert_eq!(key["stats"]["timeouts"], 1);
    assert_eq!(key["lock"]["owner"], "web-1/100/holder");
    assert_eq!(key["lock"]["waiters"], 2);
    let queue: Vec<&str> = key["queue"]
        .as_array()
        .expect("queue")
        .iter()
        .map(|w| w["owner"].as_str().expect("owner"))
        .collect();
    assert_eq!(queue, ["web-2/200/next", "web-3/300/after"]);
}

/// A port below 55535 that was free a moment ago (the ephemeral range reaches past it).
fn low_free_port() -> u16 {
    loop {
        let port = fastrand::u16(20_000..55_000);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `lockctl metrics` on a free port below 55535, once it says it serves; its address.
fn serve_metrics(lockctl: impl Fn() -> Command) -> (Spawned, String) {
    serve_metrics_with(lockctl, &[])
}

/// [`serve_metrics`] with more options of `lockctl metrics`.
fn serve_metrics_with(lockctl: impl Fn() -> Command, options: &[&str]) -> (Spawned, String) {
    for _ in 0..10 {
        let listen = format!("127.0.0.1:{}", low_free_port());
        let mut cmd = lockctl();
        cmd.args(["metrics", "--listen", &listen])
            .args(options)
            .stderr(Stdio::piped());
        let mut child = Spawned::new(&mut cmd);
        let stderr = child.child().stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        match rx.recv_timeout(WITHIN) {
            Ok(line) if line.contains("serving metrics on") => return (child, listen),
            Ok(line) if line.contains("cannot listen") => continue,
            other => panic!("lockctl metrics said {other:?}"),
        }
    }
    panic!("no free port for lockctl metrics");
}

/// A GET over HTTP/1.0: (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WITHIN)).expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of the sample `name{labels}` in a scrape, labels given as `a="b"` pairs.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        (rest.starts_with('{') && labels.iter().all(|p| rest.contains(p)))
            .then(|| value.parse().ok())?
    })
}

fn info_fields(server: &Server) -> std::collections::HashMap<String, i64> {
    cluster_harness::relock_info(server)
}

/// Percent-encodes a PromQL query for a URL.
fn percent_encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// The variable that lets the Prometheus checks pass without `prometheus` and `promtool`:
/// `RELOCK_SKIP_PROMETHEUS=1` (for a machine where scripts/setup could not install them).
/// Without it a missing binary fails the test, so that no check passes unrun.
const SKIP_PROMETHEUS: &str = "RELOCK_SKIP_PROMETHEUS";

/// Whether `tool` (`prometheus`, `promtool`) can be run. When it cannot, the test fails saying
/// so, unless [`SKIP_PROMETHEUS`] is `1`: then `false`, said loudly.
fn installed(tool: &str) -> bool {
    if Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return true;
    }
    assert!(
        std::env::var(SKIP_PROMETHEUS).is_ok_and(|v| v == "1"),
        "{tool} is not installed (or does not run): scripts/setup installs it with apt-get \
         (package prometheus); set {SKIP_PROMETHEUS}=1 to skip the checks that need it"
    );
    eprintln!("\n*** SKIPPED: {tool} is not installed and {SKIP_PROMETHEUS}=1 ***\n");
    false
}

/// A Prometheus of its own, scraping `target` every second; killed on drop.
struct Prometheus {
    _child: Spawned,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// `None` when Prometheus is not installed and [`SKIP_PROMETHEUS`] allows that.
    fn start(target: &str) -> Option<Prometheus> {
        if !installed("prometheus") {
            return None;
        }
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: relock\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("config");
        for _ in 0..10 {
            let addr = format!("127.0.0.1:{}", low_free_port());
            let mut child = Spawned::new(
                Command::new("prometheus")
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.path().join("data").display()
                    ))
                    .arg(format!("--web.listen-address={addr}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.path().join("log")).expect("log")),
            );
            let ready = eventually(WITHIN, || {
                child.try_status().is_some()
                    || TcpStream::connect(&addr).is_ok_and(|_| http_get(&addr, "/-/ready").0 == 200)
            });
            if ready && child.try_status().is_none() {
                return Some(Prometheus {
                    _child: child,
                    addr,
                    _dir: dir,
                });
            }
        }
        panic!(
            "prometheus did not start: {}",
            std::fs::read_to_string(Path::new(&dir.path().join("log"))).unwrap_or_default()
        );
    }

    /// The value of an instant query with one result, once there is one.
    fn value(&self, query: &str) -> Option<f64> {
        let (_, body) = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", percent_encode(query)),
        );
        let doc: Json = serde_json::from_str(&body).ok()?;
        let result = doc["data"]["result"].as_array()?;
        (result.len() == 1).then_some(())?;
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

#[test]
fn metrics_scraped_by_prometheus_match_info_relock() {
    let server = Server::start();
    let _waiters = contended(&server, "orders:hot");
    common::acquire(&mut server.conn(), b"job:forced", b"o", 60_000);
    let _: i64 = redis::cmd("LOCK.FORCERELEASE")
        .arg("job:forced")
        .query(&mut server.conn())
        .expect("force");
    // A contended key whose name would end a label and add a series of its own.
    let hostile = "evil\"} 1\nrelock_up{master=\"forged\"} 1\n\\";
    common::acquire(&mut server.conn(), hostile.as_bytes(), b"h", 600_000);
    one_timed_out_wait(&server, hostile.as_bytes());
    let master = format!("127.0.0.1:{}", server.port);

    let (_metrics, listen) = serve_metrics(|| lockctl(&[&server]));
    let (status, text) = http_get(&listen, "/metrics");
    assert_eq!(status, 200, "{text}");
    let info = info_fields(&server);
    let m = format!("master=\"{master}\"");
    for (metric, field) in [
        ("relock_acquired_total", "acquired_total"),
        ("relock_forcereleased_total", "forcereleased_total"),
        ("relock_wait_timeouts_total", "wait_timeouts_total"),
        ("relock_contended_total", "contended_total"),
        ("relock_waiters", "waiters"),
        ("relock_holds", "holds"),
        ("relock_locks", "locks"),
        ("relock_log_entries", "log_len"),
    ] {
        assert_eq!(
            sample(&text, metric, &[&m]),
            Some(info[field] as f64),
            "{metric}\n{text}"
        );
    }
    assert_eq!(sample(&text, "relock_up", &[&m]), Some(1.0));
    assert!(
        !text.contains("master=\"forged\""),
        "a key forged a series:\n{text}"
    );
    let hot = [m.as_str(), "key=\"orders:hot\""];
    assert_eq!(
        sample(&text, "relock_key_waiters", &hot),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "relock_key_holders", &hot),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "relock_key_timeouts_total", &hot),
        Some(1.0),
        "{text}"
    );
    assert!(sample(
        &text,
        "relock_wait_percentile_seconds",
        &[&m, "percentile=\"99\""]
    )
    .is_some());

    // promtool reads the scrape as Prometheus does, and lints it.
    if installed("promtool") {
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool");
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
        let out = promtool.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            stdout(&out),
            support::stderr(&out)
        );
    }

    let Some(prometheus) = Prometheus::start(&listen) else {
        return;
    };
    let query = format!("relock_acquired_total{{{m}}}");
    assert!(
        eventually(Duration::from_secs(60), || prometheus
            .value(&query)
            .is_some()),
        "Prometheus never scraped lockctl metrics"
    );
    // Nothing changes on the server any more: every scrape reads the same.
    let info = info_fields(&server);
    for (metric, field) in [
        ("relock_acquired_total", "acquired_total"),
        ("relock_forcereleased_total", "forcereleased_total"),
        ("relock_wait_timeouts_total", "wait_timeouts_total"),
        ("relock_waiters", "waiters"),
        ("relock_holds", "holds"),
        ("relock_last_token", "last_token"),
    ] {
        assert_eq!(
            prometheus.value(&format!("{metric}{{{m}}}")),
            Some(info[field] as f64),
            "{metric}"
        );
    }
    assert_eq!(prometheus.value(&format!("relock_up{{{m}}}")), Some(1.0));
    assert_eq!(
        prometheus.value("up{job=\"relock\"}"),
        Some(1.0),
        "the scrape itself failed"
    );
    assert_eq!(
        prometheus.value(&format!("relock_key_waiters{{{m},key=\"orders:hot\"}}")),
        Some(2.0)
    );
    assert_eq!(
        prometheus.value("count(relock_up{master=\"forged\"})"),
        None
    );
}

#[test]
fn metrics_when_masters_die_or_hang_mid_scrape() {
    let a = Server::start();
    let mut b = Server::start();
    let c = Server::start();
    let (_metrics, listen) = serve_metrics(|| {
        let mut cmd = lockctl(&[&a, &b, &c]);
        cmd.args(["--node-timeout", "300ms"]);
        cmd
    });
    let up = |text: &str, s: &Server| {
        sample(
            text,
            "relock_up",
            &[&format!("master=\"127.0.0.1:{}\"", s.port)],
        )
    };
    let (_, text) = http_get(&listen, "/metrics");
    assert_eq!(
        (up(&text, &a), up(&text, &b), up(&text, &c)),
        (Some(1.0), Some(1.0), Some(1.0)),
        "{text}"
    );

    b.kill();
    c.signal("STOP");
    let _resume = common::Resume(vec![&c]);
    let started = Instant::now();
    let (status, text) = http_get(&listen, "/metrics");
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(
        (up(&text, &a), up(&text, &b), up(&text, &c)),
        (Some(1.0), Some(0.0), Some(0.0)),
        "{text}"
    );
    // One bounded round: a node timeout or two, not a hang.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(sample(
        &text,
        "relock_acquired_total",
        &[&format!("127.0.0.1:{}", a.port)]
    )
    .is_some());

    // Other paths.
    assert_eq!(http_get(&listen, "/nope").0, 404);
    assert_eq!(http_get(&listen, "/").0, 200);
}

#[test]
fn lockctl_ops_over_a_cluster() {
    let cluster = Cluster::start();
    let seed = cluster.urls()[0].clone();
    let with = |args: &[&str]| {
        let mut cmd = lockctl_at(&seed);
        cmd.args(["--cluster", "--node-timeout", "1s"]).args(args);
        cmd
    };
    let key = "{orders}:hot";
    let owner = cluster.master_of(key);
    let _waiters = contended(owner, key);

    let table = run_ok(&mut with(&["waiters", key]));
    assert!(
        table.contains(&format!("127.0.0.1:{}: 2 waiting", owner.port)),
        "{table}"
    );
    assert!(table.contains("web-2/200/next"), "{table}");

    let doc = json_of(&mut with(&["top", "--json", "--interval", "50ms"]));
    let masters = doc["masters"].as_array().expect("masters");
    assert_eq!(masters.len(), 3, "every master of the cluster: {doc}");
    assert!(masters.iter().all(|m| m["up"] == true), "{doc}");
    let hot = &doc["keys"][0];
    assert_eq!(hot["stats"]["key"], key);
    assert_eq!(hot["master"], format!("127.0.0.1:{}", owner.port));
    assert_eq!(hot["lock"]["waiters"], 2);
    assert_eq!(hot["queue"][0]["owner"], "web-2/200/next");

    let (_metrics, listen) = serve_metrics(|| with(&[]));
    let (_, text) = http_get(&listen, "/metrics");
    for m in cluster.masters() {
        assert_eq!(
            sample(
                &text,
                "relock_up",
                &[&format!("master=\"127.0.0.1:{}\"", m.port)]
            ),
            Some(1.0),
            "{text}"
        );
    }
    let keyed = [
        format!("master=\"127.0.0.1:{}\"", owner.port),
        format!("key=\"{key}\""),
    ];
    let keyed: Vec<&str> = keyed.iter().map(String::as_str).collect();
    assert_eq!(
        sample(&text, "relock_key_waiters", &keyed),
        Some(2.0),
        "{text}"
    );

    // A master that hangs mid-scrape: down in that scrape and the next, the others up, each
    // scrape bounded.
    // (The harness asks nodes their role to list masters: list them before one stops.)
    let masters: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    let stopped = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    stopped.signal("STOP");
    let _resume = common::Resume(vec![stopped]);
    for _ in 0..2 {
        let started = Instant::now();
        let (status, text) = http_get(&listen, "/metrics");
        let took = started.elapsed();
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(8), "{took:?}");
        for port in &masters {
            let want = if *port == stopped.port { 0.0 } else { 1.0 };
            assert_eq!(
                sample(
                    &text,
                    "relock_up",
                    &[&format!("master=\"127.0.0.1:{port}\"")]
                ),
                Some(want),
                "{text}"
            );
        }
    }
    drop(_resume);

    let log = run_ok(&mut with(&["log"]));
    assert!(
        log.contains("no hold ended") || log.contains("TIME (UTC)"),
        "{log}"
    );
}

// The endpoint under attack: each attack below stopped, grew or confused the tiny_http
// server lockctl had, and a normal scrape must still be answered while it goes on.

/// What a normal scrape gets within [`SCRAPE_UNDER_ATTACK`]: its status, or why none came.
fn scrape_under_attack(listen: &str) -> Result<u16, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(listen).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(SCRAPE_UNDER_ATTACK))
        .expect("timeout");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {listen}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .map_err(|e| format!("no answer after {:?}: {e}", started.elapsed()))?;
    eprintln!("a scrape under attack took {:?}", started.elapsed());
    let text = String::from_utf8_lossy(&reply);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not HTTP: {text:?}"))
}

/// Generous for one scrape of one master while the endpoint is attacked (a debug build, one
/// core kept busy); a stopped endpoint never answers.
const SCRAPE_UNDER_ATTACK: Duration = Duration::from_secs(10);

/// A few normal scrapes in a row, each answered 200 within [`SCRAPE_UNDER_ATTACK`].
fn scrapes_still_answered(listen: &str, during: &str) {
    for i in 0..3 {
        assert_eq!(
            scrape_under_attack(listen),
            Ok(200),
            "scrape {i} during {during}"
        );
    }
}

/// Whether lockctl ends `stream` within [`WITHIN`]: reading everything it sent reaches the
/// end or a reset (a read timeout is the connection still open).
fn ended_by_lockctl(stream: &mut TcpStream) -> bool {
    let started = Instant::now();
    let ended = read_to_the_end(stream);
    eprintln!("ended by lockctl: {ended} after {:?}", started.elapsed());
    ended
}

fn read_to_the_end(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(WITHIN)).expect("timeout");
    let mut buf = vec![0; 64 << 10];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// Bytes waiting to be read on `stream` (what lockctl has answered and the test not read).
fn unread(stream: &TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer, which is valid for the call.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD");
    n as usize
}

/// The resident memory of `pid`, in bytes.
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

#[test]
fn metrics_answer_while_a_client_pipelines_requests_it_never_reads() {
    let server = Server::start();
    let (_metrics, listen) = serve_metrics(|| lockctl(&[&server]));
    let mut hostile = TcpStream::connect(&listen).expect("connect");
    let burst = format!("GET /metrics HTTP/1.1\r\nHost: {listen}\r\n\r\n").repeat(1500);
    let mut writer = hostile.try_clone().expect("clone");
    // From a thread: once lockctl stops reading, the write blocks (or fails when it closes).
    let writing = std::thread::spawn(move || {
        let _ = writer.write_all(burst.as_bytes());
    });
    assert!(
        eventually(WITHIN, || unread(&hostile) > 0),
        "lockctl never answered the pipelined requests"
    );
    scrapes_still_answered(&listen, "1,500 pipelined requests never read");
    // The hostile connection does not stay: 100 requests are answered on one connection, the
    // last saying `Connection: close`, and then it ends.
    hostile.set_read_timeout(Some(WITHIN)).expect("timeout");
    let mut answers = Vec::new();
    let ended = match hostile.read_to_end(&mut answers) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(
        ended,
        "lockctl keeps a connection that pipelines without end"
    );
    let answers = String::from_utf8_lossy(&answers);
    assert_eq!(answers.matches("HTTP/1.1 200 OK\r\n").count(), 100);
    assert_eq!(answers.matches("connection: close\r\n").count(), 1);
    writing.join().expect("writer");
    scrapes_still_answered(&listen, "after the pipelining client");
}

#[test]
fn metrics_refuse_an_endless_header_line_without_growing() {
    let server = Server::start();
    let (metrics, listen) = serve_metrics(|| lockctl(&[&server]));
    scrapes_still_answered(&listen, "nothing");
    let before = rss(metrics.pid());

    // An endless header line: lockctl ends the connection long before 128 MB, and does not
    // keep what it read.
    let mut endless = TcpStream::connect(&listen).expect("connect");
    endless.set_write_timeout(Some(WITHIN)).expect("timeout");
    write!(
        endless,
        "GET /metrics HTTP/1.1\r\nHost: {listen}\r\nX-Endless: "
    )
    .expect("request");
    let chunk = vec![b'a'; 64 << 10];
    let (mut sent, mut peak) = (0usize, before);
    let cut = loop {
        if sent >= 128 << 20 {
            break false;
        }
        if endless.write_all(&chunk).is_err() {
            break true;
        }
        sent += chunk.len();
        if sent % (1 << 20) == 0 {
            peak = peak.max(rss(metrics.pid()));
        }
    };
    peak = peak.max(rss(metrics.pid()));
    let grew = peak.saturating_sub(before);
    eprintln!(
        "endless header: cut {cut} after {sent} bytes sent; lockctl grew {grew} bytes ({before} -> {peak})"
    );
    assert!(cut, "lockctl read {sent} bytes of one header line");
    assert!(grew < 32 << 20, "lockctl grew by {grew} bytes");
    // A head just over the limit, sent whole: answered 431, not served.
    let mut big = TcpStream::connect(&listen).expect("connect");
    big.set_read_timeout(Some(WITHIN)).expect("timeout");
    // One write: lockctl answers once it has read 8 KiB, and a later write would fail.
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: {listen}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    big.write_all(head.as_bytes()).expect("request");
    let mut reply = Vec::new();
    let _ = big.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply:?}");

    scrapes_still_answered(&listen, "after an endless header");
}

/// The `key` label of every `relock_key_waits_total` series, as the text has it (escaped).
fn key_labels(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("relock_key_waits_total{"))
        .filter_map(|l| {
            let start = l.find("key=\"")? + 5;
            let rest = &l[start..];
            let mut end = 0;
            let bytes = rest.as_bytes();
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            Some(rest[..end].to_string())
        })
        .collect()
}

/// Unescapes a label value of the text format (`\\`, `\"`, `\n`).
fn unescape(label: &str) -> String {
    let mut out = String::new();
    let mut chars = label.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// `promtool check metrics` on a scrape, when promtool is installed.
fn promtool_accepts(text: &str) {
    if !installed("promtool") {
        return;
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = promtool.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        stdout(&out),
        support::stderr(&out)
    );
}

#[test]
fn metrics_give_every_key_a_series_of_its_own() {
    let server = Server::start();
    let (_metrics, listen) = serve_metrics(|| {
        let mut cmd = lockctl(&[&server]);
        cmd.args(["--node-timeout", "5s"]);
        cmd
    });
    // Keys whose labels cannot be the key itself: not UTF-8, too long.
    let mut keys: Vec<Vec<u8>> = vec![b"x\xff".to_vec(), vec![b'k'; 300], b"50%".to_vec()];
    for key in &keys {
        common::acquire(&mut server.conn(), key, b"h", 600_000);
        one_timed_out_wait(&server, key);
    }
    let (status, text) = http_get(&listen, "/metrics");
    assert_eq!(status, 200, "{text}");
    let labels = key_labels(&text);
    assert_eq!(labels.len(), keys.len(), "{text}");
    // Each label, spelled as a key of its own: a series of its own, not a second count on
    // the key it names.
    for label in &labels {
        let forged = unescape(label).into_bytes();
        if !keys.contains(&forged) {
            common::acquire(&mut server.conn(), &forged, b"h", 600_000);
            one_timed_out_wait(&server, &forged);
            keys.push(forged);
        }
    }
    let (status, text) = http_get(&listen, "/metrics");
    assert_eq!(status, 200, "{text}");
    let labels = key_labels(&text);
    let distinct: std::collections::BTreeSet<&String> = labels.iter().collect();
    assert_eq!(
        (labels.len(), distinct.len()),
        (keys.len(), keys.len()),
        "{} keys, one series each:\n{text}",
        keys.len()
    );
    // Every key waited once and timed out once: a shared series would count 2.
    for line in text
        .lines()
        .filter(|l| l.starts_with("relock_key_timeouts_total{"))
    {
        assert!(line.ends_with(" 1"), "two keys in one series: {line}");
    }
    promtool_accepts(&text);
}

/// `count` connections to `listen` that each sent `head` (maybe nothing), kept open.
fn connections(listen: &str, count: usize, head: &str) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut s = TcpStream::connect(listen).expect("connect");
            s.write_all(head.as_bytes()).expect("head");
            s
        })
        .collect()
}

#[test]
fn metrics_answer_while_slow_clients_hold_connections() {
    let server = Server::start();
    let (_metrics, listen) = serve_metrics(|| lockctl(&[&server]));

    // Clients that connect and send nothing.
    let mut idle = connections(&listen, 300, "");
    scrapes_still_answered(&listen, "300 idle connections");
    assert!(
        ended_by_lockctl(&mut idle[0]),
        "lockctl keeps a connection that never sends a request"
    );
    assert!(ended_by_lockctl(&mut idle[299]), "the newest idle client");
    drop(idle);

    // Slow loris: heads that never end, one more byte every 100 ms from each.
    let mut loris = connections(
        &listen,
        300,
        &format!("GET /metrics HTTP/1.1\r\nHost: {listen}\r\n"),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dribbling = {
        let mut streams: Vec<TcpStream> = loris
            .iter()
            .map(|s| s.try_clone().expect("clone"))
            .collect();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut streams {
                    let _ = s.write_all(b"X");
                }
                std::thread::sleep(Duration::from_millis(100)); // the loris's pace (not a wait)
            }
        })
    };
    scrapes_still_answered(&listen, "300 slow-loris heads");
    assert!(
        ended_by_lockctl(&mut loris[299]),
        "lockctl keeps a head that never ends"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    dribbling.join().expect("dribbler");
    scrapes_still_answered(&listen, "after the slow clients");
}

/// Whether lockctl ends `stream` within [`WITHIN`] while the test reads nothing of it (a
/// reset, or an end once what was sent is read).
fn ended_unread(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let started = Instant::now();
    let mut poll = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call.
    let n = unsafe { libc::poll(&mut poll, 1, WITHIN.as_millis() as libc::c_int) };
    let ended = n == 1 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0;
    eprintln!("ended unread: {ended} after {:?}", started.elapsed());
    ended
}

#[test]
fn metrics_close_a_connection_that_does_not_read_its_answers() {
    let server = Server::start();
    // 300 hot keys with long names: an answer of hundreds of KB, more than the socket
    // buffers hold after a few.
    let keys: Vec<String> = (0..300)
        .map(|i| format!("{i:03}:{}", "k".repeat(190)))
        .collect();
    let mut conn = server.conn();
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(k)
            .arg("h")
            .arg(600_000)
            .ignore();
    }
    pipe.query::<()>(&mut conn).expect("acquire");
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("LOCK.WAIT")
            .arg(k)
            .arg("impatient")
            .arg(10_000)
            .arg(1)
            .ignore();
    }
    pipe.query::<()>(&mut conn).expect("waits");
    let (_metrics, listen) = serve_metrics_with(|| lockctl(&[&server]), &["--keys", "300"]);
    let (status, text) = http_get(&listen, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(key_labels(&text).len(), 300, "every key is hot");
    eprintln!("one answer: {} bytes", text.len());

    // Asks for the answer 1,500 times and reads none: lockctl's writes stop, and the write
    // timeout closes the connection.
    let mut hostile = TcpStream::connect(&listen).expect("connect");
    hostile
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {listen}\r\n\r\n")
                .repeat(1500)
                .as_bytes(),
        )
        .expect("requests");
    assert!(
        eventually(WITHIN, || unread(&hostile) > 0),
        "lockctl never answered"
    );
    scrapes_still_answered(&listen, "a client that does not read its answers");
    assert!(
        ended_unread(&hostile),
        "lockctl keeps a connection whose answers are never read"
    );
    scrapes_still_answered(&listen, "after the client that did not read");
}

/// What a server says can quote the bytes a client chose: a server without the module answers
/// `ERR unknown command 'LOCK.INFO', with args beginning with: '<key>'`. Every operator
/// command shows such an error with its control characters escaped, on stdout and stderr,
/// and exits 1; `--json` keeps it whole. An owner given to force-release is shown escaped too.
#[test]
fn errors_quoting_hostile_keys_never_reach_the_terminal_raw() {
    let plain = Server::without_module(&[]);
    let key = "x\x1b[2Jy\x1b]0;pwned\x07z\nforged line";
    for args in [
        vec!["info", key],
        vec!["waiters", key],
        vec!["log", key],
        vec!["force-release", key],
        vec!["force-release", key, "owner\x1b[31m"],
        vec!["top", "--once", "--interval", "10ms"],
    ] {
        // A 5 s node timeout: the check is about the error's text, which a loaded machine
        // turned into "no reply within 100ms" (the default), quoting no key.
        let out = lockctl(&[&plain])
            .args(["--node-timeout", "5s"])
            .args(&args)
            .output()
            .expect("lockctl runs");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let (text, err) = (stdout(&out), support::stderr(&out));
        for shown in [&text, &err] {
            assert!(
                !shown.contains('\x1b') && !shown.contains('\x07'),
                "{args:?}: raw escapes: {shown:?}"
            );
            assert!(!shown.contains("\nforged line"), "{args:?}: {shown:?}");
        }
        if args[0] != "top" {
            assert!(text.contains("x\\x1b[2Jy"), "{args:?}: {text:?}");
        }
    }
    let doc = json_of_failing(lockctl(&[&plain]).args([
        "--node-timeout",
        "5s",
        "waiters",
        key,
        "--json",
    ]));
    let why = doc["masters"][0]["error"].as_str().expect("an error");
    assert!(
        why.contains(key.lines().next().unwrap_or_default()),
        "{why}"
    );

    // A holder whose owner has escapes, force-released by that owner.
    let server = Server::start();
    let owner = "owner\x1b[31m\x07";
    common::acquire(&mut server.conn(), b"k", owner.as_bytes(), 60_000);
    let text = run_ok(lockctl(&[&server]).args(["force-release", "k", owner]));
    assert!(
        text.contains("released owner\\x1b[31m\\x07's hold"),
        "{text:?}"
    );
}

/// A JSON document a failing lockctl printed (exit 1).
fn json_of_failing(cmd: &mut Command) -> Json {
    let out = cmd.output().expect("lockctl runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `lockctl info` of a shared lock with 100,000 holders: the list alone takes the server
/// longer than info's 100ms node timeout to send. info lists the first 100 (`--count`),
/// says on stderr how many there are, and succeeds; `--count 0` asks for all.
#[test]
fn info_of_a_lock_with_100000_holders_lists_the_first_of_them() {
    let server = Server::start();
    let fill: Vec<redis::Cmd> = (0..100_000)
        .map(|i| {
            let mut acquire = redis::cmd("LOCK.ACQUIRE");
            acquire
                .arg("crowded")
                .arg(format!("holder-{i:06}-\x1b[2J"))
                .arg(600_000)
                .arg("SHARED");
            acquire
        })
        .collect();
    let ok = |r: &Reply| matches!(r, Reply::Int(_));
    pipeline_cmds(&mut Raw::connect(&server), &fill, ok);

    let out = lockctl(&[&server])
        .args(["info", "crowded"])
        .output()
        .expect("lockctl runs");
    let (text, err) = (stdout(&out), support::stderr(&out));
    assert!(out.status.success(), "{:?}: {text}\n{err}", out.status);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 101, "{text}");
    assert!(lines[0].contains("holders=100000"), "{}", lines[0]);
    assert!(
        lines[1].contains("holder owner=holder-000000-\\x1b[2J"),
        "{}",
        lines[1]
    );
    assert!(err.contains("the first 100 of 100000 holders"), "{err}");

    let few = run_ok(lockctl(&[&server]).args(["info", "crowded", "--count", "3"]));
    assert_eq!(few.lines().count(), 4, "{few}");
    let out = lockctl(&[&server])
        .args(["info", "crowded", "--count", "-1"])
        .output()
        .expect("lockctl runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A count the server would refuse (`ERR invalid count`, above 2^32-1) is a usage error found
/// before any server is asked (exit 2), not a failure of every master (exit 1); the largest
/// the server takes works.
#[test]
fn counts_beyond_the_servers_are_usage_errors() {
    let server = Server::start();
    for args in [
        ["waiters", "k", "--count", "4294967296"],
        ["log", "k", "--count", "4294967296"],
        ["log", "--count", "9223372036854775807", "--json"],
        ["waiters", "k", "--count", "18446744073709551615"],
    ] {
        let out = lockctl(&[&server])
            .args(args)
            .output()
            .expect("lockctl runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    run_ok(lockctl(&[&server]).args(["waiters", "k", "--count", "4294967295"]));
    run_ok(lockctl(&[&server]).args(["log", "--count", "4294967295"]));
}
