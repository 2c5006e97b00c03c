//! Processes and process groups as kill(2) and /proc show them.

use std::io;

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
    group_exists(pgrp) && live_members(pgrp).is_none_or(|n| n > 0)
}

/// How many processes of group `pgrp` are not zombies, from /proc (`None` without /proc).
fn live_members(pgrp: libc::pid_t) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut live = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((state, group)) = parse_stat(&stat) {
            if group == pgrp && state != 'Z' && state != 'X' {
                live += 1;
            }
        }
    }
    Some(live)
}

/// The state and process group of a `/proc/PID/stat` line: `pid (comm) state ppid pgrp ...`
/// (the command name may hold spaces and parentheses: the fields follow the last `)`).
pub fn parse_stat(stat: &str) -> Option<(char, libc::pid_t)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        assert_eq!(
            parse_stat("42 (sleep) S 1 42 42 0 -1 4194560"),
            Some(('S', 42))
        );
        assert_eq!(
            parse_stat("7 (a) b) (c) Z 1 99 7 0"),
            Some(('Z', 99)),
            "a command name with spaces and parentheses"
        );
        assert_eq!(parse_stat("garbage"), None);
    }
}
