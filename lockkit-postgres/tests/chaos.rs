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

use lockkit_testkit::chaos::{ChaosConfig, Primitive};
use support::PostgresHarness;

lockkit_testkit::chaos_test! {
    harness: PostgresHarness::dedicated().await;
    chaos_mutex([21]) => ChaosConfig::single_server().with_label("fsync on");
    chaos_elections([25]) => ChaosConfig::single_server().with_primitive(Primitive::Election).with_label("fsync on");
    chaos_read_write_locks([22]) => ChaosConfig::single_server().with_primitive(Primitive::ReadWrite).with_label("fsync on");
    chaos_semaphores_of_three([23]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Semaphore(3)).with_label("fsync on");
}

lockkit_testkit::chaos_test! {
    harness: PostgresHarness::dedicated_with(support::Restarts::Crash).await;
    chaos_mutex_with_crashes([21]) =>
        ChaosConfig::single_server().with_label("crash restarts, grants without a flush");
}
