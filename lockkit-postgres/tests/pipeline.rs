//! Many statements of one provider at once: they wait their turn for the command connection
//! instead of outwaiting the response timeout behind each other.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod support;

use std::time::Duration;

use lockkit_testkit::fixture::PostgresServer;
use support::{OPERATION, test_builder, within};

/// 2,000 acquire + release cycles of distinct locks started at once on one provider whose
/// response timeout is 600 ms: sent all at once, the last statements would wait behind some
/// 4,000 others for longer than that, time out, and the connection be dropped as broken. Each
/// waits its turn instead, and all of them succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_statements_at_once_wait_their_turn_instead_of_timing_out() {
    const LOCKS: usize = 2_000;
    let shared = PostgresServer::shared().await.unwrap_or_else(|e| panic!("the test needs PostgreSQL: {e}"));
    let provider = test_builder().url(shared.url()).build().unwrap();
    within(OPERATION, "connect", provider.ping()).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..LOCKS {
        let lock = provider.lock(&format!("pipeline/{}/{i}", std::process::id())).unwrap();
        tasks.spawn(async move { lock.acquire().await?.release().await });
    }
    // Generous: a loaded machine runs a cycle in a few milliseconds.
    within(Duration::from_secs(120), "every cycle ends", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
    })
    .await;
}
