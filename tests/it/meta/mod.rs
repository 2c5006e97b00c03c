//! The project around the module: docs, examples, doc transcripts, code layout, versions,
//! `scripts/run`. They do not depend on the server's version: scripts/test-matrix skips
//! them (`--skip meta::`); Redis 7.0 runs them.

mod client_cases;
mod docs;
mod examples;
mod layout;
mod run_script;
mod suite_rules;
mod transcripts;
mod version;
