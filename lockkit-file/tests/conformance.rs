//! The whole lock contract on a lock directory, including two OS processes contending.

mod support;

lockkit_testkit::conformance!(crate::support::FileHarness::new());
