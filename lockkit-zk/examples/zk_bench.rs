//! Runs `lockkit bench` against a private ZooKeeper, for those without a server at hand:
//! `cargo run --release -p lockkit-zk --example zk_bench [-- BENCH OPTIONS]`.
//!
//! The measurements live in the `lockkit bench` subcommand (lockkit-cli/src/bench/): the
//! floors (`exists`, create+delete of an ephemeral node, and the recipe's own requests sent
//! raw), uncontended cycles, hand-off under contention, 10,000 locks one after another and
//! concurrently on one session, and the upkeep of 10,000 held locks. This program only
//! starts a standalone server from the test kit's fixture (or uses `LOCKKIT_ZK_ADDR`) and
//! runs `cargo run --release -p lockkit-cli -- bench --url zk://ADDR` with the options given
//! after `--`. Figures and their analysis: docs/PERFORMANCE.md.
//!
//! The server is configured as in production (`ZkServer::start_durable`: writes fsynced,
//! full JIT), because the test settings make writes cheap and the server's code slow, which
//! misstates every ratio. `--test-server` (before any bench option) runs it with the test
//! settings instead, and `--netty` durable with ZooKeeper's Netty connection factory instead
//! of the default NIO one (which caps how much one session can pipeline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use lockkit_testkit::fixture::zk::ZkServer;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let profile = args.first().filter(|first| *first == "--test-server" || *first == "--netty").cloned();
    if profile.is_some() {
        args.remove(0);
    }
    let (_server, connect) = match std::env::var("LOCKKIT_ZK_ADDR") {
        Ok(addr) if !addr.is_empty() => (None, addr),
        _ => {
            let server = match profile.as_deref() {
                Some("--test-server") => ZkServer::start().await,
                Some(_) => ZkServer::start_durable_netty().await,
                None => ZkServer::start_durable().await,
            };
            let server = server.expect("start ZooKeeper (java and zookeeper.jar are needed)");
            let connect = server.connect_string();
            (Some(server), connect)
        }
    };
    let url = format!("zk://{connect}");
    let code = lockkit_testkit::fixture::run_lockkit_bench(url, args).await.expect("cargo runs the benchmark");
    std::process::exit(code);
}
