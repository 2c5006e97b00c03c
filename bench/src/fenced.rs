//! Case 17: what `LOCK.FENCED` costs over the bare command. One lock is held for the whole
//! measurement (`LOCK.ACQUIRE` with a ttl of an hour); redis-benchmark sends `SET k v` or
//! `HSET h f v` on random keys, bare or as `LOCK.FENCED lock <token> ...` with the live token.
//! Before each measurement one fenced write must answer as the bare one does and a stale token
//! must be refused; after it the server must have answered no error at all (`INFO stats`
//! `total_error_replies`) and the token must still pass, so a row never measures refusals.

use std::io;

use relock_protocol::cmd::{Acquire, Fenced};
use relock_protocol::{Ask, Command};

use crate::resp::{words, Conn, Reply};
use crate::stats;
use crate::throughput::{self, Run};

/// The lock every fenced request names; the written keys share its prefix (no hash tag).
pub const LOCK: &str = "fbench:lock";
const HOLDER: &str = "fbench-holder";
/// Far longer than any measurement, so the hold never lapses during one.
const HOLD_TTL_MS: u64 = 3_600_000;

/// The inner commands measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inner {
    Set,
    Hset,
}

impl Inner {
    pub fn name(self) -> &'static str {
        match self {
            Inner::Set => "SET",
            Inner::Hset => "HSET",
        }
    }

    /// The bare command, keys `__rand_int__` for redis-benchmark (or `probe` for the checks).
    fn args(self, key: &str) -> Vec<String> {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            Inner::Set => v(&["SET", &format!("fbench:s:{key}"), "v"]),
            Inner::Hset => v(&["HSET", &format!("fbench:h:{key}"), "f", "v"]),
        }
    }

    /// What the bare command answers on a fresh key.
    fn answered(self, reply: &Reply) -> bool {
        match self {
            Inner::Set => matches!(reply, Reply::Status(s) if s == "OK"),
            Inner::Hset => matches!(reply, Reply::Int(1)),
        }
    }
}

fn fenced_args(token: u64, bare: Vec<String>) -> Vec<String> {
    words(&Fenced {
        key: LOCK.as_bytes(),
        token,
        command: bare.iter().map(String::as_bytes).collect(),
    })
}

/// Takes the lock on an empty db and checks that a fenced `inner` runs with its token and is
/// refused with a stale one. Returns the token.
async fn hold_and_check(control: &mut Conn, inner: Inner) -> io::Result<u64> {
    control.ok(&["FLUSHALL", "SYNC"]).await?;
    let hold = Acquire {
        key: LOCK.as_bytes(),
        owner: HOLDER.as_bytes(),
        ttl_ms: HOLD_TTL_MS,
        ask: Ask::Exclusive,
    };
    let token = control
        .ok(&hold.to_args())
        .await?
        .int()
        .and_then(|t| u64::try_from(t).ok())
        .ok_or_else(|| io::Error::other("fenced: LOCK.ACQUIRE gave no token"))?;
    let stale = fenced_args(token + 1, inner.args("stale"));
    match control.cmd(&stale).await? {
        Reply::Error(e) if e.starts_with("FENCED stale token") => {}
        other => {
            return Err(io::Error::other(format!(
                "fenced: a stale token was answered {other:?}, not FENCED"
            )))
        }
    }
    let probe = fenced_args(token, inner.args("probe"));
    let reply = control.cmd(&probe).await?;
    if !inner.answered(&reply) {
        return Err(io::Error::other(format!(
            "fenced: `{}` was answered {reply:?}",
            probe.join(" ")
        )));
    }
    // The stale one ran nothing: only the probe's key and the lock exist.
    let keys = control.ok(&["DBSIZE"]).await?.int();
    if keys != Some(2) {
        return Err(io::Error::other(format!(
            "fenced: {keys:?} keys after the checks, expected the lock and the probe's"
        )));
    }
    Ok(token)
}

/// `requests` of `inner`, bare or fenced, sent by redis-benchmark (50 connections, `pipeline`
/// in flight each, keys among `keyspace`); None when redis-benchmark is not installed.
pub async fn run(
    port: u16,
    control: &mut Conn,
    inner: Inner,
    fenced: bool,
    pipeline: usize,
    requests: usize,
    keyspace: usize,
) -> io::Result<Option<Run>> {
    let token = hold_and_check(control, inner).await?;
    let bare = inner.args("__rand_int__");
    let command = if fenced {
        fenced_args(token, bare)
    } else {
        bare
    };
    let errors_before = error_replies(control).await?;
    let run =
        throughput::redis_benchmark_cpu(port, control, &command, pipeline, requests, keyspace)
            .await?;
    let Some(run) = run else {
        return Ok(None);
    };
    let errors = error_replies(control).await? - errors_before;
    if errors != 0 {
        return Err(io::Error::other(format!(
            "fenced: {errors} error replies during `{}`",
            command.join(" ")
        )));
    }
    // The hold measured under is still the same one.
    let after = fenced_args(token, Inner::Set.args("after"));
    let reply = control.cmd(&after).await?;
    if !Inner::Set.answered(&reply) {
        return Err(io::Error::other(format!(
            "fenced: after the run `{}` was answered {reply:?}",
            after.join(" ")
        )));
    }
    Ok(Some(run))
}

/// Error replies the server has sent so far (`INFO stats` `total_error_replies`).
async fn error_replies(control: &mut Conn) -> io::Result<i64> {
    stats::info_field(control, "stats", "total_error_replies")
        .await?
        .parse()
        .map_err(|_| io::Error::other("INFO stats lacks total_error_replies"))
}
