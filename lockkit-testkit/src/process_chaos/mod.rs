//! The multi-process chaos run: clients as OS processes, paused with `SIGSTOP` and killed
//! with `SIGKILL`, the faults that fencing tokens exist for.
//!
//! [`run`] starts K worker processes (default 4; the test binary re-run as a worker, see
//! [`worker_if_requested`]), each with its own provider, contending for a few lock names
//! (default 2). While a worker holds a lock it makes read-modify-writes on a resource that
//! lives in the parent, one per name: it asks for the counter, then asks to write
//! `counter + 1` with its fencing token. The parent accepts a write only when its token is not
//! below the highest it has seen for that name, as a fenced store does: the writes are checked
//! by the store, not by the writer. Meanwhile a schedule drawn from the seed pauses a worker
//! (`SIGSTOP`, then `SIGCONT` after 10 ms to two leases; half the time the worker that
//! currently holds a lock, so that some pauses outlive the lease mid-hold and the worker
//! writes on resume) or kills one (`SIGKILL`, replaced by a fresh worker). Given the store's
//! control ([`ProcessChaosConfig::with_store`], a [`StoreControl`]: the kit's Redis and
//! ZooKeeper fixtures have one) it also pauses the store for up to a lease, or restarts it (an
//! ensemble: one member stopped and started again), while the schedule goes on, so that
//! workers are paused and killed while the store is faulted too.
//!
//! Every worker reports its holds (grant, end, and its guard's local deadline) with wall-clock
//! times, comparable across the processes of one machine; the parent turns them into a
//! [`History`] and checks it. The report counts:
//!
//! - **overlaps** of valid holds and token regressions ([`History::check`]): must be 0;
//! - **lost writes**: a write accepted while its hold was valid, then overwritten by a write
//!   that had read the counter before it landed: must be 0 (with a store that keeps its data);
//! - with a store that loses its records when restarted (Redis without persistence,
//!   [`ProcessChaosConfig::restart_loses_data`]), the overlaps and lost writes involving a hold
//!   that may have been granted before a restart and was still valid when it began are counted
//!   apart, **by design**; the others must still be 0;
//! - **pauses that outlived a lease** (the worker held a lock when paused, and the pause was
//!   longer than the lease), **writes refused by fencing**, and of those the ones **after a
//!   resume** (a pause of the writer ended between its last validity check and its write);
//! - **late writes**: accepted after the writer's deadline had passed, before any newer holder
//!   wrote (fencing cannot refuse those; they are reported, not failed);
//! - **orphans**: names still held once every worker stopped and the lease had time to run out.
//!
//! [`ProcessChaosConfig::planted_bug`] makes the workers skip the loss deadline (they write
//! without checking that their hold is still guaranteed, and report their holds as valid until
//! they end): the run must then report overlaps, which proves the checker can fail.
//!
//! The same seed draws the same fault schedule and worker choices: each step (the gap, the
//! kind, whether to aim at a holder, which process, the lengths) is drawn whole whatever the
//! run's state, so a replay draws the same sequence. The interleaving of processes is not
//! reproducible (which process holds when a fault strikes, whether a store fault finds the
//! store still busy with the previous one), so a replay reproduces the conditions, not the
//! exact order.
//! Environment: `LOCKKIT_PROCESS_CHAOS_SEED=<n>` replays a seed, `LOCKKIT_PROCESS_CHAOS_SECS=<s>`
//! sets how long faults are injected (see [`ProcessChaosConfig::from_env`]).
//!
//! ```no_run
//! use lockkit_testkit::process_chaos::{self, ProcessChaosConfig};
//!
//! // In tests/process_chaos.rs of a crate that depends on the `lockkit` facade:
//! #[test]
//! fn process_chaos_worker() {
//!     process_chaos::worker_if_requested(|url| async move { lockkit_core::config::connect(&url).await });
//! }
//!
//! # async fn demo() {
//! let config = ProcessChaosConfig::new(7, "redis://127.0.0.1:6379/?lease=1s", "process_chaos_worker")
//!     .with_lease(std::time::Duration::from_secs(1));
//! let report =
//!     process_chaos::run(config, |url| async move { lockkit_core::config::connect(&url).await }).await;
//! println!("{report}");
//! report.assert_ok();
//! # }
//! # fn main() {}
//! ```

mod cli;
mod store;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkit_core::{HoldKind, LockProvider};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub use cli::{cli_writer_if_requested, run_cli};
pub use store::{StoreControl, StorePid, control};
pub use worker::worker_if_requested;

use crate::history::{History, Hold, Violation};

