//! Command arguments: parsing and bounds, with the exact error each violation gets.

pub use super::bounds::MAX_OWNER_LEN;
use super::bounds::{self, MAX_LIMIT};
use super::Ask as Mode;
/// Longest lock lifetime: 10^12 ms (about 31.7 years).
pub const MAX_TTL_MS: u64 = 1_000_000_000_000;
/// Longest wait: the same bound as a lifetime. 0 means no limit.
pub const MAX_TIMEOUT_MS: u64 = MAX_TTL_MS;

/// A bad argument. `Display` is the Redis error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    /// An owner outside 1 to 256 bytes.
    Owner,
    /// A ttl outside 1 to 10^12 ms.
    Ttl,
    /// A timeout outside 0 to 10^12 ms.
    Timeout,
    /// A token outside 1 to 2^53 - 1.
    Token,
    /// A count outside its range.
    Count,
    /// An absolute time outside its range.
    Expiry,
    /// A limit outside 1 to 10^6.
    Limit,
    /// Permits outside 1 to the limit.
    Permits,
    /// Words the command does not take.
    Syntax,
    /// A numkeys below 1.
    NumKeys,
    /// A numkeys above 256.
    TooManyKeys,
    /// A numkeys above the arguments there are.
    KeysBeyondArgs,
    /// A key twice in one group.
    DuplicateKey,
    /// A number of arguments the command never takes (the server refuses most before the
    /// module sees them, with its own error).
    Arity,
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArgError::Owner => "ERR invalid owner",
            ArgError::Ttl => "ERR invalid ttl_ms",
            ArgError::Timeout => "ERR invalid timeout_ms",
            ArgError::Token => "ERR invalid token",
            ArgError::Count => "ERR invalid count",
            ArgError::Expiry => "ERR invalid expiry",
            ArgError::Limit => "ERR invalid limit",
            ArgError::Permits => "ERR invalid permits",
            ArgError::Syntax => "ERR syntax error",
            ArgError::NumKeys => "ERR numkeys should be greater than 0",
            ArgError::TooManyKeys => "ERR numkeys can't be greater than 256",
            ArgError::KeysBeyondArgs => "ERR Number of keys can't be greater than number of args",
            ArgError::DuplicateKey => "ERR duplicate key",
            ArgError::Arity => "ERR wrong number of arguments",
        })
    }
}

impl std::error::Error for ArgError {}

/// Parses a decimal integer the way Redis does (`string2ll`): an optional `-`, no `+`, no
/// spaces, no leading zeros, no overflow.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        value = if negative {
            value.checked_mul(10)?.checked_sub(digit)?
        } else {
            value.checked_mul(10)?.checked_add(digit)?
        };
    }
    Some(value)
}

fn in_range(bytes: &[u8], min: u64, max: u64, error: ArgError) -> Result<u64, ArgError> {
    parse_integer(bytes)
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| (min..=max).contains(v))
        .ok_or(error)
}

/// An integer that `valid` accepts.
fn checked<T>(bytes: &[u8], valid: impl Fn(T) -> bool, error: ArgError) -> Result<T, ArgError>
where
    T: TryFrom<i64> + Copy,
{
    parse_integer(bytes)
        .and_then(|v| T::try_from(v).ok())
        .filter(|v| valid(*v))
        .ok_or(error)
}

/// An owner: 1 to 256 bytes, any bytes.
pub fn owner(bytes: &[u8]) -> Result<&[u8], ArgError> {
    if bounds::is_owner(bytes) {
        Ok(bytes)
    } else {
        Err(ArgError::Owner)
    }
}

/// A lock lifetime: 1 <= ttl_ms <= 10^12.
pub fn ttl_ms(bytes: &[u8]) -> Result<u64, ArgError> {
    in_range(bytes, 1, MAX_TTL_MS, ArgError::Ttl)
}

/// A wait limit: 0 (no limit) <= timeout_ms <= 10^12.
pub fn timeout_ms(bytes: &[u8]) -> Result<u64, ArgError> {
    in_range(bytes, 0, MAX_TIMEOUT_MS, ArgError::Timeout)
}

