//! `lockkit status NAME`: who holds a lock, with which token, for how much longer.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit::HoldKind;
use lockkit::backend::{HolderInfo, LockInfo};

use crate::cli::StatusArgs;
use crate::exit::{Code, Failure};
use crate::target::Target;

/// Runs `lockkit status`; exits 0 whether the lock is held or free.
pub(crate) async fn status(args: StatusArgs) -> Result<Code, Failure> {
    let target = Target::resolve(args.url);
    let provider = target.connect(&args.name, false).await?;
    let info = provider.inspect(&args.name).await.map_err(|error| {
        Failure::from_lock_error(&error, &format!("cannot read lock {:?} on {}", args.name, target.shown()))
    })?;
    let now = SystemTime::now();
    let text = if args.json {
        json(&args.name, target.shown(), &info)
    } else {
        human_report(&args.name, target.shown(), &info, now)
    };
    println!("{text}");
    Ok(0)
}

/// "3 readers", "a writer", "2 of 3 permits": who holds the lock, by kind.
fn held_by(holders: &[HolderInfo]) -> String {
    let count = |kind: fn(&HoldKind) -> bool| holders.iter().filter(|h| kind(&h.kind)).count();
    let readers = count(|k| *k == HoldKind::Read);
    let writers = count(|k| matches!(k, HoldKind::Write | HoldKind::Exclusive));
    let permits = holders.iter().find_map(|h| match h.kind {
        HoldKind::Permit { permits } => Some(permits.get()),
        _ => None,
    });
    let mut parts = Vec::new();
    if writers > 0 {
        parts.push(if writers == 1 { "a writer".to_owned() } else { format!("{writers} writers") });
    }
    if readers > 0 {
        parts.push(if readers == 1 { "a reader".to_owned() } else { format!("{readers} readers") });
    }
    if let Some(of) = permits {
        parts.push(format!("{} of {of} permits", holders.len()));
    }
    parts.join(", ")
}

/// One word for a kind of hold.
pub(crate) fn kind_word(kind: &HoldKind) -> &'static str {
    match kind {
        HoldKind::Read => "read",
        HoldKind::Write => "write",
        HoldKind::Permit { .. } => "permit",
        _ => "exclusive",
    }
}

/// The `--json` object. Field names are stable; unknown values are `null`.
fn json(lock: &str, url: &str, info: &LockInfo) -> String {
    let holder = info.holder();
    let holders: Vec<serde_json::Value> = info
        .holders
        .iter()
        .map(|h| serde_json::json!({ "token": h.token.get(), "kind": kind_word(&h.kind), "owner": h.owner }))
        .collect();
    serde_json::json!({
        "held": holder.is_some(),
        "lock": lock,
        "url": url,
        "token": holder.map(|h| h.token.get()),
        "owner": holder.map(|h| h.owner.as_str()),
        "since_unix_ms": holder.and_then(|h| h.since).map(unix_millis),
        "lease_left_ms": holder.and_then(|h| h.lease_left).map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
        "waiters": info.waiters,
        "holders": holders,
    })
    .to_string()
}

/// The aligned lines for people.
pub(crate) fn human_report(lock: &str, url: &str, info: &LockInfo, now: SystemTime) -> String {
    let mut lines: Vec<(&str, String)> = vec![("lock", format!("{lock:?}")), ("url", url.to_owned())];
    match info.holder() {
        None => lines.push(("held", "no".to_owned())),
        Some(holder) => {
            lines.push(("held", "yes".to_owned()));
            if info.holders.len() > 1 || holder.kind != HoldKind::Exclusive {
                lines.push(("holders", held_by(&info.holders)));
            }
            lines.push(("token", holder.token.to_string()));
            lines.push(("owner", holder.owner.clone()));
            if let Some(since) = holder.since {
                let ago = now.duration_since(since).map(|ago| format!(" ({} ago)", human(ago))).unwrap_or_default();
                lines.push(("since", format!("{}{ago}", utc(since))));
            }
            if let Some(left) = holder.lease_left {
                lines.push(("lease", format!("{} left", human(left))));
            }
            for other in info.holders.iter().skip(1) {
                lines.push(("also", format!("token {} ({}) {}", other.token, kind_word(&other.kind), other.owner)));
            }
        }
    }
    lines.push(("waiters", info.waiters.map_or_else(|| "unknown to this backend".to_owned(), |n| n.to_string())));
    let mut text = String::new();
    for (i, (key, value)) in lines.iter().enumerate() {
        let newline = if i == 0 { "" } else { "\n" };
        let _ = write!(text, "{newline}{:<8} {value}", format!("{key}:"));
    }
    text
}

