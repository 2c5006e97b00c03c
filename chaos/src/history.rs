//! The history of a run and the checker.
//!
//! Workers report, one tab-separated line each (times in wall-clock µs):
//! - `G id seq owner token t0 t1 valid_end`: a hold was granted (request sent at t0, reply at
//!   t1; the worker may act as the holder until valid_end, 0 = never);
//! - `S id seq`: the hold was not used (its validity was over before the work began);
//! - `W id seq tw accepted`: the hold's fenced write, sent at tw;
//! - `V id seq valid_end`: a renewal moved the hold's validity to valid_end (a kept-alive hold:
//!   a leader's term);
//! - `A id seq t`: a leader acted as the leader at t (after checking its loss signal);
//! - `L id seq t_lost valid_end`: the client signalled the hold lost at t_lost, when its
//!   validity was valid_end; the worker stops acting as the holder then (its `R` follows);
//! - `R id seq tr`: the worker stopped acting as the holder at tr (and then released);
//! - `X id message`: an error (a refused connection while a server is down, ...);
//! - `F id seq token t_inv t_ret ok|fenced|unknown`, `Q id seq t_inv t_ret value`: a holder's
//!   write and read of the fenced register, checked by `register.rs`, not here.
//!
//! The checker verifies:
//! 1. mutual exclusion: no two holds *used within their validity* overlap in real time, where a
//!    hold's interval is `[t1, min(tr, valid_end)]` (a killed worker's is `[t1, valid_end]`);
//!    for a semaphore of `limit` permits, no more than `limit` of them at once;
//! 2. token order: among the holds used, one granted (reply received) before another was
//!    requested has the smaller token, and no two share a token (one leader per term);
//! 3. fencing: replaying the store's log, every write was accepted iff its token was above every
//!    token accepted before it, so every stale write was rejected;
//! 4. loss in time: every loss was signalled no later than the validity it ended.

use std::collections::{BTreeMap, HashMap};

use crate::store::Attempt;

/// One hold, assembled from its worker's lines.
#[derive(Debug, Clone, Default)]
pub struct Hold {
    pub worker: u32,
    pub seq: u64,
    pub token: u64,
    pub t0: u64,
    pub t1: u64,
    pub valid_end: u64,
    pub skipped: bool,
    /// `(tw, accepted)` of its write.
    pub write: Option<(u64, bool)>,
    pub released: Option<u64>,
    /// `(t_lost, valid_end)` when the client signalled the hold lost.
    pub lost: Option<(u64, u64)>,
    /// `A` lines after the validity known at the time: the holder acted past its validity.
    pub late_acts: usize,
}

impl Hold {
    /// Whether the holder acted on the hold within its validity: it wrote in time, or it died
    /// holding (we cannot tell when it stopped, so assume it used the whole validity).
    pub fn used_in_validity(&self) -> bool {
        match self.write {
            Some((tw, _)) => tw <= self.valid_end,
            None => !self.skipped && self.released.is_none() && self.valid_end > self.t1,
        }
    }

    /// When the holder stopped acting as the holder.
    pub fn end(&self) -> u64 {
        self.released.unwrap_or(u64::MAX).min(self.valid_end)
    }
}

/// Parses worker lines into holds, keyed by `(worker, seq)`; also counts `X` lines.
pub fn parse(lines: &[String]) -> (Vec<Hold>, usize) {
    let mut holds: BTreeMap<(u32, u64), Hold> = BTreeMap::new();
    let mut errors = 0;
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let key = (num(1) as u32, num(2));
        match f.first().copied() {
            Some("G") if f.len() == 8 => {
                holds.insert(
                    key,
                    Hold {
                        worker: key.0,
                        seq: key.1,
                        token: num(4),
                        t0: num(5),
                        t1: num(6),
                        valid_end: num(7),
                        ..Hold::default()
                    },
                );
            }
            Some("S") => {
                if let Some(h) = holds.get_mut(&key) {
                    h.skipped = true;
                }
            }
            Some("W") => {
                if let Some(h) = holds.get_mut(&key) {
                    h.write = Some((num(3), num(4) == 1));
                }
            }
            Some("R") => {
                if let Some(h) = holds.get_mut(&key) {
                    h.released = Some(num(3));
                }
            }
            Some("V") => {
                if let Some(h) = holds.get_mut(&key) {
                    h.valid_end = h.valid_end.max(num(3));
                }
            }
            Some("A") => {
                if let Some(h) = holds.get_mut(&key) {
                    if num(3) > h.valid_end {
                        h.late_acts += 1;
                    }
                }
            }
            Some("L") => {
                if let Some(h) = holds.get_mut(&key) {
                    h.lost = Some((num(3), num(4)));
                }
            }
            Some("X") => errors += 1,
            _ => {}
        }
    }
    (holds.into_values().collect(), errors)
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub holds: usize,
    /// Holds used within their validity.
    pub used: usize,
    /// Such holds that began while `limit` others (1 for a lock) were still in use.
    pub violations: usize,
    /// The most such holds in use at once.
    pub max_concurrent: usize,
    /// Losses the clients signalled, and those signalled after the validity they ended.
    pub losses: usize,
    pub late_losses: usize,
    /// Acts of holders after their validity (a leader that missed its loss signal).
    pub late_acts: usize,
    /// Holds whose token is not above that of a hold granted before it was requested.
    pub backwards: usize,
    /// Holds whose token another hold was granted too (one leader per term, one token per
    /// grant).
    pub duplicates: usize,
    pub writes: usize,
    pub accepted: usize,
    /// Writes whose token was not above the highest accepted before (all must be rejected).
    pub stale: usize,
    pub stale_rejected: usize,
    /// Store decisions that replaying the log contradicts (must be 0).
    pub store_errors: usize,
    /// Writes made after the hold's validity (a paused holder resuming).
    pub late: usize,
    pub late_rejected: usize,
    /// Writes in the store's log that no worker line accounts for (a worker killed after the
    /// write was processed but before it reported it).
    pub unreported: usize,
}

