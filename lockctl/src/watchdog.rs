//! The watchdog: a small process (lockctl itself, started again with [`ARG`]) that keeps the
//! command from running when lockctl cannot renew its lock for reasons lockctl cannot handle
//! itself. A process stopped with SIGSTOP (or by a debugger) runs no handler, and one killed
//! with SIGKILL runs nothing: the parent-death signal ends only the command's first process,
//! not the rest of its group. So, every [`TICK`]:
//!
//! - while lockctl is stopped, the command's group is stopped too (again, if someone
//!   continues it behind lockctl's back);
//! - once lockctl is gone (its end of the socket closed) while the command still has
//!   processes, they are killed (SIGKILL), and the watchdog exits: the group's, and those the
//!   command moved to other groups of the session (`setpgid`), which the watchdog looks for
//!   every 100 ms or so while lockctl lives ([`Escaped`]);
//! - once the group is gone, and no process of the command is left outside it, the watchdog
//!   exits.
//!
//! When lockctl is continued it says so over the socket (`R`) and waits for the answer (`A`)
//! before it continues the group: a SIGSTOP the watchdog sent for the stop just over can then
//! no longer arrive after lockctl's SIGCONT.
//!
//! The watchdog starts before the command, and the command's first process, between its fork
//! and its exec, tells it the group it leads (`G<pgid>\n`, [`announce`]): from then on a
//! SIGKILL of lockctl cannot leave the command running unwatched, however soon it comes.
//!
//! The watchdog runs in a process group of its own and ignores every signal it can, so that
//! nothing meant for lockctl or its command (a terminal's Ctrl-C, a service manager's SIGTERM
//! to lockctl's group) ends it before it has done its part.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The first argument that makes lockctl a watchdog (not a subcommand: never shown).
pub const ARG: &str = "__relock_watchdog";

/// How often the watchdog looks at lockctl and the command's group.
const TICK: Duration = Duration::from_millis(20);

/// How long lockctl waits for the watchdog's answer after it was continued.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// lockctl's side: the socket to its watchdog.
pub struct Watchdog {
    socket: UnixStream,
    /// Never waited for through this handle (lockctl's reaping of ended children may reap
    /// it): it outlives lockctl by design.
    child: std::process::Child,
}

impl Watchdog {
    /// Starts the watchdog of the command lockctl is about to start, which tells it its
    /// process group ([`Watchdog::announce_fd`]).
    pub fn spawn() -> io::Result<Watchdog> {
        let (ours, theirs) = UnixStream::pair()?;
        // Linux can start the running binary even if its file was replaced since.
        let exe = if cfg!(target_os = "linux") {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut cmd = Command::new(exe);
        cmd.arg(ARG)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            // It says nothing, and must not keep lockctl's output open after lockctl exits.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: the closure does nothing. It is there so that the child is forked, and keeps
        // lockctl's handlers until its exec (a spawn without one resets them first): a stop
        // sent to lockctl's group before the child left it then cannot stop the child before
        // its exec, which this thread waits for (see signals::on_signal).
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
        let child = cmd.spawn()?;
        ours.set_read_timeout(Some(ANSWER_WITHIN))?;
        ours.set_write_timeout(Some(ANSWER_WITHIN))?;
        Ok(Watchdog {
            socket: ours,
            child,
        })
    }

    /// The watchdog's pid.
    pub fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.id()).unwrap_or(-1)
    }

    /// The socket the command's first process gives the watchdog its pid on ([`announce`]).
    pub fn announce_fd(&self) -> libc::c_int {
        self.socket.as_raw_fd()
    }

    /// Tells the watchdog lockctl was continued, and waits (at most [`ANSWER_WITHIN`]) until
    /// it will stop nothing more for the stop that just ended.
    pub fn resumed(&mut self) {
        let mut answer = [0u8; 1];
        let answered = self
            .socket
            .write_all(b"R")
            .and_then(|()| self.socket.read_exact(&mut answer));
        if let Err(e) = answered {
            tracing::debug!(error = %e, "the watchdog did not answer");
        }
    }
}

