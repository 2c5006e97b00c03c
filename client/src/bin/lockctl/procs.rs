//! Processes and process groups as kill(2) and /proc show them.

use std::io;

/// What `/proc/PID/stat` says of a process that matters to lockctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: libc::pid_t,
    /// `R`, `S`, `D`, `T` (stopped), `t` (traced), `Z` (zombie)...
    pub state: char,
    pub ppid: libc::pid_t,
    pub pgrp: libc::pid_t,
    pub session: libc::pid_t,
    /// When it started, in clock ticks since boot: with the pid, it names one process even
    /// after its pid is reused.
    pub start_time: u64,
}

impl Stat {
    /// Whether it still runs code (a zombie, or a process being reaped, does not).
    pub fn is_live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    /// Whether it is stopped (job control, SIGSTOP, or a debugger's stop).
    pub fn is_stopped(&self) -> bool {
        self.state == 'T' || self.state == 't'
    }
}

/// Whether process group `pgrp` has any process, zombies included.
pub fn group_exists(pgrp: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks.
    let found = unsafe { libc::kill(-pgrp, 0) } == 0;
    // EPERM: it exists, with a process we may not signal (a setuid program).
    found || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether a process of group `pgrp` is alive: kill(2) finds zombies too (a member whose
/// parent has not reaped it yet), so on Linux a member counts only if /proc shows it is not
/// one.
pub fn group_alive(pgrp: libc::pid_t) -> bool {
    group_exists(pgrp)
        && all().is_none_or(|procs| procs.iter().any(|p| p.pgrp == pgrp && p.is_live()))
}

/// Process `pid`, from /proc.
pub fn stat(pid: libc::pid_t) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process /proc shows (`None` without /proc).
pub fn all() -> Option<Vec<Stat>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let procs = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter_map(stat)
        .collect();
    Some(procs)
}

/// A `/proc/PID/stat` line: `pid (comm) state ppid pgrp session ... starttime ...` (the
/// command name may hold spaces and parentheses: the fields follow the last `)`).
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_whitespace().next()?.parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19).and_then(|f| f.parse().ok()).unwrap_or(0),
    })
}

/// Whether process group `pgrp` of session `session` is orphaned, as POSIX (and the kernel,
/// which then drops job-control stops for it) defines it: no live member has a parent in
/// another group of the same session (a job-control shell that could continue it). A parent
/// that is init does not count. `None` without /proc.
pub fn group_is_orphaned(pgrp: libc::pid_t, session: libc::pid_t) -> Option<bool> {
    let procs = all()?;
    let linked = procs
        .iter()
        .filter(|p| p.pgrp == pgrp && p.is_live() && p.ppid > 1)
        .filter_map(|member| procs.iter().find(|p| p.pid == member.ppid))
        .any(|parent| parent.pgrp != pgrp && parent.session == session);
    Some(!linked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        let sleep = parse_stat(
            "42 (sleep) S 1 42 40 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 8000 100",
        )
        .expect("parses");
        assert_eq!(
            sleep,
            Stat {
                pid: 42,
                state: 'S',
                ppid: 1,
                pgrp: 42,
                session: 40,
                start_time: 987_654
            }
        );
        let odd = parse_stat("7 (a) b) (c) Z 1 99 7 0").expect("parses");
        assert_eq!(
            (odd.state, odd.pgrp, odd.session),
            ('Z', 99, 7),
            "a command name with spaces and parentheses"
        );
        assert!(!odd.is_live());
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_seen() {
        // SAFETY: these calls only read process attributes.
        let (pid, pgrp, sid) = unsafe { (libc::getpid(), libc::getpgrp(), libc::getsid(0)) };
        let me = stat(pid).expect("/proc");
        assert_eq!((me.pgrp, me.session), (pgrp, sid));
        assert!(group_alive(pgrp));
        assert!(group_is_orphaned(pgrp, sid).is_some());
    }
}
