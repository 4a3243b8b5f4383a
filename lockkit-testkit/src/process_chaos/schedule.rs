//! The fault schedule of a multi-process run: each step drawn whole from the seed, applied
//! beside the store's faults, and extended past the run's duration until every fault the run
//! draws has landed.
//!
//! Which process a fault strikes, and whether it holds a lock then, depends on the
//! interleaving of the processes as well as on the seed. So that what a run covers depends on
//! the seed's schedule alone, the schedule goes on past [`ProcessChaosConfig::duration`] while
//! the run misses a fault it draws ([`needs`]): one of every kind in
//! [`ProcessChaosConfig::faults`], with a lease and pauses, a pause of a holder that outlived
//! the lease, and in a fenced run (fence not bypassed), a stale write or read the fence
//! refused. It gives up, as an error of the run, after [`COVERAGE_GRACE`] and four
//! leases more.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::analysis::{State, lock};
use super::config::{ProcessChaosConfig, ProcessFault};
use super::report::ProcessChaosReport;
use super::store;
use crate::rng::Rng;

/// How long past its duration (plus four leases) a run's schedule may go on to land the
/// faults it still misses.
pub(super) const COVERAGE_GRACE: Duration = Duration::from_secs(20);

/// A fault a run must have applied before its schedule ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Need {
    /// One fault of this kind.
    Fault(ProcessFault),
    /// A pause of a process that held a lock, longer than the lease.
    PauseOutlivingLease,
    /// A stale write or read refused by the fence: a fenced run exists to show one, and
    /// whether a pause past the lease leaves its holder writing after a newer holder wrote
    /// depends on the interleaving (and on the machine's load) as well as on the seed.
    Refusal,
}

/// What the run with `config` still misses, given what `report` counts so far and the
/// `refusals` of its fence so far. A store fault is needed only when the run has the store's
/// control.
pub(super) fn needs(config: &ProcessChaosConfig, report: &ProcessChaosReport, refusals: u64) -> Vec<Need> {
    let mut needs: Vec<Need> = config
        .faults
        .iter()
        .filter(|kind| config.store.is_some() || !matches!(kind, ProcessFault::PauseStore | ProcessFault::RestartStore))
        .filter(|kind| report.faults.get(kind).copied().unwrap_or(0) == 0)
        .map(|&kind| Need::Fault(kind))
        .collect();
    if config.lease.is_some() && config.faults.contains(&ProcessFault::Pause) && report.pauses_outliving_lease == 0 {
        needs.push(Need::PauseOutlivingLease);
    }
    let fenced = config.sink.is_some() && !config.fence_bypassed;
    if fenced && config.lease.is_some() && config.faults.contains(&ProcessFault::Pause) && refusals == 0 {
        needs.push(Need::Refusal);
    }
    needs
}

/// The schedule of one run: draws, the store faults in flight, and the end of the faults.
pub(super) struct Schedule {
    rng: Rng,
    faults_end: Instant,
    coverage_end: Instant,
    store_faults: StoreFaults,
}

impl Schedule {
    /// The schedule of a run with `config` whose faults start now.
    pub(super) fn new(config: &ProcessChaosConfig) -> Schedule {
        let faults_end = Instant::now() + config.duration;
        let lease = config.lease.unwrap_or(Duration::from_secs(1));
        Schedule {
            rng: Rng::new(config.seed),
            faults_end,
            coverage_end: faults_end + COVERAGE_GRACE + lease * 4,
            store_faults: StoreFaults::default(),
        }
    }

    /// The next fault of a process, once its gap has passed; a store fault drawn meanwhile is
    /// started beside the schedule. `None` once the run's duration is over and the run misses
    /// nothing (or gave up: see the module docs).
    pub(super) async fn next(&mut self, config: &ProcessChaosConfig, state: &Arc<Mutex<State>>) -> Option<Draw> {
        loop {
            let now = Instant::now();
            let missing = if now < self.faults_end {
                Vec::new()
            } else {
                let state = lock(state);
                needs(config, &state.report, state.refusals())
            };
            if now >= self.faults_end && missing.is_empty() {
                return None;
            }
            if now >= self.coverage_end {
                let grace = self.coverage_end.saturating_duration_since(self.faults_end);
                lock(state).report.errors.push(format!(
                    "the schedule did not land {missing:?} within {grace:?} after its duration (no process held a lock, or the store was busy, each time one was drawn)"
                ));
                return None;
            }
            let draw = Draw::new(&mut self.rng, config)?;
            let outlived = lock(state).report.pauses_outliving_lease;
            let mut draw = draw.closing(config, self.faults_end.saturating_duration_since(now), outlived);
            if !missing.is_empty() {
                draw = draw.covering(&missing, config);
            }
            tokio::time::sleep(draw.gap).await;
            if matches!(draw.kind, ProcessFault::PauseStore | ProcessFault::RestartStore) {
                self.store_faults.start(config, &draw, state);
                continue;
            }
            return Some(draw);
        }
    }

