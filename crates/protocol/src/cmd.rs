//! One type per command: its arguments as the module reads them ([`Command::parse`], checked
//! in the order the module checks them, so the first bad argument is the one the error names;
//! [`Fenced`] aside, whose inner command the module judges before its token) and as a caller
//! sends them ([`Command::to_args`]). The module parses every client command with these types,
//! and every Rust caller writes its commands with them: a command's wire shape is written here
//! once. `parse(to_args(x)) == x` for every valid `x`, and an invalid `x` is written as words
//! the parse (and so the module) refuses, never as another valid command (property tests).
//!
//! Arguments are borrowed: parsing allocates nothing but a group command's key list.

use crate::args::{self, ApplyTail, ArgError, Listing};

/// A command's arguments as the server has them: argument 0 is the command's name.
pub trait Argv<'a> {
    /// How many arguments, the name included.
    fn count(&self) -> usize;
    /// The bytes of argument `i` (empty past the end).
    fn arg(&self, i: usize) -> &'a [u8];
}

impl<'a> Argv<'a> for [&'a [u8]] {
    fn count(&self) -> usize {
        self.len()
    }
    fn arg(&self, i: usize) -> &'a [u8] {
        self.get(i).copied().unwrap_or(&[])
    }
}

/// How an acquiring command wants its key: the words after its fixed arguments, none
/// (exclusive), `SHARED`, `SHARED LIMIT n` or `SHARED LIMIT n PERMITS p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Ask {
    /// One owner at a time (the default: no words).
    #[default]
    Exclusive,
    /// Several owners at once, each with `permits` (1 unless it asks for more, only with a
    /// limit): their permits sum to at most `limit` unless it is 0 (no limit).
    Shared {
        /// At most this many permits held at once (0: no limit).
        limit: u32,
        /// The permits this hold takes (1 without a limit).
        permits: u32,
    },
}

impl Ask {
    /// A shared request of one permit with `limit` (0: none).
    pub const fn shared(limit: u32) -> Ask {
        Ask::Shared { limit, permits: 1 }
    }

    /// Its words: none, `SHARED`, `SHARED LIMIT n`, or `SHARED LIMIT n PERMITS p` (permits 1
    /// is not said). Permits other than 1 without a limit are written as `SHARED LIMIT 0
    /// PERMITS p`, which the module refuses (`ERR invalid limit`): dropping them would ask for
    /// another hold than the one meant.
    pub fn words(self) -> Vec<Vec<u8>> {
        match self {
            Ask::Exclusive => Vec::new(),
            Ask::Shared {
                limit: 0,
                permits: 1,
            } => vec![b"SHARED".to_vec()],
            Ask::Shared { limit, permits: 1 } => {
                vec![b"SHARED".to_vec(), b"LIMIT".to_vec(), num(limit)]
            }
            Ask::Shared { limit, permits } => vec![
                b"SHARED".to_vec(),
                b"LIMIT".to_vec(),
                num(limit),
                b"PERMITS".to_vec(),
                num(permits),
            ],
        }
    }

    /// The words from argument `from` on: at most 5, read into an array, so that a shared
    /// request allocates nothing for them.
    fn at<'a, A: Argv<'a> + ?Sized>(argv: &A, from: usize) -> Result<Ask, ArgError> {
        const MOST: usize = 5;
        let n = argv.count().saturating_sub(from);
        if n > MOST {
            return Err(ArgError::Syntax);
        }
        let mut words: [&[u8]; MOST] = [&[]; MOST];
        for (i, word) in words.iter_mut().take(n).enumerate() {
            *word = argv.arg(from + i);
        }
        args::mode(&words[..n])
    }
}

/// A command: its name, how the module reads its arguments and how a caller writes them.
pub trait Command<'a>: Sized {
    /// Its name, as sent.
    const NAME: &'static str;

    /// Reads `argv` (argument 0 is the name, not checked): the first bad argument's error, in
    /// the module's order; [`ArgError::Arity`] for a count the command never takes (the server
    /// refuses most of those before the module sees them).
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError>;

    /// Its arguments after the name, as a caller sends them.
    fn args(&self) -> Vec<Vec<u8>>;

    /// Its whole argv, the name first: what [`Command::parse`] reads back as `self`.
    fn to_args(&self) -> Vec<Vec<u8>> {
        let mut argv = vec![Self::NAME.as_bytes().to_vec()];
        argv.extend(self.args());
        argv
    }
}

fn num(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// At least `min` arguments (the name included), at most `max`.
fn arity<'a, A: Argv<'a> + ?Sized>(argv: &A, min: usize, max: usize) -> Result<(), ArgError> {
    if (min..=max).contains(&argv.count()) {
        Ok(())
    } else {
        Err(ArgError::Arity)
    }
}

/// The words from argument `from` on.
fn rest<'a, A: Argv<'a> + ?Sized>(argv: &A, from: usize) -> Vec<&'a [u8]> {
    (from..argv.count()).map(|i| argv.arg(i)).collect()
}

