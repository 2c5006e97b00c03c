//! lockctl and its command as a job: job control (SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT, a
//! shell's Ctrl-Z, `fg`, `bg`), every signal lockctl can get, and the processes a command
//! starts, against real servers. The rule under test: the command never runs while nothing
//! renews its lock, and lockctl never exits leaving the lock held or the command's processes
//! running.
use crate::support;
use relock_testkit as common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{eventually, Server};
use support::pty::Pty;
use support::{
    acquire_as, force_release, holder, is_running, is_stopped, lines, lockctl, read_pid, send,
    shell, stderr, Counter, Spawned,
};

const KEY: &str = "job";

/// `lockctl run [args] KEY -- <counter>` in a process group of its own (as a shell starts a
/// job), its stderr kept.
fn run_counter(server: &Server, counter: &Counter, args: &[&str]) -> Spawned {
    Spawned::new(
        lockctl(&[server])
            // Not a test of speed: renewals on a busy machine must not lose the lock.
            .args(["--node-timeout", "1s", "run"])
            .args(args)
            .args([KEY, "--"])
            .args(counter.command())
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
}

/// SIGTSTP to lockctl stops its command too (it ran on in a group of its own, unrenewed);
/// SIGCONT continues both, the lock still held by the same owner (issue 19, problem 1).
#[test]
fn sigtstp_stops_the_command_with_lockctl_and_sigcont_continues_both() {
    stop_and_continue_with_lockctl(libc::SIGTSTP);
}

/// SIGTTIN to lockctl (what the kernel sends a background job that reads its terminal) is a
/// job-control stop like SIGTSTP: the command's group stops with lockctl, and SIGCONT
/// continues both with the lock still held.
#[test]
fn sigttin_stops_the_command_with_lockctl_and_sigcont_continues_both() {
    stop_and_continue_with_lockctl(libc::SIGTTIN);
}

/// SIGTTOU to lockctl (a background job's write to a `stty tostop` terminal) stops the
/// command's group with lockctl too, and SIGCONT continues both.
#[test]
fn sigttou_stops_the_command_with_lockctl_and_sigcont_continues_both() {
    stop_and_continue_with_lockctl(libc::SIGTTOU);
}

/// `stop` (SIGTSTP, SIGTTIN or SIGTTOU) sent to lockctl stops lockctl and its command; while
/// they are stopped the command does not run; SIGCONT continues both, the lock still held by
/// the same owner with the same token, and released when the command ends.
fn stop_and_continue_with_lockctl(stop: i32) {
    let server = Server::start();
    let counter = Counter::new();
    let mut lockctl = run_counter(&server, &counter, &["--ttl", "5s"]);
    let pid = counter.wait_ready();
    assert!(counter.runs_within(Duration::from_secs(5)));
    let (owner, token) = holder(&server, KEY).expect("held");

    send(lockctl.pid(), stop);
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(lockctl.pid())
            && is_stopped(pid)),
        "lockctl stopped: {}, its command stopped: {}",
        is_stopped(lockctl.pid()),
        is_stopped(pid)
    );
    assert!(
        !counter.runs_during(Duration::from_millis(500)),
        "the command ran while lockctl was stopped"
    );
    // The stop was passed on first, so that the command could act on it.
    assert_eq!(counter.count("CONT"), 0);

    send(lockctl.pid(), libc::SIGCONT);
    assert!(
        counter.runs_within(Duration::from_secs(10)),
        "the command was not continued"
    );
    assert!(!is_stopped(lockctl.pid()));
    assert_eq!(holder(&server, KEY), Some((owner, token)), "still held");
    counter.stop();
    let status = lockctl.wait_within(Duration::from_secs(20));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(holder(&server, KEY), None, "released");
}

/// A stop that outlasts the lock: when lockctl is continued it finds the lock lost (someone
/// else holds it by then) and ends its command without ever continuing it (issue 19,
/// problem 1: before, the command ran on during the stop and overlapped the next holder).
#[test]
fn a_lock_lost_while_stopped_ends_the_command_without_continuing_it() {
    lost_while_stopped(libc::SIGTSTP);
}

/// The same for a stop by SIGTTIN and by SIGTTOU: the command never goes on once the lock
/// lapsed during the stop.
#[test]
fn a_lock_lost_while_stopped_by_sigttin_or_sigttou_ends_the_command() {
    lost_while_stopped(libc::SIGTTIN);
    lost_while_stopped(libc::SIGTTOU);
}

