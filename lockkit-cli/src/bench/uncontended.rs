//! The floor and the uncontended phase, interleaved in rounds of 100 for `--duration` so that
//! both see the same load: the raw round trips of the backend's floor, and one client's
//! acquire+release cycles of one lock, in a task of the runtime.

use std::time::{Duration, Instant};

use super::profile::Floor;
use super::report::{Latency, Unit};
use super::state::Bench;
use super::url::Url;
use crate::exit::Failure;

impl Bench {
    /// Floor and uncontended cycles.
    pub(super) async fn uncontended(&mut self) -> Result<(), Failure> {
        let name = self.name("uncontended");
        let lock = self.lock(&self.provider, &name)?;
        let fail = self.fail(&name, "acquire+release of");
        let figures = self.floor.as_ref().map_or(&[][..], |floor| floor.figures());
        // The rounds run in a task of the runtime, where an application's code runs: this
        // future is polled by `block_on` on the main thread, outside the runtime's workers,
        // where every reply's wake-up crosses threads (issue 36: ZooKeeper's cycle took 468 µs
        // here against 395 µs through the API).
        let rounds =
            Rounds { lock, fail, floor: self.floor.take(), url: self.url.clone(), duration: self.args.duration };
        let (floor_box, outcome) = tokio::spawn(rounds.run(figures.len())).await.map_err(|error| {
            Failure::new(crate::exit::OS_ERROR, format!("the uncontended rounds' task failed: {error}"))
        })?;
        self.floor = floor_box;
        let Measured { floor, cycles, cycle_time } = outcome?;
        let main = figures.iter().position(|figure| figure.main).and_then(|at| floor.get(at));
        self.floor_p50 = main.map(|main| main.micros(0.5));
        let main_p99 = main.map(|main| main.micros(0.99));
        for (figure, latency) in figures.iter().zip(&floor) {
            if latency.len() == 0 {
                continue;
            }
            let p50 = latency.micros(0.5);
            let ratio = if figure.main { Some(1.0) } else { self.ratio(p50) };
            let (key, label) = (figure.key, figure.label);
            self.report.add("floor", format!("{key}_p50"), format!("{label} p50"), p50, Unit::Micros);
            self.report.set_ratio(ratio);
            if figure.p99 {
                self.report.add(
                    "floor",
                    format!("{key}_p99"),
                    format!("{label} p99"),
                    latency.micros(0.99),
                    Unit::Micros,
                );
            }
        }
        let section = "uncontended";
        let rate = cycles.len() as f64 / cycle_time.as_secs_f64().max(1e-9);
        let (p50, p99) = (cycles.micros(0.5), cycles.micros(0.99));
        self.cycle_p50 = p50;
        self.report.add(
            section,
            "cycles_measured",
            "acquire+release cycles measured",
            cycles.len() as f64,
            Unit::Count,
        );
        self.report.add(section, "cycles", "cycles/s, one client", rate, Unit::PerSecond);
        self.report.set_ratio(self.rate_ratio(rate));
        self.report.add(section, "cycle_p50", "cycle p50", p50, Unit::Micros);
        self.report.set_ratio(self.ratio(p50));
        self.target_ratio(self.targets.cycle);
        let p99_ratio = main_p99.map(|floor_p99| p99 / floor_p99.max(1e-9));
        self.report.add(section, "cycle_p99", "cycle p99 (÷ floor p99)", p99, Unit::Micros);
        self.report.set_ratio(p99_ratio);
        Ok(())
    }
}

/// What the uncontended rounds need, owned, so that they run in a task of their own.
struct Rounds<F> {
    lock: lockkit::LockHandle,
    fail: F,
    floor: Option<Box<dyn Floor>>,
    url: Url,
    duration: Duration,
}

/// What the rounds measured: each floor figure's latencies, the cycles', and the time the
/// cycles' rounds took.
struct Measured {
    floor: Vec<Latency>,
    cycles: Latency,
    cycle_time: Duration,
}

impl<F: Fn(lockkit::Error) -> Failure + Send + 'static> Rounds<F> {
    /// Warms up, then runs rounds of 100 floor samples and 100 cycles for the duration (and
    /// at least 100 cycles). Gives the floor back with the outcome.
    async fn run(mut self, floor_figures: usize) -> (Option<Box<dyn Floor>>, Result<Measured, Failure>) {
        let outcome = self.measure(floor_figures).await;
        (self.floor, outcome)
    }

    async fn measure(&mut self, floor_figures: usize) -> Result<Measured, Failure> {
        let (lock, fail) = (&self.lock, &self.fail);
        let mut floor = vec![Latency::new(); floor_figures];
        // Warm up: connections, script cache, containers, allocator.
        for _ in 0..100 {
            lock.acquire().await.map_err(fail)?.release().await.map_err(fail)?;
            if let Some(raw) = &mut self.floor {
                raw.sample(&self.url).await?;
            }
        }
        let mut cycles = Latency::new();
        let started = Instant::now();
        let mut cycle_time = Duration::ZERO;
        while started.elapsed() < self.duration || cycles.len() < 100 {
            if let Some(raw) = &mut self.floor {
                for _ in 0..100 {
                    let sample = raw.sample(&self.url).await?;
                    for (latency, time) in floor.iter_mut().zip(sample) {
                        if let Some(time) = time {
                            latency.record(time);
                        }
                    }
                }
            }
            let round = Instant::now();
            for _ in 0..100 {
                let start = Instant::now();
                lock.acquire().await.map_err(fail)?.release().await.map_err(fail)?;
                cycles.record(start.elapsed());
            }
            cycle_time += round.elapsed();
        }
        Ok(Measured { floor, cycles, cycle_time })
    }
}
