//! Writing to stdout and stderr the way a command-line tool should: a closed pipe ends
//! `lockctl info | head -1` like it ends `cat`, and nothing lockctl says on stderr can make
//! it panic or hang while it holds a lock.
//!
//! Every message for stderr (`say!`, and every log line of lockctl and of the client's
//! renewal task) goes into a bounded queue that one thread of its own writes out. A write to
//! stderr blocks when stderr is a pipe nobody reads (`lockctl run ... 2>&1 | less` left on its
//! first screen, a stalled log shipper): then only that thread waits, and lockctl goes on
//! renewing, watching the lock and ending the command on a loss. Once the queue is full, new
//! messages are dropped and counted, and the count is said when stderr takes messages again.
//! At its exit lockctl gives the queue at most [`FLUSH_WITHIN`] to drain.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// The most messages waiting for stderr; more are dropped (and counted).
const QUEUE_MESSAGES: usize = 1024;
/// The most bytes waiting for stderr; more are dropped (and counted).
const QUEUE_BYTES: usize = 1 << 20;
/// How long lockctl, about to exit, waits for stderr to take what is queued.
pub const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// Stderr that never fails, never retries and never blocks its caller: a message is queued
/// for the writer thread ([`start`]), or dropped when the queue is full.
///
/// `eprintln!` panics when stderr is a closed pipe, `write_all` retries an interrupted write
/// forever (with `stty tostop`, a terminal answers every write lockctl makes while its command
/// has the terminal with SIGTTOU and an interrupted write), and any write blocks on a full
/// pipe. None of that may happen to a thread that renews or watches a lock.
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match queue() {
            Some(q) => q.push(buf),
            // No writer thread (it could not be started): written here, as a last resort.
            None => write_all_once(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub fn say_line(message: fmt::Arguments<'_>) {
    let line = format!("lockctl: {message}\n");
    let _ = Stderr.write_all(line.as_bytes());
}

/// Messages on their way to stderr.
struct Queue {
    state: Mutex<State>,
    /// Signalled when a message is queued, and when the writer has written all there was.
    changed: Condvar,
}

struct State {
    messages: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Messages dropped since the writer last said how many.
    dropped: u64,
    /// The writer is writing a message it took off the queue.
    writing: bool,
}

static QUEUE: Queue = Queue {
    state: Mutex::new(State {
        messages: VecDeque::new(),
        bytes: 0,
        dropped: 0,
        writing: false,
    }),
    changed: Condvar::new(),
};

/// Whether the writer thread runs (see [`start`]).
static STARTED: AtomicBool = AtomicBool::new(false);

/// The queue, once its writer thread runs.
fn queue() -> Option<&'static Queue> {
    STARTED.load(Ordering::Acquire).then_some(&QUEUE)
}

/// Starts the thread that writes stderr's messages; until then (or if it cannot start, which
/// is said) messages are written by whoever says them.
pub fn start() {
    let spawned = std::thread::Builder::new()
        .name("stderr".into())
        .spawn(|| QUEUE.write_forever());
    match spawned {
        Ok(_) => STARTED.store(true, Ordering::Release),
        Err(e) => {
            write_all_once(format!("lockctl: cannot start the stderr writer: {e}\n").as_bytes())
        }
    }
}

/// Waits until stderr took every queued message, at most [`FLUSH_WITHIN`]: lockctl is about
/// to exit, and what it says last (why it exits) should not be lost.
pub fn flush() {
    let Some(q) = queue() else { return };
    let deadline = Instant::now() + FLUSH_WITHIN;
    let mut state = q.lock();
    while !state.messages.is_empty() || state.writing || state.dropped > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        state = match q.changed.wait_timeout(state, left) {
            Ok((s, _)) => s,
            Err(_) => return,
        };
    }
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it cannot leave a queue of bytes inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, message: &[u8]) {
        let mut state = self.lock();
        if state.messages.len() >= QUEUE_MESSAGES || state.bytes + message.len() > QUEUE_BYTES {
            state.dropped += 1;
            return;
        }
        state.bytes += message.len();
        state.messages.push_back(message.to_vec());
        drop(state);
        self.changed.notify_all();
    }

    /// The writer thread: one message at a time, without the lock held while writing.
    fn write_forever(&self) {
        let mut state = self.lock();
        loop {
            let message = match state.messages.pop_front() {
                Some(m) => {
                    state.bytes -= m.len();
                    m
                }
                None if state.dropped > 0 => {
                    let dropped = std::mem::take(&mut state.dropped);
                    format!("lockctl: {dropped} message(s) dropped: stderr was not taking them\n")
                        .into_bytes()
                }
                None => {
                    state.writing = false;
                    self.changed.notify_all();
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
            };
            state.writing = true;
            drop(state);
            write_all_once(&message);
            state = self.lock();
        }
    }
}

/// Writes `buf` to stderr, giving up (dropping the rest) at the first failure or interrupted
/// write.
fn write_all_once(mut buf: &[u8]) {
    while !buf.is_empty() {
        let written = write_once(buf);
        if written == 0 {
            return;
        }
        buf = &buf[written.min(buf.len())..];
    }
}

/// One write(2) to fd 2: how much it took (0 when it failed).
fn write_once(buf: &[u8]) -> usize {
    // SAFETY: write(2) of a live buffer to fd 2; any failure only drops the message.
    let written = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
    usize::try_from(written).unwrap_or(0)
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
            flush();
            std::process::exit(1);
        }
    }
}
