//! One Redlock round as pure logic: the masters' replies, fed in one at a time as they come,
//! decide whether a quorum is won or lost ([`RoundState`]), and the finished [`Round`] says what
//! that means for an acquisition, a renewal, a release or a wait: the validity left, a loss,
//! or the error naming the masters that failed.
//!
//! No I/O and no clock: the fan-out (`fanout.rs`) feeds the replies and the times in, and the
//! tests below feed fake ones.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, NodeError, NodeErrors, NodeFailure};
use crate::validity::validity;

/// What one master answered: `Ok(Some(_))` it did what was asked (granted, renewed, released)
/// and said this; `Ok(None)` it refused (nil: the lock is another owner's, or no longer ours);
/// `Err(_)` it failed.
pub(crate) type Reply<T> = Result<Option<T>, NodeFailure>;

/// What a master answered to a release: how many holds of the owner are left there (0: the
/// lock is gone; more: a reentrant hold was counted down by one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    pub(crate) holds_left: u64,
}

/// How many of `masters` must agree: N / 2 + 1.
pub(crate) fn quorum(masters: usize) -> usize {
    masters / 2 + 1
}

/// When a round stops taking replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// As soon as a quorum is won or lost: acquisitions, renewals and waits.
    Decided,
    /// Once every master answered: releases, and reentrant acquisitions, whose failure must
    /// undo exactly the counts it added.
    AllAnswered,
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// More replies are needed.
    Pending,
    /// A quorum of masters agreed.
    Won,
    /// Too many masters refused or failed for a quorum to agree.
    Lost,
}

/// A round under way, fed one reply at a time with [`RoundState::on_reply`].
///
/// Once the round is decided (see [`Until`]) it takes no more replies: a late one changes
/// nothing, so what the caller was told stays true.
#[derive(Debug)]
pub(crate) struct RoundState<T> {
    /// The masters' names, in the client's order; a reply names its master by index.
    masters: Arc<[String]>,
    until: Until,
    started: Instant,
    /// Per master, what it said if it agreed.
    agreed: Vec<Option<T>>,
    answered: Vec<bool>,
    /// The masters that refused or failed, in the order they answered, and why.
    failures: Vec<(usize, NodeFailure)>,
}

impl<T> RoundState<T> {
    /// A round over `masters`, whose first request was sent at `started`.
    pub(crate) fn new(masters: Arc<[String]>, until: Until, started: Instant) -> RoundState<T> {
        let n = masters.len();
        RoundState {
            masters,
            until,
            started,
            agreed: std::iter::repeat_with(|| None).take(n).collect(),
            answered: vec![false; n],
            failures: Vec::new(),
        }
    }

    /// Takes master `master`'s reply and says where the round stands now. A reply that comes
    /// after the decision, a second reply of one master, or one from a master the round does
    /// not know is ignored.
    pub(crate) fn on_reply(&mut self, master: usize, reply: Reply<T>) -> Progress {
        let progress = self.progress();
        if progress != Progress::Pending {
            return progress;
        }
        match self.answered.get_mut(master) {
            Some(answered) if !*answered => *answered = true,
            _ => return progress,
        }
        match reply {
            Ok(Some(value)) => {
                if let Some(agreed) = self.agreed.get_mut(master) {
                    *agreed = Some(value);
                }
            }
            Ok(None) => self.failures.push((master, NodeFailure::NotGranted)),
            Err(failure) => self.failures.push((master, failure.classified())),
        }
        self.progress()
    }

    /// Where the round stands.
    pub(crate) fn progress(&self) -> Progress {
        let n = self.masters.len();
        let agreed = self.agreed();
        let all_answered = self.answered.iter().all(|a| *a);
        if self.until == Until::AllAnswered && !all_answered {
            return Progress::Pending;
        }
        if agreed >= quorum(n) {
            Progress::Won
        } else if self.failures.len() + quorum(n) > n {
            // Even if every master still to answer agreed, there would be no quorum.
            Progress::Lost
        } else {
            Progress::Pending
        }
    }

    /// How many masters agreed so far.
    pub(crate) fn agreed(&self) -> usize {
        self.agreed.iter().filter(|a| a.is_some()).count()
    }

    /// The round as it stands at `now`: decided, or cut off by the caller.
    pub(crate) fn finish(self, now: Instant) -> Round<T> {
        Round {
            masters: self.masters,
            agreed: self.agreed,
            failures: self.failures,
            started: self.started,
            elapsed: now.saturating_duration_since(self.started),
        }
    }
}

/// A finished round: who agreed, who did not and why, and how long it took.
#[derive(Debug)]
pub(crate) struct Round<T> {
    masters: Arc<[String]>,
    agreed: Vec<Option<T>>,
    failures: Vec<(usize, NodeFailure)>,
    started: Instant,
    elapsed: Duration,
}

impl<T> Round<T> {
    /// How long the round took until it was decided (or cut off).
    #[cfg(test)]
    pub(crate) fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// How many masters agreed.
    pub(crate) fn agreed(&self) -> usize {
        self.agreed.iter().filter(|a| a.is_some()).count()
    }

    /// Whether a quorum agreed.
    pub(crate) fn won(&self) -> bool {
        self.agreed() >= quorum(self.masters.len())
    }

    /// Per master, what it said if it agreed.
    pub(crate) fn answers(&self) -> &[Option<T>] {
        &self.agreed
    }

    /// Per master, what it said if it agreed.
    pub(crate) fn into_answers(self) -> Vec<Option<T>> {
        self.agreed
    }

    /// Per master, whether it agreed.
    pub(crate) fn agreed_by(&self) -> Vec<bool> {
        self.agreed.iter().map(Option::is_some).collect()
    }

    /// Per master, whether it may hold a grant of this round: all but those that failed
    /// permanently (they never granted, and releasing there would fail the same way). A
    /// master still to answer when the round was decided may have granted since.
    pub(crate) fn may_hold(&self) -> Vec<bool> {
        let mut may_hold = vec![true; self.masters.len()];
        for (master, failure) in &self.failures {
            if failure.is_permanent() {
                if let Some(m) = may_hold.get_mut(*master) {
                    *m = false;
                }
            }
        }
        may_hold
    }

