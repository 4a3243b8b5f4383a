//! The whole lock contract, checked against a real PostgreSQL server. The harness has every
//! hook the cases use (a fault proxy per client, a dedicated server to restart and pause, a
//! closed port, a child process on the same server), so no case is declared unchecked.

mod support;

lockkit_testkit::conformance!(crate::support::PostgresHarness::shared().await, without: []);
