//! The engine's behaviour, scenario by scenario, on the in-memory host: hand-off, waiting,
//! timers, hang-ups, permissions, the server's states, and what is replicated.

use super::engine::{Info, Reply, MAX_TIMER_MS, RETRY_MS};
use super::errors::{LockError, Refusal, NOPERM, NO_TOKENS, READONLY, WRONGTYPE};
use super::host::{Event, Host, KeyRef, Outcome, State};
use super::journal::Reason;
use super::memory::{error_text, Sim};
use super::watch::EndedHold;
use super::{MAX_COUNT, MAX_TOKEN};

const START: i64 = 1_800_000_000_000;
const K: &[u8] = b"k";

fn token(reply: Reply) -> u64 {
    match reply {
        Reply::Integer(t) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

/// The answers delivered so far, as (client, token) for grants.
fn granted(sim: &mut Sim) -> Vec<(u64, u64)> {
    sim.deliver();
    sim.answers
        .iter()
        .filter_map(|(c, o)| match o {
            Outcome::Token(t) => Some((*c, *t)),
            _ => None,
        })
        .collect()
}

/// Nobody waits and no timer is armed, in the engine or in the host.
fn assert_idle(sim: &mut Sim) {
    sim.settle();
    assert_eq!(sim.engine.waiters(), 0, "waiters left");
    assert_eq!(sim.engine.armed_timers(), 0, "engine timers left");
    assert_eq!(sim.host_timers(), 0, "host timers left");
}

#[test]
fn acquire_refuse_reacquire() {
    let mut sim = Sim::new(START);
    let t = token(sim.acquire(K, b"a", 1000));
    assert!(t >= START as u64 * 1000, "token floored by the clock: {t}");
    assert_eq!(sim.acquire(K, b"b", 1000), Reply::Nil);
    sim.advance(500);
    assert_eq!(
        sim.acquire(K, b"a", 1000),
        Reply::Integer(t),
        "idempotent for the holder"
    );
    assert_eq!(
        sim.lock(K).map(|l| l.3),
        Some(Some(START + 500 + 1000)),
        "lease reset"
    );
    let stats = sim.engine.stats();
    assert_eq!((stats.acquired, stats.contended), (1, 1));
}

#[test]
fn release_hands_off_to_waiters_first_come_first_served() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (r1, c1) = sim.wait(K, b"w1", 5000, 0);
    let (r2, c2) = sim.wait(K, b"w2", 5000, 0);
    let (r3, c3) = sim.wait(K, b"w3", 5000, 0);
    assert_eq!(
        (r1, r2, r3),
        (Reply::Blocked, Reply::Blocked, Reply::Blocked)
    );
    sim.take_effects();
    assert_eq!(sim.release(K, b"a"), Reply::Integer(0));
    let g = granted(&mut sim);
    assert_eq!(g.iter().map(|g| g.0).collect::<Vec<_>>(), [c1]);
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"w1".to_vec()));
    // The release and the grant are one change, replicated as its effects.
    let effects = sim.take_effects();
    assert_eq!(effects.len(), 2, "{effects:?}");
    let text = |words: &Vec<Vec<u8>>| {
        words
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(text(&effects[0]), ["DEL", "k"]);
    let apply = text(&effects[1]);
    assert_eq!(
        (&apply[..3], apply[4].as_str(), apply[5].as_str()),
        (
            &["LOCK.APPLY".to_string(), "k".into(), "w1".into()][..],
            "1",
            "PXAT"
        )
    );
    assert_eq!(sim.release(K, b"w1"), Reply::Integer(0));
    assert_eq!(sim.force_release(K), Reply::Integer(1));
    let g = granted(&mut sim);
    assert_eq!(g.iter().map(|g| g.0).collect::<Vec<_>>(), [c1, c2, c3]);
    assert!(g.windows(2).all(|w| w[0].1 < w[1].1), "tokens rise: {g:?}");
    let stats = sim.engine.stats();
    assert_eq!((stats.granted, stats.contended, stats.acquired), (3, 3, 1));
    sim.release(K, b"w3");
    assert_idle(&mut sim);
}

#[test]
fn reentrant_levels_release_one_at_a_time() {
    let mut sim = Sim::new(START);
    assert_eq!(sim.reenter(K, b"a", 1000), Reply::Integer(1));
    assert_eq!(sim.reenter(K, b"a", 1000), Reply::Integer(2));
    let (_, c) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(sim.release(K, b"a"), Reply::Integer(1));
    assert!(granted(&mut sim).is_empty(), "still held at level 1");
    assert_eq!(sim.release(K, b"a"), Reply::Integer(0));
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c]
    );
}