/// A release's optional `FROM c` (c >= 1), the words after its owner.
fn release_from(words: &[&[u8]]) -> Result<Option<u32>, ArgError> {
    match args::split_from(words)? {
        ([], None) => Ok(None),
        ([], Some(c)) => Ok(Some(args::from_count(c, 1)?)),
        _ => Err(ArgError::Syntax),
    }
}

fn from_words(from: Option<u32>) -> Vec<Vec<u8>> {
    from.map_or_else(Vec::new, |c| vec![b"FROM".to_vec(), num(c)])
}

/// `LOCK.ACQUIRE key owner ttl_ms [SHARED [LIMIT n [PERMITS p]]]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Who asks.
    pub owner: &'a [u8],
    /// The hold's lifetime.
    pub ttl_ms: u64,
    /// How it wants the key.
    pub ask: Ask,
}

impl<'a> Command<'a> for Acquire<'a> {
    const NAME: &'static str = "LOCK.ACQUIRE";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, usize::MAX)?;
        Ok(Acquire {
            key: argv.arg(1),
            owner: args::owner(argv.arg(2))?,
            ttl_ms: args::ttl_ms(argv.arg(3))?,
            ask: Ask::at(argv, 4)?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec(), self.owner.to_vec(), num(self.ttl_ms)];
        a.extend(self.ask.words());
        a
    }
}

/// `LOCK.WAIT key owner ttl_ms timeout_ms [SHARED [LIMIT n [PERMITS p]]]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Who asks.
    pub owner: &'a [u8],
    /// The hold's lifetime.
    pub ttl_ms: u64,
    /// The longest wait (0: no limit).
    pub timeout_ms: u64,
    /// How it wants the key.
    pub ask: Ask,
}

impl<'a> Command<'a> for Wait<'a> {
    const NAME: &'static str = "LOCK.WAIT";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 5, usize::MAX)?;
        Ok(Wait {
            key: argv.arg(1),
            owner: args::owner(argv.arg(2))?,
            ttl_ms: args::ttl_ms(argv.arg(3))?,
            timeout_ms: args::timeout_ms(argv.arg(4))?,
            ask: Ask::at(argv, 5)?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![
            self.key.to_vec(),
            self.owner.to_vec(),
            num(self.ttl_ms),
            num(self.timeout_ms),
        ];
        a.extend(self.ask.words());
        a
    }
}

/// `LOCK.REENTER key owner ttl_ms [SHARED [LIMIT n [PERMITS p]]] [FROM c]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reenter<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Who asks.
    pub owner: &'a [u8],
    /// The hold's lifetime.
    pub ttl_ms: u64,
    /// How it wants the key.
    pub ask: Ask,
    /// The count the step expects to move from (0: a first acquire).
    pub from: Option<u32>,
}

impl<'a> Command<'a> for Reenter<'a> {
    const NAME: &'static str = "LOCK.REENTER";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, usize::MAX)?;
        let owner = args::owner(argv.arg(2))?;
        let ttl_ms = args::ttl_ms(argv.arg(3))?;
        let words = rest(argv, 4);
        let (mode_words, from) = args::split_from(&words)?;
        let ask = args::mode(mode_words)?;
        let from = from.map(|c| args::from_count(c, 0)).transpose()?;
        Ok(Reenter {
            key: argv.arg(1),
            owner,
            ttl_ms,
            ask,
            from,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec(), self.owner.to_vec(), num(self.ttl_ms)];
        a.extend(self.ask.words());
        a.extend(from_words(self.from));
        a
    }
}

/// `LOCK.RELEASE key owner [FROM c]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Whose hold.
    pub owner: &'a [u8],
    /// The count the release expects to move from (>= 1).
    pub from: Option<u32>,
}

impl<'a> Command<'a> for Release<'a> {
    const NAME: &'static str = "LOCK.RELEASE";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 3, usize::MAX)?;
        let owner = args::owner(argv.arg(2))?;
        let from = release_from(&rest(argv, 3))?;
        Ok(Release {
            key: argv.arg(1),
            owner,
            from,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec(), self.owner.to_vec()];
        a.extend(from_words(self.from));
        a
    }
}

/// `LOCK.RENEW key owner ttl_ms`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renew<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Whose hold.
    pub owner: &'a [u8],
    /// The hold's new lifetime, from now.
    pub ttl_ms: u64,
}

impl<'a> Command<'a> for Renew<'a> {
    const NAME: &'static str = "LOCK.RENEW";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, 4)?;
        Ok(Renew {
            key: argv.arg(1),
            owner: args::owner(argv.arg(2))?,
            ttl_ms: args::ttl_ms(argv.arg(3))?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        vec![self.key.to_vec(), self.owner.to_vec(), num(self.ttl_ms)]
    }
}

