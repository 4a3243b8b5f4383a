//! The chaos run (lockkit-testkit's `chaos`) on a real PostgreSQL server (fsync on): eight
//! clients, each behind a fault proxy of its own, on three names, while connections are cut,
//! blackholed past the lease, slowed down, clients killed, and the server paused (every
//! server process stopped) and restarted (a fast shutdown, which keeps every commit).
//! The run is made with mutexes, with read-write locks (one acquisition in four a writer),
//! with semaphores of three permits and on elections (every client a candidate, the leader
//! writing with its term). `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make the run longer or
//! replay a seed. `chaos_mutex_with_crashes` makes every restart a crash (an immediate stop,
//! the WAL writer slowed so that asynchronous commits are lost), for the restart fence.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind, Primitive};
use support::PostgresHarness;

/// Every kind of fault but stopping one member of a replicated store (there is one server).
const FAULTS: [FaultKind; 6] = [
    FaultKind::Cut,
    FaultKind::Blackhole,
    FaultKind::Latency,
    FaultKind::Kill,
    FaultKind::PauseStore,
    FaultKind::RestartStore,
];

#[test]
fn chaos_mutex() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated().await;
        let config =
            ChaosConfig::new(0).with_duration(Duration::from_secs(20)).with_faults(&FAULTS).with_label("fsync on");
        chaos::check(&harness, config, &[21]).await;
    });
}

#[test]
fn chaos_mutex_with_crashes() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated_crashing().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_label("crash restarts, grants without a flush");
        chaos::check(&harness, config, &[21]).await;
    });
}

#[test]
fn chaos_elections() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::Election)
            .with_label("fsync on");
        chaos::check(&harness, config, &[25]).await;
    });
}

#[test]
fn chaos_read_write_locks() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::ReadWrite)
            .with_label("fsync on");
        chaos::check(&harness, config, &[22]).await;
    });
}

#[test]
fn chaos_semaphores_of_three() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::Semaphore(3))
            .with_label("fsync on");
        chaos::check(&harness, config, &[23]).await;
    });
}
