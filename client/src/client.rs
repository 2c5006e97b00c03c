//! The client: the ways to acquire a lock on its masters, and the operators' queries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use relock_protocol::cmd::{ForceRelease, Holders, Info};
use relock_protocol::Ask;
use tokio::time::Instant;

use crate::error::Error;
use crate::group::{check_keys, LockGroup};
use crate::guard::{GuardedLock, LockGuard};
use crate::info::{parse_holders, parse_info, HolderInfo, LockInfo};
use crate::limits::{check_ttl, clamp_wait};
use crate::lock::Lock;
use crate::masters::{Abandoned, Masters, NodeReport};
use crate::mode::{check_mode, check_permits, permits_of, Mode};
use crate::options::Options;
use crate::wire;

/// A client of one relock server (plain locking), of N independent masters (Redlock), or of
/// one Redis Cluster ([`Relock::cluster`]).
///
/// Every acquisition holds its key in the client's [`Mode`]: exclusively unless
/// [`Relock::with_mode`] says otherwise.
///
/// Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Relock {
    masters: Arc<Masters>,
    /// The mode and permits of its acquisitions, as the wire has them.
    mode: Ask,
}

impl Relock {
    /// A client of the masters at `urls` (`redis://host:port[/db]`) with default [`Options`].
    /// One URL gives plain single-server locking; N give Redlock with a quorum of N / 2 + 1.
    /// No connection is made until the first command.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> Result<Relock, Error> {
        Relock::with_options(urls, Options::default())
    }

    /// Like [`Relock::new`], with the given options.
    ///
    /// Fails with [`Error::DuplicateServer`] when two URLs name the same server (their host
    /// names are resolved here, once, to compare addresses; `127.0.0.1` and `localhost` are one
    /// server, and so are two databases of it), and with [`Error::InvalidOption`] when an
    /// option is out of range (see [`crate::limits::check_options`]).
    pub fn with_options<S: AsRef<str>>(urls: &[S], options: Options) -> Result<Relock, Error> {
        Ok(Relock {
            masters: Arc::new(Masters::open(urls, options)?),
            mode: Ask::Exclusive,
        })
    }

    /// A client of one Redis Cluster, known by some of its nodes (`seeds`, `redis://host:port`;
    /// one is enough, more help when some are down), with the given options.
    ///
    /// Each lock lives on the master of its key's hash slot, so this is single-lock locking
    /// (quorum 1), not Redlock; use hash tags (`{order:42}:row`) to keep related locks on one
    /// master. Combine with [`Options::replica_acks`] so that a lock survives a failover.
    /// No connection is made until the first command.
    ///
    /// The client routes by a slot map of its own (`CLUSTER SLOTS`, asked of every known node
    /// at once; the first answer wins) over one shared connection per node, and follows `MOVED`
    /// and `ASK`. A master that does not answer within the request's timeout, or answers that it
    /// is a replica now, makes it read the map again and, if the key has a new master, send the
    /// request there once more: renewals and releases follow an automatic failover instead of
    /// going to a stopped master. `LOCK.WAIT` blocks on a connection of its own to the key's
    /// master, re-resolved and retried on `MOVED` or a failover, and moved to the new master
    /// when the one it waits on stops answering pings while another master serves the key.
    #[cfg(feature = "cluster")]
    pub fn cluster<S: AsRef<str>>(seeds: &[S], options: Options) -> Result<Relock, Error> {
        Ok(Relock {
            masters: Arc::new(Masters::open_cluster(seeds, options)?),
            mode: Ask::Exclusive,
        })
    }

    /// A client of the same masters, sharing this one's connections, whose acquisitions
    /// (`acquire`, `try_acquire`, `reenter`, `acquire_wait`, `guard`, `with_lock`) hold their
    /// key in `mode`. Renewals and releases act on each holder's own hold, whatever the mode.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use relock_client::{Mode, Relock};
    /// # async fn demo(relock: Relock) -> Result<(), relock_client::Error> {
    /// // A read-write lock: readers share the key, a writer (the exclusive default) waits for
    /// // them, and readers that come after a waiting writer wait for it.
    /// let readers = relock.with_mode(Mode::shared())?;
    /// let read = readers.acquire("catalog", Duration::from_secs(10)).await?;
    /// read.release().await?;
    /// // A counting semaphore: at most 3 holders at once (one server or a Redis Cluster only).
    /// let slots = relock.with_mode(Mode::limited(3))?;
    /// slots.with_lock("encoders", Duration::from_secs(30), |_| async { /* encode */ }).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Fails, before any server is asked, with [`Error::InvalidLimit`] for a limit outside
    /// 1 ..= [`MAX_LIMIT`](crate::MAX_LIMIT), and with [`Error::UnsoundSemaphore`] for a limit
    /// on a client of several independent masters: a quorum read-write lock is sound (any two
    /// majorities share a master), a quorum semaphore is not (with limit 2 on masters A, B
    /// and C, three clients can hold {A,B}, {B,C} and {A,C}).
    ///
    /// Everyone using one key must ask for it with one limit: a shared request with another
    /// limit than the key's fails with [`Error::OtherLimit`]; an owner holding the key asking
    /// for it in the other mode (only possible with [`Relock::reenter`]) fails with
    /// [`Error::OtherMode`].
    pub fn with_mode(&self, mode: Mode) -> Result<Relock, Error> {
        check_mode(mode, self.masters.names().len())?;
        Ok(Relock {
            masters: self.masters.clone(),
            mode: mode.ask(1),
        })
    }

    /// A client of the same masters, sharing this one's connections, whose acquisitions take
    /// `permits` permits of the semaphore its mode names at once (`SHARED LIMIT n PERMITS p`:
    /// Redisson's `acquire(n)`, Curator's `acquire(qty)`). The permits of a semaphore's holds
    /// sum to at most its limit; a request for more than are free waits its turn in the queue
    /// and blocks the requests behind it until they are (a large request never starves).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use relock_client::{Mode, Relock};
    /// # async fn demo(relock: Relock) -> Result<(), relock_client::Error> {
    /// let pool = relock.with_mode(Mode::limited(10))?.with_permits(3)?;
    /// let three = pool.acquire_wait("gpu-slots", Duration::from_secs(60), None).await?;
    /// assert_eq!(three.permits(), 3);
    /// three.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Fails, before any server is asked, with [`Error::InvalidPermits`] unless the mode is a
    /// semaphore ([`Mode::limited`]) and `permits` is 1 ..= its limit. One owner holds one
    /// hold: a re-entry asks with the same permits (another count is
    /// [`Error::OtherPermits`]). [`Relock::with_mode`] sets the permits back to 1.
    pub fn with_permits(&self, permits: u32) -> Result<Relock, Error> {
        check_permits(self.mode(), permits)?;
        Ok(Relock {
            masters: self.masters.clone(),
            mode: self.mode().ask(permits),
        })
    }

    /// The mode this client's acquisitions hold their key in. Default: [`Mode::Exclusive`].
    pub fn mode(&self) -> Mode {
        Mode::of(self.mode)
    }

    /// How many permits each acquisition takes ([`Relock::with_permits`]). Default: 1.
    pub fn permits(&self) -> u32 {
        permits_of(self.mode)
    }

    /// Whether this is a cluster client ([`Relock::cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.masters.is_cluster()
    }

    /// The masters' names (`host:port`), in the order they were given. A cluster client has one
    /// entry, `cluster[seed,...]`.
    pub fn nodes(&self) -> Vec<&str> {
        self.masters.names().iter().map(String::as_str).collect()
    }

    /// How many masters must grant a lock: N / 2 + 1.
    pub fn quorum(&self) -> usize {
        self.masters.quorum()
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        self.masters.options()
    }

    /// A fresh owner id with the default prefix, `<host>/<pid>/<32 hex random>`: the only
    /// proof of ownership of a lock. See [`Relock::make_owner`] for this client's prefix.
    pub fn new_owner() -> String {
        crate::owner::make_owner(None)
    }

    /// A fresh owner id as this client makes them: `<prefix>/<32 hex random>`, the prefix
    /// being [`Options::owner_prefix`] (default `<host>/<pid>`).
    pub fn make_owner(&self) -> String {
        crate::owner::make_owner(self.masters.options().owner_prefix.as_deref())
    }

    /// One Redlock round with `LOCK.ACQUIRE` under a fresh owner, no retry.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        Lock::attempt(
            &self.masters,
            key,
            &self.make_owner(),
            ttl,
            false,
            self.mode,
            None,
        )
        .await
    }

    /// Acquires `key` for `ttl` under a fresh owner, retrying up to
    /// [`Options::retry_count`] times with a random pause around [`Options::retry_delay`].
    /// Fails with the last round's error (for instance [`Error::NoQuorum`], naming the masters
    /// that did not grant), or at once with an error retrying cannot fix
    /// ([`Error::is_permanent`]: an invalid ttl, the module missing, a refused login...).
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lock, Error> {
        let mut tries_left = self.masters.options().retry_count;
        loop {
            // A new owner per round: the background release of a failed round can then never
            // hit a later round's grants.
            let owner = self.make_owner();
            match Lock::attempt(&self.masters, key, &owner, ttl, false, self.mode, None).await {
                Ok(lock) => return Ok(lock),
                Err(e) if e.is_permanent() => return Err(e),
                Err(e) if tries_left == 0 => return Err(e),
                Err(e) => {
                    tracing::debug!(key, error = %e, "acquire round failed, retrying");
                    tries_left -= 1;
                    tokio::time::sleep(self.jitter()).await;
                }
            }
        }
    }

    /// Reentrant acquisition with `LOCK.REENTER`: the first call for `owner` takes the lock, each
    /// further call by the same owner adds one to its hold count (and resets the ttl); the lock is
    /// gone after as many releases. One round, no retry. See also [`Lock::reenter`].
    pub async fn reenter(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        Lock::attempt(&self.masters, key, owner, ttl, true, self.mode, None).await
    }

    /// Blocking acquisition with `LOCK.WAIT`: waits, without polling, until the lock is granted
    /// or `timeout` passes (`None`: no limit; `Some(ZERO)`: one non-blocking round; a limit
    /// above 10^12 ms, the most `LOCK.WAIT` accepts, counts as 10^12 ms).
    ///
    /// With one master this is a plain `LOCK.WAIT` in the master's FIFO queue. With several,
    /// it waits on every master at once, each on a connection of its own; once one master has
    /// granted, it waits at most [`Options::max_partial_hold`] for a quorum, and otherwise
    /// releases what it holds and starts again after a random pause, so that contenders holding
    /// a minority each can never wait on one another forever. The validity of the result is
    /// measured from a `LOCK.RENEW` round made right after the grant.
    ///
    /// Fails at once, whatever the limit, with an error retrying cannot fix
    /// ([`Error::is_permanent`]), from the wait or from the renew round after it (an ACL
    /// that allows `LOCK.WAIT` but not `LOCK.RENEW`). Dropping the future while it waits leaves nothing behind:
    /// grants that land anyway are released in the background (see [`Relock::settle`]).
    pub async fn acquire_wait(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Lock, Error> {
        self.acquire_wait_as(key, ttl, timeout, &|| self.make_owner())
            .await
    }

    /// [`Relock::acquire_wait`], each round under an owner `make_owner` makes (a fresh one
    /// each time: see the comment in the loop).
    pub(crate) async fn acquire_wait_as(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Option<Duration>,
        make_owner: &(dyn Fn() -> String + Sync),
    ) -> Result<Lock, Error> {
        let ttl = check_ttl(ttl)?;
        let timeout = timeout.map(clamp_wait);
        if timeout == Some(Duration::ZERO) {
            let owner = make_owner();
            return Lock::attempt(&self.masters, key, &owner, ttl, false, self.mode, None).await;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut failed_rounds = 0u64;
        loop {
            // A new owner per round, so that the late release below can only ever hit this
            // round's grants, never a later round's.
            let owner = make_owner();
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining == Some(Duration::ZERO) {
                return Err(Error::WaitTimeout {
                    key: key.to_string(),
                    timeout: timeout.unwrap_or_default(),
                });
            }
            // Released in the background if this future is dropped before the round is decided.
            let abandoned = Abandoned::new(&self.masters, key, &owner);
            let round = self
                .masters
                .wait_round(key, &owner, ttl, remaining, self.mode)
                .await;
            abandoned.disarm();
            if round.won() {
                let tokens = round.into_answers();
                let mut lock = Lock::waited_for(&self.masters, key, &owner, ttl, tokens, self.mode);
                // The grant's ttl counts from a moment we cannot see; a renew round gives a
                // start time we did measure.
                match lock.renew(ttl).await {
                    Ok(()) => {
                        tracing::debug!(key, owner, valid_until = ?lock.valid_until(), "lock acquired");
                        return Ok(lock);
                    }
                    Err(e) if e.is_permanent() => {
                        // Judged as every other round: an ACL that forbids LOCK.RENEW (or a
                        // key overwritten with another type) will answer the same next time.
                        tracing::debug!(key, error = %e, "renew after wait failed for good");
                        lock.release_quietly().await;
                        return Err(e);
                    }
                    Err(e) => {
                        tracing::debug!(key, error = %e, "renew after wait failed, retrying");
                        lock.release_quietly().await;
                    }
                }
            } else {
                self.masters.release_failed(key, &owner, &round).await;
                let deadline_passed = deadline.is_some_and(|d| Instant::now() >= d);
                let timeout = timeout.unwrap_or_default();
                if let Some(failures) = round.after_failed_wait(key, deadline_passed, timeout)? {
                    // Say it once, then now and then: an unlimited wait may go on for long.
                    failed_rounds += 1;
                    if failed_rounds % 50 == 1 {
                        tracing::warn!(key, %failures, "waiting: some masters failed");
                    }
                }
            }
            let mut pause = self.jitter();
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(Instant::now()));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Takes every one of `keys` exclusively, or none, under one owner: one `LOCK.MACQUIRE`
    /// per master (on a Redis Cluster, one per hash slot, slot by slot in key order, releasing
    /// what was taken if a later slot fails), and over independent masters a quorum of masters
    /// holding the whole group. The keys of one `LOCK.MACQUIRE` share one new fencing token
    /// ([`LockGroup::token`]). Retries like [`Relock::acquire`], each round under a fresh owner;
    /// a round that fails leaves nothing behind.
    ///
    /// Fails before any server is asked with [`Error::InvalidKeys`] for no keys, more than
    /// [`MAX_KEYS`](crate::MAX_KEYS), a key given twice, or a client whose mode is not
    /// exclusive; with [`Error::NoQuorum`] when a key is held (or has waiters) everywhere
    /// after the retries. To wait for the keys instead, see [`Relock::wait_all`].
    pub async fn acquire_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        ttl: Duration,
    ) -> Result<LockGroup, Error> {
        let keys = check_keys(keys, self.mode())?;
        let ttl = check_ttl(ttl)?;
        let mut tries_left = self.masters.options().retry_count;
        loop {
            let owner = self.make_owner();
            match LockGroup::attempt(&self.masters, &keys, &owner, ttl).await {
                Ok(group) => return Ok(group),
                Err(e) if e.is_permanent() || tries_left == 0 => return Err(e),
                Err(e) => {
                    tracing::debug!(keys = keys.len(), error = %e, "group round failed, retrying");
                    tries_left -= 1;
                    tokio::time::sleep(self.jitter()).await;
                }
            }
        }
    }

    /// Waits, without polling, until every one of `keys` is held under one owner, or
    /// `timeout` passes (`None`: no limit; `Some(ZERO)`: one round of
    /// [`Relock::acquire_all`] without retries).
    ///
    /// It first asks for all of them at once (`LOCK.MACQUIRE`: one token for the group). If
    /// that is refused, it waits for the keys one by one in sorted order (`LOCK.WAIT` in each
    /// key's FIFO queue, over several masters as [`Relock::acquire_wait`] does), renewing the
    /// keys it holds every ttl / 3 meanwhile. Every waiter takes the keys in one order, so two
    /// waiters for overlapping key sets, given in any order, never deadlock, and FIFO queues
    /// keep every waiter from starving. Once it has them all, one renewal of the whole group
    /// (`LOCK.MRENEW`) measures the validity. A key lost while waiting for the next (its hold
    /// broken by an operator) starts it again under a new owner. On a timeout or an error it
    /// releases what it took; dropping the future does too, in the background.
    ///
    /// Keys waited for one by one have tokens of their own ([`LockGroup::token_of`]).
    pub async fn wait_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<LockGroup, Error> {
        let keys = check_keys(keys, self.mode())?;
        let ttl = check_ttl(ttl)?;
        let timeout = timeout.map(clamp_wait);
        if timeout == Some(Duration::ZERO) {
            return LockGroup::attempt(&self.masters, &keys, &self.make_owner(), ttl).await;
        }
        crate::group::wait_all(&self.masters, &keys, ttl, timeout, || self.make_owner()).await
    }

    /// Acquires `key` like [`Relock::acquire`] and keeps it alive (see [`Lock::keep_alive`]).
    pub async fn guard(&self, key: &str, ttl: Duration) -> Result<LockGuard, Error> {
        Ok(self.acquire(key, ttl).await?.keep_alive())
    }

    /// Runs `body` while holding `key`: acquires like [`Relock::acquire`], renews in the
    /// background every ttl / 3, tells the body through [`GuardedLock::lost`] if the lock is lost,
    /// and releases on every exit path (return, panic, or the future being dropped).
    ///
    /// Returns the body's output, or the acquisition error (the body does not run then).
    /// A failure to release afterwards is logged, not returned: the lock expires with its ttl.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, ttl: Duration, body: F) -> Result<T, Error>
    where
        F: FnOnce(GuardedLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.guard(key, ttl).await?;
        let output = body(guard.hold().clone()).await;
        if let Err(e) = guard.release().await {
            tracing::warn!(key, error = %e, "release after with_lock body failed");
        }
        Ok(output)
    }

    /// Waits until every release this client started in the background has finished: those
    /// of dropped [`Lock`]s and [`LockGuard`](crate::LockGuard)s, of failed acquisition rounds,
    /// and of acquisitions abandoned by dropping their future. Each is bounded by the node
    /// timeout. Call it before a process exits right after such a drop or failure, so that
    /// the releases are not cut off (the locks would stay held until their ttl).
    pub async fn settle(&self) {
        self.masters.background().settle().await;
    }

    /// Asks every master who it is (`INFO server`, concurrently, each bounded by the node
    /// timeout) and fails with [`Error::DuplicateServer`] when two of them report one `run_id`:
    /// one server reached under two names that [`Relock::with_options`] cannot tell apart from
    /// their addresses (a host's LAN address and `127.0.0.1`, a port forward, a proxy), which
    /// would vote twice toward the quorum. A master that does not answer (or whose ACL forbids
    /// `INFO`) is not compared. With one master, or a cluster, there is nothing to compare.
    /// lockctl calls it before it acquires anything over several masters.
    pub async fn check_distinct_servers(&self) -> Result<(), Error> {
        if self.masters.is_cluster() || self.masters.names().len() < 2 {
            return Ok(());
        }
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        // Its own bound, not the node timeout (100 ms by default): this first request opens
        // each connection (through a proxy, say), and a master that does not answer in time
        // is not compared, so a duplicate would slip through on a slow start. Seen: a loaded
        // machine let one server named twice (directly and through a proxy) through.
        let timeout = self.options().node_timeout.max(IDENTITY_TIMEOUT);
        let reports = self
            .masters
            .ask_each_within("", &cmd, timeout, |info: String| Ok(run_id_of(&info)))
            .await;
        let ids: Vec<Option<String>> = reports
            .into_iter()
            .map(|r| r.result.ok().flatten())
            .collect();
        match same_server(&ids) {
            Some((first, second)) => {
                let names = self.masters.names();
                Err(Error::DuplicateServer {
                    first: names[first].clone(),
                    second: names[second].clone(),
                    address: format!("run_id {}", ids[second].as_deref().unwrap_or("?")),
                })
            }
            None => Ok(()),
        }
    }

    /// `LOCK.INFO key` on every master, concurrently.
    pub async fn info(&self, key: &str) -> Vec<NodeReport<Option<LockInfo>>> {
        let cmd = wire::cmd(&Info {
            key: key.as_bytes(),
        });
        self.masters.ask_each(key, &cmd, parse_info).await
    }

    /// `LOCK.HOLDERS key COUNT count` on every master, concurrently: the holders of `key`
    /// there in token (grant) order, at most `count` of them (0: all), or `None` where there is
    /// no lock. An exclusive lock has one holder; a shared one, every owner that shares it.
    pub async fn holders(&self, key: &str, count: u32) -> Vec<NodeReport<Option<Vec<HolderInfo>>>> {
        let cmd = wire::cmd(&Holders {
            key: key.as_bytes(),
            owner: None,
            count: Some(count),
        });
        self.masters.ask_each(key, &cmd, parse_holders).await
    }

    /// `LOCK.HOLDERS key OWNER owner` on every master, concurrently: `owner`'s hold of `key`
    /// there (its token, count and time left), or `None` where it holds nothing.
    pub async fn holder(&self, key: &str, owner: &str) -> Vec<NodeReport<Option<HolderInfo>>> {
        let cmd = wire::cmd(&Holders {
            key: key.as_bytes(),
            owner: Some(owner.as_bytes()),
            count: None,
        });
        self.masters
            .ask_each(key, &cmd, |reply| {
                Ok(parse_holders(reply)?.and_then(|h| h.into_iter().next()))
            })
            .await
    }

    /// `LOCK.FORCERELEASE key` on every master, concurrently: breaks the lock whoever holds it
    /// (every holder of a shared lock). Each report says whether that master had a lock to
    /// remove. For operators only.
    pub async fn force_release(&self, key: &str) -> Vec<NodeReport<bool>> {
        let reports = self.force_release_holds(key, None).await;
        reports
            .into_iter()
            .map(|r| NodeReport {
                node: r.node,
                result: r.result.map(|removed| removed > 0),
            })
            .collect()
    }

    /// `LOCK.FORCERELEASE key [owner]` on every master, concurrently: removes every hold of
    /// `key` (`owner` `None`), or only `owner`'s; the queue is served as after a release. Each
    /// report says how many holds that master removed. For operators only. Sent at most once
    /// to each master (a second run after a lost reply would remove a hold taken since): in a
    /// cluster or behind Sentinel a timeout or a dropped connection is reported, not followed
    /// to a new master.
    pub async fn force_release_holds(
        &self,
        key: &str,
        owner: Option<&str>,
    ) -> Vec<NodeReport<u64>> {
        let cmd = wire::cmd(&ForceRelease {
            key: key.as_bytes(),
            owner: owner.map(str::as_bytes),
        });
        self.masters
            .ask_each_once(key, &cmd, |removed: u64| Ok(removed))
            .await
    }

    /// A random pause in `[retry_delay / 2, retry_delay * 3 / 2]`.
    fn jitter(&self) -> Duration {
        let base = self.masters.options().retry_delay;
        let half = base / 2;
        let spread = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }
}

/// The `run_id` an `INFO server` reply gives (40 hex digits, new at every start of a server).
/// How long [`Relock::check_distinct_servers`] waits for each master's `run_id` at least.
const IDENTITY_TIMEOUT: Duration = Duration::from_secs(2);

fn run_id_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .map(str::to_string)
        .filter(|id| !id.is_empty())
}

/// The first two masters (their indexes) that reported one run id, if any.
fn same_server(ids: &[Option<String>]) -> Option<(usize, usize)> {
    ids.iter().enumerate().find_map(|(i, id)| {
        let id = id.as_ref()?;
        ids[..i]
            .iter()
            .position(|earlier| earlier.as_ref() == Some(id))
            .map(|j| (j, i))
    })
}

// What operators' tools ask (lockctl waiters, log, top, metrics): a file of its own.
mod operators;

pub use operators::{Command, Reply};

impl Relock {
    /// The masters, for the other files of the crate that add to the client's API.
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_id_is_one_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:ab12\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_of(info), Some("ab12".to_string()));
        assert_eq!(run_id_of("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(run_id_of(""), None);
        let id = |s: &str| Some(s.to_string());
        assert_eq!(same_server(&[id("a"), id("b"), id("c")]), None);
        assert_eq!(
            same_server(&[id("a"), None, None, id("b"), id("a")]),
            Some((0, 4))
        );
        assert_eq!(same_server(&[None, None]), None, "unknown is not the same");
    }
}
