//! What outlives a command: persistence (RDB, AOF, `RESTORE`, `LOCK.APPLY`), replication,
//! the restart grace, clusters and moves between servers.

mod apply;
mod cluster;
mod corrupt_input;
mod far_expiry;
mod grace;
mod grace_changes;
mod migration;
mod moves;
mod persistence;
mod replication;
mod resilience;
mod shared_payloads;
mod shared_replicas;
