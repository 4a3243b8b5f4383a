//! What a multi-process run found, and how it reads.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::config::{ProcessFault, SEED_ENV};
use crate::history::Violation;

/// What a multi-process run found. [`is_ok`](Self::is_ok) says whether it passed.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProcessChaosReport {
    /// The report's label.
    pub label: String,
    /// The seed.
    pub seed: u64,
    /// Whether the bug was planted.
    pub planted_bug: bool,
    /// From the first worker's start to the check.
    pub elapsed: Duration,
    /// Workers started, replacements included.
    pub workers_started: u64,
    /// Holds reported by the workers.
    pub acquisitions: u64,
    /// Faults applied, per kind.
    pub faults: BTreeMap<ProcessFault, u64>,
    /// Pauses of a worker that held a lock, longer than the lease.
    pub pauses_outliving_lease: u64,
    /// The longest pause.
    pub longest_pause: Duration,
    /// Writes the resource accepted.
    pub writes_accepted: u64,
    /// Writes the resource refused as stale (a newer token had written).
    pub writes_refused: u64,
    /// Of those, the writes whose writer was paused between its validity check and its write.
    pub writes_refused_after_resume: u64,
    /// [`run_cli`](super::run_cli) only: writes refused by fencing whose `lockkit` had been paused (with
    /// `SIGSTOP`) during the hold: its command went on writing while the lease ran out.
    pub writes_refused_lockkit_paused: u64,
    /// Writes accepted after the writer's deadline, before a newer holder wrote.
    pub late_writes: u64,
    /// [`run_cli`](super::run_cli) only: holds whose command started after the bound on their validity (its
    /// `lockkit` was paused between the grant and the command's start). They are left out of
    /// the [`History`](crate::History) (they were never valid); their writes are checked by the resource.
    pub holds_never_valid: u64,
    /// Writes accepted while valid and then overwritten by a write that read before them
    /// (those counted in [`lost_by_design`](Self::lost_by_design) left out).
    pub lost_writes: u64,
    /// Whether the store loses its records when restarted (see
    /// [`ProcessChaosConfig::restart_loses_data`](super::ProcessChaosConfig::restart_loses_data)).
    pub restart_loses_data: bool,
    /// Lost writes where the overwritten write's hold or the overwriting one spans a restart of
    /// a store that loses its records: by design.
    pub lost_by_design: u64,
    /// Overlaps of valid holds and token regressions, with the offending holds (those in
    /// [`by_design`](Self::by_design) left out).
    pub violations: Vec<Violation>,
    /// Overlaps whose first hold spans a restart of a store that loses its records: by design.
    pub by_design: Vec<Violation>,
    /// Names still held after every worker stopped and the lease ran out, and, in
    /// [`run_cli`](super::run_cli), commands still running after their `lockkit` was killed.
    pub orphans: Vec<String>,
    /// Problems of the run itself (a worker that did not start, a signal that failed).
    pub errors: Vec<String>,
    /// A fenced run: the sink the workers wrote through (`postgres`, `redis`, `file`, or the
    /// test's bypassing sink's name).
    pub sink: Option<String>,
    /// A fenced run whose fence was bypassed (the planted bug).
    pub fence_bypassed: bool,
    /// A fenced run: writes the store accepted although a write with a greater token had been
    /// acknowledged before they were sent. A fence refuses them: must be 0.
    pub stale_writes_accepted: u64,
    /// A fenced run: reads the store refused as stale (a newer holder had written).
    pub reads_refused: u64,
    /// A fenced run: writes whose outcome is unknown (the store failed or did not answer in
    /// time) and that the store's history does not hold.
    pub writes_unknown: u64,
}

impl ProcessChaosReport {
    /// How many overlaps of valid holds the checker found.
    pub fn overlaps(&self) -> usize {
        self.violations.iter().filter(|v| matches!(v, Violation::Overlap { .. })).count()
    }

    /// How many store restarts the run applied.
    pub fn store_restarts(&self) -> u64 {
        self.faults.get(&ProcessFault::RestartStore).copied().unwrap_or(0)
    }