/// lockctl and its command stopped by `stop` until the lock expired and another holder took
/// it: SIGCONT ends the command without continuing it, and lockctl exits 76.
fn lost_while_stopped(stop: i32) {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!("while :; do echo x >> {}; sleep 0.05; done", log.display());
    let mut lockctl = Spawned::new(
        lockctl(&[&server])
            // Four node timeouts: a renewal delayed by a busy machine does not lose the lock
            // before the stop (the stop then outlasts the ttl).
            .args([
                "--node-timeout",
                "500ms",
                "run",
                "--ttl",
                "2s",
                "--grace",
                "2s",
                KEY,
            ])
            .args(["--", "sh", "-c", &script])
            .process_group(0)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || lines(&log) >= 3));
    send(lockctl.pid(), stop);
    assert!(eventually(Duration::from_secs(10), || is_stopped(
        lockctl.pid()
    )));
    let stopped_at = lines(&log);
    // The lock expires while lockctl is stopped, and another holder takes it.
    assert!(
        eventually(Duration::from_secs(10), || acquire_as(
            &server, KEY, "next", 30_000
        )
        .is_some()),
        "the lock never expired"
    );
    assert_eq!(
        lines(&log),
        stopped_at,
        "the command ran while lockctl was stopped"
    );
    send(lockctl.pid(), libc::SIGCONT);
    let status = lockctl.wait_within(Duration::from_secs(20));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(76), "{}", stderr(&out));
    assert_eq!(
        lines(&log),
        stopped_at,
        "the command went on under someone else's lock"
    );
    assert_eq!(holder(&server, KEY).map(|h| h.0).as_deref(), Some("next"));
}

/// After a loss every process of the command's group is gone before lockctl exits 76: one
/// that ignores SIGTERM gets SIGKILL after `--grace`, even when the group's leader ended at
/// once (issue 19, problem 2: lockctl stopped waiting when the leader exited).
#[test]
fn after_a_loss_every_process_of_the_group_is_gone_before_lockctl_exits() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (log, pid_file) = (dir.path().join("log"), dir.path().join("pid"));
    // The leader dies of SIGTERM; the loop it started ignores it.
    let script = format!(
        "(trap '' TERM; while :; do echo x >> {0}; sleep 0.05; done) & echo $! > {1}; wait",
        log.display(),
        pid_file.display()
    );
    // Not a pipe: a process that outlives lockctl would keep it open.
    let err_file = dir.path().join("stderr");
    let mut lockctl = Spawned::new(
        lockctl(&[&server])
            .args([
                "run", "--ttl", "10s", "--grace", "1s", KEY, "--", "sh", "-c", &script,
            ])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_file).expect("stderr file")),
    );
    let member = read_pid(&pid_file);
    let _cleanup = support::KillOnDrop(member);
    assert!(eventually(Duration::from_secs(20), || lines(&log) >= 2));
    force_release(&server, KEY);
    let lost = Instant::now();
    let status = lockctl.wait_within(Duration::from_secs(30));
    let exited = Instant::now();
    let member_ran = is_running(member);
    let err = std::fs::read_to_string(&err_file).unwrap_or_default();
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(
        !member_ran,
        "a process of the command's group outlived lockctl: {err}"
    );
    assert!(
        exited - lost >= Duration::from_millis(900),
        "exited {:?} after the loss, before --grace",
        exited - lost
    );
    let after = lines(&log);
    // The loop wrote every 50 ms: a window in which a survivor would write.
    common::wait_out_ttl(Duration::from_millis(300));
    assert_eq!(lines(&log), after, "the loop still writes");
}