/// [`run_cli`]: a pause of `lockkit` that ended less than this before its command reported
/// the hold may have come between the grant and the command's start, so it bounds the hold.
const SPAWN_WINDOW: Duration = Duration::from_millis(250);

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
    /// [`run_cli`] only: `SIGSTOP` the command that a `lockkit run` runs (not `lockkit`
    /// itself), then `SIGCONT` it after the drawn pause. In [`run_cli`], [`Pause`](Self::Pause)
    /// and [`Kill`](Self::Kill) strike `lockkit` itself.
    PauseCommand,
    /// [`run_cli`] only: `SIGKILL` the command that a `lockkit run` runs; `lockkit` must see
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
    /// The test (in the current test binary) that calls [`worker_if_requested`].
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

    /// Sets the store's lease.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets how many workers run at once.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets how many names they contend for.
    pub fn with_names(mut self, names: usize) -> Self {
        self.names = names.max(1);
        self
    }

    /// Sets how long faults are injected.
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// Sets the faults to draw from.
    pub fn with_faults(mut self, faults: impl Into<Vec<ProcessFault>>) -> Self {
        self.faults = faults.into();
        self
    }

    /// Sets the range a pause's length is drawn from.
    pub fn with_pause(mut self, shortest: Duration, longest: Duration) -> Self {
        self.pause = Some((shortest, longest));
        self
    }

    /// Plants the bug (workers skip the loss deadline).
    pub fn with_planted_bug(mut self, planted: bool) -> Self {
        self.planted_bug = planted;
        self
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

    /// Declares that a restart of the store loses its records (see the field).
    pub fn with_restart_loses_data(mut self, loses: bool) -> Self {
        self.restart_loses_data = loses;
        self
    }

    fn add_faults(&mut self, kinds: &[ProcessFault]) {
        for kind in kinds {
            if !self.faults.contains(kind) {
                self.faults.push(*kind);
            }
        }
    }

    /// Sets the report's label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
}

/// What a multi-process run found. [`is_ok`](Self::is_ok) says whether it passed.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProcessChaosReport {
    /// The report's label.
    pub label: String,
    /// The seed.
    pub seed: u64,
    /// Whether the bug was planted.
    pub planted_bug: bool,
    /// From the first worker's start to the check.
    pub elapsed: Duration,
    /// Workers started, replacements included.
    pub workers_started: u64,
    /// Holds reported by the workers.
    pub acquisitions: u64,
    /// Faults applied, per kind.
    pub faults: BTreeMap<ProcessFault, u64>,
    /// Pauses of a worker that held a lock, longer than the lease.
    pub pauses_outliving_lease: u64,
    /// The longest pause.
    pub longest_pause: Duration,
    /// Writes the resource accepted.
    pub writes_accepted: u64,
    /// Writes the resource refused as stale (a newer token had written).
    pub writes_refused: u64,
    /// Of those, the writes whose writer was paused between its validity check and its write.
    pub writes_refused_after_resume: u64,
    /// [`run_cli`] only: writes refused by fencing whose `lockkit` had been paused (with
    /// `SIGSTOP`) during the hold: its command went on writing while the lease ran out.
    pub writes_refused_lockkit_paused: u64,
    /// Writes accepted after the writer's deadline, before a newer holder wrote.
    pub late_writes: u64,
    /// [`run_cli`] only: holds whose command started after the bound on their validity (its
    /// `lockkit` was paused between the grant and the command's start). They are left out of
    /// the [`History`] (they were never valid); their writes are checked by the resource.
    pub holds_never_valid: u64,
    /// Writes accepted while valid and then overwritten by a write that read before them
    /// (those counted in [`lost_by_design`](Self::lost_by_design) left out).
    pub lost_writes: u64,
    /// Whether the store loses its records when restarted (see
    /// [`ProcessChaosConfig::restart_loses_data`]).
    pub restart_loses_data: bool,
    /// Lost writes where the overwritten write's hold or the overwriting one spans a restart of
    /// a store that loses its records: by design.
    pub lost_by_design: u64,
    /// Overlaps of valid holds and token regressions, with the offending holds (those in
    /// [`by_design`](Self::by_design) left out).
    pub violations: Vec<Violation>,
    /// Overlaps whose first hold spans a restart of a store that loses its records: by design.
    pub by_design: Vec<Violation>,
    /// Names still held after every worker stopped and the lease ran out, and, in
    /// [`run_cli`], commands still running after their `lockkit` was killed.
    pub orphans: Vec<String>,
    /// Problems of the run itself (a worker that did not start, a signal that failed).
    pub errors: Vec<String>,
}

impl ProcessChaosReport {
    /// How many overlaps of valid holds the checker found.
    pub fn overlaps(&self) -> usize {
        self.violations.iter().filter(|v| matches!(v, Violation::Overlap { .. })).count()
    }

    /// How many store restarts the run applied.
    pub fn store_restarts(&self) -> u64 {
        self.faults.get(&ProcessFault::RestartStore).copied().unwrap_or(0)
    }

