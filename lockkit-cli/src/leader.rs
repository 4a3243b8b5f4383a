//! `lockkit leader NAME [--watch] [--json]`: who leads an election, and every change.

use std::time::SystemTime;

use lockkit::{Leader, LeaderEvent};
use serde_json::json;

use crate::cli::LeaderArgs;
use crate::exit::{self, Code, Failure};
use crate::signals::{self, Signals};
use crate::status::{human, unix_millis, utc};
use crate::target::Target;

/// Runs `lockkit leader`; returns the exit code.
pub(crate) async fn leader(args: LeaderArgs) -> Result<Code, Failure> {
    let target = Target::resolve(args.url.clone());
    let what = format!("election {:?} on {}", args.name, target.shown());
    let provider = target.connect(&args.name, false).await?;
    let election = provider
        .election(&args.name)
        .map_err(|error| Failure::from_lock_error(&error, &format!("cannot use {what}")))?;
    if !args.watch {
        let leader = election
            .leader()
            .await
            .map_err(|error| Failure::from_lock_error(&error, &format!("cannot read {what}")))?;
        let event = leader.map_or(LeaderEvent::Vacant, LeaderEvent::Elected);
        println!("{}", if args.json { line_json(&args.name, &event) } else { line_text(&event, SystemTime::now()) });
        return Ok(0);
    }
    let mut signals = Signals::install()?;
    let mut changes =
        election.observe().map_err(|error| Failure::from_lock_error(&error, &format!("cannot observe {what}")))?;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(event)) => {
                    println!("{}", if args.json { line_json(&args.name, &event) } else { line_text(&event, SystemTime::now()) });
                }
                Some(Err(error)) => return Err(Failure::from_lock_error(&error, &format!("lost sight of {what}"))),
                None => return Err(Failure::new(exit::UNAVAILABLE, format!("the store ended the changes of {what}"))),
            },
            signal = signals.recv() => {
                eprintln!("lockkit: got {}; stopped watching {what}", signals::name(signal));
                return Ok(exit::signalled(signal));
            }
        }
    }
}

/// One line for people: `leader 10.0.0.7:8080 (term 42, since … (3s ago))`, `no leader`, or
/// the gap.
fn line_text(event: &LeaderEvent, now: SystemTime) -> String {
    match event {
        LeaderEvent::Elected(leader) => {
            let since = leader
                .since
                .map(|since| {
                    let ago = now.duration_since(since).map(|ago| format!(" ({} ago)", human(ago))).unwrap_or_default();
                    format!(", since {}{ago}", utc(since))
                })
                .unwrap_or_default();
            format!("leader {} (term {}{since})", identity(leader), leader.term)
        }
        LeaderEvent::Vacant => "no leader".to_owned(),
        _ => "gap: changes passed that the store could not replay; the current state follows".to_owned(),
    }
}

/// One JSON object: `event` (elected, vacant, gap), `election`, `identity`, `term`,
/// `since_unix_ms` (`null` where not known).
fn line_json(name: &str, event: &LeaderEvent) -> String {
    let (kind, leader) = match event {
        LeaderEvent::Elected(leader) => ("elected", Some(leader)),
        LeaderEvent::Vacant => ("vacant", None),
        _ => ("gap", None),
    };
    json!({
        "event": kind,
        "election": name,
        "identity": leader.map(identity),
        "term": leader.map(|l| l.term.get()),
        "since_unix_ms": leader.and_then(|l| l.since).map(unix_millis),
    })
    .to_string()
}

/// The identity as text (lossy for bytes that are not UTF-8).
fn identity(leader: &Leader) -> String {
    String::from_utf8_lossy(&leader.identity).into_owned()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use lockkit::FencingToken;

    use super::*;

    #[test]
    fn leaders_read_as_a_line_and_as_json() {
        let leader = Leader::new(Arc::from(&b"10.0.0.7:8080"[..]), FencingToken::new(42), Some(UNIX_EPOCH));
        let text = line_text(&LeaderEvent::Elected(leader.clone()), UNIX_EPOCH + Duration::from_secs(3));
        assert_eq!(text, "leader 10.0.0.7:8080 (term 42, since 1970-01-01 00:00:00.000 UTC (3s ago))");
        assert_eq!(line_text(&LeaderEvent::Vacant, UNIX_EPOCH), "no leader");
        let json: serde_json::Value = serde_json::from_str(&line_json("e", &LeaderEvent::Elected(leader))).unwrap();
        assert_eq!((json["event"].as_str(), json["term"].as_u64()), (Some("elected"), Some(42)));
        let vacant: serde_json::Value = serde_json::from_str(&line_json("e", &LeaderEvent::Vacant)).unwrap();
        assert!(vacant["identity"].is_null() && vacant["event"] == "vacant");
    }
}