/// Tells the watchdog on `fd` (from [`Watchdog::announce_fd`]) that `pid` leads the command's
/// process group: `G<pid>\n` in one write; whether it was written. Called by the command's
/// first process between its fork and its exec, so only async-signal-safe calls; a failure
/// leaves the group unwatched, as without a watchdog.
pub fn announce(fd: libc::c_int, pid: libc::pid_t) -> bool {
    let mut message = [0u8; 16];
    message[0] = b'G';
    let mut digits = [0u8; 12];
    let mut count = 0;
    let mut n = pid.unsigned_abs();
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..count].iter().rev().enumerate() {
        message[1 + i] = *d;
    }
    message[1 + count] = b'\n';
    // SAFETY: write(2) of a local buffer to a descriptor the caller owns.
    let written = unsafe { libc::write(fd, message.as_ptr().cast(), count + 2) };
    written == (count + 2) as isize
}

/// What the watchdog read from lockctl's socket.
#[derive(Debug, Default, PartialEq, Eq)]
struct Heard {
    /// The command's process group, once announced.
    pgid: Option<libc::pid_t>,
    /// How many `R` (lockctl was continued) to answer.
    resumed: usize,
}

/// Reads `bytes`, which continue what `partial` kept of an unfinished `G` message, into
/// `heard`.
fn hear(partial: &mut Vec<u8>, bytes: &[u8], heard: &mut Heard) {
    for &b in bytes {
        match (partial.is_empty(), b) {
            (true, b'R') => heard.resumed += 1,
            (true, b'G') => partial.push(b),
            (true, _) => {}
            (false, b'\n') => {
                heard.pgid = std::str::from_utf8(&partial[1..])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .or(heard.pgid);
                partial.clear();
            }
            (false, _) if partial.len() < 16 => partial.push(b),
            (false, _) => partial.clear(),
        }
    }
}

