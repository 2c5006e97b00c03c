//! The benchmark's own redis-server processes: each in a temporary directory, on a port that was
//! free a moment ago, no persistence, killed when the guard is dropped (also on panic).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its first `PING`.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// A running redis-server with the relock module loaded.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    /// Removed when the server is dropped.
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start(module: &Path) -> Result<Server, String> {
        let dir = tempfile::Builder::new()
            .prefix("relock-bench-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let mut last = String::new();
        for _attempt in 0..5 {
            let port = free_port()?;
            let mut child = Command::new(redis_server_bin())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args(["--save", "", "--appendonly", "no"])
                .args(["--logfile", "redis.log"])
                // Room for K = 1000 waiters with two connections each (recipe D), and for
                // case 16's 10,000 observers and the bench's control connection.
                .args(["--maxclients", "10100"])
                .arg("--loadmodule")
                .arg(module)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("start redis-server (is it installed?): {e}"))?;
            match wait_ready(&mut child, port) {
                Ok(()) => {
                    return Ok(Server {
                        child: Some(child),
                        port,
                        _dir: dir,
                    })
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log =
                        std::fs::read_to_string(dir.path().join("redis.log")).unwrap_or_default();
                    last = format!("{e}\n--- redis.log ---\n{log}");
                    // Another process took the port between the probe and the start.
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(format!("redis-server did not start: {last}"))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server exited with {status}"));
        }
        if ping(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("no PONG before the deadline".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind port 0: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local addr: {e}"))
}

fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The workspace root: this crate's manifest dir is `<root>/bench`.
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// The module to load: `--module`, else `RELOCK_MODULE`, else the release build, else (with
/// `allow_debug`, for the smoke run) the debug build.
pub fn find_module(explicit: Option<&Path>, allow_debug: bool) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Ok(p) = std::env::var("RELOCK_MODULE") {
        return Ok(PathBuf::from(p));
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    let release = target.join("release").join("librelock.so");
    let debug = target.join("debug").join("librelock.so");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (
        modified(&release),
        allow_debug.then(|| modified(&debug)).flatten(),
    ) {
        // The smoke run (inside `cargo test`, which builds debug) takes the newer build, so a
        // stale release module from an old `make bench` is not what it tests.
        (Some(r), Some(d)) if d > r => return Ok(debug),
        (Some(_), _) => return Ok(release),
        (None, Some(_)) => return Ok(debug),
        (None, None) => {}
    }
    Err(format!(
        "module not built at {} (run `cargo build --release`, or pass --module PATH)",
        release.display()
    ))
}
