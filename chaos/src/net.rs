//! Test hosts on one machine: network namespaces joined by veth pairs and a bridge, the
//! servers and workers that run in them, and the faults between them.
//!
//! ```text
//!   root namespace: the orchestrator, the fenced store, bridge rk<pid>n<k>b at 10.X.Y.254
//!        |                 |                 |
//!   host 1: 10.X.Y.1   host 2: 10.X.Y.2   host 3 ...   (netns relock-chaos-<pid>-<k>-h<i>)
//! ```
//!
//! Faults are rules in the *sending* host's namespace, keyed by the peer's address, so the
//! bridge address (the store, the orchestrator) is never cut:
//! - a partition or a one-way partition: nftables `drop` (connections stay open and go silent;
//!   replies are lost after the command ran when only the way back is cut), at priority -10,
//!   before the delay's queue (a packet accepted from a queue skips the rest of its chain);
//! - loss: nftables `numgen random mod 100 < P drop`;
//! - delay with jitter: this kernel has no netem qdisc, so packets go to an NFQUEUE
//!   (`iptables-legacy ... -j NFQUEUE`) read by `relock-chaos delay` in the same namespace,
//!   which holds each one for its delay (see `delay.rs`).
//!
//! Everything is removed on drop, by the signal thread on SIGINT/SIGTERM/SIGHUP
//! ([`install_cleanup_on_signals`]), and, after a SIGKILL, by the next run's [`sweep`]: a
//! namespace whose creating process is gone is emptied and deleted with its links. Every
//! process started in a host gets `PR_SET_PDEATHSIG`, so none outlives the orchestrator.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// The names of every network made by this process and not yet removed: what the signal
/// thread removes.
static LIVE: Mutex<Vec<Names>> = Mutex::new(Vec::new());
/// Networks made by this process so far (part of their names).
static MADE: AtomicU32 = AtomicU32::new(0);
const NS_PREFIX: &str = "relock-chaos-";
const TABLE: &str = "relock_chaos";

/// What to remove for one network.
#[derive(Debug, Clone)]
struct Names {
    bridge: String,
    namespaces: Vec<String>,
    links: Vec<String>,
}

/// Whether this process can make test hosts: root, with `ip`, `nft` and `iptables-legacy`.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (network namespaces)".into());
    }
    for tool in ["ip", "nft", "iptables-legacy"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("needs {tool} (scripts/setup installs it)"));
        }
    }
    // Root without CAP_NET_ADMIN (a container) cannot make namespaces: try one.
    let probe = format!("{NS_PREFIX}probe-{}", std::process::id());
    ip(&["netns", "add", &probe]).map_err(|e| format!("cannot make a network namespace: {e}"))?;
    let _ = ip(&["netns", "del", &probe]);
    Ok(())
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

/// Runs `args` inside namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(["netns", "exec", ns]).args(args))
}

