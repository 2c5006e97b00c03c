//! Shared holds on the engine, rule by rule (spec: "Shared holds: read-write locks and counting
//! semaphores"), on the in-memory host.

use super::engine::{HolderInfo, Info, Reply};
use super::errors::{other_limit, Refusal};
use super::host::{Event, Outcome};
use super::memory::Sim;
use super::shared::Holder;
use super::Mode;

const START: i64 = 1_800_000_000_000;
const K: &[u8] = b"k";
const READ: Mode = Mode::shared(0);

fn sem(limit: u32) -> Mode {
    Mode::shared(limit)
}

fn token(reply: Reply) -> u64 {
    match reply {
        Reply::Integer(t) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

fn granted(sim: &mut Sim) -> Vec<u64> {
    sim.deliver();
    sim.answers
        .iter()
        .filter_map(|(c, o)| matches!(o, Outcome::Token(_)).then_some(*c))
        .collect()
}

fn owners(sim: &mut Sim) -> Vec<Vec<u8>> {
    match sim.holders(K, None, 0) {
        Reply::Holders(list) => list.into_iter().map(|h| h.owner.to_vec()).collect(),
        Reply::Nil => Vec::new(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn readers_share_and_writers_wait_for_them() {
    let mut sim = Sim::new(START);
    let r1 = token(sim.acquire_as(K, b"r1", 1000, READ));
    let r2 = token(sim.acquire_as(K, b"r2", 1000, READ));
    assert!(r2 > r1);
    assert_eq!(
        sim.acquire(K, b"w", 1000),
        Reply::Nil,
        "a writer is excluded"
    );
    let (reply, w) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    // No writer starvation: a reader arriving behind the queued writer waits too.
    assert_eq!(sim.acquire_as(K, b"r3", 1000, READ), Reply::Nil);
    assert_eq!(sim.release(K, b"r1"), Reply::Integer(0));
    assert!(granted(&mut sim).is_empty(), "r2 still reads");
    assert_eq!(sim.release(K, b"r2"), Reply::Integer(0));
    assert_eq!(granted(&mut sim), [w]);
    assert_eq!(sim.lock(K).map(|l| l.0), Some(b"w".to_vec()));
    // Readers are excluded by the writer.
    assert_eq!(sim.acquire_as(K, b"r1", 1000, READ), Reply::Nil);
}

#[test]
fn a_limit_admits_exactly_n_owners_not_counts() {
    let mut sim = Sim::new(START);
    for owner in [&b"a"[..], b"b", b"c"] {
        assert!(matches!(
            sim.acquire_as(K, owner, 1000, sem(3)),
            Reply::Integer(_)
        ));
    }
    assert_eq!(sim.acquire_as(K, b"d", 1000, sem(3)), Reply::Nil);
    // Re-entry of a holder ignores the limit; it counts owners.
    assert_eq!(sim.reenter_as(K, b"a", 1000, sem(3)), Reply::Integer(2));
    assert_eq!(sim.release(K, b"a"), Reply::Integer(1));
    assert_eq!(sim.acquire_as(K, b"d", 1000, sem(3)), Reply::Nil);
    assert_eq!(sim.release(K, b"a"), Reply::Integer(0));
    assert!(matches!(
        sim.acquire_as(K, b"d", 1000, sem(3)),
        Reply::Integer(_)
    ));
    assert!(matches!(
        sim.info(K),
        Reply::Info(Info {
            holders: 3,
            mode: Mode::Shared {
                limit: 3,
                permits: 1
            },
            permits_free: 0,
            ..
        })
    ));
}

#[test]
fn mode_and_limit_errors_change_nothing() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 1000, sem(2));
    sim.take_effects();
    assert_eq!(
        sim.acquire_as(K, b"b", 1000, sem(3)),
        Reply::Error(Refusal::OtherLimit(2).into())
    );
    assert_eq!(
        sim.acquire_as(K, b"b", 1000, READ),
        Reply::Error(Refusal::OtherLimit(2).into())
    );
    assert_eq!(
        sim.acquire(K, b"a", 1000),
        Reply::Error(Refusal::OtherMode.into())
    );
    assert_eq!(
        sim.reenter(K, b"a", 1000),
        Reply::Error(Refusal::OtherMode.into())
    );
    let (reply, _) = sim.wait_as(K, b"c", 1000, 0, sem(5));
    assert_eq!(
        reply,
        Reply::Error(Refusal::OtherLimit(2).into()),
        "never queued"
    );
    assert!(sim.take_effects().is_empty());
    assert_eq!(sim.engine.waiters(), 0);
    // The other way round: an exclusive holder asking for a shared hold.
    sim.force_release(K);
    sim.acquire(K, b"x", 1000);
    assert_eq!(
        sim.acquire_as(K, b"x", 1000, READ),
        Reply::Error(Refusal::OtherMode.into())
    );
}

#[test]
fn a_queued_shared_waiter_sets_the_limit_of_a_free_key() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 1000);
    let (_, _) = sim.wait_as(K, b"r", 1000, 0, sem(4));
    let (reply, _) = sim.wait_as(K, b"s", 1000, 0, sem(5));
    assert_eq!(reply, Reply::Error(Refusal::OtherLimit(4).into()));
}

#[test]
fn a_long_batch_of_readers_is_granted_a_bounded_slice_per_turn_in_queue_order() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w0", 1000);
    let readers: Vec<_> = (0..600)
        .map(|i| sim.wait_as(K, format!("r{i}").as_bytes(), 1000, 0, READ).1)
        .collect();
    sim.release(K, b"w0");
    assert_eq!(
        sim.pending().len(),
        super::engine::GRANT_BATCH,
        "the release grants one slice"
    );
    // A newcomer does not pass the readers still queued.
    assert_eq!(sim.acquire_as(K, b"late", 1000, READ), Reply::Nil);
    sim.settle();
    assert_eq!(
        granted(&mut sim),
        readers,
        "the rest in the next turns, in queue order"
    );
}

