//! The delay of a link between test hosts, standing in for netem (which this kernel lacks): an
//! NFQUEUE consumer holds each packet iptables queues to it for a delay drawn uniformly from
//! `[max(0, DELAY - JITTER), DELAY + JITTER]` ms and then accepts it, or drops it with
//! probability `LOSS_PERCENT / 100`. It runs in the namespace of the rule that queues:
//!
//! ```text
//! ip netns exec NS relock-chaos delay 3 40 20 [LOSS_PERCENT]   # prints `ready` once bound
//! ip netns exec NS iptables-legacy -A OUTPUT -d PEER -j NFQUEUE --queue-num 3 --queue-bypass
//! ```
//!
//! On the sender's OUTPUT chain a held packet still counts against its socket, so TCP's small
//! queues let a bulk flow have only a couple of packets on their way (0.15 MB/s at 40 ms here);
//! requests and replies are unaffected. The receiver's `-t mangle -A PREROUTING -s PEER` holds
//! packets the sender has let go of (27 MB/s at 40 ± 10 ms).
//!
//! Jitter reorders packets, as netem's does. The queue fails open and `--queue-bypass` skips a
//! queue nobody listens to, so an overload or the end of this process removes the delay rather
//! than cutting the link. SIGTERM or SIGINT ends it (exit 0), releasing at once what it holds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nfq::{Message, Queue, Verdict};

/// Packets the kernel may hold for us before it passes new ones undelayed (fail-open). Each held
/// message keeps nfq's receive buffer (a page) alive: about 80 MiB when full.
const QUEUE_MAX_LEN: u32 = 20_000;

/// The socket's receive buffer: room for the messages of some ten thousand packets, so that a
/// burst does not overrun it (root may go past `net.core.rmem_max`).
const RECEIVE_BUFFER: libc::c_int = 8 << 20;

/// Packets taken from the kernel in one go before due ones are released again.
const BATCH: usize = 1_000;

/// The wait when nothing is held (only a signal or a packet ends it earlier).
const IDLE: Duration = Duration::from_secs(1);

/// Set by SIGTERM or SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

/// `relock-chaos delay QUEUE DELAY_MS JITTER_MS [LOSS_PERCENT]`: delays (and loses) the packets
/// of NFQUEUE number `QUEUE` until SIGTERM. Returns the exit code: 0 when stopped, 1 when the
/// queue failed (not root, queue taken), 2 on bad arguments.
pub fn main(args: &[String]) -> i32 {
    let Some((queue_num, shape)) = parse_args(args) else {
        eprintln!("usage: relock-chaos delay QUEUE DELAY_MS JITTER_MS [LOSS_PERCENT]");
        return 2;
    };
    match run(queue_num, shape) {
        Ok(stats) => {
            eprintln!(
                "relock-chaos delay: queue {queue_num}: {} delayed, {} lost, {} passed undelayed \
                 (receive buffer overrun), {} dropped by the kernel while held",
                stats.delayed, stats.lost, stats.overruns, stats.forgotten
            );
            0
        }
        Err(e) => {
            eprintln!("relock-chaos delay: queue {queue_num}: {e}");
            1
        }
    }
}

/// What a link does to each packet.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    /// The mean delay.
    delay: Duration,
    /// How far a delay may stray from `delay`, either way (never below zero).
    jitter: Duration,
    /// The chance of loss, in percent (0 to 100).
    loss_percent: f64,
}

/// `QUEUE DELAY_MS JITTER_MS [LOSS_PERCENT]`, or `None` if anything is missing, extra or out of
/// range.
fn parse_args(args: &[String]) -> Option<(u16, Shape)> {
    let (queue, delay, jitter, loss) = match args {
        [q, d, j] => (q, d, j, "0"),
        [q, d, j, l] => (q, d, j, l.as_str()),
        _ => return None,
    };
    let ms = |s: &str| {
        s.parse::<u32>()
            .ok()
            .map(|ms| Duration::from_millis(ms.into()))
    };
    let loss_percent = loss
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=100.0).contains(p))?;
    let shape = Shape {
        delay: ms(delay)?,
        jitter: ms(jitter)?,
        loss_percent,
    };
    Some((queue.parse().ok()?, shape))
}