    /// How many masters positively said "not yours".
    fn refused(&self) -> usize {
        self.failures
            .iter()
            .filter(|(_, f)| matches!(f, NodeFailure::NotGranted))
            .count()
    }

    /// How many masters failed in a way retrying cannot fix ([`NodeFailure::is_permanent`]).
    fn permanent(&self) -> usize {
        self.failures
            .iter()
            .filter(|(_, f)| f.is_permanent())
            .count()
    }

    /// Whether some master failed rather than refused.
    pub(crate) fn some_failed(&self) -> bool {
        self.refused() < self.failures.len()
    }

    /// Whether the permanent failures alone leave too few masters for a quorum.
    fn permanently_failed(&self) -> bool {
        let n = self.masters.len();
        self.permanent() + quorum(n) > n
    }

    /// The failures (those `keep` selects) as errors naming their masters.
    fn node_errors(self, keep: impl Fn(&NodeFailure) -> bool) -> NodeErrors {
        let masters = self.masters;
        NodeErrors(
            self.failures
                .into_iter()
                .filter(|(_, f)| keep(f))
                .map(|(master, failure)| NodeError {
                    node: masters.get(master).cloned().unwrap_or_default(),
                    failure,
                })
                .collect(),
        )
    }

    /// Every failure, naming its master, in the order they came.
    pub(crate) fn into_failures(self) -> NodeErrors {
        self.node_errors(|_| true)
    }

    /// [`Error::Permanent`] with the permanent failures; or, when a master refused the mode
    /// or limit asked for, the error that says so ([`Error::OtherLimit`], [`Error::OtherMode`]),
    /// naming the first master that did: asking again the same way cannot help, and a caller
    /// may want to tell these apart.
    fn into_permanent(self, key: &str) -> Error {
        let conflict = self.failures.iter().find_map(|(master, f)| {
            let node = self.masters.get(*master).cloned().unwrap_or_default();
            match f {
                NodeFailure::OtherLimit { limit } => Some(Error::OtherLimit {
                    key: key.to_string(),
                    node,
                    limit: *limit,
                }),
                NodeFailure::OtherMode => Some(Error::OtherMode {
                    key: key.to_string(),
                    node,
                }),
                NodeFailure::OtherPermits => Some(Error::OtherPermits {
                    key: key.to_string(),
                    node,
                }),
                _ => None,
            }
        });
        if let Some(conflict) = conflict {
            return conflict;
        }
        Error::Permanent {
            key: key.to_string(),
            failures: self.node_errors(NodeFailure::is_permanent),
        }
    }

    /// [`Error::NoQuorum`] with every failure.
    fn into_no_quorum(self, key: &str) -> Error {
        let nodes = self.masters.len();
        Error::NoQuorum {
            key: key.to_string(),
            granted: self.agreed(),
            nodes,
            quorum: quorum(nodes),
            failures: self.into_failures(),
        }
    }
}

/// The rounds whose masters answer with a fencing token (acquire, reenter, renew and wait) or
/// a group's tokens or count (`LOCK.MACQUIRE`, `LOCK.MRENEW`).
impl<T> Round<T> {
    /// The validity a quorum granted for `ttl` in this round: `ttl - elapsed - drift`, or
    /// `None` when no quorum granted or none is left.
    pub(crate) fn validity(&self, ttl: Duration) -> Option<Duration> {
        if !self.won() {
            return None;
        }
        validity(ttl, self.elapsed)
    }

    /// Until when a lock granted by this round is ours for sure: the round's start plus its
    /// validity. `None` when there is no validity (see [`Round::validity`]).
    pub(crate) fn valid_until(&self, ttl: Duration) -> Option<Instant> {
        self.started.checked_add(self.validity(ttl)?)
    }

    /// Why an acquisition round that gave no [`Round::valid_until`] failed:
    /// [`Error::Permanent`] when permanent failures alone leave no quorum, [`Error::NoQuorum`]
    /// when too few granted otherwise, [`Error::ValidityExhausted`] when a quorum granted too
    /// late.
    pub(crate) fn into_acquire_error(self, key: &str, ttl: Duration) -> Error {
        if self.won() {
            return self.into_validity_exhausted(key, ttl);
        }
        if self.permanently_failed() {
            return self.into_permanent(key);
        }
        self.into_no_quorum(key)
    }

    /// Why a renewal round that gave no [`Round::valid_until`] failed: like
    /// [`Round::into_acquire_error`], except that the lock is [`Error::Lost`] when some master
    /// said it is no longer ours and those, with the permanent failures, leave no quorum, and
    /// [`Error::TtlRefused`] when a master refused the ttl itself (it changed nothing: the
    /// hold is kept, as by the Python and Node clients).
    pub(crate) fn into_renew_error(self, key: &str, ttl: Duration) -> Error {
        let n = self.masters.len();
        if !self.won()
            && self
                .failures
                .iter()
                .any(|(_, f)| matches!(f, NodeFailure::TtlRefused))
        {
            return Error::TtlRefused {
                key: key.to_string(),
                ttl,
                failures: self.node_errors(|f| matches!(f, NodeFailure::TtlRefused)),
            };
        }
        if !self.won() && self.refused() > 0 && self.refused() + self.permanent() + quorum(n) > n {
            return Error::Lost {
                key: key.to_string(),
                cause: None,
            };
        }
        self.into_acquire_error(key, ttl)
    }

