//! The whole lock contract, on a real standalone ZooKeeper: mutexes, read-write locks,
//! semaphores and elections (the backend grants every kind), and the mutex cases again on a
//! write lock, on a one-permit semaphore and on election candidates.
//!
//! The harness has every hook the kit asks for (kill, blackhole, cut, delete the record, an
//! isolated server to restart, a child process's environment, an unreachable client and
//! invalid configurations), so no case is declared in `without: [...]`: the run passes with
//! `LOCKKIT_CONFORMANCE_STRICT=1`.
mod support;

lockkit_testkit::conformance!(crate::support::ZkHarness::shared().await, without: []);
