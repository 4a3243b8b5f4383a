//! The phases of `lockkit bench` for shared locks and semaphores (issue 15), on backends that
//! declare them:
//!
//! - **read uncontended**: one client's read acquire+release cycles, against the mutex cycle
//!   of the same run (a read should cost the same round trips);
//! - **readers at once**: one reader alone, then eight readers on eight clients, each
//!   cycling for half of `--duration`: readers must not serialise;
//! - **read-heavy**: seven readers and one writer on one read-write lock for `--duration`:
//!   acquisitions/s of each kind, wait p50/p99/max of each, and the writer's wait spread
//!   (a stream of readers must not starve it);
//! - **semaphore**: eight clients on a semaphore of three permits for `--duration`:
//!   acquisitions/s, wait p50/p99/max, and the most permits seen in use at once (a check).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit::{LockHandle, LockProvider};

use super::report::{Latency, Unit};
use super::state::Bench;
use crate::exit::{BACKEND, Failure};

/// Readers of the "readers at once" and "read-heavy" phases.
const READERS: usize = 8;
/// Clients and permits of the semaphore phase.
const SEMAPHORE_CLIENTS: usize = 8;
const PERMITS: u32 = 3;

/// What one client of a timed phase did.
struct Tally {
    wait: Latency,
    acquisitions: u64,
}

impl Bench {
    /// The shared-lock phases, or a note when the backend has no read-write locks.
    pub(super) async fn shared(&mut self, mutex_cycle_p50: f64) -> Result<(), Failure> {
        if !self.provider.capabilities().rw_lock {
            self.report.notes.push("no read-write lock phases: the backend does not declare rw_lock".to_owned());
            return Ok(());
        }
        self.read_uncontended(mutex_cycle_p50).await?;
        self.readers_at_once().await?;
        self.read_heavy().await
    }

    async fn read_uncontended(&mut self, mutex_cycle_p50: f64) -> Result<(), Failure> {
        let name = self.name("read-uncontended");
        let fail = self.fail(&name, "read of");
        let rw = self.provider.rw_lock(&name).map_err(&fail)?;
        for _ in 0..100 {
            rw.read().await.map_err(&fail)?.release().await.map_err(&fail)?;
        }
        let mut cycles = Latency::new();
        let started = Instant::now();
        while started.elapsed() < self.args.duration / 2 || cycles.len() < 100 {
            let start = Instant::now();
            rw.read().await.map_err(&fail)?.release().await.map_err(&fail)?;
            cycles.record(start.elapsed());
        }
        let section = "shared";
        let p50 = cycles.micros(0.5);
        self.report.add(section, "read_cycle_p50", "read acquire+release p50", p50, Unit::Micros);
        self.report.set_ratio(self.ratio(p50));
        let against_mutex = if mutex_cycle_p50 > 0.0 { p50 / mutex_cycle_p50 } else { 0.0 };
        self.report.add(
            section,
            "read_over_mutex_cycle",
            "read cycle ÷ mutex cycle (same round trips)",
            against_mutex,
            Unit::Times,
        );
        if self.floor.is_some() {
            self.report.target("≤ 1.25×", |v, _| v <= 1.25);
        }
        Ok(())
    }

    async fn readers_at_once(&mut self) -> Result<(), Failure> {
        let name = self.name("readers");
        let (handles, providers) = self.clients(&name, READERS, |provider, _| self.rw_reader(provider, &name)).await?;
        let window = self.args.duration / 2;
        let alone = self.timed(&name, handles[..1].to_vec(), window, None).await?;
        let together = self.timed(&name, handles, window, None).await?;
        drop(providers);
        let rate =
            |tallies: &[Tally]| tallies.iter().map(|t| t.acquisitions).sum::<u64>() as f64 / window.as_secs_f64();
        let (one, eight) = (rate(&alone), rate(&together));
        let section = "shared";
        self.report.add(section, "one_reader", "reads/s, one reader", one, Unit::PerSecond);
        self.report.set_ratio(self.rate_ratio(one));
        self.report.add(
            section,
            "eight_readers",
            format!("reads/s, {READERS} readers at once"),
            eight,
            Unit::PerSecond,
        );
        self.report.set_ratio(self.rate_ratio(eight));
        let scaling = if one > 0.0 { eight / one } else { 0.0 };
        self.report.add(section, "readers_scaling", "readers at once ÷ one reader", scaling, Unit::Times);
        if let Some(least) = self.targets.readers_scaling {
            self.report.target(format!("≥ {least}×"), |v, _| v >= least);
        }
        Ok(())
    }