/// Runs `nft -f -` with `script` inside namespace `ns`.
fn nft(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(script.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {ns}: {}\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Kills every process in namespace `ns`.
fn kill_all_in(ns: &str) {
    if let Ok(pids) = ip(&["netns", "pids", ns]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) with a pid the kernel listed in our own test namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn remove(names: &Names) {
    for ns in &names.namespaces {
        kill_all_in(ns);
    }
    for link in &names.links {
        let _ = ip(&["link", "del", link]);
    }
    for ns in &names.namespaces {
        let _ = ip(&["netns", "del", ns]);
    }
    let _ = ip(&["link", "del", &names.bridge]);
}

/// Removes the networks of runs whose process is gone (a SIGKILLed orchestrator): their
/// namespaces (after killing what still runs there), veth links and bridges. Returns how many
/// namespaces it removed.
pub fn sweep() -> usize {
    let Ok(list) = ip(&["netns", "list"]) else {
        return 0;
    };
    let me = std::process::id();
    let mut gone: Vec<(u32, String)> = Vec::new();
    for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = ns
            .strip_prefix(NS_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && !is_chaos_process(pid) {
            gone.push((pid, ns.to_string()));
        }
    }
    for (_, ns) in &gone {
        kill_all_in(ns);
        let _ = ip(&["netns", "del", ns]);
    }
    let pids: std::collections::BTreeSet<u32> = gone.iter().map(|(p, _)| *p).collect();
    if let Ok(links) = ip(&["-o", "link", "show"]) {
        for link in links.lines().filter_map(|l| l.split(": ").nth(1)) {
            let name = link.split('@').next().unwrap_or(link);
            let owner = name
                .strip_prefix("rk")
                .and_then(|r| r.split('n').next())
                .and_then(|p| p.parse::<u32>().ok());
            if owner.is_some_and(|p| pids.contains(&p) || (p != me && !is_chaos_process(p))) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
    gone.len()
}

/// Whether `pid` is a live relock-chaos process (a reused pid of another program is not).
fn is_chaos_process(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim().starts_with("relock-chaos"))
}

/// The write end of the pipe the signal handler writes to.
static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    let byte = u8::try_from(sig).unwrap_or(0);
    // SAFETY: write(2) is async-signal-safe; one byte to a pipe we own.
    unsafe { libc::write(fd, std::ptr::addr_of!(byte).cast(), 1) };
}

/// On SIGINT, SIGTERM or SIGHUP, a thread removes every live network (killing what runs in
/// its hosts, the fenced store among them) and exits with 128 + the signal. A handler that
/// writes to a pipe, not a blocked mask: a mask would be inherited by every child (std does not
/// reset it), which then could not be stopped by SIGTERM; handlers are reset by exec.
pub fn install_cleanup_on_signals() {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a local array; sigaction with a handler that only writes to it.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return;
        }
        SIGNAL_PIPE.store(fds[1], Ordering::Relaxed);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    let read_fd = fds[0];
    thread::spawn(move || {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte from our pipe into a local.
        let n = unsafe { libc::read(read_fd, std::ptr::addr_of_mut!(byte).cast(), 1) };
        if n == 1 {
            let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|p| p.into_inner()));
            for names in &live {
                remove(names);
            }
            // The process scenarios' servers, store and workers run outside any host: they are
            // this process's children, which a signal's exit would leave running.
            let children = kill_children();
            eprintln!(
                "relock-chaos: signal {byte}: removed {} test network(s), killed {children} child process(es)",
                live.len()
            );
            std::process::exit(128 + i32::from(byte));
        }
    });
}

/// SIGKILLs every child of this process (not reaped yet, so no pid of theirs can have been
/// reused); returns how many.
fn kill_children() -> usize {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if parent_of(pid) == Some(me) {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed += 1;
        }
    }
    killed
}

/// The parent of `pid`, from `/proc/PID/stat` (the fourth field, after the name in parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Serializes the choice of a subnet between concurrent runs on the machine.
fn subnet_lock() -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("relock-chaos-net.lock"))
        .ok()?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file we own; released when the file is closed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    Some(file)
}

/// A `10.231.N.0/24` no interface of the root namespace uses yet.
fn free_subnet() -> Result<u8, String> {
    let addrs = ip(&["-4", "-o", "addr", "show"])?;
    (1..=250u8)
        .find(|n| !addrs.contains(&format!(" 10.231.{n}.")))
        .ok_or_else(|| "no free 10.231.N.0/24 subnet".into())
}

/// One test host: a network namespace with one address on the bridge.
#[derive(Debug, Clone)]
pub struct Host {
    pub index: usize,
    pub ns: String,
    pub ip: Ipv4Addr,
}

impl Host {
    /// A command that runs `program` in this host, killed if the orchestrator dies.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(program);
        // SAFETY: prctl in the child between fork and exec; async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd
    }
}

/// The test hosts of one scenario and the faults between them.
pub struct Net {
    names: Names,
    pub hosts: Vec<Host>,
    /// A host of its own for the fenced store, which no fault names (not in `hosts`): it dies
    /// with the network, whatever ends the run.
    pub store_host: Host,
    /// The root namespace's address on the bridge (the orchestrator's).
    gateway: Ipv4Addr,
    /// Delay processes started by [`Net::delay`], by host, and the queue numbers they read.
    delays: Vec<(usize, Child)>,
}

