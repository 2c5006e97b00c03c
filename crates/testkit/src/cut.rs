//! A loopback TCP proxy in front of one server that can lose one reply: the command reaches the
//! server and runs, its reply is dropped, and the client's connection is reset (RST) before
//! anything reaches it. What a driver sees when a connection dies between a command and its
//! reply, and why it re-sends.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub struct CutProxy {
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: u16,
    /// The next reply chunk from the server (on any connection) is dropped and its client reset.
    cut_next: AtomicBool,
    /// Replies dropped so far.
    cuts: AtomicU64,
    closed: AtomicBool,
}

impl CutProxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let shared = Arc::new(Shared {
            upstream,
            cut_next: AtomicBool::new(false),
            cuts: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let accepting = shared.clone();
        thread::spawn(move || {
            while !accepting.closed.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(("127.0.0.1", accepting.upstream))
                        else {
                            continue;
                        };
                        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                            continue;
                        };
                        thread::spawn(move || upstream_copy(client, server));
                        let shared = accepting.clone();
                        thread::spawn(move || downstream_copy(s2, c2, &shared));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(2))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        CutProxy { port, shared }
    }

    /// A connection through the proxy.
    pub fn conn(&self) -> redis::Connection {
        crate::connect_url(
            &format!("redis://127.0.0.1:{}/", self.port),
            Duration::from_secs(5),
        )
        .expect("connect through the proxy")
    }

    /// The next reply the server sends is lost: dropped, and its client's connection reset.
    /// Set it only when the one connection that is to lose it has nothing else in flight.
    pub fn cut_next_reply(&self) {
        self.shared.cut_next.store(true, Ordering::SeqCst);
    }

    /// Replies dropped so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
    }
}

/// Client to server, as it comes; the client's end (or its reset) ends it.
fn upstream_copy(mut client: TcpStream, mut server: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(len) => {
                if server.write_all(&buf[..len]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// Server to client, unless a cut is due: then the reply is dropped and the client reset.
fn downstream_copy(mut server: TcpStream, mut client: TcpStream, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(len) => {
                if shared.cut_next.swap(false, Ordering::SeqCst) {
                    shared.cuts.fetch_add(1, Ordering::SeqCst);
                    reset(&client);
                    let _ = server.shutdown(Shutdown::Both);
                    return;
                }
                if client.write_all(&buf[..len]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// Resets `client`: a zero linger makes its last close send RST; reading is shut down so that
/// the thread copying from it lets go of its handle.
fn reset(client: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor and a `linger` of the size given.
    unsafe {
        libc::setsockopt(
            client.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = client.shutdown(Shutdown::Read);
}