/// `LOCK.DOWNGRADE` and `LOCK.DROP` have one shape (`key owner`): one definition, two names.
macro_rules! key_and_owner {
    ($(#[$doc:meta])* $name:ident, $wire:literal, $owner:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<'a> {
            /// The lock's key.
            pub key: &'a [u8],
            #[doc = $owner]
            pub owner: &'a [u8],
        }

        impl<'a> Command<'a> for $name<'a> {
            const NAME: &'static str = $wire;
            fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
                arity(argv, 3, 3)?;
                Ok($name {
                    key: argv.arg(1),
                    owner: args::owner(argv.arg(2))?,
                })
            }
            fn args(&self) -> Vec<Vec<u8>> {
                vec![self.key.to_vec(), self.owner.to_vec()]
            }
        }
    };
}

key_and_owner!(
    /// `LOCK.DOWNGRADE key owner`
    Downgrade, "LOCK.DOWNGRADE", "Whose exclusive hold becomes shared."
);

/// `LOCK.INFO key`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info<'a> {
    /// The lock's key.
    pub key: &'a [u8],
}

impl<'a> Command<'a> for Info<'a> {
    const NAME: &'static str = "LOCK.INFO";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, 2)?;
        Ok(Info { key: argv.arg(1) })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        vec![self.key.to_vec()]
    }
}

/// `LOCK.OBSERVE key known_token timeout_ms`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observe<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// The token the observer knows of (0: none).
    pub known_token: u64,
    /// The longest wait for another (0: no limit).
    pub timeout_ms: u64,
}

impl<'a> Command<'a> for Observe<'a> {
    const NAME: &'static str = "LOCK.OBSERVE";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, 4)?;
        Ok(Observe {
            key: argv.arg(1),
            known_token: args::known_token(argv.arg(2))?,
            timeout_ms: args::timeout_ms(argv.arg(3))?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        vec![
            self.key.to_vec(),
            num(self.known_token),
            num(self.timeout_ms),
        ]
    }
}

/// `LOCK.HOLDERS key [OWNER owner] [COUNT n]`, each option at most once, in any order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holders<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Only this owner's hold.
    pub owner: Option<&'a [u8]>,
    /// At most this many (default 100; 0: all).
    pub count: Option<u32>,
}

impl Holders<'_> {
    /// How many to list (0: all).
    pub fn count(&self) -> usize {
        self.count.map_or(100, |n| n as usize)
    }
}

impl<'a> Command<'a> for Holders<'a> {
    const NAME: &'static str = "LOCK.HOLDERS";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, usize::MAX)?;
        let (mut owner, mut count) = (None, None);
        let mut i = 2;
        while i + 1 < argv.count() {
            let (word, value) = (argv.arg(i), argv.arg(i + 1));
            if word.eq_ignore_ascii_case(b"OWNER") && owner.is_none() {
                owner = Some(args::owner(value)?);
            } else if word.eq_ignore_ascii_case(b"COUNT") && count.is_none() {
                count = Some(args::list_count(value)? as u32);
            } else {
                return Err(ArgError::Syntax);
            }
            i += 2;
        }
        if i != argv.count() {
            return Err(ArgError::Syntax);
        }
        Ok(Holders {
            key: argv.arg(1),
            owner,
            count,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec()];
        if let Some(owner) = self.owner {
            a.extend([b"OWNER".to_vec(), owner.to_vec()]);
        }
        if let Some(n) = self.count {
            a.extend([b"COUNT".to_vec(), num(n)]);
        }
        a
    }
}

/// `LOCK.FORCERELEASE key [owner]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForceRelease<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// Only this owner's hold (a shared key's one holder); `None`: every hold.
    pub owner: Option<&'a [u8]>,
}

impl<'a> Command<'a> for ForceRelease<'a> {
    const NAME: &'static str = "LOCK.FORCERELEASE";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, 3)?;
        let owner = match argv.count() {
            3 => Some(args::owner(argv.arg(2))?),
            _ => None,
        };
        Ok(ForceRelease {
            key: argv.arg(1),
            owner,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec()];
        a.extend(self.owner.map(<[u8]>::to_vec));
        a
    }
}

/// `LOCK.WAITERS key [COUNT n]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiters<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// At most this many (default 100; 0: all).
    pub count: Option<u32>,
}

impl Waiters<'_> {
    /// How many to list (0: all).
    pub fn count(&self) -> usize {
        self.count.map_or(100, |n| n as usize)
    }
}

impl<'a> Command<'a> for Waiters<'a> {
    const NAME: &'static str = "LOCK.WAITERS";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, usize::MAX)?;
        let count = match argv.count() {
            2 => None,
            4 if argv.arg(2).eq_ignore_ascii_case(b"COUNT") => {
                Some(args::list_count(argv.arg(3))? as u32)
            }
            _ => return Err(ArgError::Syntax),
        };
        Ok(Waiters {
            key: argv.arg(1),
            count,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec()];
        if let Some(n) = self.count {
            a.extend([b"COUNT".to_vec(), num(n)]);
        }
        a
    }
}

