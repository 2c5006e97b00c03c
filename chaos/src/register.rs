//! The fenced register's linearizability check.
//!
//! Workers holding the lock write the register with
//! `LOCK.FENCED <lockkey> <token> SET chaos:reg <token>` (the value is the hold's fencing token,
//! so every write's value is unique) and read it with `GET chaos:reg` (a token, or nil before the
//! first write). Each operation is recorded with the wall-clock µs of its invocation and return,
//! as the client saw them. Writes the fence refused (`FENCED stale token`) had no effect and are
//! not given here; a write whose outcome is unknown (error, timeout, connection lost after
//! sending) may have taken effect at any time after its invocation, or never.
//!
//! # The model
//! The register's version order is the tokens' order: a write under a later hold supersedes one
//! under an earlier hold, and fencing is what makes that true. So the check is "linearizable, with
//! writes taking effect in token order". With the version order known and every written value
//! unique, linearizability reduces to polynomial conditions (the reasoning of Elle and of Adya's
//! dependency graphs). Give each op a version, `ver`: a write its token, a read the value it
//! returned (nil = 0, below every token). Then:
//! 1. no read from nowhere or from the future: a read of v > 0 needs a write of v (acked or of
//!    unknown outcome) invoked no later than the read returned;
//! 2. real-time order: if a returned before b was invoked, ver(a) <= ver(b), strictly < when b is
//!    a write. This catches a stale read after a completed write, non-monotonic reads, writes
//!    acknowledged out of token order, and a write after a read of a later value;
//! 3. a write of unknown outcome that no read returned is left out (it may never have taken
//!    effect); one that a read returned is kept with no return time, so it must follow the ops that
//!    returned before its invocation and precedes nobody.
//!
//! They are necessary: along a linearization with writes in token order versions never decrease,
//! and a write's token is above every version before it. They are sufficient: order the kept ops
//! by version, each write followed by the reads of its value in invocation order (nil reads
//! first). Each read then follows the write of its value with no write between, so the sequence
//! is a legal register history; and it extends real-time order: if a returned before b was
//! invoked, condition 2 puts a's version at or below b's, and at the same version b is not a write
//! (strictness), so b is a read invoked after a, which is either the version's write or a read
//! invoked before b. (Condition 1 is condition 2 between a read and the write of its value, plus
//! that write's existence.)
//!
//! # What it cannot see
//! - The version order is given, not searched for: a history linearizable only with writes in
//!   some other order fails, on purpose, since token order is the specification.
//! - Unique values are a premise. A write reusing another's token is itself reported; reads of a
//!   reused token are checked against its earliest write. A write of token 0 (nil's version) is
//!   reported too.
//! - Refused writes are not given, so one that in fact took effect shows only if it was read: as a
//!   read from nowhere.
//! - Real-time order comes from the workers' wall clocks (one host's): equal times count as
//!   concurrent, and a clock step between two records can invent or hide an order.
//!
//! `violations` counts ops, each once however many others it conflicts with; an example names one
//! op it conflicts with (for real-time order, the highest version among the ops that returned
//! before it was invoked). A read from nowhere or from the future is reported and then left out of
//! the order checks, so one bad value does not flag every op after it; an op acknowledged with a
//! version too high for its place does flag every later op below it.

// Wired in by the scenarios (the register workload is being added alongside this checker).
#![allow(dead_code)]

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// One operation on the register, as a client saw it (times in wall-clock µs, invoked <= returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A write of `token`; `returned_us` None = outcome unknown (may have taken effect at any time after invocation).
    Write {
        token: u64,
        invoked_us: u64,
        returned_us: Option<u64>,
    },
    /// A read that returned `value` (0 = nil, never written).
    Read {
        value: u64,
        invoked_us: u64,
        returned_us: u64,
    },
}

impl Op {
    fn invoked(&self) -> u64 {
        match *self {
            Op::Write { invoked_us, .. } | Op::Read { invoked_us, .. } => invoked_us,
        }
    }

    fn returned(&self) -> Option<u64> {
        match *self {
            Op::Write { returned_us, .. } => returned_us,
            Op::Read { returned_us, .. } => Some(returned_us),
        }
    }

    /// Its place in the version order: the token written, or the value read.
    fn ver(&self) -> u64 {
        match *self {
            Op::Write { token, .. } => token,
            Op::Read { value, .. } => value,
        }
    }

