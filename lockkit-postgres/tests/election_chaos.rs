//! Observers of an election under faults, on a dedicated PostgreSQL server (fsync on): the
//! kit's observers' chaos run (`lockkit_testkit::observer_chaos`): four candidates campaign,
//! lead for a while and resign (or drop their leadership) on one name, while their connections
//! and those of two observers are cut, slowed, blackholed briefly and past the lease, and the
//! server restarts once. Every term granted reaches every observer, or a `Gap` comes between
//! the terms shown around it (contract 28). `LOCKKIT_CHAOS_SEED` replays a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::observer_chaos::{self, ObserverChaos};
use support::PostgresHarness;

#[test]
fn chaos_observers_see_every_term_or_a_gap() {
    lockkit_testkit::runtime().block_on(async {
        let harness = PostgresHarness::dedicated().await;
        let config = ObserverChaos::new(26, Duration::from_secs(20)).seed_from_env();
        println!("{}", observer_chaos::run(&harness, config).await);
    });
}