/// A storm of lease ends (the issue's "1M leases ending in the same millisecond", scaled down):
/// every turn the engine starts by itself removes at most [`TURN_BUDGET`] lapsed leases and
/// replicates at most as many effects, the waiter the storm lets in is granted in the first of
/// them, and the rest of the removal follows in later turns. Were a turn's work unbounded, the
/// whole storm would go in one turn.
#[test]
fn one_turn_does_at_most_a_turn_budget_of_work_in_a_storm_of_lease_ends() {
    use super::engine::TURN_BUDGET;
    // A unit (a grant, a lease removed with its effect) costs up to a few µs: a budget much
    // larger would no longer keep a turn near a millisecond.
    const { assert!(TURN_BUDGET <= 512, "TURN_BUDGET grew past 512") };
    let mut sim = Sim::new(START);
    let lapsing = 10 * TURN_BUDGET + 7;
    let limit = lapsing as u32 + 1;
    for i in 0..lapsing {
        let owner = format!("o{i}");
        // At most a millisecond's tokens (1000) are issued in one millisecond: the clock moves
        // on, and every lease still ends at START + 100.
        if i % 500 == 499 {
            sim.host.set_now(sim.now() + 1);
        }
        let ttl = (START + 100 - sim.now()) as u64;
        token(sim.acquire_as(K, owner.as_bytes(), ttl, sem(limit)));
    }
    token(sim.acquire_as(K, b"long", 60_000, sem(limit)));
    let (reply, w) = sim.wait_as(K, b"w", 60_000, 0, sem(limit));
    assert_eq!(reply, Reply::Blocked, "the semaphore is full");
    sim.take_effects();
    let holds = |sim: &Sim| sim.shared(K).map_or(0, |(s, _)| s.len());
    let mut turns = 0;
    let mut granted_in = None;
    while holds(&sim) > 2 {
        let before = sim.engine.stats().expired;
        assert!(
            sim.turn_by(START + 60_000),
            "{} holds left, no turn to come",
            holds(&sim)
        );
        turns += 1;
        let removed = (sim.engine.stats().expired - before) as usize;
        let effects = sim.take_effects().len();
        assert!(
            removed <= TURN_BUDGET && effects <= TURN_BUDGET,
            "turn {turns} removed {removed} leases with {effects} effects"
        );
        if granted_in.is_none() && !sim.deliver().is_empty() {
            granted_in = Some(turns);
        }
    }
    assert_eq!(granted_in, Some(1), "the waiter, in the storm's first turn");
    assert_eq!(sim.answers.first().map(|a| a.0), Some(w));
    assert!(
        turns > lapsing / TURN_BUDGET,
        "{lapsing} leases removed in {turns} turns"
    );
    assert_eq!(owners(&mut sim), [b"long".to_vec(), b"w".to_vec()]);
    assert_eq!(sim.engine.stats().expired, lapsing as u64);
}

/// A turn the engine starts by itself does at most [`TURN_BUDGET`] units of work, each grant
/// one: the readers left after a release's slice are served a slice per turn.
///
/// [`TURN_BUDGET`]: super::engine::TURN_BUDGET
#[test]
fn a_turn_grants_no_more_than_its_budget() {
    use super::engine::{GRANT_BATCH, TURN_BUDGET};
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w0", 1000);
    for i in 0..3 * GRANT_BATCH {
        sim.wait_as(K, format!("r{i}").as_bytes(), 1000, 0, READ);
    }
    sim.release(K, b"w0");
    assert_eq!(sim.pending().len(), GRANT_BATCH, "the release's slice");
    let generation = sim.host.fire_next_timer().expect("the rest is due");
    sim.engine.on_timer(&mut sim.host, generation);
    let after_one_turn = sim.pending().len() - GRANT_BATCH;
    assert!(
        0 < after_one_turn && after_one_turn <= TURN_BUDGET,
        "{after_one_turn} granted in one turn"
    );
    sim.settle();
    assert_eq!(granted(&mut sim).len(), 3 * GRANT_BATCH, "the rest later");
}

#[test]
fn a_batch_of_consecutive_readers_is_granted_in_queue_order_up_to_the_limit() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w0", 1000);
    let (_, r1) = sim.wait_as(K, b"r1", 1000, 0, sem(2));
    let (_, r2) = sim.wait_as(K, b"r2", 1000, 0, sem(2));
    let (_, r3) = sim.wait_as(K, b"r3", 1000, 0, sem(2));
    let (_, w1) = sim.wait(K, b"w1", 1000, 0);
    let (_, r4) = sim.wait_as(K, b"r4", 1000, 0, sem(2));
    sim.release(K, b"w0");
    assert_eq!(granted(&mut sim), [r1, r2], "two permits");
    let tokens: Vec<u64> = match sim.holders(K, None, 0) {
        Reply::Holders(list) => list.iter().map(|h| h.token).collect(),
        other => panic!("{other:?}"),
    };
    assert!(tokens[0] < tokens[1], "tokens rise along a batch");
    sim.release(K, b"r1");
    assert_eq!(granted(&mut sim), [r1, r2, r3]);
    sim.release(K, b"r2");
    sim.release(K, b"r3");
    assert_eq!(granted(&mut sim), [r1, r2, r3, w1], "the writer, then");
    sim.release(K, b"w1");
    assert_eq!(granted(&mut sim), [r1, r2, r3, w1, r4]);
}

#[test]
fn the_head_leaving_lets_the_readers_behind_it_in() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"r0", 10_000, READ);
    let (_, w) = sim.wait(K, b"w", 1000, 500);
    let (_, r1) = sim.wait_as(K, b"r1", 1000, 0, READ);
    let (_, r2) = sim.wait_as(K, b"r2", 1000, 0, READ);
    assert!(
        granted(&mut sim).is_empty(),
        "the writer at the head holds them back"
    );
    sim.advance(500);
    assert_eq!(granted(&mut sim), [r1, r2]);
    assert!(sim.answers.contains(&(w, Outcome::TimedOut)));
    assert_eq!(
        owners(&mut sim),
        [b"r0".to_vec(), b"r1".to_vec(), b"r2".to_vec()]
    );
}

#[test]
fn each_lease_ends_on_its_own_and_the_queue_is_served_at_once() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"short", 100, sem(2));
    sim.acquire_as(K, b"long", 1000, sem(2));
    assert_eq!(
        sim.shared(K).map(|s| s.1),
        Some(Some(START + 1000)),
        "key TTL = latest lease"
    );
    let (_, c) = sim.wait_as(K, b"next", 1000, 0, sem(2));
    sim.advance(100);
    assert!(granted(&mut sim).is_empty());
    sim.advance(1);
    assert_eq!(
        granted(&mut sim),
        [c],
        "within a millisecond of the lease's end"
    );
    assert_eq!(owners(&mut sim), [b"long".to_vec(), b"next".to_vec()]);
    assert!(sim.take_events().iter().any(|e| e.1 == Event::Expired));
    assert_eq!(sim.engine.stats().expired, 1);
}

