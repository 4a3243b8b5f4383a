//! The multi-process chaos run through the `lockkit` command (lockkit-testkit's
//! `process_chaos::run_cli`): K `lockkit run` processes whose command (this test binary re-run
//! as a writer) makes fenced writes with `$LOCKKIT_FENCING_TOKEN` on a resource in the test
//! process, while `lockkit` itself and its command are paused with SIGSTOP and killed with
//! SIGKILL, and the store (Redis with AOF, ZooKeeper) is paused and restarted. A command that
//! outlives its killed `lockkit` is an orphan. Each test takes about
//! 15 s. `LOCKKIT_PROCESS_CHAOS_SEED` replays a seed, `LOCKKIT_PROCESS_CHAOS_SECS` runs longer
//! (see docs/RELIABILITY.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

mod chaos_stores;

use chaos_stores::{connect, redis_with, with_lease, zk_url, zookeeper};
use lockkit_testkit::fixture::Persistence;
use lockkit_testkit::process_chaos::{self, ProcessChaosConfig, ProcessChaosReport, ProcessFault, StoreControl};

/// The test every command runs: it does nothing unless a `lockkit run` of the run started
/// this process as its command.
const WRITER: &str = "cli_chaos_writer";

#[test]
fn cli_chaos_writer() {
    process_chaos::cli_writer_if_requested();
}

/// The process faults of the CLI run: pauses and kills of `lockkit` and of its command
/// (`with_store` adds the store's pauses and restarts).
const FAULTS: [ProcessFault; 4] =
    [ProcessFault::Pause, ProcessFault::Kill, ProcessFault::PauseCommand, ProcessFault::KillCommand];

/// The run's settings: `seed` unless the environment replays another, every process fault.
fn chaos_config(seed: u64, url: String) -> ProcessChaosConfig {
    ProcessChaosConfig::from_env(seed, url, WRITER).with_faults(FAULTS)
}

async fn run(config: ProcessChaosConfig) -> ProcessChaosReport {
    let report = process_chaos::run_cli(config, env!("CARGO_BIN_EXE_lockkit"), connect).await;
    println!("{report}");
    report.assert_ok();
    assert!(report.faults.values().sum::<u64>() > 0, "faults were applied:\n{report}");
    // Which kills land depends on the interleaving as well as on the seed (a drawn target may
    // have exited): `a_killed_lockkit_takes_its_command_with_it_*` in cli.rs proves the
    // guarantee on every backend deterministically; here some kill must have landed.
    let kills = report.faults_of(&[ProcessFault::Kill, ProcessFault::KillCommand]);
    assert!(kills > 0, "no kill was applied:\n{report}");
    report
}

/// Runs `config` on a store of the test's own that the run pauses and restarts (`store`,
/// whose lease or session is `lease`), as [`run`] does, and checks that the store was faulted.
async fn run_faulting(config: ProcessChaosConfig, lease: Duration, store: Arc<dyn StoreControl>) -> ProcessChaosReport {
    let report = run(config.with_lease(lease).with_store(store)).await;
    report.assert_store_faulted();
    report
}

/// The lease of the Redis run: short, so that pauses of `lockkit` of up to two leases outlive it.
const LEASE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_chaos_on_redis_with_aof() {
    let server = redis_with(Persistence::Aof).await;
    let url = with_lease(&server.url(), LEASE);
    // The run pauses and restarts the server (its own) beside the process faults.
    let config = chaos_config(0x195, url).with_label("lockkit run, redis, AOF, lease 1s");
    let report = run_faulting(config, LEASE, process_chaos::control(server)).await;
    // Every run pauses a holding lockkit past its lease (the schedule's closing draw makes sure).
    assert!(report.pauses_outliving_lease > 0, "no pause of lockkit outlived the lease:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_chaos_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    run(chaos_config(0x18e, url).with_label("lockkit run, files")).await;
}

/// ZooKeeper's session timeout: a `lockkit` paused longer loses its session and its lock node.
const SESSION: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_chaos_on_zookeeper() {
    // A server of the test's own: the run pauses and restarts it.
    let server = zookeeper().await;
    let url = zk_url(&server.connect_string(), SESSION);
    let config = chaos_config(0x1a5, url).with_label("lockkit run, zookeeper, session 2s");
    run_faulting(config, SESSION, process_chaos::control(server)).await;
}

/// The planted bug: the command runs in the background of a shell, which the parent-death
/// signal kills alone. Killing `lockkit` must then leave orphans, and the run must say so.
/// The seed is fixed (not taken from the environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_chaos_run_catches_an_orphaned_command() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let config = ProcessChaosConfig::new(0x1d6, url, WRITER)
        .with_faults([ProcessFault::Kill])
        // Files have no lease; this one only makes the writers write for up to 10 s, so that
        // an orphan is still running when it is looked for.
        .with_lease(Duration::from_secs(5))
        // Many names for four slots: the name of a killed holder is seldom taken at once, so
        // that its orphan is not stopped early by a write refused by fencing.
        .with_names(8)
        .with_duration(Duration::from_secs(4))
        .with_planted_bug(true)
        .with_label("lockkit run, files");
    let report = process_chaos::run_cli(config, env!("CARGO_BIN_EXE_lockkit"), connect).await;
    println!("{report}");
    assert!(!report.orphans.is_empty(), "the orphaned commands went unnoticed:\n{report}");
    assert!(!report.is_ok(), "{report}");
}