/// A fencing token: 1 <= token < 2^53.
pub fn token(bytes: &[u8]) -> Result<u64, ArgError> {
    checked(bytes, bounds::is_token, ArgError::Token)
}

/// A token an observer knows of: 0 (none) or a fencing token (below 2^53).
pub fn known_token(bytes: &[u8]) -> Result<u64, ArgError> {
    if bytes == b"0" {
        return Ok(0);
    }
    token(bytes)
}

/// A reentrancy count: 1 <= count <= 2^32 - 1.
pub fn count(bytes: &[u8]) -> Result<u32, ArgError> {
    let count: u64 = checked(bytes, bounds::is_count, ArgError::Count)?;
    u32::try_from(count).map_err(|_| ArgError::Count)
}

/// The count a step expects to move from (`FROM c`): `min` <= c <= 2^32 - 1 (0 for
/// `LOCK.REENTER`, 1 for the releases).
pub fn from_count(bytes: &[u8], min: u32) -> Result<u32, ArgError> {
    Ok(in_range(bytes, u64::from(min), u64::from(u32::MAX), ArgError::Count)? as u32)
}

/// Words, and the unparsed count of a `FROM c` after them.
pub type WithFrom<'w, 'a> = (&'w [&'a [u8]], Option<&'a [u8]>);

/// Splits a trailing `FROM c` (the keyword case-insensitive) off `words`: the words before it,
/// and the count's bytes (unparsed, so that the words before it are checked first). `FROM`
/// anywhere else, or twice, is a syntax error.
pub fn split_from<'w, 'a>(words: &'w [&'a [u8]]) -> Result<WithFrom<'w, 'a>, ArgError> {
    let is_from = |word: &[u8]| word.eq_ignore_ascii_case(b"FROM");
    let (rest, count) = match words {
        [rest @ .., word, count] if is_from(word) => (rest, Some(*count)),
        _ => (words, None),
    };
    if rest.iter().any(|word| is_from(word)) {
        return Err(ArgError::Syntax);
    }
    Ok((rest, count))
}

/// The optional mode after an acquiring command's fixed arguments: nothing (exclusive),
/// `SHARED`, `SHARED LIMIT n` with 1 <= n <= 10^6, or `SHARED LIMIT n PERMITS p` with
/// 1 <= p <= n. Keywords are case-insensitive; the limit is checked before the permits.
pub fn mode(words: &[&[u8]]) -> Result<Mode, ArgError> {
    let is = |word: &[u8], keyword: &[u8]| word.eq_ignore_ascii_case(keyword);
    match words {
        [] => Ok(Mode::Exclusive),
        [shared] if is(shared, b"SHARED") => Ok(Mode::shared(0)),
        [shared, limit, n] if is(shared, b"SHARED") && is(limit, b"LIMIT") => {
            let n = in_range(n, 1, u64::from(MAX_LIMIT), ArgError::Limit)?;
            Ok(Mode::shared(n as u32))
        }
        [shared, limit, n, permits, p]
            if is(shared, b"SHARED") && is(limit, b"LIMIT") && is(permits, b"PERMITS") =>
        {
            let n = in_range(n, 1, u64::from(MAX_LIMIT), ArgError::Limit)?;
            let p = in_range(p, 1, n, ArgError::Permits)?;
            Ok(Mode::Shared {
                limit: n as u32,
                permits: p as u32,
            })
        }
        _ => Err(ArgError::Syntax),
    }
}

/// The most keys of one `LOCK.MACQUIRE`, `LOCK.MRELEASE` or `LOCK.MRENEW`.
pub const MAX_KEYS: usize = 256;

/// The keys of a numkeys command (`numkeys key [key ...]` then `tail` more arguments), given
/// its arguments after the command name: their range in `args`, checked as Redis checks its own
/// numkeys commands; no key twice.
pub fn keys_of(args: &[&[u8]], tail: usize) -> Result<std::ops::Range<usize>, ArgError> {
    let n = args
        .first()
        .and_then(|n| parse_integer(n))
        .filter(|n| *n > 0)
        .ok_or(ArgError::NumKeys)? as u64;
    if n > MAX_KEYS as u64 {
        return Err(ArgError::TooManyKeys);
    }
    let n = n as usize;
    if 1 + n > args.len() {
        return Err(ArgError::KeysBeyondArgs);
    }
    if 1 + n + tail != args.len() {
        return Err(ArgError::Syntax);
    }
    let keys = 1..1 + n;
    let mut seen: Vec<&[u8]> = args[keys.clone()].to_vec();
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(ArgError::DuplicateKey);
    }
    Ok(keys)
}

