//! The watchdog: a small process (lockctl itself, started again with [`ARG`]) that keeps the
//! command from running when lockctl cannot renew its lock for reasons lockctl cannot handle
//! itself. A process stopped with SIGSTOP (or by a debugger) runs no handler, and one killed
//! with SIGKILL runs nothing: the parent-death signal ends only the command's first process,
//! not the rest of its group. So, every [`TICK`]:
//!
//! - while lockctl is stopped, the command's group is stopped too (again, if someone
//!   continues it behind lockctl's back);
//! - once lockctl is gone (its end of the socket closed) while the group still has
//!   processes, they are killed (SIGKILL), and the watchdog exits;
//! - once the group is gone, the watchdog exits.
//!
//! When lockctl is continued it says so over the socket (`R`) and waits for the answer (`A`)
//! before it continues the group: a SIGSTOP the watchdog sent for the stop just over can then
//! no longer arrive after lockctl's SIGCONT.
//!
//! The watchdog runs in a process group of its own and ignores every signal it can, so that
//! nothing meant for lockctl or its command (a terminal's Ctrl-C, a service manager's SIGTERM
//! to lockctl's group) ends it before it has done its part.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

/// The first argument that makes lockctl a watchdog (not a subcommand: never shown).
pub const ARG: &str = "__relock_watchdog";

/// How often the watchdog looks at lockctl and the command's group.
const TICK: Duration = Duration::from_millis(20);

/// How long lockctl waits for the watchdog's answer after it was continued.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// lockctl's side: the socket to its watchdog.
pub struct Watchdog {
    socket: UnixStream,
    /// Never waited for while lockctl runs: it outlives lockctl by design.
    _child: std::process::Child,
}

impl Watchdog {
    /// Starts the watchdog of the process group `pgid`.
    pub fn spawn(pgid: libc::pid_t) -> io::Result<Watchdog> {
        let (ours, theirs) = UnixStream::pair()?;
        // Linux can start the running binary even if its file was replaced since.
        let exe = if cfg!(target_os = "linux") {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut cmd = Command::new(exe);
        cmd.arg(ARG)
            .arg(pgid.to_string())
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
            _child: child,
        })
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

/// The watchdog process: `lockctl __relock_watchdog PGID`, with its socket as stdin.
pub fn main(args: &[String]) -> ExitCode {
    let Some(pgid) = args.first().and_then(|a| a.parse::<libc::pid_t>().ok()) else {
        return ExitCode::from(2);
    };
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
        let mut gone = false;
        let mut buf = [0u8; 16];
        loop {
            match socket.read(&mut buf) {
                Ok(0) => {
                    gone = true;
                    break;
                }
                Ok(n) => {
                    if buf[..n].contains(&b'R') {
                        let _ = socket.write_all(b"A");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        // (kill(2) alone, cheap enough for every tick: a group of zombies only waits for
        // lockctl's exit, and the SIGKILL then is harmless.)
        if !crate::procs::group_exists(pgid) {
            return ExitCode::SUCCESS;
        }
        // SAFETY: getppid has no memory effects.
        if gone || unsafe { libc::getppid() } != lockctl {
            // lockctl is gone and left processes of the command running: nothing renews the
            // lock for them.
            // SAFETY: kill(2) to the command's group, which still exists (checked above).
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
            return ExitCode::SUCCESS;
        }
        if stopped(lockctl) {
            // SAFETY: as above.
            unsafe {
                libc::killpg(pgid, libc::SIGSTOP);
            }
        }
    }
}

/// Whether process `pid` is stopped (job control, SIGSTOP, or a debugger's stop).
fn stopped(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| crate::procs::parse_stat(&stat))
        .is_some_and(|(state, _)| state == 'T' || state == 't')
}
