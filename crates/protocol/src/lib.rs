//! relock's wire, without I/O: each command's arguments ([`cmd`]: one type per `LOCK.*`
//! command, [`Command::parse`] as the module reads an argv, [`Command::to_args`] as a caller
//! writes one; [`args`] and [`bounds`] for each argument), and the replies of its read
//! commands, decoded once.
//!
//! A caller turns its Redis library's reply value into a [`Reply`] (relock-client does it for
//! redis-rs) and asks one decoder per reply: [`LockInfo::decode`] (`LOCK.INFO`),
//! [`Holder::decode_all`] (`LOCK.HOLDERS`), [`Waiter::decode_all`] (`LOCK.WAITERS`),
//! [`Entry::decode_all`] (`LOCK.HISTORY`, `LOCK.LOG`) and [`KeyStats::decode_all`]
//! (`LOCK.STATS`). Each takes RESP2's flat field/value arrays and RESP3's maps alike, skips the
//! fields it does not know (a newer module may add some), and refuses a reply without the
//! fields it needs ([`DecodeError`]) rather than guessing.
//!
//! No I/O and no Redis library: the crate is the module's reply format, as
//! `spec/client-cases/replies.json` samples it.
//!
//! ```
//! use relock_protocol::{LockInfo, Mode, Reply};
//!
//! let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
//! let reply = Reply::Map(vec![
//!     (bulk("owner"), bulk("alice")),
//!     (bulk("token"), Reply::Int(1001)),
//!     (bulk("count"), Reply::Int(1)),
//!     (bulk("ttl"), Reply::Int(-1)),
//!     (bulk("waiters"), Reply::Int(0)),
//! ]);
//! let info = LockInfo::decode(&reply).unwrap().unwrap();
//! assert_eq!((info.token, info.ttl, info.mode), (Some(1001), None, Mode::Exclusive));
//! ```

#![deny(missing_docs)]

pub mod args;
pub mod bounds;
pub mod cmd;

pub use args::ArgError;
pub use cmd::{Argv, Ask, Command};

use std::fmt;
use std::time::Duration;

/// A server's reply, as RESP2 or RESP3 has it.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Nil (a missing key, a null).
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string, as bytes.
    Bulk(Vec<u8>),
    /// A simple string (`+OK`).
    Simple(String),
    /// A verbatim string (RESP3), without its format.
    Verbatim(String),
    /// An array (RESP2 maps come as arrays of pairs).
    Array(Vec<Reply>),
    /// A set (RESP3).
    Set(Vec<Reply>),
    /// A map (RESP3), its pairs in the order they came.
    Map(Vec<(Reply, Reply)>),
    /// A double (RESP3).
    Double(f64),
    /// A boolean (RESP3).
    Boolean(bool),
    /// An error reply inside a reply (an array's element, for instance), as text.
    Error(String),
    /// A big number (RESP3), as its digits.
    BigNumber(String),
    /// Something else (an attribute, a push message), as the client described it.
    Other(String),
}

impl Reply {
    /// The reply as text, when it is a string of any kind (bulk strings lossily as UTF-8).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Reply::Simple(s) | Reply::Verbatim(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The reply as bytes, when it is a string of any kind.
    fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            Reply::Simple(s) | Reply::Verbatim(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
}

/// A reply that is not what the command answers: which command, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    command: &'static str,
    why: String,
}

impl DecodeError {
    fn new(command: &'static str, why: impl fmt::Display) -> DecodeError {
        DecodeError {
            command,
            why: why.to_string(),
        }
    }

    /// The command whose reply it is (`LOCK.HISTORY` for a journal of either command).
    pub fn command(&self) -> &str {
        self.command
    }

    /// What is wrong with the reply (a field missing, a value of the wrong type).
    pub fn why(&self) -> &str {
        &self.why
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.command, self.why)
    }
}

impl std::error::Error for DecodeError {}

/// How a lock is held, or how a waiter asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// One owner at a time (a module without shared holds sends no mode: this).
    #[default]
    Exclusive,
    /// Several owners at once; with a limit, a counting semaphore.
    Shared {
        /// At most this many holders at once; `None` (the module's limit 0): no limit.
        limit: Option<u32>,
    },
}

