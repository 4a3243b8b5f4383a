//! The chaos run (lockkit-testkit's `chaos`) on a real etcd member: eight clients, each behind
//! a fault proxy of its own, on three names, while connections are cut, blackholed past the
//! lease, slowed down, clients killed, and the member paused and restarted (etcd keeps its
//! data across a restart, so the restart keeps every key and lease). Mutexes here; the same
//! schedule on read-write locks and semaphores is in `chaos_kinds.rs`. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the run longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig};
use support::EtcdHarness;

lockkit_testkit::chaos_test!(
    chaos_on_one_member,
    harness: EtcdHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_label("one member"),
    seeds: [23],
);
