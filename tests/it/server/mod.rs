//! How the module fits into the server: ACL, command metadata, keyspace events, `INFO relock`,
//! flushes, memory kept, and the engine behind its Redis host.

mod engine_host;
mod flushes;
mod integration;
mod leaks;
