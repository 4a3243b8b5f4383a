//! Observers of an election under faults, on a dedicated PostgreSQL server (fsync on): the
//! kit's observers' chaos run (`lockkit_testkit::observer_chaos`): four candidates campaign,
//! lead for a while and resign (or drop their leadership) on one name, while their connections
//! and those of two observers are cut, slowed, blackholed briefly and past the lease, and the
//! server restarts once. Every term granted reaches every observer, or a `Gap` comes between
//! the terms shown around it (contract 28). `LOCKKIT_CHAOS_SEED` replays a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::observer_chaos::ObserverChaos;
use support::PostgresHarness;

lockkit_testkit::observer_chaos_test!(
    chaos_observers_see_every_term_or_a_gap,
    harness: PostgresHarness::dedicated().await,
    config: ObserverChaos::new(26, Duration::from_secs(20)),
);
