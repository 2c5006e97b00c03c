//! The LOCK.* commands one by one: every reply and error, LOCK.WAIT's queue and hand-offs,
//! values arriving at keys with waiters, per-answer revokes, fuzzing, and what an error changes.

mod arrivals;
mod effects;
mod fenced;
mod fenced_attacks;
mod fuzz;
mod kernel;
mod observe;
mod replies;
mod revoke;
mod smoke;
mod wait;
