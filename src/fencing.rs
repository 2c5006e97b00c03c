//! The server's fencing-token counter (one per server, shared by every key and db).

use std::sync::Mutex;

use crate::lock::{SystemClock, Tokens};

static TOKENS: Mutex<Tokens> = Mutex::new(Tokens::new());

fn with<T>(f: impl FnOnce(&mut Tokens) -> T) -> T {
    // A poisoned lock only means a panic elsewhere; the counter itself is always consistent.
    let mut tokens = TOKENS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut tokens)
}

/// A new token for a new hold; `None` once the 2^53 token space is exhausted.
pub fn issue() -> Option<u64> {
    with(|t| t.issue(&SystemClock))
}

/// Records a token that exists elsewhere (RDB, AOF, replication stream).
pub fn observe(token: u64) {
    with(|t| t.observe(token))
}

/// The largest token issued or observed.
pub fn last() -> u64 {
    with(|t| t.last())
}
