//! "Seeing what locks do": `LOCK.WAITERS`, the journal, the contention statistics.

mod journal;
mod journal_moves;
mod seeing;
mod stats;
mod stats_table;
