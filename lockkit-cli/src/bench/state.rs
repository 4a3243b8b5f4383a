//! [`Bench`]: what every phase of one run shares (the arguments, the store, the provider, the
//! backend's profile and floor, the report), and the small helpers the phases use.

use lockkit::{LockHandle, LockProvider};

use super::profile::{Floor, Profile, Targets};
use super::report::{Report, Unit};
use super::url::Url;
use crate::cli::BenchArgs;
use crate::exit::Failure;
use crate::target::Target;

/// The state of one run.
pub(crate) struct Bench {
    pub(crate) args: BenchArgs,
    pub(crate) target: Target,
    pub(crate) url: Url,
    /// The prefix of every lock name of the run: `lockkit-bench/<run id>`.
    pub(crate) prefix: String,
    pub(crate) provider: LockProvider,
    /// What the bench knows of the backend.
    pub(crate) profile: &'static dyn Profile,
    /// The profile's targets.
    pub(crate) targets: Targets,
    pub(crate) floor: Option<Box<dyn Floor>>,
    /// The floor's p50 in µs, once measured.
    pub(crate) floor_p50: Option<f64>,
    /// The uncontended mutex cycle's p50 in µs, once measured.
    pub(crate) cycle_p50: f64,
    /// The server's time per call of each script (JSON key, label, µs), measured around
    /// phases that run that script only.
    pub(crate) scripts: Vec<(&'static str, &'static str, f64)>,
    pub(crate) report: Report,
}

impl Bench {
    /// The lock called `what` of this run.
    pub(crate) fn name(&self, what: &str) -> String {
        format!("{}/{what}", self.prefix)
    }

    /// A handle of the mutex `name` on `provider`.
    pub(crate) fn lock(&self, provider: &LockProvider, name: &str) -> Result<LockHandle, Failure> {
        provider.lock(name).map_err(|e| Failure::from_lock_error(&e, &format!("lock {name:?}")))
    }

    /// `count` clients of their own on the lock `name`: the handle `handle` makes on each
    /// client's provider (given the client's index), and the providers, which must live as
    /// long as the handles are used.
    pub(crate) async fn clients<H>(
        &self,
        name: &str,
        count: usize,
        handle: impl Fn(&LockProvider, usize) -> Result<H, Failure>,
    ) -> Result<(Vec<H>, Vec<LockProvider>), Failure> {
        let (mut handles, mut providers) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for client in 0..count {
            let provider = self.target.connect(name, false).await?;
            handles.push(handle(&provider, client)?);
            providers.push(provider);
        }
        Ok((handles, providers))
    }

    /// Turns an error of `what` on lock `name` into the run's failure.
    pub(crate) fn fail(&self, name: &str, what: &str) -> impl Fn(lockkit::Error) -> Failure + use<> {
        let context = format!("{what} lock {name:?} on {}", self.target.shown());
        move |e: lockkit::Error| Failure::from_lock_error(&e, &context)
    }

    /// `value ÷ floor p50`, when there is a floor.
    pub(crate) fn ratio(&self, micros: f64) -> Option<f64> {
        self.floor_p50.filter(|f| *f > 0.0).map(|f| micros / f)
    }

    /// Adds a wait's p50, p99 and max (µs, from [`Latency::spread`](super::report::Latency::spread), each with its ratio to the
    /// floor) as `{key}_p50`, `{key}_p99` and `{key}_max`, labelled `{label} p50`…; returns
    /// them.
    pub(crate) fn add_wait(
        &mut self,
        section: &'static str,
        key: &str,
        label: &str,
        spread: (f64, f64, f64),
    ) -> (f64, f64, f64) {
        let (p50, p99, max) = spread;
        for (suffix, value) in [("p50", p50), ("p99", p99), ("max", max)] {
            let ratio = self.ratio(value);
            self.report.add(section, format!("{key}_{suffix}"), format!("{label} {suffix}"), value, Unit::Micros);
            self.report.set_ratio(ratio);
        }
        spread
    }

    /// For a rate: the rate times the floor's p50 (the share of one connection's raw round
    /// trips per second).
    pub(crate) fn rate_ratio(&self, per_second: f64) -> Option<f64> {
        self.floor_p50.map(|f| per_second * f / 1e6)
    }

    /// The name of the floor's main round trip, for targets: `PING`.
    pub(crate) fn floor_name(&self) -> &'static str {
        let figures = self.floor.as_ref().map_or(&[][..], |floor| floor.figures());
        figures.iter().find(|figure| figure.main).map_or("floor", |figure| figure.label)
    }

    /// Checks the last figure against "at most `factor` floor p50s".
    pub(crate) fn target_ratio(&mut self, factor: Option<f64>) {
        if let Some(factor) = factor {
            let text = format!("≤ {factor}× {} p50", self.floor_name());
            self.report.target(text, |_, ratio| ratio.is_some_and(|r| r <= factor));
        }
    }
}
