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

use lockkit_testkit::chaos::{ChaosConfig, Primitive};
use lockkit_testkit::fixture::Persistence;
use support::RedisHarness;

lockkit_testkit::chaos_test! {
    harness: RedisHarness::dedicated_with(Persistence::Aof).await;
    chaos_with_aof([11]) => ChaosConfig::single_server().with_label("AOF");
    chaos_read_write_locks_with_aof([13]) =>
        ChaosConfig::single_server().with_primitive(Primitive::ReadWrite).with_label("AOF");
    chaos_semaphores_of_three_with_aof([14]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Semaphore(3)).with_label("AOF");
    chaos_elections_with_aof([15]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Election).with_label("AOF");
}

lockkit_testkit::chaos_test! {
    harness: RedisHarness::dedicated_with(Persistence::None).await;
    chaos_without_persistence([12]) =>
        ChaosConfig::single_server().with_restart_loses_data(true).with_label("no persistence");
}
