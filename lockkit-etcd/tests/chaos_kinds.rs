//! The chaos run (lockkit-testkit's `chaos`) on the shared kinds, on a dedicated etcd member:
//! the schedule of `chaos.rs` (cuts, blackholes past the lease, latency, killed clients, the
//! member paused and restarted) on read-write locks (one acquisition in four a writer that
//! writes; readers read the fenced resource with their token) and on semaphores of three
//! permits. The runs go one after the other. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the runs longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, Primitive};
use support::EtcdHarness;

lockkit_testkit::chaos_test!(
    chaos_read_write_locks_on_one_member,
    harness: EtcdHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_primitive(Primitive::ReadWrite)
        .with_label("one member"),
    seeds: [23],
);

lockkit_testkit::chaos_test!(
    chaos_semaphores_of_three_on_one_member,
    harness: EtcdHarness::dedicated().await,
    config: ChaosConfig::new(0)
        .with_duration(Duration::from_secs(20))
        .with_faults(&chaos::SINGLE_SERVER_FAULTS)
        .with_primitive(Primitive::Semaphore(3))
        .with_label("one member"),
    seeds: [24],
);