/// A process the command leaves behind in its group still works under the lock: lockctl
/// holds it (renewing) until that process ends too, and only then releases and exits with
/// the command's status.
#[test]
fn the_lock_is_held_until_the_processes_the_command_left_end() {
    const TTL: Duration = Duration::from_secs(3);
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (go, done) = (dir.path().join("go"), dir.path().join("done"));
    // The process left behind works until the test says so, after the lock outlived its ttl.
    let script = format!(
        "(while [ ! -e {} ]; do sleep 0.05; done; echo done > {}) & exit 3",
        go.display(),
        done.display()
    );
    let err_file = dir.path().join("stderr");
    let mut lockctl = Spawned::new(
        lockctl(&[&server])
            .args(["--node-timeout", "1s", "run", "--ttl", "3s", KEY])
            .args(["--", "sh", "-c", &script])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_file).expect("stderr file")),
    );
    assert!(eventually(Duration::from_secs(20), || holder(&server, KEY).is_some()));
    let owner = holder(&server, KEY).expect("held");
    let seen = Instant::now();
    // Renewed meanwhile: held past its ttl, by the same owner, lockctl still there, at every
    // look during a ttl and a third (which has to run its length: the point is the ttl).
    while seen.elapsed() < TTL + TTL / 3 {
        assert!(
            lockctl.try_status().is_none(),
            "lockctl exited while a process of its command still ran: {}",
            std::fs::read_to_string(&err_file).unwrap_or_default()
        );
        assert_eq!(holder(&server, KEY), Some(owner.clone()));
        common::wait_out_ttl(Duration::from_millis(50));
    }
    std::fs::write(&go, b"").expect("go");
    let status = lockctl.wait_within(Duration::from_secs(20));
    let err = std::fs::read_to_string(&err_file).unwrap_or_default();
    assert!(done.exists(), "lockctl exited before the process: {err}");
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("still run"), "{err}");
    assert_eq!(holder(&server, KEY), None, "released");
}

/// Every signal that is the command's to decide on reaches it once through lockctl, which
/// goes on, and releases when the command ends (issue 19, problem 3: SIGQUIT, SIGUSR1 and
/// SIGUSR2 killed lockctl and left the lock held).
#[test]
fn signals_for_the_command_reach_it_once_and_lockctl_goes_on() {
    let server = Server::start();
    let counter = Counter::new();
    let mut lockctl = run_counter(&server, &counter, &[]);
    counter.wait_ready();
    let passed = [
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
        (libc::SIGALRM, "ALRM"),
        (libc::SIGWINCH, "WINCH"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGINT, "INT"),
        (libc::SIGTERM, "TERM"),
    ];
    for (sig, name) in passed {
        send(lockctl.pid(), sig);
        assert!(
            eventually(Duration::from_secs(5), || counter.count(name) >= 1),
            "{name} did not reach the command: {:?}; lockctl {:?}",
            counter.counts(),
            lockctl.try_status()
        );
    }
    // Apart, so that no two could merge: each arrived once, and no second one comes within
    // this window.
    common::wait_out_ttl(Duration::from_millis(300));
    for (_, name) in passed {
        assert_eq!(counter.count(name), 1, "{name}: {:?}", counter.counts());
    }
    assert!(lockctl.try_status().is_none(), "lockctl died");
    assert!(holder(&server, KEY).is_some());
    counter.stop();
    let status = lockctl.wait_within(Duration::from_secs(20));
    let out = lockctl.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(holder(&server, KEY), None, "released");
}

/// A signal that ends a process, arriving at any moment of lockctl's start (waiting, granted,
/// starting the command), never leaves the lock held: lockctl releases and dies of it.
#[test]
fn a_signal_at_any_moment_of_the_start_never_strands_the_lock() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stranded = Vec::new();
    for sig in [libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM] {
        for delay_ms in (0..20).map(|i| i * 4) {
            // lockctl's debug log, to say what it was doing if it does not end.
            let log_path = dir.path().join(format!("lockctl-{sig}-{delay_ms}.log"));
            let log = std::fs::File::create(&log_path).expect("log file");
            let mut cmd = lockctl(&[&server]);
            // The signal at its default, whatever this test inherited: a background job of a
            // non-interactive shell starts with SIGQUIT ignored, and an inherited ignore holds
            // until lockctl's handler (a SIGQUIT at 0 ms was then dropped).
            // SAFETY: signal(2) is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    libc::signal(sig, libc::SIG_DFL);
                    Ok(())
                });
            }
            let mut lockctl = Spawned::new(
                cmd.env("RELOCK_LOG", "debug")
                    .args(["run", "--ttl", "60s", KEY, "--", "sleep", "30"])
                    .process_group(0)
                    .stdout(Stdio::null())
                    .stderr(log),
            );
            std::thread::sleep(Duration::from_millis(delay_ms)); // the signal's moment (not a wait)
            send(lockctl.pid(), sig);
            if !eventually(Duration::from_secs(15), || lockctl.try_status().is_some()) {
                let pid = lockctl.pid();
                let state = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| {
                        l.starts_with("State") || l.starts_with("Sig") || l.starts_with("Shd")
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                panic!(
                    "signal {sig} after {delay_ms} ms: lockctl still runs after 15 s ({state}); \
                     its threads and children: {}; its log:\n{}",
                    threads_and_children(pid),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            let status = lockctl.wait_within(Duration::from_secs(1));
            // Before the command ran: dead of the signal; after: the command's status (the
            // signal passed on killed `sleep`).
            assert!(
                status.signal() == Some(sig) || status.code() == Some(128 + sig),
                "{sig} after {delay_ms} ms: {status:?}"
            );
            if !eventually(Duration::from_secs(2), || holder(&server, KEY).is_none()) {
                stranded.push((sig, delay_ms));
                force_release(&server, KEY);
            }
        }
    }
    assert!(
        stranded.is_empty(),
        "(signal, ms) left the lock held: {stranded:?}"
    );
}

