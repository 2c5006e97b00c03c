//! Pings a server all along while a test makes it work hard, to see that it keeps answering.
//!
//! A busy machine delays every process, not only the server under test: a ping can wait a
//! second because the server was not scheduled, whatever the module does. So each [`Prober`]
//! also pings a quiet control server of its own, on the same machine at the same time, and a
//! test holds the probed server to its bound plus twice the longest ping the control saw.

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
            probed: Pinger::start(server),
            control: Pinger::start(&control_server),
            _control_server: control_server,
        }
    }

    /// Stops; the longest round trips seen.
    pub fn worst(self) -> Pings {
        Pings {
            worst: self.probed.stop(),
            control: self.control.stop(),
        }
    }
}

/// The longest ping of the probed server, and of the control server over the same time.
#[derive(Clone, Copy)]
pub struct Pings {
    pub worst: Duration,
    pub control: Duration,
}

impl Pings {
    /// Whether the probed server answered every ping within `bound`, plus twice what the
    /// machine made the control server wait.
    pub fn within(&self, bound: Duration) -> bool {
        self.worst < bound + self.control * 2
    }
}

impl fmt::Debug for Pings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} (a quiet server: {:?})", self.worst, self.control)
    }
}

struct Pinger {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<Duration>,
}

impl Pinger {
    fn start(server: &Server) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = server.conn();
        let flag = stop.clone();
        let handle = thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                // A server gone (a test that failed first) ends the probe.
                if redis::cmd("PING").query::<String>(&mut c).is_err() {
                    break;
                }
                worst = worst.max(t.elapsed());
                thread::sleep(Duration::from_millis(1));
            }
            worst
        });
        Pinger { stop, handle }
    }

    fn stop(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("prober")
    }
}
