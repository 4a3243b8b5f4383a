//! The contended phase: `--clients` clients (each its own connection or session) on one lock,
//! each acquiring, recording, releasing, for `--duration`: acquisitions/s, the share passed
//! to another client, the hand-off, the release call and the wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockkit::sync::lock_or_recover;

use super::report::{Latency, Unit};
use super::state::Bench;
use crate::exit::Failure;

impl Bench {
    /// `--clients` clients on one lock for `--duration`.
    pub(super) async fn contended(&mut self) -> Result<(), Failure> {
        let name = self.name("contended");
        let clients = usize::try_from(self.args.clients).unwrap_or(usize::MAX);
        let (locks, providers) = self.clients(&name, clients, |provider, _| self.lock(provider, &name)).await?;
        /// The last release: by which client, when it started.
        struct Last {
            client: usize,
            released_at: Instant,
        }
        let last: Arc<Mutex<Option<Last>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let start_gate = Arc::new(tokio::sync::Barrier::new(clients + 1));
        let mut tasks = tokio::task::JoinSet::new();
        for (client, lock) in locks.into_iter().enumerate() {
            let (last, stop, gate) = (Arc::clone(&last), Arc::clone(&stop), Arc::clone(&start_gate));
            let fail = self.fail(&name, "contended acquire of");
            tasks.spawn(async move {
                let (mut wait, mut handoff, mut release) = (Latency::new(), Latency::new(), Latency::new());
                let (mut acquisitions, mut handoffs) = (0_u64, 0_u64);
                gate.wait().await;
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let guard = lock.acquire().await.map_err(&fail)?;
                    let granted = Instant::now();
                    wait.record(granted - asked);
                    acquisitions += 1;
                    {
                        let mut last = lock_or_recover(&last);
                        if let Some(previous) = last.take()
                            && previous.client != client
                        {
                            handoffs += 1;
                            handoff.record(granted.saturating_duration_since(previous.released_at));
                        }
                        // The tiny critical section: this bookkeeping.
                        *last = Some(Last { client, released_at: Instant::now() });
                    }
                    let releasing = Instant::now();
                    guard.release().await.map_err(&fail)?;
                    release.record(releasing.elapsed());
                }
                Ok::<_, Failure>((wait, handoff, release, acquisitions, handoffs))
            });
        }
        start_gate.wait().await;
        let started = Instant::now();
        tokio::time::sleep(self.args.duration).await;
        stop.store(true, Ordering::Relaxed);
        let (mut wait, mut handoff, mut release) = (Latency::new(), Latency::new(), Latency::new());
        let (mut acquisitions, mut handoffs) = (0_u64, 0_u64);
        let mut per_client = Vec::with_capacity(clients);
        while let Some(done) = tasks.join_next().await {
            let (w, h, r, a, n) =
                done.map_err(|e| Failure::new(crate::exit::BACKEND, format!("a contending client failed: {e}")))??;
            wait.merge(&w);
            handoff.merge(&h);
            release.merge(&r);
            acquisitions += a;
            handoffs += n;
            per_client.push(a);
        }
        let elapsed = started.elapsed().as_secs_f64().max(1e-9);
        drop(providers);
        let section = "contended";
        let rate = acquisitions as f64 / elapsed;
        let share = if acquisitions == 0 { 0.0 } else { handoffs as f64 / acquisitions as f64 };
        self.report.add(section, "acquisitions", format!("acquisitions/s, {clients} clients"), rate, Unit::PerSecond);
        self.report.set_ratio(self.rate_ratio(rate));
        self.report.add(section, "handoff_share", "share passed to another client", share, Unit::Share);
        if let Some(least) = self.targets.handoff_share {
            self.report.target(format!("≥ {} %", least * 100.0), |v, _| v >= least);
        }
        let (h50, h99) = (handoff.micros(0.5), handoff.micros(0.99));
        self.report.add(section, "handoff_p50", "hand-off p50 (release → other's grant)", h50, Unit::Micros);
        self.report.set_ratio(self.ratio(h50));
        self.target_ratio(self.targets.handoff);
        self.report.add(section, "handoff_p99", "hand-off p99", h99, Unit::Micros);
        self.report.set_ratio(self.ratio(h99));
        let r50 = release.micros(0.5);
        self.report.add(section, "release_p50", "release call p50 (the holder's side)", r50, Unit::Micros);
        self.report.set_ratio(self.ratio(r50));
        let (w50, _, wmax) = self.add_wait(section, "wait", "wait", wait.spread());
        let starvation = if w50 > 0.0 { wmax / w50 } else { 0.0 };
        self.report.add(section, "wait_max_over_p50", "wait max ÷ wait p50", starvation, Unit::Times);
        if let Some(most) = self.targets.wait_spread {
            self.report.target(format!("≤ {most}×"), |v, _| v <= most);
        }
        let (fewest, most) =
            (per_client.iter().min().copied().unwrap_or(0), per_client.iter().max().copied().unwrap_or(0));
        self.report.add(section, "fewest_per_client", "fewest acquisitions of one client", fewest as f64, Unit::Count);
        self.report.add(section, "most_per_client", "most acquisitions of one client", most as f64, Unit::Count);
        Ok(())
    }
}
