//! Writing to stdout and stderr the way a command-line tool should: a closed pipe ends
//! `lockctl info | head -1` like it ends `cat`, and nothing lockctl says on stderr can make
//! it panic or hang while it holds a lock.

use std::fmt;
use std::io::{self, Write};

/// Says `lockctl: <message>` on stderr (see [`Stderr`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Prints one line on stdout (see [`print_line`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print_line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// Stderr that never fails and never retries: a message that cannot be written is dropped.
///
/// `eprintln!` panics when stderr is a closed pipe, and `write_all` retries an interrupted
/// write forever: with `stty tostop`, a terminal answers every write lockctl makes while its
/// command has the terminal with SIGTTOU and an interrupted write. Neither may happen to a
/// process that holds a lock for a command.
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: write(2) of a live buffer to fd 2; any failure only drops the message.
        let written = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
        Ok(usize::try_from(written)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(buf.len()))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub fn say_line(message: fmt::Arguments<'_>) {
    let line = format!("lockctl: {message}\n");
    let _ = Stderr.write_all(line.as_bytes());
}

/// Prints a line on stdout. When stdout is a pipe nobody reads any more, lockctl dies of
/// SIGPIPE, as `cat` or `ls` would (what it was asked to do is done by then); any other write
/// error ends it with status 1.
pub fn print_line(line: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => crate::signals::die_of(libc::SIGPIPE),
        Err(e) => {
            say!("cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}
