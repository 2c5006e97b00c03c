//! Pings a server all along while a test makes it work hard, to see that it keeps answering.
//!
//! A busy machine delays every process, not only the server under test: a ping can wait a
//! second because the server was not scheduled, whatever the module does. So each [`Prober`]
//! also pings a quiet control server of its own, on the same machine at the same time, and a
//! test holds the probed server to its bound plus twice the longest ping the control saw. A ping
//! that waited longer still is a stall only if the server's main thread was busy for the bound
//! meanwhile: each ping also measures the CPU time the probed server's main thread used while
//! it waited (Linux `/proc`), which a machine that does not schedule the server cannot inflate.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::Server;

/// Pings a server, and a control server, on connections of their own until stopped.
pub struct Prober {
    probed: Pinger,
    control: Pinger,
    _control_server: Server,
}

impl Prober {
    pub fn start(server: &Server) -> Prober {
        let control_server = Server::start();
        Prober {
            probed: Pinger::start(server, server.pid()),
            control: Pinger::start(&control_server, None),
            _control_server: control_server,
        }
    }

    /// Stops; the longest round trips seen.
    pub fn worst(self) -> Pings {
        let probed = self.probed.stop();
        Pings {
            worst: probed.wall,
            busy: probed.busy,
            control: self.control.stop().wall,
        }
    }
}

/// The longest ping of the probed server, the most CPU time its main thread used during one
/// ping, and the longest ping of the control server over the same time.
#[derive(Clone, Copy)]
pub struct Pings {
    pub worst: Duration,
    pub busy: Option<Duration>,
    pub control: Duration,
}

impl Pings {
    /// Whether the probed server answered every ping within `bound`, plus twice what the
    /// machine made the control server wait; or, where a ping waited longer, whether the
    /// server's main thread was busy for less than `bound` during every ping (the machine
    /// kept it waiting, not the work it was given).
    pub fn within(&self, bound: Duration) -> bool {
        self.worst < bound + self.control * 2 || self.busy.is_some_and(|busy| busy < bound)
    }
}

impl fmt::Debug for Pings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} (a quiet server: {:?}", self.worst, self.control)?;
        match self.busy {
            Some(busy) => write!(
                f,
                "; the server's main thread busy for at most {busy:?} during one ping)"
            ),
            None => write!(f, ")"),
        }
    }
}

/// What one pinger saw: its longest ping, and the most CPU time the server's main thread used
/// during one ping (`None` without the server's pid or `/proc`).
struct Seen {
    wall: Duration,
    busy: Option<Duration>,
}

/// The CPU time (user + system) the main thread of process `pid` has used, from
/// `/proc/<pid>/stat` (in clock ticks, usually 10 ms).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces, in parentheses: fields 3 onwards.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    (per_second > 0).then(|| Duration::from_millis(ticks * 1000 / per_second))
}

struct Pinger {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<Seen>,
}

impl Pinger {
    fn start(server: &Server, pid: Option<u32>) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = server.conn();
        let flag = stop.clone();
        let handle = thread::spawn(move || {
            let mut seen = Seen {
                wall: Duration::ZERO,
                busy: pid.and_then(cpu_time).map(|_| Duration::ZERO),
            };
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                let cpu_before = pid.and_then(cpu_time);
                // A server gone (a test that failed first) ends the probe.
                if redis::cmd("PING").query::<String>(&mut c).is_err() {
                    break;
                }
                seen.wall = seen.wall.max(t.elapsed());
                let used = cpu_before
                    .zip(pid.and_then(cpu_time))
                    .map(|(before, after)| after.saturating_sub(before));
                seen.busy = match (seen.busy, used) {
                    (Some(most), Some(used)) => Some(most.max(used)),
                    _ => None,
                };
                thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        Pinger { stop, handle }
    }

    fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("prober")
    }
}