    /// Whether the run passed: no violation, no lost write, no orphan, no error, and at least
    /// one write made (what a restart of a store that loses data excuses by design left
    /// out).
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
            && self.lost_writes == 0
            && self.orphans.is_empty()
            && self.errors.is_empty()
            && self.writes_accepted > 0
    }

    /// Panics with the report and how to replay the seed unless [`is_ok`](Self::is_ok).
    ///
    /// # Panics
    ///
    /// When the run failed.
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}\nreplay with {SEED_ENV}={}", self.seed);
        }
    }
}

impl fmt::Display for ProcessChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = if self.faults.is_empty() {
            "none".to_owned()
        } else {
            self.faults.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        };
        writeln!(
            f,
            "process chaos [{}{}] seed {} ({:#x}): {} in {:.1} s",
            self.label,
            if self.planted_bug { ", planted bug" } else { "" },
            self.seed,
            self.seed,
            if self.is_ok() { "OK" } else { "FAILED" },
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  workers started {}, acquisitions {} (never valid {})",
            self.workers_started, self.acquisitions, self.holds_never_valid
        )?;
        writeln!(
            f,
            "  faults: {faults}; pauses of a holder that outlived the lease: {} (longest pause {} ms)",
            self.pauses_outliving_lease,
            self.longest_pause.as_millis()
        )?;
        writeln!(
            f,
            "  writes: accepted {}, refused by fencing {} (after a resume {}, lockkit paused {}), late (accepted past the deadline) {}",
            self.writes_accepted,
            self.writes_refused,
            self.writes_refused_after_resume,
            self.writes_refused_lockkit_paused,
            self.late_writes
        )?;
        writeln!(
            f,
            "  overlaps of valid holds {}, token regressions {}, lost writes {}, orphans {}",
            self.overlaps(),
            self.violations.len() - self.overlaps(),
            self.lost_writes,
            self.orphans.len()
        )?;
        if self.restart_loses_data {
            writeln!(
                f,
                "  store restarts {} (the store loses its records: overlaps by design {}, lost writes by design {})",
                self.store_restarts(),
                self.by_design.len(),
                self.lost_by_design
            )?;
        }
        for violation in self.violations.iter().take(5) {
            writeln!(f, "  violation: {violation}")?;
        }
        for violation in self.by_design.iter().take(3) {
            writeln!(f, "  by design (a restart lost the record): {violation}")?;
        }
        for orphan in &self.orphans {
            if orphan.starts_with("command ") {
                writeln!(f, "  orphan: {orphan}")?;
            } else {
                writeln!(f, "  orphan: {orphan:?} is still held")?;
            }
        }
        for error in &self.errors {
            writeln!(f, "  error: {error}")?;
        }
        Ok(())
    }
}

/// A small seeded PRNG (splitmix64).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration in `low..=high`.
    pub(crate) fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        let span = u64::try_from((high - low).as_micros()).unwrap_or(u64::MAX - 1);
        low + Duration::from_micros(self.below(span.saturating_add(1)))
    }
}

/// One hold as the workers reported it (wall nanoseconds).
#[derive(Clone, Debug)]
struct HoldRecord {
    worker: u64,
    name: usize,
    token: u64,
    start: u64,
    end: Option<u64>,
    valid: Option<u64>,
    /// The deadline the worker reported with the grant: the store granted the hold no earlier
    /// than a lease before it (a guard's deadline never passes the store's expiry).
    first_valid: Option<u64>,
}

/// The last accepted write of a name.
#[derive(Clone, Copy, Debug)]
struct LastWrite {
    counter: u64,
    /// Accepted while its hold was valid.
    valid: bool,
    /// The writer's hold (an index in `State::holds`).
    hold: Option<usize>,
}

/// One name's fenced resource, kept by the parent.
#[derive(Debug, Default)]
struct Resource {
    highest: u64,
    counter: u64,
    last: Option<LastWrite>,
}

/// What the parent tracks while the workers run.
#[derive(Debug, Default)]
struct State {
    holds: Vec<HoldRecord>,
    /// (worker, name, token) → index in `holds`.
    open: HashMap<(u64, usize, u64), usize>,
    resources: Vec<Resource>,
    /// Per worker: its pauses (start, end) in wall nanoseconds.
    pauses: HashMap<u64, Vec<(u64, u64)>>,
    /// [`run_cli`]: per worker (one `lockkit run`), the pauses of its `lockkit` (start, end
    /// once resumed), in wall nanoseconds. One that was not over some time before the hold
    /// started ([`SPAWN_WINDOW`]) ends the hold's validity half a lease after its start (see
    /// `cli.rs`).
    lockkit_pauses: HashMap<u64, Vec<(u64, Option<u64>)>>,
    /// [`run_cli`]: half the lease, in nanoseconds, when the store has a lease.
    half_lease: Option<u64>,
    /// The store's restarts (start, end once it serves again), in wall nanoseconds.
    restarts: Vec<(u64, Option<u64>)>,
    /// The store's faults, pauses and restarts (start, end once over), in wall nanoseconds.
    /// [`run_cli`] bounds a hold by them as by a pause of its `lockkit`: nothing renews the
    /// hold during one, and a command cannot see its hold's deadline.
    store_faults: Vec<(u64, Option<u64>)>,
    /// Lost writes: the hold of the overwritten write and the hold of the one that overwrote
    /// it (indexes in `holds`), classified at the end.
    lost: Vec<(Option<usize>, Option<usize>)>,
    /// The lease in nanoseconds, if the store has one.
    lease: Option<u64>,
    /// Workers that died (were killed), and when.
    dead: HashMap<u64, u64>,
    /// See [`ProcessChaosConfig::restart_loses_data`].
    restart_loses_data: bool,
    report: ProcessChaosReport,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ns() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)).unwrap_or(u64::MAX)
}

