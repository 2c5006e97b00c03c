//! Processes of the tests that run programs (lockctl, a signal counter): a child killed and
//! reaped on drop, waits bounded in time, kill(2), what `/proc` says of a process, and the
//! signal-counting command the job-control tests run.
//!
//! A test binary that uses [`Counter`] has a test named exactly `signal_counter` at its root
//! whose body is [`signal_counter_main`].

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::eventually;

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How a program ended and everything it wrote, for an assertion's message.
pub fn shown(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        stdout(out),
        stderr(out)
    )
}

/// A child process killed (and reaped) when dropped, so that a failing test leaves nothing
/// running (lockctl's command dies with it).
pub struct Spawned(Option<Child>);

impl Spawned {
    pub fn new(cmd: &mut Command) -> Spawned {
        Spawned(Some(cmd.spawn().expect("spawn")))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }

    pub fn pid(&self) -> i32 {
        self.0.as_ref().expect("running").id() as i32
    }

    pub fn wait_within(&mut self, within: Duration) -> ExitStatus {
        wait_within(self.child(), within)
    }

    /// Its exit status if it has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child().try_wait().expect("try_wait")
    }

    /// Its output, once it has exited: [`Spawned::output_within`] [`OUTPUT_WITHIN`].
    pub fn output(self) -> Output {
        self.output_within(OUTPUT_WITHIN)
    }

    /// Its output, once it has exited within `within` (else it is killed, and the test fails).
    /// Its stdout and stderr (when piped) are read as they come; the test also fails if one of
    /// them stays open [`PIPES_CLOSE_WITHIN`] after it exited, held by a process it left
    /// behind: `wait_with_output` would wait for that process for ever.
    pub fn output_within(mut self, within: Duration) -> Output {
        let mut child = self.0.take().expect("running");
        let stdout = child.stdout.take().map(read_to_end_in_background);
        let stderr = child.stderr.take().map(read_to_end_in_background);
        let status = wait_within(&mut child, within);
        let collect = |pipe: Option<Receiver<Vec<u8>>>, name: &str| {
            pipe.map(|rx| {
                rx.recv_timeout(PIPES_CLOSE_WITHIN).unwrap_or_else(|_| {
                    panic!(
                        "its {name} is still open {PIPES_CLOSE_WITHIN:?} after it exited \
                         ({status}): a process it started holds it"
                    )
                })
            })
            .unwrap_or_default()
        };
        Output {
            status,
            stdout: collect(stdout, "stdout"),
            stderr: collect(stderr, "stderr"),
        }
    }
}

/// How long [`Spawned::output`] lets a process run before it is killed and the test fails.
pub const OUTPUT_WITHIN: Duration = Duration::from_secs(120);

/// How long a process's pipes may stay open after it exited (see [`Spawned::output_within`]).
pub const PIPES_CLOSE_WITHIN: Duration = Duration::from_secs(60);