/// `FROM c`: a repeat of an applied step answers as the step did and changes nothing (no
/// effect, no event, the lease untouched, no hand-off); a mismatch is an error that changes
/// nothing; a re-entry into a hold that is gone is nil, never a fresh hold.
#[test]
fn repeated_steps_change_nothing() {
    use super::Mode;
    let mut sim = Sim::new(START);
    let x = Mode::Exclusive;
    assert_eq!(
        sim.reenter_from(K, b"a", 1000, x, Some(0)),
        Reply::Integer(1)
    );
    let first = sim.lock(K).expect("held");
    sim.take_effects();
    sim.take_events();
    sim.advance(10);
    let quiet = |sim: &mut Sim, what: &str| {
        assert!(sim.take_effects().is_empty(), "{what}: no effect");
        assert!(sim.take_events().is_empty(), "{what}: no event");
    };
    assert_eq!(
        sim.reenter_from(K, b"a", 5000, x, Some(0)),
        Reply::Integer(1)
    );
    assert_eq!(sim.lock(K), Some(first.clone()), "the lease untouched");
    quiet(&mut sim, "REENTER FROM 0 again");
    assert_eq!(
        sim.reenter_from(K, b"a", 1000, x, Some(1)),
        Reply::Integer(2)
    );
    let second = sim.lock(K).expect("held");
    assert_eq!(second.2, 2);
    sim.take_effects();
    sim.take_events();
    assert_eq!(
        sim.reenter_from(K, b"a", 1000, x, Some(1)),
        Reply::Integer(2)
    );
    assert_eq!(sim.lock(K), Some(second.clone()));
    quiet(&mut sim, "REENTER FROM 1 again");
    assert_eq!(
        sim.reenter_from(K, b"a", 1000, x, Some(3)),
        Reply::Error(Refusal::OtherCount { held: 2, from: 3 }.into())
    );
    assert_eq!(
        LockError::from(Refusal::OtherCount { held: 2, from: 3 }).text(),
        "ERR hold count is 2, not 3"
    );
    quiet(&mut sim, "a mismatch");
    let (_, waiter) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(sim.release_from(K, b"a", Some(2)), Reply::Integer(1));
    sim.take_effects();
    sim.take_events();
    assert_eq!(sim.release_from(K, b"a", Some(2)), Reply::Integer(1));
    assert_eq!(sim.lock(K).map(|l| l.2), Some(1));
    quiet(&mut sim, "RELEASE FROM 2 again");
    assert_eq!(
        sim.release_from(K, b"a", Some(3)),
        Reply::Error(Refusal::OtherCount { held: 1, from: 3 }.into())
    );
    assert!(granted(&mut sim).is_empty(), "nothing handed on yet");
    assert_eq!(sim.release_from(K, b"a", Some(1)), Reply::Integer(0));
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [waiter]
    );
    sim.take_effects();
    assert_eq!(
        sim.release_from(K, b"a", Some(1)),
        Reply::Nil,
        "the hold is gone"
    );
    assert!(sim.take_effects().is_empty());
    // The outer hold is gone: an inner re-entry is not a fresh hold, even on a free key.
    assert_eq!(
        sim.reenter_from(b"free", b"a", 1000, x, Some(1)),
        Reply::Nil
    );
    assert_eq!(sim.lock(b"free"), None);
    assert!(sim.take_effects().is_empty());
}

#[test]
fn reentrancy_limit_is_an_error_that_changes_nothing() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    // Raise the count to the limit through the replication effect.
    let t = sim.lock(K).expect("held").1;
    sim.take_effects();
    let hold = super::Hold::new(b"a", t, MAX_COUNT, 0);
    let mut key = sim_key(&mut sim);
    sim.engine
        .apply(&mut sim.host, &mut key, hold, Some(START + 1000));
    assert_eq!(
        sim.reenter(K, b"a", 1000),
        Reply::Error(Refusal::ReentrancyLimit.into())
    );
    assert_eq!(sim.lock(K).map(|l| l.2), Some(MAX_COUNT));
    assert_eq!(
        sim.engine.stats().contended,
        0,
        "a refusal for the count is no contention"
    );
}

fn sim_key(sim: &mut Sim) -> super::memory::MemKey {
    use super::host::Host;
    sim.host
        .open(&super::KeyRef { db: 0, name: K }.to_id())
        .expect("open")
}

#[test]
fn a_waiter_gets_the_lock_the_millisecond_after_it_expires() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 100);
    let (_, c) = sim.wait(K, b"w", 1000, 0);
    sim.advance(100);
    assert!(
        granted(&mut sim).is_empty(),
        "alive through its last millisecond"
    );
    sim.advance(1);
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c]
    );
    assert_eq!(sim.lock(K).map(|l| l.3), Some(Some(START + 101 + 1000)));
    assert_eq!(sim.engine.stats().expired, 1);
}

#[test]
fn renewal_moves_the_hand_off_later() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 100);
    let (_, c) = sim.wait(K, b"w", 1000, 0);
    sim.advance(50);
    sim.renew(K, b"a", 300);
    sim.renew(K, b"a", 300);
    assert_eq!(sim.engine.stats().renewed, 2);
    sim.advance(200);
    assert!(granted(&mut sim).is_empty(), "renewed to START+350");
    sim.advance(101);
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c]
    );
}

#[test]
fn nobody_barges_past_the_queue_between_a_delete_and_the_wake_up() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 1000, 0);
    sim.delete(K);
    assert_eq!(sim.acquire(K, b"newcomer", 1000), Reply::Nil);
    assert_eq!(sim.reenter(K, b"newcomer", 1000), Reply::Nil);
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c]
    );
    assert_eq!(sim.acquire(K, b"newcomer", 1000), Reply::Nil);
}

#[test]
fn a_wait_times_out_with_nil_and_leaves_no_timer() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 1000, 300);
    sim.advance(299);
    assert!(sim.deliver().is_empty());
    sim.advance(1);
    assert_eq!(sim.deliver(), [(c, Outcome::TimedOut)]);
    assert_eq!(sim.engine.stats().wait_timeouts, 1);
    sim.release(K, b"a");
    assert_idle(&mut sim);
}

#[test]
fn a_long_wait_is_a_chain_of_short_timers_and_still_ends() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1_000_000_000);
    let hours: i64 = 3 * 3600 * 1000;
    // MemHost refuses any timer longer than MAX_TIMER_MS.
    let (_, c) = sim.wait(K, b"w", 1000, hours as u64);
    for _ in 0..(hours / MAX_TIMER_MS - 1) {
        sim.advance(MAX_TIMER_MS);
        assert!(sim.deliver().is_empty());
    }
    sim.advance(MAX_TIMER_MS - 1);
    assert!(sim.deliver().is_empty(), "ends at exactly 3 hours");
    sim.advance(1);
    assert_eq!(sim.deliver(), [(c, Outcome::TimedOut)]);
}

