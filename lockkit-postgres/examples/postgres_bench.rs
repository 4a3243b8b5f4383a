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
    let (_server, url) = match std::env::var("LOCKKIT_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let server = PostgresServer::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = server.url();
            (Some(server), url)
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = lockkit_testkit::fixture::run_lockkit_bench(url, args).await.expect("cargo runs the benchmark");
    std::process::exit(code);
}
