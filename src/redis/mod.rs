//! The Redis host: everything that touches the Redis module API, and so every FFI `unsafe` of
//! the crate, each block with a `// SAFETY:` comment.
//!
//! - [`commands`]: the `LOCK.*` commands: argument parsing, calling the engine, replies.
//! - [`host`]: the engine's [`Host`](crate::lock::Host) and [`Key`](crate::lock::Key) on Redis:
//!   keys, expiry, effects for replicas and the AOF, keyspace events, timers.
//! - [`clients`]: blocked clients (`LOCK.WAIT`) and the timer callback.
//! - [`events`]: keyspace notifications and server events reported to the engine;
//!   [`unlinked`]: why a lock went away behind the engine's back, for the journal.
//! - [`datatype`]: the `relock-lk` data type (RDB, AOF rewrite, DUMP/RESTORE, memory).
//! - [`effects`]: lock changes carried out to replicas and the AOF (and into AOF rewrites).
//! - [`globals`]: the module's global state, each item with its rules.
//! - [`server`], [`acl`], [`cluster`]: the server's state, ACL re-checks, cluster redirects.
//! - [`migration`]: Valkey 9's atomic slot migration (which slots are moving in or out).
//! - [`registration`], [`info`]: the command table and the `INFO relock` section.
//! - [`config`]: the `relock.*` module configs.

/// Calls a Redis module API function. `init` has checked that every function this module uses
/// exists on the running server, so the `None` arm cannot be reached after a successful load.
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?)) => {
        match redis_module::raw::$name {
            Some(f) => f($($arg),*),
            None => $crate::redis::ffi::missing_api(stringify!($name)),
        }
    };
}

pub mod acl;
pub mod clients;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod datatype;
pub mod effects;
pub mod events;
pub mod fenced;
pub mod ffi;
pub mod globals;
pub mod host;
pub mod info;
pub mod init;
pub mod migration;
pub mod registration;
pub mod replies;
pub mod server;
pub mod unlinked;
