//! A loopback TCP proxy in front of one server that can go silent without closing anything:
//! what a crashed host, a dropped NAT entry or a stuck middlebox looks like from the client
//! (a half-open connection). The connections stay open (the proxy's kernel even acknowledges
//! what the client sends), but nothing is forwarded any more, either way.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: u16,
    /// Connections with a number below this forward nothing.
    silent_below: AtomicU64,
    /// New connections forward nothing either.
    all_silent: AtomicBool,
    /// Each forwarded chunk waits this long first (microseconds).
    delay_us: AtomicU64,
    /// The next answer from the server is dropped and its connection closed, both ways: the
    /// command ran, and the client sees its connection end without an answer.
    cut_next_answer: AtomicBool,
    next: AtomicU64,
    closed: AtomicBool,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let shared = Arc::new(Shared {
            upstream,
            silent_below: AtomicU64::new(0),
            all_silent: AtomicBool::new(false),
            delay_us: AtomicU64::new(0),
            cut_next_answer: AtomicBool::new(false),
            next: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let accepting = shared.clone();
        thread::spawn(move || {
            while !accepting.closed.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let n = accepting.next.fetch_add(1, Ordering::SeqCst);
                        let Ok(server) = TcpStream::connect(("127.0.0.1", accepting.upstream))
                        else {
                            continue;
                        };
                        for (from, to, answers) in [
                            (client.try_clone(), server.try_clone(), false),
                            (server.try_clone(), client.try_clone(), true),
                        ] {
                            if let (Ok(from), Ok(to)) = (from, to) {
                                let shared = accepting.clone();
                                thread::spawn(move || forward(n, from, to, answers, &shared));
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, shared }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Every connection open now goes silent for good; new ones work.
    pub fn silence_open_connections(&self) {
        let next = self.shared.next.load(Ordering::SeqCst);
        self.shared.silent_below.store(next, Ordering::SeqCst);
    }

    /// Every connection, open now or made later, goes silent (until [`Proxy::speak`]).
    pub fn silence_all(&self) {
        self.silence_open_connections();
        self.shared.all_silent.store(true, Ordering::SeqCst);
    }

    /// New connections work again (the silenced ones stay silent).
    pub fn speak(&self) {
        self.shared.all_silent.store(false, Ordering::SeqCst);
    }

    /// The next answer the server sends (on any connection) never arrives: the proxy drops it
    /// and closes that connection both ways, so that the client sees its connection end after
    /// the command ran (a reset link, a restarted middlebox).
    pub fn cut_next_answer(&self) {
        self.shared.cut_next_answer.store(true, Ordering::SeqCst);
    }

    /// Every chunk forwarded from now on waits `delay` first: a slow link.
    pub fn delay(&self, delay: Duration) {
        self.shared
            .delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
    }
}

/// Forwards `from` to `to`; `answers`: the server's side, to the client.
fn forward(n: u64, mut from: TcpStream, mut to: TcpStream, answers: bool, shared: &Shared) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16 * 1024];
    // A connection silenced stays silent: the sockets stay open, nothing moves.
    let mut silent = false;
    while !shared.closed.load(Ordering::SeqCst) {
        silent = silent
            || n < shared.silent_below.load(Ordering::SeqCst)
            || shared.all_silent.load(Ordering::SeqCst);
        if silent {
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(len) => {
                // Silenced while this read waited: what it got is lost, as on a dead link.
                if n < shared.silent_below.load(Ordering::SeqCst)
                    || shared.all_silent.load(Ordering::SeqCst)
                {
                    silent = true;
                    continue;
                }
                if answers && shared.cut_next_answer.swap(false, Ordering::SeqCst) {
                    let _ = from.shutdown(std::net::Shutdown::Both);
                    break;
                }
                let delay = shared.delay_us.load(Ordering::SeqCst);
                if delay > 0 {
                    thread::sleep(Duration::from_micros(delay));
                }
                if to.write_all(&buf[..len]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    // A closed side closes the other (unless the proxy went silent meanwhile).
    let _ = to.shutdown(std::net::Shutdown::Both);
}
