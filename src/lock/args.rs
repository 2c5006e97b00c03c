//! Command arguments: parsing and bounds, with the exact error each violation gets.

use super::tokens::MAX_TOKEN;

/// Longest owner, in bytes.
pub const MAX_OWNER_LEN: usize = 256;
/// Longest lock lifetime: 10^12 ms (about 31.7 years).
pub const MAX_TTL_MS: u64 = 1_000_000_000_000;
/// Longest wait: the same bound as a lifetime. 0 means no limit.
pub const MAX_TIMEOUT_MS: u64 = MAX_TTL_MS;

/// A bad argument. `Display` is the Redis error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    Owner,
    Ttl,
    Timeout,
    Token,
    Count,
    Expiry,
    Syntax,
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
            ArgError::Syntax => "ERR syntax error",
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

/// An owner: 1 to 256 bytes, any bytes.
pub fn owner(bytes: &[u8]) -> Result<&[u8], ArgError> {
    if bytes.is_empty() || bytes.len() > MAX_OWNER_LEN {
        Err(ArgError::Owner)
    } else {
        Ok(bytes)
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
    in_range(bytes, 1, MAX_TOKEN, ArgError::Token)
}

/// A reentrancy count: 1 <= count <= 2^32 - 1.
pub fn count(bytes: &[u8]) -> Result<u32, ArgError> {
    in_range(bytes, 1, u64::from(super::hold::MAX_COUNT), ArgError::Count)
        .map(|c| u32::try_from(c).unwrap_or(super::hold::MAX_COUNT))
}

/// An absolute expiry in Unix milliseconds: 1 <= at <= 2^62.
pub fn expiry_at_ms(bytes: &[u8]) -> Result<u64, ArgError> {
    in_range(bytes, 1, 1 << 62, ArgError::Expiry)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn expiry_bounds() {
        assert_eq!(expiry_at_ms(b"0"), Err(ArgError::Expiry));
        assert_eq!(expiry_at_ms(b"1"), Ok(1));
        assert_eq!(expiry_at_ms(b"1800000000000"), Ok(1_800_000_000_000));
        assert_eq!(expiry_at_ms(b"4611686018427387904"), Ok(1 << 62));
        assert_eq!(expiry_at_ms(b"4611686018427387905"), Err(ArgError::Expiry));
        assert_eq!(expiry_at_ms(b"-5"), Err(ArgError::Expiry));
    }

    #[test]
    fn errors_read_as_redis_errors() {
        assert_eq!(ArgError::Ttl.to_string(), "ERR invalid ttl_ms");
        assert_eq!(ArgError::Timeout.to_string(), "ERR invalid timeout_ms");
        assert_eq!(ArgError::Owner.to_string(), "ERR invalid owner");
    }
}
