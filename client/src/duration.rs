//! Durations as people write them (`500ms`, `10s`, `2m`).

use std::time::Duration;

/// Parses a duration such as `500ms`, `10s`, `2m`, `1h`, `1e3s` or a bare number of seconds
/// (`30`). Used by `lockctl`; exposed because callers often read ttls from configuration.
/// It only parses: what a duration may be used for is checked by [`limits`](crate::limits).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let mut split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    // An exponent (`1e3s`) belongs to the number, not the unit.
    if let Some(rest) = text[split..].strip_prefix(['e', 'E']) {
        let sign = usize::from(rest.starts_with(['+', '-']));
        let digits = rest[sign..].len()
            - rest[sign..]
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if digits > 0 {
            split += 1 + sign + digits;
        }
    }
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (try 500ms, 10s, 2m)"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m or h)"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale)
        .map_err(|e| format!("invalid duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("30"), Ok(ms(30_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1e3ms"), Ok(ms(1_000)));
        assert_eq!(parse_duration("2.5E-3s"), Ok(Duration::from_micros(2_500)));
        assert_eq!(
            parse_duration("1e19s"),
            Ok(Duration::from_secs(10_000_000_000_000_000_000))
        );
        assert!(parse_duration("1e400s").is_err());
        assert!(parse_duration("1e").is_err());
        assert!(parse_duration("1es").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