impl Net {
    /// A bridge and `n` hosts on it (at most 200), and the store's host.
    pub fn new(n: usize) -> Result<Net, String> {
        assert!(n <= 200, "at most 200 hosts");
        let _guard = subnet_lock();
        let pid = std::process::id();
        let k = MADE.fetch_add(1, Ordering::Relaxed);
        let subnet = free_subnet()?;
        let names = Names {
            bridge: format!("rk{pid}n{k}b"),
            namespaces: (1..=n + 1)
                .map(|i| format!("{NS_PREFIX}{pid}-{k}-h{i}"))
                .collect(),
            links: (1..=n + 1).map(|i| format!("rk{pid}n{k}h{i}")).collect(),
        };
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(names.clone());
        let mut net = Net {
            names,
            hosts: Vec::new(),
            store_host: Host {
                index: n,
                ns: String::new(),
                ip: Ipv4Addr::UNSPECIFIED,
            },
            gateway: Ipv4Addr::new(10, 231, subnet, 254),
            delays: Vec::new(),
        };
        net.build(subnet)?;
        net.store_host = net.hosts.pop().ok_or("no store host")?;
        Ok(net)
    }

    fn build(&mut self, subnet: u8) -> Result<(), String> {
        let bridge = self.names.bridge.clone();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.gateway),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for (i, (ns, link)) in self
            .names
            .namespaces
            .clone()
            .iter()
            .zip(self.names.links.clone())
            .enumerate()
        {
            let addr = Ipv4Addr::new(10, 231, subnet, u8::try_from(i + 1).unwrap_or(1));
            let peer = format!("{link}p");
            ip(&["netns", "add", ns])?;
            in_ns(ns, &["ip", "link", "set", "lo", "up"])?;
            ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &peer, "netns", ns])?;
            in_ns(ns, &["ip", "link", "set", &peer, "name", "eth0"])?;
            in_ns(
                ns,
                &["ip", "addr", "add", &format!("{addr}/24"), "dev", "eth0"],
            )?;
            in_ns(ns, &["ip", "link", "set", "eth0", "up"])?;
            ip(&["link", "set", &link, "master", &bridge])?;
            ip(&["link", "set", &link, "up"])?;
            nft(
                ns,
                &format!(
                    "table inet {TABLE} {{\n  chain output {{\n    type filter hook output priority -10;\n  }}\n  chain input {{\n    type filter hook input priority -10;\n  }}\n}}\n"
                ),
            )?;
            self.hosts.push(Host {
                index: i,
                ns: ns.clone(),
                ip: addr,
            });
        }
        Ok(())
    }

    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    fn rule(&mut self, from: usize, chain: &str, rule: String) -> Result<(), String> {
        let ns = self.hosts[from].ns.clone();
        nft(&ns, &format!("add rule inet {TABLE} {chain} {rule}\n"))
    }

    /// Nothing from `from` reaches `to` (packets dropped as they leave `from`); the other way
    /// still works, so `to` hears `from` never again while its own packets arrive.
    pub fn cut_one_way(&mut self, from: usize, to: usize) -> Result<(), String> {
        let to_ip = self.hosts[to].ip;
        self.rule(from, "output", format!("ip daddr {to_ip} drop"))
    }

    /// `a` and `b` hear nothing from each other.
    pub fn cut(&mut self, a: usize, b: usize) -> Result<(), String> {
        self.cut_one_way(a, b)?;
        self.cut_one_way(b, a)
    }

    /// Every host in `side` is cut from every host not in it.
    pub fn partition(&mut self, side: &[usize]) -> Result<(), String> {
        for &a in side {
            for b in 0..self.hosts.len() {
                if !side.contains(&b) {
                    self.cut(a, b)?;
                }
            }
        }
        Ok(())
    }

    /// `percent` % of the packets from `from` to `to` are lost.
    pub fn lose(&mut self, from: usize, to: usize, percent: u8) -> Result<(), String> {
        let to_ip = self.hosts[to].ip;
        self.rule(
            from,
            "output",
            format!("ip daddr {to_ip} numgen random mod 100 < {percent} drop"),
        )
    }

    /// Packets from `from` to `to` take `ms` ± `jitter_ms` longer (uniform), and `loss`
    /// percent of them are lost on the way. One delay process per sending host: a second call
    /// for the same `from` replaces nothing, it adds a destination to the same queue.
    pub fn delay(
        &mut self,
        from: usize,
        to: usize,
        ms: u64,
        jitter_ms: u64,
        loss: u8,
    ) -> Result<(), String> {
        let queue = 7u16;
        if !self.delays.iter().any(|(h, _)| *h == from) {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut child = self.hosts[from]
                .command(exe)
                .args([
                    "delay",
                    &queue.to_string(),
                    &ms.to_string(),
                    &jitter_ms.to_string(),
                    &loss.to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("delay process: {e}"))?;
            let stdout = child.stdout.take().ok_or("delay stdout")?;
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            if line.trim() != "ready" {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("delay process did not start: {line:?}"));
            }
            self.delays.push((from, child));
        }
        let ns = self.hosts[from].ns.clone();
        let to_ip = self.hosts[to].ip.to_string();
        in_ns(
            &ns,
            &[
                "iptables-legacy",
                "-A",
                "OUTPUT",
                "-d",
                &to_ip,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue.to_string(),
                // Should the delay process be gone, packets pass undelayed instead of dropped.
                "--queue-bypass",
            ],
        )
        .map(drop)
    }

    /// Removes every fault: all hosts hear each other again at full speed.
    pub fn heal(&mut self) {
        for host in &self.hosts {
            let _ = nft(
                &host.ns,
                &format!("flush chain inet {TABLE} output\nflush chain inet {TABLE} input\n"),
            );
        }
        for (h, mut child) in self.delays.drain(..) {
            let _ = in_ns(&self.hosts[h].ns, &["iptables-legacy", "-F", "OUTPUT"]);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, mut child) in self.delays.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        remove(&self.names);
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n.bridge != self.names.bridge);
    }
}

