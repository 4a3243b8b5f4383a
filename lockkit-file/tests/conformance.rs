//! The whole lock contract on a lock directory, including two OS processes contending.

mod support;

lockkit_testkit::conformance!(
    crate::support::FileHarness::new(),
    // The store is a local directory: there is no server that could be cut off or unreachable.
    without: [unreachable_store_gives_retryable_errors, timeout_against_an_unreachable_store_says_so],
);