impl State {
    /// The state of a run with `config`, before its first worker starts.
    fn new(config: &ProcessChaosConfig) -> State {
        State {
            resources: (0..config.names).map(|_| Resource::default()).collect(),
            report: ProcessChaosReport {
                label: config.label.clone(),
                seed: config.seed,
                planted_bug: config.planted_bug,
                restart_loses_data: config.restart_loses_data,
                ..ProcessChaosReport::default()
            },
            lease: config.lease.map(|lease| u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX)),
            restart_loses_data: config.restart_loses_data,
            ..State::default()
        }
    }

    /// Whether the store may have granted `hold` before a restart was over, while the hold was
    /// still valid when the restart began: a restart that loses data may have lost its record
    /// (the server stops some time after the restart began, Redis at its next tick, and grants
    /// until then). The grant came no earlier than a lease before the first deadline the
    /// worker reported (without one, than the hold's start), and the hold was valid until
    /// `valid` (without one, until its end).
    fn spans_restart(&self, hold: &HoldRecord, valid: Option<u64>) -> bool {
        let granted_after = match (hold.first_valid, self.lease) {
            (Some(first), Some(lease)) => first.saturating_sub(lease).min(hold.start),
            _ => hold.start,
        };
        let valid_end = valid.or(hold.end).unwrap_or(u64::MAX);
        self.restarts.iter().any(|&(start, end)| granted_after < end.unwrap_or(u64::MAX) && valid_end > start)
    }

    /// Handles one line from worker `id`; returns the answer to send, if any.
    fn handle(&mut self, id: u64, line: &str) -> Option<String> {
        let mut words = line.split_whitespace();
        let verb = words.next()?;
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        match verb {
            "acquired" => {
                let (name, token, start) = (number()?, number()?, number()?);
                let valid = number();
                let name = usize::try_from(name).ok()?;
                self.report.acquisitions += 1;
                let end = self.dead.get(&id).map(|&died| died.max(start));
                self.holds.push(HoldRecord { worker: id, name, token, start, end, valid, first_valid: valid });
                if end.is_none() {
                    self.open.insert((id, name, token), self.holds.len() - 1);
                }
                None
            }
            "read" => {
                let name = usize::try_from(number()?).ok()?;
                Some(format!("value {}", self.resources.get(name)?.counter))
            }
            "write" => {
                let (name, token, counter, checked) = (number()?, number()?, number()?, number()?);
                let valid = number();
                let start = self.open.get(&(id, usize::try_from(name).unwrap_or(usize::MAX), token));
                let start = start.and_then(|&index| self.holds.get(index)).map_or(0, |hold| hold.start);
                let capped = self.capped(id, start, valid);
                let name = usize::try_from(name).ok()?;
                let received = now_ns();
                let index = self.open.get(&(id, name, token)).copied();
                if let Some(hold) = index.and_then(|index| self.holds.get_mut(index)) {
                    hold.valid = valid;
                }
                let resumed = self
                    .pauses
                    .get(&id)
                    .is_some_and(|pauses| pauses.iter().any(|&(_, end)| end >= checked && end <= received));
                let resource = self.resources.get_mut(name)?;
                if token < resource.highest {
                    self.report.writes_refused += 1;
                    if resumed {
                        self.report.writes_refused_after_resume += 1;
                    }
                    if self.lockkit_pauses.contains_key(&id) {
                        self.report.writes_refused_lockkit_paused += 1;
                    }
                    return Some("stale".to_owned());
                }
                let made_while_valid = capped.is_none_or(|valid| received <= valid);
                if !made_while_valid {
                    self.report.late_writes += 1;
                }
                // The write read `counter - 1`: an accepted write it did not see is lost.
                if let Some(last) = resource.last
                    && counter.saturating_sub(1) < last.counter
                    && last.valid
                {
                    self.lost.push((last.hold, index));
                }
                resource.highest = token;
                resource.counter = counter;
                resource.last = Some(LastWrite { counter, valid: made_while_valid, hold: index });
                self.report.writes_accepted += 1;
                Some("ok".to_owned())
            }
            "ended" => {
                let (name, token, end) = (number()?, number()?, number()?);
                let valid = number();
                let name = usize::try_from(name).ok()?;
                if let Some(index) = self.open.remove(&(id, name, token))
                    && let Some(hold) = self.holds.get_mut(index)
                {
                    hold.end = Some(end);
                    hold.valid = valid;
                }
                None
            }
            _ => None,
        }
    }

    /// Ends the open holds of a worker that died at `at`: its process is gone, and with it
    /// its session or file lock (a lease still bounds a Redis hold through `valid`). For a
    /// kill, `at` is when `SIGKILL` was sent: the worker runs nothing after it, and its lock
    /// may be free (a file lock is, as soon as the process is gone) before the parent reaps
    /// it. A hold the worker reported before it died but the parent reads only later ends
    /// there too.
    fn died(&mut self, id: u64, at: u64) {
        self.dead.entry(id).or_insert(at);
        let open: Vec<(u64, usize, u64)> = self.open.keys().filter(|(worker, _, _)| *worker == id).copied().collect();
        for key in open {
            if let Some(index) = self.open.remove(&key)
                && let Some(hold) = self.holds.get_mut(index)
            {
                hold.end = Some(at);
            }
        }
    }

    /// `valid`, the deadline worker `id` reported for its hold that started at `start`,
    /// bounded by the pauses of its `lockkit` (see `lockkit_pauses`) and, in [`run_cli`], by
    /// the store's faults (see `store_faults`).
    fn capped(&self, id: u64, start: u64, valid: Option<u64>) -> Option<u64> {
        let Some(half) = self.half_lease else { return valid };
        let window = u64::try_from(SPAWN_WINDOW.as_nanos()).unwrap_or(u64::MAX);
        let cap = self
            .lockkit_pauses
            .get(&id)
            .into_iter()
            .flatten()
            .chain(&self.store_faults)
            .filter(|(_, end)| end.is_none_or(|end| end.saturating_add(window) >= start))
            .map(|(begin, _)| begin.saturating_add(half))
            .min();
        match (valid, cap) {
            (Some(valid), Some(cap)) => Some(valid.min(cap)),
            (None, cap) => cap,
            (valid, None) => valid,
        }
    }

    /// Whether worker `id` holds a lock now.
    fn holds_now(&self, id: u64) -> bool {
        self.open.keys().any(|(worker, _, _)| *worker == id)
    }
}

