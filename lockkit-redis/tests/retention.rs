//! Fence counters expire once their lock is idle (`fence_retention`), and tokens never go back
//! when a counter is made again.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::keys::keys_under;
use support::{OPERATION, RedisHarness, eventually, test_builder, within};

/// The retention of these tests: the least the test lease allows (2 s plus the claim window)
/// and a little more.
const RETENTION: Duration = Duration::from_millis(2_500);

/// After 1,000 distinct locks are acquired and released once, the keys left fall to at most
/// 1 % of them within the retention (and a bound for a loaded machine); a lock held all the
/// while keeps its counter, which `inspect` reads as its token; and a lock used again after
/// its counter expired gets a token above its earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_counters_of_idle_locks_expire_and_tokens_never_go_back() {
    const LOCKS: usize = 1_000;
    let harness = RedisHarness::shared().await;
    let mut admin = harness.admin().await;
    let prefix = format!("retention-{}", uuid::Uuid::new_v4().simple());
    let provider = test_builder()
        .url(format!("redis://{}/", harness.upstream()))
        .key_prefix(&prefix)
        .fence_retention(RETENTION)
        .build()
        .unwrap();

    // Held for longer than the retention: its counter is renewed with it.
    let long = within(OPERATION, "the long hold", provider.lock("long").unwrap().acquire()).await.unwrap();
    let mut first_tokens = Vec::with_capacity(LOCKS);
    let started = Instant::now();
    let mut last_chunk = started;
    for chunk in (0..LOCKS).collect::<Vec<_>>().chunks(100) {
        last_chunk = Instant::now();
        let cycles = chunk.iter().map(|i| {
            let lock = provider.lock(&format!("orders/{i}")).unwrap();
            async move {
                let guard = lock.acquire().await.unwrap();
                let token = guard.token();
                guard.release().await.unwrap();
                token
            }
        });
        first_tokens
            .extend(within(OPERATION * 4, "100 acquire+release cycles", futures_util::future::join_all(cycles)).await);
    }
    let left = keys_under(&mut admin, &prefix).await;
    if started.elapsed() < RETENTION {
        assert!(left >= LOCKS, "each lock left its fence counter until the retention passes ({left} keys)");
    }

    // The long hold's record and counter stay; the rest must fall to 1 % of the locks.
    let most = LOCKS / 100 + 2;
    eventually(RETENTION + Duration::from_secs(10), "the idle locks' counters expiring", || {
        let mut admin = admin.clone();
        let prefix = prefix.clone();
        async move { keys_under(&mut admin, &prefix).await <= most }
    })
    .await;
    // Most of the last hundred counters are gone, and none was made before `last_chunk`.
    let since = last_chunk.elapsed();
    assert!(since + Duration::from_millis(50) >= RETENTION, "counters expired {since:?} after their grant");

    assert!(long.is_held(), "the long hold was renewed throughout");
    let info = provider.inspect("long").await.unwrap();
    let holder = info.holders.first().expect("the long hold is listed");
    assert_eq!(holder.token, long.token(), "the held lock's counter is still its token");
    long.release().await.unwrap();

    // A name whose counter expired starts above every token it had.
    let again = provider.lock("orders/0").unwrap().acquire().await.unwrap();
    assert!(again.token() > first_tokens[0], "{:?} after {:?}", again.token(), first_tokens[0]);
    again.release().await.unwrap();
}
