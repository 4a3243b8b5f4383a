//! The whole lock contract on a real etcd member: the mutex cases, the election cases, the
//! mutex cases again on election candidates, and on a write lock and a one-permit semaphore
//! (which expect `Unsupported` while the backend does not declare those kinds).
//!
//! The harness has every hook the kit asks for (kill, blackhole, cut, delete the record, an
//! isolated member to restart and pause, a child process's environment, an unreachable client
//! and invalid configurations), so no case is declared in `without: [...]`.
mod support;

lockkit_testkit::conformance!(crate::support::EtcdHarness::shared().await, without: []);
