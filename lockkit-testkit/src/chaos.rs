//! The chaos run: a randomized fault suite any backend can be put through.
//!
//! [`run`] starts K clients (default 8) that contend for a small set of lock names (default 3)
//! and, while they hold a lock, do a read-modify-write on a [`FencedResource`] for that name:
//! read the last counter, write `counter + 1` with the hold's fencing token. Meanwhile a fault
//! schedule drawn from a seed is applied with the harness's fault hooks: cut a client's
//! connection, blackhole it past the lease or session timeout (which expires a ZooKeeper
//! session) and heal, add latency, kill a client (and replace it with a fresh one), pause or
//! restart the store, fail over the primary of a lock's name or move the name's data to
//! another server (a Redis Cluster's slot migration). A hook the harness lacks is skipped
//! and counted as skipped.
//!
//! At the end the run checks:
//!
//! - **no overlap**: [`History::check`] finds no two holds of one name whose validity
//!   intervals (grant to the earlier of release, loss and local deadline) overlap, and no
//!   token regression;
//! - **fencing**: every name's resource accepted tokens in increasing order, each token from
//!   one hold only, and no write made while its guard was valid was refused as stale;
//! - **nothing lost**: every write made while the guard was valid is in the resource, and no
//!   later accepted write overwrote it (a write whose counter does not follow the previous
//!   one's read a state older than an accepted write: a lost update);
//! - **liveness**: every client acquired a lock after the last fault healed, within a bound;
//! - **no orphans**: once every client stopped, `inspect` reports every name idle.
//!
//! The clients contend for mutexes by default; [`ChaosConfig::with_primitive`] runs the same
//! schedule on read-write locks (one acquisition in four a writer; readers read the resource
//! with their token, and a read refused while valid is a violation), on semaphores (the
//! history checks the permit count) or on elections (the leader writes with its term).
//!
//! A store restarted without persistence (Redis without AOF) cannot keep mutual exclusion by
//! design: the record is gone while its holder still believes it holds. Such a run sets
//! [`ChaosConfig::restart_loses_data`]; overlaps and lost updates involving a hold that
//! spans a restart are then counted apart as "by design" instead of failing the run, and the
//! report shows how many stale writes fencing refused.
//!
//! The same seed draws the same fault schedule and the same client choices; the interleaving
//! with the store is not reproducible, so a replay reproduces the conditions, not the exact
//! event order.
//!
//! ```no_run
//! # async fn demo(harness: &dyn lockkit_testkit::Harness) {
//! use lockkit_testkit::chaos::{self, ChaosConfig};
//!
//! let report = chaos::run(harness, ChaosConfig::new(7)).await;
//! println!("{report}");
//! report.assert_ok();
//! # }
//! ```
//!
//! Environment: `LOCKKIT_CHAOS_SEED=<n>` replays one seed, `LOCKKIT_CHAOS_SEEDS=<n>` runs n
//! seeds, `LOCKKIT_CHAOS_SECS=<s>` sets how long faults are injected per seed (see [`check`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockkit_core::{Error, HoldKind, LockGuard, LockHandle};

use crate::FencedResource;
use crate::harness::{Harness, TestClient};
use crate::history::{History, Hold, Violation};

/// Replays one seed: `LOCKKIT_CHAOS_SEED=<n>` (decimal or `0x` hex).
pub const SEED_ENV: &str = "LOCKKIT_CHAOS_SEED";
/// Runs this many seeds: the defaults first, then seeds drawn from the clock (printed).
pub const SEEDS_ENV: &str = "LOCKKIT_CHAOS_SEEDS";
/// How many seconds faults are injected per seed.
pub const SECS_ENV: &str = "LOCKKIT_CHAOS_SECS";