/// `LOCK.LOG [count | RESET]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log {
    /// The latest entries (default 10), or forget them; `None`: nothing said.
    pub what: Option<Listing>,
}

impl Log {
    /// What is asked (the latest 10 when nothing is said).
    pub fn listing(&self) -> Listing {
        self.what.unwrap_or(Listing::First(10))
    }
}

impl<'a> Command<'a> for Log {
    const NAME: &'static str = "LOCK.LOG";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        let what = match argv.count() {
            0 | 1 => None,
            2 if argv.arg(1).eq_ignore_ascii_case(b"RESET") => Some(Listing::Reset),
            2 => Some(Listing::First(args::list_count(argv.arg(1))?)),
            _ => return Err(ArgError::Syntax),
        };
        Ok(Log { what })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        match self.what {
            None => Vec::new(),
            Some(Listing::Reset) => vec![b"RESET".to_vec()],
            Some(Listing::First(n)) => vec![num(n)],
        }
    }
}

/// `LOCK.HISTORY key [count]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// At most this many (default 10; 0: all).
    pub count: Option<u32>,
}

impl History<'_> {
    /// How many to list (0: all).
    pub fn count(&self) -> usize {
        self.count.map_or(10, |n| n as usize)
    }
}

impl<'a> Command<'a> for History<'a> {
    const NAME: &'static str = "LOCK.HISTORY";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, usize::MAX)?;
        let count = match argv.count() {
            2 => None,
            3 => Some(args::list_count(argv.arg(2))? as u32),
            _ => return Err(ArgError::Syntax),
        };
        Ok(History {
            key: argv.arg(1),
            count,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec()];
        a.extend(self.count.map(num));
        a
    }
}

/// `LOCK.STATS [COUNT n | RESET]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// The hottest keys (default 10), or forget the statistics; `None`: nothing said.
    pub what: Option<Listing>,
}

impl Stats {
    /// What is asked (the hottest 10 when nothing is said).
    pub fn listing(&self) -> Listing {
        self.what.unwrap_or(Listing::First(10))
    }
}

impl<'a> Command<'a> for Stats {
    const NAME: &'static str = "LOCK.STATS";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        let what = match argv.count() {
            0 | 1 => None,
            2 if argv.arg(1).eq_ignore_ascii_case(b"RESET") => Some(Listing::Reset),
            3 if argv.arg(1).eq_ignore_ascii_case(b"COUNT") => {
                Some(Listing::First(args::list_count(argv.arg(2))?))
            }
            _ => return Err(ArgError::Syntax),
        };
        Ok(Stats { what })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        match self.what {
            None => Vec::new(),
            Some(Listing::Reset) => vec![b"RESET".to_vec()],
            Some(Listing::First(n)) => vec![b"COUNT".to_vec(), num(n)],
        }
    }
}

/// The keys of a group command (`numkeys key [key ...]`, then `tail` more arguments), checked
/// as Redis checks its own numkeys commands; no key twice.
/// The words' own buffer becomes the key list (no second copy in the module's thread).
fn group_keys<'a, A: Argv<'a> + ?Sized>(argv: &A, tail: usize) -> Result<Vec<&'a [u8]>, ArgError> {
    let mut words = rest(argv, 1);
    let keys = args::keys_of(&words, tail)?;
    words.truncate(keys.end);
    words.drain(..keys.start);
    Ok(words)
}

fn with_keys(keys: &[&[u8]], more: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    let mut a = vec![num(keys.len())];
    a.extend(keys.iter().map(|k| k.to_vec()));
    a.extend(more);
    a
}

/// `LOCK.MACQUIRE` and `LOCK.MRENEW` have one shape (`numkeys key [key ...] owner ttl_ms`):
/// one definition, two names.
macro_rules! group_with_ttl {
    ($(#[$doc:meta])* $name:ident, $wire:literal, $owner:literal, $ttl:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name<'a> {
            /// The group's keys (1 to 256, none twice).
            pub keys: Vec<&'a [u8]>,
            #[doc = $owner]
            pub owner: &'a [u8],
            #[doc = $ttl]
            pub ttl_ms: u64,
        }

        impl<'a> Command<'a> for $name<'a> {
            const NAME: &'static str = $wire;
            fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
                arity(argv, 5, usize::MAX)?;
                let keys = group_keys(argv, 2)?;
                let n = argv.count();
                Ok($name {
                    keys,
                    owner: args::owner(argv.arg(n - 2))?,
                    ttl_ms: args::ttl_ms(argv.arg(n - 1))?,
                })
            }
            fn args(&self) -> Vec<Vec<u8>> {
                with_keys(&self.keys, [self.owner.to_vec(), num(self.ttl_ms)])
            }
        }
    };
}

group_with_ttl!(
    /// `LOCK.MACQUIRE numkeys key [key ...] owner ttl_ms`
    MAcquire, "LOCK.MACQUIRE", "Who asks.", "The holds' lifetime."
);

