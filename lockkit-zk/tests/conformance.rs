//! The whole lock contract, on a real standalone ZooKeeper: mutexes, read-write locks,
//! semaphores and elections (the backend grants every kind), and the mutex cases again on a
//! write lock, on a one-permit semaphore and on election candidates.
//!
//! The harness has every hook the kit asks for (kill, blackhole, cut, delete the record, an
//! isolated server to restart, a child process's environment, an unreachable client and
//! invalid configurations), so no case is declared in `without: [...]`: the run passes with
//! `LOCKKIT_CONFORMANCE_STRICT=1`.
mod support;

/// The cases that see a hold lost, released or ended, again with clients that cover every
/// hold with the session's recursive watch on the base path (the many-holds path, from 256
/// holds by default) instead of a watch per hold.
mod many_holds {
    lockkit_testkit::conformance!(
        crate::support::ZkHarness::shared().await.with_many_holds_threshold(1),
        without: [],
        only: [loss, release, reentrancy, fencing, max_hold, multi, break_lock],
    );
}

// After the module above: the kit's helper macros of a run reach the modules that follow it.
lockkit_testkit::conformance!(crate::support::ZkHarness::shared().await, without: []);