impl Mode {
    /// The mode of the fields `mode` and `limit` (a limit of 0 is no limit).
    fn of(
        command: &'static str,
        mode: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Mode, DecodeError> {
        match (mode, limit) {
            (None | Some("exclusive"), _) => Ok(Mode::Exclusive),
            (Some("shared"), Some(0) | None) => Ok(Mode::Shared { limit: None }),
            (Some("shared"), Some(n)) => u32::try_from(n)
                .map(|n| Mode::Shared { limit: Some(n) })
                .map_err(|_| DecodeError::new(command, format!("limit {n}"))),
            (Some(other), _) => Err(DecodeError::new(command, format!("mode {other:?}"))),
        }
    }
}

/// The state of a lock on one server, as `LOCK.INFO` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner id; `None` for a shared lock.
    pub owner: Option<Vec<u8>>,
    /// The hold's fencing token; `None` for a shared lock.
    pub token: Option<u64>,
    /// The reentrancy count (>= 1); `None` for a shared lock.
    pub count: Option<u64>,
    /// The time left before it expires (a shared lock: before its latest lease ends); `None`
    /// when it has no expiry (the module's ttl -1: a `PERSIST`ed key).
    pub ttl: Option<Duration>,
    /// How many clients wait for it.
    pub waiters: u64,
    /// How it is held.
    pub mode: Mode,
    /// How many holds it has (1 for an exclusive lock, and from a module that does not say).
    pub holders: u64,
    /// A semaphore's free permits (`permits_free`; -1 for a read lock, which has no limit);
    /// `None` from a module that does not say.
    pub permits_free: Option<i64>,
}

/// One holder of a lock, as `LOCK.HOLDERS` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its owner id.
    pub owner: Vec<u8>,
    /// Its fencing token.
    pub token: u64,
    /// Its reentrancy count (>= 1).
    pub count: u64,
    /// The time left before its hold ends; `None` when it has no expiry (ttl -1).
    pub ttl: Option<Duration>,
    /// How many permits of a semaphore it holds (1 when the module does not say).
    pub permits: u64,
}

/// One waiter of a lock's queue, as `LOCK.WAITERS` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Its owner id.
    pub owner: Vec<u8>,
    /// The hold it asks for.
    pub mode: Mode,
    /// How many permits it asks for (1 when the module does not say).
    pub permits: u64,
    /// The waiting connection's id, as `CLIENT LIST` shows it.
    pub client: i64,
    /// How long it has waited, in ms.
    pub waited_ms: i64,
    /// How long it waits at most, in ms; `None`: no timeout (the module's -1).
    pub timeout_ms: Option<i64>,
    /// The ttl it asks for, in ms.
    pub ttl_ms: i64,
}

/// One entry of the journal, as `LOCK.HISTORY` and `LOCK.LOG` report it: a hold that ended
/// other than by its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id, increasing (0 when the module does not say).
    pub id: u64,
    /// When, in Unix ms by the server's clock.
    pub time_ms: i64,
    /// The db of its key.
    pub db: i64,
    /// Its key; empty for a whole db (a flush or a swap).
    pub key: Vec<u8>,
    /// The owner whose hold ended; empty for a whole db.
    pub owner: Vec<u8>,
    /// That hold's token (0 for a whole db).
    pub token: u64,
    /// Why it ended (`expired`, `forcereleased`, `flushed`, ...; kept as sent).
    pub reason: String,
    /// From grant to end, in ms; `None` for a hold granted before the server started.
    pub held_ms: Option<i64>,
    /// Who ended it, as `CLIENT LIST` shows a client; empty where the server cannot tell.
    pub client_info: String,
    /// How many waited for the key then.
    pub waiters: u64,
}

impl Entry {
    /// An entry for a whole db (a flush or a swap), not one hold.
    pub fn is_whole_db(&self) -> bool {
        self.owner.is_empty() && matches!(self.reason.as_str(), "flushed" | "swapped")
    }
}

/// One key's wait statistics, as `LOCK.STATS` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyStats {
    /// The key.
    pub key: Vec<u8>,
    /// Its db.
    pub db: i64,
    /// Waits that began.
    pub waits: i64,
    /// Waits that ended with the lock.
    pub granted: i64,
    /// Waits that timed out.
    pub timeouts: i64,
    /// Requests that found the key held.
    pub contended: i64,
    /// The time waited, in ms, all waits together.
    pub wait_ms_total: i64,
    /// How much `wait_ms_total` may overstate (the top-k's error bound; 0 when not said).
    pub error: i64,
    /// The longest wait, in ms.
    pub wait_ms_max: i64,
}

