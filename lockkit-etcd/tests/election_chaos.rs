//! Elections under faults on a real etcd member:
//!
//! - the chaos run (lockkit-testkit's `chaos`) on elections: eight clients, every one a
//!   candidate, the leader writing to the fenced resource with its term, while connections are
//!   cut, blackholed past the lease, slowed down, clients killed, and the member paused and
//!   restarted;
//! - observers of an election while the candidates' and the observers' connections are cut,
//!   slowed, blackholed (past the lease too), cut off while etcd compacts the revisions they
//!   missed, and the member restarts once, checked against every term granted: each one
//!   reaches every observer, or a gap comes between the terms shown around it.
//!
//! The runs go one after the other. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make them longer or replay a seed.
mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{ChaosConfig, Primitive};
use lockkit_testkit::observer_chaos::ObserverChaos;
use support::EtcdHarness;
lockkit_testkit::chaos_test! {
    harness: EtcdHarness::dedicated().await;
    chaos_elections_on_one_member([27]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Election).with_label("elections, one member");
}

lockkit_testkit::observer_chaos_test!(
    /// Observers of an election under faults, on a member of its own (the kit's
    /// `observer_chaos`): every term granted reaches each observer, or a `Gap` comes between the
    /// terms shown around it (contract 28), while connections are cut, slowed, blackholed (past
    /// the lease too), cut off while the member compacts its history, and the member restarts once.
    chaos_observers_see_every_term_or_a_gap,
    harness: EtcdHarness::dedicated().await,
    config: ObserverChaos::new(28, Duration::from_secs(20)),
);