    fn is_write(&self) -> bool {
        matches!(self, Op::Write { .. })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Write {
                token,
                invoked_us,
                returned_us: Some(r),
            } => write!(f, "write {token} [{invoked_us}, {r}] µs"),
            Op::Write {
                token,
                invoked_us,
                returned_us: None,
            } => write!(f, "write {token} [{invoked_us}, ?] µs (outcome unknown)"),
            Op::Read {
                value: 0,
                invoked_us,
                returned_us,
            } => write!(f, "read nil [{invoked_us}, {returned_us}] µs"),
            Op::Read {
                value,
                invoked_us,
                returned_us,
            } => write!(f, "read {value} [{invoked_us}, {returned_us}] µs"),
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterVerdict {
    /// Writes given, of unknown outcome included.
    pub writes: usize,
    pub reads: usize,
    /// Ops that break a condition, each counted once.
    pub violations: usize,
    /// At most 5, earliest invoked first, each naming the ops and their times.
    pub examples: Vec<String>,
}

/// Why an op is a violation; the index is the op it conflicts with.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A write of token 0, which cannot be told from nil.
    ReservedToken,
    /// A write whose token an earlier-invoked write already used.
    Duplicate(usize),
    /// A read of a value no write wrote.
    NoWrite,
    /// A read that returned before the write of its value was invoked.
    BeforeWrite(usize),
    /// The highest-versioned op that returned before this one was invoked: too high for it.
    Behind(usize),
}

/// Checks that `ops` are linearizable with writes taking effect in token order.
pub fn check(ops: &[Op]) -> RegisterVerdict {
    let mut faults: Vec<Option<Fault>> = vec![None; ops.len()];

    // Unique values: the earliest-invoked write of each token stands for it.
    let mut writes: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].is_write()).collect();
    writes.sort_by_key(|&i| (ops[i].invoked(), i));
    let mut writer: HashMap<u64, usize> = HashMap::new();
    for &i in &writes {
        let token = ops[i].ver();
        if token == 0 {
            faults[i] = Some(Fault::ReservedToken);
            continue;
        }
        match writer.entry(token) {
            Entry::Occupied(first) => faults[i] = Some(Fault::Duplicate(*first.get())),
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
    }

    // 1. Every value read was written, and not after the read returned.
    let mut read_values: HashSet<u64> = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        let Op::Read {
            value, returned_us, ..
        } = *op
        else {
            continue;
        };
        if value == 0 {
            continue;
        }
        match writer.get(&value) {
            None => faults[i] = Some(Fault::NoWrite),
            Some(&w) if returned_us < ops[w].invoked() => faults[i] = Some(Fault::BeforeWrite(w)),
            Some(_) => {
                read_values.insert(value);
            }
        }
    }

    // 3. Which ops take part in the order: reads with a possible value, acked writes, and writes
    // of unknown outcome that some read saw.
    let ordered: Vec<usize> = (0..ops.len())
        .filter(|&i| match ops[i] {
            Op::Read { .. } => faults[i].is_none(),
            Op::Write {
                returned_us: Some(_),
                ..
            } => true,
            Op::Write { token, .. } => read_values.contains(&token),
        })
        .collect();

    // 2. Real-time order: compare each op with the highest version among the ops that returned
    // before it was invoked (sorted by return, a prefix; its maximum kept with who holds it).
    let mut by_return: Vec<(u64, usize)> = ordered
        .iter()
        .filter_map(|&i| ops[i].returned().map(|r| (r, i)))
        .collect();
    by_return.sort_unstable();
    let mut highest: Vec<usize> = Vec::with_capacity(by_return.len());
    for &(_, i) in &by_return {
        match highest.last() {
            Some(&h) if ops[h].ver() >= ops[i].ver() => highest.push(h),
            _ => highest.push(i),
        }
    }
    for &b in &ordered {
        let before = by_return.partition_point(|&(r, _)| r < ops[b].invoked());
        let Some(&a) = before.checked_sub(1).and_then(|k| highest.get(k)) else {
            continue;
        };
        let (va, vb) = (ops[a].ver(), ops[b].ver());
        let behind = va > vb || (ops[b].is_write() && va == vb);
        if behind && a != b && faults[b].is_none() {
            faults[b] = Some(Fault::Behind(a));
        }
    }

    let mut flagged: Vec<usize> = (0..ops.len()).filter(|&i| faults[i].is_some()).collect();
    flagged.sort_by_key(|&i| (ops[i].invoked(), i));
    RegisterVerdict {
        writes: writes.len(),
        reads: ops.len() - writes.len(),
        violations: flagged.len(),
        examples: flagged
            .iter()
            .take(5)
            .filter_map(|&i| faults[i].map(|fault| describe(ops, i, fault)))
            .collect(),
    }
}