#[test]
fn a_far_future_expiry_arms_capped_timers_and_hands_off_nothing_early() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    sim.set_expiry(K, Some(i64::MAX - 10));
    let (_, _c) = sim.wait(K, b"w", 1000, 0);
    for _ in 0..5 {
        sim.advance(MAX_TIMER_MS);
        assert!(sim.deliver().is_empty());
        assert_eq!(sim.engine.armed_timers(), 1, "one deadline timer, re-armed");
    }
}

#[test]
fn a_waiter_that_hangs_up_leaves_the_queue_and_stops_its_timer_at_once() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 1000, 60_000);
    let (_, c2) = sim.wait(K, b"w2", 1000, 60_000);
    // The engine's timers (all behind one host timer).
    assert_eq!(
        sim.engine.armed_timers(),
        3,
        "two wait timers and the deadline"
    );
    sim.hang_up(c1);
    // The head leaving schedules a grant pass (a 0 ms job); the wait timer is gone at once.
    sim.settle();
    assert_eq!(
        sim.engine.armed_timers(),
        2,
        "its wait timer is stopped, not left to fire"
    );
    assert_eq!(sim.engine.waiters(), 1);
    sim.release(K, b"a");
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c2]
    );
    assert_eq!(
        sim.host_timers(),
        0,
        "the grant stops the wait timer and the deadline"
    );
}

#[test]
fn a_grant_lost_with_its_client_is_revoked_and_passes_on() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 60_000, 0);
    let (_, c2) = sim.wait(K, b"w2", 60_000, 0);
    sim.release(K, b"a");
    // Granted, but the client hangs up before its answer reaches it.
    sim.hang_up(c1);
    assert_eq!(
        sim.lock(K).map(|l| l.0),
        Some(b"w1".to_vec()),
        "until the revoke job runs"
    );
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c2]
    );
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"w2".to_vec()));
    assert_eq!(sim.engine.stats().released, 2);
}

#[test]
fn a_grant_delivered_is_not_revoked_by_a_later_hang_up() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 60_000, 0);
    sim.release(K, b"a");
    sim.deliver();
    sim.hang_up(c);
    sim.settle();
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"w".to_vec()));
}

#[test]
fn a_revoke_never_ends_a_later_hold() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 60_000, 0);
    sim.release(K, b"a");
    sim.hang_up(c);
    // Before the revoke runs, the hold ends and someone else takes the key.
    sim.force_release(K);
    let t = token(sim.acquire(K, b"b", 1000));
    sim.settle();
    assert_eq!(sim.lock(K).map(|l| (l.0, l.1)), Some((b"b".to_vec(), t)));
}

#[test]
fn a_waiter_that_lost_its_permission_gets_noperm_and_the_next_one_the_lock() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 1000, 0);
    let (_, c2) = sim.wait(K, b"w2", 1000, 0);
    sim.host.denied.insert(c1);
    sim.release(K, b"a");
    let answers = sim.deliver();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].0, c1);
    assert_eq!(error_text(&answers[0].1).as_deref(), Some(NOPERM));
    assert!(matches!(answers[1], (c, Outcome::Token(_)) if c == c2));
}

#[test]
fn a_key_turned_another_type_fails_its_waiters_with_wrongtype() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 1000, 5000);
    sim.overwrite(K);
    sim.settle();
    let answers = sim.deliver();
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (answers[0].0, error_text(&answers[0].1).as_deref()),
        (c, Some(WRONGTYPE))
    );
    assert_eq!(
        sim.acquire(K, b"a", 1000),
        Reply::Error(LockError::WrongType)
    );
    assert_idle(&mut sim);
}

#[test]
fn waiters_of_a_slot_that_moved_away_are_redirected() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c) = sim.wait(K, b"w", 1000, 0);
    sim.host.redirect = Some("ASK 866 127.0.0.1:7001".into());
    sim.delete(K);
    sim.settle();
    let answers = sim.deliver();
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (answers[0].0, error_text(&answers[0].1).as_deref()),
        (c, Some("ASK 866 127.0.0.1:7001"))
    );
    assert_eq!(
        sim.lock(K),
        None,
        "not granted on a node that does not serve the key"
    );
}

#[test]
fn becoming_a_replica_fails_every_waiter_with_readonly() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    sim.acquire(b"other", b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w", 1000, 5000);
    let (_, c2) = sim.wait(b"other", b"w", 1000, 0);
    sim.set_state(State::Replica);
    let mut answers = sim.deliver();
    answers.sort_by_key(|a| a.0);
    assert_eq!(answers.len(), 2);
    assert_eq!(
        (answers[0].0, error_text(&answers[0].1).as_deref()),
        (c1, Some(READONLY))
    );
    assert_eq!(
        (answers[1].0, error_text(&answers[1].1).as_deref()),
        (c2, Some(READONLY))
    );
    assert_idle(&mut sim);
}

#[test]
fn hand_offs_wait_while_writes_are_paused_or_the_server_loads() {
    for state in [State::Paused, State::Loading] {
        let mut sim = Sim::new(START);
        sim.acquire(K, b"a", 100);
        let (_, c) = sim.wait(K, b"w", 1000, 0);
        sim.set_state(state);
        sim.advance(1000);
        assert!(sim.deliver().is_empty(), "{state:?}: nothing is written");
        assert!(
            sim.engine.armed_timers() == 0 && sim.host_timers() == 1,
            "one retry timer"
        );
        sim.set_state(State::Master);
        sim.advance(RETRY_MS);
        assert_eq!(
            granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
            [c],
            "{state:?}: served once writes resume"
        );
    }
}

