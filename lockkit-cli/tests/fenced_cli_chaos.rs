//! The multi-process chaos run through the `lockkit` command, writing to PostgreSQL through
//! the SQL function (lockkit-testkit's `process_chaos::run_cli_fenced`): K `lockkit run`
//! processes whose command (this test binary re-run as a writer) reads
//! `$LOCKKIT_LOCK_ID` and `$LOCKKIT_FENCING_TOKEN` and sends what a `psql` script would, one
//! simple query per transaction:
//!
//! ```sql
//! BEGIN;
//! SELECT lockkit_fence.fence('NAME', :'lock_id', :token, 'write');
//! INSERT INTO cli_counters … ON CONFLICT (resource) DO UPDATE …;
//! COMMIT;
//! ```
//!
//! (tokio-postgres's simple query protocol, as `psql` uses it, rather than `psql` itself: the
//! writer must also speak the run's protocol on its standard streams). `lockkit` and its
//! command are paused and killed, PostgreSQL (which holds the locks, lease 1 s, and the
//! counters) is paused. The report must show 0 stale writes accepted and 0 lost
//! writes; the same schedule without the `SELECT lockkit_fence.fence(…)` must show stale
//! writes landing. Each run takes about 40 s; a test runs up to three seeds until its run shows
//! what it checks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chaos_stores;
mod fenced_sinks;

use std::time::Duration;

use chaos_stores::{connect, postgres, with_lease};
use lockkit_testkit::process_chaos::{self, ProcessChaosConfig, ProcessChaosReport, ProcessFault};

/// The test every command runs: nothing unless a `lockkit run` of the run started it.
const WRITER: &str = "fenced_cli_writer";

/// The lease: short, so that pauses of `lockkit` of up to two leases outlive it.
const LEASE: Duration = Duration::from_secs(1);

/// The faults drawn: a kind listed three times is drawn three times as often.
const FAULTS: [ProcessFault; 7] = [
    ProcessFault::Pause,
    ProcessFault::Pause,
    ProcessFault::Pause,
    ProcessFault::Kill,
    ProcessFault::PauseCommand,
    ProcessFault::KillCommand,
    ProcessFault::PauseStore,
];

/// The seed of both runs.
const SEED: u64 = 0x32c;

#[test]
fn fenced_cli_writer() {
    process_chaos::cli_writer_if_requested_fenced(fenced_sinks::open);
}

/// Pauses and kills of `lockkit` and of its command, PostgreSQL paused, 40 s of faults unless
/// the environment says otherwise.
async fn config(bypassed: bool) -> ProcessChaosConfig {
    let server = postgres().await;
    let url = server.url();
    let mut config = ProcessChaosConfig::from_env(SEED, with_lease(&url, LEASE), WRITER)
        .with_lease(LEASE)
        .with_pause(LEASE / 2, LEASE * 2)
        .with_sink(format!("{}{url}", fenced_sinks::SQL_PREFIX))
        .with_fence_bypassed(bypassed)
        .with_store(process_chaos::control(server))
        // Pauses of lockkit (its command writes on while nothing renews the lease) drawn three
        // times as often as each other fault; the store paused, not restarted (the process
        // run restarts it: here each restart holds grants back for a lease, and the
        // `lockkit run`s waiting meanwhile time out).
        .with_faults(FAULTS)
        .with_label("lockkit run, postgres locks (lease 1s), SQL function");
    if std::env::var(process_chaos::SECS_ENV).is_err() {
        // Some nine pauses of `lockkit` that outlive the lease: a stale write needs one that
        // falls while its command has writes left.
        config.duration = Duration::from_secs(40);
    }
    config
}

async fn run(config: ProcessChaosConfig) -> ProcessChaosReport {
    let report =
        process_chaos::run_cli_fenced(config, env!("CARGO_BIN_EXE_lockkit"), connect, fenced_sinks::open).await;
    println!("{report}");
    report
}

/// Runs of one test before it gives up on seeing what it waits for. A stale write needs a
/// pause of `lockkit` that outlives the lease early enough in a hold for its command, which
/// writes for three leases, to write on after a newer holder wrote: seed 0x32c gives nine such
/// pauses in 40 s, and six of them were refused (with the fence bypassed: 67 stale writes), so
/// a second seed is a safeguard, not the rule.
const RUNS: u64 = 3;

/// Runs seeds `SEED`, `SEED + 1`, … (at most [`RUNS`]) with the fence bypassed or not, checks
/// every run with `each`, and returns once `found` holds for one; fails with every report
/// otherwise.
async fn until_found(
    bypassed: bool,
    each: impl Fn(&ProcessChaosReport),
    found: impl Fn(&ProcessChaosReport) -> bool,
    missing: &str,
) {
    let mut reports = Vec::new();
    for attempt in 0..RUNS {
        let mut config = config(bypassed).await;
        config.seed = SEED + attempt;
        let report = run(config).await;
        each(&report);
        if found(&report) {
            return;
        }
        reports.push(report.to_string());
    }
    panic!("{missing} in {RUNS} runs:\n{}", reports.join("\n"));
}

/// Every run passes (0 stale writes accepted, 0 lost); within [`RUNS`] runs a pause of
/// `lockkit` outlives the lease and the fence refuses a stale write or read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_cli_chaos_on_postgres() {
    let each = |report: &ProcessChaosReport| {
        report.assert_ok();
        assert_eq!((report.stale_writes_accepted, report.lost_writes), (0, 0), "{report}");
    };
    let found = |report: &ProcessChaosReport| {
        report.pauses_outliving_lease > 0 && report.writes_refused + report.reads_refused > 0
    };
    until_found(false, each, found, "no pause of lockkit outlived the lease with the fence refusing something").await;
}

/// The planted bug: the same schedules, the commands' `SELECT lockkit_fence.fence(…)` left
/// out. Every run refuses nothing; within [`RUNS`] runs stale writes land and fail the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_cli_run_catches_a_bypassed_fence() {
    let each = |report: &ProcessChaosReport| {
        assert_eq!(report.writes_refused, 0, "a bypassed fence refuses nothing:\n{report}");
        assert!(report.stale_writes_accepted == 0 || !report.is_ok(), "{report}");
    };
    until_found(true, each, |report| report.stale_writes_accepted > 0, "the stale writes went unnoticed").await;
}
