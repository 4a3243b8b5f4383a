//! The chaos run (lockkit-testkit's `chaos`) on a real etcd member: eight clients, each behind
//! a fault proxy of its own, on three names, while connections are cut, blackholed past the
//! lease, slowed down, clients killed, and the member paused and restarted (etcd keeps its
//! data across a restart, so the restart keeps every key and lease). Mutexes here; the same
//! schedule on read-write locks and semaphores is in `chaos_kinds.rs`. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the run longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind};
use support::EtcdHarness;

/// Every kind of fault but stopping one member of a replicated store (there is one member).
const FAULTS: [FaultKind; 6] = [
    FaultKind::Cut,
    FaultKind::Blackhole,
    FaultKind::Latency,
    FaultKind::Kill,
    FaultKind::PauseStore,
    FaultKind::RestartStore,
];

#[test]
fn chaos_on_one_member() {
    lockkit_testkit::runtime().block_on(async {
        let harness = EtcdHarness::dedicated().await;
        let config = ChaosConfig::new(0).with_duration(Duration::from_secs(20)).with_faults(&FAULTS);
        chaos::check(&harness, config.with_label("one member"), &[23]).await;
    });
}
