//! Attacks on lockctl and relock-client (job control, signals, process trees, half-open and
//! slow connections, misconfiguration). Each test says what it attacks and what must hold.
//! Every break these attacks found is fixed: they stay as regression tests.
use crate::support;
use relock_testkit as common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{eventually, Server};
use support::proxy::Proxy;
use support::{
    acquire_as, force_release, holder, is_running, is_stopped, lines, lockctl, lockctl_at,
    read_pid, send, send_quietly, shell, stderr, KillOnDrop, Spawned,
};

/// Takes `key` on `server` as `owner` as soon as it is free (at most `within`); when.
fn intrude(server: &Server, key: &str, owner: &str, within: Duration) -> Option<Instant> {
    let mut taken = None;
    eventually(within, || {
        taken = acquire_as(server, key, owner, 60_000).map(|_| Instant::now());
        taken.is_some()
    });
    taken
}

/// **Job control vs a lost lock: the command runs on after the lock's validity ended.**
///
/// SIGTSTP to lockctl while its command ignores SIGTSTP (a program that saves its work first,
/// or `trap '' TSTP`): lockctl passes the stop on and waits up to a second for the command to
/// stop before it sends SIGSTOP. Meanwhile the lock's renewals go unanswered (a half-open
/// connection), its validity runs out, and another client takes the key. What must hold
/// (docs/client.md, exit 76: "its process group got SIGTERM no later than the lock's validity
/// ended"): the command never runs once the other client holds the key.
#[test]
fn a_stop_ignored_by_the_command_does_not_let_it_outlive_the_lock() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = dir.path().join("ticks");
    let key = "stop-window";
    let mut lockctl = Spawned::new(
        lockctl_at(&proxy.url())
            .args([
                "--node-timeout",
                "100ms",
                "run",
                "--ttl",
                "600ms",
                "--grace",
                "1s",
            ])
            .args([key, "--", "sh", "-c"])
            .arg(format!(
                "trap '' TSTP; while :; do echo x >> {}; sleep 0.01; done",
                ticks.display()
            ))
            .process_group(0)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || lines(&ticks) > 3));
    assert!(holder(&server, key).is_some());
    // Renewals from now on go unanswered: the lock expires on the server within its ttl.
    proxy.silence_all();
    send(lockctl.pid(), libc::SIGTSTP);
    let taken = intrude(&server, key, "intruder", Duration::from_secs(3)).expect("expired");
    let at_take = lines(&ticks);
    // A window in which the command, had it run on, would write (every 10 ms), longer than
    // the second lockctl gives it to stop.
    common::wait_out_ttl(Duration::from_millis(1500));
    let after = lines(&ticks);
    let ran_for = taken.elapsed();
    // Whatever happened, end it: continue lockctl, which must now find the lock lost.
    send_quietly(lockctl.pid(), libc::SIGCONT);
    let status = lockctl.wait_within(Duration::from_secs(30));
    let out = lockctl.output();
    // A line or two may be in flight at the moment of the take.
    assert!(
        after <= at_take + 2,
        "the command wrote {} lines in the {ran_for:?} after another client took {key} \
         (lockctl status {status:?}): {}",
        after - at_take,
        stderr(&out)
    );
    assert_eq!(status.code(), Some(76), "{}", stderr(&out));
}

/// **Process trees, lockctl SIGKILLed on a busy machine: the kernel's hang-up must not take the
/// leader first.**
///
/// A SIGKILLed lockctl's socket closes before the kernel gives its children to init, and in
/// that step the kernel sends SIGHUP and SIGCONT to each child's group that becomes orphaned
/// with a stopped member. A watchdog that stopped the command's group in between got its
/// leader (`sh`) killed by that SIGHUP before it looked at what the leader had started, and
/// GNU `timeout` (a group of its own) went to init, running on without the lock. It needs
/// lockctl to be preempted in its exit: 6 runs in 60 with one core busy (`yes`), none on an
/// idle machine. So this test keeps a core busy itself and kills lockctl 20 times; every time,
/// nothing of the command may be left.
#[test]
fn processes_in_another_group_die_with_a_killed_lockctl_on_a_busy_machine() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let busy = Busy::start();
    for round in 0..20 {
        let key = format!("busy-tree-{round}");
        let pidfile = dir.path().join(format!("job-{round}"));
        let (mut lockctl, job) = run_under_timeout(&server, &["--ttl", "5s"], &key, &pidfile);
        let _cleanup = KillOnDrop(job);
        send(lockctl.pid(), libc::SIGKILL);
        let _ = lockctl.wait_within(Duration::from_secs(10));
        assert!(
            eventually(Duration::from_secs(10), || !is_running(job)),
            "round {round}: the command's job ({job}, under GNU timeout) still runs after \
             lockctl was killed"
        );
    }
    drop(busy);
}

/// `lockctl run OPTIONS key -- sh -c "timeout 100 sh -c '...; exec sleep 100'; echo done"`:
/// GNU `timeout` puts itself and the job in a process group of their own (a usual cron line).
/// Returns lockctl and the job's pid, once the job runs (it writes its pid to `pidfile`).
fn run_under_timeout(
    server: &Server,
    options: &[&str],
    key: &str,
    pidfile: &std::path::Path,
) -> (Spawned, i32) {
    let lockctl = Spawned::new(
        lockctl(&[server])
            .arg("run")
            .args(options)
            .args([key, "--", "sh", "-c"])
            .arg(format!(
                "timeout 100 sh -c 'echo $$ > {}; exec sleep 100'; echo done",
                pidfile.display()
            ))
            .process_group(0)
            .stderr(Stdio::piped()),
    );
    (lockctl, read_pid(pidfile))
}

