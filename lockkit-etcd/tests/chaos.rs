//! The chaos run (lockkit-testkit's `chaos`) on a real etcd member: eight clients, each behind
//! a fault proxy of its own, on three names, while connections are cut, blackholed past the
//! lease, slowed down, clients killed, and the member paused and restarted (etcd keeps its
//! data across a restart, so the restart keeps every key and lease). Mutexes here; the same
//! schedule on read-write locks and semaphores is in `chaos_kinds.rs`. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the run longer or replay a seed.

mod support;

use lockkit_testkit::chaos::ChaosConfig;
use support::EtcdHarness;

lockkit_testkit::chaos_test! {
    harness: EtcdHarness::dedicated().await;
    chaos_on_one_member([23]) => ChaosConfig::single_server().with_label("one member");
}