/// `LOCK.MRELEASE numkeys key [key ...] owner [FROM c]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MRelease<'a> {
    /// The group's keys (1 to 256, none twice).
    pub keys: Vec<&'a [u8]>,
    /// Whose holds.
    pub owner: &'a [u8],
    /// The count the release expects to move from (>= 1).
    pub from: Option<u32>,
}

impl<'a> Command<'a> for MRelease<'a> {
    const NAME: &'static str = "LOCK.MRELEASE";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, usize::MAX)?;
        // The words after the keys: `owner`, or `owner FROM c` (numkeys says where the keys
        // end).
        let n = argv.count();
        let tail = match args::parse_integer(argv.arg(1)).and_then(|k| usize::try_from(k).ok()) {
            Some(k) if k.checked_add(5) == Some(n) => 3,
            _ => 1,
        };
        let keys = group_keys(argv, tail)?;
        let owner = args::owner(argv.arg(n - tail))?;
        let from = release_from(&rest(argv, n - tail + 1))?;
        Ok(MRelease { keys, owner, from })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut more = vec![self.owner.to_vec()];
        more.extend(from_words(self.from));
        with_keys(&self.keys, more)
    }
}

group_with_ttl!(
    /// `LOCK.MRENEW numkeys key [key ...] owner ttl_ms`
    MRenew, "LOCK.MRENEW", "Whose holds.", "Their new lifetime, from now."
);

/// `LOCK.FENCED key token command [arg ...]`: runs `command` only while `token` is the key's
/// current hold's. The module checks the token after judging the inner command (an inner
/// command it refuses is refused whatever the token): [`Command::parse`] checks the token
/// first, for callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fenced<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// The writer's fencing token.
    pub token: u64,
    /// The inner command and its arguments (at least its name).
    pub command: Vec<&'a [u8]>,
}

impl<'a> Command<'a> for Fenced<'a> {
    const NAME: &'static str = "LOCK.FENCED";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 4, usize::MAX)?;
        Ok(Fenced {
            key: argv.arg(1),
            token: args::token(argv.arg(2))?,
            command: rest(argv, 3),
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![self.key.to_vec(), num(self.token)];
        a.extend(self.command.iter().map(|w| w.to_vec()));
        a
    }
}

/// `LOCK.APPLY key owner token count [PXAT unix_ms] [GRANTED unix_ms] [SHARED [LIMIT n
/// [PERMITS p]]]`: a hold exactly as given (an effect replicas and the AOF receive; not for
/// clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Apply<'a> {
    /// The lock's key.
    pub key: &'a [u8],
    /// The hold's owner.
    pub owner: &'a [u8],
    /// Its token.
    pub token: u64,
    /// Its reentrancy count.
    pub count: u32,
    /// Its expiry, grant time and shared mode.
    pub tail: ApplyTail,
}

impl<'a> Command<'a> for Apply<'a> {
    const NAME: &'static str = "LOCK.APPLY";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 5, usize::MAX)?;
        Ok(Apply {
            key: argv.arg(1),
            owner: args::owner(argv.arg(2))?,
            token: args::token(argv.arg(3))?,
            count: args::count(argv.arg(4))?,
            tail: args::apply_tail(&rest(argv, 5))?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        let mut a = vec![
            self.key.to_vec(),
            self.owner.to_vec(),
            num(self.token),
            num(self.count),
        ];
        if let Some(at) = self.tail.expires_at {
            a.extend([b"PXAT".to_vec(), num(at)]);
        }
        // 0 is "not said"; any other value is written, so a bad one is refused, not dropped.
        if self.tail.granted_at != 0 {
            a.extend([b"GRANTED".to_vec(), num(self.tail.granted_at)]);
        }
        if let Some((limit, permits)) = self.tail.shared {
            a.extend(Ask::Shared { limit, permits }.words());
        }
        a
    }
}

key_and_owner!(
    /// `LOCK.DROP key owner`: one shared holder removed (an effect; not for clients).
    Drop, "LOCK.DROP", "The holder."
);

/// `LOCK.COUNTER token`: the token counter raised to at least `token` (an effect; not for
/// clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The least the counter is after.
    pub token: u64,
}

