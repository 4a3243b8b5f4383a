//! The chaos run (lockkit-testkit's `chaos`) on the shared kinds, on a dedicated etcd member:
//! the schedule of `chaos.rs` (cuts, blackholes past the lease, latency, killed clients, the
//! member paused and restarted) on read-write locks (one acquisition in four a writer that
//! writes; readers read the fenced resource with their token) and on semaphores of three
//! permits. The runs go one after the other. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the runs longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind, Primitive};
use support::EtcdHarness;
use tokio::sync::Mutex;

/// One chaos run at a time in this test binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

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
fn chaos_read_write_locks_on_one_member() {
    lockkit_testkit::runtime().block_on(async {
        let _turn = ONE_AT_A_TIME.lock().await;
        let harness = EtcdHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::ReadWrite);
        chaos::check(&harness, config.with_label("one member"), &[23]).await;
    });
}

#[test]
fn chaos_semaphores_of_three_on_one_member() {
    lockkit_testkit::runtime().block_on(async {
        let _turn = ONE_AT_A_TIME.lock().await;
        let harness = EtcdHarness::dedicated().await;
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(20))
            .with_faults(&FAULTS)
            .with_primitive(Primitive::Semaphore(3));
        chaos::check(&harness, config.with_label("one member"), &[24]).await;
    });
}