#[test]
fn an_exhausted_token_space_refuses_grants_and_changes_nothing() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 1000, 0);
    let (_, c2) = sim.wait(K, b"w2", 1000, 0);
    sim.engine.observe_token(MAX_TOKEN);
    assert_eq!(
        sim.acquire(b"free", b"x", 1000),
        Reply::Error(Refusal::NoTokens.into())
    );
    assert_eq!(sim.lock(b"free"), None);
    sim.release(K, b"a");
    let answers = sim.deliver();
    assert_eq!(answers.len(), 2);
    assert_eq!(
        (answers[0].0, error_text(&answers[0].1).as_deref()),
        (c1, Some(NO_TOKENS))
    );
    assert_eq!(
        (answers[1].0, error_text(&answers[1].1).as_deref()),
        (c2, Some(NO_TOKENS))
    );
    assert_eq!(sim.lock(K), None);
    assert_idle(&mut sim);
}

#[test]
fn a_wait_that_may_not_block_answers_at_once() {
    let mut sim = Sim::new(START);
    let t = token(sim.wait_unblockable(K, b"a", 1000));
    assert_eq!(sim.wait_unblockable(K, b"b", 1000), Reply::Nil);
    assert_eq!(sim.wait_unblockable(K, b"a", 1000), Reply::Integer(t));
    assert_eq!(sim.engine.waiters(), 0);
    assert_eq!(
        sim.engine.stats().contended,
        1,
        "its nil, as LOCK.ACQUIRE's, counts as contended"
    );
}

#[test]
fn a_free_key_with_nobody_waiting_is_granted_to_a_wait_at_once() {
    let mut sim = Sim::new(START);
    let (reply, _) = sim.wait(K, b"a", 1000, 0);
    assert!(matches!(reply, Reply::Integer(_)));
    assert_idle(&mut sim);
}

#[test]
fn flushdb_serves_every_waiter() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    sim.acquire(b"k2", b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w", 1000, 0);
    let (_, c2) = sim.wait(b"k2", b"w", 1000, 0);
    sim.flush();
    sim.settle();
    let mut g: Vec<u64> = granted(&mut sim).iter().map(|g| g.0).collect();
    g.sort_unstable();
    assert_eq!(g, [c1, c2]);
}

#[test]
fn info_reports_the_hold_its_ttl_and_its_waiters() {
    let mut sim = Sim::new(START);
    assert_eq!(sim.info(K), Reply::Nil);
    let t = token(sim.acquire(K, b"a", 1000));
    sim.wait(K, b"w", 1000, 0);
    sim.advance(250);
    assert_eq!(
        sim.info(K),
        Reply::Info(Info {
            owner: Some(b"a"[..].into()),
            token: Some(t),
            count: Some(1),
            ttl_ms: 750,
            waiters: 1,
            mode: super::Mode::Exclusive,
            holders: 1,
            permits_free: 0,
        })
    );
}

#[test]
fn events_name_what_happened() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    sim.renew(K, b"a", 1000);
    sim.wait(K, b"w", 1000, 0);
    sim.release(K, b"a");
    sim.force_release(K);
    let events: Vec<Event> = sim.take_events().into_iter().map(|e| e.1).collect();
    assert_eq!(
        events,
        [
            Event::Acquired,
            Event::Renewed,
            Event::Released,
            Event::Granted,
            Event::ForceReleased
        ]
    );
}

#[test]
fn refused_commands_change_and_replicate_nothing() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    sim.take_effects();
    sim.take_events();
    assert_eq!(sim.acquire(K, b"b", 1000), Reply::Nil);
    assert_eq!(sim.release(K, b"b"), Reply::Nil);
    assert_eq!(sim.renew(K, b"b", 1000), Reply::Nil);
    assert_eq!(sim.reenter(K, b"b", 1000), Reply::Nil);
    assert_eq!(sim.force_release(b"none"), Reply::Integer(0));
    assert!(sim.take_effects().is_empty());
    assert!(sim.take_events().is_empty());
}

#[test]
fn tokens_rise_across_keys_and_above_observed_ones() {
    let mut sim = Sim::new(START);
    let a = token(sim.acquire(b"x", b"a", 1000));
    let b = token(sim.acquire(b"y", b"a", 1000));
    assert!(b > a);
    // A token 1000 ms above this server's clock: no new hold until the clock passes it.
    sim.engine.observe_token(b + 1_000_000);
    assert_eq!(
        sim.acquire(b"z", b"a", 1000),
        Reply::Error(Refusal::Clock(1000).into())
    );
    sim.advance(1000);
    let c = token(sim.acquire(b"z", b"a", 1000));
    assert_eq!(c, b + 1_000_001);
    assert_eq!(sim.engine.last_token(), c);
}

#[test]
fn a_thousand_waiters_are_served_in_order_with_constant_work_per_hand_off() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"h", 60_000);
    let clients: Vec<u64> = (0..1000)
        .map(|i| sim.wait(K, format!("w{i}").as_bytes(), 60_000, 0).1)
        .collect();
    sim.release(K, b"h");
    for i in 0..1000 {
        // At most a millisecond's tokens (1000) are issued in one millisecond.
        sim.advance(1);
        sim.take_effects();
        sim.release(K, format!("w{i}").as_bytes());
        // Each hand-off is the release and one new hold, never a scan of the queue.
        assert!(sim.take_effects().len() <= 2);
    }
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        clients
    );
    assert_idle(&mut sim);
}

