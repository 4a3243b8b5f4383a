//! The etcd backend on a three-member cluster: the leader member stops, and locks keep
//! working on the other two with tokens that keep increasing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lockkit_core::Error;
use lockkit_etcd::EtcdLockProvider;
use lockkit_testkit::fixture::EtcdCluster;

/// The index of the member that leads the cluster now.
async fn leader(cluster: &EtcdCluster) -> usize {
    for _ in 0..100 {
        for (i, member) in cluster.members().iter().enumerate() {
            let Ok(mut client) = etcd_client::Client::connect([format!("http://{}", member.addr())], None).await else {
                continue;
            };
            if let Ok(status) = client.status().await
                && status.header().is_some_and(|h| h.member_id() == status.leader())
            {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no member leads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_member_stops_and_locks_go_on_with_increasing_tokens() {
    let mut cluster = EtcdCluster::start(3).await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{}?ttl=4s&connect_timeout=1s", cluster.url());
    let provider = EtcdLockProvider::connect(&url).await.unwrap();
    let lock = provider.lock("cluster/leader-stops").unwrap();
    let first = lock.acquire().await.unwrap();
    let before = first.token();
    let leader = leader(&cluster).await;
    cluster.members_mut()[leader].stop_process().await.unwrap();
    // The hold either survives (the new leader keeps the lease) or is reported lost; never a
    // silent double grant: release says which.
    match tokio::time::timeout(Duration::from_secs(20), first.release()).await.unwrap() {
        Ok(()) | Err(Error::LockLost { .. }) => {}
        Err(error) => assert!(error.is_retryable(), "{error}"),
    }
    let second = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match lock.acquire_timeout(Duration::from_secs(5)).await {
                Ok(guard) => break guard,
                Err(error) => assert!(error.is_retryable() || error.is_timeout(), "{error}"),
            }
        }
    })
    .await
    .expect("a grant on the two members left");
    assert!(second.token() > before, "{} after {before}", second.token());
    second.release().await.unwrap();
    cluster.members_mut()[leader].start_again().await.unwrap();
}