/// What `pid`'s threads wait in (`wchan`) and which children it has, with theirs: what a
/// process that does not end is doing.
fn threads_and_children(pid: i32) -> String {
    let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().into_owned();
            out.push(format!(
                "thread {tid} {} in {}",
                read(format!("/proc/{pid}/task/{tid}/comm")).trim(),
                read(format!("/proc/{pid}/task/{tid}/wchan"))
            ));
        }
    }
    if let Ok(all) = std::fs::read_dir("/proc") {
        for p in all.flatten() {
            let name = p.file_name().to_string_lossy().into_owned();
            let stat = read(format!("/proc/{name}/stat"));
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.get(1) == Some(&pid.to_string().as_str()) {
                out.push(format!(
                    "child {name} [{}] state {} in {}",
                    read(format!("/proc/{name}/cmdline"))
                        .replace('\0', " ")
                        .trim(),
                    fields[0],
                    read(format!("/proc/{name}/wchan"))
                ));
            }
        }
    }
    out.join("; ")
}

/// Job control at any moment of the start: while lockctl acquires and starts its command and
/// its watchdog (a process that, until it moves to a group of its own, is in lockctl's
/// process group), lockctl's group is stopped and continued over and over, as a shell's
/// `kill -TSTP %1` / `kill -CONT %1` would. lockctl must come through every time: run the
/// command, exit with its status, release. (A stop that reached the watchdog between its
/// fork and its exec stopped it there, and lockctl, which waited for that exec, hung for
/// good while its guard renewed the lock forever.)
#[test]
fn stops_and_continues_at_any_moment_of_the_start_never_wedge_lockctl() {
    const ROUNDS: usize = 25;
    let server = Server::start();
    let mut wedged = Vec::new();
    for round in 0..ROUNDS {
        let mut lockctl = Spawned::new(
            lockctl(&[&server])
                .args([
                    "--node-timeout",
                    "1s",
                    "run",
                    "--ttl",
                    "10s",
                    KEY,
                    "--",
                    "true",
                ])
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let group = lockctl.pid();
        let hammer_until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < hammer_until && lockctl.try_status().is_none() {
            support::send_quietly(-group, libc::SIGTSTP);
            support::send_quietly(-group, libc::SIGCONT);
        }
        // Each stop it got stops it once more: continue it until it ends.
        let ended = eventually(Duration::from_secs(20), || {
            support::send_quietly(-group, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(20)); // the continues' pace (not a wait)
            lockctl.try_status().is_some()
        });
        if !ended {
            wedged.push((round, support::describe_process(group)));
            support::kill_children(group);
            continue;
        }
        let status = lockctl.try_status().expect("ended");
        assert_eq!(status.code(), Some(0), "round {round}: {status:?}");
        assert!(
            eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()),
            "round {round}: the lock was left held"
        );
    }
    assert!(wedged.is_empty(), "lockctl hung in rounds {wedged:?}");
}