    /// Whether the run passed: no violation, no lost write, no stale write accepted, no
    /// orphan, no error, and at least one write made (what a restart of a store that loses data excuses by design left
    /// out).
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
            && self.lost_writes == 0
            && self.orphans.is_empty()
            && self.errors.is_empty()
            && self.stale_writes_accepted == 0
            && self.writes_accepted > 0
    }

    /// Panics with the report and how to replay the seed unless [`is_ok`](Self::is_ok).
    ///
    /// # Panics
    ///
    /// When the run failed.
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}\nreplay with {SEED_ENV}={}", self.seed);
        }
    }

    /// How many faults of the `kinds` the run applied.
    pub fn faults_of(&self, kinds: &[ProcessFault]) -> u64 {
        kinds.iter().map(|kind| self.faults.get(kind).copied().unwrap_or(0)).sum()
    }

    /// Panics unless the store was faulted (paused or restarted): the first store fault drawn
    /// always finds the store free (a later one is skipped while another still runs, so how
    /// many land depends on the timing).
    ///
    /// # Panics
    ///
    /// When no store fault was applied.
    pub fn assert_store_faulted(&self) {
        let store = self.faults_of(&[ProcessFault::PauseStore, ProcessFault::RestartStore]);
        assert!(store > 0, "no store fault was applied:\n{self}");
    }
}

impl fmt::Display for ProcessChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = if self.faults.is_empty() {
            "none".to_owned()
        } else {
            self.faults.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        };
        writeln!(
            f,
            "process chaos [{}{}] seed {} ({:#x}): {} in {:.1} s",
            self.label,
            if self.planted_bug { ", planted bug" } else { "" },
            self.seed,
            self.seed,
            if self.is_ok() { "OK" } else { "FAILED" },
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  workers started {}, acquisitions {} (never valid {})",
            self.workers_started, self.acquisitions, self.holds_never_valid
        )?;
        writeln!(
            f,
            "  faults: {faults}; pauses of a holder that outlived the lease: {} (longest pause {} ms)",
            self.pauses_outliving_lease,
            self.longest_pause.as_millis()
        )?;
        writeln!(
            f,
            "  writes: accepted {}, refused by fencing {} (after a resume {}, lockkit paused {}), late (accepted past the deadline) {}",
            self.writes_accepted,
            self.writes_refused,
            self.writes_refused_after_resume,
            self.writes_refused_lockkit_paused,
            self.late_writes
        )?;
        writeln!(
            f,
            "  overlaps of valid holds {}, token regressions {}, lost writes {}, orphans {}",
            self.overlaps(),
            self.violations.len() - self.overlaps(),
            self.lost_writes,
            self.orphans.len()
        )?;
        if let Some(sink) = &self.sink {
            writeln!(
                f,
                "  through the store, {sink} ({}): stale writes accepted {}, reads refused {}, writes of unknown outcome {}",
                if self.fence_bypassed { "fence bypassed" } else { "fenced" },
                self.stale_writes_accepted,
                self.reads_refused,
                self.writes_unknown
            )?;
        }
        if self.restart_loses_data {
            writeln!(
                f,
                "  store restarts {} (the store loses its records: overlaps by design {}, lost writes by design {})",
                self.store_restarts(),
                self.by_design.len(),
                self.lost_by_design
            )?;
        }
        for violation in self.violations.iter().take(5) {
            writeln!(f, "  violation: {violation}")?;
        }
        for violation in self.by_design.iter().take(3) {
            writeln!(f, "  by design (a restart lost the record): {violation}")?;
        }
        for orphan in &self.orphans {
            if orphan.starts_with("command ") {
                writeln!(f, "  orphan: {orphan}")?;
            } else {
                writeln!(f, "  orphan: {orphan:?} is still held")?;
            }
        }
        for error in &self.errors {
            writeln!(f, "  error: {error}")?;
        }
        Ok(())
    }
}
