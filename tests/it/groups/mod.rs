//! Several keys at once (`LOCK.MACQUIRE`/`MRELEASE`/`MRENEW`), `PERMITS p`, `LOCK.DOWNGRADE`
//! and the clients of a group that go away.

mod big_groups;
mod hang_ups;
mod primitives;
