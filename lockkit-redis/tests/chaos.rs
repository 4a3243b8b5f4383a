//! The chaos run (lockkit-testkit's `chaos`) on real redis-server: eight clients, each behind a
//! fault proxy of its own, on three names, while connections are cut, blackholed past the
//! lease, slowed down, clients killed, and the server paused and restarted.
//!
//! Two runs on dedicated servers: with an append-only file (`appendfsync always`), where a
//! restart keeps every record, and without persistence, where a restart loses the records
//! (mutual exclusion is then impossible by design; the run counts those overlaps apart and
//! shows fencing refusing the stale writes). Read-write locks (one acquisition in four a
//! writer), semaphores of three permits and elections (every client a candidate, the leader
//! writing with its term) run the same schedule with AOF. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the runs longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{ChaosConfig, FaultKind, Primitive};
use lockkit_testkit::fixture::Persistence;
use support::RedisHarness;

/// Every kind of fault but stopping one member of a replicated store (there is one server).
const FAULTS: [FaultKind; 6] = [
    FaultKind::Cut,
    FaultKind::Blackhole,
    FaultKind::Latency,
    FaultKind::Kill,
    FaultKind::PauseStore,
    FaultKind::RestartStore,
];

fn config() -> ChaosConfig {
    ChaosConfig::new(0).with_duration(Duration::from_secs(20)).with_faults(&FAULTS)
}

lockkit_testkit::chaos_test!(
    chaos_with_aof,
    harness: RedisHarness::dedicated(Persistence::Aof).await,
    config: config().with_label("AOF"),
    seeds: [11],
);

lockkit_testkit::chaos_test!(
    chaos_without_persistence,
    harness: RedisHarness::dedicated(Persistence::None).await,
    config: config().with_restart_loses_data(true).with_label("no persistence"),
    seeds: [12],
);

lockkit_testkit::chaos_test!(
    chaos_read_write_locks_with_aof,
    harness: RedisHarness::dedicated(Persistence::Aof).await,
    config: config().with_primitive(Primitive::ReadWrite).with_label("AOF"),
    seeds: [13],
);

lockkit_testkit::chaos_test!(
    chaos_semaphores_of_three_with_aof,
    harness: RedisHarness::dedicated(Persistence::Aof).await,
    config: config().with_primitive(Primitive::Semaphore(3)).with_label("AOF"),
    seeds: [14],
);

lockkit_testkit::chaos_test!(
    chaos_elections_with_aof,
    harness: RedisHarness::dedicated(Persistence::Aof).await,
    config: config().with_primitive(Primitive::Election).with_label("AOF"),
    seeds: [15],
);