#[test]
fn a_lapsed_lease_is_gone_for_every_command_before_it_is_removed() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 100, READ);
    sim.acquire_as(K, b"b", 1000, READ);
    // The clock moves on before the lapse timer's turn comes: nothing removed it yet.
    sim.host.set_now(START + 200);
    assert_eq!(sim.shared(K).map(|s| s.0.len()), Some(2));
    assert!(matches!(
        sim.info(K),
        Reply::Info(Info {
            holders: 1,
            ttl_ms: 800,
            ..
        })
    ));
    assert_eq!(owners(&mut sim), [b"b".to_vec()]);
    assert_eq!(sim.holders(K, Some(b"a"), 0), Reply::Holders(Vec::new()));
    assert_eq!(sim.renew(K, b"a", 1000), Reply::Nil);
    assert_eq!(sim.release(K, b"a"), Reply::Nil);
    // The first write queued its removal, which runs right after it (in slices, however many
    // leases lapsed).
    sim.settle();
    assert_eq!(
        sim.shared(K).map(|s| s.0.len()),
        Some(1),
        "removed after the first write"
    );
}

#[test]
fn one_hold_per_owner_a_waiting_holder_gets_its_own_token() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 1000);
    let (_, c1) = sim.wait_as(K, b"r", 5000, 0, READ);
    let (_, c2) = sim.wait_as(K, b"r", 5000, 0, READ);
    sim.release(K, b"w");
    sim.deliver();
    let tokens: Vec<u64> = sim
        .answers
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Token(t) => Some(*t),
            _ => None,
        })
        .collect();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(granted(&mut sim), [c1, c2]);
    assert_eq!(owners(&mut sim), [b"r".to_vec()]);
}

#[test]
fn force_release_of_one_owner_or_of_all() {
    let mut sim = Sim::new(START);
    for o in [&b"a"[..], b"b", b"c"] {
        sim.acquire_as(K, o, 1000, READ);
    }
    let (_, w) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(sim.force_release_of(K, b"b"), Reply::Integer(1));
    assert_eq!(sim.force_release_of(K, b"b"), Reply::Integer(0));
    assert_eq!(sim.force_release(K), Reply::Integer(2));
    assert_eq!(granted(&mut sim), [w]);
    assert_eq!(sim.force_release_of(K, b"nobody"), Reply::Integer(0));
    assert_eq!(sim.force_release_of(K, b"w"), Reply::Integer(1));
    assert_eq!(sim.engine.stats().forcereleased, 4);
}

/// A whole-key force-release ends the live holds (its reply and `forcereleased_total`); a lease
/// that had lapsed before it, not yet removed, counts as expired.
#[test]
fn force_release_counts_a_lapsed_lease_as_expired() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 100, READ);
    sim.acquire_as(K, b"b", 1000, READ);
    sim.acquire_as(K, b"c", 1000, READ);
    sim.host.set_now(START + 200);
    assert_eq!(sim.shared(K).map(|s| s.0.len()), Some(3), "not removed yet");
    assert_eq!(sim.force_release(K), Reply::Integer(2));
    let stats = sim.engine.stats();
    assert_eq!((stats.expired, stats.forcereleased), (1, 2));
}

/// A semaphore's holders, lapsed or not, never hold more than its limit (replicas count every
/// holder they were sent): a grant that needs the room of a lapsed lease removes it first,
/// as an expiry.
#[test]
fn a_new_permit_takes_the_room_of_a_lapsed_lease_by_removing_it() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 100, sem(2));
    sim.acquire_as(K, b"b", 1000, sem(2));
    sim.host.set_now(START + 200);
    assert_eq!(sim.shared(K).map(|s| s.0.len()), Some(2), "not removed yet");
    assert!(matches!(
        sim.acquire_as(K, b"c", 1000, sem(2)),
        Reply::Integer(_)
    ));
    let (holders, _) = sim.shared(K).expect("shared");
    assert_eq!(holders.len(), 2, "the lapsed lease made room");
    assert!(holders.get(b"a").is_none());
    assert_eq!(sim.engine.stats().expired, 1);
}

#[test]
fn holders_lists_in_grant_order_with_count_and_owner() {
    let mut sim = Sim::new(START);
    assert_eq!(sim.holders(K, None, 100), Reply::Nil);
    let t: Vec<u64> = [&b"c"[..], b"a", b"b"]
        .iter()
        .map(|o| token(sim.acquire_as(K, o, 1000, READ)))
        .collect();
    sim.reenter_as(K, b"a", 2000, READ);
    match sim.holders(K, None, 2) {
        Reply::Holders(list) => assert_eq!(
            list,
            [
                HolderInfo {
                    owner: b"c"[..].into(),
                    token: t[0],
                    count: 1,
                    ttl_ms: 1000,
                    permits: 1,
                },
                HolderInfo {
                    owner: b"a"[..].into(),
                    token: t[1],
                    count: 2,
                    ttl_ms: 2000,
                    permits: 1,
                },
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sim.holders(K, Some(b"b"), 100),
        Reply::Holders(vec![HolderInfo {
            owner: b"b"[..].into(),
            token: t[2],
            count: 1,
            ttl_ms: 1000,
            permits: 1,
        }])
    );
}

#[test]
fn info_of_a_shared_key() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 500, sem(5));
    sim.acquire_as(K, b"b", 900, sem(5));
    sim.acquire(b"x", b"a", 100);
    assert_eq!(
        sim.info(K),
        Reply::Info(Info {
            owner: None,
            token: None,
            count: None,
            ttl_ms: 900,
            waiters: 0,
            mode: sem(5),
            holders: 2,
            permits_free: 3,
        })
    );
    assert!(matches!(
        sim.info(b"x"),
        Reply::Info(Info {
            mode: Mode::Exclusive,
            holders: 1,
            ..
        })
    ));
}

#[test]
fn every_change_is_one_effect_per_changed_holder() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 1000, sem(2));
    sim.acquire_as(K, b"b", 1000, sem(2));
    sim.take_effects();
    sim.renew(K, b"a", 5000);
    let effects = sim.take_effects();
    assert_eq!(effects.len(), 1);
    let (lease_end, granted) = ((START + 5000).to_string(), START.to_string());
    let got: Vec<&[u8]> = effects[0].iter().map(|w| w.as_slice()).collect();
    let expected: [&[u8]; 10] = [
        b"LOCK.APPLY",
        K,
        b"a",
        b"PXAT",
        lease_end.as_bytes(),
        b"GRANTED",
        granted.as_bytes(),
        b"SHARED",
        b"LIMIT",
        b"2",
    ];
    // Every word but the token (3) and the count (4).
    assert_eq!(
        [&got[..3], &got[5..]].concat(),
        expected,
        "one holder's effect"
    );
    sim.release(K, b"b");
    assert_eq!(
        sim.take_effects(),
        [vec![b"LOCK.DROP".to_vec(), K.to_vec(), b"b".to_vec()]]
    );
    sim.release(K, b"a");
    assert_eq!(
        sim.take_effects(),
        [vec![b"LOCK.DROP".to_vec(), K.to_vec(), b"a".to_vec()]]
    );
    assert_eq!(sim.shared(K), None, "the key goes with its last holder");
}

