//! The server's states: write pauses, failovers, `REPLICAOF`, OOM, transactions.

mod engine_states;
mod server_states;
mod shared_holds;
mod transactions;