/// SIGSTOP cannot be handled: the watchdog stops the command while lockctl is stopped, and
/// lockctl continues it once continued itself, after checking the lock.
#[test]
fn sigstop_of_lockctl_stops_its_command_too() {
    let server = Server::start();
    let counter = Counter::new();
    let mut lockctl = run_counter(&server, &counter, &["--ttl", "8s"]);
    let pid = counter.wait_ready();
    assert!(counter.runs_within(Duration::from_secs(5)));
    send(lockctl.pid(), libc::SIGSTOP);
    assert!(
        eventually(Duration::from_secs(5), || is_stopped(pid)),
        "the command runs while lockctl is stopped"
    );
    // Continued behind lockctl's back, it is stopped again.
    send(pid, libc::SIGCONT);
    assert!(eventually(Duration::from_secs(5), || is_stopped(pid)));
    assert!(!counter.runs_during(Duration::from_millis(300)));
    send(lockctl.pid(), libc::SIGCONT);
    assert!(counter.runs_within(Duration::from_secs(10)));
    counter.stop();
    let status = lockctl.wait_within(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", stderr(&lockctl.output()));
    assert_eq!(holder(&server, KEY), None);
}

/// SIGKILL cannot be handled: the parent-death signal ends the command's first process, and
/// the watchdog every other process of its group.
#[test]
fn sigkill_of_lockctl_ends_the_whole_group() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let mut lockctl = Spawned::new(
        lockctl(&[&server])
            .args(["run", KEY, "--", "sh", "-c", &script])
            .process_group(0)
            .stderr(Stdio::null()),
    );
    let member = read_pid(&pid_file);
    let _cleanup = support::KillOnDrop(member);
    assert!(is_running(member));
    send(lockctl.pid(), libc::SIGKILL);
    lockctl.wait_within(Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(5), || !is_running(member)),
        "a process of the command outlived lockctl's SIGKILL"
    );
}

/// SIGKILL of lockctl at any moment of the start leaves no process of its command running:
/// the watchdog starts before the command, which tells it its group before it runs anything
/// (before, a SIGKILL between the command's start and the watchdog's left the processes the
/// command had started running without the lock).
#[test]
fn sigkill_at_any_moment_of_the_start_leaves_no_process_of_the_command() {
    let server = Server::start();
    let mut survivors = Vec::new();
    for delay_ms in (0..40).map(|i| i * 3) {
        let dir = tempfile::tempdir().expect("tempdir");
        let leader_file = dir.path().join("leader");
        // The leader says who it is before it starts anything.
        let script = format!(
            "echo $$ > {}; sleep 300 & sleep 300 & wait",
            leader_file.display()
        );
        let mut lockctl = Spawned::new(
            lockctl(&[&server])
                .args(["run", "--ttl", "60s", KEY, "--", "sh", "-c", &script])
                .process_group(0)
                .stderr(Stdio::null()),
        );
        std::thread::sleep(Duration::from_millis(delay_ms)); // the kill's moment (not a wait)
        send(lockctl.pid(), libc::SIGKILL);
        lockctl.wait_within(Duration::from_secs(10));
        let leader: Option<i32> = std::fs::read_to_string(&leader_file)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        if let Some(leader) = leader {
            if !eventually(Duration::from_secs(5), || {
                support::group_members(leader).is_empty()
            }) {
                let members = support::group_members(leader);
                for m in &members {
                    support::send_quietly(*m, libc::SIGKILL);
                }
                survivors.push((delay_ms, members));
            }
        }
        force_release(&server, KEY);
    }
    assert!(
        survivors.is_empty(),
        "(ms, processes) of the command outlived lockctl's SIGKILL: {survivors:?}"
    );
}

fn shell_line(counter: &Counter, ttl: &str) -> String {
    let words: Vec<String> = counter
        .command()
        .into_iter()
        .map(|w| format!("'{w}'"))
        .collect();
    format!(
        "\"$LOCKCTL\" --node-timeout 1s run --ttl {ttl} {KEY} -- {}",
        words.join(" ")
    )
}

/// Ctrl-Z at a shell stops the job, lockctl and its command, and gives the shell back; `fg`
/// continues both, the command with the terminal (it gets the next Ctrl-C); Ctrl-\ reaches
/// only the command, once, and lockctl goes on and releases when it ends.
#[test]
fn ctrl_z_fg_and_ctrl_backslash_at_a_shell() {
    let server = Server::start();
    let counter = Counter::new();
    let mut sh = shell(&server);
    sh.type_keys(format!("{}\n", shell_line(&counter, "5s")).as_bytes());
    let pid = counter.wait_ready();
    assert!(counter.runs_within(Duration::from_secs(5)));
    sh.type_keys(b"\x1a");
    sh.expect("Stopped", Duration::from_secs(10));
    assert!(eventually(Duration::from_secs(5), || is_stopped(pid)));
    assert!(!counter.runs_during(Duration::from_millis(300)));
    sh.type_keys(b"fg\n");
    assert!(
        counter.runs_within(Duration::from_secs(10)),
        "not continued"
    );
    // The command has the terminal again: Ctrl-\ and Ctrl-C reach it, once each, and
    // lockctl, which does not get them, goes on.
    sh.type_keys(b"\x1c");
    assert!(eventually(Duration::from_secs(5), || counter.count("QUIT") == 1));
    sh.type_keys(b"\x03");
    assert!(eventually(Duration::from_secs(5), || counter.count("INT") == 1));
    // A second of either would come within this window: none may.
    common::wait_out_ttl(Duration::from_millis(300));
    assert_eq!((counter.count("QUIT"), counter.count("INT")), (1, 1));
    assert!(
        holder(&server, KEY).is_some(),
        "lockctl died: {}",
        sh.printed()
    );
    counter.stop();
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert_eq!(holder(&server, KEY), None, "released");
}

