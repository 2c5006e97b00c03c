//! A pseudo-terminal for the tests that type at lockctl (or at a shell that runs it) the way
//! a person does: the program runs as the leader of a new session whose controlling terminal
//! is the pty's slave side, and the test writes keys (Ctrl-C, Ctrl-Z, `fg`) to the master
//! side and reads what the program printed.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::eventually;
use crate::process::Spawned;

pub struct Pty {
    master: std::fs::File,
    printed: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    /// The session leader; killed on drop.
    pub child: Spawned,
}

impl Pty {
    /// Starts `cmd` in a new session whose controlling terminal is a fresh pty (cooked mode,
    /// ISIG on: Ctrl-C, Ctrl-\ and Ctrl-Z send signals to its foreground process group).
    pub fn spawn(cmd: &mut Command) -> Pty {
        let (master, slave) = {
            let (mut m, mut s) = (-1, -1);
            // SAFETY: openpty writes two fds into the locals; null termios/winsize mean
            // defaults.
            let rc = unsafe {
                libc::openpty(
                    &mut m,
                    &mut s,
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    std::ptr::null(),
                )
            };
            assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
            // openpty's fds are inheritable: without close-on-exec every program another test
            // of the same binary starts meanwhile (a redis-server, a lockctl) would keep this
            // terminal open, so that closing the master hangs nobody up and the reader below
            // never sees the end.
            for fd in [m, s] {
                // SAFETY: fcntl on an fd this function owns.
                let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
                assert_eq!(rc, 0, "FD_CLOEXEC: {}", std::io::Error::last_os_error());
            }
            // SAFETY: both fds were just opened and are owned by nobody else.
            unsafe { (std::fs::File::from_raw_fd(m), OwnedFd::from_raw_fd(s)) }
        };
        cmd.stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave.try_clone().expect("dup")));
        // SAFETY: setsid and ioctl are async-signal-safe; stdin is the slave side by now.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = Spawned::new(cmd);
        // Only the program (and what it starts) keeps the slave side open, so the reader
        // below ends with them.
        drop(slave);
        let printed = Arc::new(Mutex::new(Vec::new()));
        let mut from = master.try_clone().expect("dup master");
        let into = printed.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the last slave fd closes.
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().expect("printed").extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            master,
            printed,
            reader: Some(reader),
            child,
        }
    }

    /// Types `keys` (`b"\x03"` is Ctrl-C, `b"\x1a"` Ctrl-Z, `b"\x1c"` Ctrl-\).
    pub fn type_keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).expect("type on the pty");
    }

    /// Everything printed on the terminal so far.
    pub fn printed(&self) -> String {
        String::from_utf8_lossy(&self.printed.lock().expect("printed")).into_owned()
    }

    /// Waits until the terminal shows `text` (counting from the start), failing with what it
    /// shows after `within`.
    pub fn expect(&self, text: &str, within: Duration) {
        assert!(
            eventually(within, || self.printed().contains(text)),
            "the terminal never showed {text:?}; it shows:\n{}",
            self.printed()
        );
    }

    /// How often the terminal shows `text`.
    pub fn count(&self, text: &str) -> usize {
        self.printed().matches(text).count()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        // Hang up: the session's processes get SIGHUP; the leader is killed by `child`.
        if let Some(reader) = self.reader.take() {
            drop(reader);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program another test starts while a pty is open (tests share one binary) does not
    /// inherit the terminal's master or slave side.
    #[test]
    fn programs_started_meanwhile_do_not_inherit_the_terminal() {
        let _pty = Pty::spawn(Command::new("sleep").arg("30"));
        let out = Command::new("sh")
            .args([
                "-c",
                "for fd in /proc/$$/fd/*; do [ \"${fd##*/}\" -gt 2 ] && readlink \"$fd\"; done; true",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("sh");
        let fds = String::from_utf8_lossy(&out.stdout);
        assert!(
            !fds.contains("/dev/pts/") && !fds.contains("ptmx"),
            "a program started meanwhile holds the terminal: {fds}"
        );
    }
}
