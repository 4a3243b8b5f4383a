//! The chaos run on the in-process memory backend, leased (one-second lease, renewed by the
//! watchdog): clients blackholed past the lease, killed and replaced, and store restarts, with
//! eight clients on three names. The memory harness has no connection to cut or slow down,
//! and no process to pause. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make it longer or replay a seed.

use std::time::Duration;

use lockkit_testkit::chaos::{ChaosConfig, FaultKind, Primitive};
use lockkit_testkit::memory::MemoryHarness;

/// `seconds` of the faults the leased memory harness has: a client blackholed past the
/// lease, a client killed, the store restarted.
fn config(seconds: u64) -> ChaosConfig {
    let faults = [FaultKind::Blackhole, FaultKind::Kill, FaultKind::RestartStore];
    ChaosConfig::new(0).with_duration(Duration::from_secs(seconds)).with_faults(&faults)
}

lockkit_testkit::chaos_test! {
    harness: MemoryHarness::with_lease();
    chaos_memory_leased([1, 2]) => config(10);
    chaos_memory_read_write_locks([3]) => config(8).with_primitive(Primitive::ReadWrite);
    chaos_memory_semaphores_of_three([4]) => config(8).with_primitive(Primitive::Semaphore(3));
    chaos_memory_elections([5]) => config(8).with_primitive(Primitive::Election);
}