/// A background job stopped with `kill -TSTP %1` (what a shell's Ctrl-Z does to a job):
/// lockctl and its command stop, and `fg` continues them (issue 19, problem 1: the command,
/// in a group of its own, ran on).
#[test]
fn kill_tstp_to_a_background_job_stops_its_command() {
    let server = Server::start();
    let counter = Counter::new();
    let mut sh = shell(&server);
    sh.type_keys(format!("{} &\n", shell_line(&counter, "5s")).as_bytes());
    let pid = counter.wait_ready();
    assert!(counter.runs_within(Duration::from_secs(5)));
    sh.type_keys(b"kill -TSTP %1\n");
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(pid)),
        "the command runs on: {}",
        sh.printed()
    );
    assert!(!counter.runs_during(Duration::from_millis(300)));
    // The shell sees its job, lockctl, stopped.
    until_the_shell_sees_it_stopped(&mut sh);
    sh.type_keys(b"fg\n");
    assert!(
        counter.runs_within(Duration::from_secs(10)),
        "not continued"
    );
    counter.stop();
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert_eq!(holder(&server, KEY), None, "released");
}

/// `lockctl run ... -- sh -c SCRIPT &` at `sh`, the shell, in the background: SCRIPT gets
/// the pid of its shell in `$PID_FILE` first.
fn start_in_the_background(sh: &mut Pty, dir: &Path, script: &str) -> i32 {
    let pid_file = dir.join("pid");
    let line = format!(
        "\"$LOCKCTL\" --node-timeout 1s run --ttl 5s {KEY} -- sh -c 'echo $$ > {}; {script}' &\n",
        pid_file.display()
    );
    sh.type_keys(line.as_bytes());
    read_pid(&pid_file)
}

/// Waits until the shell reports its job (lockctl) stopped, asking with `jobs`.
fn until_the_shell_sees_it_stopped(sh: &mut Pty) {
    assert!(
        eventually(Duration::from_secs(10), || {
            sh.type_keys(b"jobs\n");
            std::thread::sleep(Duration::from_millis(100)); // spaces the questions (not a wait)
            sh.printed().contains("Stopped")
        }),
        "{}",
        sh.printed()
    );
}

/// A command that reads the terminal from the background gets SIGTTIN from the kernel and
/// stops: lockctl stops with it, so the shell sees its job stopped (and nothing renews for a
/// command that runs unseen); `fg` continues both after a renewal, the command with the
/// terminal, and it reads what is typed.
#[test]
fn a_background_command_reading_the_terminal_stops_the_job_until_fg() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let mut sh = shell(&server);
    let pid = start_in_the_background(
        &mut sh,
        dir.path(),
        &format!("read line; echo \"got $line\" > {}", out.display()),
    );
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(pid)),
        "the command was not stopped by its read: {}",
        sh.printed()
    );
    until_the_shell_sees_it_stopped(&mut sh);
    let held = holder(&server, KEY).expect("held while stopped");
    sh.type_keys(b"fg\n");
    assert!(
        eventually(Duration::from_secs(10), || !is_stopped(pid)),
        "not continued: {}",
        sh.printed()
    );
    sh.type_keys(b"typed at the terminal\n");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&out)
            .is_ok_and(|t| t.contains("got typed at the terminal"))),
        "the command did not get the terminal: {}",
        sh.printed()
    );
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert!(!is_running(pid));
    assert_eq!(holder(&server, KEY), None, "released");
    // Held by the same owner from the grant to the release: never lapsed and taken again.
    assert_eq!(
        relock_testkit::info_field(&mut server.conn(), "acquired_total"),
        1,
        "held by {held:?}, then acquired again"
    );
}