/// One running worker.
struct Worker {
    id: u64,
    child: Child,
    pid: u32,
    /// Dropping it closes the worker's stdin: the worker releases and exits.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    ready: tokio::sync::oneshot::Receiver<()>,
}

/// Sends `signal` (`STOP`, `CONT`) to `pid` with kill(1).
async fn signal(pid: u32, signal: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map_err(|error| format!("cannot run kill(1): {error}"))?;
    if status.success() { Ok(()) } else { Err(format!("kill -s {signal} {pid} failed: {status}")) }
}

/// Starts worker `id`: the test binary, filtered to the worker test.
fn start(config: &ProcessChaosConfig, names: &[String], id: u64, state: &Arc<Mutex<State>>) -> Result<Worker, String> {
    let exe = std::env::current_exe().map_err(|error| format!("cannot find the test binary: {error}"))?;
    let mut child = Command::new(exe)
        .args([config.worker_test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(worker::ID_ENV, id.to_string())
        .env(worker::URL_ENV, &config.url)
        .env(worker::NAMES_ENV, names.join(","))
        .env(worker::SEED_ENV, config.seed.to_string())
        .env(worker::PLANTED_ENV, if config.planted_bug { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot start worker {id}: {error}"))?;
    let pid = child.id().ok_or_else(|| format!("worker {id} has no pid"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("worker {id} has no pipes"));
    };
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut lines = BufReader::new(stdout).lines();
        // Dropped (closed) to tell the worker to release and exit.
        let mut input = Some(stdin);
        while let Ok(Some(line)) = lines.next_line().await {
            // The test harness may print on the same line before the protocol's prefix.
            let Some(at) = line.find(worker::PREFIX) else { continue };
            let message = &line[at + worker::PREFIX.len()..];
            if message == "ready" {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                continue;
            }
            let answer = lock(&state).handle(id, message);
            if !matches!(stop_rx.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty)) {
                input = None;
            }
            if let (Some(answer), Some(stdin)) = (answer, input.as_mut())
                && stdin.write_all(format!("{answer}\n").as_bytes()).await.is_err()
            {
                input = None;
            }
        }
    });
    Ok(Worker { id, child, pid, stop: Some(stop_tx), ready: ready_rx })
}

/// Waits until `worker` connected to the store. A worker that exits or takes more than 30 s
/// (a store paused at that moment refuses or stalls its connection) is started again, up to
/// five attempts in all.
async fn connected(
    mut worker: Worker,
    config: &ProcessChaosConfig,
    names: &[String],
    state: &Arc<Mutex<State>>,
) -> Result<Worker, String> {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(30), &mut worker.ready).await {
            return Ok(worker);
        }
        let _ = worker.child.start_kill();
        let _ = worker.child.wait().await;
        if attempt < ATTEMPTS {
            tokio::time::sleep(Duration::from_millis(200)).await;
            worker = start(config, names, worker.id, state)?;
        }
    }
    Err(format!("worker {} did not connect in {ATTEMPTS} attempts", worker.id))
}