#[test]
fn a_grant_its_owner_confirmed_before_the_revoke_ran_is_kept() {
    // The owner's retry after the lost reply (or a renewal, a re-entry, a release of one level)
    // confirms the hold: the revoke scheduled by the hang-up must not take it away afterwards.
    type Confirm = fn(&mut Sim) -> Reply;
    let confirmations: [(&str, Confirm); 4] = [
        ("acquire", |s| s.acquire(K, b"w1", 60_000)),
        ("renew", |s| s.renew(K, b"w1", 60_000)),
        ("reenter", |s| s.reenter(K, b"w1", 60_000)),
        ("wait", |s| s.wait(K, b"w1", 60_000, 0).0),
    ];
    for (name, confirm) in confirmations {
        let mut sim = Sim::new(START);
        sim.acquire(K, b"a", 10_000);
        let (_, c1) = sim.wait(K, b"w1", 60_000, 0);
        let (_, c2) = sim.wait(K, b"w2", 60_000, 0);
        sim.release(K, b"a");
        sim.hang_up(c1);
        let t = sim.lock(K).expect("granted to w1").1;
        let reply = confirm(&mut sim);
        assert!(matches!(reply, Reply::Integer(_)), "{name}: {reply:?}");
        sim.settle();
        assert_eq!(
            sim.lock(K).map(|l| (l.0, l.1)),
            Some((b"w1".to_vec(), t)),
            "{name}"
        );
        assert!(
            granted(&mut sim).iter().all(|g| g.0 != c2),
            "{name}: w2 still waits"
        );
    }
}

#[test]
fn a_wait_on_a_free_key_behind_a_queue_queues() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 1000, 0);
    sim.delete(K);
    let (reply, c2) = sim.wait(K, b"w2", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c1]
    );
    sim.release(K, b"w1");
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c1, c2]
    );
}

#[test]
fn info_of_a_lock_without_expiry_reports_ttl_minus_one() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    sim.set_expiry(K, None);
    assert!(matches!(sim.info(K), Reply::Info(Info { ttl_ms: -1, .. })));
}

#[test]
fn force_release_counts_what_it_broke() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    assert_eq!(sim.force_release(K), Reply::Integer(1));
    assert_eq!(sim.force_release(K), Reply::Integer(0));
    sim.acquire(K, b"b", 1000);
    sim.force_release(K);
    assert_eq!(sim.engine.stats().forcereleased, 2);
}

#[test]
fn another_owner_touching_the_key_does_not_cancel_a_revoke() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 10_000);
    let (_, c1) = sim.wait(K, b"w1", 60_000, 0);
    let (_, c2) = sim.wait(K, b"w2", 60_000, 0);
    sim.release(K, b"a");
    sim.hang_up(c1);
    // Others are refused; that confirms nothing of w1's.
    assert_eq!(sim.acquire(K, b"x", 1000), Reply::Nil);
    assert_eq!(sim.release(K, b"x"), Reply::Nil);
    assert_eq!(sim.renew(K, b"x", 1000), Reply::Nil);
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c2]
    );
}

#[test]
fn a_hang_up_of_the_new_grant_keeps_the_hold_a_reacquire_answer_carries() {
    // Two clients of one owner wait; the first is granted a new hold, the second answered as a
    // re-acquire with the same token. The first hangs up before its answer: the second was told
    // it holds the key, so nothing is revoked.
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 10_000);
    let (_, c1) = sim.wait(K, b"o", 60_000, 0);
    let (_, c2) = sim.wait(K, b"o", 60_000, 0);
    sim.release(K, b"w");
    sim.hang_up(c1);
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c2]
    );
    sim.settle();
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"o".to_vec()));
    assert_eq!(sim.engine.stats().released, 1, "only w's release");
}

#[test]
fn a_hold_is_revoked_only_once_every_answer_carrying_it_is_lost() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 10_000);
    let (_, c1) = sim.wait(K, b"o", 60_000, 0);
    let (_, c2) = sim.wait(K, b"o", 60_000, 0);
    let (_, c3) = sim.wait(K, b"next", 60_000, 0);
    sim.release(K, b"w");
    sim.hang_up(c1);
    sim.settle();
    assert_eq!(
        sim.lock(K).map(|l| l.0),
        Some(b"o".to_vec()),
        "c2's answer is on its way"
    );
    sim.hang_up(c2);
    sim.settle();
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [c3]
    );
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"next".to_vec()));
}

#[test]
fn the_restart_grace_grants_no_new_hold_then_serves_the_queues_in_order() {
    let mut sim = Sim::new(START);
    sim.start_grace(5_000);
    let grace = |ms| Reply::Error(Refusal::Grace(ms).into());
    assert_eq!(sim.acquire(K, b"a", 1000), grace(5_000));
    assert_eq!(sim.reenter(K, b"a", 1000), grace(5_000));
    assert_eq!(
        sim.acquire(K, b"a", 5_001),
        Reply::Error(Refusal::TtlAboveGrace.into()),
        "no hold may outlive a grace"
    );
    let (reply, w1) = sim.wait(K, b"w1", 1000, 0);
    assert_eq!(reply, Reply::Blocked, "a wait queues");
    let (_, w2) = sim.wait(K, b"w2", 1000, 0);
    let (_, w3) = sim.wait(b"other", b"w3", 1000, 0);
    sim.advance(4_999);
    assert!(sim.deliver().is_empty(), "nothing before the grace ends");
    assert_eq!(sim.acquire(b"free", b"x", 1000), grace(1));
    sim.advance(2);
    let mut answered: Vec<_> = sim.deliver().into_iter().map(|(c, _)| c).collect();
    answered.sort_unstable();
    assert_eq!(answered, [w1, w3], "each key's head, at the grace's end");
    sim.release(K, b"w1");
    assert_eq!(
        sim.deliver()
            .into_iter()
            .map(|(c, _)| c)
            .collect::<Vec<_>>(),
        [w2]
    );
    assert!(matches!(
        sim.acquire(b"free", b"x", 1000),
        Reply::Integer(_)
    ));
    assert_eq!(sim.host_timers(), 0, "nobody waits: no timer left");
}

