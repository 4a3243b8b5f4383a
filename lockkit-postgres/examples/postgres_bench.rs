//! Runs `lockkit bench` against a private PostgreSQL server (fsync on), for those without a
//! server at hand: `cargo run --release -p lockkit-postgres --example postgres_bench [-- BENCH
//! OPTIONS]`.
//!
//! The measurements live in the `lockkit bench` subcommand (lockkit-cli/src/bench/), with the
//! floor `SELECT 1` on a plain tokio-postgres connection measured in the same run. This
//! program only starts a server from the test kit's fixture (or uses `LOCKKIT_POSTGRES_URL`)
//! and runs `cargo run --release -p lockkit-cli -- bench --url URL` with the options given
//! after `--`. Figures: docs/PERFORMANCE.md.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lockkit_testkit::fixture::PostgresServer;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The environment's server when LOCKKIT_POSTGRES_URL names one, else one started for this run.
    let url = PostgresServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = lockkit_testkit::fixture::run_lockkit_bench(url, args).await.expect("cargo runs the benchmark");
    std::process::exit(code);
}