/// With `stty tostop`, a command that writes to the terminal from the background gets
/// SIGTTOU and stops: lockctl stops with it, and `fg` continues both; the write then goes
/// through.
#[test]
fn a_background_command_writing_to_a_tostop_terminal_stops_the_job_until_fg() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sh = shell(&server);
    sh.type_keys(b"stty tostop\n");
    // The shell expands it only when it runs: what the terminal echoed as typed is not it.
    let pid = start_in_the_background(&mut sh, dir.path(), "echo written-$((6 * 7))");
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(pid)),
        "the command was not stopped by its write: {}",
        sh.printed()
    );
    until_the_shell_sees_it_stopped(&mut sh);
    assert!(!sh.printed().contains("written-42"), "{}", sh.printed());
    assert!(holder(&server, KEY).is_some(), "held while stopped");
    sh.type_keys(b"fg\n");
    sh.expect("written-42", Duration::from_secs(10));
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert!(!is_running(pid));
    assert_eq!(holder(&server, KEY), None, "released");
    assert_eq!(
        relock_testkit::info_field(&mut server.conn(), "acquired_total"),
        1
    );
}

/// A job stopped by its terminal whose shell then goes away: lockctl in the background, its
/// own output to a `stty tostop` terminal stopping it (SIGTTOU, several times over, from the
/// kernel), and the shell killed. The kernel continues an orphaned stopped group and hangs it
/// up; lockctl must then end (of the hang-up, releasing what it was granted), not stop again
/// for good on a terminal stop it had not read yet: the kernel drops those for an orphaned
/// group, as nothing is left to continue it. The command (`sleep 30`) outlives lockctl's first
/// write, which its writer thread makes when it gets to it: with `true`, in a fresh make test
/// at load 8, lockctl had run and released before it wrote, and was never stopped. It also
/// outlives the 10 s in which lockctl must end of the hang-up.
#[test]
fn a_job_stopped_by_its_terminal_ends_when_its_shell_is_gone() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("lockctl");
    let mut sh = shell(&server);
    sh.type_keys(b"stty tostop\n");
    let line = format!(
        "RELOCK_LOG=debug \"$LOCKCTL\" run --ttl 30s {KEY} -- sleep 30 & echo $! > {}\n",
        pid_file.display()
    );
    sh.type_keys(line.as_bytes());
    let pid = read_pid(&pid_file);
    let _cleanup = support::KillOnDrop(pid);
    // Stopped as a whole, as the shell sees it (a shell that dies while the job's threads are
    // still stopping one by one leaves it stopped for good: the kernel continues only groups
    // already stopped when they are orphaned).
    until_the_shell_sees_it_stopped(&mut sh);
    assert!(is_stopped(pid), "{}", sh.printed());
    send(sh.child.pid(), libc::SIGKILL);
    if !eventually(Duration::from_secs(10), || !is_running(pid)) {
        let printed = sh.printed();
        let tail: String = printed
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        panic!(
            "lockctl lives on without its shell: {}\nit last printed:\n{tail}",
            support::describe_process(pid)
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || holder(&server, KEY).is_none()),
        "the lock was left held"
    );
}

/// In an orphaned process group (a new session: what a service manager starts), the kernel
/// would not stop lockctl on SIGTSTP; lockctl stops anyway (with SIGSTOP), since its command is
/// stopped and it must not renew for it unseen, and goes on with it on SIGCONT.
#[test]
fn sigtstp_stops_lockctl_in_an_orphaned_group_too() {
    let server = Server::start();
    let counter = Counter::new();
    let mut cmd = lockctl(&[&server]);
    cmd.args(["--node-timeout", "1s", "run", "--ttl", "5s", KEY, "--"])
        .args(counter.command())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut lockctl = Spawned::new(&mut cmd);
    let pid = counter.wait_ready();
    assert!(counter.runs_within(Duration::from_secs(5)));
    send(lockctl.pid(), libc::SIGTSTP);
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(lockctl.pid())
            && is_stopped(pid)),
        "lockctl stopped: {}, its command stopped: {}",
        is_stopped(lockctl.pid()),
        is_stopped(pid)
    );
    send(lockctl.pid(), libc::SIGCONT);
    assert!(counter.runs_within(Duration::from_secs(10)));
    counter.stop();
    let status = lockctl.wait_within(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", stderr(&lockctl.output()));
}