/// Checks a run's holds (`limit` holders allowed at once: 1 for a lock) and the store's log.
pub fn check(holds: &[Hold], log: &[Attempt], limit: usize) -> Verdict {
    let mut v = Verdict {
        holds: holds.len(),
        ..Verdict::default()
    };

    // 1. Mutual exclusion among holds used within their validity: sweep the starts in order,
    // with the ends of the holds in use in a min-heap (an end at a start's instant is over).
    let mut used: Vec<&Hold> = holds.iter().filter(|h| h.used_in_validity()).collect();
    used.sort_by_key(|h| h.t1);
    v.used = used.len();
    let mut in_use = std::collections::BinaryHeap::new();
    for h in &used {
        while in_use
            .peek()
            .is_some_and(|std::cmp::Reverse(end)| *end <= h.t1)
        {
            in_use.pop();
        }
        if in_use.len() >= limit {
            v.violations += 1;
        }
        in_use.push(std::cmp::Reverse(h.end()));
        v.max_concurrent = v.max_concurrent.max(in_use.len());
    }
    v.losses = holds.iter().filter(|h| h.lost.is_some()).count();
    v.late_acts = holds.iter().map(|h| h.late_acts).sum();
    v.late_losses = holds
        .iter()
        .filter(|h| h.lost.is_some_and(|(t, end)| t > end))
        .count();

    // 2. Tokens increase in grant order, among the holds used: for B, every used hold whose
    // reply came before B's request. A hold never used (its validity was over, or a minority
    // master's grant that WAIT could not confirm) acts on nothing, and in a split two masters
    // can both issue the clock floor's token of one millisecond: such grants do not count.
    let mut by_reply: Vec<&Hold> = used.clone();
    by_reply.sort_by_key(|h| h.t1);
    let mut prefix_max = Vec::with_capacity(by_reply.len());
    let mut max = 0u64;
    for h in &by_reply {
        max = max.max(h.token);
        prefix_max.push(max);
    }
    for b in &used {
        let before = by_reply.partition_point(|a| a.t1 < b.t0);
        if before > 0 && prefix_max[before - 1] >= b.token {
            v.backwards += 1;
        }
    }
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for h in &used {
        *seen.entry(h.token).or_default() += 1;
    }
    v.duplicates = seen.values().filter(|n| **n > 1).map(|n| n - 1).sum();

    // 3. Fencing: replay the store's decisions.
    let mut top = 0u64;
    for a in log {
        v.writes += 1;
        let fresh = a.token > top;
        if fresh != a.accepted {
            v.store_errors += 1;
        }
        if fresh {
            top = a.token;
        } else {
            v.stale += 1;
            if !a.accepted {
                v.stale_rejected += 1;
            }
        }
        if a.accepted {
            v.accepted += 1;
        }
    }
    let by_id: HashMap<String, &Hold> = holds
        .iter()
        .map(|h| (format!("{}:{}", h.worker, h.seq), h))
        .collect();
    for a in log {
        match by_id.get(&a.hold) {
            Some(h) => {
                if let Some((tw, accepted)) = h.write {
                    if tw > h.valid_end {
                        v.late += 1;
                        if !accepted {
                            v.late_rejected += 1;
                        }
                    }
                } else {
                    v.unreported += 1;
                }
            }
            None => v.unreported += 1,
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, token: u64, t0: u64, t1: u64, end: u64, tw: Option<u64>) -> Hold {
        Hold {
            worker,
            seq: 1,
            token,
            t0,
            t1,
            valid_end: end,
            write: tw.map(|tw| (tw, true)),
            released: tw.map(|tw| tw + 1),
            ..Hold::default()
        }
    }

    #[test]
    fn table() {
        type Row = (&'static str, Vec<Hold>, usize, usize);
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            // name, holds, violations, backwards
            ("sequential", vec![hold(1, 10, 0, 1, 100, Some(5)), hold(2, 20, 2, 7, 100, Some(8))], 0, 0),
            ("overlap", vec![hold(1, 10, 0, 1, 100, Some(50)), hold(2, 20, 2, 7, 100, Some(8))], 1, 0),
            ("late write is not a violation", vec![hold(1, 10, 0, 1, 5, Some(50)), hold(2, 20, 2, 7, 100, Some(8))], 0, 0),
            ("backwards", vec![hold(1, 20, 0, 1, 100, Some(5)), hold(2, 10, 6, 7, 100, Some(8))], 0, 1),
            ("concurrent requests: no order", vec![hold(1, 20, 0, 10, 100, Some(11)), hold(2, 10, 5, 15, 100, Some(16))], 0, 0),
            ("killed holder keeps its validity", vec![Hold { worker: 1, token: 1, t1: 1, valid_end: 50, ..Hold::default() }, hold(2, 20, 2, 7, 100, Some(8))], 1, 0),
        ];
        for (name, holds, violations, backwards) in rows {
            let v = check(&holds, &[], 1);
            assert_eq!(
                (v.violations, v.backwards),
                (violations, backwards),
                "{name}"
            );
        }
    }

    #[test]
    fn a_semaphore_allows_limit_holders_at_once() {
        let three = vec![
            hold(1, 10, 0, 1, 100, Some(50)),
            hold(2, 20, 0, 2, 100, Some(50)),
            hold(3, 30, 0, 3, 100, Some(50)),
        ];
        let v = check(&three, &[], 3);
        assert_eq!((v.violations, v.max_concurrent), (0, 3));
        let v = check(&three, &[], 2);
        assert_eq!((v.violations, v.max_concurrent), (1, 3));
        // A hold that begins as another ends is not concurrent with it.
        let touching = vec![
            hold(1, 10, 0, 1, 100, Some(5)),
            hold(2, 20, 2, 6, 100, Some(8)),
        ];
        assert_eq!(check(&touching, &[], 1).violations, 0);
    }

    #[test]
    fn renewals_extend_a_hold_and_a_late_loss_is_counted() {
        let lines: Vec<String> = [
            "G\t1\t1\tw1\t100\t10\t20\t500",
            "V\t1\t1\t900",
            "W\t1\t1\t700\t1",
            "L\t1\t1\t950\t900",
            "A\t1\t1\t880",
            "A\t1\t1\t940",
            "R\t1\t1\t960",
            "G\t2\t1\tw2\t200\t800\t820\t1500",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (holds, _) = parse(&lines);
        assert_eq!(holds[0].valid_end, 900);
        assert_eq!(check(&holds, &[], 1).duplicates, 0);
        let twice = vec![
            holds[0].clone(),
            Hold {
                seq: 2,
                ..holds[0].clone()
            },
        ];
        assert_eq!(check(&twice, &[], 1).duplicates, 1);
        assert!(holds[0].used_in_validity(), "written at 700, valid to 900");
        let v = check(&holds, &[], 1);
        assert_eq!(
            (v.violations, v.late_losses, v.late_acts),
            (1, 1, 1),
            "{v:?}"
        );
    }

    #[test]
    fn replay_of_the_store() {
        let a = |token, accepted| Attempt {
            token,
            hold: "x:1".into(),
            accepted,
        };
        let v = check(&[], &[a(5, true), a(3, false), a(5, false), a(7, true)], 1);
        assert_eq!((v.stale, v.stale_rejected, v.store_errors), (2, 2, 0));
        let v = check(&[], &[a(5, true), a(3, true)], 1);
        assert_eq!(v.store_errors, 1);
    }

    #[test]
    fn parses_lines() {
        let lines: Vec<String> = [
            "G\t1\t1\tw1\t100\t10\t20\t500",
            "W\t1\t1\t30\t1",
            "R\t1\t1\t40",
            "G\t2\t1\tw2\t200\t35\t45\t600",
            "X\t2\tconnection refused",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (holds, errors) = parse(&lines);
        assert_eq!(errors, 1);
        assert_eq!(holds.len(), 2);
        assert_eq!(holds[0].write, Some((30, true)));
        assert_eq!(holds[0].end(), 40);
        assert!(holds[1].used_in_validity());
        assert_eq!(holds[1].end(), 600);
    }
}