#[test]
fn a_revoked_shared_grant_passes_on() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 1000);
    let (_, r1) = sim.wait_as(K, b"r1", 5000, 0, sem(1));
    let (_, r2) = sim.wait_as(K, b"r2", 5000, 0, sem(1));
    sim.release(K, b"w");
    sim.hang_up(r1);
    sim.settle();
    assert_eq!(granted(&mut sim), [r2]);
    assert_eq!(owners(&mut sim), [b"r2".to_vec()]);
}

#[test]
fn a_writer_waits_for_the_last_reader_lease_not_the_first() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"r1", 100, READ);
    sim.acquire_as(K, b"r2", 300, READ);
    let (_, w) = sim.wait(K, b"w", 1000, 0);
    sim.advance(101);
    assert!(granted(&mut sim).is_empty(), "r2 still reads");
    sim.advance(200);
    assert_eq!(granted(&mut sim), [w]);
}

#[test]
fn persist_or_a_longer_ttl_extends_no_lease() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"a", 1000, READ);
    sim.user_expiry(K, None);
    sim.settle();
    assert_eq!(
        sim.shared(K).map(|s| s.1),
        Some(Some(START + 1000)),
        "PERSIST undone"
    );
    sim.user_expiry(K, Some(START + 60_000));
    sim.acquire_as(K, b"b", 500, READ);
    assert_eq!(
        sim.shared(K).map(|s| s.1),
        Some(Some(START + 1000)),
        "capped by the next command"
    );
    // A shorter TTL ends every hold when it fires.
    sim.user_expiry(K, Some(START + 100));
    sim.advance(101);
    assert_eq!(sim.shared(K), None);
}

#[test]
fn a_hang_up_after_a_reacquire_answer_keeps_the_owners_hold() {
    // Two clients of one owner wait; the first is granted, the second answered as a re-acquire
    // with the same token. The second hanging up must not take the hold from the first.
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 1000);
    let (_, c1) = sim.wait_as(K, b"o", 60_000, 0, READ);
    let (_, c2) = sim.wait_as(K, b"o", 60_000, 0, READ);
    sim.release(K, b"w");
    sim.hang_up(c2);
    sim.settle();
    assert_eq!(granted(&mut sim), [c1]);
    assert_eq!(owners(&mut sim), [b"o".to_vec()]);
}

#[test]
fn a_value_brought_in_fails_every_waiter_it_conflicts_with_not_only_the_head() {
    a_value_arriving_fails_every_waiter_it_conflicts_with(Sim::bring_shared);
}

#[test]
fn a_value_swapped_in_fails_every_waiter_it_conflicts_with_not_only_the_head() {
    a_value_arriving_fails_every_waiter_it_conflicts_with(Sim::swap_in_shared);
}

fn a_value_arriving_fails_every_waiter_it_conflicts_with(
    arrive: fn(&mut Sim, &[u8], super::Shared),
) {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"x", 100_000);
    let (_, e) = sim.wait(K, b"e", 1000, 0);
    let (_, q) = sim.wait_as(K, b"q", 1000, 0, sem(2));
    let mut other = super::Shared::new(3);
    other
        .insert(b"y", super::Holder::new(1, START + 50_000, 0))
        .unwrap();
    arrive(&mut sim, K, other);
    sim.settle();
    let answers = sim.deliver();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].0, q);
    assert_eq!(
        super::memory::error_text(&answers[0].1).as_deref(),
        Some(other_limit(3).as_str())
    );
    assert_eq!(
        sim.engine.waiters(),
        1,
        "the exclusive head {e} still waits"
    );
}

#[test]
fn a_hang_up_of_the_new_shared_grant_keeps_the_hold_a_reacquire_answer_carries() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"w", 1000);
    let (_, c1) = sim.wait_as(K, b"o", 60_000, 0, sem(1));
    let (_, c2) = sim.wait_as(K, b"o", 60_000, 0, sem(1));
    let (_, c3) = sim.wait_as(K, b"x", 60_000, 0, sem(1));
    sim.release(K, b"w");
    sim.hang_up(c1);
    sim.settle();
    assert_eq!(granted(&mut sim), [c2]);
    sim.settle();
    assert_eq!(owners(&mut sim), [b"o".to_vec()]);
    assert_eq!(sim.engine.waiters(), 1, "{c3} still waits for the permit");
}

#[test]
fn a_downgrade_keeps_the_hold_and_lets_the_readers_at_the_head_in_with_it() {
    let mut sim = Sim::new(START);
    let t = token(sim.acquire(K, b"w", 1000));
    sim.reenter(K, b"w", 1000);
    let (_, r1) = sim.wait_as(K, b"r1", 1000, 0, READ);
    let (_, r2) = sim.wait_as(K, b"r2", 1000, 0, READ);
    let (_, w2) = sim.wait(K, b"w2", 1000, 0);
    let (_, r3) = sim.wait_as(K, b"r3", 1000, 0, READ);
    sim.take_events();
    sim.advance(100);
    assert_eq!(sim.downgrade(K, b"w"), Reply::Integer(t));
    assert_eq!(
        granted(&mut sim),
        [r1, r2],
        "the readers at the head, in the same step"
    );
    let holders = match sim.holders(K, Some(b"w"), 0) {
        Reply::Holders(list) => list,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        holders,
        [HolderInfo {
            owner: b"w"[..].into(),
            token: t,
            count: 2,
            ttl_ms: 900,
            permits: 1,
        }],
        "same token, lease and count"
    );
    assert!(sim
        .take_events()
        .iter()
        .any(|(_, e)| *e == Event::Downgraded));
    // Safe to retry; the writer behind still waits for every reader, and r3 behind it.
    assert_eq!(sim.downgrade(K, b"w"), Reply::Integer(t));
    assert_eq!(sim.downgrade(K, b"nobody"), Reply::Nil);
    for owner in [&b"w"[..], b"w", b"r1"] {
        sim.release(K, owner);
    }
    assert_eq!(granted(&mut sim), [r1, r2]);
    sim.release(K, b"r2");
    assert_eq!(granted(&mut sim), [r1, r2, w2]);
    sim.release(K, b"w2");
    assert_eq!(granted(&mut sim), [r1, r2, w2, r3]);
}

