//! The chaos run (lockkit-testkit's `chaos`) on the file backend: eight clients (providers of
//! their own on one directory) on three names, acquiring every way (try, timeout, cancelled,
//! plain), writing to fenced resources, releasing or dropping. The file harness has no fault
//! hooks (a flock has no lease and no connection to cut), so every fault is skipped and
//! counted as such: this run checks exclusion, fencing, cancellation and cleanup under
//! contention. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make it
//! longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig, FaultKind};
use support::FileHarness;

#[test]
fn chaos_under_contention() {
    lockkit_testkit::runtime().block_on(async {
        let harness = FileHarness::temporary();
        let config = ChaosConfig::new(0).with_duration(Duration::from_secs(10)).with_faults(&FaultKind::CLIENT);
        chaos::check(&harness, config, &[31]).await;
    });
}
