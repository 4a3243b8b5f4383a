//! The whole lock contract, checked against a real redis-server.

mod support;

lockkit_testkit::conformance!(crate::support::RedisHarness::shared().await);
