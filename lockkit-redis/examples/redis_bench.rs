//! Runs `lockkit bench` against a private redis-server, for those without a server at hand:
//! `cargo run --release -p lockkit-redis --example redis_bench [-- [--cluster] BENCH OPTIONS]`.
//!
//! The measurements live in the `lockkit bench` subcommand (lockkit-cli/src/bench/): the
//! floor (PING, and the acquire and release scripts sent raw), uncontended cycles, hand-off
//! under contention, 10,000 locks one after another and at once, and the upkeep of 10,000
//! held locks. This program only starts a server from the test kit's fixture (or uses
//! `LOCKKIT_REDIS_URL`) and runs `cargo run --release -p lockkit-cli -- bench --url URL`
//! with the options given after `--`. With `--cluster` (first) it starts a Redis Cluster of
//! three primaries and three replicas instead and benchmarks it through `redis+cluster://`
//! (the floor is then a PING to the primary of the raw key's slot). Figures and their
//! analysis: docs/PERFORMANCE.md.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lockkit_testkit::fixture::{RedisCluster, RedisServer};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let cluster = args.first().is_some_and(|arg| arg == "--cluster");
    if cluster {
        args.remove(0);
    }
    let (_server, _cluster, url) = match std::env::var("LOCKKIT_REDIS_URL") {
        Ok(url) if !url.is_empty() => (None, None, url),
        _ if cluster => {
            let fixture = RedisCluster::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = fixture.url();
            (None, Some(fixture), url)
        }
        _ => {
            let server = RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"));
            let url = server.url();
            (Some(server), None, url)
        }
    };
    let code = lockkit_testkit::fixture::run_lockkit_bench(url, args).await.expect("cargo runs the benchmark");
    std::process::exit(code);
}
