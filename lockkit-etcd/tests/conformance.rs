//! The whole lock contract on a real etcd member: mutexes, read-write locks, semaphores,
//! elections and breaking a lock, and the mutex cases again on election candidates, on a
//! write lock and on a one-permit semaphore. The run passes with
//! `LOCKKIT_CONFORMANCE_STRICT=1`.
//!
//! The harness has every hook the kit asks for (kill, blackhole, cut, delete the record, an
//! isolated member to restart and pause, a child process's environment, an unreachable client
//! and invalid configurations), so no case is declared in `without: [...]`.
mod support;

lockkit_testkit::conformance!(crate::support::EtcdHarness::shared().await, without: []);
