//! The module's integration tests, one binary by concern. Every test starts its own
//! `redis-server` with the module (relock-testkit's guards, on free ports), so the tests run
//! in parallel; `REDIS_SERVER` picks the server (scripts/test-matrix runs every server of the
//! matrix). One concern: `cargo test -p relock --test it shared::`.

mod commands;
mod groups;
mod lifecycle;
mod load;
mod meta;
mod observability;
mod server;
mod shared;
mod states;