/// A kind of fault the chaos run injects.
///
/// New kinds come with new stores and faults, so a `match` outside this crate needs a
/// wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// Reset one client's connections ([`ClientFaults::cut_connection`](crate::ClientFaults::cut_connection)).
    Cut,
    /// Blackhole one client for longer than the lease or session timeout, then heal it. On
    /// ZooKeeper this expires the client's session.
    Blackhole,
    /// Delay one client's traffic for a while ([`ClientFaults::set_latency`](crate::ClientFaults::set_latency)).
    Latency,
    /// Kill one client for good and replace it with a fresh one.
    Kill,
    /// Suspend the store process for up to the lease plus a second, then resume it.
    PauseStore,
    /// Stop the server (ensemble member) one client is connected to for up to the lease,
    /// then start it again ([`ClientFaults::stop_server_for`](crate::ClientFaults::stop_server_for)).
    StopServer,
    /// Restart the store ([`Harness::restart_store`]).
    RestartStore,
    /// Fail over the primary that holds one of the run's names to a replica
    /// ([`Harness::failover`]).
    Failover,
    /// Move one of the run's names, with its data, to another server of the store (a Redis
    /// Cluster's slot migration: [`Harness::reshard`]).
    Reshard,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Cut,
        FaultKind::Blackhole,
        FaultKind::Latency,
        FaultKind::Kill,
        FaultKind::PauseStore,
        FaultKind::RestartStore,
        FaultKind::StopServer,
        FaultKind::Failover,
        FaultKind::Reshard,
    ];

    /// The kinds that change which server holds a name: a failover and a resharding.
    pub const TOPOLOGY: [FaultKind; 2] = [FaultKind::Failover, FaultKind::Reshard];

    /// The kinds that act on one client only, safe on a shared store.
    pub const CLIENT: [FaultKind; 4] = [FaultKind::Cut, FaultKind::Blackhole, FaultKind::Latency, FaultKind::Kill];

    fn label(self) -> &'static str {
        match self {
            FaultKind::Cut => "cut",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Latency => "latency",
            FaultKind::Kill => "kill",
            FaultKind::PauseStore => "pause-store",
            FaultKind::RestartStore => "restart-store",
            FaultKind::StopServer => "stop-server",
            FaultKind::Failover => "failover",
            FaultKind::Reshard => "reshard",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The settings of one chaos run. Plain `pub` fields with `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChaosConfig {
    /// The seed of the fault schedule and of every client's choices.
    pub seed: u64,
    /// How many clients contend (default 8).
    pub clients: usize,
    /// How many lock names they contend for (default 3).
    pub names: usize,
    /// How long faults are injected (default 15 s); the clients run on until every one made
    /// progress after the last fault healed.
    pub duration: Duration,
    /// The kinds of fault to draw from (default: all).
    pub faults: Vec<FaultKind>,
    /// The longest a client holds a lock in a short hold (default 120 ms).
    pub max_hold: Duration,
    /// One hold in this many is long: between half a lease and two leases (or two to eight
    /// short holds without a lease), so that renewal runs and a fault can strike mid-hold
    /// (default 8; 0 for none).
    pub long_hold_every: u64,
    /// The pause between two faults is drawn from this range (default 300 ms to 1.5 s).
    pub fault_gap: (Duration, Duration),
    /// The store loses its records when restarted (Redis without persistence), or may lose
    /// the latest writes at a failover (Redis replication is asynchronous): overlaps and lost
    /// updates involving a hold that spans a restart or a failover are counted as "by
    /// design".
    pub restart_loses_data: bool,
    /// How long every client may take to make progress after the last fault healed
    /// (default: three leases plus 15 s).
    pub liveness_bound: Option<Duration>,
    /// A label for the report, after the backend's name (such as "no persistence").
    pub label: Option<String>,
    /// What the clients contend for (default: mutexes).
    pub primitive: Primitive,
}

/// What the clients of a chaos run contend for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Primitive {
    /// Mutexes: every hold writes.
    Mutex,
    /// Read-write locks: one acquisition in four is a writer, which writes; readers read the
    /// resource with their token ([`FencedResource::read`]), which must never be refused
    /// while their guard is valid.
    ReadWrite,
    /// Semaphores of this many permits: holders do not write; the history checks that no more
    /// than that many held at once.
    Semaphore(u32),
    /// Elections: every client campaigns with an identity of its own, and the leader writes
    /// with its term; the history checks that no two leaders' valid terms overlap.
    Election,
}

impl ChaosConfig {
    /// The defaults with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            clients: 8,
            names: 3,
            duration: Duration::from_secs(15),
            faults: FaultKind::ALL.to_vec(),
            max_hold: Duration::from_millis(120),
            long_hold_every: 8,
            fault_gap: (Duration::from_millis(300), Duration::from_millis(1500)),
            restart_loses_data: false,
            liveness_bound: None,
            label: None,
            primitive: Primitive::Mutex,
        }
    }

    /// Sets what the clients contend for.
    pub fn with_primitive(mut self, primitive: Primitive) -> Self {
        self.primitive = primitive;
        self
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the number of clients.
    pub fn with_clients(mut self, clients: usize) -> Self {
        self.clients = clients.max(1);
        self
    }

    /// Sets the number of lock names.
    pub fn with_names(mut self, names: usize) -> Self {
        self.names = names.max(1);
        self
    }

    /// Sets how long faults are injected.
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// Sets the kinds of fault to draw from.
    pub fn with_faults(mut self, faults: &[FaultKind]) -> Self {
        self.faults = faults.to_vec();
        self
    }

    /// Sets the longest hold.
    pub fn with_max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// Sets how often a hold is long (one in `every`; 0 for never).
    pub fn with_long_hold_every(mut self, every: u64) -> Self {
        self.long_hold_every = every;
        self
    }

    /// Declares that a store restart loses the lock records (see the field).
    pub fn with_restart_loses_data(mut self, loses: bool) -> Self {
        self.restart_loses_data = loses;
        self
    }

    /// Sets the report's label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the liveness bound.
    pub fn with_liveness_bound(mut self, bound: Duration) -> Self {
        self.liveness_bound = Some(bound);
        self
    }
}

/// One planned fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledFault {
    /// When it starts, after the run's start.
    pub at: Duration,
    /// Its kind.
    pub kind: FaultKind,
    /// The client it acts on (client faults).
    pub client: usize,
    /// How long it lasts before it is healed (zero for instant faults).
    pub hold: Duration,
    /// The latency added (latency faults).
    pub latency: Duration,
}

impl fmt::Display for ScheduledFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:>6} ms {:<13}", self.at.as_millis(), self.kind.label())?;
        match self.kind {
            FaultKind::Cut | FaultKind::Kill => write!(f, " client {}", self.client),
            FaultKind::Blackhole => write!(f, " client {} for {} ms", self.client, self.hold.as_millis()),
            FaultKind::Latency => write!(
                f,
                " client {} +{} ms each way for {} ms",
                self.client,
                self.latency.as_millis(),
                self.hold.as_millis()
            ),
            FaultKind::PauseStore => write!(f, " for {} ms", self.hold.as_millis()),
            FaultKind::Failover | FaultKind::Reshard => Ok(()),
            FaultKind::StopServer => write!(f, " of client {} for {} ms", self.client, self.hold.as_millis()),
            FaultKind::RestartStore => Ok(()),
        }
    }
}

/// Draws the fault schedule of `config` for a backend whose lease (or session timeout) is
/// `lease`. The same inputs give the same schedule. Kinds are drawn in rounds, each round a
/// shuffle of every configured kind, so a run long enough for one round has every kind.
pub fn schedule(config: &ChaosConfig, lease: Option<Duration>) -> Vec<ScheduledFault> {
    let mut rng = Rng::new(config.seed ^ 0xc4a0_5eed);
    let lease = lease.unwrap_or(Duration::from_secs(1));
    let mut faults = Vec::new();
    if config.faults.is_empty() {
        return faults;
    }
    let mut at = rng.between(config.fault_gap.0, config.fault_gap.1);
    let mut round: Vec<FaultKind> = Vec::new();
    while at < config.duration {
        if round.is_empty() {
            round = config.faults.clone();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let Some(kind) = round.pop() else { break };
        let client = rng.below(config.clients as u64) as usize;
        let (hold, latency) = match kind {
            FaultKind::Cut | FaultKind::Kill | FaultKind::RestartStore | FaultKind::Failover | FaultKind::Reshard => {
                (Duration::ZERO, Duration::ZERO)
            }
            FaultKind::Blackhole => {
                (lease + rng.between(Duration::from_millis(200), Duration::from_millis(1200)), Duration::ZERO)
            }
            FaultKind::Latency => (
                rng.between(Duration::from_millis(300), Duration::from_millis(2000)),
                rng.between(Duration::from_millis(10), Duration::from_millis(150)),
            ),
            FaultKind::PauseStore => {
                (rng.between(Duration::from_millis(300), lease + Duration::from_secs(1)), Duration::ZERO)
            }
            FaultKind::StopServer => (rng.between(Duration::from_millis(300), lease), Duration::ZERO),
        };
        faults.push(ScheduledFault { at, kind, client, hold, latency });
        // Restarts take a while of their own; the gap counts from the heal.
        at += hold + rng.between(config.fault_gap.0, config.fault_gap.1);
    }
    faults
}

/// What a chaos run did and found.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ChaosReport {
    /// The backend's name.
    pub backend: String,
    /// The seed.
    pub seed: u64,
    /// The planned faults.
    pub schedule: Vec<ScheduledFault>,
    /// The faults as applied: a client fault strikes a client holding a lock when there is
    /// one (the first from the scheduled client on), so the target may differ from the plan.
    pub applied: Vec<String>,
    /// Client faults that struck a client while it held a lock.
    pub faults_on_holders: u64,
    /// Of those, the faults that struck a client in a long hold (half a lease or more).
    pub faults_on_long_holds: u64,
    /// Faults applied, by kind.
    pub faults_applied: BTreeMap<FaultKind, u64>,
    /// Faults skipped because the harness lacks the hook, by kind.
    pub faults_skipped: BTreeMap<FaultKind, u64>,
    /// How long the run took.
    pub elapsed: Duration,
    /// Successful acquisitions (fresh holds).
    pub acquisitions: u64,
    /// `try_acquire` calls that found the lock taken.
    pub busy: u64,
    /// `acquire_timeout` calls that timed out.
    pub timeouts: u64,
    /// Acquisitions cancelled by dropping the future mid-wait.
    pub cancelled: u64,
    /// Operations that failed with an error (connection errors during faults, mostly).
    pub errors: u64,
    /// Holds ended by `release`.
    pub releases: u64,
    /// Holds ended by dropping the guard.
    pub drops: u64,
    /// Holds that were lost (loss signalled or deadline passed) before their end.
    pub losses: u64,
    /// Acquisitions whose guard was already past its local deadline when the call returned
    /// (the client stalled between the grant and the return): never valid, so left out of the
    /// history; they count among `acquisitions` and `losses`.
    pub expired_on_arrival: u64,
    /// Writes made while the guard was valid, and accepted.
    pub valid_writes: u64,
    /// Writes accepted although the guard was no longer valid right after (made at the edge
    /// of the validity; no guarantee covers them).
    pub late_writes: u64,
    /// Writes refused by fencing (a newer holder had written): the stale holder was stopped.
    pub stale_rejected: u64,
    /// Reads made by readers of a read-write lock while their guard was valid.
    pub reads: u64,
    /// Overlapping holds found by the history checker (violations).
    pub overlaps: usize,
    /// Tokens issued out of order found by the history checker (violations): a grant whose
    /// token is not above an earlier grant's of the same name.
    pub token_regressions: usize,
    /// Overlaps involving a hold that spans a restart of a store that loses data (by design).
    pub overlaps_by_design: usize,
    /// Writes made while valid that were lost (missing or overwritten): violations.
    pub lost_writes: usize,
    /// Writes lost across a restart of a store that loses data (by design).
    pub lost_by_design: usize,
    /// Accepted writes made at the edge of validity that a later holder overwrote.
    pub late_writes_overwritten: usize,
    /// Every violation, described with the offending events.
    pub violations: Vec<String>,
    /// The by-design events, described (a store restart without persistence).
    pub by_design: Vec<String>,
}

impl ChaosReport {
    /// Whether the run found no violation.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Panics with the seed, the schedule and every violation when the run found one.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}\nreplay with {SEED_ENV}={}", self.seed);
        }
    }

    /// Faults applied in total.
    pub fn faults_total(&self) -> u64 {
        self.faults_applied.values().sum()
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = |map: &BTreeMap<FaultKind, u64>| {
            if map.is_empty() {
                return "none".to_owned();
            }
            map.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        };
        writeln!(
            f,
            "chaos [{}] seed {} ({:#x}): {} in {:.1} s",
            self.backend,
            self.seed,
            self.seed,
            if self.is_ok() { "OK" } else { "FAILED" },
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  acquisitions {} (busy {}, timeouts {}, cancelled {}, errors {}); ends: released {}, dropped {}, lost {} (expired on arrival {})",
            self.acquisitions,
            self.busy,
            self.timeouts,
            self.cancelled,
            self.errors,
            self.releases,
            self.drops,
            self.losses,
            self.expired_on_arrival
        )?;
        writeln!(
            f,
            "  faults applied: {} ({}); client faults on a holder: {} (in a long hold: {})",
            self.faults_total(),
            kinds(&self.faults_applied),
            self.faults_on_holders,
            self.faults_on_long_holds
        )?;
        writeln!(f, "  faults skipped (no hook): {}", kinds(&self.faults_skipped))?;
        writeln!(
            f,
            "  writes: valid {}, late {}, stale rejected by fencing {}; reads while valid {}",
            self.valid_writes, self.late_writes, self.stale_rejected, self.reads
        )?;
        writeln!(
            f,
            "  overlaps {} (by design {}), token regressions {}, lost writes {} (by design {}), late writes overwritten {}",
            self.overlaps,
            self.overlaps_by_design,
            self.token_regressions,
            self.lost_writes,
            self.lost_by_design,
            self.late_writes_overwritten
        )?;
        if !self.violations.is_empty() || !self.by_design.is_empty() {
            writeln!(f, "  schedule (as applied):")?;
            for fault in &self.applied {
                writeln!(f, "    {fault}")?;
            }
        }
        for event in &self.by_design {
            writeln!(f, "  by design: {event}")?;
        }
        for violation in &self.violations {
            writeln!(f, "  VIOLATION: {violation}")?;
        }
        Ok(())
    }
}

/// Runs the seeds the environment asks for (else `default_seeds`) with `config`, prints each
/// report, and panics after the last one if any found a violation, naming the seeds.
///
/// `LOCKKIT_CHAOS_SEED=<n>` runs that seed only; `LOCKKIT_CHAOS_SEEDS=<n>` runs n seeds (the
/// defaults, then seeds drawn from the clock); `LOCKKIT_CHAOS_SECS=<s>` sets the duration.
pub async fn check(harness: &dyn Harness, config: ChaosConfig, default_seeds: &[u64]) -> Vec<ChaosReport> {
    let mut config = config;
    if let Some(secs) = env_u64(SECS_ENV) {
        config.duration = Duration::from_secs(secs);
    }
    let mut reports = Vec::new();
    for seed in seeds(default_seeds) {
        let report = run(harness, config.clone().with_seed(seed)).await;
        println!("{report}");
        reports.push(report);
    }
    let failed: Vec<&ChaosReport> = reports.iter().filter(|r| !r.is_ok()).collect();
    if !failed.is_empty() {
        let seeds: Vec<String> = failed.iter().map(|r| r.seed.to_string()).collect();
        let details: Vec<String> = failed.iter().map(ToString::to_string).collect();
        panic!(
            "chaos run on {} found violations with seed(s) {}; replay one with {SEED_ENV}=<seed>\n{}",
            harness.name(),
            seeds.join(", "),
            details.join("\n")
        );
    }
    reports
}

/// The seeds to run: `LOCKKIT_CHAOS_SEED` alone if set; else `LOCKKIT_CHAOS_SEEDS` many (the
/// defaults first, then seeds from the clock); else the defaults.
pub fn seeds(defaults: &[u64]) -> Vec<u64> {
    if let Some(seed) = env_u64(SEED_ENV) {
        return vec![seed];
    }
    let Some(count) = env_u64(SEEDS_ENV) else { return defaults.to_vec() };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let mut seeds: Vec<u64> = defaults.iter().copied().take(count).collect();
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed);
    let mut rng = Rng::new(clock);
    while seeds.len() < count {
        seeds.push(rng.next() >> 16);
    }
    seeds
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    match parsed {
        Ok(value) => Some(value),
        Err(error) => panic!("{name}={text:?} is not a number: {error}"),
    }
}

/// A small seeded PRNG (splitmix64): enough for schedules, and no dependency.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        let span = (high - low).as_micros() as u64;
        low + Duration::from_micros(self.below(span + 1))
    }
}

/// One accepted or refused write, as the resource stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    client: usize,
    /// The hold's id in the run (an index into `Shared::holds`).
    hold: usize,
    token: u64,
    /// The client's write sequence number.
    seq: u64,
    /// The counter read before the write, plus one.
    counter: u64,
}

/// How a write went, as the writer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteOutcome {
    /// Accepted, and the guard was still valid right after.
    Valid,
    /// Accepted, but the guard was no longer valid right after.
    Late,
    /// Refused as stale while the guard was still valid after: a violation.
    RefusedWhileValid,
    /// Refused as stale after the guard stopped being valid: fencing at work.
    Refused,
}

#[derive(Clone, Debug)]
struct WriteRecord {
    name: usize,
    entry: Entry,
    outcome: WriteOutcome,
    at: Instant,
}

#[derive(Default)]
struct Counters {
    acquisitions: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    errors: AtomicU64,
    releases: AtomicU64,
    drops: AtomicU64,
    losses: AtomicU64,
    expired_on_arrival: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What the workers share.
struct Shared {
    names: Vec<String>,
    resources: Vec<FencedResource<Entry>>,
    history: History,
    /// Every hold by id, filled in when it ends; also recorded in `history`.
    holds: Mutex<Vec<Option<Hold>>>,
    writes: Mutex<Vec<WriteRecord>>,
    stop: AtomicBool,
    counters: Counters,
    /// The last acquisition of each client.
    progress: Vec<Mutex<Option<Instant>>>,
    /// Whether each client holds a lock right now: `NOT_HOLDING`, `SHORT_HOLD` or `LONG_HOLD`
    /// (client faults aim at holders, long ones first).
    holding: Vec<AtomicU8>,
    /// The current client of each worker, with its generation (bumped on replacement).
    slots: Vec<Mutex<(TestClient, u32)>>,
    max_hold: Duration,
    long_hold_every: u64,
    long_hold: (Duration, Duration),
    op_limit: Duration,
    primitive: Primitive,
    /// Reads made by readers while their guard was valid, and those refused as stale then
    /// (a violation: a writer wrote while the reader held).
    reads: AtomicU64,
    reads_refused_while_valid: Mutex<Vec<String>>,
}

const NOT_HOLDING: u8 = 0;
const SHORT_HOLD: u8 = 1;
const LONG_HOLD: u8 = 2;

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one chaos run on `harness` with `config`. Call it inside a Tokio runtime (the kit's
/// [`runtime`](crate::runtime)); it spawns one task per client.
///
/// Store faults ([`FaultKind::RestartStore`], [`FaultKind::PauseStore`]) act on the whole
/// store: give a harness of its own ([`Harness::isolated`]) when they are in the config.
///
/// # Panics
///
/// When a client cannot be created at the start, with the harness's error.
pub async fn run(harness: &dyn Harness, config: ChaosConfig) -> ChaosReport {
    let started = Instant::now();
    let timing = harness.timing();
    let lease = timing.lease;
    let plan = schedule(&config, lease);
    let op_limit = timing.operation + lease.unwrap_or(Duration::ZERO) * 2;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let names: Vec<String> =
        (0..config.names).map(|i| format!("lockkit-chaos/{:x}/{}/name-{i}", config.seed, &run_id[..12])).collect();

    let mut slots = Vec::new();
    for i in 0..config.clients {
        match harness.client().await {
            Ok(client) => slots.push(Mutex::new((client, 0))),
            Err(error) => {
                panic!("[{} / chaos seed {}] client {i} cannot connect: {error}", harness.name(), config.seed)
            }
        }
    }
    let shared = Arc::new(Shared {
        resources: names.iter().map(|_| FencedResource::new()).collect(),
        names,
        history: History::new(),
        holds: Mutex::new(Vec::new()),
        writes: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        counters: Counters::default(),
        progress: (0..config.clients).map(|_| Mutex::new(None)).collect(),
        holding: (0..config.clients).map(|_| AtomicU8::new(NOT_HOLDING)).collect(),
        slots,
        max_hold: config.max_hold,
        long_hold_every: config.long_hold_every,
        long_hold: match lease {
            Some(lease) => (lease / 2, lease * 2),
            None => (config.max_hold * 2, config.max_hold * 8),
        },
        op_limit,
        primitive: config.primitive,
        reads: AtomicU64::new(0),
        reads_refused_while_valid: Mutex::new(Vec::new()),
    });

    let mut workers = Vec::new();
    for i in 0..config.clients {
        let shared = Arc::clone(&shared);
        let rng = Rng::new(config.seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(i as u64 + 1));
        workers.push(tokio::spawn(worker(i, shared, rng)));
    }

    let primitive = match config.primitive {
        Primitive::Mutex => None,
        Primitive::ReadWrite => Some("read-write locks".to_owned()),
        Primitive::Semaphore(permits) => Some(format!("semaphores of {permits}")),
        Primitive::Election => Some("elections".to_owned()),
    };
    let mut report = ChaosReport {
        backend: [Some(harness.name().to_owned()), config.label.clone(), primitive]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", "),
        seed: config.seed,
        schedule: plan.clone(),
        ..ChaosReport::default()
    };

    // Apply the schedule, one fault at a time.
    let mut restarts: Vec<(Instant, Instant)> = Vec::new();
    let mut graveyard: Vec<TestClient> = Vec::new();
    let mut last_heal = Instant::now();
    for fault in &plan {
        let due = started + fault.at;
        tokio::time::sleep_until(due.into()).await;
        let applied =
            apply(harness, &shared, fault, &mut restarts, &mut graveyard, &mut report.violations, &mut report.applied)
                .await;
        let map = if applied { &mut report.faults_applied } else { &mut report.faults_skipped };
        *map.entry(fault.kind).or_default() += 1;
        if applied {
            last_heal = Instant::now();
            if report.applied.last().is_some_and(|line| line.ends_with("holding)") && !line.ends_with("not holding)")) {
                report.faults_on_holders += 1;
                if report.applied.last().is_some_and(|line| line.contains("long hold")) {
                    report.faults_on_long_holds += 1;
                }
            }
        }
    }

    // Liveness: every client acquires after the last fault healed.
    let liveness_bound =
        config.liveness_bound.unwrap_or(lease.unwrap_or(Duration::from_secs(1)) * 3 + Duration::from_secs(15));
    let until = Instant::now().max(started + config.duration);
    tokio::time::sleep_until(until.into()).await;
    let live_deadline = Instant::now() + liveness_bound;
    loop {
        let stalled: Vec<usize> =
            (0..config.clients).filter(|&i| locked(&shared.progress[i]).is_none_or(|t| t <= last_heal)).collect();
        if stalled.is_empty() {
            break;
        }
        if Instant::now() >= live_deadline {
            report.violations.push(format!(
                "liveness: client(s) {stalled:?} acquired nothing within {liveness_bound:?} after the last fault healed"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Stop the clients; each finishes its current step (every step is bounded).
    shared.stop.store(true, Ordering::SeqCst);
    let join_bound = op_limit * 2 + shared.long_hold.1 + config.max_hold + Duration::from_secs(5);
    for (i, worker) in workers.into_iter().enumerate() {
        let abort = worker.abort_handle();
        match tokio::time::timeout(join_bound, worker).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => report.violations.push(format!("client {i}: its task failed: {error}")),
            Err(_) => {
                abort.abort();
                report.violations.push(format!("client {i}: did not stop within {join_bound:?} (a step hung)"));
            }
        }
    }
    drop(graveyard);

    check_orphans(harness, &shared, lease, &mut report.violations).await;
    analyse(&shared, &config, started, &restarts, &mut report);
    let c = &shared.counters;
    report.acquisitions = c.acquisitions.load(Ordering::Relaxed);
    report.busy = c.busy.load(Ordering::Relaxed);
    report.timeouts = c.timeouts.load(Ordering::Relaxed);
    report.cancelled = c.cancelled.load(Ordering::Relaxed);
    report.errors = c.errors.load(Ordering::Relaxed);
    report.releases = c.releases.load(Ordering::Relaxed);
    report.drops = c.drops.load(Ordering::Relaxed);
    report.losses = c.losses.load(Ordering::Relaxed);
    report.expired_on_arrival = c.expired_on_arrival.load(Ordering::Relaxed);
    report.elapsed = started.elapsed();
    report
}

/// Applies one fault and heals it; `false` when the harness lacks the hook.
async fn apply(
    harness: &dyn Harness,
    shared: &Shared,
    fault: &ScheduledFault,
    restarts: &mut Vec<(Instant, Instant)>,
    graveyard: &mut Vec<TestClient>,
    violations: &mut Vec<String>,
    log: &mut Vec<String>,
) -> bool {
    // A client fault strikes the first client in a long hold, counting from the scheduled
    // one, else the first holding a lock, else the scheduled one, so that faults hit holds.
    let clients = shared.slots.len();
    let state = |i: usize| shared.holding[i].load(Ordering::SeqCst);
    let order = || (0..clients).map(|k| (fault.client + k) % clients);
    let target = order()
        .find(|&i| state(i) == LONG_HOLD)
        .or_else(|| order().find(|&i| state(i) != NOT_HOLDING))
        .unwrap_or(fault.client);
    let client_fault = !matches!(
        fault.kind,
        FaultKind::PauseStore | FaultKind::RestartStore | FaultKind::Failover | FaultKind::Reshard
    );
    if client_fault {
        let holder = match state(target) {
            LONG_HOLD => "in a long hold; holding",
            SHORT_HOLD => "holding",
            _ => "not holding",
        };
        log.push(format!("{} -> client {target} ({holder})", fault));
    } else {
        log.push(fault.to_string());
    }
    let faults = locked(&shared.slots[target]).0.faults.clone();
    match fault.kind {
        FaultKind::Cut => faults.cut_connection().await.is_ok(),
        FaultKind::Blackhole => {
            if faults.blackhole().await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if faults.heal().await.is_err() {
                violations.push(format!("fault {fault}: the harness can blackhole but not heal"));
            }
            true
        }
        FaultKind::Latency => {
            if faults.set_latency(fault.latency).await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if faults.set_latency(Duration::ZERO).await.is_err() {
                violations.push(format!("fault {fault}: the latency could not be removed"));
            }
            true
        }
        FaultKind::Kill => {
            if faults.kill().await.is_err() {
                return false;
            }
            match harness.client().await {
                Ok(fresh) => {
                    let mut slot = locked(&shared.slots[target]);
                    let generation = slot.1 + 1;
                    let dead = std::mem::replace(&mut *slot, (fresh, generation));
                    graveyard.push(dead.0);
                }
                Err(error) => violations.push(format!("fault {fault}: no replacement client: {error}")),
            }
            true
        }
        FaultKind::PauseStore => {
            if harness.pause_store(true).await.is_err() {
                return false;
            }
            tokio::time::sleep(fault.hold).await;
            if harness.pause_store(false).await.is_err() {
                violations.push(format!("fault {fault}: the store could not be resumed"));
            }
            true
        }
        FaultKind::StopServer => faults.stop_server_for(fault.hold).await.is_ok(),
        FaultKind::RestartStore => {
            let start = Instant::now();
            let outcome = harness.restart_store().await;
            restarts.push((start, Instant::now()));
            outcome.is_ok()
        }
        FaultKind::Failover | FaultKind::Reshard => {
            // The name the scheduled client's number picks: every name gets its turn.
            let name = &shared.names[fault.client % shared.names.len()];
            if let Some(line) = log.last_mut() {
                line.push_str(&format!(" of {name:?}"));
            }
            let start = Instant::now();
            let outcome = match fault.kind {
                FaultKind::Failover => harness.failover(name).await,
                _ => harness.reshard(name).await,
            };
            if fault.kind == FaultKind::Failover {
                restarts.push((start, Instant::now()));
            }
            outcome.is_ok()
        }
    }
}

/// One client's loop: pick a name, acquire one of four ways, write while valid, end the hold.
/// The handles of one name for one client: the one to acquire most of the time, and for a
/// read-write lock the writer.
struct Handles {
    main: LockHandle,
    writer: Option<LockHandle>,
}

impl Handles {
    fn new(client: &TestClient, name: &str, primitive: Primitive) -> lockkit_core::Result<Self> {
        Ok(match primitive {
            Primitive::Mutex => Self { main: client.provider.lock(name)?, writer: None },
            Primitive::ReadWrite => {
                let rw = client.provider.rw_lock(name)?;
                Self { main: rw.reader().clone(), writer: Some(rw.writer().clone()) }
            }
            Primitive::Semaphore(permits) => Self { main: client.provider.semaphore(name, permits)?, writer: None },
            Primitive::Election => {
                let identity = format!("chaos-candidate-{}", uuid::Uuid::new_v4().simple());
                Self { main: client.provider.election(name)?.candidate(identity)?, writer: None }
            }
        })
    }

    /// The handle for the next acquisition: the writer one time in four, else the main one.
    fn pick(&self, rng: &mut Rng) -> &LockHandle {
        match &self.writer {
            Some(writer) if rng.below(4) == 0 => writer,
            _ => &self.main,
        }
    }
}

async fn worker(index: usize, shared: Arc<Shared>, mut rng: Rng) {
    let mut handles: Vec<Option<Handles>> = (0..shared.names.len()).map(|_| None).collect();
    let mut generation = u32::MAX;
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let (client, current) = {
            let slot = locked(&shared.slots[index]);
            (slot.0.clone(), slot.1)
        };
        if current != generation {
            generation = current;
            handles.iter_mut().for_each(|h| *h = None);
        }
        let name = rng.below(shared.names.len() as u64) as usize;
        if handles[name].is_none() {
            match Handles::new(&client, &shared.names[name], shared.primitive) {
                Ok(handle) => handles[name] = Some(handle),
                Err(_) => {
                    bump(&shared.counters.errors);
                    backoff(&mut rng).await;
                    continue;
                }
            }
        }
        let Some(lock) = handles[name].as_ref().map(|handles| handles.pick(&mut rng).clone()) else { continue };
        let Some(guard) = acquire(&lock, &shared, &mut rng).await else { continue };
        let start = Instant::now();
        let mut seen = Seen { start, held: guard.is_held().then_some(start) };
        let id = {
            let mut holds = locked(&shared.holds);
            holds.push(None);
            holds.len() - 1
        };
        bump(&shared.counters.acquisitions);
        *locked(&shared.progress[index]) = Some(start);
        hold_and_write(index, name, id, &guard, &shared, &mut rng, &mut seq, &mut seen).await;
        shared.holding[index].store(NOT_HOLDING, Ordering::SeqCst);
        let label = format!("client {index} (gen {generation}) hold #{id}");
        end_hold(id, label, guard, &shared, &mut rng, seen).await;
    }
}

/// The moments a hold was seen valid.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// When the acquisition returned.
    start: Instant,
    /// The latest instant at which the guard said it was held (taken before asking, so the
    /// hold was valid then: `is_held` only ever goes from true to false).
    held: Option<Instant>,
}

impl Seen {
    /// Asks the guard and notes the instant when it says it is held.
    fn check(&mut self, guard: &LockGuard) -> bool {
        let now = Instant::now();
        let held = guard.is_held();
        if held {
            self.held = Some(now);
        }
        held
    }
}

async fn backoff(rng: &mut Rng) {
    tokio::time::sleep(rng.between(Duration::from_millis(20), Duration::from_millis(100))).await;
}

/// One acquisition, drawn among `try_acquire`, `acquire_timeout`, a cancelled `acquire` and a
/// plain `acquire` (bounded, so a dead client cannot hang the run).
async fn acquire(lock: &LockHandle, shared: &Shared, rng: &mut Rng) -> Option<LockGuard> {
    let c = &shared.counters;
    let outcome = match rng.below(10) {
        0 | 1 => match tokio::time::timeout(shared.op_limit, lock.try_acquire()).await {
            Ok(Ok(None)) => {
                bump(&c.busy);
                backoff(rng).await;
                return None;
            }
            Ok(Ok(Some(guard))) => Ok(guard),
            Ok(Err(error)) => Err(error),
            Err(_) => {
                bump(&c.cancelled);
                return None;
            }
        },
        2 | 3 => {
            let wait = rng.between(Duration::from_millis(20), Duration::from_millis(600));
            match tokio::time::timeout(wait + shared.op_limit, lock.acquire_timeout(wait)).await {
                Ok(result) => result,
                Err(_) => {
                    bump(&c.cancelled);
                    return None;
                }
            }
        }
        4 => {
            // Cancel the acquisition mid-wait by dropping its future.
            let wait = rng.between(Duration::from_millis(1), Duration::from_millis(250));
            match tokio::time::timeout(wait, lock.acquire()).await {
                Ok(result) => result,
                Err(_) => {
                    bump(&c.cancelled);
                    return None;
                }
            }
        }
        _ => match tokio::time::timeout(shared.op_limit, lock.acquire()).await {
            Ok(result) => result,
            Err(_) => {
                bump(&c.cancelled);
                return None;
            }
        },
    };
    match outcome {
        Ok(guard) => Some(guard),
        Err(Error::Timeout { .. }) => {
            bump(&c.timeouts);
            None
        }
        Err(_) => {
            bump(&c.errors);
            backoff(rng).await;
            None
        }
    }
}

/// Holds for a random short time, making one to three read-modify-write steps on the name's
/// resource while the guard is valid.
#[allow(clippy::too_many_arguments)]
async fn hold_and_write(
    client: usize,
    name: usize,
    hold: usize,
    guard: &LockGuard,
    shared: &Shared,
    rng: &mut Rng,
    seq: &mut u64,
    seen: &mut Seen,
) {
    let resource = &shared.resources[name];
    let long = shared.long_hold_every > 0 && rng.below(shared.long_hold_every) == 0;
    let (steps, total) = if long {
        (3 + rng.below(6), rng.between(shared.long_hold.0, shared.long_hold.1))
    } else {
        (1 + rng.below(3), rng.between(Duration::ZERO, shared.max_hold))
    };
    shared.holding[client].store(if long { LONG_HOLD } else { SHORT_HOLD }, Ordering::SeqCst);
    for step in 0..steps {
        if step > 0 {
            let gap = total / steps as u32;
            tokio::select! {
                () = tokio::time::sleep(gap) => {}
                _ = guard.lost() => return,
            }
        }
        if !seen.check(guard) {
            return;
        }
        match guard.kind() {
            HoldKind::Read => {
                let read = resource.read(guard.token());
                if seen.check(guard) {
                    bump(&shared.reads);
                    if let Err(stale) = read {
                        locked(&shared.reads_refused_while_valid)
                            .push(format!("client {client} hold #{hold} on name {name}: {stale}"));
                        return;
                    }
                }
                continue;
            }
            HoldKind::Permit { .. } => continue,
            _ => {}
        }
        *seq += 1;
        let counter = resource.accepted().last().map_or(0, |(_, e)| e.counter) + 1;
        let entry = Entry { client, hold, token: guard.token().get(), seq: *seq, counter };
        let result = resource.write(guard.token(), entry.clone());
        let valid = seen.check(guard);
        let outcome = match (result.is_ok(), valid) {
            (true, true) => WriteOutcome::Valid,
            (true, false) => WriteOutcome::Late,
            (false, true) => WriteOutcome::RefusedWhileValid,
            (false, false) => WriteOutcome::Refused,
        };
        locked(&shared.writes).push(WriteRecord { name, entry, outcome, at: Instant::now() });
        if result.is_err() {
            return;
        }
    }
    let rest = rng.between(Duration::ZERO, shared.max_hold / 4);
    tokio::select! {
        () = tokio::time::sleep(rest) => {}
        _ = guard.lost() => {}
    }
}

/// Ends a hold: records it, then releases or drops the guard.
///
/// The recorded end is now when the guard is still held, else the last instant it was seen
/// held: the recorded hold is then a subset of the real one (a loss is signalled at some
/// instant between the two, which the client cannot observe), so an overlap the checker
/// reports is real.
async fn end_hold(id: usize, client: String, guard: LockGuard, shared: &Shared, rng: &mut Rng, mut seen: Seen) {
    let c = &shared.counters;
    let lost = !seen.check(&guard);
    if lost {
        bump(&c.losses);
    }
    let hold = Hold {
        client,
        lock: guard.name().as_str().to_owned(),
        token: guard.token().get(),
        kind: guard.kind().clone(),
        start: seen.start,
        end: Some(seen.held.unwrap_or(seen.start)),
        valid_until: guard.valid_until(),
    };
    // A guard that was not held at its first look (its deadline passed before the acquisition
    // returned, as after a stall of the client) had an empty validity: it was never a hold,
    // and its holder did nothing under it. The history gets the holds that were valid.
    if seen.held.is_some() {
        shared.history.record(hold.clone());
    } else {
        bump(&c.expired_on_arrival);
    }
    if let Some(slot) = locked(&shared.holds).get_mut(id) {
        *slot = Some(hold);
    }
    if rng.below(4) == 0 {
        bump(&c.drops);
        drop(guard);
        return;
    }
    bump(&c.releases);
    match tokio::time::timeout(shared.op_limit, guard.release()).await {
        Ok(Ok(()) | Err(Error::LockLost { .. })) => {}
        Ok(Err(_)) | Err(_) => bump(&c.errors),
    }
}

/// Every name is idle once the clients stopped (after the lease, for holds of killed clients).
async fn check_orphans(harness: &dyn Harness, shared: &Shared, lease: Option<Duration>, violations: &mut Vec<String>) {
    let client = match harness.client().await {
        Ok(client) => client,
        Err(error) => {
            violations.push(format!("orphans: no client to inspect with: {error}"));
            return;
        }
    };
    if !client.provider.capabilities().inspect {
        return;
    }
    let bound = lease.unwrap_or(Duration::ZERO) * 2 + Duration::from_secs(10);
    for name in &shared.names {
        let deadline = Instant::now() + bound;
        loop {
            let info = tokio::time::timeout(shared.op_limit, client.provider.inspect(name)).await;
            let last = match info {
                Ok(Ok(info)) if info.is_idle() => break,
                Ok(Ok(info)) => format!("{info:?}"),
                Ok(Err(error)) => format!("inspect failed: {error}"),
                Err(_) => "inspect hung".to_owned(),
            };
            if Instant::now() >= deadline {
                violations
                    .push(format!("orphans: lock {name:?} is not idle {bound:?} after the clients stopped: {last}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether `hold` spans a restart of a store that loses data.
fn spans_restart(hold: &Hold, restarts: &[(Instant, Instant)]) -> bool {
    restarts.iter().any(|&(start, end)| hold.start < end && hold.valid_end().is_none_or(|e| e > start))
}

/// A hold, with its instants as milliseconds since the run's start.
fn describe(hold: &Hold, origin: Instant) -> String {
    let ms = |at: Option<Instant>| match at {
        Some(at) => format!("+{:.1} ms", at.saturating_duration_since(origin).as_secs_f64() * 1000.0),
        None => "never".to_owned(),
    };
    format!(
        "{} token {} held from {} to {} (local deadline {})",
        hold.client,
        hold.token,
        ms(Some(hold.start)),
        ms(hold.end),
        ms(hold.valid_until)
    )
}

/// The end-of-run checks on the history and the resources.
fn analyse(
    shared: &Shared,
    config: &ChaosConfig,
    origin: Instant,
    restarts: &[(Instant, Instant)],
    report: &mut ChaosReport,
) {
    let excusable = |hold: &Hold| config.restart_loses_data && spans_restart(hold, restarts);
    let holds: Vec<Hold> = locked(&shared.holds)
        .iter()
        .map(|hold| {
            hold.clone().unwrap_or_else(|| Hold {
                client: "a hold that never ended".to_owned(),
                lock: String::new(),
                token: 0,
                kind: lockkit_core::HoldKind::Exclusive,
                start: Instant::now(),
                end: None,
                valid_until: None,
            })
        })
        .collect();

    // Readers: a read made while the guard was valid must never be refused as stale.
    report.reads = shared.reads.load(Ordering::Relaxed);
    for refused in locked(&shared.reads_refused_while_valid).iter() {
        report.violations.push(format!("a read was refused as stale while its guard was valid: {refused}"));
    }

    // Mutual exclusion (by kind) and token order.
    if let Err(found) = shared.history.check() {
        for violation in found {
            match &violation {
                Violation::Overlap { first, .. } if excusable(first) => {
                    report.overlaps_by_design += 1;
                    report.by_design.push(format!("a store restart or failover lost the record: {violation}"));
                }
                Violation::Overlap { first, second } => {
                    report.overlaps += 1;
                    report.violations.push(format!(
                        "{violation}\n      first:  {}\n      second: {}",
                        describe(first, origin),
                        describe(second, origin)
                    ));
                }
                Violation::TokenRegression { .. } => {
                    report.token_regressions += 1;
                    report.violations.push(format!("{violation}"));
                }
            }
        }
    }

    // Writes, as the writers saw them.
    let writes = locked(&shared.writes).clone();
    let mut outcome_of: HashMap<(usize, u64), WriteOutcome> = HashMap::new();
    for write in &writes {
        outcome_of.insert((write.entry.client, write.entry.seq), write.outcome);
        match write.outcome {
            WriteOutcome::Valid => {
                report.valid_writes += 1;
            }
            WriteOutcome::Late => report.late_writes += 1,
            WriteOutcome::Refused => report.stale_rejected += 1,
            WriteOutcome::RefusedWhileValid => {
                report.stale_rejected += 1;
                let hold = &holds[write.entry.hold];
                let text = format!(
                    "lock {:?}: a write of {} was refused as stale while its guard was valid (a newer holder wrote during its hold), at +{:.1} ms",
                    shared.names[write.name],
                    describe(hold, origin),
                    write.at.saturating_duration_since(origin).as_secs_f64() * 1000.0
                );
                if excusable(hold) {
                    report.by_design.push(text);
                } else {
                    report.violations.push(text);
                }
            }
        }
    }

    // The resources: tokens in order, one hold per token, counters consecutive, nothing lost.
    for (name, resource) in shared.resources.iter().enumerate() {
        let accepted = resource.accepted();
        let mut token_hold: HashMap<u64, usize> = HashMap::new();
        let mut previous: Option<&Entry> = None;
        for (token, entry) in accepted.iter().map(|(t, e)| (t.get(), e)) {
            if let Some(&other) = token_hold.get(&token)
                && other != entry.hold
            {
                report.violations.push(format!(
                    "lock {:?}: token {token} was used by two holds: {} and {}",
                    shared.names[name],
                    describe(&holds[other], origin),
                    describe(&holds[entry.hold], origin)
                ));
            }
            token_hold.insert(token, entry.hold);
            if let Some(prev) = previous {
                if token < prev.token {
                    report.violations.push(format!(
                        "lock {:?}: the resource accepted token {token} after {}",
                        shared.names[name], prev.token
                    ));
                }
                if entry.counter != prev.counter + 1 {
                    // `entry` was computed from a state older than `prev`: `prev` is lost.
                    let lost_hold = &holds[prev.hold];
                    let by = &holds[entry.hold];
                    let text = format!(
                        "lock {:?}: the write of {} (counter {}) was overwritten by {} (counter {}), which had not seen it",
                        shared.names[name],
                        describe(lost_hold, origin),
                        prev.counter,
                        describe(by, origin),
                        entry.counter
                    );
                    match outcome_of.get(&(prev.client, prev.seq)) {
                        Some(WriteOutcome::Valid) if excusable(lost_hold) || excusable(by) => {
                            report.lost_by_design += 1;
                            report.by_design.push(text);
                        }
                        Some(WriteOutcome::Valid) => {
                            report.lost_writes += 1;
                            report.violations.push(format!("lost write: {text}"));
                        }
                        _ => report.late_writes_overwritten += 1,
                    }
                }
            }
            previous = Some(entry);
        }
        let present: HashSet<(usize, u64)> = accepted.iter().map(|(_, e)| (e.client, e.seq)).collect();
        for write in writes.iter().filter(|w| w.name == name && w.outcome == WriteOutcome::Valid) {
            if !present.contains(&(write.entry.client, write.entry.seq)) {
                report.lost_writes += 1;
                report.violations.push(format!(
                    "lost write: lock {:?}: the accepted write {:?} is missing from the resource",
                    shared.names[name], write.entry
                ));
            }
        }
    }
}