/// A downgrade makes a read lock (no limit): never on a semaphore, nor while a semaphore
/// request waits (it set the key's limit, which lasts while it waits), and then nothing changes.
#[test]
fn a_downgrade_never_makes_a_semaphore_nor_fails_a_queued_semaphore_request() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"s", 1000, sem(3));
    assert_eq!(
        sim.downgrade(K, b"s"),
        Reply::Error(Refusal::OtherLimit(3).into())
    );
    sim.acquire(b"x", b"w", 1000);
    let (_, waiter) = sim.wait_as(b"x", b"p", 1000, 0, sem(2));
    assert_eq!(
        sim.downgrade(b"x", b"w"),
        Reply::Error(Refusal::OtherLimit(2).into())
    );
    sim.deliver();
    assert!(
        sim.answers.iter().all(|(c, _)| *c != waiter),
        "the semaphore request still waits"
    );
    sim.release(b"x", b"w");
    sim.deliver();
    let answer = sim
        .answers
        .iter()
        .find(|(c, _)| *c == waiter)
        .map(|(_, o)| o);
    assert!(matches!(answer, Some(Outcome::Token(_))), "{answer:?}");
}

/// A replicated holder may fill a semaphore to its limit, never past it.
#[test]
fn an_applied_holder_fills_a_semaphore_to_its_limit_and_no_further() {
    let mut sim = Sim::new(START);
    let holder = |token, permits| Holder {
        permits,
        ..Holder::new(token, START + 10_000, START)
    };
    assert_eq!(sim.apply_holder(K, 3, b"a", holder(1, 2)), Reply::Ok);
    assert_eq!(sim.apply_holder(K, 3, b"b", holder(2, 1)), Reply::Ok);
    assert_eq!(
        sim.apply_holder(K, 3, b"c", holder(3, 1)),
        Reply::Error(Refusal::OtherLimit(3).into())
    );
    let Reply::Holders(holders) = sim.holders(K, None, 0) else {
        panic!("no holders");
    };
    assert_eq!(holders.len(), 2);
}

/// `LOCK.WAITERS`: a wait without a timeout says -1, one with a timeout the ms it has left.
#[test]
fn waiters_say_their_timeout_left_or_none() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 1000);
    sim.wait(K, b"b", 1000, 0);
    sim.wait(K, b"c", 1000, 5000);
    let key = super::host::KeyRef { db: 0, name: K };
    let Reply::Waiters(list) = sim.engine.waiters_of(&sim.host, key, 0) else {
        panic!("no waiters");
    };
    let timeouts: Vec<i64> = list.iter().map(|w| w.timeout_ms).collect();
    assert_eq!(timeouts, [-1, 5000]);
}

/// `LOCK.WAITERS`: `waited` is the ms since each waiter queued, oldest first.
#[test]
fn waiters_say_how_long_they_waited() {
    let mut sim = Sim::new(START);
    sim.acquire(K, b"a", 60_000);
    sim.wait(K, b"b", 1000, 0);
    sim.advance(2_500);
    sim.wait(K, b"c", 1000, 0);
    sim.advance(1_200);
    let key = super::host::KeyRef { db: 0, name: K };
    let Reply::Waiters(list) = sim.engine.waiters_of(&sim.host, key, 0) else {
        panic!("no waiters");
    };
    let waited: Vec<u64> = list.iter().map(|w| w.waited_ms).collect();
    assert_eq!(waited, [3_700, 1_200]);
}

/// An owner whose shared lease lapsed learns it from `LOCK.RENEW` (nil), and the journal has
/// the lease's end already: `LOCK.HISTORY` says why at once.
#[test]
fn an_owner_finds_its_own_lapsed_lease_in_the_journal() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"long", 10_000, Mode::shared(0));
    sim.acquire_as(K, b"short", 100, Mode::shared(0));
    sim.host.set_now(START + 500);
    assert_eq!(sim.renew(K, b"short", 100), Reply::Nil);
    let entries = sim.engine.watch().journal.of_key(0, K, 10);
    assert!(
        entries
            .iter()
            .any(|e| &*e.owner == b"short" && e.reason == super::Reason::Expired),
        "{entries:?}"
    );
}

/// The hold distribution learns of holds whose grant time is known, and only those.
#[test]
fn hold_times_count_only_known_grants() {
    let mut watch = super::Watch::default();
    watch.held(START + 2_000, START);
    watch.held(START + 2_000, 0);
    assert_eq!(watch.contention.holds.count(), 1);
}

/// A reader key whose every lease lapsed, taken by a writer, is replaced whole: the journal
/// still learns of each lapsed lease, as expired when its lease ended. (The key outlives its
/// lease: a `PERSIST`, and the writer's command before the engine's next turn caps the TTL.)
#[test]
fn lapsed_leases_replaced_by_a_new_hold_are_journaled_as_expired() {
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"r", 100, READ);
    sim.user_expiry(K, None);
    sim.host.set_now(START + 200);
    assert!(matches!(sim.acquire(K, b"w", 1000), Reply::Integer(_)));
    let entries = sim.engine.watch().journal.of_key(0, K, 10);
    let found: Vec<_> = entries
        .iter()
        .map(|e| (&*e.owner, e.reason, e.time))
        .collect();
    assert_eq!(found, [(&b"r"[..], super::Reason::Expired, START + 100)]);
    assert_eq!(sim.engine.stats().expired, 1);
}

/// A command on a key with lapsed leases queues their removal; a turn removes them a slice per
/// job and at most its budget in all, each job and each removal a unit of work.
#[test]
fn lapsed_leases_are_removed_after_a_command_within_the_turns_budget() {
    use super::engine::{PRUNE_SLICE, TURN_BUDGET};
    let mut sim = Sim::new(START);
    sim.acquire_as(K, b"long", 10_000, READ);
    for i in 0..1000 {
        sim.acquire_as(K, format!("r{i}").as_bytes(), 100, READ);
        // At most a millisecond's tokens (1000) are issued in one millisecond.
        if i % 500 == 499 {
            sim.host.set_now(sim.now() + 1);
        }
    }
    // The clock moves on before the lapse timer's turn comes.
    sim.host.set_now(START + 200);
    let held = |sim: &Sim| sim.shared(K).map_or(0, |s| s.0.len());
    assert_eq!(held(&sim), 1001, "nothing removed yet");
    assert!(matches!(sim.renew(K, b"long", 10_000), Reply::Integer(_)));
    let generation = sim.host.fire_next_timer().expect("removal queued");
    sim.engine.on_timer(&mut sim.host, generation);
    let removed = 1001 - held(&sim);
    let jobs = removed.div_ceil(PRUNE_SLICE);
    assert!(
        removed > 0 && removed + jobs <= TURN_BUDGET,
        "{removed} removed in one turn"
    );
    sim.settle();
    assert_eq!(held(&sim), 1, "the rest in later turns");
    assert_eq!(sim.engine.stats().expired, 1000);
}

