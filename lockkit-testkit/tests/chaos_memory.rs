//! The chaos run on the in-process memory backend, leased (one-second lease, renewed by the
//! watchdog): kill, blackhole past the lease, and store restarts, with eight clients on three
//! names. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make it longer
//! or replay a seed.

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig};
use lockkit_testkit::memory::MemoryHarness;

#[test]
fn chaos_memory_leased() {
    lockkit_testkit::runtime().block_on(async {
        let harness = MemoryHarness::with_lease();
        let config = ChaosConfig::new(0).with_duration(Duration::from_secs(10));
        chaos::check(&harness, config, &[1, 2]).await;
    });
}
