//! Signals lockctl receives while it runs a command: a handler writes one byte per signal to
//! a socket pair (the only thing it does, and async-signal-safe), the main loop reads them
//! and decides, with [`kind`], what each one means for the command.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use tokio::io::Interest;

/// What a signal sent to lockctl means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Meant for the command, which decides what to do with it: passed on to its process
    /// group. Before the command runs, one whose default action ends a process ends lockctl
    /// (after it releases what it was granted); one that is ignored by default is ignored.
    ForCommand,
    /// SIGTSTP, SIGTTIN, SIGTTOU: job control stops the job, the command's group and lockctl
    /// with it (nothing could renew the lock while lockctl is stopped).
    Stop,
    /// SIGCONT: the job goes on, the command once the lock is known to be still held.
    Continue,
    /// SIGCHLD: the command (or the watchdog) stopped, continued or ended.
    Child,
}

/// Marks a signal the kernel sent (a terminal's Ctrl-C or hang-up, a child's state change),
/// not a process with kill(2).
const FROM_KERNEL: u8 = 0x80;

/// The socket the handlers write to; -1 until [`Pipe::install`].
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// lockctl's pid, from [`Pipe::install`]: a child lockctl forks runs the handlers it inherits
/// until it execs, and a signal it gets then (one sent to lockctl's process group, which it
/// is in until it moves to its own) is not lockctl's.
static LOCKCTL_PID: AtomicI32 = AtomicI32::new(-1);

/// How many SIGCONTs lockctl has received, counted by the handler itself: a stop sequence
/// compares it before it stops lockctl, so that a SIGCONT that came during the sequence, even
/// one not read from the socket yet, wins over the stop ([`stop_self`]).
static CONTINUED: AtomicU64 = AtomicU64::new(0);

/// How many SIGCONTs lockctl has received so far (see [`stop_self`]).
pub fn continued_count() -> u64 {
    CONTINUED.load(Ordering::SeqCst)
}

/// Every signal lockctl handles while it runs a command. Not the faults (SIGSEGV, SIGBUS,
/// SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGSYS: they mean lockctl itself is broken), not
/// SIGPIPE (ignored: a closed stderr must not end lockctl), and not SIGKILL and SIGSTOP,
/// which no process can handle (see the watchdog).
pub fn handled() -> Vec<libc::c_int> {
    let mut all = vec![
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGCHLD,
        libc::SIGCONT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGURG,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGWINCH,
        libc::SIGIO,
    ];
    #[cfg(target_os = "linux")]
    {
        all.extend([libc::SIGSTKFLT, libc::SIGPWR]);
        all.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    }
    all
}

/// What `sig` means to lockctl (see [`Kind`]).
pub fn kind(sig: libc::c_int) -> Kind {
    match sig {
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => Kind::Stop,
        libc::SIGCONT => Kind::Continue,
        libc::SIGCHLD => Kind::Child,
        _ => Kind::ForCommand,
    }
}

/// Whether `sig`'s default action ends a process (so that, received before the command
/// runs, it ends lockctl too).
pub fn ends_a_process(sig: libc::c_int) -> bool {
    kind(sig) == Kind::ForCommand && !matches!(sig, libc::SIGWINCH | libc::SIGURG)
}

/// One signal lockctl received.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub signal: libc::c_int,
    /// Sent by the kernel (`si_code > 0`: `SI_KERNEL` for a terminal's Ctrl-C, Ctrl-Z or
    /// hang-up, which go to the terminal's whole foreground process group), not by a process
    /// with kill(2).
    pub from_kernel: bool,
}

/// Signals as they arrive.
pub struct Pipe {
    rx: tokio::net::UnixStream,
    /// Read from the socket already by [`Pipe::continue_pending`], not yet by a receiver.
    pending: VecDeque<Received>,
}

