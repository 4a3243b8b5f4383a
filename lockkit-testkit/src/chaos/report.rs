//! What a chaos run did and found, and how it reads.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::SEED_ENV;
use super::config::{FaultKind, ScheduledFault};

/// What a chaos run did and found.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ChaosReport {
    /// The backend's name.
    pub backend: String,
    /// The seed.
    pub seed: u64,
    /// The planned faults.
    pub schedule: Vec<ScheduledFault>,
    /// The faults as applied: a client fault strikes a client holding a lock when there is
    /// one (the first from the scheduled client on), so the target may differ from the plan.
    pub applied: Vec<String>,
    /// Client faults that struck a client while it held a lock.
    pub faults_on_holders: u64,
    /// Of those, the faults that struck a client in a long hold (half a lease or more).
    pub faults_on_long_holds: u64,
    /// Faults applied, by kind.
    pub faults_applied: BTreeMap<FaultKind, u64>,
    /// Faults skipped because the harness lacks the hook, by kind.
    pub faults_skipped: BTreeMap<FaultKind, u64>,
    /// How long the run took.
    pub elapsed: Duration,
    /// Successful acquisitions (fresh holds).
    pub acquisitions: u64,
    /// `try_acquire` calls that found the lock taken.
    pub busy: u64,
    /// `acquire_timeout` calls that timed out.
    pub timeouts: u64,
    /// Acquisitions cancelled by dropping the future mid-wait.
    pub cancelled: u64,
    /// Operations that failed with an error (connection errors during faults, mostly).
    pub errors: u64,
    /// Holds ended by `release`.
    pub releases: u64,
    /// Holds ended by dropping the guard.
    pub drops: u64,
    /// Holds that were lost (loss signalled or deadline passed) before their end.
    pub losses: u64,
    /// Acquisitions whose guard was already past its local deadline when the call returned
    /// (the client stalled between the grant and the return): never valid, so left out of the
    /// history; they count among `acquisitions` and `losses`.
    pub expired_on_arrival: u64,
    /// Writes made while the guard was valid, and accepted.
    pub valid_writes: u64,
    /// Writes accepted although the guard was no longer valid right after (made at the edge
    /// of the validity; no guarantee covers them).
    pub late_writes: u64,
    /// Writes refused by fencing (a newer holder had written): the stale holder was stopped.
    pub stale_rejected: u64,
    /// Reads made by readers of a read-write lock while their guard was valid.
    pub reads: u64,
    /// Overlapping holds found by the history checker (violations).
    pub overlaps: usize,
    /// Tokens issued out of order found by the history checker (violations): a grant whose
    /// token is not above an earlier grant's of the same name.
    pub token_regressions: usize,
    /// Overlaps involving a hold that spans a restart of a store that loses data (by design).
    pub overlaps_by_design: usize,
    /// Writes made while valid that were lost (missing or overwritten): violations.
    pub lost_writes: usize,
    /// Writes lost across a restart of a store that loses data (by design).
    pub lost_by_design: usize,
    /// Accepted writes made at the edge of validity that a later holder overwrote.
    pub late_writes_overwritten: usize,
    /// Every violation, described with the offending events.
    pub violations: Vec<String>,
    /// The by-design events, described (a store restart without persistence).
    pub by_design: Vec<String>,
}

impl ChaosReport {
    /// Whether the run found no violation.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Panics with the seed, the schedule and every violation when the run found one.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}\nreplay with {SEED_ENV}={}", self.seed);
        }
    }

    /// Faults applied in total.
    pub fn faults_total(&self) -> u64 {
        self.faults_applied.values().sum()
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = |map: &BTreeMap<FaultKind, u64>| {
            if map.is_empty() {
                return "none".to_owned();
            }
            map.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        };
        writeln!(
            f,
            "chaos [{}] seed {} ({:#x}): {} in {:.1} s",
            self.backend,
            self.seed,
            self.seed,
            if self.is_ok() { "OK" } else { "FAILED" },
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  acquisitions {} (busy {}, timeouts {}, cancelled {}, errors {}); ends: released {}, dropped {}, lost {} (expired on arrival {})",
            self.acquisitions,
            self.busy,
            self.timeouts,
            self.cancelled,
            self.errors,
            self.releases,
            self.drops,
            self.losses,
            self.expired_on_arrival
        )?;
        writeln!(
            f,
            "  faults applied: {} ({}); client faults on a holder: {} (in a long hold: {})",
            self.faults_total(),
            kinds(&self.faults_applied),
            self.faults_on_holders,
            self.faults_on_long_holds
        )?;
        writeln!(f, "  faults skipped (no hook): {}", kinds(&self.faults_skipped))?;
        writeln!(
            f,
            "  writes: valid {}, late {}, stale rejected by fencing {}; reads while valid {}",
            self.valid_writes, self.late_writes, self.stale_rejected, self.reads
        )?;
        writeln!(
            f,
            "  overlaps {} (by design {}), token regressions {}, lost writes {} (by design {}), late writes overwritten {}",
            self.overlaps,
            self.overlaps_by_design,
            self.token_regressions,
            self.lost_writes,
            self.lost_by_design,
            self.late_writes_overwritten
        )?;
        if !self.violations.is_empty() || !self.by_design.is_empty() {
            writeln!(f, "  schedule (as applied):")?;
            for fault in &self.applied {
                writeln!(f, "    {fault}")?;
            }
        }
        for event in &self.by_design {
            writeln!(f, "  by design: {event}")?;
        }
        for violation in &self.violations {
            writeln!(f, "  VIOLATION: {violation}")?;
        }
        Ok(())
    }
}
