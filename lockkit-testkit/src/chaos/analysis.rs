//! The end-of-run checks: no orphaned name, the history (overlaps, token order), and the
//! resources (fencing, lost updates).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::ChaosConfig;
use super::report::ChaosReport;
use super::worker::{Entry, Shared, WriteOutcome};
use crate::harness::Harness;
use crate::history::{Hold, Violation};
use crate::sync::locked;

/// Every name is idle once the clients stopped (after the lease, for holds of killed clients).
pub(super) async fn check_orphans(
    harness: &dyn Harness,
    shared: &Shared,
    lease: Option<Duration>,
    violations: &mut Vec<String>,
) {
    let client = match harness.client().await {
        Ok(client) => client,
        Err(error) => {
            violations.push(format!("orphans: no client to inspect with: {error}"));
            return;
        }
    };
    if !client.provider.capabilities().inspect {
        return;
    }
    let bound = lease.unwrap_or(Duration::ZERO) * 2 + Duration::from_secs(10);
    for name in &shared.names {
        let deadline = Instant::now() + bound;
        loop {
            let info = tokio::time::timeout(shared.op_limit, client.provider.inspect(name)).await;
            let last = match info {
                Ok(Ok(info)) if info.is_idle() => break,
                Ok(Ok(info)) => format!("{info:?}"),
                Ok(Err(error)) => format!("inspect failed: {error}"),
                Err(_) => "inspect hung".to_owned(),
            };
            if Instant::now() >= deadline {
                violations
                    .push(format!("orphans: lock {name:?} is not idle {bound:?} after the clients stopped: {last}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether `hold` spans a restart of a store that loses data.
fn spans_restart(hold: &Hold, restarts: &[(Instant, Instant)]) -> bool {
    restarts.iter().any(|&(start, end)| hold.start < end && hold.valid_end().is_none_or(|e| e > start))
}

/// A hold, with its instants as milliseconds since the run's start.
fn describe(hold: &Hold, origin: Instant) -> String {
    let ms = |at: Option<Instant>| match at {
        Some(at) => format!("+{:.1} ms", at.saturating_duration_since(origin).as_secs_f64() * 1000.0),
        None => "never".to_owned(),
    };
    format!(
        "{} token {} held from {} to {} (local deadline {})",
        hold.client,
        hold.token,
        ms(Some(hold.start)),
        ms(hold.end),
        ms(hold.valid_until)
    )
}

/// The end-of-run checks on the history and the resources.
pub(super) fn analyse(
    shared: &Shared,
    config: &ChaosConfig,
    origin: Instant,
    restarts: &[(Instant, Instant)],
    report: &mut ChaosReport,
) {
    let excusable = |hold: &Hold| config.restart_loses_data && spans_restart(hold, restarts);
    let holds: Vec<Hold> = locked(&shared.holds)
        .iter()
        .map(|hold| {
            hold.clone().unwrap_or_else(|| Hold {
                client: "a hold that never ended".to_owned(),
                lock: String::new(),
                token: 0,
                kind: lockkit_core::HoldKind::Exclusive,
                start: Instant::now(),
                end: None,
                valid_until: None,
            })
        })
        .collect();

    // Readers: a read made while the guard was valid must never be refused as stale.
    report.reads = shared.reads.load(Ordering::Relaxed);
    for refused in locked(&shared.reads_refused_while_valid).iter() {
        report.violations.push(format!("a read was refused as stale while its guard was valid: {refused}"));
    }

    // Mutual exclusion (by kind) and token order.
    if let Err(found) = shared.history.check() {
        for violation in found {
            match &violation {
                Violation::Overlap { first, .. } if excusable(first) => {
                    report.overlaps_by_design += 1;
                    report.by_design.push(format!("a store restart or failover lost the record: {violation}"));
                }
                Violation::Overlap { first, second } => {
                    report.overlaps += 1;
                    report.violations.push(format!(
                        "{violation}\n      first:  {}\n      second: {}",
                        describe(first, origin),
                        describe(second, origin)
                    ));
                }
                Violation::TokenRegression { .. } => {
                    report.token_regressions += 1;
                    report.violations.push(format!("{violation}"));
                }
            }
        }
    }

    // Writes, as the writers saw them.
    let writes = locked(&shared.writes).clone();
    let mut outcome_of: HashMap<(usize, u64), WriteOutcome> = HashMap::new();
    for write in &writes {
        outcome_of.insert((write.entry.client, write.entry.seq), write.outcome);
        match write.outcome {
            WriteOutcome::Valid => {
                report.valid_writes += 1;
            }
            WriteOutcome::Late => report.late_writes += 1,
            WriteOutcome::Refused => report.stale_rejected += 1,
            WriteOutcome::RefusedWhileValid => {
                report.stale_rejected += 1;
                let hold = &holds[write.entry.hold];
                let text = format!(
                    "lock {:?}: a write of {} was refused as stale while its guard was valid (a newer holder wrote during its hold), at +{:.1} ms",
                    shared.names[write.name],
                    describe(hold, origin),
                    write.at.saturating_duration_since(origin).as_secs_f64() * 1000.0
                );
                if excusable(hold) {
                    report.by_design.push(text);
                } else {
                    report.violations.push(text);
                }
            }
        }
    }

    // The resources: tokens in order, one hold per token, counters consecutive, nothing lost.
    for (name, resource) in shared.resources.iter().enumerate() {
        let accepted = resource.accepted();
        let mut token_hold: HashMap<u64, usize> = HashMap::new();
        let mut previous: Option<&Entry> = None;
        for (token, entry) in accepted.iter().map(|(t, e)| (t.get(), e)) {
            if let Some(&other) = token_hold.get(&token)
                && other != entry.hold
            {
                report.violations.push(format!(
                    "lock {:?}: token {token} was used by two holds: {} and {}",
                    shared.names[name],
                    describe(&holds[other], origin),
                    describe(&holds[entry.hold], origin)
                ));
            }
            token_hold.insert(token, entry.hold);
            if let Some(prev) = previous {
                if token < prev.token {
                    report.violations.push(format!(
                        "lock {:?}: the resource accepted token {token} after {}",
                        shared.names[name], prev.token
                    ));
                }
                if entry.counter != prev.counter + 1 {
                    // `entry` was computed from a state older than `prev`: `prev` is lost.
                    let lost_hold = &holds[prev.hold];
                    let by = &holds[entry.hold];
                    let text = format!(
                        "lock {:?}: the write of {} (counter {}) was overwritten by {} (counter {}), which had not seen it",
                        shared.names[name],
                        describe(lost_hold, origin),
                        prev.counter,
                        describe(by, origin),
                        entry.counter
                    );
                    match outcome_of.get(&(prev.client, prev.seq)) {
                        Some(WriteOutcome::Valid) if excusable(lost_hold) || excusable(by) => {
                            report.lost_by_design += 1;
                            report.by_design.push(text);
                        }
                        Some(WriteOutcome::Valid) => {
                            report.lost_writes += 1;
                            report.violations.push(format!("lost write: {text}"));
                        }
                        _ => report.late_writes_overwritten += 1,
                    }
                }
            }
            previous = Some(entry);
        }
        let present: HashSet<(usize, u64)> = accepted.iter().map(|(_, e)| (e.client, e.seq)).collect();
        for write in writes.iter().filter(|w| w.name == name && w.outcome == WriteOutcome::Valid) {
            if !present.contains(&(write.entry.client, write.entry.seq)) {
                report.lost_writes += 1;
                report.violations.push(format!(
                    "lost write: lock {:?}: the accepted write {:?} is missing from the resource",
                    shared.names[name], write.entry
                ));
            }
        }
    }
}
