//! The settings of a multi-process run, and the faults it draws.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::store_control::{StoreControl, StorePid};

/// Replays one seed.
pub const SEED_ENV: &str = "LOCKKIT_PROCESS_CHAOS_SEED";
/// How many seconds faults are injected.
pub const SECS_ENV: &str = "LOCKKIT_PROCESS_CHAOS_SECS";

/// A fault of the multi-process run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessFault {
    /// `SIGSTOP` a worker, then `SIGCONT` it after 10 ms to two leases (one second without a
    /// lease).
    Pause,
    /// `SIGKILL` a worker and start a fresh one in its place.
    Kill,
    /// Pause the store ([`ProcessChaosConfig::store`]; an ensemble: one member) for 10 ms to
    /// one lease (one second without a lease), then resume it. The schedule goes on
    /// meanwhile, so that workers are paused and killed while the store is paused too. Drawn
    /// only when the run has the store's control; one store fault at a time.
    PauseStore,
    /// Restart the store through its control ([`StoreControl::restart`]): a Redis server or a
    /// standalone ZooKeeper is stopped and started again; an ensemble member is stopped, kept
    /// down for 10 ms to one lease and started again (the run waits until it rejoined). The
    /// schedule goes on meanwhile. Drawn only when the run has the store's control.
    RestartStore,
    /// [`run_cli`](super::run_cli) only: `SIGSTOP` the command that a `lockkit run` runs (not `lockkit`
    /// itself), then `SIGCONT` it after the drawn pause. In [`run_cli`](super::run_cli), [`Pause`](Self::Pause)
    /// and [`Kill`](Self::Kill) strike `lockkit` itself.
    PauseCommand,
    /// [`run_cli`](super::run_cli) only: `SIGKILL` the command that a `lockkit run` runs; `lockkit` must see
    /// it end, release the lock and exit.
    KillCommand,
}

impl fmt::Display for ProcessFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProcessFault::Pause => "pause",
            ProcessFault::Kill => "kill",
            ProcessFault::PauseStore => "pause-store",
            ProcessFault::RestartStore => "restart-store",
            ProcessFault::PauseCommand => "pause-command",
            ProcessFault::KillCommand => "kill-command",
        })
    }
}

/// The settings of one multi-process run. Plain `pub` fields with `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProcessChaosConfig {
    /// The seed of the fault schedule and of the workers' choices.
    pub seed: u64,
    /// The store's URL, as the workers connect to it.
    pub url: String,
    /// The test (in the current test binary) that calls [`worker_if_requested`](super::worker_if_requested).
    pub worker_test: String,
    /// How many workers run at once (default 4).
    pub workers: usize,
    /// How many lock names they contend for (default 2).
    pub names: usize,
    /// How long faults are injected (default 10 s).
    pub duration: Duration,
    /// The store's lease, if it has one: pauses are drawn up to two leases, and a pause of a
    /// holder longer than it is counted as having outlived it.
    pub lease: Option<Duration>,
    /// The faults to draw from (default: both).
    pub faults: Vec<ProcessFault>,
    /// The length of a pause is drawn from this range (default 10 ms to two leases, or to one
    /// second without a lease).
    pub pause: Option<(Duration, Duration)>,
    /// The pause between two faults is drawn from this range (default 100 ms to 500 ms).
    pub fault_gap: (Duration, Duration),
    /// The planted bug: workers skip the loss deadline; the run must report overlaps.
    pub planted_bug: bool,
    /// The store's control, for [`ProcessFault::PauseStore`] and
    /// [`ProcessFault::RestartStore`] (a server of the test's own: faults on a shared one would
    /// strike other tests).
    pub store: Option<Arc<dyn StoreControl>>,
    /// The store loses its records when restarted (Redis without persistence): overlaps and
    /// lost writes involving a hold that spans a restart are counted as by design.
    pub restart_loses_data: bool,
    /// A label for the report (the backend and its settings).
    pub label: String,
    /// The store the workers write to through a real fence, as the test's opener understands
    /// it (a PostgreSQL URL, a Redis URL, a directory): set, the workers read and write the
    /// counters themselves, through the [`FenceSink`](lockkit_fence::FenceSink) the opener
    /// returns, and the parent checks the store's own history at the end (see
    /// [`run_fenced`](super::run_fenced)); unset, the counters live in the parent.
    pub sink: Option<String>,
    /// The planted bug of a fenced run: the opener is asked for a sink that bypasses the
    /// fence (a plain write); the run must then report stale writes accepted.
    pub fence_bypassed: bool,
}