/// Lapsed leases are removed by the schedule whether or not a command touches their key: the
/// key's lapse timer fires the millisecond after its first lease ends, and the removal goes on
/// a slice a turn, every turn within its budget.
#[test]
fn lapsed_leases_are_removed_without_a_command() {
    use super::engine::TURN_BUDGET;
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"long", 60_000, READ));
    // 999 leases: with "long", the 1,000 tokens one millisecond of the clock allows.
    for i in 0..999 {
        token(sim.acquire_as(K, format!("r{i}").as_bytes(), 100, READ));
    }
    sim.take_effects();
    let held = |sim: &Sim| sim.shared(K).map_or(0, |s| s.0.len());
    let mut turns = 0;
    while held(&sim) > 1 {
        let before = sim.engine.stats().expired;
        assert!(
            sim.turn_by(START + 1_000),
            "{} left, no turn to come",
            held(&sim)
        );
        turns += 1;
        let removed = (sim.engine.stats().expired - before) as usize;
        assert!(removed <= TURN_BUDGET, "turn {turns} removed {removed}");
    }
    assert!(turns > 999 / TURN_BUDGET, "{turns} turns");
    assert!(
        sim.now() <= START + 101,
        "removed from the millisecond after the lapse"
    );
    assert_eq!(owners(&mut sim), [b"long".to_vec()]);
    assert_eq!(sim.engine.stats().expired, 999);
    assert_eq!(
        sim.engine.armed_timers(),
        0,
        "lapse timers are not waiters' timers"
    );
}

/// A semaphore grant that needs the room of more lapsed leases than one turn may end does not
/// end them inline: `LOCK.WAIT` queues (and `LOCK.ACQUIRE` answers nil) while the schedule ends
/// them a slice a turn; the head is granted once the rest fits, and those behind it after it,
/// in queue order.
#[test]
fn a_grant_needing_more_room_than_a_turn_waits_for_the_schedule_in_order() {
    use super::engine::{MAKE_ROOM_INLINE, TURN_BUDGET};
    let lapsing = 10 * MAKE_ROOM_INLINE;
    let limit = lapsing as u32 + 2;
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"long", 60_000, sem(limit)));
    for i in 0..lapsing {
        // At most 1,000 new tokens per millisecond of the clock.
        sim.host.set_now(START + (i / 500) as i64);
        token(sim.acquire_as(K, format!("o{i}").as_bytes(), 100, sem(limit)));
    }
    // The clock moves past the short leases before any turn removes them.
    sim.host.set_now(START + 200);
    let held = |sim: &Sim| sim.shared(K).map_or(0, |s| s.0.len());
    let big = Mode::Shared {
        limit,
        permits: lapsing as u32,
    };
    // Fits among the live leases, but only once nearly every lapsed one is gone.
    let (reply, first) = sim.wait_as(K, b"big", 60_000, 0, big);
    assert_eq!(reply, Reply::Blocked, "queued, not granted inline");
    assert_eq!(
        held(&sim),
        lapsing + 1,
        "no lapsed lease ended by the command"
    );
    let (reply, second) = sim.wait_as(K, b"small", 60_000, 0, sem(limit));
    assert_eq!(reply, Reply::Blocked, "behind the head");
    assert_eq!(sim.acquire_as(K, b"other", 60_000, sem(limit)), Reply::Nil);
    let mut turns = 0;
    while sim.deliver().is_empty() || sim.answers.len() < 2 {
        let before = sim.engine.stats().expired;
        assert!(sim.turn_by(START + 1_000), "no turn to come");
        turns += 1;
        let removed = (sim.engine.stats().expired - before) as usize;
        assert!(removed <= TURN_BUDGET, "turn {turns} removed {removed}");
    }
    assert!(turns > 1, "{turns} turns");
    assert_eq!(granted(&mut sim), [first, second], "in queue order");
    assert_eq!(
        owners(&mut sim),
        [b"long".to_vec(), b"big".to_vec(), b"small".to_vec()]
    );
}

/// With nobody queued, `LOCK.ACQUIRE` of a semaphore whose room takes more lapsed leases than a
/// turn ends gets nil at once and sets their removal off; it is granted once they are gone.
/// Room of at most [`MAKE_ROOM_INLINE`] lapsed leases is still made inline.
#[test]
fn an_acquire_needing_much_room_gets_nil_until_the_schedule_made_it() {
    use super::engine::MAKE_ROOM_INLINE;
    let lapsing = 4 * MAKE_ROOM_INLINE;
    let limit = lapsing as u32 + 1;
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"long", 60_000, sem(limit)));
    for i in 0..lapsing {
        // At most 1,000 new tokens per millisecond of the clock.
        sim.host.set_now(START + (i / 500) as i64);
        token(sim.acquire_as(K, format!("o{i}").as_bytes(), 100, sem(limit)));
    }
    sim.host.set_now(START + 200);
    let held = |sim: &Sim| sim.shared(K).map_or(0, |s| s.0.len());
    let some = Mode::Shared {
        limit,
        permits: MAKE_ROOM_INLINE as u32,
    };
    token(sim.acquire_as(K, b"some", 60_000, some));
    assert_eq!(
        held(&sim),
        lapsing - MAKE_ROOM_INLINE + 2,
        "inline: as many as a turn ends"
    );
    let many = Mode::Shared {
        limit,
        permits: (lapsing - MAKE_ROOM_INLINE) as u32,
    };
    let before = held(&sim);
    assert_eq!(sim.acquire_as(K, b"many", 60_000, many), Reply::Nil);
    assert_eq!(held(&sim), before, "nothing ended inline");
    sim.settle();
    assert_eq!(held(&sim), 2, "the schedule ended them");
    token(sim.acquire_as(K, b"many", 60_000, many));
}

/// A key's lapse timer goes with its last holder: keys each read once with a long lease and
/// released (or deleted behind the engine's back) leave no timer behind. Before the fix every
/// such key kept its timer and its entry until the lease would have ended (10,000 keys an hour
/// with a one-hour lease: 10,000 timers).
#[test]
fn a_key_left_without_holders_keeps_no_lapse_timer() {
    let mut sim = Sim::new(START);
    for i in 0..1_000 {
        let key = format!("k{i}");
        sim.advance(1);
        token(sim.acquire_as(key.as_bytes(), b"r", 3_600_000, READ));
        // A second lease ending later: the first one's end arms the timer.
        token(sim.acquire_as(key.as_bytes(), b"s", 3_600_001, READ));
        assert_eq!(sim.engine.lapse_timers(), 1, "armed with the key");
        sim.release(key.as_bytes(), b"r");
        if i % 2 == 0 {
            sim.release(key.as_bytes(), b"s");
        } else {
            sim.delete(key.as_bytes());
        }
        sim.settle();
        assert_eq!(sim.engine.lapse_timers(), 0, "key {i}");
    }
    // A key still held keeps its timer through a neighbour's deletion.
    token(sim.acquire_as(K, b"r", 100, READ));
    token(sim.acquire_as(K, b"s", 200, READ));
    sim.delete(b"other");
    sim.settle();
    assert_eq!(sim.engine.lapse_timers(), 1);
    assert_eq!(sim.host_timers(), 1);
}

