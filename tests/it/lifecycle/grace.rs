//! The restart grace (`relock.restart-grace-ms`): a wait that cannot block answers like
//! acquire, and a reload or a flush inside the grace keeps its end and its queue.
//!
//! Found in attack round 5. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::raw::{Raw, Reply};
use common::reply::error;
use common::{eventually, info_field, Server};
use redis::Value;

/// Found in attack round 5.
///
/// Restart grace / transactions: `LOCK.WAIT` inside `MULTI` or a script "does not block: it
/// behaves as `LOCK.ACQUIRE`", and in the grace `LOCK.ACQUIRE` of a free key answers
/// `TRYAGAIN relock restart grace, <ms> ms left`. A non-blocking `LOCK.WAIT` in the grace
/// answers nil instead, the answer for "another owner holds it": a client cannot tell a grace
/// from a taken lock (relock-client and the docs tell a master in its grace by the TRYAGAIN
/// message), and `LOCK.STATS` counts a contention on a key nobody holds.
///
/// Measured: in a 60 s grace, on a free key, `MULTI; LOCK.WAIT k o 1000 0; LOCK.ACQUIRE k o
/// 1000; EXEC` answered `[nil, TRYAGAIN ...]`, and `EVAL "return redis.call('LOCK.WAIT', ...)"`
/// nil. Expected: TRYAGAIN from both, as from `LOCK.ACQUIRE`. Failed when written on every
/// server (Redis 7.0, 8.2, Valkey 8.1, 9.1).
#[test]
fn grace_a_wait_that_cannot_block_answers_tryagain_like_acquire() {
    let server = Server::with_args(&["--relock.restart-grace-ms", "60000"]);
    let mut c = server.conn();
    assert!(info_field(&mut c, "grace_left_ms") > 0, "in the grace");
    let mut raw = Raw::connect(&server);
    for words in [
        &[&b"MULTI"[..]][..],
        &[b"LOCK.WAIT", b"k", b"o", b"1000", b"0"],
        &[b"LOCK.ACQUIRE", b"k", b"o", b"1000"],
        &[b"EXEC"],
    ] {
        raw.send(words);
    }
    for _ in 0..3 {
        raw.read_within(Duration::from_secs(10))
            .expect("OK / QUEUED");
    }
    let Some(Reply::Array(replies)) = raw.read_within(Duration::from_secs(10)) else {
        panic!("no EXEC reply")
    };
    let scripted: redis::RedisResult<Value> = cmd!(
        "EVAL",
        "return redis.call('LOCK.WAIT', KEYS[1], 'o', 1000, 0)",
        1,
        "k"
    )
    .query(&mut c);
    let grace = "relock restart grace";
    let tryagain = |r: &redis::RedisResult<Value>| {
        r.as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains(grace))
    };
    let in_multi = |r: &Reply| matches!(r, Reply::Error(e) if e.contains(grace));
    assert!(
        in_multi(&replies[1]),
        "LOCK.ACQUIRE in the grace: {:?}",
        replies[1]
    );
    assert!(
        in_multi(&replies[0]) && tryagain(&scripted),
        "LOCK.WAIT that cannot block, in the grace, on a free key: in MULTI {:?}, in EVAL \
         {scripted:?} (LOCK.ACQUIRE: {:?})",
        replies[0],
        replies[1]
    );
}

/// Found in attack round 5.
///
/// Restart grace / reloads (held): a `DEBUG RELOAD` and a `FLUSHALL` during the grace neither
/// end it early nor lose its end: the waiter queued on a free key in the grace is granted once
/// the grace is over, and not before.
#[test]
fn grace_a_reload_and_a_flush_in_the_grace_keep_its_end_and_its_queue() {
    let server = Server::with_args(&["--relock.restart-grace-ms", "3000"]);
    let mut c = server.conn();
    let mut waiter = Raw::connect(&server);
    waiter.send_wait("k", "w", 3000, 0);
    assert!(
        eventually(Duration::from_secs(10), || info_field(&mut c, "waiters")
            == 1),
        "queued in the grace"
    );
    let _: () = cmd!("DEBUG", "RELOAD").query(&mut c).unwrap();
    let _: () = cmd!("FLUSHALL").query(&mut c).unwrap();
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "other", "o", 1000));
    assert!(
        e.contains("relock restart grace"),
        "still in the grace: {e}"
    );
    let reply = waiter.read(Duration::from_secs(30));
    assert_eq!(
        info_field(&mut c, "grace_left_ms"),
        0,
        "granted {reply:?} only after the grace"
    );
    let token = reply.token() as i64;
    assert_eq!(common::lock_info(&mut c, "k").map(|i| i.token), Some(token));
}

/// Bulk fills in the tests go through `testkit::raw::pipeline`: a pipeline of new holds can
/// outrun the 1000 tokens a millisecond (a 100,000-acquire fill in `make test` met `TRYAGAIN
/// ... 1 ms left (tokens ahead of this server's clock)` on Valkey 9.1.2, 2026-12-04), and the
/// kit sends those again. Here the counter is put 300 ms ahead of the clock, so every new hold
/// of the pipeline is refused at first: all are granted in the end, above the counter, each
/// once (the tokens differ), and a renewal among them (no new token) keeps its token.
#[test]
fn a_bulk_fill_rides_out_tokens_ahead_of_the_clock() {
    let server = Server::start();
    let mut c = server.conn();
    let kept: i64 = cmd!("LOCK.ACQUIRE", "kept", "o", 600_000)
        .query(&mut c)
        .unwrap();
    let ahead = (common::now_ms() + 300) * 1000;
    let _: () = cmd!("LOCK.COUNTER", ahead).query(&mut c).unwrap();
    let refused = error(&mut c, cmd!("LOCK.ACQUIRE", "probe", "o", 600_000));
    assert!(
        refused.contains("tokens ahead of this server's clock"),
        "{refused}"
    );
    let mut fill: Vec<redis::Cmd> = (0..50)
        .map(|i| cmd!("LOCK.ACQUIRE", format!("k{i}"), "o", 600_000))
        .collect();
    fill.push(cmd!("LOCK.RENEW", "kept", "o", 600_000));
    let mut raw = Raw::connect(&server);
    common::raw::pipeline_cmds(&mut raw, &fill, |r| matches!(r, Reply::Int(_)));
    let mut tokens = Vec::new();
    for i in 0..50 {
        let token: i64 = cmd!("LOCK.RENEW", format!("k{i}"), "o", 600_000)
            .query(&mut c)
            .unwrap();
        assert!(token > ahead, "k{i}: token {token}, not above {ahead}");
        tokens.push(token);
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 50, "one token each");
    let renewed: i64 = cmd!("LOCK.RENEW", "kept", "o", 600_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, kept);
}
