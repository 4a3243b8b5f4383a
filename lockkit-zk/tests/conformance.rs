//! The whole lock contract, on a real standalone ZooKeeper.
mod support;

lockkit_testkit::conformance!(crate::support::ZkHarness::shared().await);