    /// Waits until every store fault ended; their failures are errors of the run.
    pub(super) async fn finish(self, state: &Arc<Mutex<State>>) {
        self.store_faults.wait(state).await;
    }
}

/// One step of a run's fault schedule, drawn whole from the seed whatever the run's state (who
/// holds, how many run), so that a replay draws the same kinds, lengths and choices in the
/// same order.
pub(super) struct Draw {
    /// The wait before the fault.
    pub(super) gap: Duration,
    pub(super) kind: ProcessFault,
    /// Whether to aim at a process that holds a lock (when one does).
    at_holder: bool,
    /// Chooses the process among the candidates.
    which: u64,
    /// The length of a pause of a process.
    pub(super) pause: Duration,
    /// Chooses the member of a store of several.
    pub(super) store_pick: u64,
    /// The length of a store fault: 10 ms to a lease (one second without a lease).
    pub(super) store_length: Duration,
    /// Whether only a process that holds a lock may be the target (the closing draw).
    holder_only: bool,
}

impl Draw {
    /// The next step; `None` when the run draws no faults.
    pub(super) fn new(rng: &mut Rng, config: &ProcessChaosConfig) -> Option<Draw> {
        if config.faults.is_empty() {
            return None;
        }
        let pause = config
            .pause
            .unwrap_or((Duration::from_millis(10), config.lease.map_or(Duration::from_secs(1), |lease| lease * 2)));
        Some(Draw {
            gap: rng.between(config.fault_gap.0, config.fault_gap.1),
            kind: config.faults[usize::try_from(rng.below(config.faults.len() as u64)).unwrap_or(0)],
            at_holder: rng.below(2) == 0,
            which: rng.next(),
            pause: rng.between(pause.0, pause.1),
            store_pick: rng.next(),
            store_length: rng.between(Duration::from_millis(10), config.lease.unwrap_or(Duration::from_secs(1))),
            holder_only: false,
        })
    }

    /// Makes sure the run covers the fault it exists for: when the run has a lease, draws
    /// pauses, is within three leases of its end (`left`) and no pause of a holder has
    /// outlived the lease yet (`outlived`), this draw becomes a pause of a holder for one lease
    /// and a half. Which pauses land on a holder depends on the interleaving as well as on the
    /// seed, so without this a seed's schedule may, now and then, cover no such pause.
    pub(super) fn closing(self, config: &ProcessChaosConfig, left: Duration, outlived: u64) -> Draw {
        let Some(lease) = config.lease else { return self };
        if outlived > 0 || left > lease * 3 || !config.faults.contains(&ProcessFault::Pause) {
            return self;
        }
        self.outliving(lease)
    }

    /// Makes this draw a pause of a holder (and of no one else) for a lease and a half.
    fn outliving(mut self, lease: Duration) -> Draw {
        self.kind = ProcessFault::Pause;
        self.at_holder = true;
        self.holder_only = true;
        self.pause = lease + lease / 2;
        self
    }

    /// Makes this draw one of the faults the run still `needs` (the draw's `which` chooses
    /// among them): a pause of a holder past the lease, or a fault of the kind missing, aimed
    /// at a holder when there is one.
    pub(super) fn covering(mut self, needs: &[Need], config: &ProcessChaosConfig) -> Draw {
        let count = u64::try_from(needs.len()).unwrap_or(1).max(1);
        match needs.get(usize::try_from(self.which % count).unwrap_or(0)) {
            Some(Need::PauseOutlivingLease | Need::Refusal) => {
                self.outliving(config.lease.unwrap_or(Duration::from_secs(1)))
            }
            Some(&Need::Fault(kind)) => {
                self.kind = kind;
                self.at_holder = true;
                self
            }
            None => self,
        }
    }

    /// The target: among `holders` half the time when there are some, else among `all`.
    /// A closing draw chooses among `holders` only.
    pub(super) fn choose<T: Copy>(&self, holders: &[T], all: &[T]) -> Option<T> {
        let from = if self.holder_only || (self.at_holder && !holders.is_empty()) { holders } else { all };
        let count = u64::try_from(from.len()).ok().filter(|&count| count > 0)?;
        from.get(usize::try_from(self.which % count).ok()?).copied()
    }
}

/// The store faults of a run in flight, one at a time (a second `SIGCONT` must not end a
/// pause early, and an ensemble keeps its quorum).
#[derive(Default)]
pub(super) struct StoreFaults {
    busy: Arc<tokio::sync::Mutex<()>>,
    running: Vec<tokio::task::JoinHandle<Result<(), String>>>,
}

impl StoreFaults {
    /// Starts the store fault `draw` drew beside the schedule, unless the run has no store
    /// control or another store fault is still running.
    fn start(&mut self, config: &ProcessChaosConfig, draw: &Draw, state: &Arc<Mutex<State>>) {
        let (kind, pick, length) = (draw.kind, draw.store_pick, draw.store_length);
        let Some(store) = config.store.clone() else { return };
        let Ok(permit) = Arc::clone(&self.busy).try_lock_owned() else { return };
        *lock(state).report.faults.entry(kind).or_insert(0) += 1;
        let state = Arc::clone(state);
        self.running.push(tokio::spawn(async move {
            let _permit = permit;
            store::apply(store, kind, pick, length, state).await
        }));
    }