fn read_to_end_in_background(mut pipe: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = pipe.read_to_end(&mut all);
        let _ = tx.send(all);
    });
    rx
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            // A stopped process dies of SIGKILL too, but continue it to be sure it is reaped.
            send_quietly(child.id() as i32, libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for `child` to exit, killing it (and failing) after `within`.
pub fn wait_within(child: &mut Child, within: Duration) -> ExitStatus {
    wait_until(child, within).unwrap_or_else(|| panic!("still running after {within:?}"))
}

/// Its exit status if `child` exits within `within`; else it is killed (and reaped), and None.
pub fn wait_until(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// kill(2), which must succeed.
pub fn send(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; a stale pid only makes it fail.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// kill(2), whatever it says.
pub fn send_quietly(pid: i32, sig: i32) {
    // SAFETY: as above.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T` stopped, `Z` zombie...), if the
/// process exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether `pid` still runs (a zombie waiting to be reaped does not).
pub fn is_running(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// Whether `pid` is stopped (job control or SIGSTOP).
pub fn is_stopped(pid: i32) -> bool {
    state(pid) == Some('T')
}

/// The signals the [`Counter`] command counts, by name.
pub const COUNTED: [(i32, &str); 9] = [
    (libc::SIGINT, "INT"),
    (libc::SIGTERM, "TERM"),
    (libc::SIGHUP, "HUP"),
    (libc::SIGQUIT, "QUIT"),
    (libc::SIGUSR1, "USR1"),
    (libc::SIGUSR2, "USR2"),
    (libc::SIGALRM, "ALRM"),
    (libc::SIGWINCH, "WINCH"),
    (libc::SIGCONT, "CONT"),
];

/// The command of the signal and job-control tests: the test binary, re-run as its own
/// `signal_counter` test, which calls [`signal_counter_main`].
pub struct Counter {
    dir: tempfile::TempDir,
}

impl Counter {
    pub fn new() -> Counter {
        Counter {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn command(&self) -> Vec<String> {
        let exe = std::env::current_exe().expect("test binary");
        vec![
            "env".into(),
            format!("RELOCK_TEST_SIGNAL_COUNTER={}", self.dir.path().display()),
            exe.display().to_string(),
            "signal_counter".into(),
            "--exact".into(),
            "--test-threads=1".into(),
            "-q".into(),
        ]
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits for the command to start; its pid.
    pub fn wait_ready(&self) -> i32 {
        assert!(
            eventually(Duration::from_secs(20), || self.path("pid").exists()),
            "the command did not start"
        );
        std::fs::read_to_string(self.path("pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("pid number")
    }

    /// What the command counted so far: each signal by name, and `TICK`, the rounds of its
    /// loop (it goes up every few milliseconds while the command runs).
    pub fn counts(&self) -> HashMap<String, u64> {
        std::fs::read_to_string(self.path("counts"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    pub fn count(&self, name: &str) -> u64 {
        self.counts().get(name).copied().unwrap_or(0)
    }

    pub fn ticks(&self) -> u64 {
        self.count("TICK")
    }

    /// Whether the command's loop goes on during `during`.
    pub fn runs_during(&self, during: Duration) -> bool {
        let before = self.ticks();
        std::thread::sleep(during);
        self.ticks() > before
    }

    /// Waits until the command's loop goes on.
    pub fn runs_within(&self, within: Duration) -> bool {
        let before = self.ticks();
        eventually(within, || self.ticks() > before)
    }

    /// Makes the command exit 0.
    pub fn stop(&self) {
        std::fs::write(self.path("stop"), b"").expect("stop file");
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter::new()
    }
}

/// The body of the `signal_counter` test of a test binary that uses [`Counter`]: when
/// `RELOCK_TEST_SIGNAL_COUNTER` names a directory, counts every signal of [`COUNTED`] it
/// receives (a C handler, so none is merged into another as shell traps would), writes the
/// counts and its loop's rounds to `counts` every few milliseconds, and exits 0 once the file
/// `stop` appears (or after 60 s).
pub fn signal_counter_main() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];
    extern "C" fn on_signal(sig: libc::c_int) {
        if let Some(i) = COUNTED.iter().position(|(s, _)| *s == sig) {
            COUNTS[i].fetch_add(1, Ordering::SeqCst);
        }
    }
    let Some(dir) = std::env::var_os("RELOCK_TEST_SIGNAL_COUNTER") else {
        return;
    };
    let dir = Path::new(&dir);
    for (sig, _) in COUNTED {
        // SAFETY: the handler only touches atomics, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    let write = |name: &str, text: String| {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    };
    let mut tick = 0u64;
    let counts = |tick: u64| {
        let mut fields: Vec<String> = COUNTED
            .iter()
            .zip(&COUNTS)
            .map(|((_, name), n)| format!("{name}={}", n.load(Ordering::SeqCst)))
            .collect();
        fields.push(format!("TICK={tick}"));
        fields.join(" ")
    };
    write("counts", counts(tick));
    write("pid", std::process::id().to_string());
    let started = Instant::now();
    while !dir.join("stop").exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
        tick += 1;
        write("counts", counts(tick));
    }
    write("counts", counts(tick));
    std::process::exit(0);
}

/// Kills a process when dropped: one a test's command may leave behind (on a lockctl that
/// does not end its command's whole group), which must not outlive the test.
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        send_quietly(self.0, libc::SIGKILL);
    }
}

/// What `/proc` says of `pid` and its threads and children, for a failure message: state and
/// what each waits in (`wchan`).
pub fn describe_process(pid: i32) -> String {
    let mut lines = Vec::new();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    if let [state, ppid, pgrp, session, tty, ..] = fields.as_slice() {
        lines.push(format!(
            "{pid} {state} ppid {ppid} pgrp {pgrp} session {session} tty {tty}"
        ));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    lines.extend(
        status
            .lines()
            .filter(|l| l.starts_with("Sig") || l.starts_with("ShdPnd"))
            .map(str::to_string),
    );
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for task in tasks {
        let wchan = std::fs::read_to_string(task.join("wchan")).unwrap_or_default();
        let state = std::fs::read_to_string(task.join("stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string()))
            .unwrap_or_default();
        lines.push(format!("thread {} {state} in {wchan}", task.display()));
    }
    for child in children(pid) {
        lines.push(format!(
            "child {child} {:?}: {}",
            state(child),
            std::fs::read_to_string(format!("/proc/{child}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ")
        ));
    }
    lines.join("; ")
}

/// The children of `pid` (of all its threads).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Kills `pid`'s children: what a wedged lockctl left (a child stopped before its exec).
pub fn kill_children(pid: i32) {
    for child in children(pid) {
        send_quietly(child, libc::SIGKILL);
    }
}

/// The processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let fields: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
                    // state, ppid, pgrp: a zombie waits for its parent and counts for nothing.
                    (fields.first()? != &"Z").then(|| fields.get(2)?.parse::<i32>().ok())?
                })
                == Some(pgid)
        })
        .collect()
}

/// How many lines the file at `path` has (0 when it does not exist yet).
pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The pid a command wrote to `path`, once it has.
pub fn read_pid(path: &Path) -> i32 {
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(path)
            .is_ok_and(|t| t.trim().parse::<i32>().is_ok())),
        "no pid in {}",
        path.display()
    );
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid")
}
