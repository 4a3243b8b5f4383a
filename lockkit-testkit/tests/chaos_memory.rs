//! The chaos run on the in-process memory backend, leased (one-second lease, renewed by the
//! watchdog): clients blackholed past the lease, killed and replaced, and store restarts, with
//! eight clients on three names. The memory harness has no connection to cut or slow down,
//! and no process to pause. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make it longer or replay a seed.

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind, Primitive};
use lockkit_testkit::memory::MemoryHarness;

#[test]
fn chaos_memory_leased() {
    lockkit_testkit::runtime().block_on(async {
        let harness = MemoryHarness::with_lease();
        let faults = [FaultKind::Blackhole, FaultKind::Kill, FaultKind::RestartStore];
        let config = ChaosConfig::new(0).with_duration(Duration::from_secs(10)).with_faults(&faults);
        chaos::check(&harness, config, &[1, 2]).await;
    });
}

#[test]
fn chaos_memory_read_write_locks() {
    lockkit_testkit::runtime().block_on(async {
        let harness = MemoryHarness::with_lease();
        let faults = [FaultKind::Blackhole, FaultKind::Kill, FaultKind::RestartStore];
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(8))
            .with_faults(&faults)
            .with_primitive(Primitive::ReadWrite);
        chaos::check(&harness, config, &[3]).await;
    });
}

#[test]
fn chaos_memory_semaphores_of_three() {
    lockkit_testkit::runtime().block_on(async {
        let harness = MemoryHarness::with_lease();
        let faults = [FaultKind::Blackhole, FaultKind::Kill, FaultKind::RestartStore];
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(8))
            .with_faults(&faults)
            .with_primitive(Primitive::Semaphore(3));
        chaos::check(&harness, config, &[4]).await;
    });
}

#[test]
fn chaos_memory_elections() {
    lockkit_testkit::runtime().block_on(async {
        let harness = MemoryHarness::with_lease();
        let faults = [FaultKind::Blackhole, FaultKind::Kill, FaultKind::RestartStore];
        let config = ChaosConfig::new(0)
            .with_duration(Duration::from_secs(8))
            .with_faults(&faults)
            .with_primitive(Primitive::Election);
        chaos::check(&harness, config, &[5]).await;
    });
}
