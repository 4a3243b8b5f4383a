//! The many-locks phase: `--locks` distinct locks acquired and released one after another,
//! then all at once on one client.

use std::time::Instant;

use super::report::Unit;
use super::state::Bench;
use crate::exit::Failure;

impl Bench {
    /// `--locks` distinct locks, one after another, then all at once on one client.
    pub(super) async fn many_locks(&mut self) -> Result<(), Failure> {
        let count = usize::try_from(self.args.locks).unwrap_or(usize::MAX);
        let section = "many_locks";
        let fail = self.fail(&self.name("many/…"), "acquire+release of");
        let started = Instant::now();
        for i in 0..count {
            let lock = self.lock(&self.provider, &self.name(&format!("sequential/{i}")))?;
            lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
        }
        let sequential = started.elapsed();
        let mut tasks = tokio::task::JoinSet::new();
        let started = Instant::now();
        for i in 0..count {
            let lock = self.lock(&self.provider, &self.name(&format!("concurrent/{i}")))?;
            let fail = self.fail(&self.name(&format!("concurrent/{i}")), "acquire+release of");
            tasks.spawn(async move { lock.acquire().await.map_err(&fail)?.release().await.map_err(&fail) });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| Failure::new(crate::exit::BACKEND, format!("a task failed: {e}")))??;
        }
        let concurrent = started.elapsed();
        for (key, label, took) in [
            ("sequential", format!("{count} locks one after another"), sequential),
            ("concurrent", format!("{count} locks at once, one client"), concurrent),
        ] {
            self.report.add(section, key, label, took.as_secs_f64(), Unit::Seconds);
            let per_lock = took.as_secs_f64() * 1e6 / count.max(1) as f64;
            let ratio = self.ratio(per_lock);
            self.report.add(section, format!("{key}_per_lock"), "… per lock", per_lock, Unit::Micros);
            self.report.set_ratio(ratio);
        }
        let speedup = sequential.as_secs_f64() / concurrent.as_secs_f64().max(1e-9);
        self.report.add(section, "speedup", "at once ÷ one after another (speed-up)", speedup, Unit::Times);
        if let Some(least) = self.targets.many_locks_speedup {
            self.report.target(format!("≥ {least}×"), |v, _| v >= least);
        }
        Ok(())
    }
}
