//! The chaos run (lockkit-testkit's `chaos`) on the file backend: eight clients (providers of
//! their own on one directory) on three names, acquiring every way (try, timeout, cancelled,
//! plain), writing to fenced resources, releasing or dropping; once on mutexes, once on
//! read-write locks (one writer in four; readers read the resource with their token), once
//! on semaphores of three permits and once on elections (every client a candidate; the
//! leader writes with its term). The file harness's one fault is a client that dies (`kill`:
//! its flocks are let go, as the OS does for a dead process); the other faults (a flock has no
//! lease and no connection to cut) are skipped and counted as such: these runs check
//! exclusion, sharing, permit counts, single leadership, fencing, cancellation and cleanup
//! under contention.
//! `LOCKKIT_CHAOS_SECS`, `LOCKKIT_CHAOS_SEEDS` and `LOCKKIT_CHAOS_SEED` make them longer or
//! replay a seed.

mod support;

use std::time::Duration;

use lockkit_testkit::chaos::{ChaosConfig, FaultKind, Primitive};
use support::FileHarness;

/// `seconds` of the faults a file harness has (a client that dies).
fn config(seconds: u64) -> ChaosConfig {
    ChaosConfig::new(0).with_duration(Duration::from_secs(seconds)).with_faults(&FaultKind::CLIENT)
}

lockkit_testkit::chaos_test! {
    harness: FileHarness::temporary();
    chaos_under_contention([31]) => config(10);
    chaos_read_write_locks([32]) => config(8).with_primitive(Primitive::ReadWrite);
    chaos_semaphores_of_three([33]) => config(8).with_primitive(Primitive::Semaphore(3));
    chaos_elections([34]) => config(8).with_primitive(Primitive::Election);
}