/// One lease, or leases that end together, arm no lapse timer (issue 31: arming and stopping
/// it cost a shared acquire and its release about 4,000 instructions): the key's expiry is its
/// last lease end, so the key ends then as an exclusive lock does, and a waiter queued behind
/// it is served at that end by its own deadline timer.
#[test]
fn leases_ending_together_arm_no_lapse_timer_and_a_waiter_is_served_at_their_end() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"r", 100, READ));
    token(sim.acquire_as(K, b"s", 100, READ));
    assert_eq!(
        sim.engine.lapse_timers(),
        0,
        "one lease end: no lapse timer"
    );
    assert_eq!(
        sim.shared(K).and_then(|(_, at)| at),
        Some(START + 100),
        "the key expires at it"
    );
    let (reply, w) = sim.wait(K, b"w", 60_000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.advance(99);
    assert!(granted(&mut sim).is_empty(), "not before the leases end");
    sim.advance(2);
    assert_eq!(granted(&mut sim), [w], "served at the leases' end");
    // A lease ending later arms it; the earlier one's release leaves one end, and the key's
    // end again serves the next waiter.
    let key2 = &b"two"[..];
    token(sim.acquire_as(key2, b"a", 100, READ));
    sim.advance(1);
    token(sim.acquire_as(key2, b"b", 100, READ));
    assert_eq!(
        sim.engine.lapse_timers(),
        1,
        "two ends: armed for the first"
    );
    sim.release(key2, b"b");
    let (reply, w2) = sim.wait(key2, b"w2", 60_000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.advance(100);
    assert!(
        granted(&mut sim).contains(&w2),
        "served at the last lease's end"
    );
}

// --- No lapse timer while every lease ends with the key (issue 31): where it must still be armed ---

/// How many holder records the key keeps, lapsed ones included (0 when the key is gone).
fn records(sim: &Sim, key: &[u8]) -> usize {
    sim.shared(key).map_or(0, |s| s.0.len())
}

/// A single reader's lease ends with the key (its TTL): gone at the end, no timer, nothing left.
#[test]
fn lapse_timer_a_single_readers_key_ends_with_its_lease_and_leaves_nothing() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"r", 100, READ));
    assert_eq!(sim.engine.lapse_timers(), 0);
    assert_eq!(sim.shared(K).map(|s| s.1), Some(Some(START + 100)));
    sim.advance(100);
    assert_eq!(
        owners(&mut sim),
        [b"r".to_vec()],
        "alive through its last ms"
    );
    sim.advance(1);
    sim.expire_all();
    sim.settle();
    assert_eq!(records(&sim, K), 0, "the key went at its lease end");
    assert_eq!(sim.engine.lapse_timers(), 0);
    assert_eq!(sim.host_timers(), 0);
    assert_eq!(sim.engine.stats().expired, 1);
}

/// PERSIST (then nothing touches the key): the Leases job caps the TTL back to the lease end.
/// A longer PEXPIRE likewise; a shorter one ends the hold when it fires.
#[test]
fn lapse_timer_persist_or_pexpire_of_a_single_reader_untouched_after() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"r", 100, READ));
    sim.user_expiry(K, None);
    sim.settle();
    assert_eq!(
        sim.shared(K).map(|s| s.1),
        Some(Some(START + 100)),
        "capped"
    );
    sim.advance(101);
    sim.expire_all();
    assert_eq!(records(&sim, K), 0, "gone at the lease end");
    // Longer PEXPIRE.
    let k2 = &b"k2"[..];
    token(sim.acquire_as(k2, b"r", 100, READ));
    sim.user_expiry(k2, Some(sim.now() + 60_000));
    sim.settle();
    assert_eq!(sim.shared(k2).map(|s| s.1), Some(Some(sim.now() + 100)));
    sim.advance(101);
    sim.expire_all();
    assert_eq!(records(&sim, k2), 0);
    // Shorter PEXPIRE, with a writer waiting: served when it fires.
    let k3 = &b"k3"[..];
    token(sim.acquire_as(k3, b"r", 10_000, READ));
    let (reply, w) = sim.wait(k3, b"w", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.user_expiry(k3, Some(sim.now() + 50));
    sim.settle();
    sim.advance(51);
    sim.expire_all();
    sim.settle();
    assert_eq!(granted(&mut sim), [w], "served when the shorter TTL fired");
    assert_eq!(sim.engine.lapse_timers(), 0);
}

/// A semaphore's only holder: a waiter needing its permit is served the ms after the lease
/// ends, by its deadline timer alone.
#[test]
fn lapse_timer_a_semaphores_only_holder_lapses_and_its_permit_is_handed_on() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"a", 100, sem(1)));
    let (reply, w) = sim.wait_as(K, b"b", 1000, 0, sem(1));
    assert_eq!(reply, Reply::Blocked);
    let (reply, e) = sim.wait(K, b"e", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.advance(100);
    assert!(granted(&mut sim).is_empty());
    sim.advance(1);
    assert_eq!(granted(&mut sim), [w], "within the ms after the lease end");
    assert_eq!(owners(&mut sim), [b"b".to_vec()]);
    sim.advance(1002);
    assert_eq!(granted(&mut sim), [w, e]);
    assert_eq!(sim.engine.lapse_timers(), 0);
}

/// Two leases ending apart, the earlier one renewed to end with the other: the stale timer
/// fires harmlessly and the timer count returns to 0; the key ends at the shared end.
#[test]
fn lapse_timer_renewed_to_the_same_end_leaves_no_timer_behind() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"a", 100, READ));
    token(sim.acquire_as(K, b"b", 300, READ));
    assert_eq!(sim.engine.lapse_timers(), 1);
    sim.advance(50);
    token(sim.renew(K, b"a", 250));
    assert_eq!(sim.shared(K).map(|s| s.1), Some(Some(START + 300)));
    sim.advance(60);
    assert_eq!(
        sim.engine.lapse_timers(),
        0,
        "the stale timer fired, not re-armed"
    );
    assert_eq!(owners(&mut sim).len(), 2);
    sim.advance(191);
    sim.expire_all();
    sim.settle();
    assert_eq!(records(&sim, K), 0);
    assert_eq!(sim.host_timers(), 0);
}