/// A grace configured at runtime (`CONFIG SET relock.restart-grace-ms 1000`) under waiters
/// queued before it: at its turn, one whose ttl is above the grace gets the error a new request
/// gets, and the next is served; no hold is granted longer than the grace.
#[test]
fn a_grace_set_at_runtime_bounds_the_waiters_queued_before_it() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 600_000);
    let (_, long) = sim.wait(K, b"long", 600_000, 0);
    let (_, short) = sim.wait(K, b"short", 1_000, 0);
    sim.engine.configure_grace(1_000);
    assert_eq!(sim.release(K, b"a"), Reply::Integer(0));
    sim.deliver();
    let above = Outcome::Error(Refusal::TtlAboveGrace.into());
    assert_eq!(sim.answers[0], (long, above));
    assert!(matches!(sim.answers[1], (c, Outcome::Token(_)) if c == short));
    assert_eq!(sim.lock(K).map(|l| l.3), Some(Some(START + 1_000)));
    sim.release(K, b"short");
    assert_idle(&mut sim);
}

#[test]
fn holds_the_server_has_work_through_the_grace() {
    let mut sim = Sim::new(START);
    let t = token(sim.acquire(K, b"a", 1000));
    let (_, w) = sim.wait(K, b"w", 1000, 0);
    sim.start_grace(3_000);
    assert_eq!(
        sim.acquire(K, b"a", 1000),
        Reply::Integer(t),
        "an idempotent re-acquire"
    );
    assert_eq!(sim.reenter(K, b"a", 1000), Reply::Integer(2), "a re-entry");
    assert_eq!(sim.renew(K, b"a", 2000), Reply::Integer(t));
    assert_eq!(sim.release(K, b"a"), Reply::Integer(1));
    assert_eq!(sim.release(K, b"a"), Reply::Integer(0), "a release");
    assert!(sim.deliver().is_empty(), "no hand-off in the grace");
    sim.advance(3_001);
    assert_eq!(
        sim.deliver()
            .into_iter()
            .map(|(c, _)| c)
            .collect::<Vec<_>>(),
        [w]
    );
}

