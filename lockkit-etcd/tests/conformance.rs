//! The whole lock contract on a real etcd member: mutexes, read-write locks, semaphores,
//! elections and breaking a lock, and the mutex cases again on election candidates, on a
//! write lock and on a one-permit semaphore. The run passes with
//! `LOCKKIT_CONFORMANCE_STRICT=1`.
//!
//! The harness has every hook the kit asks for (kill, blackhole, cut, delete the record, an
//! isolated member to restart and pause, a child process's environment, an unreachable client
//! and invalid configurations), so no case is declared in `without: [...]`.
mod support;

/// The cases that see a hold lost, released or ended, again with clients that follow every
/// hold with the watch of deletions under the whole prefix (the many-holds path, from 1,000
/// holds by default) instead of listing the holds' keys after each keep-alive.
mod many_holds {
    lockkit_testkit::conformance!(
        crate::support::EtcdHarness::shared_with(crate::support::ClientSetup::many_holds(1)).await,
        without: [],
        only: [loss, release, reentrancy, fencing, max_hold, multi, break_lock],
    );

    /// The run above is on the prefix watch: a session whose watch is not set in time fails
    /// to open at this threshold, and here a client of the same harness shows, from its
    /// session, that the watch alone follows every hold it takes (no listing is sent).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_hold_of_the_run_is_covered_by_the_prefix_watch() {
        use lockkit_testkit::holds::check_store_wide_coverage;

        let h = crate::support::EtcdHarness::shared_with(crate::support::ClientSetup::many_holds(1)).await;
        let (provider, _proxy) = h.client_with(crate::support::test_builder().many_holds_threshold(1)).await.unwrap();
        let base = format!("covered/{}", uuid::Uuid::new_v4().simple());
        let names: Vec<String> = (0..20).map(|i| format!("{base}/{i}")).collect();
        check_store_wide_coverage(&provider, &names, || provider.hold_coverage()).await;
    }
}

// After the module above: the kit's helper macros of a run reach the modules that follow it.
lockkit_testkit::conformance!(crate::support::EtcdHarness::shared().await, without: []);