    async fn read_heavy(&mut self) -> Result<(), Failure> {
        let name = self.name("read-heavy");
        let (handles, providers) = self
            .clients(&name, READERS, |provider, client| {
                let rw = provider.rw_lock(&name).map_err(self.fail(&name, "a read-write lock"))?;
                // The last client writes; the others read.
                Ok(if client + 1 == READERS { rw.writer().clone() } else { rw.reader().clone() })
            })
            .await?;
        let tallies = self.timed(&name, handles, self.args.duration, None).await?;
        drop(providers);
        let (readers, writer) = tallies.split_at(READERS - 1);
        let seconds = self.args.duration.as_secs_f64().max(1e-9);
        let mut read_wait = Latency::new();
        readers.iter().for_each(|t| read_wait.merge(&t.wait));
        let reads = readers.iter().map(|t| t.acquisitions).sum::<u64>() as f64 / seconds;
        let writes = writer.iter().map(|t| t.acquisitions).sum::<u64>() as f64 / seconds;
        let section = "read_heavy";
        self.report.add(section, "reads", format!("reads/s, {} readers", READERS - 1), reads, Unit::PerSecond);
        self.report.set_ratio(self.rate_ratio(reads));
        self.report.add(section, "writes", "writes/s, 1 writer", writes, Unit::PerSecond);
        self.report.set_ratio(self.rate_ratio(writes));
        self.add_wait(section, "read_wait", "read wait", read_wait.spread());
        let write_wait = writer.first().map(|t| &t.wait);
        let (w50, _, wmax) =
            self.add_wait(section, "write_wait", "writer's wait", write_wait.map_or((0.0, 0.0, 0.0), Latency::spread));
        let spread = if w50 > 0.0 { wmax / w50 } else { 0.0 };
        self.report.add(section, "write_wait_max_over_p50", "writer's wait max ÷ p50", spread, Unit::Times);
        if self.provider.capabilities().fair {
            self.report.target("≤ 20×", |v, _| v <= 20.0);
        }
        Ok(())
    }

    /// The semaphore phase, or a note when the backend has no semaphores.
    pub(super) async fn semaphore(&mut self) -> Result<(), Failure> {
        if !self.provider.capabilities().semaphore {
            self.report.notes.push("no semaphore phase: the backend does not declare semaphore".to_owned());
            return Ok(());
        }
        let name = self.name("semaphore");
        let (handles, providers) = self
            .clients(&name, SEMAPHORE_CLIENTS, |provider, _| {
                provider.semaphore(&name, PERMITS).map_err(self.fail(&name, "a semaphore"))
            })
            .await?;
        let in_use = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let tallies = self.timed(&name, handles, self.args.duration, Some(Arc::clone(&in_use))).await?;
        drop(providers);
        let seconds = self.args.duration.as_secs_f64().max(1e-9);
        let mut wait = Latency::new();
        tallies.iter().for_each(|t| wait.merge(&t.wait));
        let rate = tallies.iter().map(|t| t.acquisitions).sum::<u64>() as f64 / seconds;
        let section = "semaphore";
        self.report.add(
            section,
            "acquisitions",
            format!("permits/s, {SEMAPHORE_CLIENTS} clients, {PERMITS} permits"),
            rate,
            Unit::PerSecond,
        );
        self.report.set_ratio(self.rate_ratio(rate));
        self.add_wait(section, "wait", "wait", wait.spread());
        let most = in_use.1.load(Ordering::SeqCst) as f64;
        self.report.add(section, "most_in_use", "most permits in use at once (a check)", most, Unit::Count);
        self.report.target("≤ 3", |v, _| v <= f64::from(PERMITS));
        Ok(())
    }

    fn rw_reader(&self, provider: &LockProvider, name: &str) -> Result<LockHandle, Failure> {
        provider.rw_lock(name).map(|rw| rw.reader().clone()).map_err(self.fail(name, "a read-write lock"))
    }

    /// Each handle acquires and releases in a loop on a task of its own for `window`, all
    /// starting together; `in_use` (holders now, most at once) is kept when given.
    async fn timed(
        &self,
        name: &str,
        handles: Vec<LockHandle>,
        window: Duration,
        in_use: Option<Arc<(AtomicUsize, AtomicUsize)>>,
    ) -> Result<Vec<Tally>, Failure> {
        let stop = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(tokio::sync::Barrier::new(handles.len() + 1));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, handle) in handles.into_iter().enumerate() {
            let (stop, gate, in_use) = (Arc::clone(&stop), Arc::clone(&gate), in_use.clone());
            let fail = self.fail(name, "timed acquire of");
            tasks.spawn(async move {
                let mut tally = Tally { wait: Latency::new(), acquisitions: 0 };
                gate.wait().await;
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let guard = handle.acquire().await.map_err(&fail)?;
                    tally.wait.record(asked.elapsed());
                    tally.acquisitions += 1;
                    if let Some(in_use) = &in_use {
                        let now = in_use.0.fetch_add(1, Ordering::SeqCst) + 1;
                        in_use.1.fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        in_use.0.fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.map_err(&fail)?;
                }
                Ok::<_, Failure>((index, tally))
            });
        }
        gate.wait().await;
        tokio::time::sleep(window).await;
        stop.store(true, Ordering::Relaxed);
        let mut tallies: Vec<(usize, Tally)> = Vec::new();
        while let Some(done) = tasks.join_next().await {
            tallies.push(done.map_err(|e| Failure::new(BACKEND, format!("a timed client failed: {e}")))??);
        }
        tallies.sort_by_key(|(index, _)| *index);
        Ok(tallies.into_iter().map(|(_, tally)| tally).collect())
    }
}
