//! A grant time the effect grammar takes and the RDB loader refuses: `LOCK.APPLY` accepts
//! only what the RDB loads.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use common::Server;

const LONG: i64 = 600_000;

/// Found in attack round 7.
///
/// Extreme integers / persistence: `LOCK.APPLY key owner token count GRANTED 17592186044416`
/// (2^44: the effect grammar's bound is inclusive, `args::tail`), the effect replicas and the
/// AOF receive, accepted on an exclusive lock. `rdb_load` bounds a grant time to `0..2^44`
/// (exclusive), and an exclusive hold keeps the value as given (a shared holder's is packed and
/// clamped to 2^44-1). So the server holds a value it cannot load back.
///
/// Must hold: whatever `LOCK.APPLY` accepts survives `DEBUG RELOAD` and a restart from the RDB
/// (or `LOCK.APPLY` refuses it and changes nothing).
///
/// Measured (Redis 7.0): `DEBUG RELOAD` answers `ERR Error trying to load the RDB dump`
/// ("<relock> corrupt relock value") and the dataset is gone; a `SAVE` then a restart: the
/// server exits at startup ("The RDB file contains module data for the module type 'relock',
/// that the responsible module is not able to load"); an AOF with an RDB preamble likewise.
#[test]
fn apply_accepts_only_what_the_rdb_loads() {
    let server = Server::start();
    let mut c = server.conn();
    let end = common::now_ms() + LONG;
    let applied: redis::RedisResult<String> = cmd!(
        "LOCK.APPLY",
        "g",
        "o",
        5,
        1,
        "PXAT",
        end,
        "GRANTED",
        1u64 << 44
    )
    .query(&mut c);
    let _: () = cmd!("SET", "other", "v").query(&mut c).unwrap();
    let before: i64 = cmd!("DBSIZE").query(&mut c).unwrap();
    let reload: redis::RedisResult<String> = cmd!("DEBUG", "RELOAD").query(&mut c);
    let after: i64 = cmd!("DBSIZE").query(&mut c).unwrap();
    assert!(
        reload.is_ok() && after == before,
        "LOCK.APPLY answered {applied:?}; DEBUG RELOAD answered {reload:?}, keys {before} -> {after}"
    );
}
