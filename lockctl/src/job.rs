//! The command, run the way a shell runs a job: in a process group of its own, so that every
//! process it starts can be stopped, continued and ended together; in the foreground of
//! lockctl's terminal when a person runs lockctl there; stopped whenever lockctl is, so that
//! it never runs while nothing renews its lock.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::procs;
use crate::signals;
use crate::watchdog::{self, Watchdog};

/// How long a command asked to stop (SIGTSTP...) gets to stop by itself, restoring its
/// terminal for instance, before its whole group is stopped with SIGSTOP.
pub const STOP_WITHIN: Duration = Duration::from_secs(1);

/// A change of the command's process (the group's leader), from waitpid(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// It ended, with this status as lockctl reports it: its exit code, or 128 + the signal
    /// that killed it.
    Exited(u8),
    /// A signal stopped it.
    Stopped(libc::c_int),
    /// It was continued.
    Continued,
}

/// The command's process group.
pub struct Job {
    /// The leader's pid, which is also the group's id.
    pid: libc::pid_t,
    /// How the leader ended, once it has.
    exited: Option<u8>,
    /// lockctl's controlling terminal, if it has one.
    terminal: Option<Terminal>,
    /// The command is a person's at a terminal: it gets the terminal whenever lockctl's
    /// group has it, and its job-control stops stop lockctl (and lockctl's group: the job the
    /// shell sees) too. True when lockctl ran in the foreground of its terminal with the
    /// terminal as stdin, or once the command stopped because it used the terminal from the
    /// background.
    interactive: bool,
    /// Keeps the group stopped while lockctl is stopped, and kills it if lockctl dies.
    watchdog: Option<Watchdog>,
}

