//! `LOCK.DOWNGRADE` and the semaphore limit a waiter sets.
//!
//! Found in attack round 5. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use std::time::Duration;

use common::raw::{Raw, QUIET};
use common::reply::{error, fields, int, text};
use common::{acquire, eventually, info_field, Server};
use redis::Value;

const LONG: i64 = 60_000;

/// Found in attack round 5.
///
/// Downgrade / limits of waiters: the key's limit "is set by the first shared request (hold or
/// waiter) and lasts while any shared hold or shared waiter remains, exclusive phases
/// included", and `LOCK.DOWNGRADE` is "allowed only on a key with no limit (`ERR lock has
/// another limit (n)` otherwise)". An exclusive holder with a `SHARED LIMIT 2` waiter queued is
/// on a key whose limit is 2: the downgrade must be refused and change nothing.
///
/// Measured: `LOCK.DOWNGRADE` answered the token, the key became a read lock without a limit,
/// and the queued semaphore waiter (which asked with the key's own limit) was thrown out with
/// `ERR lock has another limit (0)`. `decide::downgrade` looks at the holds only, never at the
/// queue. Failed when written on every server (Redis 7.0, 8.2, Valkey 8.1, 9.1).
#[test]
fn downgrade_refused_while_a_semaphore_waiter_sets_the_limit() {
    let server = Server::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "d", "writer", LONG);
    let mut waiter = Raw::connect(&server);
    waiter.send(&[
        b"LOCK.WAIT",
        b"d",
        b"sem-1",
        b"60000",
        b"0",
        b"SHARED",
        b"LIMIT",
        b"2",
    ]);
    assert!(
        eventually(Duration::from_secs(10), || info_field(&mut c, "waiters")
            == 1),
        "the semaphore waiter queued"
    );
    // The key's limit is 2 now: another shared request without it is refused.
    let e = error(&mut c, cmd!("LOCK.ACQUIRE", "d", "other", LONG, "SHARED"));
    assert!(e.contains("lock has another limit (2)"), "{e}");
    let downgrade: redis::RedisResult<Value> = cmd!("LOCK.DOWNGRADE", "d", "writer").query(&mut c);
    let waiter_got = waiter.read_within(QUIET);
    let info = fields(&cmd!("LOCK.INFO", "d").query::<Value>(&mut c).unwrap());
    let (mode, waiters) = (text(&info["mode"]), int(&info["waiters"]));
    assert!(
        matches!(&downgrade, Err(e) if e.to_string().contains("lock has another limit (2)")),
        "LOCK.DOWNGRADE with a LIMIT 2 waiter queued answered {downgrade:?}; the waiter got \
         {waiter_got:?}"
    );
    assert_eq!(waiter_got, None, "the waiter stays queued");
    assert_eq!(
        (mode.as_str(), waiters),
        ("exclusive", 1),
        "nothing changed"
    );
    assert_eq!(common::lock_info(&mut c, "d").map(|i| i.token), Some(token));
}