/// A thread that keeps one core busy until dropped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start() -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Busy {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// **Process trees: a process the command starts in a process group of its own (GNU
/// `timeout`, `set -m`, any job-control shell) outlives a lost lock and a killed lockctl.**
///
/// `sh -c 'timeout 100 ./job'` is a usual cron line; `timeout` puts itself and `./job` in a
/// new process group (setpgid, not setsid) of lockctl's session. What must hold (docs/client.md:
/// "After a loss every process of the command's group is gone before lockctl exits 76", the
/// watchdog "kills the whole group (SIGKILL) if lockctl dies"; only processes that left "with
/// setsid" are excluded): once lockctl has exited 76, or was SIGKILLed, no process of the
/// command still runs.
#[test]
fn processes_the_command_moves_to_another_group_die_with_the_lock() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let key = "tree";
    for kill_lockctl in [false, true] {
        let pidfile = dir.path().join(format!("job-{kill_lockctl}"));
        let (mut lockctl, job) =
            run_under_timeout(&server, &["--ttl", "3s", "--grace", "500ms"], key, &pidfile);
        let _cleanup = KillOnDrop(job);
        if kill_lockctl {
            send(lockctl.pid(), libc::SIGKILL);
            let _ = lockctl.wait_within(Duration::from_secs(10));
        } else {
            force_release(&server, key);
            acquire_as(&server, key, "intruder", 60_000).expect("free after force-release");
            let status = lockctl.wait_within(Duration::from_secs(30));
            assert_eq!(status.code(), Some(76));
        }
        // The watchdog ticks every 20 ms; a busy machine may delay it: bounded by the event.
        assert!(
            eventually(Duration::from_secs(10), || !is_running(job)),
            "kill_lockctl={kill_lockctl}: the command's job ({job}) still runs after lockctl is \
             gone; the lock is {:?}",
            holder(&server, key)
        );
        force_release(&server, key);
    }
}

/// A signal's name, for messages.
fn sig_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "INT",
        libc::SIGTERM => "TERM",
        libc::SIGHUP => "HUP",
        libc::SIGQUIT => "QUIT",
        libc::SIGUSR1 => "USR1",
        libc::SIGALRM => "ALRM",
        libc::SIGWINCH => "WINCH",
        libc::SIGTSTP => "TSTP",
        libc::SIGTTIN => "TTIN",
        libc::SIGTTOU => "TTOU",
        libc::SIGCONT => "CONT",
        libc::SIGSTOP => "STOP",
        libc::SIGKILL => "KILL",
        _ => "other",
    }
}

/// **Every catchable signal (and SIGSTOP) at a random moment of a run** (16 rounds;
/// `ATTACK_ROUNDS=200` for a longer run): during the wait for
/// a held lock, at the grant, at the command's start, while it runs, as it ends and during
/// the release. A stop is followed by SIGCONT 150 ms later.
///
/// What must hold, every time: lockctl exits within bounded time (never left stopped or
/// hanging), never panics (101), leaves the lock free (released, not left to its ttl), and
/// leaves no process of its command running.
#[test]
fn signals_at_random_moments_never_strand_the_lock_or_the_command() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let signals = [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGALRM,
        libc::SIGWINCH,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGCONT,
        libc::SIGSTOP,
    ];
    let rounds: usize = std::env::var("ATTACK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(16);
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    for round in 0..rounds {
        let key = format!("sig-{round}");
        // Half the time someone holds it for a moment, so that lockctl waits first.
        if rng.bool() {
            acquire_as(&server, &key, "before", 150).expect("free");
        }
        let pidfile = dir.path().join(format!("pid-{round}"));
        let mut lockctl = Spawned::new(
            lockctl(&[&server])
                .args([
                    "--node-timeout",
                    "1s",
                    "run",
                    "--ttl",
                    "3s",
                    "--grace",
                    "1s",
                ])
                .args([&key, "--", "sh", "-c"])
                .arg(format!("echo $$ > {}; sleep 0.3", pidfile.display()))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let sig = signals[rng.usize(..signals.len())];
        let delay = Duration::from_millis(rng.u64(0..700));
        std::thread::sleep(delay); // the signal's random moment (not a wait)
        send_quietly(lockctl.pid(), sig);
        let what = format!(
            "seed {seed} round {round}: SIG{} after {delay:?}",
            sig_name(sig)
        );
        if matches!(
            sig,
            libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU | libc::SIGSTOP
        ) {
            // The stop lasts 150 ms, a stall the test imposes.
            common::wait_out_ttl(Duration::from_millis(150));
            send_quietly(lockctl.pid(), libc::SIGCONT);
        }
        let mut status = None;
        eventually(Duration::from_secs(20), || {
            status = lockctl.try_status();
            status.is_some()
        });
        let Some(status) = status else {
            let state = support::describe_process(lockctl.pid());
            panic!("{what}: lockctl still runs after 20 s: {state}");
        };
        let out = lockctl.output();
        assert_ne!(
            status.code(),
            Some(101),
            "{what}: panicked: {}",
            stderr(&out)
        );
        assert_eq!(
            holder(&server, &key)
                .map(|(o, _)| o)
                .filter(|o| o != "before"),
            None,
            "{what}: lockctl exited ({status:?}) with the lock held: {}",
            stderr(&out)
        );
        if let Ok(text) = std::fs::read_to_string(&pidfile) {
            if let Ok(pid) = text.trim().parse::<i32>() {
                let _cleanup = KillOnDrop(pid);
                assert!(
                    eventually(Duration::from_millis(300), || !is_running(pid)),
                    "{what}: the command ({pid}) outlived lockctl ({status:?}): {}",
                    stderr(&out)
                );
            }
        }
    }
}

/// **SIGKILL of lockctl at a random moment** (waiting, starting, running, releasing; 8
/// rounds, `ATTACK_ROUNDS` for more).
///
/// What must hold (docs/client.md, "What lockctl cannot handle"): no process of the command
/// outlives lockctl (the watchdog and the parent-death signal end them), and the lock is free
/// again within its ttl.
#[test]
fn sigkill_at_random_moments_leaves_nothing_running_beyond_the_ttl() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    const TTL: Duration = Duration::from_millis(1500);
    let rounds: usize = std::env::var("ATTACK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(8);
    for round in 0..rounds {
        let key = format!("kill-{round}");
        if rng.bool() {
            acquire_as(&server, &key, "before", 150).expect("free");
        }
        let pidfile = dir.path().join(format!("pid-{round}"));
        let mut lockctl = Spawned::new(
            lockctl(&[&server])
                .args(["--node-timeout", "1s", "run", "--ttl", "1500ms"])
                .args([&key, "--", "sh", "-c"])
                .arg(format!(
                    "sleep 30 & echo $! > {}; sleep 0.3; kill $!",
                    pidfile.display()
                ))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let delay = Duration::from_millis(rng.u64(0..700));
        std::thread::sleep(delay); // the kill's random moment (not a wait)
        send_quietly(lockctl.pid(), libc::SIGKILL);
        let killed = Instant::now();
        let _ = lockctl.wait_within(Duration::from_secs(10));
        let what = format!("seed {seed} round {round}: SIGKILL after {delay:?}");
        if let Ok(text) = std::fs::read_to_string(&pidfile) {
            if let Ok(pid) = text.trim().parse::<i32>() {
                let _cleanup = KillOnDrop(pid);
                assert!(
                    eventually(Duration::from_secs(1), || !is_running(pid)),
                    "{what}: the command's background process ({pid}) outlived lockctl"
                );
            }
        }
        assert!(
            eventually(TTL * 2, || holder(&server, &key).is_none()),
            "{what}: {key} still held {:?} after lockctl died",
            killed.elapsed()
        );
    }
}

/// The processes under `root` (its children, theirs...) that run `program` (their first
/// argument, or its last path component) with an argument that contains `marker`.
fn processes_under(root: i32, program: &str, marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let mut todo = support::children(root);
    while let Some(pid) = todo.pop() {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&str> = cmdline.split('\0').collect();
        let runs = args[0].rsplit('/').next() == Some(program);
        if runs && args[1..].iter().any(|a| a.contains(marker)) {
            found.push(pid);
        }
        todo.extend(support::children(pid));
    }
    found
}

/// The one lockctl under `root` whose arguments name `key` (not its watchdog, nor a child
/// between its fork and its exec), once there is one.
fn lockctl_under(root: i32, key: &str) -> i32 {
    let mut found = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            found = processes_under(root, "lockctl", key);
            found.len() == 1
        }),
        "no one lockctl for {key} under {root}: {found:?}"
    );
    found[0]
}