impl Job {
    /// Starts `command` with `env` added to lockctl's environment, in a new process group;
    /// it gets the terminal's foreground when lockctl has it and reads from it.
    pub fn start(command: &[OsString], env: &[(&str, String)]) -> io::Result<Job> {
        let terminal = Terminal::open();
        let interactive = terminal.as_ref().is_some_and(|t| {
            // SAFETY: isatty and getpgrp have no memory effects.
            t.foreground() == Some(unsafe { libc::getpgrp() }) && unsafe { libc::isatty(0) } == 1
        });
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let mut cmd = Command::new(program);
        cmd.args(args).process_group(0);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let foreground_fd = terminal
            .as_ref()
            .filter(|_| interactive)
            .map(|t| t.fd.as_raw_fd());
        // Before the command: it watches the group from the command's first instant.
        let watchdog = match Watchdog::spawn() {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "no watchdog: if lockctl is stopped with SIGSTOP or killed, its command's group goes on");
                None
            }
        };
        let watchdog_fd = watchdog.as_ref().map(Watchdog::announce_fd);
        become_subreaper();
        // SAFETY: getpid before the fork; between fork and exec the closure makes only
        // async-signal-safe calls (prctl, getppid, getpid, kill, write, sigprocmask,
        // tcsetpgrp).
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                #[cfg(target_os = "linux")]
                {
                    // The leader dies with lockctl until the watchdog knows the group: if
                    // lockctl is killed before, the group has no process yet but this one.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::getppid() != parent {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                }
                #[allow(unused_variables)]
                let watched = watchdog_fd.is_some_and(|fd| watchdog::announce(fd, libc::getpid()));
                #[cfg(target_os = "linux")]
                if watched && libc::prctl(libc::PR_SET_PDEATHSIG, 0) != 0 {
                    // The watchdog knows the group: if lockctl dies now, the leader lives on
                    // until the watchdog kills everything (within a tick), so that what it
                    // started stays its children (a dead leader's go to init) and can be
                    // found, those in other groups included. (Not a stop: the kernel sends a
                    // newly orphaned group with a stopped member SIGHUP and SIGCONT.)
                    return Err(io::Error::last_os_error());
                }
                if let Some(fd) = foreground_fd {
                    // As a shell does in its child: take the terminal before exec, so that
                    // the command never reads it from the background.
                    give_terminal(fd, libc::getpid());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let pid = libc::pid_t::try_from(child.id())
            .map_err(|_| io::Error::other("the command's pid does not fit a pid_t"))?;
        // Never waited for through `child`: waitpid below reports stops too.
        drop(child);
        if let Some(t) = terminal.as_ref().filter(|_| interactive) {
            t.give_to(pid);
        }
        Ok(Job {
            pid,
            exited: None,
            terminal,
            interactive,
            watchdog,
        })
    }

    /// How the leader ended, if it has.
    pub fn exited(&self) -> Option<u8> {
        self.exited
    }

    /// What happened to the leader since the last call (reaping it once it ended). Reaps the
    /// other children that ended too: processes of the command whose parent ended before them
    /// are given to lockctl (its subreaper), and only lockctl can reap them.
    pub fn poll(&mut self) -> Vec<Event> {
        let mut events = self.poll_leader();
        self.reap_orphans(&mut events);
        events
    }

    /// Reaps every child of lockctl that ended (waitpid(-1)); the leader's end, should it come
    /// here first, is recorded as [`Job::poll_leader`] would.
    fn reap_orphans(&mut self, events: &mut Vec<Event>) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid for any child of ours that ended, WNOHANG.
            let got = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if got < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if got <= 0 {
                return;
            }
            if got == self.pid && self.exited.is_none() {
                let code = exit_code(status);
                self.exited = Some(code);
                self.take_terminal_back();
                events.push(Event::Exited(code));
            } else if self.watchdog.as_ref().is_some_and(|w| w.pid() == got) {
                // It ends only once the command has, or when someone kills it.
                if self.alive() {
                    tracing::warn!("the watchdog ended: if lockctl is stopped with SIGSTOP or killed now, its command goes on");
                }
                self.watchdog = None;
            }
        }
    }

    /// What happened to the leader since the last call (reaping it once it ended).
    fn poll_leader(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while self.exited.is_none() {
            let mut status = 0;
            // SAFETY: waitpid on our own child, WNOHANG.
            let got = unsafe {
                libc::waitpid(
                    self.pid,
                    &mut status,
                    libc::WNOHANG | libc::WUNTRACED | libc::WCONTINUED,
                )
            };
            if got == 0 {
                break;
            }
            if got < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // ECHILD: reaped already (cannot happen: only this loop waits for it).
                crate::output::say!("waiting for the command failed: {e}");
                self.exited = Some(1);
                events.push(Event::Exited(1));
                break;
            }
            let event = if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                Event::Exited(exit_code(status))
            } else if libc::WIFSTOPPED(status) {
                Event::Stopped(libc::WSTOPSIG(status))
            } else if libc::WIFCONTINUED(status) {
                Event::Continued
            } else {
                continue;
            };
            if let Event::Exited(code) = event {
                self.exited = Some(code);
                self.take_terminal_back();
            }
            events.push(event);
        }
        events
    }

    /// Sends `sig` to every process of the command's group.
    pub fn send(&self, sig: libc::c_int) {
        // SAFETY: kill(2) to a process group we created; ESRCH (gone) is fine.
        unsafe {
            libc::killpg(self.pid, sig);
        }
    }

    /// Whether the command's group has the terminal (so that a terminal's Ctrl-C or hang-up
    /// reached it already, without lockctl).
    pub fn has_terminal(&self) -> bool {
        self.terminal
            .as_ref()
            .is_some_and(|t| t.foreground() == Some(self.pid))
    }

    /// Whether some process of the command still runs (a zombie does not): one of its process
    /// group, or one it moved to another group of lockctl's session ([`procs::escaped`]).
    pub fn alive(&self) -> bool {
        let Some(procs) = procs::all() else {
            return procs::group_exists(self.pid);
        };
        procs.iter().any(|p| p.pgrp == self.pid && p.is_live()) || !self.escaped(&procs).is_empty()
    }

    /// The command's processes outside its group (see [`procs::escaped`]).
    fn escaped(&self, procs: &[procs::Stat]) -> Vec<procs::Stat> {
        // SAFETY: these calls only read process attributes.
        let (me, session) = unsafe { (libc::getpid(), libc::getsid(0)) };
        let watchdog: Vec<libc::pid_t> = self.watchdog.iter().map(Watchdog::pid).collect();
        procs::escaped(procs, me, self.pid, session, &watchdog)
    }

    /// Sends `sig` to every process of the command: its group, and each process it moved to
    /// another group (as a shell's `kill %job` would not: those are the command's all the same,
    /// and must end with the lock).
    pub fn send_all(&self, sig: libc::c_int) {
        self.send(sig);
        for p in self.escaped(&procs::all().unwrap_or_default()) {
            // SAFETY: kill(2) to a live descendant of lockctl, just seen in /proc.
            unsafe {
                libc::kill(p.pid, sig);
            }
        }
    }

    /// Ends the command: SIGTERM, and SIGCONT so that a stopped process acts on it, to every
    /// process of it ([`Job::send_all`]).
    pub fn terminate(&self) {
        self.send_all(libc::SIGTERM);
        self.send_all(libc::SIGCONT);
    }

    /// Whether a stop of the command by `sig` is a job-control stop lockctl must join (see
    /// [`Job::stop_with_lockctl`]): the terminal's Ctrl-Z for a person's command, the command
    /// using the terminal from the background, or any other stop (SIGSTOP from elsewhere, a
    /// debugger) of a person's command in the foreground, which a shell would show stopped
    /// too. Only while the leader is still stopped: a stop already undone is no stop.
    pub fn stops_the_job(&mut self, sig: libc::c_int) -> bool {
        if self.terminal.is_none() || procs::stat(self.pid).is_some_and(|s| !s.is_stopped()) {
            return false;
        }
        match sig {
            libc::SIGTTIN | libc::SIGTTOU => {
                // It wants the terminal: give it, next time lockctl has it.
                self.interactive = true;
                true
            }
            libc::SIGTSTP => self.interactive,
            _ => self.interactive && self.has_terminal(),
        }
    }

    /// The first step of a stop by `sig` (SIGTSTP, SIGTTIN, SIGTTOU) that lockctl received:
    /// `sig` to the command's group, so that each process can restore its terminal or save its
    /// work. The caller then gives it at most [`STOP_WITHIN`] to stop ([`Job::stopped`]),
    /// watching the lock and signals meanwhile, before [`Job::stop_with_lockctl`].
    pub fn ask_to_stop(&self, sig: libc::c_int) {
        self.send(sig);
    }

    /// Whether the leader stopped (or ended) among `events`.
    pub fn stopped(events: &[Event]) -> bool {
        events
            .iter()
            .any(|e| matches!(e, Event::Stopped(_) | Event::Exited(_)))
    }

    /// Stops the job as `sig` stops one in a shell: SIGSTOP for whatever of the command's
    /// group did not stop, the terminal back to lockctl's group, then lockctl itself (and, for
    /// a person's command, lockctl's group, the job the shell waits for) with `sig`, SIGTSTP
    /// for a stop that is not a job-control one (SIGSTOP). Returns once lockctl is continued,
    /// or at once when a SIGCONT came since [`signals::continued_count`] was
    /// `continued_before`; the caller then checks the lock before it continues the command
    /// ([`Job::resume`]).
    pub fn stop_with_lockctl(&mut self, sig: libc::c_int, continued_before: u64) -> Vec<Event> {
        self.send(libc::SIGSTOP);
        self.take_terminal_back();
        let own = match sig {
            libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => sig,
            _ => libc::SIGTSTP,
        };
        tracing::debug!(signal = %signals::name(own), "stopping with the command");
        signals::stop_self(own, self.interactive, continued_before);
        self.poll()
    }

    /// Continues the command after lockctl was continued and made sure the lock is still
    /// held: gives it the terminal if it is a person's and lockctl's group has it (`fg`; not
    /// after `bg`), and sends SIGCONT to its group.
    pub fn resume(&mut self) {
        if let Some(w) = self.watchdog.as_mut() {
            // After this, the watchdog stops nothing it saw lockctl stopped for.
            w.resumed();
        }
        if self.interactive {
            if let Some(t) = &self.terminal {
                // SAFETY: getpgrp has no memory effects.
                if t.foreground() == Some(unsafe { libc::getpgrp() }) {
                    t.give_to(self.pid);
                }
            }
        }
        self.send(libc::SIGCONT);
    }

    /// Gives the terminal back to lockctl's group if the command's group has it.
    fn take_terminal_back(&self) {
        if let Some(t) = &self.terminal {
            if t.foreground() == Some(self.pid) {
                // SAFETY: getpgrp has no memory effects.
                t.give_to(unsafe { libc::getpgrp() });
            }
        }
    }
}

