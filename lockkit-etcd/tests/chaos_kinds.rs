//! The chaos run (lockkit-testkit's `chaos`) on the shared kinds, on a dedicated etcd member:
//! the schedule of `chaos.rs` (cuts, blackholes past the lease, latency, killed clients, the
//! member paused and restarted) on read-write locks (one acquisition in four a writer that
//! writes; readers read the fenced resource with their token) and on semaphores of three
//! permits. The runs go one after the other. `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and
//! `LOCKKIT_CHAOS_SEED` make the runs longer or replay a seed.

mod support;

use lockkit_testkit::chaos::{ChaosConfig, Primitive};
use support::EtcdHarness;

lockkit_testkit::chaos_test! {
    harness: EtcdHarness::dedicated().await;
    chaos_read_write_locks_on_one_member([23]) =>
        ChaosConfig::single_server().with_primitive(Primitive::ReadWrite).with_label("one member");
    chaos_semaphores_of_three_on_one_member([24]) =>
        ChaosConfig::single_server().with_primitive(Primitive::Semaphore(3)).with_label("one member");
}
