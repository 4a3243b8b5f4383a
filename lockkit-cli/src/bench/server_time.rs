//! The server's own time per call, on backends whose floor reads it (Redis: `INFO
//! commandstats`): per acquire and per release script, each measured around a phase that runs
//! that script only, and per command since the server started.

use super::report::Unit;
use super::state::Bench;
use crate::exit::Failure;

/// How many free locks the server-time phase acquires, then releases (at most `--locks`).
pub(super) const SCRIPT_LOCKS: usize = 2_000;

impl Bench {
    /// The server's time per call of the acquire and release scripts on the uncontended path:
    /// `SCRIPT_LOCKS` (at most `--locks`) acquisitions of free locks nobody waits for, then
    /// their releases, twice (new names, then the same names used before), on the profile's
    /// quiet provider, whose renewals do not fall in between. The renew script is measured in
    /// [`upkeep`](Self::upkeep). Nothing where the floor does not read the server's time.
    pub(super) async fn script_costs(&mut self) -> Result<(), Failure> {
        let Some(provider) = self.profile.quiet_provider(&self.url)? else { return Ok(()) };
        let count = SCRIPT_LOCKS.min(usize::try_from(self.args.locks).unwrap_or(usize::MAX));
        let locks = (0..count)
            .map(|i| self.lock(&provider, &self.name(&format!("scripts/{i}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let fail = self.fail(&self.name("scripts/…"), "server time per script: acquire+release of");
        // Warm up: the connection and the script cache.
        let warm = provider.lock(&self.name("scripts/warm")).map_err(&fail)?;
        warm.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
        let Some(floor) = &mut self.floor else { return Ok(()) };
        // Twice over the same names: the first round makes each name's fence counter (a new
        // key), the second is the common case of a lock used before.
        let mut readings = Vec::with_capacity(5);
        readings.push(floor.script_totals().await);
        for _ in 0..2 {
            let mut guards = Vec::with_capacity(locks.len());
            for lock in &locks {
                guards.push(lock.acquire().await.map_err(&fail)?);
            }
            readings.push(floor.script_totals().await);
            for guard in guards {
                guard.release().await.map_err(&fail)?;
            }
            readings.push(floor.script_totals().await);
        }
        let figures = [
            ("acquire_script_new_name", "server time per acquire script, free lock of a new name", 0),
            ("acquire_script", "server time per acquire script, free lock used before", 2),
            ("release_script", "server time per release script, nobody waiting", 3),
        ];
        for (key, label, at) in figures {
            let reading = |at: usize| readings.get(at).copied().flatten();
            if let Some(usec) = per_call(reading(at), reading(at + 1)) {
                self.scripts.push((key, label, usec));
            }
        }
        Ok(())
    }

    /// The server's time per call of the scripts measured, and of the commands a lock uses.
    pub(super) async fn server_stats(&mut self) {
        for (key, label, usec) in std::mem::take(&mut self.scripts) {
            self.report.add("server", key, label, usec, Unit::Micros);
            if let (Some(most), "acquire_script" | "release_script") = (self.targets.server_time_per_script, key) {
                self.report.target(format!("≤ {most} µs"), |v, _| v <= most);
            }
        }
        let Some(floor) = &mut self.floor else { return };
        for (key, label, usec) in floor.server_time().await {
            self.report.add("server", key, label, usec, Unit::Micros);
        }
    }

    /// The names of every lock the run used, for the floor to remove what they left behind.
    pub(super) fn names_used(&self) -> Vec<String> {
        if let Some(holds) = self.args.holds {
            let mut names = vec![self.name("holds/warm")];
            names.extend((0..holds).map(|i| self.name(&format!("holds/{i}"))));
            return names;
        }
        let mut names = vec![self.name("uncontended"), self.name("contended"), self.name("scripts/warm")];
        names.extend((0..SCRIPT_LOCKS).map(|i| self.name(&format!("scripts/{i}"))));
        for what in ["sequential", "concurrent", "held"] {
            names.extend((0..self.args.locks).map(|i| self.name(&format!("{what}/{i}"))));
        }
        names
    }
}

/// The server's µs per call between two readings of `(calls, usec)`; `None` when either is
/// missing or no call was made.
pub(super) fn per_call(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((calls0, usec0), (calls1, usec1)) = (before?, after?);
    let calls = calls1.checked_sub(calls0).filter(|&n| n > 0)?;
    Some(usec1.saturating_sub(usec0) as f64 / calls as f64)
}
