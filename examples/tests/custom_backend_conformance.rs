//! The example's custom backend passes the whole conformance kit: one line.

#[path = "../custom_backend/backend.rs"]
mod backend;

lockkit_testkit::conformance!(
    crate::backend::TableHarness::default(),
    // What this in-process table cannot be made to do, declared so that the cases show as
    // ignored rather than pass unchecked (LOCKKIT_CONFORMANCE_STRICT=1 fails undeclared ones):
    // its clients cannot die apart from the process, it has no network to lose, and no
    // settings to get wrong.
    without: [
        loss_is_signalled_when_the_client_dies,
        dead_holder_frees_the_lock_after_the_lease_not_before,
        unreachable_store_gives_retryable_errors,
        timeout_against_an_unreachable_store_says_so,
        bad_configuration_is_refused_when_building,
    ],
);