/// Whether a `sh -c SCRIPT` under `root` whose script contains `marker` has the terminal and
/// waits in a read: its process group is the terminal's foreground group, and it sleeps
/// (state `S`). What is typed next is then its.
fn reads_the_terminal(root: i32, marker: &str) -> bool {
    processes_under(root, "sh", marker).into_iter().any(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        // state, ppid, pgrp, session, tty_nr, tpgid (the terminal's foreground group).
        matches!(fields.as_slice(), ["S", _, pgrp, _, _, tpgid, ..] if pgrp == tpgid)
    })
}

/// **Job control: a foreground command stopped by SIGSTOP** (as
/// `a_foreground_command_stopped_by_sigstop_gives_the_shell_back`, whose cleanup kills the job
/// whenever the lock is held). What must hold: the shell shows the job stopped and gives its
/// prompt back while the lock is still held (lockctl stopped with its command, as for Ctrl-Z);
/// `fg` continues the command, which ends normally (status 0), and the lock is released.
#[test]
fn a_foreground_command_stopped_by_sigstop_stops_the_job() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let mut sh = shell(&server);
    sh.type_keys(
        format!(
            "\"$LOCKCTL\" run --ttl 10s stopped -- sh -c 'kill -STOP $$; echo resumed > {}'\n",
            out.display()
        )
        .as_bytes(),
    );
    assert!(eventually(Duration::from_secs(10), || holder(
        &server, "stopped"
    )
    .is_some()));
    let shown = eventually(Duration::from_secs(5), || sh.count("Stopped") > 0);
    let held = holder(&server, "stopped");
    if !shown {
        if let Some(pid) = held
            .as_ref()
            .and_then(|(owner, _)| owner.split('/').nth(1)?.parse::<i32>().ok())
        {
            for child in support::children(pid) {
                send_quietly(-child, libc::SIGKILL);
            }
            send_quietly(pid, libc::SIGKILL);
        }
    }
    assert!(
        shown,
        "after 5 s the shell shows no stopped job; the lock is {held:?}; the terminal shows:\n{}",
        sh.printed()
    );
    assert!(held.is_some(), "the lock is held while the job is stopped");
    sh.type_keys(b"fg\n");
    assert!(
        eventually(Duration::from_secs(10), || out.exists()),
        "fg did not continue the command: {}",
        sh.printed()
    );
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert_eq!(holder(&server, "stopped"), None, "released");
}

/// **Job control: lockctl inside lockctl** (`lockctl run a -- lockctl run b -- CMD` at a
/// terminal), Ctrl-Z and `fg`. What must hold: Ctrl-Z stops the whole job and the shell shows
/// it stopped; `fg` gives the innermost command the terminal again (it reads what is typed);
/// both locks are released at the end, and the status is the command's.
#[test]
fn nested_lockctl_ctrl_z_and_fg() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let mut sh = shell(&server);
    sh.type_keys(
        format!(
            "\"$LOCKCTL\" run --ttl 12s outer -- \"$LOCKCTL\" run --ttl 12s inner -- sh -c \
             'read l; echo \"got $l\" > {}; exit 7'\n",
            out.display()
        )
        .as_bytes(),
    );
    assert!(eventually(Duration::from_secs(20), || holder(
        &server, "inner"
    )
    .is_some()));
    // Ctrl-Z comes once the inner command runs, with the terminal.
    let root = sh.child.pid();
    let reads = || reads_the_terminal(root, "read l");
    assert!(
        eventually(Duration::from_secs(20), reads),
        "the inner command never got the terminal: {}",
        sh.printed()
    );
    sh.type_keys(b"\x1a");
    sh.expect("Stopped", Duration::from_secs(10));
    // Stopped for longer than a renewal's period (ttl / 3): both renew before they continue.
    // Within the ttl with room for a loaded machine: with a 3 s ttl and a 2 s stop, the stop
    // (Ctrl-Z, the shell's report, fg) outlasted the validity at load 10, and the outer lock
    // was lost (a fresh make test).
    common::wait_out_ttl(Duration::from_secs(5));
    sh.type_keys(b"fg\n");
    assert!(
        eventually(Duration::from_secs(10), reads),
        "the inner command did not get the terminal back: {}",
        sh.printed()
    );
    sh.type_keys(b"typed\n");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&out)
            .is_ok_and(|t| t.contains("got typed"))),
        "the inner command did not get the terminal back: {}",
        sh.printed()
    );
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=7", Duration::from_secs(20));
    assert_eq!(holder(&server, "inner"), None);
    assert_eq!(holder(&server, "outer"), None);
}