/// Runs the multi-process chaos run and returns its report. `connect` connects the parent to
/// the store by URL (to find orphans at the end); the workers connect through
/// [`worker_if_requested`].
pub async fn run<F, Fut>(config: ProcessChaosConfig, connect: F) -> ProcessChaosReport
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    let began = Instant::now();
    let run_id = format!("{:x}-{}", now_ns(), std::process::id());
    let names: Vec<String> = (0..config.names).map(|i| format!("process-chaos/{run_id}/{i}")).collect();
    let state = Arc::new(Mutex::new(State::new(&config)));
    let fail = |state: &Arc<Mutex<State>>, error: String| lock(state).report.errors.push(error);
    let mut rng = Rng::new(config.seed);
    let mut next_id = 0u64;
    let mut workers: Vec<Worker> = Vec::new();
    for _ in 0..config.workers {
        match start(&config, &names, next_id, &state) {
            Ok(worker) => workers.push(worker),
            Err(error) => fail(&state, error),
        }
        next_id += 1;
    }
    let mut connected_workers = Vec::new();
    for worker in workers {
        match connected(worker, &config, &names, &state).await {
            Ok(worker) => connected_workers.push(worker),
            Err(error) => fail(&state, error),
        }
    }
    let mut workers = connected_workers;
    lock(&state).report.workers_started = next_id;

    let faults_end = Instant::now() + config.duration;
    // Store faults run beside the rest of the schedule; each ends its fault (resumes or
    // restarts the store) before it returns.
    let mut store_faults = StoreFaults::default();
    while Instant::now() < faults_end && !workers.is_empty() {
        let Some(draw) = Draw::new(&mut rng, &config) else { break };
        let outlived = lock(&state).report.pauses_outliving_lease;
        let draw = draw.closing(&config, faults_end.saturating_duration_since(Instant::now()), outlived);
        tokio::time::sleep(draw.gap).await;
        let kind = draw.kind;
        if matches!(kind, ProcessFault::PauseStore | ProcessFault::RestartStore) {
            store_faults.start(&config, &draw, &state);
            continue;
        }
        // Half the time a worker that holds a lock now, if one does.
        let holders: Vec<usize> = (0..workers.len()).filter(|&i| lock(&state).holds_now(workers[i].id)).collect();
        let all: Vec<usize> = (0..workers.len()).collect();
        let Some(index) = draw.choose(&holders, &all) else { continue };
        *lock(&state).report.faults.entry(kind).or_insert(0) += 1;
        match kind {
            ProcessFault::Pause => {
                let (id, pid) = (workers[index].id, workers[index].pid);
                let pause = draw.pause;
                let held = lock(&state).holds_now(id);
                let started = now_ns();
                if let Err(error) = signal(pid, "STOP").await {
                    fail(&state, error);
                    continue;
                }
                tokio::time::sleep(pause).await;
                let resumed = signal(pid, "CONT").await;
                let ended = now_ns();
                let mut state_now = lock(&state);
                state_now.pauses.entry(id).or_default().push((started, ended));
                let took = Duration::from_nanos(ended.saturating_sub(started));
                state_now.report.longest_pause = state_now.report.longest_pause.max(took);
                if held && config.lease.is_some_and(|lease| took > lease) {
                    state_now.report.pauses_outliving_lease += 1;
                }
                if let Err(error) = resumed {
                    state_now.report.errors.push(error);
                }
            }
            ProcessFault::PauseStore
            | ProcessFault::RestartStore
            | ProcessFault::PauseCommand
            | ProcessFault::KillCommand => {}
            ProcessFault::Kill => {
                let mut victim = workers.swap_remove(index);
                let killed = now_ns();
                let _ = victim.child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(10), victim.child.wait()).await;
                lock(&state).died(victim.id, killed);
                let replacement = match start(&config, &names, next_id, &state) {
                    Ok(worker) => connected(worker, &config, &names, &state).await,
                    Err(error) => Err(error),
                };
                match replacement {
                    Ok(worker) => workers.push(worker),
                    Err(error) => fail(&state, error),
                }
                next_id += 1;
                lock(&state).report.workers_started = next_id;
            }
        }
    }

    store_faults.wait(&state).await;

    // Stop: every worker releases what it holds and exits.
    for worker in &mut workers {
        if let Some(stop) = worker.stop.take() {
            let _ = stop.send(());
        }
    }
    for mut worker in workers {
        if tokio::time::timeout(Duration::from_secs(15), worker.child.wait()).await.is_err() {
            fail(&state, format!("worker {} did not stop within 15 s of being told to; killed", worker.id));
            let killed = now_ns();
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
            lock(&state).died(worker.id, killed);
        }
    }

    // Orphans: every name must be free once the lease had time to run out.
    let orphans = match held_names(connect, &config, &names).await {
        Ok(held) => held,
        Err(error) => {
            fail(&state, error);
            Vec::new()
        }
    };

    let mut state = lock(&state);
    state.report.orphans = orphans;
    finish(&mut state, &names, began)
}

