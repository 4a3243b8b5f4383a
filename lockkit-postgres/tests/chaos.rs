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

use lockkit_testkit::chaos::{self, ChaosConfig, Primitive};
use support::PostgresHarness;

lockkit_testkit::chaos_test!(
    chaos_mutex,
    harness: PostgresHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_label("fsync on"),
    seeds: [21],
);

lockkit_testkit::chaos_test!(
    chaos_mutex_with_crashes,
    harness: PostgresHarness::dedicated_crashing().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_label("crash restarts, grants without a flush"),
    seeds: [21],
);

lockkit_testkit::chaos_test!(
    chaos_elections,
    harness: PostgresHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_primitive(Primitive::Election)
        .with_label("fsync on"),
    seeds: [25],
);

lockkit_testkit::chaos_test!(
    chaos_read_write_locks,
    harness: PostgresHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_primitive(Primitive::ReadWrite)
        .with_label("fsync on"),
    seeds: [22],
);

lockkit_testkit::chaos_test!(
    chaos_semaphores_of_three,
    harness: PostgresHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_primitive(Primitive::Semaphore(3))
        .with_label("fsync on"),
    seeds: [23],
);