/// A count of entries to list (0..=2^32-1).
pub fn list_count(bytes: &[u8]) -> Result<usize, ArgError> {
    Ok(in_range(bytes, 0, u64::from(u32::MAX), ArgError::Count)? as usize)
}

/// What `LOCK.LOG` and `LOCK.STATS` are asked for: the first `n` entries, or to forget them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// The first `n` (0: all).
    First(usize),
    /// Forget them.
    Reset,
}

/// What `LOCK.APPLY` says after `key owner token count` (an effect, written by the module):
/// `[PXAT unix_ms] [GRANTED unix_ms] [SHARED [LIMIT n [PERMITS p]]]`, in that order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyTail {
    /// The key's expiry (a shared holder's lease end), Unix ms.
    pub expires_at: Option<i64>,
    /// When the hold was granted (0: not said, an effect from an older module).
    pub granted_at: i64,
    /// A shared holder: the key's limit (0: none) and the permits it holds.
    pub shared: Option<(u32, u32)>,
}

/// `LOCK.APPLY`'s words after `count`, within the bounds the RDB loader and the effect encoder
/// keep ([`bounds`]). A shared holder needs its lease end.
pub fn apply_tail(words: &[&[u8]]) -> Result<ApplyTail, ArgError> {
    let mut tail = ApplyTail::default();
    let mut rest = words;
    let is = |word: &[u8], name: &[u8]| word.eq_ignore_ascii_case(name);
    if let [word, at, more @ ..] = rest {
        if is(word, b"PXAT") {
            tail.expires_at = Some(expiry_at_ms(at)?);
            rest = more;
        }
    }
    if let [word, at, more @ ..] = rest {
        if is(word, b"GRANTED") {
            tail.granted_at = checked(at, bounds::is_grant_time, ArgError::Expiry)?;
            rest = more;
        }
    }
    tail.shared = match rest {
        [] => None,
        [shared] if is(shared, b"SHARED") => Some((0, 1)),
        [shared, limit, n] if is(shared, b"SHARED") && is(limit, b"LIMIT") => Some((
            in_range(n, 1, u64::from(MAX_LIMIT), ArgError::Limit)? as u32,
            1,
        )),
        [shared, limit, n, permits, p]
            if is(shared, b"SHARED") && is(limit, b"LIMIT") && is(permits, b"PERMITS") =>
        {
            let n = in_range(n, 1, u64::from(MAX_LIMIT), ArgError::Limit)?;
            let p = in_range(p, 1, n, ArgError::Permits)?;
            Some((n as u32, p as u32))
        }
        _ => return Err(ArgError::Syntax),
    };
    if tail.shared.is_some() && tail.expires_at.is_none() {
        return Err(ArgError::Syntax);
    }
    Ok(tail)
}

/// An absolute expiry in Unix milliseconds: 1 <= at <= 2^62 ([`bounds::MAX_EXPIRY_MS`]).
pub fn expiry_at_ms(bytes: &[u8]) -> Result<i64, ArgError> {
    checked(bytes, bounds::is_expiry, ArgError::Expiry)
}