/// The watchdog process: `lockctl __relock_watchdog`, with its socket as stdin.
pub fn main(_args: &[String]) -> ExitCode {
    for sig in crate::signals::handled()
        .into_iter()
        .chain([libc::SIGPIPE])
        .filter(|s| *s != libc::SIGCHLD && *s != libc::SIGCONT)
    {
        // SAFETY: ignoring a signal has no memory effects.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: getppid has no memory effects; fd 0 is the socket lockctl gave us.
    let lockctl = unsafe { libc::getppid() };
    let mut socket = unsafe { UnixStream::from_raw_fd(0) };
    if socket.set_nonblocking(true).is_err() {
        return ExitCode::FAILURE;
    }
    let mut heard = Heard::default();
    let mut partial = Vec::new();
    let mut escaped = Escaped::new(lockctl);
    let mut had_group = true;
    loop {
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor we own.
        unsafe {
            libc::poll(&mut poll, 1, TICK.as_millis() as libc::c_int);
        }
        let gone = read_lockctl(&mut socket, &mut partial, &mut heard);
        // SAFETY: getppid has no memory effects.
        let orphaned = gone || unsafe { libc::getppid() } != lockctl;
        let Some(pgid) = heard.pgid else {
            // No command yet: one that lockctl's end outlived before it said who it is died
            // with lockctl (its parent-death signal).
            if orphaned {
                return ExitCode::SUCCESS;
            }
            continue;
        };
        if orphaned {
            // lockctl is gone and left processes of the command running: nothing renews the
            // lock for them.
            wait_until_reparented(lockctl);
            escaped.kill_all(pgid, crate::procs::group_exists(pgid));
            return ExitCode::SUCCESS;
        }
        // (kill(2) alone, cheap enough for every tick: a group of zombies only waits for
        // lockctl's exit, and the SIGKILL then is harmless.)
        let group = crate::procs::group_exists(pgid);
        // The moment the group ends, look at once: the watchdog's work ends with the command.
        escaped.look(pgid, had_group && !group);
        had_group = group;
        if !group && escaped.seen.is_empty() {
            return ExitCode::SUCCESS;
        }
        if group && stopped(lockctl) {
            // SAFETY: kill(2) to the command's group, which exists (checked above).
            unsafe {
                libc::killpg(pgid, libc::SIGSTOP);
            }
        }
    }
}

/// How long the watchdog waits, once lockctl's end of the socket closed, for the kernel to
/// finish lockctl's exit.
const REPARENT_WITHIN: Duration = Duration::from_secs(2);

/// Waits (at most [`REPARENT_WITHIN`]) until the watchdog's parent is no longer `lockctl`.
///
/// A killed process's files are closed before the kernel gives its children to another parent,
/// and in that step it sends SIGHUP and SIGCONT to each child's group that becomes orphaned
/// with a stopped member. Stopping the command's group in between (the first step of
/// [`Escaped::kill_all`]) would get its leader killed by that SIGHUP before it is looked at,
/// and what the leader started in other groups (GNU `timeout`) would go to init unseen: seen
/// under load, 1 kill in 10 to 20. Once the watchdog itself has a new parent, lockctl's children all
/// have (the kernel moves them in one step), and nothing more is sent for lockctl's exit.
fn wait_until_reparented(lockctl: libc::pid_t) {
    let until = Instant::now() + REPARENT_WITHIN;
    // SAFETY: getppid has no memory effects.
    while unsafe { libc::getppid() } == lockctl && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The least time between two looks for the command's processes outside its group.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The command's processes outside its group ([`crate::procs::escaped`]) as last seen, so that
/// they can be found once lockctl is gone: they are its descendants only while it lives (its
/// subreaper), and a parent-death signal or an ended parent gives them to init then.
struct Escaped {
    lockctl: libc::pid_t,
    session: libc::pid_t,
    /// The watchdog itself, a descendant of lockctl too.
    me: libc::pid_t,
    /// Each one's pid and start time (the pair survives a pid's reuse).
    seen: Vec<(libc::pid_t, u64)>,
    next_look: Instant,
}

impl Escaped {
    fn new(lockctl: libc::pid_t) -> Escaped {
        // SAFETY: these calls only read process attributes.
        let (session, me) = unsafe { (libc::getsid(0), libc::getpid()) };
        Escaped {
            lockctl,
            session,
            me,
            seen: Vec::new(),
            next_look: Instant::now(),
        }
    }

    /// Looks again through /proc if it is time (or `now`). A look reads every process's stat
    /// line; the next one is at least 50 times as long after, so that a large process table
    /// costs the watchdog at most about 2 % of a CPU.
    fn look(&mut self, pgid: libc::pid_t, now: bool) {
        if !now && Instant::now() < self.next_look {
            return;
        }
        let started = Instant::now();
        if let Some(procs) = crate::procs::all() {
            self.seen = crate::procs::escaped(&procs, self.lockctl, pgid, self.session, &[self.me])
                .iter()
                .map(|p| (p.pid, p.start_time))
                .collect();
        }
        self.next_look = Instant::now() + LOOK_EVERY.max(started.elapsed() * 50);
    }

    /// Kills the command's group and every process of the command seen outside it, with
    /// whatever descends from them now. Everything is stopped first (SIGSTOP), until no new
    /// descendant shows up, so that none forks after it was looked at (and a stopped parent
    /// cannot reap a child, whose pid then cannot be reused), then killed.
    fn kill_all(&self, pgid: libc::pid_t, group: bool) {
        let signal_group = |sig| {
            if group {
                // SAFETY: kill(2) to the command's group, which existed a moment ago.
                unsafe {
                    libc::killpg(pgid, sig);
                }
            }
        };
        signal_group(libc::SIGSTOP);
        // Each one found (stopped), with its parent.
        let mut parent: HashMap<libc::pid_t, libc::pid_t> = HashMap::new();
        while let Some(procs) = crate::procs::all() {
            let roots = procs.iter().filter(|p| {
                p.is_live() && (p.pgrp == pgid || self.seen.contains(&(p.pid, p.start_time)))
            });
            let mut more: Vec<libc::pid_t> = Vec::new();
            let found = roots.flat_map(|r| {
                let below = crate::procs::descendants(&procs, r.pid);
                std::iter::once(*r).chain(below)
            });
            for p in found {
                if p.is_live() && p.pid != self.me && parent.insert(p.pid, p.ppid).is_none() {
                    more.push(p.pid);
                }
            }
            if more.is_empty() {
                break;
            }
            for pid in &more {
                // SAFETY: kill(2) to a live process of the command, just seen.
                unsafe {
                    libc::kill(*pid, libc::SIGSTOP);
                }
            }
        }
        // Children before their parents: a stopped process whose parent dies first may be in a
        // group that this orphans, which the kernel then continues (SIGHUP, SIGCONT) before
        // its own SIGKILL.
        let mut doomed: Vec<libc::pid_t> = parent.keys().copied().collect();
        doomed.sort_by_key(|pid| std::cmp::Reverse(depth(&parent, *pid)));
        for pid in &doomed {
            // SAFETY: kill(2) to a stopped process of the command.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        signal_group(libc::SIGKILL);
    }
}

/// How many of `pid`'s ancestors are in `parent` (a map of pids to their parents).
fn depth(parent: &HashMap<libc::pid_t, libc::pid_t>, pid: libc::pid_t) -> usize {
    let mut depth = 0;
    let mut at = pid;
    // Bounded: a scan torn by pid reuse may hold a cycle.
    while let Some(&up) = parent.get(&at) {
        if !parent.contains_key(&up) || depth == parent.len() {
            break;
        }
        depth += 1;
        at = up;
    }
    depth
}

/// Reads what lockctl (and the command's first process) said on the non-blocking `socket`
/// into `heard`, answering each continuation (`A`); whether lockctl's end is closed.
fn read_lockctl(socket: &mut UnixStream, partial: &mut Vec<u8>, heard: &mut Heard) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                hear(partial, &buf[..n], heard);
                if heard.resumed > 0 {
                    heard.resumed = 0;
                    let _ = socket.write_all(b"A");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// Whether process `pid` is stopped (job control, SIGSTOP, or a debugger's stop).
fn stopped(pid: libc::pid_t) -> bool {
    crate::procs::stat(pid).is_some_and(|s| s.is_stopped())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_the_ancestors_found_and_ends_on_a_cycle() {
        // 10 leads the group, 11 (GNU timeout, a group of its own) is its child, 12 is 11's;
        // 20 was found outside, its parent not.
        let parent = HashMap::from([(10, 1), (11, 10), (12, 11), (20, 5)]);
        assert_eq!(depth(&parent, 10), 0);
        assert_eq!(depth(&parent, 11), 1);
        assert_eq!(depth(&parent, 12), 2);
        assert_eq!(depth(&parent, 20), 0);
        let mut doomed = vec![10, 20, 12, 11];
        doomed.sort_by_key(|pid| std::cmp::Reverse(depth(&parent, *pid)));
        assert_eq!(doomed, [12, 11, 10, 20], "children before their parents");
        // A torn scan: 30 and 31 each other's parent.
        let torn = HashMap::from([(30, 31), (31, 30)]);
        assert!(depth(&torn, 30) <= torn.len());
    }

    #[test]
    fn the_watchdog_hears_the_group_and_the_resumes() {
        let mut heard = Heard::default();
        let mut partial = Vec::new();
        hear(&mut partial, b"G12", &mut heard);
        assert_eq!(heard.pgid, None, "not finished");
        hear(&mut partial, b"345\nRR", &mut heard);
        assert_eq!(
            heard,
            Heard {
                pgid: Some(12345),
                resumed: 2
            }
        );
        hear(&mut partial, b"Gjunk\nR", &mut heard);
        assert_eq!(heard.pgid, Some(12345), "a bad message changes nothing");
        assert_eq!(heard.resumed, 3);
    }

    #[test]
    fn announce_writes_one_message() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        for pid in [1, 7, 4_194_304, libc::pid_t::MAX] {
            assert!(announce(a.as_raw_fd(), pid));
            let mut buf = [0u8; 16];
            let n = b.read(&mut buf).expect("read");
            assert_eq!(&buf[..n], format!("G{pid}\n").as_bytes());
        }
    }
}
