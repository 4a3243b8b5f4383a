//! The chaos run: a randomized fault suite any backend can be put through.
//!
//! [`run`] starts K clients (default 8) that contend for a small set of lock names (default 3)
//! and, while they hold a lock, do a read-modify-write on a [`FencedResource`](crate::FencedResource) for that name:
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
//! - **no overlap**: [`History::check`](crate::History::check) finds no two holds of one name whose validity
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

mod analysis;
mod config;
mod report;
mod schedule;
mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use config::{ChaosConfig, FaultKind, Primitive, ScheduledFault};
pub use report::ChaosReport;
pub use schedule::schedule;

use crate::harness::{Harness, TestClient};
use crate::rng::Rng;
use crate::sync::locked;
use worker::Shared;

/// Every kind of fault but stopping one member of a replicated store: the faults of a store
/// with one server (or one member), [`FaultKind::SINGLE_SERVER`].
pub const SINGLE_SERVER_FAULTS: &[FaultKind] = FaultKind::SINGLE_SERVER;

/// One chaos run at a time in a test binary: the turn [`chaos_test!`](crate::chaos_test)
/// takes before its run, so that runs of one binary do not share the machine.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The body of a chaos `#[test]` ([`chaos_test!`](crate::chaos_test),
/// [`observer_chaos_test!`](crate::observer_chaos_test)): on the shared runtime, one run of the
/// binary at a time ([`one_at_a_time`]), `run` on the harness that `harness` makes.
pub fn run_test<H>(harness: impl Future<Output = H>, run: impl AsyncFnOnce(&H)) {
    crate::runtime().block_on(async {
        let _turn = one_at_a_time().await;
        let harness = harness.await;
        run(&harness).await;
    });
}

/// A chaos run as a `#[test]`: on the shared runtime, one run of the binary at a time
/// ([`one_at_a_time`]), `harness` made (an expression that may `.await`), then
/// [`check`] with `config` and the default `seeds`.
///
/// ```ignore
/// lockkit_testkit::chaos_test!(
///     chaos_read_write_locks,
///     harness: MyHarness::dedicated().await,
///     config: ChaosConfig::new(0).with_primitive(Primitive::ReadWrite),
///     seeds: [23],
/// );
/// ```
///
/// A table of runs on harnesses made alike, one `#[test]` a line: `name([seeds]) => config;`
/// after the harness.
///
/// ```ignore
/// lockkit_testkit::chaos_test! {
///     harness: MyHarness::dedicated().await;
///     chaos_mutex([21]) => ChaosConfig::single_server();
///     chaos_elections([25]) => ChaosConfig::single_server().with_primitive(Primitive::Election);
/// }
/// ```
#[macro_export]
macro_rules! chaos_test {
    (harness: $harness:expr; $($(#[$meta:meta])* $name:ident($seeds:expr) => $config:expr;)+) => {
        $($crate::chaos_test!($(#[$meta])* $name, harness: $harness, config: $config, seeds: $seeds);)+
    };
    ($(#[$meta:meta])* $name:ident, harness: $harness:expr, config: $config:expr, seeds: $seeds:expr $(,)?) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            $crate::chaos::run_test(async { $harness }, async |harness| {
                $crate::chaos::check(harness, $config, &$seeds).await;
            });
        }
    };
}

/// Replays one seed: `LOCKKIT_CHAOS_SEED=<n>` (decimal or `0x` hex).
pub const SEED_ENV: &str = "LOCKKIT_CHAOS_SEED";
/// Runs this many seeds: the defaults first, then seeds drawn from the clock (printed).
pub const SEEDS_ENV: &str = "LOCKKIT_CHAOS_SEEDS";
/// How many seconds faults are injected per seed.
pub const SECS_ENV: &str = "LOCKKIT_CHAOS_SECS";

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

    let mut clients = Vec::new();
    for i in 0..config.clients {
        match harness.client().await {
            Ok(client) => clients.push(client),
            Err(error) => {
                panic!("[{} / chaos seed {}] client {i} cannot connect: {error}", harness.name(), config.seed)
            }
        }
    }
    let shared = Arc::new(Shared::new(names, clients, &config, lease, op_limit));

    let mut workers = Vec::new();
    for i in 0..config.clients {
        let shared = Arc::clone(&shared);
        let rng = Rng::new(config.seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(i as u64 + 1));
        workers.push(tokio::spawn(worker::worker(i, shared, rng)));
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
        let applied = schedule::apply(
            harness,
            &shared,
            fault,
            &mut restarts,
            &mut graveyard,
            &mut report.violations,
            &mut report.applied,
        )
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

    analysis::check_orphans(harness, &shared, lease, &mut report.violations).await;
    analysis::analyse(&shared, &config, started, &restarts, &mut report);
    shared.counters.fill(&mut report);
    report.elapsed = started.elapsed();
    report
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
