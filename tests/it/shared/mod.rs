//! Shared holds: read-write locks and counting semaphores, their queues, permits, downgrades,
//! revokes and lapse timers.

mod balanced_sets;
mod downgrade;
mod downgrade_queues;
mod holds;
mod lapse_timers;
mod owner_queues;
mod permits;
mod queues;
mod revokes;