/// One violation in words.
fn describe(ops: &[Op], b: usize, fault: Fault) -> String {
    let op = &ops[b];
    match fault {
        Fault::ReservedToken => format!("{op}: token 0 cannot be told from nil"),
        Fault::Duplicate(a) => format!("{op} reuses the token of {}", ops[a]),
        Fault::NoWrite => format!("{op}: no write of {}", op.ver()),
        Fault::BeforeWrite(a) => format!("{op} returned before {} was invoked", ops[a]),
        Fault::Behind(a) if op.is_write() => format!(
            "{op} was invoked after {} returned, so its token must be above {}",
            ops[a],
            ops[a].ver()
        ),
        Fault::Behind(a) => format!(
            "{op} was invoked after {} returned, so it must read {} or later",
            ops[a],
            ops[a].ver()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn w(token: u64, invoked_us: u64, returned_us: u64) -> Op {
        Op::Write {
            token,
            invoked_us,
            returned_us: Some(returned_us),
        }
    }

    /// A write of unknown outcome.
    fn wu(token: u64, invoked_us: u64) -> Op {
        Op::Write {
            token,
            invoked_us,
            returned_us: None,
        }
    }

    fn r(value: u64, invoked_us: u64, returned_us: u64) -> Op {
        Op::Read {
            value,
            invoked_us,
            returned_us,
        }
    }

    #[test]
    fn table() {
        type Row = (&'static str, Vec<Op>, usize);
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            // name, ops, violations
            ("sequential", vec![w(1, 0, 10), r(1, 20, 30), w(2, 40, 50), r(2, 60, 70)], 0),
            ("concurrent read sees the old value", vec![w(1, 0, 10), w(2, 20, 40), r(1, 25, 35)], 0),
            ("concurrent read sees the new value", vec![w(1, 0, 10), w(2, 20, 40), r(2, 25, 35)], 0),
            ("touching intervals are concurrent", vec![w(1, 0, 10), w(2, 10, 20), r(1, 20, 30)], 0),
            ("stale read after a completed write", vec![w(1, 0, 10), w(2, 20, 30), r(1, 40, 50)], 1),
            ("read from the future", vec![w(1, 0, 10), r(2, 20, 30), w(2, 40, 50)], 1),
            ("read of a value never written", vec![w(1, 0, 10), r(7, 20, 30)], 1),
            ("non-monotonic reads", vec![w(1, 0, 10), w(2, 20, 100), r(2, 30, 40), r(1, 50, 60)], 1),
            ("acked writes out of token order", vec![w(2, 0, 10), w(1, 20, 30)], 1),
            ("concurrent writes in either order", vec![w(2, 0, 30), w(1, 10, 20), r(2, 40, 50)], 0),
            ("write after a read of a later value", vec![w(2, 0, 100), r(2, 10, 20), w(1, 30, 40)], 1),
            ("unknown write read later", vec![w(1, 0, 10), wu(2, 20), r(2, 100, 110), r(2, 120, 130)], 0),
            ("unknown write never read is ignored", vec![w(1, 0, 10), w(5, 20, 30), wu(3, 40), r(5, 50, 60)], 0),
            ("unknown write read, yet out of order", vec![w(5, 0, 10), wu(3, 20), r(3, 30, 40)], 2),
            ("read of an unknown write before its invocation", vec![w(1, 0, 10), r(2, 20, 30), wu(2, 40)], 1),
            ("duplicate token", vec![w(1, 0, 10), w(1, 20, 30)], 1),
            ("duplicate token, concurrent", vec![w(1, 0, 10), w(1, 5, 15), r(1, 20, 30)], 1),
            ("token 0 is nil's", vec![w(0, 0, 10)], 1),
            ("nil reads before any write", vec![r(0, 0, 10), r(0, 5, 15), w(1, 20, 30), r(1, 40, 50)], 0),
            ("nil read concurrent with the first write", vec![w(1, 0, 30), r(0, 10, 20)], 0),
            ("nil read after a completed write", vec![w(1, 0, 10), r(0, 20, 30)], 1),
            ("nil read after a read of a value", vec![w(1, 0, 100), r(1, 10, 20), r(0, 30, 40)], 1),
            ("empty", vec![], 0),
        ];
        for (name, ops, violations) in rows {
            let v = check(&ops);
            assert_eq!(v.violations, violations, "{name}: {:?}", v.examples);
            assert_eq!(v.examples.len(), violations.min(5), "{name}");
            assert_eq!(v.writes + v.reads, ops.len(), "{name}");
        }
    }

    #[test]
    fn examples_name_both_ops_and_their_times() {
        let v = check(&[w(1, 0, 10), w(2, 20, 30), r(1, 40, 50)]);
        assert_eq!((v.writes, v.reads, v.violations), (2, 1, 1));
        assert_eq!(
            v.examples,
            ["read 1 [40, 50] µs was invoked after write 2 [20, 30] µs returned, so it must read 2 or later"]
        );
        let v = check(&[r(2, 0, 10), wu(2, 20)]);
        assert_eq!(
            v.examples,
            ["read 2 [0, 10] µs returned before write 2 [20, ?] µs (outcome unknown) was invoked"]
        );
    }

    #[test]
    fn each_op_counts_once_and_examples_stop_at_five() {
        // One early write of a high token: every later op falls behind it, once each.
        let mut ops = vec![w(100, 0, 10)];
        for t in 1..=20 {
            ops.push(w(t, 100 * t, 100 * t + 10));
            ops.push(r(t, 100 * t + 20, 100 * t + 30));
        }
        let v = check(&ops);
        assert_eq!(v.violations, 40);
        assert_eq!(v.examples.len(), 5);
        assert!(
            v.examples[0].starts_with("write 1 [100, 110] µs"),
            "{:?}",
            v.examples
        );
    }

    /// A valid history of `n` ops: a sequential register, each op's interval drawn around its
    /// linearization point; some writes lose their reply, and some unknown writes never happened.
    fn random_history(n: usize, seed: u64) -> Vec<Op> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (mut ops, mut current, mut next_token) = (Vec::with_capacity(n), 0, 1);
        for k in 0..n as u64 {
            let point = 1_000 + 10 * k;
            let invoked_us = point - rng.u64(0..=500);
            let returned_us = point + rng.u64(0..=500);
            if !rng.bool() {
                ops.push(r(current, invoked_us, returned_us));
            } else if rng.u8(0..20) == 0 {
                // Timed out and never applied (a fresh token, so nobody reads it).
                ops.push(wu(1_000_000_000 + k, invoked_us));
            } else {
                current = next_token;
                next_token += 1 + rng.u64(0..3);
                ops.push(match rng.u8(0..20) {
                    0 => wu(current, invoked_us),
                    _ => w(current, invoked_us, returned_us),
                });
            }
        }
        rng.shuffle(&mut ops);
        ops
    }

    #[test]
    fn big_random_history() {
        for seed in 1..=3 {
            let mut ops = random_history(20_000, seed);
            let started = Instant::now();
            let v = check(&ops);
            let took = started.elapsed();
            assert_eq!(v.violations, 0, "seed {seed}: {:?}", v.examples);
            assert_eq!(v.writes + v.reads, 20_000);
            assert!(took.as_secs() < 10, "seed {seed}: took {took:?}");

            // The last read now returns a token written ~150 writes before its value: stale.
            let mut tokens: Vec<u64> = ops
                .iter()
                .filter_map(|op| match *op {
                    Op::Write { token, .. } if token < 1_000_000_000 => Some(token),
                    _ => None,
                })
                .collect();
            tokens.sort_unstable();
            let i = (0..ops.len())
                .filter(|&i| !ops[i].is_write())
                .max_by_key(|&i| ops[i].invoked())
                .unwrap();
            let Op::Read {
                value,
                invoked_us,
                returned_us,
            } = ops[i]
            else {
                unreachable!()
            };
            let older = tokens[tokens.binary_search(&value).unwrap() - 150];
            ops[i] = r(older, invoked_us, returned_us);
            let v = check(&ops);
            assert_eq!(v.violations, 1, "seed {seed}: {:?}", v.examples);
        }
    }
}