/// The names still held once the lease had time to run out (bounded).
async fn held_names<F, Fut>(connect: F, config: &ProcessChaosConfig, names: &[String]) -> Result<Vec<String>, String>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = lockkit_core::Result<LockProvider>>,
{
    let provider = connect(config.url.clone())
        .await
        .map_err(|error| format!("cannot connect to {} to look for orphans: {error}", config.url))?;
    let deadline = Instant::now() + config.lease.unwrap_or_default() * 2 + Duration::from_secs(5);
    let mut held: Vec<String> = names.to_vec();
    while !held.is_empty() {
        let mut still = Vec::new();
        for name in held {
            match provider.inspect(&name).await {
                Ok(info) if info.holder().is_none() => {}
                _ => still.push(name),
            }
        }
        held = still;
        if held.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(held)
}

/// One step of a run's fault schedule, drawn whole from the seed whatever the run's state (who
/// holds, how many run), so that a replay draws the same kinds, lengths and choices in the
/// same order.
struct Draw {
    /// The wait before the fault.
    gap: Duration,
    kind: ProcessFault,
    /// Whether to aim at a process that holds a lock (when one does).
    at_holder: bool,
    /// Chooses the process among the candidates.
    which: u64,
    /// The length of a pause of a process.
    pause: Duration,
    /// Chooses the member of a store of several.
    store_pick: u64,
    /// The length of a store fault: 10 ms to a lease (one second without a lease).
    store_length: Duration,
    /// Whether only a process that holds a lock may be the target (the closing draw).
    holder_only: bool,
}

impl Draw {
    /// The next step; `None` when the run draws no faults.
    fn new(rng: &mut Rng, config: &ProcessChaosConfig) -> Option<Draw> {
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
    fn closing(mut self, config: &ProcessChaosConfig, left: Duration, outlived: u64) -> Draw {
        let Some(lease) = config.lease else { return self };
        if outlived > 0 || left > lease * 3 || !config.faults.contains(&ProcessFault::Pause) {
            return self;
        }
        self.kind = ProcessFault::Pause;
        self.at_holder = true;
        self.holder_only = true;
        self.pause = lease + lease / 2;
        self
    }

    /// The target: among `holders` half the time when there are some, else among `all`.
    /// A closing draw chooses among `holders` only.
    fn choose<T: Copy>(&self, holders: &[T], all: &[T]) -> Option<T> {
        let from = if self.holder_only || (self.at_holder && !holders.is_empty()) { holders } else { all };
        let count = u64::try_from(from.len()).ok().filter(|&count| count > 0)?;
        from.get(usize::try_from(self.which % count).ok()?).copied()
    }
}

/// The store faults of a run in flight, one at a time (a second `SIGCONT` must not end a
/// pause early, and an ensemble keeps its quorum).
#[derive(Default)]
struct StoreFaults {
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

/// Checks the recorded holds as a [`History`] and returns the report.
fn finish(state: &mut State, names: &[String], began: Instant) -> ProcessChaosReport {
    let history = History::new();
    let (base_instant, base_wall) = (Instant::now(), now_ns());
    let instant = |ns: u64| {
        if ns >= base_wall {
            base_instant + Duration::from_nanos(ns - base_wall)
        } else {
            base_instant.checked_sub(Duration::from_nanos(base_wall - ns)).unwrap_or(began)
        }
    };
    let mut never_valid = 0;
    // (client, lock, token) → whether the hold spans a restart that lost its record.
    let mut excused: HashMap<(String, String, u64), bool> = HashMap::new();
    for hold in &state.holds {
        let valid = state.capped(hold.worker, hold.start, hold.valid);
        if state.half_lease.is_some() && valid.is_some_and(|valid| valid <= hold.start) {
            never_valid += 1;
            continue;
        }
        let client = format!("worker {}", hold.worker);
        let name = names.get(hold.name).cloned().unwrap_or_default();
        excused.insert(
            (client.clone(), name.clone(), hold.token),
            state.restart_loses_data && state.spans_restart(hold, valid),
        );
        history.record(Hold {
            client,
            lock: name,
            token: hold.token,
            kind: HoldKind::Exclusive,
            start: instant(hold.start),
            end: hold.end.map(instant),
            valid_until: valid.map(instant),
        });
    }
    state.report.holds_never_valid = never_valid;
    let (by_design, violations): (Vec<Violation>, Vec<Violation>) =
        history.check().err().unwrap_or_default().into_iter().partition(|violation| match violation {
            Violation::Overlap { first, .. } => {
                excused.get(&(first.client.clone(), first.lock.clone(), first.token)).copied().unwrap_or(false)
            }
            Violation::TokenRegression { .. } => false,
        });
    state.report.violations = violations;
    state.report.by_design = by_design;
    let spans = |index: Option<usize>| {
        state.restart_loses_data
            && index
                .and_then(|index| state.holds.get(index))
                .is_some_and(|hold| state.spans_restart(hold, state.capped(hold.worker, hold.start, hold.valid)))
    };
    let by_design = state.lost.iter().filter(|&&(lost, by)| spans(lost) || spans(by)).count();
    state.report.lost_by_design = by_design as u64;
    state.report.lost_writes = (state.lost.len() - by_design) as u64;
    state.report.elapsed = began.elapsed();
    std::mem::take(&mut state.report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    /// Worker 1 holds from before a restart (valid long after it), worker 2 is granted after the
    /// restart while worker 1 still writes: an overlap and a lost write, both involving a hold
    /// the restart may have lost.
    fn across_a_restart(loses_data: bool) -> ProcessChaosReport {
        let config = ProcessChaosConfig::new(1, "redis://unused", "unused")
            .with_lease(Duration::from_secs(1))
            .with_restart_loses_data(loses_data);
        let mut state = State::new(&config);
        let base = now_ns();
        let far = base + 60 * SECOND;
        state.restarts.push((base - SECOND / 2, Some(base - 2 * SECOND / 5)));
        assert_eq!(state.handle(1, &format!("acquired 0 100 {} {far}", base - SECOND)), None);
        assert_eq!(state.handle(2, &format!("acquired 0 200 {} {far}", base - SECOND / 4)), None);
        assert_eq!(state.handle(2, "read 0 200").as_deref(), Some("value 0"));
        assert_eq!(state.handle(1, &format!("write 0 100 1 {base} {far}")).as_deref(), Some("ok"));
        // Worker 2 read 0 before worker 1's write landed: worker 1's write is lost.
        assert_eq!(state.handle(2, &format!("write 0 200 1 {base} {far}")).as_deref(), Some("ok"));
        finish(&mut state, &["process-chaos/test/0".to_owned()], Instant::now())
    }

    #[test]
    fn a_restart_that_loses_data_excuses_what_involves_a_hold_it_may_have_lost() {
        let report = across_a_restart(true);
        assert_eq!((report.by_design.len(), report.lost_by_design), (1, 1), "{report}");
        assert_eq!((report.overlaps(), report.lost_writes), (0, 0), "{report}");
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn without_restart_loses_data_the_same_run_fails() {
        let report = across_a_restart(false);
        assert_eq!((report.overlaps(), report.lost_writes), (1, 1), "{report}");
        assert!(report.by_design.is_empty() && report.lost_by_design == 0, "{report}");
        assert!(!report.is_ok(), "{report}");
    }

    #[test]
    fn a_hold_granted_after_the_restart_is_not_excused() {
        let config = ProcessChaosConfig::new(1, "redis://unused", "unused")
            .with_lease(Duration::from_secs(1))
            .with_restart_loses_data(true);
        let mut state = State::new(&config);
        let base = now_ns();
        let far = base + 60 * SECOND;
        state.restarts.push((base - 3 * SECOND, Some(base - 2 * SECOND)));
        // Both granted after the restart was over (the first deadline minus a lease is later).
        state.handle(1, &format!("acquired 0 100 {} {far}", base - SECOND));
        state.handle(2, &format!("acquired 0 200 {} {far}", base - SECOND / 2));
        let report = finish(&mut state, &["process-chaos/test/0".to_owned()], Instant::now());
        assert_eq!((report.overlaps(), report.by_design.len()), (1, 0), "{report}");
    }

    #[test]
    fn a_killed_workers_hold_ends_when_it_was_killed_even_when_read_later() {
        let config = ProcessChaosConfig::new(1, "file:///unused", "unused");
        let mut state = State::new(&config);
        let base = now_ns();
        state.handle(1, &format!("acquired 0 100 {} -", base - 2 * SECOND));
        state.died(1, base - SECOND);
        // A grant the worker reported before it died, read after.
        state.handle(1, &format!("acquired 1 101 {} -", base - SECOND - SECOND / 2));
        // The next holders start after the kill: no overlap.
        state.handle(2, &format!("acquired 0 200 {} -", base - SECOND / 2));
        state.handle(2, &format!("acquired 1 201 {} -", base - SECOND / 2));
        let names = ["process-chaos/test/0".to_owned(), "process-chaos/test/1".to_owned()];
        let report = finish(&mut state, &names, Instant::now());
        assert!(report.violations.is_empty(), "{report}");
        assert!(state.holds.iter().filter(|hold| hold.worker == 1).all(|hold| hold.end == Some(base - SECOND)));
    }

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
