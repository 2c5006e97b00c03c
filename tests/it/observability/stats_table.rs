//! Resizing the statistics table keeps what fits.
//!
//! Found in attack round 7. Each test says what it attacks and what must hold; those that failed
//! when written say what was measured. All waits end on an event within generous bounds: a busy
//! two-core machine must not fail them.
use relock_testkit as common;
use relock_testkit::cmd;

use common::reply::{config_set, text};
use common::{acquire, Server};
use redis::{Connection, Value};

const LONG: i64 = 600_000;

/// Found in attack round 7.
///
/// Journal and stats / `CONFIG SET relock.stats-keys` at runtime, up and down, with three
/// contended keys in the table. docs: the table keeps "`relock.stats-keys` keys at most", "every
/// key whose true total is above the table's smallest is in the table"; `LOCK.STATS RESET`
/// clears it (and `CONFIG RESETSTAT` does not). The journal's own size setting says what a
/// Redis user expects of such a setting: "Shrinking it drops the oldest entries" (as
/// `slowlog-max-len` does), nothing else.
///
/// Must hold: growing the table keeps every key; shrinking it to 2 keeps the 2 hottest.
///
/// Measured (every server): any change of the setting, even growing it from 1000 to 2000,
/// empties the table (`Contention::set_capacity` resets it).
#[test]
fn stats_resizing_the_table_keeps_what_fits() {
    let server = Server::start();
    let mut c = server.conn();
    // Contention: k3 three nil acquires, k2 two, k1 one.
    for (key, times) in [("k1", 1), ("k2", 2), ("k3", 3)] {
        acquire(&mut c, key, "holder", LONG);
        for _ in 0..times {
            let nil: Option<i64> = cmd!("LOCK.ACQUIRE", key, "other", LONG)
                .query(&mut c)
                .unwrap();
            assert_eq!(nil, None);
        }
    }
    let keys = |c: &mut Connection| -> Vec<String> {
        let v: Value = cmd!("LOCK.STATS", "COUNT", 100).query(c).unwrap();
        let Value::Array(items) = v else {
            return vec![];
        };
        let mut k: Vec<String> = items
            .iter()
            .map(|e| match e {
                Value::Array(f) => text(&f[1]),
                other => panic!("{other:?}"),
            })
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(&mut c), ["k1", "k2", "k3"]);
    config_set(&mut c, "relock.stats-keys", 2000);
    let after_growing = keys(&mut c);
    config_set(&mut c, "relock.stats-keys", 2);
    let after_shrinking = keys(&mut c);
    assert_eq!(
        (after_growing, after_shrinking),
        (
            vec!["k1".to_string(), "k2".into(), "k3".into()],
            vec!["k2".to_string(), "k3".into()]
        ),
        "LOCK.STATS after growing the table to 2000, then shrinking it to 2"
    );
}