/// A lost answer's hold is revoked and the queue goes on: the holder granted in its place
/// ends LATER than the lease still held, which had no timer (every lease ended together when
/// last looked at). `Engine::revoke` grants without `note_lapsed`, so nothing arms the timer
/// for the earlier lease: it lingers (counted, listed as a record, unjournaled) until the new
/// grant's end, the key's TTL. (Found attacking the skipped timer; fixed: `revoke` runs
/// `note_lapsed` after its grant pass.)
#[test]
fn lapse_timer_a_revoked_grant_passing_on_to_a_longer_lease_leaves_the_shorter_unremoved() {
    let mut sim = Sim::new(START);
    token(sim.acquire_as(K, b"x", 1000, sem(2)));
    token(sim.acquire_as(K, b"y", 1000, sem(2)));
    let (_, l) = sim.wait_as(K, b"l", 1000, 0, sem(2));
    let (_, w2) = sim.wait_as(K, b"w2", 5000, 0, sem(2));
    // y leaves: l is granted (its lease ends with x's); its client hangs up before the answer.
    assert_eq!(sim.release(K, b"y"), Reply::Integer(0));
    sim.hang_up(l);
    sim.settle();
    assert_eq!(granted(&mut sim), [w2], "the revoked grant passed on");
    assert_eq!(owners(&mut sim), [b"x".to_vec(), b"w2".to_vec()]);
    // x's lease ends at START + 1000; it must be removed from the ms after.
    sim.advance(1005);
    assert_eq!(
        owners(&mut sim),
        [b"w2".to_vec()],
        "x lapsed for every command"
    );
    assert_eq!(
        records(&sim, K),
        1,
        "x's lapsed lease should be removed from the ms after it lapsed (no command touched \
         the key); lapse timers: {}",
        sim.engine.lapse_timers()
    );
    assert_eq!(sim.engine.stats().expired, 1);
}

/// The same gap, older than the skipped timer: an exclusive grant revoked hands the key to
/// readers whose leases end apart, and no lapse timer was armed for the first of them
/// (`Engine::revoke` never called `note_lapsed`).
#[test]
fn lapse_timer_a_revoked_exclusive_grant_passing_on_to_readers_arms_no_timer() {
    let mut sim = Sim::new(START);
    token(sim.acquire(K, b"w", 1000));
    let (_, l) = sim.wait(K, b"l", 1000, 0);
    let (_, r1) = sim.wait_as(K, b"r1", 100, 0, READ);
    let (_, r2) = sim.wait_as(K, b"r2", 5000, 0, READ);
    assert_eq!(sim.release(K, b"w"), Reply::Integer(0));
    sim.hang_up(l);
    sim.settle();
    assert_eq!(granted(&mut sim), [r1, r2]);
    sim.advance(105);
    assert_eq!(owners(&mut sim), [b"r2".to_vec()]);
    assert_eq!(
        records(&sim, K),
        1,
        "r1's lapsed lease should be removed from the ms after (lapse timers: {})",
        sim.engine.lapse_timers()
    );
}

/// A replica receives a single reader's holder and then the user's PERSIST (the master died
/// before its Leases job capped the TTL, or it was paused); promoted, it must still end the
/// lease: the replica's lapse timer fires, remembers the key, and the promotion removes the
/// lapsed lease. (A replica that skipped the timer for one lease kept the key for good; hence
/// the timer is skipped on masters only. Real servers: tests/it/shared/lapse_timers.rs.)
#[test]
fn lapse_timer_a_replica_promoted_with_a_persisted_single_lease_ends_it() {
    use super::host::State;
    let mut sim = Sim::new(START);
    sim.set_state(State::Replica);
    let holder = Holder::new(7, START + 100, START);
    assert_eq!(sim.apply_holder(K, 0, b"r", holder), Reply::Ok);
    sim.user_expiry(K, None);
    sim.settle();
    assert_eq!(
        sim.shared(K).map(|s| s.1),
        Some(None),
        "PERSIST on the replica"
    );
    sim.advance(200);
    sim.set_state(State::Master);
    sim.start_grace(0);
    sim.advance(1000);
    sim.expire_all();
    sim.settle();
    assert_eq!(
        owners(&mut sim),
        Vec::<Vec<u8>>::new(),
        "lapsed for every command"
    );
    assert_eq!(
        records(&sim, K),
        0,
        "the promoted master keeps a key with a lapsed lease and no TTL forever"
    );
}

/// A shared key loaded without a TTL (an RDB forked between a user's PERSIST and the Leases
/// job that caps it: `MULTI; PERSIST k; BGSAVE; EXEC`), its only lease ending later: the load
/// must still arm its timer, or nothing ever ends it (the timer is skipped only while the key's
/// expiry is the lease end).
#[test]
fn lapse_timer_a_single_lease_loaded_without_a_ttl_is_ended() {
    use super::host::KeyId;
    let mut sim = Sim::new(START);
    let mut shared = super::shared::Shared::new(0);
    shared
        .insert(b"r", Holder::new(7, START + 100, START))
        .expect("room");
    sim.bring_shared(K, shared);
    // The loaded key has no TTL (what the RDB held).
    sim.set_expiry(K, None);
    sim.engine.loaded(
        &mut sim.host,
        vec![KeyId {
            db: 0,
            name: K.into(),
        }],
    );
    sim.settle();
    sim.advance(1000);
    sim.expire_all();
    sim.settle();
    assert_eq!(
        owners(&mut sim),
        Vec::<Vec<u8>>::new(),
        "lapsed for every command"
    );
    assert_eq!(
        records(&sim, K),
        0,
        "a loaded single lease without a TTL is never removed (lapse timers: {})",
        sim.engine.lapse_timers()
    );
}

/// A downgraded exclusive lock is one shared lease ending at the lock's expiry: the key ends
/// then and a queued writer is served.
#[test]
fn lapse_timer_a_downgraded_lock_ends_with_its_key() {
    let mut sim = Sim::new(START);
    token(sim.acquire(K, b"o", 100));
    token(sim.downgrade(K, b"o"));
    assert_eq!(sim.engine.lapse_timers(), 0);
    let (reply, w) = sim.wait(K, b"w", 1000, 0);
    assert_eq!(reply, Reply::Blocked);
    sim.advance(101);
    assert_eq!(granted(&mut sim), [w]);
    assert_eq!(sim.engine.lapse_timers(), 0);
}
