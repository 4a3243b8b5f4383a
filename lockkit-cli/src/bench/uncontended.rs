//! The floor and the uncontended phase, interleaved in rounds of 100 for `--duration` so that
//! both see the same load: the raw round trips of the backend's floor, and one client's
//! acquire+release cycles of one lock.

use std::time::{Duration, Instant};

use super::report::{Latency, Unit};
use super::state::Bench;
use crate::exit::Failure;

impl Bench {
    /// Floor and uncontended cycles.
    pub(super) async fn uncontended(&mut self) -> Result<(), Failure> {
        let name = self.name("uncontended");
        let lock = self.lock(&self.provider, &name)?;
        let fail = self.fail(&name, "acquire+release of");
        let figures = self.floor.as_ref().map_or(&[][..], |floor| floor.figures());
        let mut floor = vec![Latency::new(); figures.len()];
        // Warm up: connections, script cache, containers, allocator.
        for _ in 0..100 {
            lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
            if let Some(raw) = &mut self.floor {
                raw.sample(&self.url).await?;
            }
        }
        let mut cycles = Latency::new();
        let started = Instant::now();
        let mut cycle_time = Duration::ZERO;
        while started.elapsed() < self.args.duration || cycles.len() < 100 {
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
                lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
                cycles.record(start.elapsed());
            }
            cycle_time += round.elapsed();
        }
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
            self.report.add_ratio("floor", format!("{key}_p50"), format!("{label} p50"), p50, Unit::Micros, ratio);
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
        self.report.add_ratio(section, "cycles", "cycles/s, one client", rate, Unit::PerSecond, self.rate_ratio(rate));
        self.report.add_ratio(section, "cycle_p50", "cycle p50", p50, Unit::Micros, self.ratio(p50));
        self.target_ratio(self.targets.cycle);
        let p99_ratio = main_p99.map(|floor_p99| p99 / floor_p99.max(1e-9));
        self.report.add_ratio(section, "cycle_p99", "cycle p99 (÷ floor p99)", p99, Unit::Micros, p99_ratio);
        Ok(())
    }
}
