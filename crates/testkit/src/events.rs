//! Keyspace events as a subscriber sees them: a pattern subscription on its own connection that
//! collects (channel, payload) pairs until a sentinel the test triggers after the commands under
//! test, so no test waits for events by sleeping.
#![allow(dead_code)]

use std::time::Duration;

use redis::{Connection, Value};

use crate::reply::text;

use super::Server;

/// A pattern subscription on its own connection. It speaks the protocol directly so that the
/// subscription lives as long as the struct.
pub struct Events {
    conn: Connection,
}

impl Events {
    /// Subscribes to `pattern` (e.g. `__keyevent@0__:*`); returns once the server confirmed it.
    pub fn subscribe(server: &Server, pattern: &str) -> Events {
        let mut conn = server.conn();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.send_packed_command(&redis::cmd("PSUBSCRIBE").arg(pattern).get_packed_command())
            .unwrap();
        let confirm = conn.recv_response().expect("PSUBSCRIBE confirmation");
        let Value::Array(items) = &confirm else {
            panic!("PSUBSCRIBE replied {confirm:?}")
        };
        assert_eq!(text(&items[0]), "psubscribe");
        Events { conn }
    }

    /// Messages until (and without) the first one about the key `sentinel`, which the caller
    /// triggers after the commands under test.
    pub fn until_sentinel(&mut self) -> Vec<(String, String)> {
        let mut got = Vec::new();
        loop {
            let msg = self
                .conn
                .recv_response()
                .unwrap_or_else(|e| panic!("no event before the read timeout ({e}); got {got:?}"));
            let Value::Array(items) = &msg else {
                panic!("pub/sub message {msg:?}")
            };
            assert_eq!(text(&items[0]), "pmessage", "{msg:?}");
            let channel = text(&items[2]);
            let payload = text(&items[3]);
            if payload == "sentinel" || channel.ends_with(":sentinel") {
                return got;
            }
            got.push((channel, payload));
        }
    }
}

/// A `__keyevent@0__` message: (channel of `event`, `key`).
pub fn keyevent(event: &str, key: &str) -> (String, String) {
    (format!("__keyevent@0__:{event}"), key.to_string())
}
