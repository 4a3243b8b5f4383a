//! The multi-process chaos run through the real fences (lockkit-testkit's
//! `process_chaos::run_fenced`): workers, this test binary re-run as OS processes, read and
//! write one counter per lock name in PostgreSQL, Redis or files themselves, through
//! lockkit-fence, while they are paused with SIGSTOP (half the time while holding, up to two
//! leases) and killed with SIGKILL, and the store is paused and restarted. The report must
//! show 0 stale writes accepted and 0 lost writes, every refused write counted; the same
//! schedule with the fence bypassed (a plain write) must show stale writes landing. Each test
//! takes 20 to 25 s. `LOCKKIT_PROCESS_CHAOS_SEED` replays a seed, `LOCKKIT_PROCESS_CHAOS_SECS`
//! runs longer (see docs/RELIABILITY.md).
//!
//! Locks and data: PostgreSQL locks (lease 1 s) guard counters in the same PostgreSQL; Redis
//! locks (lease 1 s, AOF) guard counters in the same Redis; files have no lease (a paused
//! `flock` holder keeps its lock, so no holder ever goes stale), so the fenced files are
//! guarded by Redis locks with a lease, whose server the run pauses and restarts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chaos_stores;
mod fenced_sinks;

use std::time::Duration;

use chaos_stores::{connect, postgres, redis_with, with_lease};
use lockkit_testkit::fixture::{Persistence, PostgresServer, RedisServer};
use lockkit_testkit::process_chaos::{self, ProcessChaosConfig, ProcessChaosReport, ProcessFault};

/// The test every worker process runs: nothing unless the run started this process as one.
const WORKER: &str = "fenced_chaos_worker";

/// The lease of every run: short, so that pauses of up to two leases outlive it.
const LEASE: Duration = Duration::from_secs(1);

#[test]
fn fenced_chaos_worker() {
    process_chaos::worker_if_requested_fenced(connect, fenced_sinks::open);
}

async fn redis_with_aof() -> RedisServer {
    redis_with(Persistence::Aof).await
}

/// Runs `config` through the fence, prints the report and returns it.
async fn run(config: ProcessChaosConfig) -> ProcessChaosReport {
    let report = process_chaos::run_fenced(config, connect, fenced_sinks::open).await;
    println!("{report}");
    report
}

/// What every fenced run must show: it passed (0 overlaps, 0 lost writes, 0 stale writes
/// accepted), faults landed on the workers and the store, a holder was paused past its lease,
/// and the store refused stale writes.
fn assert_fenced(report: &ProcessChaosReport) {
    report.assert_ok();
    assert_eq!((report.stale_writes_accepted, report.lost_writes), (0, 0), "{report}");
    report.assert_store_faulted();
    assert!(report.faults_of(&[ProcessFault::Kill]) > 0, "no kill:\n{report}");
    assert!(report.pauses_outliving_lease > 0, "no pause outlived the lease:\n{report}");
    assert!(report.writes_refused + report.reads_refused > 0, "the fence refused nothing:\n{report}");
}

/// The schedule of every fenced run: pauses of half a lease to two leases every 100-300 ms,
/// for 20 s unless the environment says otherwise, so that some ten holders wake up past
/// their lease and some of them after a newer holder wrote.
fn long_pauses(mut config: ProcessChaosConfig) -> ProcessChaosConfig {
    config = config.with_lease(LEASE).with_pause(LEASE / 2, LEASE * 2);
    config.fault_gap = (Duration::from_millis(100), Duration::from_millis(300));
    if std::env::var(process_chaos::SECS_ENV).is_err() {
        config.duration = Duration::from_secs(20);
    }
    config
}

/// The PostgreSQL run's config: locks and counters in `server`, which the run pauses and
/// restarts.
fn postgres_config(seed: u64, server: PostgresServer, bypassed: bool) -> ProcessChaosConfig {
    let url = server.url();
    let config = ProcessChaosConfig::from_env(seed, with_lease(&url, LEASE), WORKER)
        .with_sink(url)
        .with_fence_bypassed(bypassed)
        .with_store(process_chaos::control(server))
        .with_label("postgres locks (lease 1s) guarding postgres counters");
    long_pauses(config)
}

/// The seed of the PostgreSQL runs, fenced and bypassed.
const POSTGRES_SEED: u64 = 0x32f;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_chaos_on_postgres() {
    let report = run(postgres_config(POSTGRES_SEED, postgres().await, false)).await;
    assert_fenced(&report);
}

/// The same run through a fenced table: each write is one upsert of the row with its lock and
/// token, which the table's trigger checks (`PgFencedRows`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_chaos_on_a_postgres_fenced_table() {
    let server = postgres().await;
    let rows = format!("{}{}", fenced_sinks::ROWS_PREFIX, server.url());
    let mut config = postgres_config(0x330, server, false).with_sink(rows);
    config = config.with_label("postgres locks (lease 1s) guarding a postgres fenced table");
    assert_fenced(&run(config).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_chaos_on_redis() {
    let server = redis_with_aof().await;
    let locks = with_lease(&server.url(), LEASE);
    let config = ProcessChaosConfig::from_env(0x32e, locks, WORKER)
        .with_sink(server.url())
        .with_store(process_chaos::control(server))
        .with_label("redis locks (lease 1s, AOF) guarding redis counters");
    assert_fenced(&run(long_pauses(config)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_chaos_on_files() {
    let server = redis_with_aof().await;
    let dir = tempfile::tempdir().unwrap();
    let locks = with_lease(&server.url(), LEASE);
    let config = ProcessChaosConfig::from_env(0x32d, locks, WORKER)
        .with_sink(format!("file://{}", dir.path().display()))
        .with_store(process_chaos::control(server))
        .with_label("redis locks (lease 1s, AOF) guarding fenced files");
    assert_fenced(&run(long_pauses(config)).await);
}

/// The planted bug: the PostgreSQL run's seed and schedule with the fence bypassed (a plain
/// upsert). A worker paused past its lease then writes over a newer holder's write: the run
/// must see stale writes accepted and fail. The seed is fixed (not taken from the environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_chaos_run_catches_a_bypassed_fence() {
    let mut config = postgres_config(POSTGRES_SEED, postgres().await, true);
    config.seed = POSTGRES_SEED;
    let report = run(config).await;
    assert!(report.pauses_outliving_lease > 0, "no pause outlived the lease:\n{report}");
    assert!(report.stale_writes_accepted > 0, "the stale writes went unnoticed:\n{report}");
    assert_eq!(report.writes_refused, 0, "a bypassed fence refuses nothing:\n{report}");
    assert!(!report.is_ok(), "{report}");
}