/// The packets a link holds, each until it is due. The clock is the caller's `now`, so the tests
/// run it without a kernel.
struct Schedule<P> {
    shape: Shape,
    rng: fastrand::Rng,
    /// A min-heap on (due, arrival).
    held: BinaryHeap<Reverse<Held<P>>>,
    arrivals: u64,
}

/// A held packet, ordered by when it is due, then by arrival.
struct Held<P> {
    due: Instant,
    arrival: u64,
    packet: P,
}

impl<P> Held<P> {
    fn key(&self) -> (Instant, u64) {
        (self.due, self.arrival)
    }
}

impl<P> PartialEq for Held<P> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<P> Eq for Held<P> {}

impl<P> PartialOrd for Held<P> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<P> Ord for Held<P> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl<P> Schedule<P> {
    fn new(shape: Shape, rng: fastrand::Rng) -> Self {
        Schedule {
            shape,
            rng,
            held: BinaryHeap::new(),
            arrivals: 0,
        }
    }

    /// Draws whether the next packet is lost.
    fn lose(&mut self) -> bool {
        // f64() is below 1, so 0 % never loses and 100 % always does.
        self.rng.f64() * 100.0 < self.shape.loss_percent
    }

    /// Holds `packet`, arrived at `now`, for a delay drawn uniformly (to the microsecond) from
    /// `[max(0, delay - jitter), delay + jitter]`.
    fn hold(&mut self, packet: P, now: Instant) {
        let least = self.shape.delay.saturating_sub(self.shape.jitter);
        let spread = (self.shape.delay + self.shape.jitter - least).as_micros();
        let extra = self.rng.u64(0..=u64::try_from(spread).unwrap_or(u64::MAX));
        let due = now + least + Duration::from_micros(extra);
        self.arrivals += 1;
        self.held.push(Reverse(Held {
            due,
            arrival: self.arrivals,
            packet,
        }));
    }

    /// When the first held packet is due.
    fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse(h)| h.due)
    }

    /// Takes the first held packet if it is due at `now`.
    fn pop_due(&mut self, now: Instant) -> Option<P> {
        if self.next_due()? > now {
            return None;
        }
        self.held.pop().map(|Reverse(h)| h.packet)
    }

    /// Takes every held packet, due or not, in due order.
    fn drain(&mut self) -> impl Iterator<Item = P> + '_ {
        std::iter::from_fn(|| self.held.pop().map(|Reverse(h)| h.packet))
    }
}

/// What happened to the packets of one run.
#[derive(Debug, Default)]
struct Stats {
    delayed: u64,
    lost: u64,
    /// Times the socket's receive buffer overflowed: the kernel could not hand us those packets
    /// and, failing open, sent them on undelayed.
    overruns: u64,
    /// Verdicts the kernel refused for an unknown packet: it dropped the packet while we held it
    /// (its device went down).
    forgotten: u64,
}

/// Binds the queue, prints `ready`, then holds and releases packets until a stop signal.
fn run(queue_num: u16, shape: Shape) -> io::Result<Stats> {
    let wait_mask = catch_stop_signals()?;
    let (mut queue, fd) = open_queue()?;
    queue.bind(queue_num).map_err(|e| {
        let hint = "root in this namespace is needed, and no other process may hold the queue";
        io::Error::new(e.kind(), format!("bind: {e} ({hint})"))
    })?;
    // Metadata only: the payload is never read, and as it stays unmodified nfq's verdict does
    // not send it back.
    queue.set_copy_range(queue_num, 0)?;
    queue.set_queue_max_len(queue_num, QUEUE_MAX_LEN)?;
    queue.set_fail_open(queue_num, true)?;
    queue.set_recv_enobufs(true)?;
    grow_receive_buffer(fd)?;
    queue.set_nonblocking(true);
    let mut out = io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;

    let mut schedule = Schedule::new(shape, fastrand::Rng::new());
    let mut stats = Stats::default();
    while !STOP.load(Ordering::Relaxed) {
        let drained = receive(&mut queue, &mut schedule, &mut stats)?;
        let now = Instant::now();
        while let Some(msg) = schedule.pop_due(now) {
            accept(&mut queue, msg)?;
        }
        let timeout = match schedule.next_due() {
            _ if !drained => Duration::ZERO,
            Some(due) => due.saturating_duration_since(Instant::now()),
            None => IDLE,
        };
        wait(fd, timeout, &wait_mask)?;
    }
    receive(&mut queue, &mut schedule, &mut stats)?;
    for msg in schedule.drain() {
        accept(&mut queue, msg)?;
    }
    Ok(stats)
}

