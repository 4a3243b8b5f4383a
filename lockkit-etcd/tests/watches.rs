//! The keys' names and the shared watches on a real member: acquisitions one after another
//! reuse one key name (no index entry left behind per acquisition), concurrent ones get their
//! own, a deletion while the watch stream is cut is still signalled, and a deletion heard by the
//! lock's watch (open for a wait) is signalled at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lockkit_core::{Error, LossReason};
use support::{EtcdHarness, test_builder, within};

fn fresh_name(what: &str) -> String {
    format!("watches/{what}/{}", uuid::Uuid::new_v4())
}

/// Acquisitions of one lock one after another on one provider write the same key name (its
/// slot is free again once the release deleted the key); a second acquisition while the first
/// holds gets another name; every name is under the lock's prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_one_after_another_reuse_one_key_name() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("names");
    let (a, _a_proxy) = h.client_with(test_builder()).await.unwrap();
    let lock = a.lock(&name).unwrap();
    let prefix = a.lock_prefix(&name).unwrap();
    let mut names = Vec::new();
    for _ in 0..3 {
        let guard = lock.acquire().await.unwrap();
        names.push(h.holder_key(&name).await.unwrap());
        guard.release().await.unwrap();
    }
    assert!(names[0].starts_with(prefix.as_bytes()), "{:?} under {prefix}", String::from_utf8_lossy(&names[0]));
    assert!(names.iter().all(|n| *n == names[0]), "one name: {names:?}");

    let first = lock.acquire().await.unwrap();
    let second_lock = lock.clone();
    let second = tokio::spawn(async move { second_lock.acquire().await });
    within(Duration::from_secs(5), "the second key", async {
        while h.keys_of(&name).await < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let keys = h.admin().await.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    let mut held: Vec<&[u8]> = keys.kvs().iter().map(etcd_client::KeyValue::key).collect();
    held.dedup();
    assert_eq!(held.len(), 2, "two acquisitions at once, two names");
    first.release().await.unwrap();
    let second = within(Duration::from_secs(5), "the second grant", second).await.unwrap().unwrap();
    h.release_leaving_no_key(second, &name).await;
}

/// The holder's connection is cut (its watch stream breaks with it) and its key deleted before
/// it reconnects: the session's check of its keys after the next keep-alive finds the key
/// gone, and the hold is signalled lost well before its lease could run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_while_the_watch_stream_is_cut_is_still_signalled() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("cut");
    let (a, a_proxy) = h.client_with(test_builder().ttl(Duration::from_secs(10))).await.unwrap();
    let guard = a.lock(&name).unwrap().acquire().await.unwrap();
    let key = h.holder_key(&name).await.unwrap();
    a_proxy.0.blackhole();
    a_proxy.0.cut_all();
    h.admin().await.delete(key, None).await.unwrap();
    a_proxy.0.heal();
    let reason = within(Duration::from_secs(6), "the loss", guard.lost()).await;
    assert_eq!(reason, LossReason::RecordGone);
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    let again = within(Duration::from_secs(5), "the next grant", a.lock(&name).unwrap().acquire()).await.unwrap();
    h.release_leaving_no_key(again, &name).await;
}

/// A provider whose acquisition waited on a lock keeps watching that lock's deletions for a
/// while: the deletion of its hold's key behind its back is then signalled at once, not at the
/// next check of its keys (every third of the TTL: 20 s here, against a bound of 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_heard_by_the_lock_s_watch_is_signalled_at_once() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("heard");
    let (a, _a_proxy) = h.client_with(test_builder().ttl(Duration::from_secs(60))).await.unwrap();
    let lock = a.lock(&name).unwrap();
    let first = lock.acquire().await.unwrap();
    // A second acquisition of the same provider waits behind the first, which opens the
    // lock's watch; once it is granted, the watch exists and is kept (until two sweeps, 40 s,
    // find it unused).
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    within(Duration::from_secs(5), "the waiter's key", async {
        while h.keys_of(&name).await < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    first.release().await.unwrap();
    let guard = within(Duration::from_secs(5), "the waiter's grant", waiter).await.unwrap().unwrap();
    let key = h.holder_key(&name).await.unwrap();
    h.admin().await.delete(key, None).await.unwrap();
    let reason = within(Duration::from_secs(2), "the loss", guard.lost()).await;
    assert_eq!(reason, LossReason::RecordGone);
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    assert_eq!(h.keys_of(&name).await, 0);
}