pub(crate) fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// A duration the way people write it: `300ms`, `1.5s`, `12s`, `2m 5s`, `1h 3m`.
pub(crate) fn human(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{}ms", duration.as_millis()),
        1..10 => {
            let tenths = duration.as_millis() / 100;
            if tenths.is_multiple_of(10) { format!("{secs}s") } else { format!("{}.{}s", tenths / 10, tenths % 10) }
        }
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `2026-05-01 12:00:00.123 UTC`, without a time-zone database.
pub(crate) fn utc(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (year, month, day) = civil_from_days(days);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(0), u32::try_from(day).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use lockkit::FencingToken;

    use super::*;

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(UNIX_EPOCH + Duration::from_millis(1_709_210_096_789)), "2024-02-29 12:34:56.789 UTC");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human(Duration::from_millis(300)), "300ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_secs(10)), "10s");
        assert_eq!(human(Duration::from_secs(125)), "2m 5s");
    }

    #[test]
    fn json_has_every_field_even_when_free() {
        let free: serde_json::Value =
            serde_json::from_str(&json("x", "mem://", &LockInfo::new(Vec::new(), Some(0)))).unwrap();
        for field in ["held", "lock", "url", "token", "owner", "since_unix_ms", "lease_left_ms", "waiters", "holders"] {
            assert!(free.get(field).is_some(), "{field} missing from {free}");
        }
        let holder = HolderInfo::new(FencingToken::new(7), "me").with_lease_left(Duration::from_millis(1500));
        let held: serde_json::Value =
            serde_json::from_str(&json("x", "mem://", &LockInfo::new(vec![holder], None))).unwrap();
        assert_eq!(held["token"], 7);
        assert_eq!(held["lease_left_ms"], 1500);
        assert_eq!(held["waiters"], serde_json::Value::Null);
    }

    #[test]
    fn shared_holders_are_listed_by_kind() {
        let read = |token| HolderInfo::new(FencingToken::new(token), "r").with_kind(HoldKind::Read);
        let text = human_report("x", "mem://", &LockInfo::new(vec![read(3), read(4)], Some(1)), UNIX_EPOCH);
        assert!(text.contains("holders: 2 readers"), "{text}");
        assert!(text.contains("also:    token 4 (read) r"), "{text}");
        let three = NonZeroU32::new(3).unwrap();
        let permit =
            |token| HolderInfo::new(FencingToken::new(token), "p").with_kind(HoldKind::Permit { permits: three });
        let text = human_report("x", "mem://", &LockInfo::new(vec![permit(5), permit(6)], None), UNIX_EPOCH);
        assert!(text.contains("holders: 2 of 3 permits"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&json("x", "mem://", &LockInfo::new(vec![permit(5)], None))).unwrap();
        assert_eq!(json["holders"][0]["kind"], "permit");
    }

    #[test]
    fn human_lines_are_aligned() {
        let holder = HolderInfo::new(FencingToken::new(7), "me").with_since(UNIX_EPOCH);
        let text =
            human_report("x", "mem://", &LockInfo::new(vec![holder], Some(2)), UNIX_EPOCH + Duration::from_secs(3));
        assert_eq!(
            text,
            "lock:    \"x\"\nurl:     mem://\nheld:    yes\ntoken:   7\nowner:   me\n\
             since:   1970-01-01 00:00:00.000 UTC (3s ago)\nwaiters: 2"
        );
    }
}