/// A redis-server with the module, in a test host, on port 6379 of its address.
pub struct NetServer {
    pub host: Host,
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<Child>,
    /// The module to load (none: a plain redis-server, the fenced store).
    module: Option<PathBuf>,
}

pub const PORT: u16 = 6379;

impl NetServer {
    /// Starts it in `host` with extra `redis-server` arguments.
    pub fn start(host: &Host, args: &[&str]) -> NetServer {
        let dir = tempfile::Builder::new()
            .prefix("relock-chaos-server-")
            .tempdir()
            .expect("temp dir");
        let mut s = NetServer {
            host: host.clone(),
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            module: Some(crate::common::module_path()),
        };
        s.boot();
        s
    }

    /// A plain redis-server (no module) in `host`: the fenced store.
    pub fn plain(host: &Host) -> NetServer {
        let dir = tempfile::Builder::new()
            .prefix("relock-chaos-store-")
            .tempdir()
            .expect("temp dir");
        let mut s = NetServer {
            host: host.clone(),
            dir,
            args: Vec::new(),
            child: None,
            module: None,
        };
        s.boot();
        s
    }

    fn boot(&mut self) {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = self
            .host
            .command(bin)
            .arg("--port")
            .arg(PORT.to_string())
            .arg("--bind")
            .arg(self.host.ip.to_string())
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--logfile")
            .arg("redis.log")
            // The hosts and the orchestrator connect from their own addresses.
            .arg("--protected-mode")
            .arg("no")
            .args(
                self.module
                    .iter()
                    .flat_map(|m| [std::ffi::OsStr::new("--loadmodule"), m.as_os_str()]),
            )
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server in a test host");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = self.try_conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "redis-server in {} exited with {status}:\n{}",
                    self.host.ns,
                    self.log()
                );
            }
            assert!(
                Instant::now() < until,
                "redis-server in {} did not answer within 30 s:\n{}",
                self.host.ns,
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// `redis://IP:6379/` as the hosts (and the orchestrator, over the bridge) reach it.
    pub fn url(&self) -> String {
        format!("redis://{}:{PORT}/", self.host.ip)
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let c =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    /// A connection from the orchestrator (over the bridge, which no fault cuts); reads and
    /// writes bounded by 5 s.
    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        self.try_conn()
    }

    /// SIGKILL, then a start with the same arguments and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.boot();
    }

    /// SIGKILLs it (and reaps it).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NetServer {
    fn drop(&mut self) {
        self.kill();
    }
}