    /// Waits until every store fault ended; their failures are errors of the run.
    async fn wait(self, state: &Arc<Mutex<State>>) {
        for fault in self.running {
            let outcome = match fault.await {
                Ok(outcome) => outcome,
                Err(error) => Err(format!("a store fault failed: {error}")),
            };
            if let Err(error) = outcome {
                lock(state).report.errors.push(error);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_whatever_the_run_s_state() {
        let config = ProcessChaosConfig::new(7, "redis://unused", "unused")
            .with_lease(Duration::from_secs(1))
            .with_faults([ProcessFault::Pause, ProcessFault::Kill, ProcessFault::RestartStore]);
        let (mut first, mut second) = (Rng::new(config.seed), Rng::new(config.seed));
        for _ in 0..100 {
            let (a, b) = (Draw::new(&mut first, &config).unwrap(), Draw::new(&mut second, &config).unwrap());
            assert_eq!((a.gap, a.kind, a.at_holder, a.which, a.pause), (b.gap, b.kind, b.at_holder, b.which, b.pause));
            assert_eq!((a.store_pick, a.store_length), (b.store_pick, b.store_length));
            // Choosing a target draws nothing, so the next step does not depend on who holds.
            let holders = [3, 5];
            let all = [1, 2, 3, 4, 5];
            let target = a.choose(&holders, &all).unwrap();
            assert!(if a.at_holder { holders.contains(&target) } else { all.contains(&target) });
            assert_eq!(a.choose::<u32>(&[], &[]), None);
        }
        assert!(Draw::new(&mut first, &config.clone().with_faults([])).is_none());
    }

    #[test]
    fn a_fenced_run_needs_a_refusal_until_its_fence_refused_one_and_covers_it_with_a_long_pause() {
        let lease = Duration::from_secs(1);
        let config = ProcessChaosConfig::new(7, "redis://unused", "unused")
            .with_lease(lease)
            .with_faults([ProcessFault::Pause])
            .with_sink("postgres://unused");
        let mut report = ProcessChaosReport { pauses_outliving_lease: 1, ..ProcessChaosReport::default() };
        report.faults.insert(ProcessFault::Pause, 1);
        assert_eq!(needs(&config, &report, 0), vec![Need::Refusal]);
        assert!(needs(&config, &report, 1).is_empty());
        // Nothing to refuse with the fence bypassed, nor without a fence.
        assert!(needs(&config.clone().with_fence_bypassed(true), &report, 0).is_empty());
        let mut unfenced = config.clone();
        unfenced.sink = None;
        assert!(needs(&unfenced, &report, 0).is_empty());
        let draw = Draw::new(&mut Rng::new(3), &config).unwrap().covering(&[Need::Refusal], &config);
        assert_eq!((draw.kind, draw.holder_only), (ProcessFault::Pause, true));
        assert!(draw.pause > lease);
    }

    #[test]
    fn the_closing_draw_pauses_a_holder_past_the_lease_only_when_the_run_has_not() {
        let lease = Duration::from_secs(1);
        let config = ProcessChaosConfig::new(7, "redis://unused", "unused")
            .with_lease(lease)
            .with_faults([ProcessFault::Kill, ProcessFault::Pause]);
        let mut rng = Rng::new(config.seed);
        for _ in 0..20 {
            let draw = Draw::new(&mut rng, &config).unwrap();
            let drawn = (draw.kind, draw.pause);
            // Early in the run, or once a pause outlived the lease: the seed's draw.
            let early = draw.closing(&config, lease * 4, 0);
            assert_eq!((early.kind, early.pause, early.holder_only), (drawn.0, drawn.1, false));
            let covered = Draw::new(&mut rng, &config).unwrap().closing(&config, lease, 1);
            assert!(!covered.holder_only);
            // Late in a run without one: a holder, for longer than the lease, or no one.
            let closing = Draw::new(&mut rng, &config).unwrap().closing(&config, lease * 3, 0);
            assert_eq!(closing.kind, ProcessFault::Pause);
            assert!(closing.pause > lease);
            assert_eq!(closing.choose(&[3, 5], &[1, 2, 3, 4, 5]).map(|t| [3, 5].contains(&t)), Some(true));
            assert_eq!(closing.choose(&[], &[1, 2, 3]), None);
        }
        // A run that draws no pauses, or has no lease, keeps its draws.
        let kills = config.clone().with_faults([ProcessFault::Kill]);
        assert_eq!(Draw::new(&mut rng, &kills).unwrap().closing(&kills, lease, 0).kind, ProcessFault::Kill);
        let no_lease = ProcessChaosConfig::new(7, "file:///unused", "unused").with_faults([ProcessFault::Pause]);
        assert!(!Draw::new(&mut rng, &no_lease).unwrap().closing(&no_lease, lease, 0).holder_only);
    }
}