/// **Job control during the wait**: Ctrl-Z while lockctl waits for a held lock, `bg`, the
/// lock is freed (the command starts in the background), then `fg`. What must hold: the
/// command, once in the foreground, gets the terminal (it reads what is typed) after at
/// most one more `fg`; lockctl is never left stopped with the lock held and nobody able to
/// continue it.
#[test]
fn ctrl_z_and_bg_while_waiting_then_fg() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    acquire_as(&server, "waited", "holder", 60_000).expect("free");
    let mut sh = shell(&server);
    sh.type_keys(
        format!(
            "\"$LOCKCTL\" run --ttl 10s waited -- sh -c 'read l; echo \"got $l\" > {}'\n",
            out.display()
        )
        .as_bytes(),
    );
    sh.expect("waiting for waited", Duration::from_secs(10));
    let root = sh.child.pid();
    let pid = lockctl_under(root, "waited");
    sh.type_keys(b"\x1a");
    sh.expect("Stopped", Duration::from_secs(10));
    sh.type_keys(b"bg\n");
    assert!(
        eventually(Duration::from_secs(10), || !is_stopped(pid)),
        "bg did not continue lockctl: {}",
        sh.printed()
    );
    force_release(&server, "waited");
    assert!(eventually(Duration::from_secs(10), || holder(
        &server, "waited"
    )
    .is_some_and(|(o, _)| o != "holder")));
    // The command starts in the background and reads the terminal: the kernel stops it
    // (SIGTTIN), and lockctl stops the job with it.
    assert!(
        eventually(Duration::from_secs(10), || is_stopped(pid)),
        "the command's read from the background did not stop the job: {}",
        sh.printed()
    );
    sh.type_keys(b"fg\n");
    let has_it = || reads_the_terminal(root, "read l");
    let stopped_again = || sh.count("Stopped") > 1;
    assert!(
        eventually(Duration::from_secs(10), || has_it() || stopped_again()),
        "fg gave the command no terminal and the shell no prompt: {}",
        sh.printed()
    );
    if !has_it() {
        // The job stopped once more (the shell says so): one more fg.
        sh.type_keys(b"fg\n");
        assert!(
            eventually(Duration::from_secs(10), has_it),
            "the command did not get the terminal after a second fg: {}",
            sh.printed()
        );
    }
    sh.type_keys(b"typed\n");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&out)
            .is_ok_and(|t| t.contains("got typed"))),
        "the command did not get the terminal: {}",
        sh.printed()
    );
    sh.type_keys(b"echo status=$?\n");
    sh.expect("status=0", Duration::from_secs(20));
    assert_eq!(holder(&server, "waited"), None);
}

/// **Misleading output: owners chosen by other clients printed raw.** An owner is any bytes a
/// client with access to the key chose. `lockctl waiters`, `log` and `top` escape control
/// characters ("one with terminal escape sequences must not take over an operator's
/// screen"); `lockctl info` and `lockctl run`'s "waiting for" / "could not acquire" lines must
/// too. What must hold: no ESC byte reaches stdout or stderr, `info` prints one line per
/// master, and no forged `lockctl:` line appears.
#[test]
fn hostile_owners_are_escaped_in_info_and_run() {
    let server = Server::start();
    let key = "hostile";
    let owner = "evil\x1b[2J\x1b]0;pwned\x07\nlockctl: exit 0: lock released";
    acquire_as(&server, key, owner, 60_000).expect("free");
    let info = lockctl(&[&server])
        .args(["info", key])
        .output()
        .expect("lockctl info");
    let run = lockctl(&[&server])
        .args(["run", "--wait", "0", key, "--", "true"])
        .output()
        .expect("lockctl run");
    assert_eq!(run.status.code(), Some(75));
    let (out, err) = (support::stdout(&info), stderr(&run));
    assert!(
        !out.contains('\x1b'),
        "info printed an escape sequence: {out:?}"
    );
    assert_eq!(out.lines().count(), 1, "info: one line per master: {out:?}");
    assert!(
        !err.contains('\x1b'),
        "run printed an escape sequence: {err:?}"
    );
    assert!(
        !err.lines().any(|l| l.starts_with("lockctl: exit 0")),
        "run printed a forged line: {err:?}"
    );
}

/// **Misconfiguration: a CA file that is not PEM.** docs/client.md: "text that is not PEM, is
/// `Error::InvalidOption`", and for lockctl "a TLS file that cannot be read or is not PEM" is
/// a usage error (exit 2, before any server is contacted). What must hold: `--tls-ca` naming
/// random bytes, or an empty file, exits 2 and says the file is not PEM, rather than
/// trusting nothing and blaming the server's certificate (or, here, the network).
#[test]
fn a_ca_file_that_is_not_pem_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing listens there: a usage error must come before any connection.
    let url = format!("rediss://127.0.0.1:{}/", common::free_port());
    for (name, bytes) in [
        (
            "junk.pem",
            b"\x8f\x03this is no certificate at all\x00\xff".to_vec(),
        ),
        ("empty.pem", Vec::new()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let out = lockctl_at(&url)
            .args(["--tls-ca", &path.display().to_string()])
            .args(["run", "--wait", "0", "k", "--", "true"])
            .output()
            .expect("lockctl");
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains("PEM"), "{name}: {}", stderr(&out));
    }
}