#[cfg(test)]
mod tests {
    #[test]
    fn numkeys() {
        let a = |words: &[&str]| -> Vec<Vec<u8>> {
            words.iter().map(|w| w.as_bytes().to_vec()).collect()
        };
        let k = |words: &[&str], tail| {
            let owned = a(words);
            let args: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
            keys_of(&args, tail)
        };
        assert_eq!(k(&["2", "a", "b", "o", "1000"], 2), Ok(1..3));
        assert_eq!(k(&["1", "a", "o"], 1), Ok(1..2));
        assert_eq!(k(&["0", "o", "1"], 2), Err(ArgError::NumKeys));
        assert_eq!(k(&["-1", "o", "1"], 2), Err(ArgError::NumKeys));
        assert_eq!(k(&["x", "o", "1"], 2), Err(ArgError::NumKeys));
        assert_eq!(k(&["257", "o", "1"], 2), Err(ArgError::TooManyKeys));
        assert_eq!(k(&["5", "a", "o", "1"], 2), Err(ArgError::KeysBeyondArgs));
        assert_eq!(k(&["1", "a", "o", "1", "extra"], 2), Err(ArgError::Syntax));
        assert_eq!(
            k(&["2", "a", "o", "1"], 2),
            Err(ArgError::Syntax),
            "o taken as a key"
        );
        assert_eq!(
            k(&["2", "a", "a", "o", "1"], 2),
            Err(ArgError::DuplicateKey)
        );
        let many: Vec<String> = (0..256).map(|i| format!("k{i}")).collect();
        let mut words = vec!["256".to_string()];
        words.extend(many);
        words.extend(["o".into(), "1".into()]);
        let refs: Vec<&str> = words.iter().map(|w| w.as_str()).collect();
        assert_eq!(k(&refs, 2), Ok(1..257));
    }

    use super::*;
    use crate::bounds::MAX_TOKEN;

    #[test]
    fn apply_tail_table() {
        let tail = |words: &[&str]| {
            let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            apply_tail(&words)
        };
        let ok = |expires_at, granted_at, shared| {
            Ok(ApplyTail {
                expires_at,
                granted_at,
                shared,
            })
        };
        assert_eq!(tail(&[]), ok(None, 0, None));
        assert_eq!(tail(&["PXAT", "9"]), ok(Some(9), 0, None));
        assert_eq!(tail(&["pxat", "9", "GRANTED", "5"]), ok(Some(9), 5, None));
        assert_eq!(tail(&["PXAT", "9", "SHARED"]), ok(Some(9), 0, Some((0, 1))));
        assert_eq!(
            tail(&["PXAT", "9", "GRANTED", "5", "SHARED", "LIMIT", "3", "PERMITS", "2"]),
            ok(Some(9), 5, Some((3, 2)))
        );
        assert_eq!(
            tail(&["SHARED", "LIMIT", "3", "PERMITS", "4"]),
            Err(ArgError::Permits)
        );
        assert_eq!(tail(&["GRANTED", "5", "PXAT", "9"]), Err(ArgError::Syntax));
        assert_eq!(tail(&["SHARED", "PERMITS", "2"]), Err(ArgError::Syntax));
        assert_eq!(tail(&["GRANTED", "-1"]), Err(ArgError::Expiry));
        // The bounds of the RDB loader: any expiry for an exclusive hold; what a holder record
        // keeps for a lease end and a grant time.
        let far = bounds::MAX_EXPIRY_MS.to_string();
        let too_far = (bounds::MAX_EXPIRY_MS + 1).to_string();
        assert_eq!(tail(&["PXAT", &far]), ok(Some(1 << 62), 0, None));
        assert_eq!(
            tail(&["PXAT", &far, "SHARED"]),
            ok(Some(1 << 62), 0, Some((0, 1)))
        );
        assert_eq!(tail(&["PXAT", &too_far]), Err(ArgError::Expiry));
        let last = bounds::MAX_TIME_MS.to_string();
        let past = (bounds::MAX_TIME_MS + 1).to_string();
        assert_eq!(
            tail(&["GRANTED", &last]),
            ok(None, bounds::MAX_TIME_MS, None)
        );
        assert_eq!(tail(&["GRANTED", &past]), Err(ArgError::Expiry));
        assert_eq!(
            tail(&["SHARED"]),
            Err(ArgError::Syntax),
            "a lease end is needed"
        );
    }

