//! Unit tests of the engine's parts that keep their own state: [`Schedule`] (timers and jobs
//! behind one host timer) and [`Waiters`] (lines, tickets, answers in flight), each through its
//! own methods and invariants, on the in-memory host's timers.

use super::decide::Queued;
use super::host::{Host, KeyId};
use super::memory::MemHost;
use super::schedule::{Due, Job, Schedule, Work, MAX_TIMER_MS, RETRY_MS};
use super::shared::Mode;
use super::waiters::{Deadline, Waiter, Waiters};

// --- Schedule ------------------------------------------------------------------------------------
fn key(name: &str) -> KeyId {
    KeyId {
        db: 0,
        name: name.as_bytes().into(),
    }
}

/// Fires the host timer the way the host would, returning what came due.
fn turn(s: &mut Schedule<MemHost>, host: &mut MemHost) -> Vec<Work<u64>> {
    let generation = host.fire_next_timer().expect("a host timer is armed");
    assert!(s.fired(generation));
    let now = host.now_ms();
    let mut out = Vec::new();
    while let Some(work) = s.next(now) {
        out.push(work);
    }
    s.rearm(host);
    out
}

#[test]
fn one_host_timer_at_the_earliest_due_time() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    let late = s.start(&mut host, 500, Due::Deadline(key("a")));
    s.start(&mut host, 100, Due::Deadline(key("b")));
    s.start(
        &mut host,
        300,
        Due::WaitEnds {
            client: 1,
            waiter: 1,
        },
    );
    assert_eq!(
        host.timers(),
        1,
        "one host timer, however many engine timers"
    );
    assert_eq!(host.next_timer_due(), Some(100));
    s.stop(&mut host, late);
    assert_eq!(s.armed(), 2);
    host.set_now(300);
    let due = turn(&mut s, &mut host);
    assert_eq!(due.len(), 2, "both due by 300: {due:?}");
    assert!(matches!(&due[0], Work::Due(Due::Deadline(k)) if *k == key("b")));
    assert_eq!(host.timers(), 0, "nothing left: no host timer");
    assert_eq!(s.armed(), 0);
}

#[test]
fn jobs_come_first_once_per_key_and_fire_at_once() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    s.start(&mut host, 1000, Due::Deadline(key("a")));
    s.push(&mut host, Job::Serve(key("k")));
    s.push(&mut host, Job::Serve(key("k")));
    s.push(&mut host, Job::Prune(key("k")));
    s.push(&mut host, Job::Revoke(7));
    assert_eq!(host.next_timer_due(), Some(0), "jobs run in the next turn");
    let work = turn(&mut s, &mut host);
    let jobs: Vec<Job> = work
        .into_iter()
        .filter_map(|w| match w {
            Work::Job(j) => Some(j),
            Work::Due(_) => None,
        })
        .collect();
    assert_eq!(
        jobs,
        [Job::Serve(key("k")), Job::Revoke(7), Job::Prune(key("k"))],
        "hand-offs and revokes before housekeeping"
    );
    assert_eq!(host.next_timer_due(), Some(1000), "back to the timer");
    // Once run, a key's job can be queued again.
    s.push(&mut host, Job::Serve(key("k")));
    assert!(s.has_jobs());
}

#[test]
fn housekeeping_waits_for_hand_offs_and_due_timers_and_is_queued_once() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    for i in 0..1000 {
        s.push(&mut host, Job::Leases(key(&format!("k{i}"))));
        s.push(&mut host, Job::Leases(key(&format!("k{i}"))));
    }
    s.start(&mut host, 0, Due::Deadline(key("due")));
    s.push(&mut host, Job::Serve(key("hot")));
    let generation = host.fire_next_timer().unwrap();
    assert!(s.fired(generation));
    assert!(matches!(s.next(0), Some(Work::Job(Job::Serve(_)))));
    assert!(matches!(s.next(0), Some(Work::Due(Due::Deadline(_)))));
    let mut leases = 0;
    while let Some(Work::Job(Job::Leases(_))) = s.next(0) {
        leases += 1;
    }
    assert_eq!(leases, 1000, "one job per key");
    s.rearm(&mut host);
    assert!(!s.has_jobs());
    assert_eq!(host.timers(), 0);
}

#[test]
fn a_turn_can_stop_early_and_the_rest_comes_in_the_next_turn() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    for i in 0..10 {
        s.push(&mut host, Job::Serve(key(&format!("k{i}"))));
    }
    let generation = host.fire_next_timer().unwrap();
    assert!(s.fired(generation));
    for _ in 0..4 {
        assert!(s.next(0).is_some());
    }
    s.rearm(&mut host);
    assert_eq!(
        host.next_timer_due(),
        Some(0),
        "the rest at once, next turn"
    );
    assert_eq!(turn(&mut s, &mut host).len(), 6);
}

/// However large the flood, a turn that stops early leaves all the rest to the next turn.
#[test]
fn a_flood_stopped_early_keeps_every_job_for_the_next_turn() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    for i in 0..2000 {
        s.push(&mut host, Job::Serve(key(&format!("k{i}"))));
    }
    let generation = host.fire_next_timer().unwrap();
    assert!(s.fired(generation));
    for _ in 0..256 {
        assert!(s.next(0).is_some());
    }
    s.rearm(&mut host);
    assert_eq!(turn(&mut s, &mut host).len(), 2000 - 256);
    assert!(!s.has_jobs());
    assert_eq!(host.timers(), 0, "drained: no host timer");
}