/// **Misconfiguration: one server named twice**, as `127.0.0.1:P` and `0.0.0.0:P` (which
/// reaches the same listener on Linux). docs/client.md "One server, one vote": such a list is
/// refused with `Error::DuplicateServer` (lockctl: exit 2). What was seen instead: a Redlock
/// "quorum" of 2 out of 1 server (both grants carry one token), and at the end "lock ... was
/// lost as the command ended", although nothing was lost.
#[test]
fn one_server_named_by_the_unspecified_address_is_refused() {
    let server = Server::start();
    let urls = format!("{},redis://0.0.0.0:{}/", server.url(), server.port);
    let out = lockctl_at(&urls)
        .args([
            "run",
            "--wait",
            "0",
            "dup",
            "--",
            "sh",
            "-c",
            "echo $RELOCK_TOKENS",
        ])
        .output()
        .expect("lockctl");
    assert_eq!(
        out.status.code(),
        Some(2),
        "tokens {:?}: {}",
        support::stdout(&out),
        stderr(&out)
    );
}

/// **Misconfiguration: one server named twice under names no address comparison can tell
/// apart**: the server itself and a TCP proxy in front of it (a port forward, a NAT, a host's
/// LAN address and 127.0.0.1 alike). What must hold: lockctl asks each master who it is
/// (`run_id`) before it acquires anything, and refuses the list (exit 2) naming both; nothing
/// is acquired.
#[test]
fn one_server_named_through_a_proxy_is_refused() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let urls = format!("{},{}", server.url(), proxy.url());
    let out = lockctl_at(&urls)
        .args(["run", "--wait", "0", "dup-proxy", "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("same server"), "{}", stderr(&out));
    assert_eq!(
        relock_testkit::info_field(&mut server.conn(), "acquired_total"),
        0
    );
}

/// **The same server through a slow proxy.** The identity check asked each master for its
/// `run_id` within the node timeout (100 ms by default), and a master that did not answer in
/// time was not compared: with both cores busy, the first request through the proxy (a new
/// connection, then `INFO`) missed it once and the one server counted twice toward the quorum
/// (`one_server_named_through_a_proxy_is_refused` failed). Staged here with a proxy that
/// delays every answer 400 ms. What must hold: still refused (exit 2, "same server").
#[test]
fn one_server_named_through_a_slow_proxy_is_refused() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    proxy.delay(Duration::from_millis(400));
    let urls = format!("{},{}", server.url(), proxy.url());
    let out = lockctl_at(&urls)
        .args(["run", "--wait", "0", "dup-slow-proxy", "--", "true"])
        .output()
        .expect("lockctl");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("same server"), "{}", stderr(&out));
    assert_eq!(
        relock_testkit::info_field(&mut server.conn(), "acquired_total"),
        0
    );
}

/// **Duration extremes: `--grace` and `top --interval` are not bounded.** docs/client.md: "a
/// timeout above 1000000000s" is a usage error (exit 2). What must hold: lockctl never
/// panics (exit 101) on a duration it accepted. `--grace 1e19s` is accepted, and the first
/// loss panics ("overflow when adding duration to instant") instead of waiting for the
/// command; `lockctl top --once --interval 1e19s` panics at once.
#[test]
fn huge_durations_never_panic() {
    let server = Server::start();
    // --ttl 5ms with the default node timeout: the lock is lost at once.
    let mut run = Spawned::new(
        lockctl(&[&server])
            .args([
                "run", "--ttl", "5ms", "--grace", "1e19s", "huge", "--", "sleep", "2",
            ])
            .stderr(Stdio::piped()),
    );
    let status = run.wait_within(Duration::from_secs(30));
    let out = run.output();
    let top = lockctl(&[&server])
        .args(["top", "--once", "--interval", "1e19s"])
        .output()
        .expect("lockctl top");
    assert!(
        matches!(status.code(), Some(2) | Some(76)),
        "run --grace 1e19s: {status:?}: {}",
        stderr(&out)
    );
    assert_eq!(
        top.status.code(),
        Some(2),
        "top --interval 1e19s: {}",
        stderr(&top)
    );
}

/// Half-open connection mid-release: the command ends, and the server's connections have gone
/// silent. What must hold: lockctl does not hang (the release is bounded by the node
/// timeout), exits with the command's status, and says the release failed and that the lock
/// will expire.
#[test]
fn a_silent_server_at_the_release_does_not_hang_lockctl() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let mut run = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["run", "--ttl", "5s", "release", "--", "sh", "-c"])
            .arg(format!("touch {}; sleep 0.5; exit 9", started.display()))
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || started.exists()));
    proxy.silence_all();
    let status = run.wait_within(Duration::from_secs(20));
    let out = run.output();
    assert_eq!(status.code(), Some(9), "{}", stderr(&out));
    assert!(stderr(&out).contains("expire"), "{}", stderr(&out));
    assert!(eventually(Duration::from_secs(10), || holder(
        &server, "release"
    )
    .is_none()));
}

/// Half-open connection while waiting for the second of several keys (`--key a --key b`,
/// `wait_all`): the connection the wait blocks on goes silent and the key is freed. What
/// must hold: like a one-key wait (halfopen.rs), lockctl notices, waits again on a new
/// connection, gets both keys and runs its command.
#[test]
fn a_several_key_wait_survives_a_silent_connection() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    acquire_as(&server, "kb", "holder", 60_000).expect("free");
    let mut run = Spawned::new(
        lockctl_at(&proxy.url())
            .args(["--node-timeout", "500ms", "run", "--wait", "60s"])
            .args(["--key", "ka", "--key", "kb", "--", "true"])
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || {
        relock_testkit::info_field(&mut server.conn(), "waiters") == 1
    }));
    proxy.silence_open_connections();
    force_release(&server, "kb");
    let status = run.wait_within(Duration::from_secs(30));
    let out = run.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(holder(&server, "ka").is_none() && holder(&server, "kb").is_none());
}

/// Pipes: `lockctl run K -- yes | head -1`. What must hold: the command dies of SIGPIPE
/// (lockctl exits 141, as the shell reports `yes` alone), and the lock is released.
#[test]
fn a_command_killed_by_sigpipe_exits_141_and_releases() {
    let server = Server::start();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "\"{}\" run piped -- yes | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}",
            env!("CARGO_BIN_EXE_lockctl")
        ))
        .env("RELOCK_SERVERS", server.url())
        .output()
        .expect("bash");
    assert_eq!(support::stdout(&out).trim(), "141", "{}", stderr(&out));
    assert_eq!(holder(&server, "piped"), None);
}

