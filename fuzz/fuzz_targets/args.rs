//! Argument parsing: never panics, and whatever it accepts is canonical and in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relock_engine::args::{count, from_count, owner, parse_integer, timeout_ms, token, ttl_ms};

fuzz_target!(|data: &[u8]| {
    // Redis's string2ll accepts exactly the canonical decimal form of an i64.
    if let Some(v) = parse_integer(data) {
        assert_eq!(v.to_string().as_bytes(), data);
    } else if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(v) = text.parse::<i64>() {
            assert_ne!(v.to_string(), text, "canonical {text} refused");
        }
    }
    if let Ok(t) = ttl_ms(data) {
        assert!((1..=1_000_000_000_000).contains(&t));
    }
    if let Ok(t) = timeout_ms(data) {
        assert!(t <= 1_000_000_000_000);
    }
    if let Ok(t) = token(data) {
        assert!((1..1 << 53).contains(&t));
    }
    if let Ok(c) = count(data) {
        assert!(c >= 1);
    }
    // `FROM c`: 0 for a re-entry, at least 1 for a release; one parse for both.
    match (from_count(data, 0), from_count(data, 1)) {
        (Ok(0), Err(_)) | (Err(_), Err(_)) => {}
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        other => panic!("FROM bounds disagree: {other:?}"),
    }
    match owner(data) {
        Ok(o) => assert!(!o.is_empty() && o.len() <= 256 && o == data),
        Err(_) => assert!(data.is_empty() || data.len() > 256),
    }
});