    /// What a `LOCK.WAIT` round without a quorum means, once its grants are given back:
    /// `Err` to stop waiting ([`Error::Permanent`] at once; when `deadline_passed`,
    /// [`Error::NoQuorum`] if only errors, no refusal and no timeout, kept the quorum away,
    /// else [`Error::WaitTimeout`] after `timeout`), or `Ok` to wait again, with the failures
    /// when some master failed rather than refused (worth a warning).
    pub(crate) fn after_failed_wait(
        self,
        key: &str,
        deadline_passed: bool,
        timeout: Duration,
    ) -> Result<Option<NodeErrors>, Error> {
        if self.permanently_failed() {
            return Err(self.into_permanent(key));
        }
        if deadline_passed {
            let errors_only = !self.failures.is_empty()
                && self
                    .failures
                    .iter()
                    .all(|(_, f)| !matches!(f, NodeFailure::NotGranted | NodeFailure::Timeout(_)));
            if errors_only {
                return Err(self.into_no_quorum(key));
            }
            return Err(Error::WaitTimeout {
                key: key.to_string(),
                timeout,
            });
        }
        Ok(self.some_failed().then(|| self.into_failures()))
    }

    fn into_validity_exhausted(self, key: &str, ttl: Duration) -> Error {
        Error::ValidityExhausted {
            key: key.to_string(),
            elapsed: self.elapsed,
            ttl,
        }
    }
}

impl Round<Released> {
    /// What a release round means: done when a quorum released; [`Error::Lost`] when every
    /// master that did not release said the lock was not ours (it expired or was taken);
    /// [`Error::Permanent`] when errors retrying cannot fix (an ACL that forbids
    /// `LOCK.RELEASE`...) alone leave no quorum, judged as for every other round;
    /// [`Error::NoQuorum`] when some failed otherwise (they may hold it until its ttl runs out).
    pub(crate) fn into_release_result(self, key: &str) -> Result<(), Error> {
        if self.won() {
            return Ok(());
        }
        if !self.some_failed() {
            return Err(Error::Lost {
                key: key.to_string(),
                cause: None,
            });
        }
        if self.permanently_failed() {
            return Err(self.into_permanent(key));
        }
        Err(self.into_no_quorum(key))
    }
}

/// Fake masters' answers, for the tests of the round and of its fan-out.
#[cfg(test)]
pub(crate) mod fake {
    use super::Reply;
    use crate::error::NodeFailure;
    use std::time::Duration;