/// **Job control: SIGCONT while lockctl is still stopping its command.** `kill -TSTP` then
/// `kill -CONT` (a supervisor's pause and resume, Ctrl-Z then a quick `fg`) to lockctl whose
/// command takes its time to stop (it saves its work, or ignores SIGTSTP). A process stops at
/// once on SIGTSTP and the SIGCONT continues it; lockctl stops only after its command did (up
/// to 1 s), so the SIGCONT comes first. What must hold: after the SIGCONT, lockctl and its
/// command run (or at least are not left stopped for good while the lock lapses).
#[test]
fn a_sigcont_during_the_stop_is_not_lost() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = dir.path().join("ticks");
    let key = "tstp-cont";
    let mut lockctl = Spawned::new(
        lockctl(&[&server])
            .args([
                "--node-timeout",
                "1s",
                "run",
                "--ttl",
                "3s",
                key,
                "--",
                "sh",
                "-c",
            ])
            .arg(format!(
                "trap '' TSTP; while :; do echo x >> {}; sleep 0.02; done",
                ticks.display()
            ))
            .process_group(0)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || lines(&ticks) > 3));
    send(lockctl.pid(), libc::SIGTSTP);
    // A pause of 200 ms, within the second lockctl gives its command to stop: the SIGCONT
    // comes while lockctl is still stopping it.
    common::wait_out_ttl(Duration::from_millis(200));
    send(lockctl.pid(), libc::SIGCONT);
    // Past that second, after which a lockctl that lost the SIGCONT would stop for good.
    common::wait_out_ttl(Duration::from_secs(2));
    let stopped = support::is_stopped(lockctl.pid());
    let before = lines(&ticks);
    let runs = eventually(Duration::from_secs(10), || lines(&ticks) > before);
    let held = holder(&server, key);
    send_quietly(lockctl.pid(), libc::SIGCONT);
    send_quietly(lockctl.pid(), libc::SIGTERM);
    let _ = lockctl.wait_within(Duration::from_secs(20));
    assert!(
        !stopped && runs,
        "2 s after SIGCONT: lockctl stopped: {stopped}, its command runs: {runs} (writes \
         within 10 s); lock {held:?}"
    );
}

/// **Library calls with hostile arguments** never panic or hang: empty server lists, empty,
/// NUL-holding and 10 MB keys, `Duration::MAX` ttls and waits, zero permits, empty and
/// oversized groups, an owner of 1 MB for `reenter`, and every call bounded by a few node
/// timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_calls_with_hostile_arguments_fail_cleanly() {
    use relock_client::{Mode, Options, Relock};
    let server = Server::start();
    // A node timeout that a loaded machine does not reach with a 10 MB key (at 500 ms the
    // release of the 10 MB key timed out once with both cores busy, and `expect("released")`
    // failed): what is tested is that nothing panics or hangs, not how fast.
    let options = Options {
        node_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let none: [&str; 0] = [];
    assert!(Relock::new(&none).is_err(), "no servers");
    assert!(
        Relock::cluster(&none, Options::default()).is_err(),
        "no seeds"
    );
    for url in [
        "",
        "://",
        "redis://",
        "redis://:",
        "redis://[::1",
        "redis://h:99999",
        "rediss://#insecure",
    ] {
        let _ = Relock::new(&[url]);
        let _ = Relock::cluster(&[url], Options::default());
    }
    let relock = Relock::with_options(&[server.url()], options).expect("client");
    let bound = Duration::from_secs(30);
    let big = "k".repeat(10 << 20);
    let ttl = Duration::from_secs(5);
    for key in ["", "nul\0key", big.as_str()] {
        let lock = tokio::time::timeout(bound, relock.acquire(key, ttl))
            .await
            .expect("bounded");
        if let Ok(lock) = lock {
            tokio::time::timeout(bound, lock.release())
                .await
                .expect("bounded")
                .expect("released");
        }
    }
    assert!(relock.acquire("k", Duration::MAX).await.is_err());
    assert!(relock.acquire("k", Duration::ZERO).await.is_err());
    let waited = tokio::time::timeout(bound, relock.acquire_wait("k", ttl, Some(Duration::MAX)))
        .await
        .expect("bounded")
        .expect("free");
    waited.release().await.expect("released");
    assert!(relock.with_mode(Mode::limited(0)).is_err());
    assert!(relock
        .with_mode(Mode::limited(3))
        .and_then(|r| r.with_permits(0))
        .is_err());
    assert!(relock.acquire_all(&none, ttl).await.is_err());
    let many: Vec<String> = (0..257).map(|i| format!("g{i}")).collect();
    assert!(relock.acquire_all(&many, ttl).await.is_err());
    assert!(relock.wait_all(&["a", "a"], ttl, None).await.is_err());
    let huge_owner = "o".repeat(1 << 20);
    let _ = tokio::time::timeout(bound, relock.reenter("k", &huge_owner, ttl))
        .await
        .expect("bounded");
    let _ = tokio::time::timeout(bound, relock.holders("k", u32::MAX))
        .await
        .expect("bounded");
    relock.settle().await;
}

/// **Redlock of 3 with 2 masters paused (SIGSTOP) while the command runs**, then continued
/// after their copies expired, and another client takes the key there. What must hold: lockctl
/// ends the command (exit 76) before the other client can hold a quorum: the command's last
/// write comes before the take.
#[test]
fn redlock_with_two_paused_masters_ends_the_command_before_another_takes_the_key() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let refs: Vec<&Server> = servers.iter().collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = dir.path().join("ticks");
    let key = "paused";
    let mut run = Spawned::new(
        lockctl(&refs)
            .args([
                "run", "--ttl", "1s", "--grace", "200ms", key, "--", "sh", "-c",
            ])
            .arg(format!(
                "trap '' TERM; while :; do echo x >> {}; sleep 0.01; done",
                ticks.display()
            ))
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || lines(&ticks) > 3));
    servers[1].signal("STOP");
    servers[2].signal("STOP");
    let status = run.wait_within(Duration::from_secs(20));
    let ended = lines(&ticks);
    let out = run.output();
    assert_eq!(status.code(), Some(76), "{}", stderr(&out));
    // The paused masters' copies (a 1 s ttl) run out before they are continued.
    common::wait_out_ttl(Duration::from_millis(1200));
    servers[1].signal("CONT");
    servers[2].signal("CONT");
    let took = [&servers[1], &servers[2]]
        .iter()
        .all(|s| intrude(s, key, "intruder", Duration::from_secs(5)).is_some());
    assert!(took, "the paused masters' copies never expired");
    // A window in which the command, had it run on, would write (every 10 ms).
    common::wait_out_ttl(Duration::from_millis(300));
    assert_eq!(
        lines(&ticks),
        ended,
        "the command ran on after lockctl exited"
    );
}

