//! The chaos run (lockkit-testkit's `chaos`) on a real ZooKeeper server of its own: eight
//! clients, each with a session through a fault proxy of its own, on three names, while
//! connections are cut, blackholed past the session timeout (the session expires), slowed
//! down, clients killed, and the server paused and restarted. `LOCKKIT_CHAOS_SECS`,
//! `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make the run longer or replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{self, ChaosConfig};
use support::ZkHarness;

#[test]
fn chaos_on_a_dedicated_server() {
    lockkit_testkit::runtime().block_on(async {
        let harness = ZkHarness::dedicated().await;
        chaos::check(&harness, ChaosConfig::new(0).with_duration(Duration::from_secs(25)), &[21]).await;
    });
}