#[test]
fn a_timer_tells_when_it_comes_due_while_it_is_armed() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    let stopped = s.start(&mut host, 500, Due::Deadline(key("a")));
    let fired = s.start(&mut host, 100, Due::Deadline(key("b")));
    assert_eq!((s.due_at(stopped), s.due_at(fired)), (Some(500), Some(100)));
    s.stop(&mut host, stopped);
    assert_eq!(s.due_at(stopped), None, "stopped");
    host.set_now(100);
    assert_eq!(turn(&mut s, &mut host).len(), 1);
    assert_eq!(s.due_at(fired), None, "came due");
}

#[test]
fn deferred_jobs_retry_later_and_keep_their_place() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    s.push(&mut host, Job::Serve(key("a")));
    s.push(&mut host, Job::Serve(key("b")));
    let generation = host.fire_next_timer().unwrap();
    assert!(s.fired(generation));
    while let Some(Work::Job(job)) = s.next(0) {
        s.defer(job);
    }
    s.push(&mut host, Job::Serve(key("a")));
    s.rearm(&mut host);
    assert_eq!(
        host.next_timer_due(),
        Some(RETRY_MS),
        "deferred work retries"
    );
    host.set_now(RETRY_MS);
    let order: Vec<Job> = turn(&mut s, &mut host)
        .into_iter()
        .filter_map(|w| match w {
            Work::Job(job) => Some(job),
            Work::Due(_) => None,
        })
        .collect();
    assert_eq!(order, [Job::Serve(key("a")), Job::Serve(key("b"))]);
}

#[test]
fn a_far_timer_is_reached_in_steps_of_at_most_thirty_minutes() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    s.start(&mut host, 3 * MAX_TIMER_MS, Due::Deadline(key("far")));
    assert_eq!(host.next_timer_due(), Some(MAX_TIMER_MS));
    host.set_now(MAX_TIMER_MS);
    assert!(turn(&mut s, &mut host).is_empty(), "early: nothing due");
    assert_eq!(host.next_timer_due(), Some(2 * MAX_TIMER_MS));
}

#[test]
fn a_stale_fire_is_ignored() {
    let mut host = MemHost::default();
    let mut s: Schedule<MemHost> = Schedule::default();
    s.start(&mut host, 100, Due::Deadline(key("a")));
    assert!(!s.fired(12345));
}

// --- Waiters -------------------------------------------------------------------------------------

fn waiter(client: u64, mode: Mode) -> Waiter<MemHost> {
    Waiter {
        client,
        owner: format!("o{client}").into_bytes().into(),
        mode,
        ttl_ms: 1000,
        caller: None,
        timeout: None,
        since_us: 0,
        connection: client,
        times_out_at: None,
    }
}

#[test]
fn counts_stay_in_step_through_joins_pops_leaves_and_removals() {
    let mut w: Waiters<MemHost> = Waiters::default();
    let k = key("k");
    w.join(&k, waiter(1, Mode::Exclusive));
    let shared = w.join(&k, waiter(2, Mode::shared(3)));
    w.join(&k, waiter(3, Mode::shared(3)));
    w.join(&key("other"), waiter(4, Mode::Exclusive));
    w.check();
    assert_eq!(w.len(), 4);
    assert_eq!(
        w.facts(k.as_ref()),
        Queued {
            any: true,
            shared_limit: Some(3)
        }
    );
    assert_eq!(w.pop_head(&k).map(|r| r.waiter.client), Some(1));
    w.check();
    assert!(w.remove(&k, shared).is_some());
    w.check();
    let (at, was_head, removed) = w.leave(3).expect("3 waits");
    assert!(was_head && at == k && removed.waiter.client == 3);
    w.check();
    assert_eq!(w.facts(k.as_ref()), Queued::default(), "k's line is gone");
    assert_eq!(w.len(), 1);
    let (all, _) = w.take_all(&key("other"));
    assert_eq!(all.len(), 1);
    w.check();
    assert!(w.is_empty());
}

#[test]
fn the_last_waiter_out_takes_the_deadline_with_it() {
    let mut w: Waiters<MemHost> = Waiters::default();
    let k = key("k");
    w.join(&k, waiter(1, Mode::Exclusive));
    w.join(&k, waiter(2, Mode::Exclusive));
    let deadline = Deadline {
        timer: 9,
        fires_at: 100,
    };
    assert_eq!(w.set_deadline(&k, deadline), Ok(None));
    assert_eq!(
        w.pop_head(&k).and_then(|r| r.deadline),
        None,
        "2 still waits"
    );
    assert_eq!(w.pop_head(&k).and_then(|r| r.deadline), Some(9));
    assert_eq!(
        w.set_deadline(&k, deadline),
        Err(deadline),
        "no line, no deadline"
    );
}

#[test]
fn a_hold_is_lost_only_when_every_answer_carrying_it_is() {
    let mut w: Waiters<MemHost> = Waiters::default();
    let k = key("k");
    w.answered(1, 77, &k, b"o", true);
    w.answered(2, 77, &k, b"o", false);
    w.check();
    assert_eq!(w.answer_lost(1), None, "2's answer still carries it");
    assert_eq!(w.take_lost(77), None);
    assert_eq!(w.answer_lost(2), Some(77));
    assert_eq!(w.take_lost(77), Some((k.clone(), b"o"[..].into())));
    // Delivered, or confirmed by the owner: never lost.
    w.answered(3, 78, &k, b"o", true);
    w.delivered(3);
    assert_eq!(w.take_lost(78), None);
    w.answered(4, 79, &k, b"o", true);
    w.confirm(79);
    assert_eq!(w.answer_lost(4), None);
    // A re-acquire of a hold nobody doubts needs no ticket.
    w.answered(5, 80, &k, b"o", false);
    assert_eq!(w.answer_lost(5), None);
    w.check();
}