/// A pipe whose buffer is full and that nobody reads: (read end, write end in blocking
/// mode). What a stuck log consumer (`2>&1 | less` left on its first screen, a stalled
/// logger) looks like to the process that writes to it.
fn full_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills two fds; fcntl and write on them; both are owned below.
    unsafe {
        // Close-on-exec: the programs other tests of this binary start meanwhile must not
        // hold either end (lockctl gets the write end as its stderr, which dup2 keeps open).
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        let flags = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
        let chunk = [b'.'; 4096];
        while libc::write(fds[1], chunk.as_ptr().cast(), chunk.len()) > 0 {}
        // One byte at a time to the very last one.
        while libc::write(fds[1], chunk.as_ptr().cast(), 1) > 0 {}
        libc::fcntl(fds[1], libc::F_SETFL, flags);
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

/// **Pipes: lockctl's stderr is a pipe nobody reads**, and the lock certainly lapses: its only
/// server is paused (SIGSTOP) for longer than the ttl, so that the renewals fail (each failure
/// logs a warning on the full stderr) and the validity runs out. What must hold (output.rs:
/// nothing said on stderr can hang lockctl while it holds a lock; docs/client.md, exit 76:
/// SIGTERM no later than the validity's end): the command has stopped by the time another
/// client takes the key, and lockctl exits 76 although stderr never takes a byte (its last
/// messages are dropped after a bounded wait).
#[test]
fn a_full_stderr_pipe_does_not_hide_a_loss() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = dir.path().join("ticks");
    let key = "full-stderr-lapse";
    let (read, write) = full_pipe();
    let mut run = Spawned::new(
        lockctl(&[&server])
            .args([
                "--node-timeout",
                "100ms",
                "run",
                "--ttl",
                "1s",
                "--grace",
                "1s",
            ])
            .args([key, "--", "sh", "-c"])
            .arg(format!(
                "while :; do echo x >> {}; sleep 0.01; done 2>/dev/null",
                ticks.display()
            ))
            .process_group(0)
            .stderr(Stdio::from(write)),
    );
    assert!(eventually(Duration::from_secs(20), || lines(&ticks) > 3));
    server.signal("STOP");
    // Paused for longer than the ttl (1 s), a stall the test imposes.
    common::wait_out_ttl(Duration::from_millis(1500));
    server.signal("CONT");
    let taken = intrude(&server, key, "intruder", Duration::from_secs(5));
    let threads = support::describe_process(run.pid());
    let at_take = lines(&ticks);
    // A window in which the command, had it run on, would write (every 10 ms).
    common::wait_out_ttl(Duration::from_secs(1));
    let after = lines(&ticks);
    // Stderr stays full: lockctl must end all the same.
    let mut status = None;
    eventually(Duration::from_secs(15), || {
        status = run.try_status();
        status.is_some()
    });
    drop(read);
    send_quietly(-run.pid(), libc::SIGKILL);
    assert!(taken.is_some(), "the lock never lapsed");
    assert!(
        after <= at_take + 2,
        "the command wrote {} lines in the second after another client took {key}; lockctl: \
         {status:?}: {threads}",
        after - at_take
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(76),
        "lockctl, with stderr full: {threads}"
    );
}

/// A one-node Redis Cluster (every slot on one master) that announces `proxy_port`, so that
/// clients following the slot map still go through the proxy.
fn one_node_cluster() -> (Server, Proxy) {
    let server = Server::with_args(&["--cluster-enabled", "yes"]);
    let proxy = Proxy::start(server.port);
    let mut c = server.conn();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut c)
        .expect("ADDSLOTSRANGE");
    for (name, value) in [
        ("cluster-announce-ip", "127.0.0.1".to_string()),
        ("cluster-announce-port", proxy.port.to_string()),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut c)
            .expect("CONFIG SET");
    }
    assert!(eventually(Duration::from_secs(20), || {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut c)
            .expect("INFO");
        let slots: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut c)
            .expect("SLOTS");
        info.contains("cluster_state:ok") && format!("{slots:?}").contains(&proxy.port.to_string())
    }));
    (server, proxy)
}

/// **Half-open connection during a cluster wait** (`--cluster`): docs/client.md says a wait
/// notices a silently dead connection "within about 1 s + 2 x node_timeout ... in every mode
/// (one server, Redlock, cluster, Sentinel)". The connection the wait blocks on goes silent,
/// and the lock is freed. What must hold: lockctl waits again on a new connection, gets the
/// lock and runs its command within a few seconds.
#[test]
fn a_cluster_wait_survives_a_silent_connection() {
    let (server, proxy) = one_node_cluster();
    let key = "silent-cluster";
    acquire_as(&server, key, "holder", 60_000).expect("free");
    let mut run = Spawned::new(
        lockctl_at(&proxy.url())
            .args([
                "--cluster",
                "--node-timeout",
                "500ms",
                "run",
                "--wait",
                "60s",
                key,
            ])
            .args(["--", "true"])
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || {
        relock_testkit::info_field(&mut server.conn(), "waiters") == 1
    }));
    proxy.silence_open_connections();
    force_release(&server, key);
    let freed = Instant::now();
    let status = run.wait_within(Duration::from_secs(30));
    let out = run.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(
        freed.elapsed() < Duration::from_secs(10),
        "noticed only after {:?}: {}",
        freed.elapsed(),
        stderr(&out)
    );
}

