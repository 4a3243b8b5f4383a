//! Durations in settings: how they are written ([`parse_duration`], [`show_duration`]) and the
//! longest any setting accepts ([`MAX_DURATION`]).

use std::time::Duration;

/// The longest duration any setting of any backend accepts: a day. Leases, session timeouts,
/// renewal intervals and response timeouts beyond it are refused when the provider is
/// built, which keeps every deadline computed from them far inside what `Instant`, Redis's
/// `PX` and ZooKeeper's 32-bit millisecond fields can carry. A backend may bound a setting
/// lower (ZooKeeper servers clamp session timeouts to their own range, say).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `duration` in whole milliseconds, saturating: what a store that counts milliseconds
/// (Redis's `PX` and `WAIT`, PostgreSQL's `statement_timeout`) is sent.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `duration` with its sub-millisecond part dropped, for a backend that counts whole
/// milliseconds and checks settings as the store will see them.
pub fn whole_millis(duration: Duration) -> Duration {
    Duration::from_millis(millis(duration))
}

/// Parses a duration written as a number and a unit: `500ms`, `10s`, `1.5s`, `2m`, `1h`
/// (also `us` and `d`). A bare number is refused, so that `--wait 5` is never mistaken for
/// milliseconds.
///
/// # Errors
///
/// A message that shows the accepted forms.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let hint = || format!("{text:?} is not a duration; write it like 500ms, 10s, 1.5s, 2m or 1h");
    let value: f64 = number.parse().map_err(|_| hint())?;
    let seconds = match unit.trim() {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" | "sec" | "secs" => value,
        "m" | "min" | "mins" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => return Err(hint()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| hint())
}

/// Writes `duration` the way [`parse_duration`] reads it, in the largest unit that keeps it
/// whole: `30s`, `200ms`, `2m`, `1d`, `1500us`.
pub fn show_duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in
        [("d", 86_400_000_000_u128), ("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1_000)]
    {
        if micros.is_multiple_of(size) {
            return format!("{}{unit}", micros / size);
        }
    }
    format!("{micros}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        for bad in ["5", "", "s", "-1s", "1x", "1e400s", "NaNs", "5000000000000000000000000h"] {
            assert!(parse_duration(bad).unwrap_err().contains("500ms"), "{bad}");
        }
    }

    #[test]
    fn durations_are_shown_as_they_are_read() {
        for text in ["30s", "200ms", "2m", "1d", "1500us", "0s", "90s"] {
            assert_eq!(show_duration(parse_duration(text).unwrap_or_default()), text);
        }
    }
}