impl Pipe {
    /// Installs the handlers: from now on no signal in [`handled`] acts on lockctl by itself.
    pub fn install() -> io::Result<Pipe> {
        let (rx, tx) = std::os::unix::net::UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        // Kept open for the life of the process: the handlers write to it.
        WRITE_FD.store(tx.into_raw_fd(), Ordering::SeqCst);
        // SAFETY: getpid has no memory effects.
        LOCKCTL_PID.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        for sig in handled() {
            handle(sig)?;
        }
        Ok(Pipe {
            rx: tokio::net::UnixStream::from_std(rx)?,
            pending: VecDeque::new(),
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Received {
        if let Some(received) = self.pending.pop_front() {
            return received;
        }
        loop {
            if self.rx.readable().await.is_err() {
                // Cannot happen with a socket we own; never report a signal we did not get.
                std::future::pending::<()>().await;
            }
            // Through tokio, so that an empty socket clears the readiness it cached.
            let fd = self.rx.as_raw_fd();
            if let Ok(byte) = self.rx.try_io(Interest::READABLE, || read_byte(fd)) {
                return Received::of(byte);
            }
        }
    }

    /// A signal received already, if any. Reads the socket itself: tokio's cached readiness
    /// may not know yet of a byte a handler just wrote (a signal between two awaits, at the
    /// start of the command, was left unread until the command had run).
    pub fn try_recv(&mut self) -> Option<Received> {
        self.pending
            .pop_front()
            .or_else(|| read_byte(self.rx.as_raw_fd()).ok().map(Received::of))
    }

    /// Stops lockctl alone by `sig` ([`stop_self`]), before its command runs, unless a SIGCONT
    /// came after the stop (read or not yet).
    pub fn stop_alone(&mut self, sig: libc::c_int) {
        let before = continued_count();
        if !self.continue_pending() {
            stop_self(sig, false, before);
        }
    }

    /// Whether a SIGCONT was received and not read yet: a stop sequence that finds one ends
    /// without stopping lockctl (the continuation came after the stop, and wins). Every signal
    /// received so far stays to be read, in order.
    pub fn continue_pending(&mut self) -> bool {
        while let Ok(byte) = read_byte(self.rx.as_raw_fd()) {
            self.pending.push_back(Received::of(byte));
        }
        self.pending.iter().any(|r| r.signal == libc::SIGCONT)
    }
}

impl Received {
    fn of(byte: u8) -> Received {
        Received {
            signal: libc::c_int::from(byte & !FROM_KERNEL),
            from_kernel: byte & FROM_KERNEL != 0,
        }
    }
}

/// One byte from the non-blocking socket `fd`; `WouldBlock` if there is none.
fn read_byte(fd: libc::c_int) -> io::Result<u8> {
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into a live local; `fd` is the pipe's open socket.
    let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
    match n {
        1 => Ok(byte),
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The handler: one byte, the signal's number with [`FROM_KERNEL`], to the socket. In a
/// child between its fork and its exec, nothing: the signal is dropped (lockctl, in the
/// group it was sent to, gets its own), so that it neither reaches lockctl twice nor, with
/// its default action, stops the child before its exec, which lockctl waits for.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: only async-signal-safe calls (getpid(2), write(2)) and reads of the siginfo the
    // kernel passed; errno is saved and restored so that the interrupted code never sees ours.
    unsafe {
        if libc::getpid() != LOCKCTL_PID.load(Ordering::Relaxed) {
            return;
        }
        if sig == libc::SIGCONT {
            CONTINUED.fetch_add(1, Ordering::SeqCst);
        }
        let errno = errno_location();
        let saved = errno.as_deref().copied();
        let from_kernel = !info.is_null() && (*info).si_code > 0;
        // Signal numbers are at most 64, below the FROM_KERNEL bit.
        let byte = (sig as u8) | if from_kernel { FROM_KERNEL } else { 0 };
        let fd = WRITE_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            // A full buffer (thousands of pending signals) drops the byte, nothing worse.
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
        if let (Some(e), Some(saved)) = (errno, saved) {
            *e = saved;
        }
    }
}

#[cfg(target_os = "linux")]
fn errno_location() -> Option<&'static mut libc::c_int> {
    // SAFETY: glibc's thread-local errno, valid for the life of the thread.
    unsafe { libc::__errno_location().as_mut() }
}

#[cfg(not(target_os = "linux"))]
fn errno_location() -> Option<&'static mut libc::c_int> {
    None
}

/// Points `sig` at [`on_signal`]. The job-control signals are not restarted: with
/// `stty tostop`, a write lockctl makes while its command has the terminal gets SIGTTOU, and a
/// restarted write would get it again, forever.
fn handle(sig: libc::c_int) -> io::Result<()> {
    let restart = if matches!(sig, libc::SIGTTIN | libc::SIGTTOU) {
        0
    } else {
        libc::SA_RESTART
    };
    // SAFETY: a zeroed sigaction is valid; the handler only writes to a socket (see above).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void)
            as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | restart;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Stops lockctl the way `sig` (SIGTSTP, SIGTTIN or SIGTTOU) stops a process, with the rest of
/// its process group when `whole_group` (the job a shell started: lockctl and whatever shares
/// its pipeline), and returns once lockctl is continued, or at once if a SIGCONT came since
/// [`continued_count`] was `continued_before`: a continuation that came during the stop
/// sequence wins, as the kernel has it (a SIGCONT discards a pending stop).
///
/// The stop is raised blocked, so that it is pending while the count is compared: a SIGCONT
/// after the comparison discards it (the kernel's rule), and one before it is seen, and the
/// pending stop discarded (by ignoring it for a moment). No SIGCONT is lost in between.
///
/// The kernel does not stop a process of an orphaned process group (no parent in another group
/// of its session, so no job-control shell to continue it) on these signals. lockctl must stop
/// all the same, since its command is stopped and nothing may renew for it unseen: there it
/// stops with SIGSTOP, which always does, and whoever stopped it continues it with SIGCONT.
/// SIGSTOP cannot be blocked: a SIGCONT in the few instructions between the comparison and the
/// SIGSTOP would find lockctl still running, and lockctl then stops until the next one.
pub fn stop_self(sig: libc::c_int, whole_group: bool, continued_before: u64) {
    if continued_count() != continued_before {
        return;
    }
    let sig = if group_is_orphaned() {
        libc::SIGSTOP
    } else {
        sig
    };
    // SAFETY: signal dispositions and masks of this thread, and signals to our own process and
    // group; the handler and the mask are put back before this returns.
    unsafe {
        if whole_group {
            // The others stop; our own copy is discarded, to be raised on this thread below.
            if sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_IGN);
            }
            libc::killpg(libc::getpgrp(), sig);
        }
        if sig == libc::SIGSTOP {
            if continued_count() == continued_before {
                libc::raise(sig);
            }
            return;
        }
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::signal(sig, libc::SIG_DFL);
        // Directed at this thread, so that it stops (with every other thread) when the mask
        // is put back, not some time after another thread took the signal.
        libc::raise(sig);
        if continued_count() != continued_before {
            // Ignoring a pending signal discards it.
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    let _ = handle(sig);
}

/// Whether `received`, a stop, is one lockctl drops: the kernel sent it (a terminal's Ctrl-Z,
/// or lockctl's use of the terminal from the background), and lockctl's process group has been
/// orphaned since (the shell that ran it is gone). The kernel itself discards such a stop for a
/// process of an orphaned group, since nothing is left to continue it; lockctl, which reads its
/// signals a moment after they came, must not stop for good on one either.
pub fn is_stale_stop(received: Received) -> bool {
    received.from_kernel && group_is_orphaned()
}

/// Whether lockctl's process group is orphaned: no member of it has a parent in another group
/// of its session (POSIX; what the kernel checks before it drops a job-control stop). A
/// script's group (`sh job.sh`, make, xargs: lockctl's parent shares its group, and the
/// script's parent is the interactive shell) is not. Without /proc, only lockctl's parent is
/// looked at: in another group of the session, not orphaned; in another session (or gone),
/// orphaned; in lockctl's own group, not orphaned (a stop then behaves as the kernel decides).
fn group_is_orphaned() -> bool {
    // SAFETY: these calls only read process attributes.
    let (group, session) = unsafe { (libc::getpgrp(), libc::getsid(0)) };
    if let Some(orphaned) = crate::procs::group_is_orphaned(group, session) {
        return orphaned;
    }
    // SAFETY: as above.
    unsafe {
        let parent = libc::getppid();
        let (parent_group, parent_session) = (libc::getpgid(parent), libc::getsid(parent));
        parent_group < 0 || parent_session < 0 || parent_session != session
    }
}

/// Ends lockctl the way `sig` would have without a handler, so that whoever started it
/// sees "killed by SIGINT" and acts on it (a shell script stops, for instance).
pub fn die_of(sig: libc::c_int) -> ! {
    // What lockctl said last (why it gives up) before it goes.
    crate::output::flush();
    // SAFETY: restoring the default action, unblocking and raising the signal.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// The signal's name, `SIGTERM`, or `SIGRTMIN+3` for a real-time one.
pub fn name(sig: libc::c_int) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGCHLD, "SIGCHLD"),
        (libc::SIGCONT, "SIGCONT"),
        (libc::SIGSTOP, "SIGSTOP"),
        (libc::SIGTSTP, "SIGTSTP"),
        (libc::SIGTTIN, "SIGTTIN"),
        (libc::SIGTTOU, "SIGTTOU"),
        (libc::SIGURG, "SIGURG"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGWINCH, "SIGWINCH"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGKILL, "SIGKILL"),
    ];
    if let Some((_, name)) = known.iter().find(|(s, _)| *s == sig) {
        return (*name).to_string();
    }
    #[cfg(target_os = "linux")]
    {
        if sig == libc::SIGSTKFLT {
            return "SIGSTKFLT".into();
        }
        if sig == libc::SIGPWR {
            return "SIGPWR".into();
        }
        if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig) {
            return format!("SIGRTMIN+{}", sig - libc::SIGRTMIN());
        }
    }
    format!("signal {sig}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_has_a_meaning() {
        for sig in handled() {
            assert!(!name(sig).starts_with("signal "), "{sig}");
            let k = kind(sig);
            assert_eq!(
                ends_a_process(sig),
                k == Kind::ForCommand && sig != libc::SIGWINCH && sig != libc::SIGURG
            );
        }
        assert_eq!(kind(libc::SIGTSTP), Kind::Stop);
        assert_eq!(kind(libc::SIGQUIT), Kind::ForCommand);
        assert!(ends_a_process(libc::SIGUSR1));
        assert!(!ends_a_process(libc::SIGWINCH));
        assert!(!handled().contains(&libc::SIGPIPE));
        assert!(!handled().contains(&libc::SIGSEGV));
    }
}