/// A reply's field/value pairs: a map under RESP3, a flat array under RESP2.
struct Fields<'a> {
    command: &'static str,
    pairs: Vec<(String, &'a Reply)>,
}

impl<'a> Fields<'a> {
    fn of(command: &'static str, reply: &'a Reply) -> Result<Fields<'a>, DecodeError> {
        let raw: Vec<(&Reply, &Reply)> = match reply {
            Reply::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
            Reply::Array(items) if items.len() % 2 == 0 => {
                items.chunks(2).map(|p| (&p[0], &p[1])).collect()
            }
            other => return Err(DecodeError::new(command, format!("{other:?}"))),
        };
        let pairs = raw
            .into_iter()
            .map(|(k, v)| {
                k.as_text()
                    .map(|k| (k, v))
                    .ok_or_else(|| DecodeError::new(command, format!("field name {k:?}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Fields { command, pairs })
    }

    fn get(&self, name: &str) -> Option<&'a Reply> {
        self.pairs.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    fn missing(&self, name: &str) -> DecodeError {
        DecodeError::new(self.command, format!("no field {name}"))
    }

    /// An integer field (an integer, or a string of digits); `None` when absent or nil.
    fn int(&self, name: &str) -> Result<Option<i64>, DecodeError> {
        match self.get(name) {
            None | Some(Reply::Nil) => Ok(None),
            Some(Reply::Int(n)) => Ok(Some(*n)),
            Some(v) => v
                .as_text()
                .and_then(|t| t.parse().ok())
                .map(Some)
                .ok_or_else(|| DecodeError::new(self.command, format!("{name}: {v:?}"))),
        }
    }

    fn need_int(&self, name: &str) -> Result<i64, DecodeError> {
        self.int(name)?.ok_or_else(|| self.missing(name))
    }

    /// A count or token field: a non-negative integer.
    fn uint(&self, name: &str) -> Result<Option<u64>, DecodeError> {
        self.int(name)?
            .map(|n| {
                u64::try_from(n).map_err(|_| DecodeError::new(self.command, format!("{name}: {n}")))
            })
            .transpose()
    }

    fn need_uint(&self, name: &str) -> Result<u64, DecodeError> {
        self.uint(name)?.ok_or_else(|| self.missing(name))
    }

    /// A string field, as bytes; `None` when absent or nil.
    fn bytes(&self, name: &str) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.get(name) {
            None | Some(Reply::Nil) => Ok(None),
            Some(v) => v
                .as_bytes()
                .map(|b| Some(b.to_vec()))
                .ok_or_else(|| DecodeError::new(self.command, format!("{name}: {v:?}"))),
        }
    }

    fn need_bytes(&self, name: &str) -> Result<Vec<u8>, DecodeError> {
        self.bytes(name)?.ok_or_else(|| self.missing(name))
    }

    fn text(&self, name: &str) -> Result<Option<String>, DecodeError> {
        Ok(self
            .bytes(name)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }
}

/// A ttl as the module answers it: ms left, or -1 for no expiry (`None`).
fn ttl(ms: i64) -> Option<Duration> {
    (ms != -1).then(|| Duration::from_millis(ms.max(0).unsigned_abs()))
}

/// The entries of a list reply (each a field/value reply); nil is an empty list.
fn list<'a>(command: &'static str, reply: &'a Reply) -> Result<&'a [Reply], DecodeError> {
    match reply {
        Reply::Array(items) | Reply::Set(items) => Ok(items),
        Reply::Nil => Ok(&[]),
        other => Err(DecodeError::new(command, format!("{other:?}"))),
    }
}

impl LockInfo {
    /// `LOCK.INFO`'s reply; `None` when there is no lock.
    pub fn decode(reply: &Reply) -> Result<Option<LockInfo>, DecodeError> {
        const CMD: &str = "LOCK.INFO";
        if *reply == Reply::Nil {
            return Ok(None);
        }
        let f = Fields::of(CMD, reply)?;
        // The five first fields are always there (nil for a shared lock's holder fields).
        for name in ["owner", "token", "count", "ttl", "waiters"] {
            if f.get(name).is_none() {
                return Err(f.missing(name));
            }
        }
        let mode = Mode::of(CMD, f.text("mode")?.as_deref(), f.int("limit")?)?;
        let (owner, token, count) = (f.bytes("owner")?, f.uint("token")?, f.uint("count")?);
        // An exclusive lock has its holder in the first fields; a shared one has none there.
        if mode == Mode::Exclusive && (owner.is_none() || token.is_none() || count.is_none()) {
            return Err(DecodeError::new(
                CMD,
                "an exclusive lock without owner, token or count",
            ));
        }
        Ok(Some(LockInfo {
            owner,
            token,
            count,
            ttl: ttl(f.need_int("ttl")?),
            waiters: f.need_uint("waiters")?,
            mode,
            holders: f.uint("holders")?.unwrap_or(1),
            permits_free: f.int("permits_free")?,
        }))
    }
}

impl Holder {
    /// `LOCK.HOLDERS`'s reply, in token order; `None` when there is no lock.
    pub fn decode_all(reply: &Reply) -> Result<Option<Vec<Holder>>, DecodeError> {
        const CMD: &str = "LOCK.HOLDERS";
        if *reply == Reply::Nil {
            return Ok(None);
        }
        list(CMD, reply)?
            .iter()
            .map(|entry| {
                let f = Fields::of(CMD, entry)?;
                Ok(Holder {
                    owner: f.need_bytes("owner")?,
                    token: f.need_uint("token")?,
                    count: f.need_uint("count")?,
                    ttl: ttl(f.need_int("ttl")?),
                    permits: f.uint("permits")?.unwrap_or(1),
                })
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

impl Waiter {
    /// `LOCK.WAITERS`'s reply, first in the queue first (nil: none).
    pub fn decode_all(reply: &Reply) -> Result<Vec<Waiter>, DecodeError> {
        const CMD: &str = "LOCK.WAITERS";
        list(CMD, reply)?
            .iter()
            .map(|entry| {
                let f = Fields::of(CMD, entry)?;
                Ok(Waiter {
                    owner: f.need_bytes("owner")?,
                    mode: Mode::of(CMD, f.text("mode")?.as_deref(), f.int("limit")?)?,
                    permits: f.uint("permits")?.unwrap_or(1),
                    client: f.need_int("client")?,
                    waited_ms: f.need_int("waited")?,
                    timeout_ms: f.int("timeout")?.filter(|&t| t != -1),
                    ttl_ms: f.need_int("ttl")?,
                })
            })
            .collect()
    }
}

impl Entry {
    /// `LOCK.HISTORY`'s or `LOCK.LOG`'s reply, newest first (nil: none).
    pub fn decode_all(reply: &Reply) -> Result<Vec<Entry>, DecodeError> {
        const CMD: &str = "LOCK.HISTORY";
        list(CMD, reply)?
            .iter()
            .map(|item| {
                let f = Fields::of(CMD, item)?;
                Ok(Entry {
                    id: f.uint("id")?.unwrap_or(0),
                    time_ms: f.need_int("time")?,
                    db: f.int("db")?.unwrap_or(0),
                    key: f.bytes("key")?.unwrap_or_default(),
                    owner: f.need_bytes("owner")?,
                    token: f.need_uint("token")?,
                    reason: f.text("reason")?.ok_or_else(|| f.missing("reason"))?,
                    held_ms: f.int("held")?,
                    client_info: f.text("client-info")?.unwrap_or_default(),
                    waiters: f.uint("waiters")?.unwrap_or(0),
                })
            })
            .collect()
    }
}

impl KeyStats {
    /// `LOCK.STATS`'s reply, hottest key first (nil: none).
    pub fn decode_all(reply: &Reply) -> Result<Vec<KeyStats>, DecodeError> {
        const CMD: &str = "LOCK.STATS";
        list(CMD, reply)?
            .iter()
            .map(|item| {
                let f = Fields::of(CMD, item)?;
                Ok(KeyStats {
                    key: f.need_bytes("key")?,
                    db: f.int("db")?.unwrap_or(0),
                    waits: f.need_int("waits")?,
                    granted: f.need_int("granted")?,
                    timeouts: f.need_int("timeouts")?,
                    contended: f.need_int("contended")?,
                    wait_ms_total: f.need_int("wait_ms_total")?,
                    error: f.int("error")?.unwrap_or(0),
                    wait_ms_max: f.need_int("wait_ms_max")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod samples;
#[cfg(test)]
mod tests;