    #[test]
    fn integers_parse_like_redis() {
        #[rustfmt::skip]
        let rows: &[(&[u8], Option<i64>)] = &[
            (b"0", Some(0)), (b"1", Some(1)), (b"-1", Some(-1)), (b"1000", Some(1000)),
            (b"9223372036854775807", Some(i64::MAX)), (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None), (b"", None), (b"-", None), (b"+1", None),
            (b"01", None), (b"-0", None), (b" 1", None), (b"1 ", None), (b"1.5", None),
            (b"1e3", None), (b"abc", None), (b"0x10", None), (b"\xff", None),
        ];
        for (input, expected) in rows {
            assert_eq!(
                parse_integer(input),
                *expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn bounds_table() {
        type Row = (&'static str, Result<u64, ArgError>, Result<u64, ArgError>);
        #[rustfmt::skip]
        let rows: &[Row] = &[
            // input,            ttl_ms,                  timeout_ms
            ("0",                Err(ArgError::Ttl),      Ok(0)),
            ("1",                Ok(1),                   Ok(1)),
            ("-1",               Err(ArgError::Ttl),      Err(ArgError::Timeout)),
            ("1000000000000",    Ok(MAX_TTL_MS),          Ok(MAX_TIMEOUT_MS)),
            ("1000000000001",    Err(ArgError::Ttl),      Err(ArgError::Timeout)),
            ("ten",              Err(ArgError::Ttl),      Err(ArgError::Timeout)),
            ("1.0",              Err(ArgError::Ttl),      Err(ArgError::Timeout)),
        ];
        for (input, ttl, timeout) in rows {
            assert_eq!(ttl_ms(input.as_bytes()), *ttl, "ttl {input}");
            assert_eq!(timeout_ms(input.as_bytes()), *timeout, "timeout {input}");
        }
    }

    #[test]
    fn owner_length_bounds() {
        assert_eq!(owner(b""), Err(ArgError::Owner));
        assert!(owner(&[0u8; 1]).is_ok());
        assert!(owner(&[0xffu8; 256]).is_ok());
        assert_eq!(owner(&[b'x'; 257]), Err(ArgError::Owner));
    }

    #[test]
    fn token_and_count_bounds() {
        assert_eq!(token(b"0"), Err(ArgError::Token));
        assert_eq!(token(b"9007199254740991"), Ok(MAX_TOKEN));
        assert_eq!(token(b"9007199254740992"), Err(ArgError::Token));
        assert_eq!(count(b"0"), Err(ArgError::Count));
        assert_eq!(count(b"4294967295"), Ok(u32::MAX));
        assert_eq!(count(b"4294967296"), Err(ArgError::Count));
    }

    #[test]
    fn from_words() {
        let split = |words: &[&'static [u8]]| -> Result<(usize, Option<&'static [u8]>), ArgError> {
            let words: Vec<&[u8]> = words.to_vec();
            split_from(&words).map(|(rest, count)| (rest.len(), count))
        };
        assert_eq!(split(&[]), Ok((0, None)));
        assert_eq!(split(&[b"SHARED"]), Ok((1, None)));
        assert_eq!(split(&[b"from", b"3"]), Ok((0, Some(&b"3"[..]))));
        assert_eq!(split(&[b"SHARED", b"FROM", b"x"]), Ok((1, Some(&b"x"[..]))));
        assert_eq!(
            split(&[b"FROM", b"1", b"FROM", b"2"]),
            Err(ArgError::Syntax)
        );
        assert_eq!(split(&[b"FROM", b"1", b"SHARED"]), Err(ArgError::Syntax));
        // A FROM without its count.
        assert_eq!(split(&[b"FROM"]), Err(ArgError::Syntax));
        type Row = (&'static str, Result<u32, ArgError>, Result<u32, ArgError>);
        #[rustfmt::skip]
        let rows: &[Row] = &[
            // input,        min 0 (REENTER),        min 1 (RELEASE)
            ("0",            Ok(0),                  Err(ArgError::Count)),
            ("1",            Ok(1),                  Ok(1)),
            ("4294967295",   Ok(u32::MAX),           Ok(u32::MAX)),
            ("4294967296",   Err(ArgError::Count),   Err(ArgError::Count)),
            ("-1",           Err(ArgError::Count),   Err(ArgError::Count)),
            ("01",           Err(ArgError::Count),   Err(ArgError::Count)),
            ("x",            Err(ArgError::Count),   Err(ArgError::Count)),
        ];
        for (input, reenter, release) in rows {
            assert_eq!(from_count(input.as_bytes(), 0), *reenter, "{input}");
            assert_eq!(from_count(input.as_bytes(), 1), *release, "{input}");
        }
    }

    #[test]
    fn expiry_bounds() {
        assert_eq!(expiry_at_ms(b"0"), Err(ArgError::Expiry));
        assert_eq!(expiry_at_ms(b"1"), Ok(1));
        assert_eq!(expiry_at_ms(b"1800000000000"), Ok(1_800_000_000_000));
        assert_eq!(expiry_at_ms(b"4611686018427387904"), Ok(1 << 62));
        assert_eq!(expiry_at_ms(b"4611686018427387905"), Err(ArgError::Expiry));
        assert_eq!(expiry_at_ms(b"9223372036854775807"), Err(ArgError::Expiry));
        assert_eq!(expiry_at_ms(b"-5"), Err(ArgError::Expiry));
    }

    #[test]
    fn modes() {
        let m = |words: &[&[u8]]| mode(words);
        assert_eq!(m(&[]), Ok(Mode::Exclusive));
        assert_eq!(m(&[b"shared"]), Ok(Mode::shared(0)));
        assert_eq!(m(&[b"SHARED", b"limit", b"3"]), Ok(Mode::shared(3)));
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"1000000"]),
            Ok(Mode::shared(1_000_000))
        );
        assert_eq!(m(&[b"SHARED", b"LIMIT", b"1000001"]), Err(ArgError::Limit));
        assert_eq!(m(&[b"SHARED", b"LIMIT", b"0"]), Err(ArgError::Limit));
        assert_eq!(m(&[b"SHARED", b"LIMIT", b"x"]), Err(ArgError::Limit));
        assert_eq!(m(&[b"LIMIT", b"3"]), Err(ArgError::Syntax));
        assert_eq!(m(&[b"SHARED", b"SHARED"]), Err(ArgError::Syntax));
        assert_eq!(m(&[b"EXCLUSIVE"]), Err(ArgError::Syntax));
        assert_eq!(m(&[b"SHARED", b"LIMIT"]), Err(ArgError::Syntax));
        assert_eq!(ArgError::Limit.to_string(), "ERR invalid limit");
        let p = |limit, permits| Ok(Mode::Shared { limit, permits });
        assert_eq!(m(&[b"SHARED", b"LIMIT", b"10", b"permits", b"3"]), p(10, 3));
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"10", b"PERMITS", b"10"]),
            p(10, 10)
        );
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"10", b"PERMITS", b"11"]),
            Err(ArgError::Permits)
        );
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"10", b"PERMITS", b"0"]),
            Err(ArgError::Permits)
        );
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"0", b"PERMITS", b"x"]),
            Err(ArgError::Limit)
        );
        assert_eq!(m(&[b"SHARED", b"PERMITS", b"2"]), Err(ArgError::Syntax));
        assert_eq!(
            m(&[b"SHARED", b"LIMIT", b"3", b"PERMITS"]),
            Err(ArgError::Syntax)
        );
    }

    /// Every keyword of a mode must be the right one, in its place: a misspelt or misplaced
    /// one is a syntax error, not a shared mode.
    #[test]
    fn modes_need_every_keyword_in_its_place() {
        #[rustfmt::skip]
        let wrong: &[&[&[u8]]] = &[
            &[b"SHARED", b"LIMIT", b"3", b"PERMIT", b"1"],
            &[b"SHARED", b"LIMITS", b"3", b"PERMITS", b"1"],
            &[b"SHARD", b"LIMIT", b"3", b"PERMITS", b"1"],
            &[b"SHARED", b"PERMITS", b"3", b"LIMIT", b"1"],
            &[b"SHARED", b"SHARED", b"3", b"PERMITS", b"1"],
            &[b"SHARED", b"LIMITS", b"3"],
            &[b"SHARD", b"LIMIT", b"3"],
        ];
        for words in wrong {
            assert_eq!(mode(words), Err(ArgError::Syntax), "{words:?}");
        }
    }

    #[test]
    fn errors_read_as_redis_errors() {
        assert_eq!(ArgError::Ttl.to_string(), "ERR invalid ttl_ms");
        assert_eq!(ArgError::Timeout.to_string(), "ERR invalid timeout_ms");
        assert_eq!(ArgError::Owner.to_string(), "ERR invalid owner");
    }
}
