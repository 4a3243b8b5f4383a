//! The example's custom backend passes the whole conformance kit: one line.

#[path = "../custom_backend/backend.rs"]
mod backend;

lockkit_testkit::conformance!(crate::backend::TableHarness::default());