/// **Half-open connections mid-renewal in cluster mode**: every connection open while the
/// command runs goes silent (new ones work). What must hold: as with one server
/// (halfopen.rs), the renewals move to new connections within the ttl and the lock is kept:
/// the command runs to its end (exit 0) under one owner.
#[test]
fn cluster_renewals_survive_silent_connections() {
    let (server, proxy) = one_node_cluster();
    let key = "renew-cluster";
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let mut run = Spawned::new(
        lockctl_at(&proxy.url())
            .args([
                "--cluster",
                "--node-timeout",
                "300ms",
                "run",
                "--ttl",
                "3s",
                key,
            ])
            .args(["--", "sh", "-c"])
            .arg(format!("touch {}; sleep 4", started.display()))
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || started.exists()));
    let first = holder(&server, key).expect("held");
    proxy.silence_open_connections();
    // Longer than a renewal's period (ttl / 3): the lock is still held after it only if the
    // renewals moved to new connections.
    common::wait_out_ttl(Duration::from_secs(2));
    assert_eq!(
        holder(&server, key).map(|h| h.0),
        Some(first.0),
        "still held by lockctl"
    );
    let status = run.wait_within(Duration::from_secs(30));
    let out = run.output();
    assert_eq!(status.code(), Some(0), "{}", stderr(&out));
    assert!(eventually(Duration::from_secs(5), || holder(&server, key).is_none()));
}

/// **Job control: lockctl inside a shell script run at a terminal** (`sh job.sh`, whose
/// `lockctl run ... < /dev/null` shares the script's process group: the job the interactive
/// shell started). Ctrl-Z stops the job: the shell shows it stopped. What must hold
/// (docs/client.md, Job control: SIGTSTP "stop[s] the command's group first ... then
/// lockctl itself"): the command stops too, and `fg` continues it; not a command that runs
/// on, unseen, in a job the shell shows as stopped.
#[test]
fn ctrl_z_stops_the_command_of_lockctl_in_a_script() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ticks = dir.path().join("ticks");
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        format!(
            "\"$LOCKCTL\" run --ttl 5s scripted -- sh -c 'while :; do echo x >> {}; sleep 0.02; \
             done' < /dev/null\n",
            ticks.display()
        ),
    )
    .expect("script");
    let mut sh = shell(&server);
    sh.type_keys(format!("sh {}\n", script.display()).as_bytes());
    assert!(eventually(Duration::from_secs(20), || lines(&ticks) > 3));
    sh.type_keys(b"\x1a");
    sh.expect("Stopped", Duration::from_secs(10));
    // The command's group (its shell and its `sleep`) stops before lockctl does: stopped by
    // the time the shell shows the job stopped, with a bound for a loaded machine.
    let root = sh.child.pid();
    let command_stopped = || {
        processes_under(root, "sh", "echo x")
            .into_iter()
            .any(|pid| {
                let members = support::group_members(pid);
                !members.is_empty() && members.into_iter().all(is_stopped)
            })
    };
    let stopped = eventually(Duration::from_secs(10), command_stopped);
    let before = lines(&ticks);
    // A window in which the command, had it run on, would write (every 20 ms).
    common::wait_out_ttl(Duration::from_millis(500));
    let during = lines(&ticks) - before;
    let held = holder(&server, "scripted");
    // Whatever happened, end the job.
    sh.type_keys(b"kill -9 %1\n");
    if let Some((owner, _)) = &held {
        if let Some(pid) = owner.split('/').nth(1).and_then(|p| p.parse::<i32>().ok()) {
            send_quietly(pid, libc::SIGKILL);
        }
    }
    assert!(
        stopped,
        "the shell shows the job stopped, but the command's group did not stop"
    );
    assert_eq!(
        during, 0,
        "the shell shows the job stopped, but the command wrote {during} lines in 0.5 s"
    );
}

/// **Job control during the wait, for longer than the ttl**: lockctl waits for a held key and
/// is stopped (SIGTSTP); the key is freed and granted to its queued wait while it is
/// stopped; the grant expires unrenewed and another client takes the key; lockctl is
/// continued. What must hold: the command does not run while the other client holds the key
/// (lockctl waits again, or gives up with 75), and lockctl is not left stopped.
#[test]
fn a_grant_that_expired_while_lockctl_was_stopped_is_not_used() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let key = "stopped-wait";
    acquire_as(&server, key, "holder", 60_000).expect("free");
    let mut run = Spawned::new(
        lockctl(&[&server])
            .args([
                "--node-timeout",
                "500ms",
                "run",
                "--ttl",
                "1s",
                "--wait",
                "8s",
                key,
            ])
            .args(["--", "sh", "-c"])
            .arg(format!("echo $RELOCK_OWNER >> {}", ran.display()))
            .process_group(0)
            .stderr(Stdio::piped()),
    );
    assert!(eventually(Duration::from_secs(20), || {
        relock_testkit::info_field(&mut server.conn(), "waiters") == 1
    }));
    send(run.pid(), libc::SIGTSTP);
    assert!(eventually(Duration::from_secs(5), || support::is_stopped(
        run.pid()
    )));
    let _: Option<i64> = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("holder")
        .query(&mut server.conn())
        .expect("LOCK.RELEASE");
    let granted = holder(&server, key).map(|h| h.0);
    assert!(granted.is_some(), "the queued wait was granted");
    intrude(&server, key, "intruder", Duration::from_secs(5)).expect("the grant expired");
    send(run.pid(), libc::SIGCONT);
    // A window in which the command, had lockctl used the expired grant, would have run.
    common::wait_out_ttl(Duration::from_secs(2));
    assert!(
        !ran.exists(),
        "the command ran while the intruder held {key}"
    );
    assert!(!support::is_stopped(run.pid()), "lockctl left stopped");
    force_release(&server, key);
    let status = run.wait_within(Duration::from_secs(20));
    let out = run.output();
    assert!(
        matches!(status.code(), Some(0) | Some(75)),
        "{status:?}: {}",
        stderr(&out)
    );
}