impl ProcessChaosConfig {
    /// The defaults with `seed`, workers on `url` started through the test `worker_test`.
    pub fn new(seed: u64, url: impl Into<String>, worker_test: impl Into<String>) -> Self {
        let url = url.into();
        Self {
            seed,
            label: url.split("://").next().unwrap_or("store").to_owned(),
            url,
            worker_test: worker_test.into(),
            workers: 4,
            names: 2,
            duration: Duration::from_secs(10),
            lease: None,
            faults: vec![ProcessFault::Pause, ProcessFault::Kill],
            pause: None,
            fault_gap: (Duration::from_millis(100), Duration::from_millis(500)),
            planted_bug: false,
            store: None,
            restart_loses_data: false,
            sink: None,
            fence_bypassed: false,
        }
    }

    /// The defaults, with the seed and duration taken from [`SEED_ENV`] and [`SECS_ENV`]
    /// when they are set.
    ///
    /// # Panics
    ///
    /// If either variable is set to something that is not a number.
    pub fn from_env(seed: u64, url: impl Into<String>, worker_test: impl Into<String>) -> Self {
        let number = |name: &str| {
            std::env::var(name).ok().map(|text| match text.trim().parse::<u64>() {
                Ok(value) => value,
                Err(error) => panic!("{name}={text:?} is not a number: {error}"),
            })
        };
        let mut config = Self::new(number(SEED_ENV).unwrap_or(seed), url, worker_test);
        if let Some(secs) = number(SECS_ENV) {
            config.duration = Duration::from_secs(secs);
        }
        config
    }

    crate::setters::with_setters! {
        /// Sets the store's lease.
        fn with_lease(lease: Duration) => lease = Some(lease);

        /// Sets how many workers run at once.
        fn with_workers(workers: usize) => workers = workers.max(1);

        /// Sets how many names they contend for.
        fn with_names(names: usize) => names = names.max(1);

        /// Sets how long faults are injected.
        fn with_duration(duration: Duration) => duration = duration;

        /// Sets the faults to draw from.
        fn with_faults(faults: impl Into<Vec<ProcessFault>>) => faults = faults.into();

        /// Sets the range a pause's length is drawn from.
        fn with_pause(shortest: Duration, longest: Duration) => pause = Some((shortest, longest));

        /// Plants the bug (workers skip the loss deadline).
        fn with_planted_bug(planted: bool) => planted_bug = planted;
    }

    /// Sets the store's process ([`StorePid`]: pauses only) and adds
    /// [`ProcessFault::PauseStore`] to the faults drawn.
    pub fn with_store_pid(mut self, pid: u32) -> Self {
        self.store = Some(Arc::new(StorePid(pid)));
        self.add_faults(&[ProcessFault::PauseStore]);
        self
    }

    /// Sets the store's control and adds [`ProcessFault::PauseStore`] and
    /// [`ProcessFault::RestartStore`] to the faults drawn (set the faults afterwards to draw
    /// fewer).
    pub fn with_store(mut self, store: Arc<dyn StoreControl>) -> Self {
        self.store = Some(store);
        self.add_faults(&[ProcessFault::PauseStore, ProcessFault::RestartStore]);
        self
    }

    crate::setters::with_setters! {
        /// Declares that a restart of the store loses its records (see the field).
        fn with_restart_loses_data(loses: bool) => restart_loses_data = loses;
    }

    fn add_faults(&mut self, kinds: &[ProcessFault]) {
        for kind in kinds {
            if !self.faults.contains(kind) {
                self.faults.push(*kind);
            }
        }
    }

    crate::setters::with_setters! {
        /// Makes the workers write through a real fence to `target` (see the field
        /// [`sink`](Self::sink)); run it with [`run_fenced`](super::run_fenced) or
        /// [`run_cli_fenced`](super::run_cli_fenced).
        fn with_sink(target: impl Into<String>) => sink = Some(target.into());

        /// Plants the fenced run's bug: the fence bypassed (see the field
        /// [`fence_bypassed`](Self::fence_bypassed)).
        fn with_fence_bypassed(bypassed: bool) => fence_bypassed = bypassed;

        /// Sets the report's label.
        fn with_label(label: impl Into<String>) => label = label.into();
    }
}
