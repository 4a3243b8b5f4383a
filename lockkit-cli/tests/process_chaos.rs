//! The multi-process chaos run (lockkit-testkit's `process_chaos`) on real stores: workers
//! are this test binary re-run as OS processes, paused with SIGSTOP and killed with SIGKILL,
//! while the store (a server of the test's own, handed to the run as its control) is paused
//! and restarted. Each test takes 10 to 15 s. `LOCKKIT_PROCESS_CHAOS_SEED` replays a seed,
//! `LOCKKIT_PROCESS_CHAOS_SECS` runs longer (see docs/RELIABILITY.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

mod chaos_stores;

use chaos_stores::{connect, redis_with, with_lease, zk_url, zookeeper};
use lockkit_testkit::fixture::{Persistence, RedisServer, ZkEnsemble};
use lockkit_testkit::process_chaos::{self, ProcessChaosConfig, ProcessChaosReport, ProcessFault, StoreControl};

/// The test every worker process runs: it does nothing unless the run started this process
/// as a worker.
const WORKER: &str = "process_chaos_worker";

#[test]
fn process_chaos_worker() {
    process_chaos::worker_if_requested(connect);
}

/// The lease of the Redis runs: short, so that pauses of up to two leases outlive it.
const LEASE: Duration = Duration::from_secs(1);

async fn redis_with_aof() -> RedisServer {
    redis_with(Persistence::Aof).await
}

/// Runs `config`, prints the report and checks it: it passed, and faults were applied.
async fn run(config: ProcessChaosConfig) -> ProcessChaosReport {
    let report = process_chaos::run(config, connect).await;
    println!("{report}");
    report.assert_ok();
    assert!(report.faults.values().sum::<u64>() > 0, "faults were applied:\n{report}");
    report
}

/// Runs `config` on a store of the test's own that the run pauses and restarts (`store`,
/// whose lease or session is `lease`), as [`run`] does, and checks that the store was faulted.
async fn run_faulting(config: ProcessChaosConfig, lease: Duration, store: Arc<dyn StoreControl>) -> ProcessChaosReport {
    let report = run(config.with_lease(lease).with_store(store)).await;
    report.assert_store_faulted();
    report
}

fn redis_url(server: &RedisServer) -> String {
    with_lease(&server.url(), LEASE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_chaos_on_redis_with_aof() {
    let server = redis_with_aof().await;
    let config = ProcessChaosConfig::from_env(0x1c, redis_url(&server), WORKER).with_label("redis, AOF, lease 1s");
    run_faulting(config, LEASE, process_chaos::control(server)).await;
}

/// Redis without persistence: a restart empties the store while holders still believe they
/// hold, so overlaps and lost writes involving a hold that spans a restart are possible by
/// design (counted apart); every other overlap and lost write must still be 0, and with no
/// restart drawn nothing is excused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_chaos_on_redis_without_persistence() {
    let server = redis_with(Persistence::None).await;
    let config = ProcessChaosConfig::from_env(0x19, redis_url(&server), WORKER)
        .with_restart_loses_data(true)
        .with_label("redis, no persistence, lease 1s");
    let report = run_faulting(config, LEASE, process_chaos::control(server)).await;
    if report.store_restarts() == 0 {
        assert!(report.by_design.is_empty() && report.lost_by_design == 0, "{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_chaos_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    run(ProcessChaosConfig::from_env(0x18f, url, WORKER).with_label("files")).await;
}

/// ZooKeeper's session timeout in the ZooKeeper run: a worker paused longer loses its session
/// (and its lock node) to the server.
const SESSION: Duration = Duration::from_secs(2);

/// Runs the ZooKeeper run of `seed` on servers of the test's own (`store`, reached at the
/// connect string `connect`), which the run pauses and restarts, as [`run_faulting`] does.
async fn run_on_zookeeper(seed: u64, label: &str, connect: &str, store: Arc<dyn StoreControl>) {
    let config = ProcessChaosConfig::from_env(seed, zk_url(connect, SESSION), WORKER).with_label(label);
    run_faulting(config, SESSION, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_chaos_on_zookeeper() {
    // A server of the test's own: the run pauses and restarts it.
    let server = zookeeper().await;
    run_on_zookeeper(0x198, "zookeeper, session 2s", &server.connect_string(), process_chaos::control(server)).await;
}

/// A three-member ensemble of the test's own; the store faults pause a member, or stop one
/// and start it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_chaos_on_a_zookeeper_ensemble() {
    let ensemble = ZkEnsemble::start().await.unwrap_or_else(|error| panic!("{error}"));
    let label = "zookeeper ensemble of 3, session 2s";
    run_on_zookeeper(0x18e, label, &ensemble.connect_string(), process_chaos::control(ensemble)).await;
}

/// The planted bug: workers skip the loss deadline, so a worker paused past its lease goes on
/// as if it held the lock. The checker must report overlaps. Every pause outlives the lease,
/// and the seed is fixed (not taken from the environment), so that the bug has its chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_chaos_checker_catches_a_planted_bug() {
    let server = redis_with_aof().await;
    let config = ProcessChaosConfig::new(0x18b, redis_url(&server), WORKER)
        .with_lease(LEASE)
        .with_faults([ProcessFault::Pause])
        .with_pause(LEASE + LEASE / 5, LEASE * 2)
        .with_planted_bug(true)
        .with_label("redis, AOF, lease 1s");
    let report = process_chaos::run(config, connect).await;
    println!("{report}");
    assert!(report.pauses_outliving_lease > 0, "no pause outlived the lease:\n{report}");
    assert!(report.overlaps() > 0, "the planted bug went unnoticed:\n{report}");
    assert!(!report.is_ok(), "{report}");
}
