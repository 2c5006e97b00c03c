//! The decoders on hand-made replies: the older module's fields, both protocols, and what is
//! refused.

use std::time::Duration;

use crate::{Entry, Holder, KeyStats, LockInfo, Mode, Reply, Waiter};

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// A flat RESP2 array as the RESP3 map of the same pairs.
fn map_of(flat: Reply) -> Reply {
    let Reply::Array(items) = flat else {
        unreachable!()
    };
    Reply::Map(
        items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
    )
}

#[test]
fn info_of_a_module_before_shared_holds() {
    let v = Reply::Array(vec![
        bulk("owner"),
        bulk("me"),
        bulk("token"),
        Reply::Int(1_800_000_000_000_001),
        bulk("count"),
        Reply::Int(2),
        bulk("ttl"),
        Reply::Int(1500),
        bulk("waiters"),
        Reply::Int(3),
    ]);
    let info = LockInfo::decode(&v).unwrap().unwrap();
    assert_eq!(info.owner.as_deref(), Some(&b"me"[..]));
    assert_eq!(info.token, Some(1_800_000_000_000_001));
    assert_eq!(info.count, Some(2));
    assert_eq!(info.ttl, Some(Duration::from_millis(1500)));
    assert_eq!(info.waiters, 3);
    assert_eq!(
        (info.mode, info.holders, info.permits_free),
        (Mode::Exclusive, 1, None)
    );
    assert_eq!(LockInfo::decode(&map_of(v.clone())).unwrap().unwrap(), info);
}

fn info_of(
    owner: Reply,
    token: Reply,
    count: Reply,
    mode: &str,
    holders: i64,
    limit: i64,
) -> Reply {
    Reply::Array(vec![
        bulk("owner"),
        owner,
        bulk("token"),
        token,
        bulk("count"),
        count,
        bulk("ttl"),
        Reply::Int(900),
        bulk("waiters"),
        Reply::Int(1),
        bulk("mode"),
        bulk(mode),
        bulk("holders"),
        Reply::Int(holders),
        bulk("limit"),
        Reply::Int(limit),
    ])
}

#[test]
fn info_modes() {
    let nil = || Reply::Nil;
    let semaphore = LockInfo::decode(&info_of(nil(), nil(), nil(), "shared", 3, 5))
        .unwrap()
        .unwrap();
    assert_eq!(
        (semaphore.owner, semaphore.token, semaphore.count),
        (None, None, None)
    );
    assert_eq!(
        (semaphore.mode, semaphore.holders),
        (Mode::Shared { limit: Some(5) }, 3)
    );
    let read = info_of(nil(), nil(), nil(), "shared", 2, 0);
    assert_eq!(
        LockInfo::decode(&map_of(read)).unwrap().unwrap().mode,
        Mode::Shared { limit: None }
    );
    let exclusive = info_of(bulk("w"), Reply::Int(9), Reply::Int(1), "exclusive", 1, 1);
    let info = LockInfo::decode(&exclusive).unwrap().unwrap();
    assert_eq!((info.mode, info.token), (Mode::Exclusive, Some(9)));
    // Nonsense is an error, not a guess.
    assert!(LockInfo::decode(&info_of(nil(), nil(), nil(), "both", 1, 0)).is_err());
    assert!(LockInfo::decode(&info_of(nil(), nil(), nil(), "exclusive", 1, 1)).is_err());
    assert!(LockInfo::decode(&Reply::Array(vec![bulk("owner"), bulk("me")])).is_err());
    assert!(LockInfo::decode(&Reply::Int(1)).is_err());
    assert_eq!(LockInfo::decode(&Reply::Nil).unwrap(), None);
}

#[test]
fn holders_in_both_protocols() {
    let flat = Reply::Array(vec![
        bulk("owner"),
        bulk("a"),
        bulk("token"),
        Reply::Int(7),
        bulk("count"),
        Reply::Int(1),
        bulk("ttl"),
        Reply::Int(500),
    ]);
    let map = Reply::Map(vec![
        (bulk("owner"), bulk("b")),
        (bulk("token"), Reply::Int(8)),
        (bulk("count"), Reply::Int(2)),
        (bulk("ttl"), Reply::Int(-3)),
        (bulk("permits"), Reply::Int(2)),
    ]);
    let holders = Holder::decode_all(&Reply::Array(vec![flat, map]))
        .unwrap()
        .unwrap();
    assert_eq!(
        holders,
        [
            Holder {
                owner: b"a".to_vec(),
                token: 7,
                count: 1,
                ttl: Some(Duration::from_millis(500)),
                permits: 1,
            },
            Holder {
                owner: b"b".to_vec(),
                token: 8,
                count: 2,
                ttl: Some(Duration::ZERO),
                permits: 2,
            },
        ]
    );
    assert_eq!(Holder::decode_all(&Reply::Nil).unwrap(), None);
    assert_eq!(
        Holder::decode_all(&Reply::Array(vec![])).unwrap(),
        Some(vec![])
    );
    assert!(Holder::decode_all(&Reply::Int(1)).is_err());
    let partial = Reply::Array(vec![Reply::Array(vec![bulk("owner"), bulk("a")])]);
    assert!(Holder::decode_all(&partial).is_err());
}

#[test]
fn lists_refuse_what_is_not_a_list_of_fields() {
    for bad in [Reply::Int(3), bulk("x")] {
        assert!(Entry::decode_all(&bad).is_err());
        assert!(Waiter::decode_all(&bad).is_err());
        assert!(KeyStats::decode_all(&bad).is_err());
    }
    let odd = Reply::Array(vec![Reply::Array(vec![bulk("owner")])]);
    assert!(Entry::decode_all(&odd).is_err());
    assert_eq!(Entry::decode_all(&Reply::Array(vec![])).unwrap(), vec![]);
    assert_eq!(Waiter::decode_all(&Reply::Nil).unwrap(), vec![]);
    let e = KeyStats::decode_all(&Reply::Array(vec![Reply::Array(vec![])])).unwrap_err();
    assert_eq!((e.command(), e.why()), ("LOCK.STATS", "no field key"));
    assert_eq!(e.to_string(), "LOCK.STATS: no field key");
    // A negative token or count is no token.
    let negative = Reply::Array(vec![Reply::Array(vec![
        bulk("owner"),
        bulk("a"),
        bulk("token"),
        Reply::Int(-1),
        bulk("count"),
        Reply::Int(1),
        bulk("ttl"),
        Reply::Int(5),
    ])]);
    assert!(Holder::decode_all(&negative).is_err());
}

#[test]
fn a_whole_db_entry_has_no_owner() {
    let flushed = Reply::Array(vec![Reply::Map(vec![
        (bulk("time"), Reply::Int(10_000)),
        (bulk("owner"), bulk("")),
        (bulk("token"), Reply::Int(0)),
        (bulk("reason"), bulk("flushed")),
        (bulk("held"), Reply::Nil),
    ])]);
    let entries = Entry::decode_all(&flushed).unwrap();
    assert_eq!((entries[0].held_ms, entries[0].id), (None, 0));
    assert!(entries[0].is_whole_db());
}