/// The exit status lockctl reports for a child's wait status: its exit code, or 128 + the
/// signal that killed it.
fn exit_code(status: libc::c_int) -> u8 {
    if libc::WIFSIGNALED(status) {
        128u8.saturating_add(libc::WTERMSIG(status) as u8)
    } else {
        libc::WEXITSTATUS(status) as u8
    }
}

/// Makes lockctl the child subreaper of what it starts (Linux): a process of the command whose
/// parent ends goes to lockctl instead of init, so that it stays lockctl's descendant, which
/// is how lockctl (and its watchdog) find the command's processes that left its group.
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with an integer argument.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "not a subreaper");
        }
    }
}

/// lockctl's controlling terminal.
struct Terminal {
    fd: OwnedFd,
}

impl Terminal {
    fn open() -> Option<Terminal> {
        // SAFETY: open(2) of a path literal; the fd is owned below.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        // SAFETY: a fresh descriptor nobody else owns.
        (fd >= 0).then(|| Terminal {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> Option<libc::pid_t> {
        // SAFETY: tcgetpgrp on a descriptor we own.
        let pgrp = unsafe { libc::tcgetpgrp(self.fd.as_raw_fd()) };
        (pgrp > 0).then_some(pgrp)
    }

    fn give_to(&self, pgrp: libc::pid_t) {
        give_terminal(self.fd.as_raw_fd(), pgrp);
    }
}

/// tcsetpgrp with SIGTTOU blocked, as shells do: a process of a background group that
/// changes the foreground would otherwise be stopped by it. Async-signal-safe.
fn give_terminal(fd: libc::c_int, pgrp: libc::pid_t) {
    // SAFETY: signal masks of this thread only, restored before returning; tcsetpgrp on a
    // terminal descriptor (a failure leaves the foreground as it was).
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(fd, pgrp);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Checks, before anything is acquired, that the command can be started with lockctl's
/// variables in its environment (the key in `RELOCK_KEY`, and the owner and tokens of
/// `masters` masters): exec(2) refuses (E2BIG) a variable longer than MAX_ARG_STRLEN (32
/// pages, 128 KiB on most Linux systems), and arguments and environment together beyond
/// ARG_MAX.
/// `keys_len` is the length of `RELOCK_KEYS` (every key, one per line; `key_len` for one key).
pub fn check_exec_size(
    command: &[OsString],
    key_len: usize,
    keys_len: usize,
    masters: usize,
) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    const KEY: &str = "RELOCK_KEY";
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no memory effects.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let max_string = 32 * page;
        // KEY=value and the terminating NUL; RELOCK_KEYS is one byte longer a name.
        let size = KEY.len() + 2 + key_len.max(keys_len) + 1;
        if size > max_string {
            let (what, var, len) = if keys_len > key_len {
                ("the keys are", "RELOCK_KEYS", keys_len)
            } else {
                ("the key is", KEY, key_len)
            };
            return Err(format!(
                "{what} {len} bytes long: too long to give the command in {var} (one environment \
                 variable may take at most {max_string} bytes on this system, its name \
                 included); use shorter keys (at most {} bytes in all)",
                max_string - var.len() - 2
            ));
        }
    }
    // SAFETY: as above.
    let arg_max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    let Ok(arg_max) = usize::try_from(arg_max) else {
        return Ok(());
    };
    // Each string with its NUL and its pointer in argv or envp.
    let pointer = std::mem::size_of::<usize>();
    let string = |len: usize| len + 1 + pointer;
    // RELOCK_OWNER (at most 256 bytes), RELOCK_TOKEN and RELOCK_TOKENS (up to 16 digits and a comma
    // per master), with their names.
    let ours = string(KEY.len() + 1 + key_len)
        + string(KEY.len() + 2 + keys_len)
        + string(13 + 256)
        + string(13 + 16)
        + string(14 + 17 * masters.max(1));
    let args: usize = command.iter().map(|a| string(a.as_bytes().len())).sum();
    let inherited: usize = std::env::vars_os()
        .filter(|(k, _)| !k.as_bytes().starts_with(b"RELOCK_"))
        .map(|(k, v)| string(k.as_bytes().len() + 1 + v.as_bytes().len()))
        .sum();
    let total = args + inherited + ours;
    if total > arg_max {
        return Err(format!(
            "the command's arguments and environment, with the {key_len}-byte key in {KEY}, \
             would take {total} bytes: more than the {arg_max} bytes the system allows \
             (ARG_MAX); use a shorter key"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_size() {
        let cmd = vec![OsString::from("true")];
        assert!(check_exec_size(&cmd, 100, 100, 3).is_ok());
        let err = check_exec_size(&cmd, 200_000, 200_000, 1).unwrap_err();
        assert!(err.contains("200000 bytes"), "{err}");
        assert!(err.contains("RELOCK_KEY"), "{err}");
        // 256 keys of 1000 bytes: RELOCK_KEYS is too long.
        assert!(check_exec_size(&cmd, 1000, 256 * 1001, 1).is_err());
        let err = check_exec_size(&cmd, 100_000_000, 100_000_000, 1).unwrap_err();
        assert!(err.contains("RELOCK_KEY"), "{err}");
    }
}
