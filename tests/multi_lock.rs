//! `MultiLock` over locks of three different stores at once (files, Redis, ZooKeeper): one
//! canonical order across backends, all or nothing, no deadlock between opposite orders.

#![cfg(all(feature = "redis", feature = "zk"))]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit::{Error, LockHandle, LockProvider, MultiLock, connect};
use lockkit_testkit::fixture::{RedisServer, ZkServer};

struct Stores {
    file: LockProvider,
    redis: LockProvider,
    zk: LockProvider,
    dir: tempfile::TempDir,
}

/// One client of each store (another call: other clients of the same stores).
async fn stores(dir: &std::path::Path) -> (LockProvider, LockProvider, LockProvider) {
    let redis = RedisServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let zk = ZkServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    (
        connect(&format!("file://{}", dir.display())).await.unwrap(),
        connect(&redis.url()).await.unwrap(),
        connect(&format!("zk://{}", zk.connect_string())).await.unwrap(),
    )
}

async fn open() -> Stores {
    let dir = tempfile::tempdir().unwrap();
    let (file, redis, zk) = stores(dir.path()).await;
    Stores { file, redis, zk, dir }
}

fn unique(what: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("multi-lock/{what}/{}-{nanos}", std::process::id())
}

fn names(locks: &MultiLock) -> Vec<(&'static str, String)> {
    locks.locks().iter().map(|lock: &LockHandle| (lock.backend_name(), lock.name().as_str().to_owned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_three_backends_are_taken_in_one_order_all_or_nothing() {
    let a = open().await;
    let name = unique("three");
    let given = [a.zk.lock(&name).unwrap(), a.redis.lock(&name).unwrap(), a.file.lock(&name).unwrap()];
    let locks = MultiLock::new(given).unwrap();
    let order: Vec<_> = names(&locks).into_iter().map(|(backend, _)| backend).collect();
    assert_eq!(order, ["file", "redis", "zk"], "ordered by backend, then address, then name");
    // The same name on three stores is three locks, each with its token.
    let guard = locks.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert_eq!(guard.tokens().count(), 3);
    assert!(guard.is_held());
    guard.release().await.unwrap();

    // Another client of the ZooKeeper store holds its lock: the set times out, and the file
    // and Redis locks it took first are free again when it returns.
    let (_, _, other_zk) = stores(a.dir.path()).await;
    let blocker = other_zk.lock(&name).unwrap().acquire().await.unwrap();
    let outcome = locks.acquire_timeout(Duration::from_millis(300)).await;
    assert!(matches!(&outcome, Err(Error::Timeout { backend: "zk", .. })), "{outcome:?}");
    assert!(a.file.inspect(&name).await.unwrap().is_idle());
    assert!(a.redis.inspect(&name).await.unwrap().is_idle());
    blocker.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_across_backends_do_not_deadlock() {
    let a = open().await;
    let (file, redis, zk) = stores(a.dir.path()).await;
    let name = unique("opposite");
    let forward =
        MultiLock::new([a.file.lock(&name).unwrap(), a.redis.lock(&name).unwrap(), a.zk.lock(&name).unwrap()]).unwrap();
    let backward =
        MultiLock::new([zk.lock(&name).unwrap(), redis.lock(&name).unwrap(), file.lock(&name).unwrap()]).unwrap();
    for round in 0..10 {
        let take = |locks: MultiLock| async move {
            let guard = locks.acquire().await?;
            tokio::task::yield_now().await;
            guard.release().await
        };
        let (x, y) = (tokio::spawn(take(forward.clone())), tokio::spawn(take(backward.clone())));
        let both = tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(x, y) }).await;
        let (x, y) = both.unwrap_or_else(|_| panic!("round {round}: the two multi-locks deadlocked"));
        x.unwrap().unwrap();
        y.unwrap().unwrap();
    }
}