impl<'a> Command<'a> for Counter {
    const NAME: &'static str = "LOCK.COUNTER";
    fn parse<A: Argv<'a> + ?Sized>(argv: &A) -> Result<Self, ArgError> {
        arity(argv, 2, 2)?;
        Ok(Counter {
            token: args::token(argv.arg(1))?,
        })
    }
    fn args(&self) -> Vec<Vec<u8>> {
        vec![num(self.token)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::{MAX_COUNT, MAX_LIMIT, MAX_TOKEN};
    use proptest::prelude::*;
    use Listing::{First, Reset};

    /// `words` parsed as `C`'s argv (the name first).
    fn parse<'a, C: Command<'a>>(words: &'a [&'a [u8]]) -> Result<C, ArgError> {
        C::parse(words)
    }

    /// Parses the argv `$t { ... }` writes back: it must be the value written.
    macro_rules! round_trip {
        ($t:ident $body:tt) => {{
            let x = $t $body;
            let argv = x.to_args();
            let words: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(argv[0].as_slice(), $t::NAME.as_bytes());
            prop_assert_eq!($t::parse(words.as_slice()), Ok(x));
        }};
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 1..=max)
    }

    fn ask() -> impl Strategy<Value = Ask> {
        prop_oneof![
            Just(Ask::Exclusive),
            Just(Ask::shared(0)),
            (1..=MAX_LIMIT)
                .prop_flat_map(|limit| (Just(limit), 1..=limit))
                .prop_map(|(limit, permits)| Ask::Shared { limit, permits }),
        ]
    }

    fn ttl() -> impl Strategy<Value = u64> {
        1..=args::MAX_TTL_MS
    }

    fn listing() -> impl Strategy<Value = Option<Listing>> {
        prop_oneof![
            Just(None),
            Just(Some(Reset)),
            (0..=u64::from(u32::MAX)).prop_map(|n| Some(First(n as usize))),
        ]
    }

    /// 1 to 8 distinct keys.
    fn keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::btree_set(bytes(8), 1..=8).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn single_key_commands_read_back_what_they_write(
            key in bytes(16), owner in bytes(args::MAX_OWNER_LEN), ttl_ms in ttl(),
            timeout_ms in 0..=args::MAX_TIMEOUT_MS, ask in ask(),
            from in proptest::option::of(1..=u32::MAX), token in 1..=MAX_TOKEN,
            count in proptest::option::of(any::<u32>()), listing in listing(),
            with_owner in any::<bool>(),
        ) {
            let (key, owner) = (key.as_slice(), owner.as_slice());
            round_trip!(Acquire { key, owner, ttl_ms, ask });
            round_trip!(Wait { key, owner, ttl_ms, timeout_ms, ask });
            round_trip!(Reenter { key, owner, ttl_ms, ask, from });
            round_trip!(Reenter { key, owner, ttl_ms, ask, from: Some(0) });
            round_trip!(Release { key, owner, from });
            round_trip!(Renew { key, owner, ttl_ms });
            round_trip!(Downgrade { key, owner });
            round_trip!(Info { key });
            round_trip!(Observe { key, known_token: token, timeout_ms });
            round_trip!(Observe { key, known_token: 0, timeout_ms });
            let only = with_owner.then_some(owner);
            round_trip!(Holders { key, owner: only, count });
            round_trip!(ForceRelease { key, owner: only });
            round_trip!(Waiters { key, count });
            round_trip!(Log { what: listing });
            round_trip!(History { key, count });
            round_trip!(Stats { what: listing });
            round_trip!(Fenced { key, token, command: vec![b"SET", key, owner] });
            round_trip!(Drop { key, owner });
            round_trip!(Counter { token });
        }

        #[test]
        fn group_commands_read_back_what_they_write(
            keys in keys(), owner in bytes(args::MAX_OWNER_LEN), ttl_ms in ttl(),
            from in proptest::option::of(1..=u32::MAX),
        ) {
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let owner = owner.as_slice();
            round_trip!(MAcquire { keys: keys.clone(), owner, ttl_ms });
            round_trip!(MRelease { keys: keys.clone(), owner, from });
            round_trip!(MRenew { keys, owner, ttl_ms });
        }

        #[test]
        fn apply_reads_back_what_it_writes(
            key in bytes(16), owner in bytes(args::MAX_OWNER_LEN), token in 1..=MAX_TOKEN,
            count in 1..=MAX_COUNT, at in 1..=crate::bounds::MAX_EXPIRY_MS,
            granted_at in 0..=crate::bounds::MAX_TIME_MS, ask in ask(),
            expires in any::<bool>(),
        ) {
            let shared = match ask {
                Ask::Exclusive => None,
                Ask::Shared { limit, permits } => Some((limit, permits)),
            };
            // A shared holder always has its lease end.
            let expires_at = (expires || shared.is_some()).then_some(at);
            let tail = ApplyTail { expires_at, granted_at, shared };
            round_trip!(Apply { key: &key, owner: &owner, token, count, tail });
        }

        /// Any field values at all, in or out of bounds: the words written parse back to the
        /// same value, or are refused; never read as another command.
        #[test]
        fn unchecked_values_are_written_faithfully_or_refused(
            key in bytes(4), owner in proptest::collection::vec(any::<u8>(), 0..=300),
            ttl_ms in prop_oneof![ttl(), any::<u64>()],
            timeout_ms in prop_oneof![0..=args::MAX_TIMEOUT_MS, any::<u64>()],
            limit in prop_oneof![Just(0u32), 1..=MAX_LIMIT, any::<u32>()],
            permits in prop_oneof![Just(0u32), Just(1u32), 1..=MAX_LIMIT, any::<u32>()],
            shared in any::<bool>(), from in proptest::option::of(any::<u32>()),
            token in prop_oneof![1..=MAX_TOKEN, any::<u64>()], count in any::<u32>(),
            at in prop_oneof![1..=crate::bounds::MAX_EXPIRY_MS, any::<i64>()],
            granted_at in prop_oneof![0..=crate::bounds::MAX_TIME_MS, any::<i64>()],
            expires in any::<bool>(),
        ) {
            let ask = if shared { Ask::Shared { limit, permits } } else { Ask::Exclusive };
            let (key, owner) = (key.as_slice(), owner.as_slice());
            macro_rules! faithful {
                ($t:ident $body:tt) => {{
                    let x = $t $body;
                    let argv = x.to_args();
                    let words: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                    match $t::parse(words.as_slice()) {
                        Ok(back) => prop_assert_eq!(back, x),
                        Err(_) => {}
                    }
                }};
            }
            faithful!(Acquire { key, owner, ttl_ms, ask });
            faithful!(Wait { key, owner, ttl_ms, timeout_ms, ask });
            faithful!(Reenter { key, owner, ttl_ms, ask, from });
            faithful!(Release { key, owner, from });
            faithful!(Renew { key, owner, ttl_ms });
            faithful!(Observe { key, known_token: token, timeout_ms });
            faithful!(Counter { token });
            let tail = ApplyTail {
                expires_at: expires.then_some(at),
                granted_at,
                shared: shared.then_some((limit, permits)),
            };
            faithful!(Apply { key, owner, token, count, tail });
        }

        /// Whatever the words, parsing answers (an error or a value) and never panics; a
        /// value writes back words that parse to it again.
        #[test]
        fn any_words_parse_or_fail_cleanly(
            words in proptest::collection::vec(
                prop_oneof![
                    bytes(4),
                    Just(b"SHARED".to_vec()), Just(b"LIMIT".to_vec()), Just(b"FROM".to_vec()),
                    Just(b"COUNT".to_vec()), Just(b"OWNER".to_vec()), Just(b"1".to_vec()),
                    Just(b"2".to_vec()), Just(b"0".to_vec()),
                ],
                0..8,
            )
        ) {
            let mut argv: Vec<&[u8]> = vec![b"X"];
            argv.extend(words.iter().map(Vec::as_slice));
            macro_rules! each {
                ($($t:ty),*) => {$(
                    if let Ok(x) = <$t>::parse(argv.as_slice()) {
                        let again = x.to_args();
                        let words: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
                        prop_assert_eq!(<$t>::parse(words.as_slice()), Ok(x));
                    }
                )*};
            }
            each!(Acquire, Wait, Reenter, Release, Renew, Downgrade, Info, Observe, Holders,
                  ForceRelease, Waiters, Log, History, Stats, MAcquire, MRelease, MRenew,
                  Fenced, Apply, Drop, Counter);
        }
    }

    #[test]
    fn listing_options() {
        let w = |words: &'static [&'static [u8]]| parse::<Waiters>(words).map(|c| c.count());
        assert_eq!(w(&[b"W", b"k"]), Ok(100));
        assert_eq!(w(&[b"W", b"k", b"count", b"0"]), Ok(0));
        assert_eq!(w(&[b"W", b"k", b"COUNT", b"-1"]), Err(ArgError::Count));
        assert_eq!(w(&[b"W", b"k", b"COUNT"]), Err(ArgError::Syntax));
        assert_eq!(w(&[b"W", b"k", b"LIMIT", b"1"]), Err(ArgError::Syntax));
        let l = |words: &'static [&'static [u8]]| parse::<Log>(words).map(|c| c.listing());
        assert_eq!(l(&[b"L"]), Ok(First(10)));
        assert_eq!(l(&[b"L", b"reset"]), Ok(Reset));
        assert_eq!(l(&[b"L", b"5"]), Ok(First(5)));
        assert_eq!(l(&[b"L", b"5x"]), Err(ArgError::Count));
        assert_eq!(l(&[b"L", b"5", b"6"]), Err(ArgError::Syntax));
        let h = |words: &'static [&'static [u8]]| parse::<History>(words).map(|c| c.count());
        assert_eq!(h(&[b"H", b"k"]), Ok(10));
        assert_eq!(h(&[b"H", b"k", b"4294967295"]), Ok(u32::MAX as usize));
        assert_eq!(h(&[b"H", b"k", b"4294967296"]), Err(ArgError::Count));
        let s = |words: &'static [&'static [u8]]| parse::<Stats>(words).map(|c| c.listing());
        assert_eq!(s(&[b"S"]), Ok(First(10)));
        assert_eq!(s(&[b"S", b"RESET"]), Ok(Reset));
        assert_eq!(s(&[b"S", b"COUNT", b"3"]), Ok(First(3)));
        assert_eq!(s(&[b"S", b"3"]), Err(ArgError::Syntax));
    }

    #[test]
    fn holders_option_words() {
        let h =
            |words: &'static [&'static [u8]]| parse::<Holders>(words).map(|c| (c.owner, c.count()));
        assert_eq!(h(&[b"H", b"k"]), Ok((None, 100)));
        assert_eq!(h(&[b"H", b"k", b"count", b"0"]), Ok((None, 0)));
        let a: &[u8] = b"a";
        assert_eq!(
            h(&[b"H", b"k", b"OWNER", b"a", b"COUNT", b"5"]),
            Ok((Some(a), 5))
        );
        assert_eq!(
            h(&[b"H", b"k", b"COUNT", b"5", b"OWNER", b"a"]),
            Ok((Some(a), 5))
        );
        let twice: &[&[u8]] = &[b"H", b"k", b"COUNT", b"5", b"COUNT", b"6"];
        assert_eq!(parse::<Holders>(twice).err(), Some(ArgError::Syntax));
        assert_eq!(h(&[b"H", b"k", b"COUNT"]), Err(ArgError::Syntax));
        assert_eq!(h(&[b"H", b"k", b"COUNT", b"-1"]), Err(ArgError::Count));
        assert_eq!(h(&[b"H", b"k", b"NAME", b"x"]), Err(ArgError::Syntax));
    }

    /// The first bad argument is the one the error names, in the module's order.
    #[test]
    fn arguments_are_checked_in_order() {
        let acquire: &[&[u8]] = &[b"A", b"k", b"", b"0", b"SHARED", b"LIMIT", b"0"];
        assert_eq!(parse::<Acquire>(acquire), Err(ArgError::Owner));
        let acquire: &[&[u8]] = &[b"A", b"k", b"o", b"0", b"SHARED", b"LIMIT", b"0"];
        assert_eq!(parse::<Acquire>(acquire), Err(ArgError::Ttl));
        let acquire: &[&[u8]] = &[b"A", b"k", b"o", b"1", b"SHARED", b"LIMIT", b"0"];
        assert_eq!(parse::<Acquire>(acquire), Err(ArgError::Limit));
        let six: &[&[u8]] = &[
            b"A", b"k", b"o", b"1", b"SHARED", b"LIMIT", b"2", b"PERMITS", b"1", b"x",
        ];
        assert_eq!(parse::<Acquire>(six), Err(ArgError::Syntax));
        let wait: &[&[u8]] = &[b"W", b"k", b"o", b"1", b"-1"];
        assert_eq!(parse::<Wait>(wait), Err(ArgError::Timeout));
        let group: &[&[u8]] = &[b"M", b"2", b"a", b"a", b"o", b"1"];
        assert_eq!(parse::<MAcquire>(group), Err(ArgError::DuplicateKey));
        let group: &[&[u8]] = &[b"M", b"1", b"a", b"", b"1"];
        assert_eq!(parse::<MAcquire>(group), Err(ArgError::Owner));
        let release: &[&[u8]] = &[b"M", b"1", b"a", b"o", b"FROM", b"0"];
        assert_eq!(parse::<MRelease>(release), Err(ArgError::Count));
        let reenter: &[&[u8]] = &[b"R", b"k", b"o", b"1", b"FROM", b"0"];
        assert_eq!(parse::<Reenter>(reenter).map(|c| c.from), Ok(Some(0)));
        let short: &[&[u8]] = &[b"R", b"k", b"o"];
        assert_eq!(parse::<Renew>(short), Err(ArgError::Arity));
        let force: &[&[u8]] = &[b"F", b"k", b"a", b"b"];
        assert_eq!(parse::<ForceRelease>(force), Err(ArgError::Arity));
    }

    #[test]
    fn words_are_the_modules() {
        let w = |ask: Ask| {
            ask.words()
                .into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(w(Ask::Exclusive), "");
        assert_eq!(w(Ask::shared(0)), "SHARED");
        assert_eq!(w(Ask::shared(3)), "SHARED LIMIT 3");
        assert_eq!(
            w(Ask::Shared {
                limit: 3,
                permits: 2
            }),
            "SHARED LIMIT 3 PERMITS 2"
        );
        // Found by the attack on the protocol (2026-12-04): permits without a limit were
        // dropped, so the words asked for one permit; they are said, and refused.
        let unlimited = Ask::Shared {
            limit: 0,
            permits: 5,
        };
        assert_eq!(w(unlimited), "SHARED LIMIT 0 PERMITS 5");
        let words: &[&[u8]] = &[
            b"A", b"k", b"o", b"1", b"SHARED", b"LIMIT", b"0", b"PERMITS", b"5",
        ];
        assert_eq!(parse::<Acquire>(words), Err(ArgError::Limit));
        let argv = Release {
            key: b"k",
            owner: b"o",
            from: Some(2),
        }
        .to_args();
        assert_eq!(argv, [&b"LOCK.RELEASE"[..], b"k", b"o", b"FROM", b"2"]);
    }
}