/// Takes up to `BATCH` packets the kernel has queued, dropping the lost ones and holding the
/// rest. Returns whether it took them all.
fn receive(
    queue: &mut Queue,
    schedule: &mut Schedule<Message>,
    stats: &mut Stats,
) -> io::Result<bool> {
    for _ in 0..BATCH {
        match queue.recv() {
            Ok(mut msg) => {
                if schedule.lose() {
                    msg.set_verdict(Verdict::Drop);
                    queue.verdict(msg)?;
                    stats.lost += 1;
                } else {
                    schedule.hold(msg, Instant::now());
                    stats.delayed += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                stats.overruns += 1;
                if stats.overruns.is_power_of_two() {
                    let _ = writeln!(
                        io::stderr(),
                        "relock-chaos delay: receive buffer overrun ({} so far): some packets \
                         passed undelayed",
                        stats.overruns
                    );
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => stats.forgotten += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Lets `msg` go on its way.
fn accept(queue: &mut Queue, mut msg: Message) -> io::Result<()> {
    msg.set_verdict(Verdict::Accept);
    queue.verdict(msg)
}

/// Opens a netfilter queue socket and finds its descriptor, which nfq 0.2.5 keeps to itself (no
/// `AsRawFd`): `socket(2)` takes the lowest free descriptor, the one `/dev/null` held a moment
/// before (this process has no other thread). The descriptor's kind is checked all the same.
fn open_queue() -> io::Result<(Queue, RawFd)> {
    let probe = File::open("/dev/null")?;
    let fd = probe.as_raw_fd();
    drop(probe);
    let queue = Queue::open().map_err(|e| io::Error::new(e.kind(), format!("open: {e}")))?;
    if !is_netfilter_socket(fd) {
        return Err(io::Error::other(
            "cannot find the descriptor of the queue's socket",
        ));
    }
    Ok((queue, fd))
}

/// Sets the receive buffer of socket `fd` to `RECEIVE_BUFFER`.
fn grow_receive_buffer(fd: RawFd) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let size = RECEIVE_BUFFER;
    let value = (&raw const size).cast();
    // SAFETY: `value` points to a live c_int of `len` bytes.
    if unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is a netlink socket of the netfilter family.
fn is_netfilter_socket(fd: RawFd) -> bool {
    let option = |name| {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are live locals of the sizes passed.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    };
    option(libc::SO_DOMAIN) == Some(libc::AF_NETLINK)
        && option(libc::SO_PROTOCOL) == Some(libc::NETLINK_NETFILTER)
}

extern "C" fn on_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGTERM and SIGINT set `STOP`, blocked except inside `ppoll` so that none can slip in
/// between the check of `STOP` and the wait. Returns the signal mask to wait with.
fn catch_stop_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: the sets and the action are zeroed locals initialised by the libc calls before
    // use; the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut stop: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut stop);
        libc::sigaddset(&mut stop, libc::SIGTERM);
        libc::sigaddset(&mut stop, libc::SIGINT);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        for signal in [libc::SIGTERM, libc::SIGINT] {
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let mut wait_mask: libc::sigset_t = std::mem::zeroed();
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &stop, &mut wait_mask);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        libc::sigdelset(&mut wait_mask, libc::SIGTERM);
        libc::sigdelset(&mut wait_mask, libc::SIGINT);
        Ok(wait_mask)
    }
}

/// Waits until `fd` is readable, `timeout` has passed or a stop signal came.
fn wait(fd: RawFd, timeout: Duration, mask: &libc::sigset_t) -> io::Result<()> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one live pollfd, a live timespec and a live signal set.
    if unsafe { libc::ppoll(&mut pollfd, 1, &timeout, mask) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(delay_ms: u64, jitter_ms: u64, loss_percent: f64) -> Shape {
        Shape {
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(jitter_ms),
            loss_percent,
        }
    }

    fn schedule(delay_ms: u64, jitter_ms: u64, loss_percent: f64) -> Schedule<u32> {
        Schedule::new(
            shape(delay_ms, jitter_ms, loss_percent),
            fastrand::Rng::with_seed(7),
        )
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_arguments_and_refuses_bad_ones() {
        assert_eq!(parse_args(&args("3 40 20")), Some((3, shape(40, 20, 0.0))));
        assert_eq!(
            parse_args(&args("3 40 20 30")),
            Some((3, shape(40, 20, 30.0)))
        );
        assert_eq!(
            parse_args(&args("0 0 0 100")),
            Some((0, shape(0, 0, 100.0)))
        );
        for bad in [
            "",
            "3 40",
            "3 40 20 30 1",
            "x 40 20",
            "70000 40 20",
            "3 -1 20",
            "3 40 20 101",
            "3 40 20 NaN",
        ] {
            assert_eq!(parse_args(&args(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn releases_in_due_order_and_not_before() {
        let t0 = Instant::now();
        let mut s = schedule(40, 0, 0.0);
        s.hold(1, t0 + ms(10));
        s.hold(2, t0);
        s.hold(3, t0 + ms(5));
        assert_eq!(s.next_due(), Some(t0 + ms(40)));
        assert_eq!(s.pop_due(t0 + ms(39)), None);
        assert_eq!(s.pop_due(t0 + ms(40)), Some(2));
        assert_eq!(s.pop_due(t0 + ms(44)), None);
        assert_eq!(s.pop_due(t0 + ms(60)), Some(3));
        assert_eq!(s.pop_due(t0 + ms(60)), Some(1));
        assert_eq!(s.pop_due(t0 + ms(60)), None);
        assert_eq!(s.next_due(), None);
    }

    #[test]
    fn ties_leave_in_arrival_order() {
        let t0 = Instant::now();
        let mut s = schedule(5, 0, 0.0);
        for p in 0..100 {
            s.hold(p, t0);
        }
        let later = t0 + ms(5);
        assert_eq!(
            std::iter::from_fn(|| s.pop_due(later)).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
    }

    #[test]
    fn delays_stay_within_the_jitter_and_spread_over_it() {
        let t0 = Instant::now();
        let mut s = schedule(40, 10, 0.0);
        let delays: Vec<Duration> = (0..2_000)
            .map(|p| {
                s.hold(p, t0);
                let due = s.next_due().unwrap_or(t0);
                s.drain().for_each(drop);
                due - t0
            })
            .collect();
        assert!(
            delays.iter().all(|d| (ms(30)..=ms(50)).contains(d)),
            "{delays:?}"
        );
        assert!(delays.iter().any(|d| *d < ms(32)) && delays.iter().any(|d| *d > ms(48)));
    }

    #[test]
    fn jitter_above_the_delay_starts_at_zero() {
        let t0 = Instant::now();
        let mut s = schedule(5, 20, 0.0);
        for p in 0..2_000 {
            s.hold(p, t0);
        }
        let dues: Vec<Duration> = std::iter::from_fn(|| {
            let due = s.next_due()?;
            s.pop_due(due).map(|_| due - t0)
        })
        .collect();
        assert_eq!(dues.len(), 2_000);
        assert!(
            dues.windows(2).all(|w| w[0] <= w[1]),
            "released out of due order"
        );
        assert!(dues[0] < ms(1) && dues[1_999] > ms(24) && dues[1_999] <= ms(25));
    }

    #[test]
    fn zero_delay_is_due_at_once() {
        let t0 = Instant::now();
        let mut s = schedule(0, 0, 0.0);
        s.hold(9, t0);
        assert_eq!(s.next_due(), Some(t0));
        assert_eq!(s.pop_due(t0), Some(9));
    }

    #[test]
    fn loss_follows_its_percentage() {
        let lost = |percent| {
            let mut s = schedule(0, 0, percent);
            (0..10_000).filter(|_| s.lose()).count()
        };
        assert_eq!(lost(0.0), 0);
        assert_eq!(lost(100.0), 10_000);
        assert!((2_500..3_500).contains(&lost(30.0)), "{}", lost(30.0));
    }

    #[test]
    fn drain_takes_everything_in_due_order() {
        let t0 = Instant::now();
        let mut s = schedule(10, 0, 0.0);
        s.hold(1, t0 + ms(3));
        s.hold(2, t0);
        assert_eq!(s.drain().collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(s.next_due(), None);
    }
}
