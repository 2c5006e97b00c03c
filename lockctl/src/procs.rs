//! Processes and process groups as kill(2) and /proc show them.

use std::collections::HashMap;
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

/// The processes descending from `root` (not `root` itself) among `procs`, zombies included:
/// its children, their children, and so on, by parent pid.
pub fn descendants(procs: &[Stat], root: libc::pid_t) -> Vec<Stat> {
    let mut children: HashMap<libc::pid_t, Vec<&Stat>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            // A pid is its own ancestor only in a scan torn by pid reuse: never loop.
            if child.pid != root && !found.iter().any(|f: &Stat| f.pid == child.pid) {
                found.push(**child);
                next.push(child.pid);
            }
        }
    }
    found
}

/// The processes of a command that left its process group: live descendants of lockctl
/// (`lockctl`, the command's child subreaper, so that they stay its descendants when their
/// parents end) in lockctl's `session`, outside the command's `group`, other than `except` (the
/// watchdog). What `setpgid` moved (GNU timeout, a `set -m` shell's jobs); not what `setsid`
/// moved to a session of its own (a daemon).
pub fn escaped(
    procs: &[Stat],
    lockctl: libc::pid_t,
    group: libc::pid_t,
    session: libc::pid_t,
    except: &[libc::pid_t],
) -> Vec<Stat> {
    descendants(procs, lockctl)
        .into_iter()
        .filter(|p| p.is_live() && p.pgrp != group && p.session == session)
        .filter(|p| !except.contains(&p.pid))
        .collect()
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
    fn a_tree_by_parent_pids() {
        let p = |pid, ppid, pgrp, session, state| Stat {
            pid,
            state,
            ppid,
            pgrp,
            session,
            start_time: 0,
        };
        let procs = [
            p(10, 1, 10, 5, 'S'),   // lockctl
            p(11, 10, 11, 5, 'S'),  // the command's leader, group 11
            p(12, 10, 12, 5, 'S'),  // the watchdog
            p(13, 11, 13, 5, 'S'),  // timeout, its own group
            p(14, 13, 13, 5, 'S'),  // its child
            p(15, 10, 15, 5, 'S'),  // an orphan reparented to lockctl, its own group
            p(16, 11, 16, 16, 'S'), // a daemon: setsid
            p(17, 16, 16, 16, 'S'), // the daemon's worker
            p(18, 11, 18, 5, 'Z'),  // a zombie
            p(19, 11, 11, 5, 'S'),  // in the command's group
            p(20, 1, 20, 5, 'S'),   // not ours
        ];
        let mut all: Vec<_> = descendants(&procs, 10).iter().map(|s| s.pid).collect();
        all.sort_unstable();
        assert_eq!(all, [11, 12, 13, 14, 15, 16, 17, 18, 19]);
        let mut out: Vec<_> = escaped(&procs, 10, 11, 5, &[12])
            .iter()
            .map(|s| s.pid)
            .collect();
        out.sort_unstable();
        assert_eq!(out, [13, 14, 15]);
    }

    #[test]
    fn this_process_is_seen() {
        // SAFETY: these calls only read process attributes.
        let (pid, pgrp, sid) = unsafe { (libc::getpid(), libc::getpgrp(), libc::getsid(0)) };
        let me = stat(pid).expect("/proc");
        assert_eq!((me.pgrp, me.session), (pgrp, sid));
        assert!(group_is_orphaned(pgrp, sid).is_some());
    }
}