/// Replays on `replica` every effect `master` replicated since the last call: each must be one
/// a replica takes.
fn replicate(master: &mut Sim, replica: &mut Sim) {
    for effect in master.take_effects() {
        let replayed = replica.replay(&effect);
        assert!(
            matches!(replayed, Ok(ref r) if !matches!(r, Reply::Error(_))),
            "the replica refuses {:?}: {replayed:?}",
            effect
                .iter()
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

/// Effects within bounds: a user makes a lock's key expire past what a holder record keeps
/// (`PEXPIREAT key 9223372036854775806`, which Redis takes); the owner downgrades it and a
/// reader joins, and a reentrant lock so set is released one level. Every effect is one the
/// replica takes, and the replica ends with what the master has (the downgraded holder's lease
/// end, and so the key's TTL, the latest a record keeps; the reentrant lock's expiry the latest
/// an effect says).
#[test]
fn far_expiries_reach_the_replica_as_the_master_has_them() {
    const FAR: i64 = i64::MAX - 1;
    let (mut master, mut replica) = (Sim::new(START), Sim::new(START));
    let token_of = token(master.acquire(b"down", b"owner", 10_000));
    master.reenter(b"re", b"owner", 10_000);
    master.reenter(b"re", b"owner", 10_000);
    replicate(&mut master, &mut replica);
    for key in [&b"down"[..], b"re"] {
        // The user's PEXPIREAT reaches the replica as itself.
        master.user_expiry(key, Some(FAR));
        replica.user_expiry(key, Some(FAR));
    }
    assert_eq!(
        master.downgrade(b"down", b"owner"),
        Reply::Integer(token_of)
    );
    let reader = super::Mode::shared(0);
    token(master.acquire_as(b"down", b"reader", 60_000, reader));
    assert_eq!(master.release(b"re", b"owner"), Reply::Integer(1));
    replicate(&mut master, &mut replica);
    assert_eq!(master.lock(b"re"), replica.lock(b"re"));
    // The key's expiry as the effect can say it, on both.
    let cut = super::bounds::MAX_EXPIRY_MS;
    assert_eq!(master.lock(b"re").map(|l| (l.2, l.3)), Some((1, Some(cut))));
    assert_eq!(master.shared(b"down"), replica.shared(b"down"));
    let (holders, expiry) = master.shared(b"down").expect("shared");
    let latest = super::bounds::MAX_TIME_MS;
    assert_eq!(holders.get(b"owner").map(|h| h.lease_end), Some(latest));
    assert_eq!(expiry, Some(latest));
}

#[test]
fn the_grace_reports_its_setting_and_the_ms_left() {
    let mut sim = Sim::new(START);
    let grace = |sim: &Sim| sim.engine.grace_ms(sim.host.now_us());
    assert_eq!(grace(&sim), (0, 0), "none configured");
    sim.start_grace(5_000);
    assert_eq!(grace(&sim), (5_000, 5_000));
    sim.advance(1_500);
    assert_eq!(grace(&sim), (5_000, 3_500));
    let Reply::Error(refused) = sim.acquire(K, b"a", 1000) else {
        panic!("a new hold in the grace");
    };
    assert_eq!(
        refused.text(),
        "TRYAGAIN relock restart grace, 3500 ms left"
    );
    sim.advance(3_500);
    assert_eq!(grace(&sim), (5_000, 0), "over: the setting stays");
}

/// Holds that ended behind the engine's back (the host reports them: DEL, expiry, eviction...)
/// reach the journal, with the key's queue at that moment, and the hold distribution.
#[test]
fn holds_lost_behind_the_engines_back_are_journaled_and_timed() {
    let mut sim = Sim::new(START);
    let t = token(sim.acquire(K, b"a", 10_000));
    sim.wait(K, b"w", 1000, 0);
    let hold = EndedHold {
        owner: b"a"[..].into(),
        token: t,
        granted_at: START,
    };
    let key = KeyRef { db: 0, name: K };
    sim.engine
        .holds_lost(key, START + 250, Reason::Deleted, &[hold]);
    let entries = sim.engine.watch().journal.of_key(0, K, 10);
    let found: Vec<_> = entries
        .iter()
        .map(|e| (&*e.owner, e.token, e.reason, e.time, e.held, e.waiters))
        .collect();
    assert_eq!(
        found,
        [(&b"a"[..], t, Reason::Deleted, START + 250, Some(250), 1)]
    );
    assert_eq!(sim.engine.watch().contention.holds.count(), 1);
}

/// `LOCK.MRENEW` renews each key the owner holds and replies how many: fewer than asked means
/// part of the group is gone.
#[test]
fn mrenew_renews_and_counts_the_keys_the_owner_holds() {
    let mut sim = Sim::new(START);
    assert!(matches!(
        sim.macquire(&[b"a", b"b"], b"o", 1000),
        Reply::Tokens(_)
    ));
    sim.acquire(b"c", b"x", 1000);
    sim.advance(500);
    assert_eq!(
        sim.mrenew(&[b"a", b"b", b"c"], b"o", 2000),
        Reply::Integer(2)
    );
    assert_eq!(sim.lock(b"a").and_then(|l| l.3), Some(START + 2500));
    assert_eq!(
        sim.lock(b"c").and_then(|l| l.3),
        Some(START + 1000),
        "not o's"
    );
    assert_eq!(sim.mrenew(&[b"a", b"b"], b"x", 2000), Reply::Integer(0));
}

/// A force-release's journal entry says who did it (`client-info`, always known for
/// `LOCK.FORCERELEASE`).
#[test]
fn a_force_release_is_journaled_with_who_did_it() {
    let mut sim = Sim::new(START);
    sim.host.caller_info = "id=7 addr=127.0.0.1:5000 name=admin".into();
    sim.acquire(K, b"a", 1000);
    assert_eq!(sim.force_release(K), Reply::Integer(1));
    let entries = sim.engine.watch().journal.of_key(0, K, 10);
    let found: Vec<_> = entries
        .iter()
        .map(|e| (e.reason, &*e.client_info))
        .collect();
    assert_eq!(
        found,
        [(Reason::ForceReleased, "id=7 addr=127.0.0.1:5000 name=admin")]
    );
}

/// Holds that end behind the engine's back are described to it as long as the journal or the
/// statistics keep anything of them, and not at all when neither does.
#[test]
fn the_engine_asks_for_lost_holds_only_while_something_keeps_them() {
    use super::journal::Reasons;
    let mut sim = Sim::new(START);
    assert!(sim.engine.describes() > 0, "by default");
    sim.engine.watch_mut().contention.enabled = false;
    assert!(sim.engine.describes() > 0, "the journal");
    sim.engine.watch_mut().journal.configure(1024, Reasons(0));
    assert_eq!(sim.engine.describes(), 0, "no reason recorded");
    sim.engine.watch_mut().journal.configure(0, Reasons::ALL);
    assert_eq!(sim.engine.describes(), 0, "no journal");
    sim.engine.watch_mut().contention.enabled = true;
    assert!(sim.engine.describes() > 0, "the hold distribution");
}

/// A promoted replica whose master's clock was 20 s ahead holds the master's holds, tokens 20 s
/// above its own clock's floor. No new hold gets a token until its clock passes them (a restart
/// that lost the counter would otherwise issue below what it issued): acquires and group
/// acquires get TRYAGAIN with the ms left, a wait stays queued, a release's hand-off waits; a
/// re-acquire, a renewal and a release of a hold it has need no token and go on. Then every
/// queue is served in order, above the master's tokens, and nothing is left armed.
#[test]
fn tokens_ahead_of_the_clock_wait_for_it() {
    let mut sim = Sim::new(START);
    let skew = 20_000;
    let masters = (START + skew) as u64 * 1000 + 7;
    let words = |key: &str, owner: &str| -> Vec<Vec<u8>> {
        let at = (START + 60_000).to_string();
        [
            "LOCK.APPLY",
            key,
            owner,
            &masters.to_string(),
            "1",
            "PXAT",
            &at,
        ]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect()
    };
    assert_eq!(sim.replay(&words("k", "held")), Ok(Reply::Ok));
    let clock = |ms| Reply::Error(Refusal::Clock(ms).into());
    assert_eq!(sim.acquire(b"free", b"a", 1000), clock(20_000));
    assert_eq!(
        Refusal::Clock(20_000).text(),
        "TRYAGAIN relock restart grace, 20000 ms left (tokens ahead of this server's clock)"
    );
    assert_eq!(
        sim.acquire_as(b"free", b"a", 1000, super::Mode::shared(0)),
        clock(20_000)
    );
    assert_eq!(sim.macquire(&[b"free", b"x"], b"a", 1000), clock(20_000));
    assert_eq!(sim.acquire(K, b"held", 1000), Reply::Integer(masters));
    assert_eq!(sim.renew(K, b"held", 60_000), Reply::Integer(masters));
    let (reply, w_free) = sim.wait(b"free", b"w", 1000, 0);
    assert_eq!(reply, Reply::Blocked, "a wait for a free key queues");
    let (_, w_k) = sim.wait(K, b"wk", 1000, 0);
    assert_eq!(sim.release(K, b"held"), Reply::Integer(0));
    sim.advance(10_000);
    assert!(sim.deliver().is_empty(), "no hand-off before the clock");
    assert_eq!(sim.acquire(b"other", b"a", 1000), clock(10_000));
    assert_eq!(
        sim.lock(K),
        None,
        "the released key waits free for its head"
    );
    sim.advance(9_999);
    assert!(sim.deliver().is_empty());
    sim.advance(2);
    let mut answers = granted(&mut sim);
    answers.sort_unstable();
    let mut expected = vec![w_free, w_k];
    expected.sort_unstable();
    assert_eq!(answers.iter().map(|a| a.0).collect::<Vec<_>>(), expected);
    assert!(answers.iter().all(|a| a.1 > masters), "{answers:?}");
    let t = token(sim.acquire(b"other", b"a", 1000));
    assert!(t > masters && t < (sim.now() as u64 + 1) * 1000, "{t}");
    sim.release(b"free", b"w");
    sim.release(K, b"wk");
    sim.release(b"other", b"a");
    assert_idle(&mut sim);
}

/// The clock's wait and the restart grace together: the longer decides, each says its own.
#[test]
fn a_grace_and_tokens_ahead_of_the_clock_each_say_their_wait() {
    let mut sim = Sim::new(START);
    sim.engine.observe_token((START + 5_000) as u64 * 1000);
    sim.start_grace(2_000);
    let (_, w) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(
        sim.acquire(b"x", b"a", 1000),
        Reply::Error(Refusal::Grace(2_000).into())
    );
    sim.advance(2_001);
    assert_eq!(
        sim.acquire(b"x", b"a", 1000),
        Reply::Error(Refusal::Clock(2_999).into())
    );
    assert!(
        sim.deliver().is_empty(),
        "the grace ended, the clock is behind"
    );
    sim.advance(3_000);
    assert_eq!(
        granted(&mut sim).iter().map(|g| g.0).collect::<Vec<_>>(),
        [w]
    );
    sim.release(K, b"w");
    assert_idle(&mut sim);
}

/// A change behind the engine's back concerns it only for a key with waiters or a lapse timer:
/// another key's timer or queue does not make every keyspace event take the slow path
/// (`globals::key_changed` asks [`super::Engine::watches`]).
#[test]
fn only_a_key_with_waiters_or_a_lapse_timer_is_watched() {
    let mut sim = Sim::new(START);
    let shared = KeyRef { db: 0, name: b"s" };
    let queued = KeyRef { db: 0, name: b"q" };
    let other = KeyRef { db: 0, name: b"o" };
    assert!(!sim.engine.watches(shared));
    // Two leases ending apart arm a lapse timer (one lease, or leases ending together, do not:
    // the key's expiry ends them).
    sim.acquire_as(b"s", b"r", 1000, super::Mode::shared(0));
    sim.acquire_as(b"s", b"r2", 2000, super::Mode::shared(0));
    assert!(
        sim.engine.lapse_timers() > 0,
        "shared leases ending apart arm a lapse timer"
    );
    assert!(sim.engine.watches(shared));
    assert!(
        !sim.engine.watches(other),
        "another key's timer is not this key's"
    );
    assert!(
        !sim.engine.watches(KeyRef { db: 1, name: b"s" }),
        "nor another db's"
    );
    sim.acquire(b"q", b"a", 1000);
    assert!(!sim.engine.watches(queued), "held, nobody waiting");
    let (reply, _) = sim.wait(b"q", b"b", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    assert!(sim.engine.watches(queued));
    assert!(
        !sim.engine.watches(other),
        "another key's queue is not this key's"
    );
}

/// Lapsed leases one turn the engine starts by itself ends, over every key: at most
/// [`LAPSED_PER_TURN`] (256, docs/commands.md). Before, each prune job took what the turn's
/// budget had left and a grant in the turn made room inline besides: a grant's 128 and two
/// keys' slices ended 376 lapsed leases in one turn.
#[test]
fn one_turn_ends_at_most_lapsed_per_turn_over_every_key() {
    use super::engine::{LAPSED_PER_TURN, MAKE_ROOM_INLINE};
    use super::Mode;
    let lapsing = 200;
    let mut sim = Sim::new(START);
    let limit = (MAKE_ROOM_INLINE + 1) as u32;
    // Two reader keys and a full semaphore, every lease but one per key ending at START + 100.
    for (i, key) in [&b"a"[..], b"b"].into_iter().enumerate() {
        sim.host.set_now(START + i as i64);
        token(sim.acquire_as(key, b"long", 60_000, Mode::shared(0)));
        for o in 0..lapsing {
            let ttl = (START + 100 - sim.now()) as u64;
            token(sim.acquire_as(key, format!("o{o}").as_bytes(), ttl, Mode::shared(0)));
        }
    }
    sim.host.set_now(START + 2);
    token(sim.acquire_as(b"s", b"long", 60_000, Mode::shared(limit)));
    for o in 0..MAKE_ROOM_INLINE {
        let ttl = (START + 100 - sim.now()) as u64;
        token(sim.acquire_as(b"s", format!("o{o}").as_bytes(), ttl, Mode::shared(limit)));
    }
    // A waiter for every permit the lapsing leases hold: its grant makes room inline.
    let wants = Mode::Shared {
        limit,
        permits: MAKE_ROOM_INLINE as u32,
    };
    let (reply, _) = sim.wait_as(b"s", b"w", 60_000, 0, wants);
    assert_eq!(reply, Reply::Blocked);
    let total = 2 * lapsing + MAKE_ROOM_INLINE;
    let mut turns = 0;
    let mut most = 0;
    while (sim.engine.stats().expired as usize) < total {
        let before = sim.engine.stats().expired;
        assert!(
            sim.turn_by(START + 60_000),
            "{} of {total} ended, no turn to come",
            sim.engine.stats().expired
        );
        turns += 1;
        let ended = (sim.engine.stats().expired - before) as usize;
        most = most.max(ended);
        assert!(
            ended <= LAPSED_PER_TURN,
            "turn {turns} ended {ended} lapsed leases (at most {LAPSED_PER_TURN})"
        );
    }
    assert!(most > 0 && turns >= total.div_ceil(LAPSED_PER_TURN));
    assert_eq!(granted(&mut sim).len(), 1, "the waiter got its permits");
}
