//! The whole lock contract, checked against a real redis-server. Run it with
//! `LOCKKIT_CONFORMANCE_STRICT=1`: the harness has every hook the cases use (fault proxies per
//! client, a dedicated server to restart, a closed port, a child process on the same
//! server), so no case is declared unchecked.

mod support;

lockkit_testkit::conformance!(crate::support::RedisHarness::shared().await, without: []);