    /// What a fake master answers.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Fake {
        /// Granted (renewed) with this token.
        Grant(u64),
        /// Nil: another owner's, or no longer ours.
        Refuse,
        /// No answer within the node timeout.
        Timeout,
        /// The connection was refused: transient.
        Down,
        /// `BUSY`: transient.
        Busy,
        /// `WRONGTYPE`: permanent.
        WrongType,
        /// The module is not loaded: permanent.
        NoModule,
        /// `ERR lock has another limit (n)`: permanent.
        OtherLimit(u32),
        /// `ERR lock is held in another mode`: permanent.
        OtherMode,
        /// `MOVED`: a Redis Cluster node asked as a plain server, permanent.
        Moved,
        /// `NOPERM`: an ACL forbids the command, permanent.
        NoPerm,
        /// `TRYAGAIN relock restart grace, 900 ms left`: transient, a master that did not grant.
        Grace,
        /// `ERR lock is held with other permits`: permanent.
        OtherPermits,
    }
    use Fake::*;

    /// An error reply as redis-rs reads it off the wire.
    fn server_error(line: &str) -> NodeFailure {
        let wire = format!("-{line}\r\n");
        match redis::parse_redis_value(wire.as_bytes()).and_then(redis::Value::extract_error) {
            Err(e) => NodeFailure::from(e),
            Ok(v) => panic!("{line:?} parsed as {v:?}"),
        }
    }

    pub(crate) fn reply(fake: Fake) -> Reply<u64> {
        match fake {
            Grant(token) => Ok(Some(token)),
            Refuse => Ok(None),
            Timeout => Err(NodeFailure::Timeout(Duration::from_millis(100))),
            Down => Err(NodeFailure::from(redis::RedisError::from(
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ))),
            Busy => Err(server_error("BUSY Redis is busy running a script")),
            WrongType => Err(server_error(
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            )),
            NoModule => Err(server_error("ERR unknown command 'LOCK.ACQUIRE'")),
            OtherLimit(n) => Err(server_error(&format!("ERR lock has another limit ({n})"))),
            OtherMode => Err(server_error("ERR lock is held in another mode")),
            Moved => Err(server_error("MOVED 3999 127.0.0.1:7002")),
            NoPerm => Err(server_error(
                "NOPERM User app has no permissions to run the 'lock.renew' command",
            )),
            Grace => Err(server_error("TRYAGAIN relock restart grace, 900 ms left")),
            OtherPermits => Err(server_error("ERR lock is held with other permits")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{reply, Fake, Fake::*};
    use super::*;
    use crate::validity::drift;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_fakes_fail_the_way_their_names_say() {
        for (fake, permanent) in [
            (Timeout, false),
            (Down, false),
            (Busy, false),
            (WrongType, true),
            (NoModule, true),
            (OtherLimit(3), true),
            (OtherMode, true),
            (Moved, true),
            (NoPerm, true),
            (Grace, false),
            (OtherPermits, true),
        ] {
            let failure = reply(fake).expect_err("a failure");
            assert_eq!(failure.is_permanent(), permanent, "{fake:?}: {failure}");
            assert_eq!(
                failure.classified().is_permanent(),
                permanent,
                "{fake:?} classified"
            );
        }
        assert!(matches!(
            reply(Grace).expect_err("grace").classified(),
            NodeFailure::RestartGrace { left_ms: 900 }
        ));
        assert!(matches!(
            reply(OtherPermits).expect_err("permits").classified(),
            NodeFailure::OtherPermits
        ));
    }

    /// A master in its restart grace is a no-vote, like a refusal: two of three grant, the
    /// round is won; two in grace, it is lost and retryable, never a hard error.
    #[test]
    fn a_master_in_its_restart_grace_does_not_grant() {
        let (won, _, _) = run(
            3,
            Until::Decided,
            &[(0, Grace), (1, Grant(1)), (2, Grant(2))],
            ms(5),
        );
        assert!(won.won());
        let (lost, progress, _) = run(3, Until::Decided, &[(0, Grace), (1, Grace)], ms(5));
        assert_eq!(progress, [Progress::Pending, Progress::Lost]);
        let err = lost.into_acquire_error("k", ms(1000));
        assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
        assert!(!err.is_permanent());
        assert!(err.to_string().contains("restart grace"), "{err}");
    }

    fn names(n: usize) -> Arc<[String]> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    /// A round over `masters` fake masters fed `replies` (master, answer) in that order,
    /// finished `elapsed` after it started; returns the round and the progress after each
    /// reply.
    fn run(
        masters: usize,
        until: Until,
        replies: &[(usize, Fake)],
        elapsed: Duration,
    ) -> (Round<u64>, Vec<Progress>, Instant) {
        let started = Instant::now();
        let mut state = RoundState::new(names(masters), until, started);
        let progress = replies
            .iter()
            .map(|&(master, fake)| state.on_reply(master, reply(fake)))
            .collect();
        (state.finish(started + elapsed), progress, started)
    }

    /// The masters an error names, by index.
    fn named(failures: &NodeErrors) -> Vec<usize> {
        failures
            .0
            .iter()
            .map(|e| {
                e.node
                    .trim_start_matches('m')
                    .parse()
                    .expect("a fake's name")
            })
            .collect()
    }

    const P: Progress = Progress::Pending;
    const W: Progress = Progress::Won;
    const L: Progress = Progress::Lost;

    /// Replies fed one at a time: when the round is decided, what it keeps, and that a late
    /// reply (after the decision), a second reply of one master, or one from a master the
    /// round does not know changes nothing.
    #[test]
    fn replies_decide_the_round() {
        struct Case {
            what: &'static str,
            masters: usize,
            until: Until,
            replies: &'static [(usize, Fake)],
            progress: &'static [Progress],
            tokens: &'static [Option<u64>],
            failed: &'static [usize],
        }
        let d = Until::Decided;
        let all = Until::AllAnswered;
        let cases = [
            Case {
                what: "one master grants",
                masters: 1,
                until: d,
                replies: &[(0, Grant(7))],
                progress: &[W],
                tokens: &[Some(7)],
                failed: &[],
            },
            Case {
                what: "one master refuses",
                masters: 1,
                until: d,
                replies: &[(0, Refuse)],
                progress: &[L],
                tokens: &[None],
                failed: &[0],
            },
            Case {
                what: "one master times out",
                masters: 1,
                until: d,
                replies: &[(0, Timeout)],
                progress: &[L],
                tokens: &[None],
                failed: &[0],
            },
            Case {
                what: "one master fails permanently",
                masters: 1,
                until: d,
                replies: &[(0, NoModule)],
                progress: &[L],
                tokens: &[None],
                failed: &[0],
            },
            Case {
                what: "3: two grants win before the third answers; its late grant is ignored",
                masters: 3,
                until: d,
                replies: &[(0, Grant(1)), (1, Grant(2)), (2, Grant(3))],
                progress: &[P, W, W],
                tokens: &[Some(1), Some(2), None],
                failed: &[],
            },
            Case {
                what: "3: grant, refusal, grant",
                masters: 3,
                until: d,
                replies: &[(0, Grant(1)), (1, Refuse), (2, Grant(3))],
                progress: &[P, P, W],
                tokens: &[Some(1), None, Some(3)],
                failed: &[1],
            },
            Case {
                what: "3: two refusals lose; a late grant is ignored",
                masters: 3,
                until: d,
                replies: &[(0, Refuse), (1, Refuse), (2, Grant(3))],
                progress: &[P, L, L],
                tokens: &[None, None, None],
                failed: &[0, 1],
            },
            Case {
                what: "3: a timeout and a transient error lose like refusals",
                masters: 3,
                until: d,
                replies: &[(2, Timeout), (0, Down)],
                progress: &[P, L],
                tokens: &[None, None, None],
                failed: &[2, 0],
            },
            Case {
                what: "3: a grant, a timeout, a refusal",
                masters: 3,
                until: d,
                replies: &[(0, Grant(1)), (1, Timeout), (2, Refuse)],
                progress: &[P, P, L],
                tokens: &[Some(1), None, None],
                failed: &[1, 2],
            },
            Case {
                what: "3: one permanent error leaves a quorum to win",
                masters: 3,
                until: d,
                replies: &[(1, WrongType), (0, Grant(1)), (2, Grant(3))],
                progress: &[P, P, W],
                tokens: &[Some(1), None, Some(3)],
                failed: &[1],
            },
            Case {
                what: "3: replies out of the masters' order",
                masters: 3,
                until: d,
                replies: &[(2, Grant(3)), (0, Grant(1))],
                progress: &[P, W],
                tokens: &[Some(1), None, Some(3)],
                failed: &[],
            },
            Case {
                what: "3: a master answering twice counts once",
                masters: 3,
                until: d,
                replies: &[
                    (0, Grant(1)),
                    (0, Grant(9)),
                    (0, Refuse),
                    (1, Busy),
                    (2, Grant(3)),
                ],
                progress: &[P, P, P, P, W],
                tokens: &[Some(1), None, Some(3)],
                failed: &[1],
            },
            Case {
                what: "3: a master the round does not know is ignored",
                masters: 3,
                until: d,
                replies: &[(7, Grant(7)), (3, Refuse), (0, Grant(1)), (1, Grant(2))],
                progress: &[P, P, P, W],
                tokens: &[Some(1), Some(2), None],
                failed: &[],
            },
            Case {
                what: "5: three grants win; late refusals are ignored",
                masters: 5,
                until: d,
                replies: &[
                    (0, Grant(1)),
                    (3, Grant(4)),
                    (4, Grant(5)),
                    (1, Refuse),
                    (2, Refuse),
                ],
                progress: &[P, P, W, W, W],
                tokens: &[Some(1), None, None, Some(4), Some(5)],
                failed: &[],
            },
            Case {
                what: "5: three refusals lose",
                masters: 5,
                until: d,
                replies: &[(0, Refuse), (1, Refuse), (2, Refuse), (3, Grant(4))],
                progress: &[P, P, L, L],
                tokens: &[None; 5],
                failed: &[0, 1, 2],
            },
            Case {
                what: "5: decided by the last reply, won",
                masters: 5,
                until: d,
                replies: &[
                    (0, Grant(1)),
                    (1, Timeout),
                    (2, Refuse),
                    (3, Grant(4)),
                    (4, Grant(5)),
                ],
                progress: &[P, P, P, P, W],
                tokens: &[Some(1), None, None, Some(4), Some(5)],
                failed: &[1, 2],
            },
            Case {
                what: "5: decided by the last reply, lost to a mix of failures",
                masters: 5,
                until: d,
                replies: &[
                    (0, Grant(1)),
                    (1, Grant(2)),
                    (2, Refuse),
                    (3, Timeout),
                    (4, Busy),
                ],
                progress: &[P, P, P, P, L],
                tokens: &[Some(1), Some(2), None, None, None],
                failed: &[2, 3, 4],
            },
            Case {
                what: "5: two permanent errors still leave a quorum",
                masters: 5,
                until: d,
                replies: &[
                    (0, NoModule),
                    (1, WrongType),
                    (2, Grant(3)),
                    (3, Grant(4)),
                    (4, Grant(5)),
                ],
                progress: &[P, P, P, P, W],
                tokens: &[None, None, Some(3), Some(4), Some(5)],
                failed: &[0, 1],
            },
            Case {
                what: "all answered, 3: a quorum is not enough while one is to answer",
                masters: 3,
                until: all,
                replies: &[(0, Grant(1)), (1, Grant(2)), (2, Refuse)],
                progress: &[P, P, W],
                tokens: &[Some(1), Some(2), None],
                failed: &[2],
            },
            Case {
                what: "all answered, 3: a grant after two refusals is kept (to be undone)",
                masters: 3,
                until: all,
                replies: &[(0, Refuse), (1, Refuse), (2, Grant(3))],
                progress: &[P, P, L],
                tokens: &[None, None, Some(3)],
                failed: &[0, 1],
            },
            Case {
                what: "all answered, 1: a refusal",
                masters: 1,
                until: all,
                replies: &[(0, Refuse), (0, Grant(1))],
                progress: &[L, L],
                tokens: &[None],
                failed: &[0],
            },
        ];
        for case in &cases {
            let (round, progress, _) = run(case.masters, case.until, case.replies, ms(5));
            assert_eq!(progress, case.progress, "{}: progress", case.what);
            assert_eq!(round.answers(), case.tokens, "{}: tokens", case.what);
            let failed = named(&round.into_failures());
            assert_eq!(failed, case.failed, "{}: failures", case.what);
        }
    }

    /// What a round means for the caller, in one comparable form.
    #[derive(Debug, PartialEq)]
    enum Want {
        /// Held, valid until this long after the round started.
        ValidFor(Duration),
        Released,
        Lost,
        NoQuorum {
            granted: usize,
            failed: Vec<usize>,
        },
        Permanent(Vec<usize>),
        Exhausted(Duration),
        WaitTimeout,
        WaitAgain,
        WaitAgainWarning(Vec<usize>),
    }

    fn want(error: Error) -> Want {
        match error {
            Error::Lost { key, .. } => {
                assert_eq!(key, "k");
                Want::Lost
            }
            Error::NoQuorum {
                key,
                granted,
                nodes,
                quorum: q,
                failures,
            } => {
                assert_eq!((key.as_str(), q), ("k", quorum(nodes)));
                Want::NoQuorum {
                    granted,
                    failed: named(&failures),
                }
            }
            Error::Permanent { failures, .. } => Want::Permanent(named(&failures)),
            Error::ValidityExhausted { elapsed, .. } => Want::Exhausted(elapsed),
            Error::WaitTimeout { timeout, .. } => {
                assert_eq!(timeout, ms(1_000));
                Want::WaitTimeout
            }
            other => panic!("unexpected {other}"),
        }
    }

    fn acquired(round: Round<u64>, started: Instant, ttl: Duration) -> Want {
        match round.valid_until(ttl) {
            Some(until) => Want::ValidFor(until - started),
            None => want(round.into_acquire_error("k", ttl)),
        }
    }

    fn renewed(round: Round<u64>, started: Instant, ttl: Duration) -> Want {
        match round.valid_until(ttl) {
            Some(until) => Want::ValidFor(until - started),
            None => want(round.into_renew_error("k", ttl)),
        }
    }

    /// Acquisitions and renewals: the validity a won round gives (ttl - elapsed - drift, from
    /// the round's start), and the error of one that gives none.
    #[test]
    fn acquisitions_and_renewals_are_judged() {
        let ttl = ms(10_000);
        let left = |elapsed: u64| Want::ValidFor(ms(10_000 - elapsed) - drift(ttl));
        let no_quorum = |granted: usize, failed: &[usize]| Want::NoQuorum {
            granted,
            failed: failed.to_vec(),
        };
        let permanent = |failed: &[usize]| Want::Permanent(failed.to_vec());
        // (what, masters, replies, elapsed ms, acquire, renew)
        let cases = vec![
            ("1: granted", 1, vec![(0, Grant(1))], 3, left(3), left(3)),
            (
                "1: refused",
                1,
                vec![(0, Refuse)],
                3,
                no_quorum(0, &[0]),
                Want::Lost,
            ),
            (
                "1: timeout",
                1,
                vec![(0, Timeout)],
                100,
                no_quorum(0, &[0]),
                no_quorum(0, &[0]),
            ),
            (
                "1: transient error",
                1,
                vec![(0, Busy)],
                3,
                no_quorum(0, &[0]),
                no_quorum(0, &[0]),
            ),
            (
                "1: permanent error",
                1,
                vec![(0, WrongType)],
                3,
                permanent(&[0]),
                permanent(&[0]),
            ),
            (
                "3: all granted",
                3,
                vec![(0, Grant(1)), (1, Grant(2))],
                100,
                left(100),
                left(100),
            ),
            (
                "3: quorum despite a refusal",
                3,
                vec![(0, Refuse), (1, Grant(2)), (2, Grant(3))],
                40,
                left(40),
                left(40),
            ),
            (
                "3: one grant, two refusals",
                3,
                vec![(0, Grant(1)), (1, Refuse), (2, Refuse)],
                3,
                no_quorum(1, &[1, 2]),
                Want::Lost,
            ),
            (
                "3: one grant, a refusal, a timeout",
                3,
                vec![(0, Grant(1)), (1, Refuse), (2, Timeout)],
                100,
                no_quorum(1, &[1, 2]),
                no_quorum(1, &[1, 2]),
            ),
            (
                "3: a refusal and a permanent error: lost for a renewal",
                3,
                vec![(0, Grant(1)), (1, Refuse), (2, WrongType)],
                3,
                no_quorum(1, &[1, 2]),
                Want::Lost,
            ),
            (
                "3: two permanent errors",
                3,
                vec![(0, Grant(1)), (1, NoModule), (2, WrongType)],
                3,
                permanent(&[1, 2]),
                permanent(&[1, 2]),
            ),
            (
                "3: one permanent error and a timeout",
                3,
                vec![(0, NoModule), (1, Timeout)],
                100,
                no_quorum(0, &[0, 1]),
                no_quorum(0, &[0, 1]),
            ),
            (
                "3: transient errors only",
                3,
                vec![(0, Down), (1, Busy)],
                3,
                no_quorum(0, &[0, 1]),
                no_quorum(0, &[0, 1]),
            ),
            (
                "5: three grants",
                5,
                vec![(4, Grant(5)), (2, Grant(3)), (0, Grant(1))],
                250,
                left(250),
                left(250),
            ),
            (
                "5: two permanent, one timeout",
                5,
                vec![
                    (0, Grant(1)),
                    (1, Grant(2)),
                    (2, NoModule),
                    (3, WrongType),
                    (4, Timeout),
                ],
                100,
                no_quorum(2, &[2, 3, 4]),
                no_quorum(2, &[2, 3, 4]),
            ),
            (
                "5: three permanent",
                5,
                vec![(0, Grant(1)), (2, NoModule), (3, WrongType), (4, NoModule)],
                3,
                permanent(&[2, 3, 4]),
                permanent(&[2, 3, 4]),
            ),
            (
                "5: two refusals and a permanent error: lost for a renewal",
                5,
                vec![(0, Refuse), (1, Grant(2)), (2, WrongType), (3, Refuse)],
                3,
                no_quorum(1, &[0, 2, 3]),
                Want::Lost,
            ),
            (
                "5: one refusal, two timeouts",
                5,
                vec![(0, Refuse), (1, Grant(2)), (2, Timeout), (3, Timeout)],
                100,
                no_quorum(1, &[0, 2, 3]),
                no_quorum(1, &[0, 2, 3]),
            ),
            (
                "3: won, but after the whole ttl",
                3,
                vec![(0, Grant(1)), (1, Grant(2))],
                10_000,
                Want::Exhausted(ms(10_000)),
                Want::Exhausted(ms(10_000)),
            ),
            (
                "3: won, but far past the ttl (no underflow)",
                3,
                vec![(0, Grant(1)), (1, Grant(2))],
                u64::MAX / 4,
                Want::Exhausted(ms(u64::MAX / 4)),
                Want::Exhausted(ms(u64::MAX / 4)),
            ),
            (
                "3: won with exactly the drift left: none",
                3,
                vec![(0, Grant(1)), (1, Grant(2))],
                10_000 - 102,
                Want::Exhausted(ms(10_000 - 102)),
                Want::Exhausted(ms(10_000 - 102)),
            ),
            (
                "3: won with 1 ms more than the drift left",
                3,
                vec![(0, Grant(1)), (1, Grant(2))],
                10_000 - 103,
                Want::ValidFor(ms(1)),
                Want::ValidFor(ms(1)),
            ),
        ];
        for (what, masters, replies, elapsed, acquire, renew) in cases {
            let (round, _, started) = run(masters, Until::Decided, &replies, ms(elapsed));
            assert_eq!(acquired(round, started, ttl), acquire, "acquire, {what}");
            let (round, _, started) = run(masters, Until::Decided, &replies, ms(elapsed));
            assert_eq!(renewed(round, started, ttl), renew, "renew, {what}");
        }
    }

    /// Validity for ttls the drift matters to: a ttl of 2 ms or less has none at all.
    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let us = Duration::from_micros;
        // (ttl ms, elapsed ms, validity µs)
        let cases: &[(u64, u64, Option<u64>)] = &[
            (1, 0, None),
            (2, 0, None),
            (3, 0, Some(970)),
            (100, 0, Some(97_000)),
            (100, 97, None),
            (100, 96, Some(1_000)),
            (1_000, 500, Some(488_000)),
            (1_000_000_000_000, 0, Some(989_999_999_998_000)),
            (1_000_000_000_000, u64::MAX / 2, None),
        ];
        for &(ttl, elapsed, want) in cases {
            let (round, _, started) = run(1, Until::Decided, &[(0, Grant(1))], ms(elapsed));
            assert_eq!(
                round.validity(ms(ttl)),
                want.map(us),
                "ttl {ttl} elapsed {elapsed}"
            );
            let until = round.valid_until(ms(ttl)).map(|u| u - started);
            assert_eq!(until, want.map(us), "ttl {ttl} elapsed {elapsed}");
        }
        // No quorum, no validity, however fast.
        let (round, _, _) = run(3, Until::Decided, &[(0, Grant(1))], ms(0));
        assert_eq!(round.validity(ms(10_000)), None);
    }

    fn release_reply(fake: Fake) -> Reply<Released> {
        reply(fake).map(|granted| granted.map(|holds_left| Released { holds_left }))
    }

    /// Releases: done with a quorum; lost when every other master said "not yours"; no quorum
    /// when some failed (they may hold the lock until its ttl).
    #[test]
    fn releases_are_judged() {
        let no_quorum = |granted: usize, failed: &[usize]| Want::NoQuorum {
            granted,
            failed: failed.to_vec(),
        };
        // (what, masters, replies: Grant(n) = released with n holds left)
        let cases = vec![
            ("1: released", 1, vec![(0, Grant(0))], Want::Released),
            (
                "1: one hold of two released",
                1,
                vec![(0, Grant(1))],
                Want::Released,
            ),
            ("1: not ours", 1, vec![(0, Refuse)], Want::Lost),
            ("1: timeout", 1, vec![(0, Timeout)], no_quorum(0, &[0])),
            (
                "1: permanent error",
                1,
                vec![(0, WrongType)],
                Want::Permanent(vec![0]),
            ),
            (
                "1: not allowed",
                1,
                vec![(0, NoPerm)],
                Want::Permanent(vec![0]),
            ),
            (
                "3: one released, two not allowed",
                3,
                vec![(0, Grant(0)), (1, NoPerm), (2, NoPerm)],
                Want::Permanent(vec![1, 2]),
            ),
            (
                "3: one released, one not allowed, one timeout",
                3,
                vec![(0, Grant(0)), (1, NoPerm), (2, Timeout)],
                no_quorum(1, &[1, 2]),
            ),
            (
                "3: all released",
                3,
                vec![(0, Grant(0)), (1, Grant(0)), (2, Grant(0))],
                Want::Released,
            ),
            (
                "3: quorum released, one not ours",
                3,
                vec![(0, Grant(0)), (1, Refuse), (2, Grant(0))],
                Want::Released,
            ),
            (
                "3: quorum released, one down",
                3,
                vec![(0, Down), (1, Grant(0)), (2, Grant(0))],
                Want::Released,
            ),
            (
                "3: one released, two not ours",
                3,
                vec![(0, Grant(0)), (1, Refuse), (2, Refuse)],
                Want::Lost,
            ),
            (
                "3: none ours",
                3,
                vec![(0, Refuse), (1, Refuse), (2, Refuse)],
                Want::Lost,
            ),
            (
                "3: one released, one not ours, one timeout",
                3,
                vec![(0, Grant(0)), (1, Refuse), (2, Timeout)],
                no_quorum(1, &[1, 2]),
            ),
            (
                "3: all timed out",
                3,
                vec![(2, Timeout), (0, Timeout), (1, Timeout)],
                no_quorum(0, &[2, 0, 1]),
            ),
            (
                "5: two released, three not ours",
                5,
                vec![
                    (0, Grant(0)),
                    (1, Grant(0)),
                    (2, Refuse),
                    (3, Refuse),
                    (4, Refuse),
                ],
                Want::Lost,
            ),
            (
                "5: two released, two not ours, one busy",
                5,
                vec![
                    (0, Grant(0)),
                    (1, Grant(0)),
                    (2, Refuse),
                    (3, Refuse),
                    (4, Busy),
                ],
                no_quorum(2, &[2, 3, 4]),
            ),
        ];
        for (what, masters, replies, expected) in cases {
            let mut state = RoundState::new(names(masters), Until::AllAnswered, Instant::now());
            for &(master, fake) in &replies {
                state.on_reply(master, release_reply(fake));
            }
            let result = state.finish(Instant::now()).into_release_result("k");
            let got = match result {
                Ok(()) => Want::Released,
                Err(e) => want(e),
            };
            assert_eq!(got, expected, "{what}");
        }
    }

    /// A `LOCK.WAIT` round without a quorum: stop at once on permanent errors; at the deadline
    /// time out, unless only errors kept the quorum away; otherwise wait again, with a warning
    /// when some master failed rather than refused.
    #[test]
    fn failed_waits_are_judged() {
        let warn = |failed: &[usize]| Want::WaitAgainWarning(failed.to_vec());
        // (what, masters, replies, deadline passed, expected)
        let cases = vec![
            ("1: refused", 1, vec![(0, Refuse)], false, Want::WaitAgain),
            (
                "1: refused at the deadline",
                1,
                vec![(0, Refuse)],
                true,
                Want::WaitTimeout,
            ),
            ("1: timeout", 1, vec![(0, Timeout)], false, warn(&[0])),
            (
                "1: timeout at the deadline",
                1,
                vec![(0, Timeout)],
                true,
                Want::WaitTimeout,
            ),
            ("1: down", 1, vec![(0, Down)], false, warn(&[0])),
            (
                "1: down at the deadline",
                1,
                vec![(0, Down)],
                true,
                Want::NoQuorum {
                    granted: 0,
                    failed: vec![0],
                },
            ),
            (
                "1: permanent",
                1,
                vec![(0, NoModule)],
                false,
                Want::Permanent(vec![0]),
            ),
            (
                "3: two permanent, before the deadline",
                3,
                vec![(0, NoModule), (1, WrongType)],
                false,
                Want::Permanent(vec![0, 1]),
            ),
            (
                "3: a refusal and an error",
                3,
                vec![(0, Grant(1)), (1, Refuse), (2, Busy)],
                false,
                warn(&[1, 2]),
            ),
            (
                "3: a refusal and an error at the deadline",
                3,
                vec![(0, Grant(1)), (1, Refuse), (2, Busy)],
                true,
                Want::WaitTimeout,
            ),
            (
                "3: errors only at the deadline",
                3,
                vec![(0, Grant(1)), (1, Down), (2, Busy)],
                true,
                Want::NoQuorum {
                    granted: 1,
                    failed: vec![1, 2],
                },
            ),
            (
                "3: a minority cut off by the partial-hold limit",
                3,
                vec![(0, Grant(1))],
                false,
                Want::WaitAgain,
            ),
            (
                "3: a minority cut off at the deadline",
                3,
                vec![(0, Grant(1))],
                true,
                Want::WaitTimeout,
            ),
        ];
        for (what, masters, replies, deadline_passed, expected) in cases {
            let (round, _, _) = run(masters, Until::Decided, &replies, ms(5));
            let got = match round.after_failed_wait("k", deadline_passed, ms(1_000)) {
                Ok(None) => Want::WaitAgain,
                Ok(Some(failures)) => Want::WaitAgainWarning(named(&failures)),
                Err(e) => want(e),
            };
            assert_eq!(got, expected, "{what}");
        }
    }

    /// What a failed round gives back: now where a master granted, later wherever a grant
    /// may still land (every master but those that failed permanently).
    #[test]
    fn a_failed_round_says_where_to_release() {
        // (masters, replies, granted, may hold)
        let cases = vec![
            (1, vec![(0, Refuse)], vec![false], vec![true]),
            (1, vec![(0, NoModule)], vec![false], vec![false]),
            (
                3,
                vec![(0, Grant(1)), (1, WrongType), (2, Refuse)],
                vec![true, false, false],
                vec![true, false, true],
            ),
            (
                3,
                vec![(0, Timeout), (2, Down)],
                vec![false, false, false],
                vec![true, true, true],
            ),
            (
                5,
                vec![(1, Grant(2)), (0, NoModule), (3, WrongType), (4, Refuse)],
                vec![false, true, false, false, false],
                vec![false, true, true, false, true],
            ),
        ];
        for (masters, replies, granted, may_hold) in cases {
            let (round, _, _) = run(masters, Until::Decided, &replies, ms(5));
            assert_eq!(round.agreed_by(), granted, "{replies:?}");
            assert_eq!(round.may_hold(), may_hold, "{replies:?}");
        }
    }

    /// A master that refuses the mode or limit asked for is named in an error that says so,
    /// once such refusals leave no quorum; a minority of them is only a minority.
    #[test]
    fn mode_and_limit_refusals_name_the_master() {
        let ttl = ms(10_000);
        let (round, _, _) = run(1, Until::Decided, &[(0, OtherLimit(3))], ms(5));
        match round.into_acquire_error("k", ttl) {
            Error::OtherLimit { key, node, limit } => {
                assert_eq!((key.as_str(), node.as_str(), limit), ("k", "m0", 3));
            }
            other => panic!("unexpected {other}"),
        }
        let replies = [(1, OtherMode), (0, WrongType), (2, OtherMode)];
        let (round, _, _) = run(3, Until::Decided, &replies, ms(5));
        let err = round.into_acquire_error("k", ttl);
        assert!(
            matches!(&err, Error::OtherMode { node, .. } if node == "m1"),
            "{err}"
        );
        assert!(err.is_permanent());
        assert_eq!(err.failed_nodes(), ["m1"]);
        let replies = [(0, OtherLimit(0)), (1, Grant(1)), (2, Grant(2))];
        let (round, _, started) = run(3, Until::Decided, &replies, ms(5));
        assert_eq!(
            acquired(round, started, ttl),
            Want::ValidFor(ms(10_000 - 5 - 102))
        );
        // Other error replies stay what they were.
        let (round, _, _) = run(1, Until::Decided, &[(0, NoModule)], ms(5));
        assert_eq!(
            want(round.into_acquire_error("k", ttl)),
            Want::Permanent(vec![0])
        );
    }

    /// With one server an error says what that server did, not "0 of 1 masters granted";
    /// with several the count stays. A cluster node asked as a plain server says so.
    #[test]
    fn errors_say_what_happened() {
        let ttl = ms(10_000);
        for (fake, says) in [
            (Refuse, "m0: not granted"),
            (Timeout, "m0: no reply within 100ms"),
            (Busy, "m0: BUSY"),
        ] {
            let (round, _, _) = run(1, Until::Decided, &[(0, fake)], ms(5));
            let text = round.into_acquire_error("k", ttl).to_string();
            assert!(text.starts_with(&format!("lock \"k\": {says}")), "{text}");
            assert!(!text.contains("quorum") && !text.contains("of 1"), "{text}");
        }
        let replies = [(0, Refuse), (1, Timeout)];
        let (round, _, _) = run(3, Until::Decided, &replies, ms(5));
        let text = round.into_acquire_error("k", ttl).to_string();
        assert!(
            text.contains("no quorum, 0 of 3 masters granted, 2 needed"),
            "{text}"
        );
        let (round, _, _) = run(1, Until::Decided, &[(0, Moved)], ms(5));
        let err = round.into_acquire_error("k", ttl);
        assert!(err.is_permanent(), "{err}");
        assert!(err.to_string().contains("Redis Cluster node"), "{err}");
        assert!(err.to_string().contains("--cluster"), "{err}");
    }

    #[test]
    fn a_round_without_masters_is_lost_not_a_panic() {
        let mut state = RoundState::new(names(0), Until::Decided, Instant::now());
        assert_eq!(state.progress(), Progress::Lost);
        assert_eq!(state.on_reply(0, reply(Grant(1))), Progress::Lost);
        let round = state.finish(Instant::now());
        assert!(!round.won());
        assert_eq!(round.valid_until(ms(1_000)), None);
        let _ = round.into_acquire_error("k", ms(1_000));
    }

    #[test]
    fn elapsed_is_measured_from_the_start_and_never_negative() {
        let started = Instant::now();
        let state: RoundState<u64> = RoundState::new(names(1), Until::Decided, started);
        assert_eq!(state.finish(started + ms(42)).elapsed(), ms(42));
        let state: RoundState<u64> = RoundState::new(names(1), Until::Decided, started + ms(5));
        assert_eq!(state.finish(started).elapsed(), Duration::ZERO);
    }
}
