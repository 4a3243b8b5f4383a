//! The upkeep phase: `--locks` locks held for a few renewal rounds: round trips per renewal
//! tick (on backends whose profile gives a provider with renewal counters; Redis: the
//! server's time per renew script over those ticks), client CPU and resident memory per held
//! lock.

use std::time::{Duration, Instant};

use super::report::Unit;
use super::server_time::per_call;
use super::state::Bench;
use crate::exit::Failure;

impl Bench {
    /// `--locks` locks held for a few renewal rounds.
    pub(super) async fn upkeep(&mut self) -> Result<(), Failure> {
        let count = usize::try_from(self.args.locks).unwrap_or(usize::MAX);
        let section = "upkeep";
        let mut upkeep = self.profile.upkeep(&self.url)?;
        let provider = upkeep.as_ref().map_or_else(|| self.provider.clone(), |upkeep| upkeep.provider.clone());
        if let Some(upkeep) = &mut upkeep {
            (&mut upkeep.reach).await?;
        }
        let rss_before = resident_bytes();
        let mut locks = Vec::with_capacity(count);
        for i in 0..count {
            locks.push(self.lock(&provider, &self.name(&format!("held/{i}")))?);
        }
        let fail = self.fail(&self.name("held/…"), "upkeep: acquire of");
        // In batches of 100: what the holds keep, not the transient memory of 10,000
        // acquisitions in flight, is what the resident memory should show.
        let started = Instant::now();
        let mut guards = Vec::with_capacity(count);
        for batch in locks.chunks(100) {
            let acquired = futures_util::future::join_all(batch.iter().map(|lock| lock.acquire())).await;
            for guard in acquired {
                guards.push(guard.map_err(&fail)?);
            }
        }
        let acquire_time = started.elapsed();
        let rss_after = resident_bytes();
        let cpu_before = cpu_time();
        let window_start = Instant::now();
        let mut ticks = None;
        if let Some(upkeep) = &upkeep {
            let before = (upkeep.renewals)();
            // Nothing but renewals runs while the ticks come: the server's time per renew
            // script is the script time of the window.
            let scripts_before = match &mut self.floor {
                Some(floor) => floor.script_totals().await,
                None => None,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while (upkeep.renewals)().ticks < before.ticks + 3 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let scripts_after = match &mut self.floor {
                Some(floor) => floor.script_totals().await,
                None => None,
            };
            if let Some(usec) = per_call(scripts_before, scripts_after) {
                self.scripts.push(("renew_script", "server time per renew script, batched", usec));
            }
            let after = (upkeep.renewals)();
            let n = after.ticks.saturating_sub(before.ticks).max(1) as f64;
            ticks = Some((n, after.round_trips.saturating_sub(before.round_trips) as f64 / n));
        } else {
            tokio::time::sleep(self.args.duration.min(Duration::from_secs(5))).await;
        }
        let window = window_start.elapsed().as_secs_f64().max(1e-9);
        let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64() * 1e3;
        let held = guards.iter().filter(|g| g.is_held()).count();
        let started = Instant::now();
        let released = futures_util::future::join_all(guards.into_iter().map(|g| g.release())).await;
        released.into_iter().collect::<Result<Vec<_>, _>>().map_err(&fail)?;
        let release_time = started.elapsed();

        self.report.add(section, "held", "locks held", held as f64, Unit::Count);
        let per_lock = |d: Duration| d.as_secs_f64() * 1e6 / count.max(1) as f64;
        self.report.add(
            section,
            "acquire_all",
            "acquiring them, 100 at a time",
            acquire_time.as_secs_f64(),
            Unit::Seconds,
        );
        let (a, r) = (per_lock(acquire_time), per_lock(release_time));
        self.report.add(section, "acquire_per_lock", "… per lock", a, Unit::Micros);
        self.report.set_ratio(self.ratio(a));
        self.report.add(
            section,
            "release_all",
            "releasing them all at once",
            release_time.as_secs_f64(),
            Unit::Seconds,
        );
        self.report.add(section, "release_per_lock", "… per lock", r, Unit::Micros);
        self.report.set_ratio(self.ratio(r));
        if let Some((n, round_trips)) = ticks {
            self.report.add(section, "round_trips_per_tick", "round trips per renewal tick", round_trips, Unit::Count);
            self.report.target("≤ 10", |v, _| v <= 10.0);
            self.report.add(section, "client_cpu_per_tick", "client CPU per renewal tick", cpu / n, Unit::Millis);
        }
        self.report.add(section, "client_cpu_per_s", "client CPU per second held", cpu / window, Unit::Millis);
        match (rss_before, rss_after) {
            (Some(before), Some(after)) => {
                let per = after.saturating_sub(before) as f64 / count.max(1) as f64;
                self.report.add(section, "memory_per_lock", "client memory per held lock (VmRSS)", per, Unit::Bytes);
                if let Some(most) = self.targets.memory_per_lock {
                    self.report.target(format!("< {} KiB", most / 1024.0), |v, _| v < most);
                }
            }
            _ => self.report.notes.push("no /proc/self/status: memory per held lock not measured".to_owned()),
        }
        if let Some(note) = self.profile.upkeep_note() {
            self.report.notes.push(note.to_owned());
        }
        Ok(())
    }
}

/// The process's resident memory (`VmRSS` of /proc/self/status), in bytes.
pub(super) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The CPU time of this process: the run time of each of its threads (`/proc/self/task/*/schedstat`,
/// in nanoseconds; /proc/self/stat counts 10 ms ticks, too coarse for a few seconds of upkeep),
/// zero where unknown. Threads that ended meanwhile are not counted.
pub(super) fn cpu_time() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let nanos: u64 = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_read() {
        assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        assert!(cpu_time() > Duration::ZERO);
    }
}
