//! A provider with many holds (1,000 or more) watches the deletions under its whole prefix
//! instead of listing its holds' keys after each keep-alive: a key deleted behind a hold's
//! back is signalled at once, long before the next listing could find it, whether the hold
//! was granted before or after the watch was set; a deletion made while the watch's stream is
//! cut is found by the listing that a new watch needs, after which the watch alone follows the
//! holds again (`hold_coverage`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{LockGuard, LossReason};
use lockkit_etcd::{EtcdLockProvider, HoldCoverage};
use lockkit_testkit::holds::{hold_all, release_all};
use lockkit_testkit::wait::eventually;
use support::{EtcdHarness, ProxyFaults, TIMEOUT, within};

/// A lease long enough that the listing after a keep-alive (every third of it) cannot explain
/// a loss seen within a few seconds.
const LONG_TTL: Duration = Duration::from_secs(30);

/// A provider with a lease of [`LONG_TTL`], behind a proxy of its own.
async fn long_lease_client(h: &EtcdHarness) -> (EtcdLockProvider, Arc<ProxyFaults>) {
    h.client_with(EtcdLockProvider::builder().ttl(LONG_TTL).connect_timeout(TIMEOUT)).await.unwrap()
}

/// The default threshold of the prefix watch.
const MANY_HOLDS: usize = 1000;

/// Holds of `count` locks on `provider`, named under a fresh prefix, those past the threshold
/// taken once the prefix watch is set: their names and guards.
async fn hold_many(provider: &EtcdLockProvider, what: &str, count: usize) -> (Vec<String>, Vec<LockGuard>) {
    let base = format!("prefix-watch/{what}/{}", uuid::Uuid::new_v4().simple());
    let names: Vec<String> = (0..count).map(|i| format!("{base}/{i}")).collect();
    let (first, last) = names.split_at(MANY_HOLDS);
    let mut guards = hold_all(provider, first).await;
    eventually(TIMEOUT * 5, "the prefix watch is set", || async { provider.hold_coverage().store_wide_watch }).await;
    guards.extend(hold_all(provider, last).await);
    (names, guards)
}

/// Waits until the prefix watch alone follows every hold of `provider` (the listing that its
/// watch needs once found the holds granted before it): `holds` of them, and none listed.
async fn covered_by_the_watch(provider: &EtcdLockProvider, holds: usize) {
    let covered = HoldCoverage { store_wide_watch: true, store_wide: holds, per_hold: 0 };
    eventually(LONG_TTL / 3 + Duration::from_secs(5), "the prefix watch alone follows every hold", || async {
        provider.hold_coverage() == covered
    })
    .await;
}

/// Releases `guards`, the holds of `names` (those at the indices `lost` were lost), and checks
/// that no key is left behind (on a sample of the names).
async fn release_all_leaving_no_key(h: &EtcdHarness, names: &[String], guards: Vec<LockGuard>, lost: &[usize]) {
    release_all(guards, lost).await;
    for name in names.iter().step_by(97) {
        assert_eq!(h.keys_of(name).await, 0, "{name} left a key behind");
    }
}

/// 1,200 holds with a 30 s lease; the keys of one hold granted before the watch was set and of
/// one granted after are deleted by an administrator: both holds are lost within 3 s, no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_among_many_holds_is_signalled_at_once() {
    let h = EtcdHarness::shared().await;
    let (a, _proxy) = long_lease_client(&h).await;
    let (names, guards) = hold_many(&a, "many", 1200).await;
    let victims = [5, 1150];
    for victim in victims {
        h.delete_holder_key(&names[victim]).await;
        let reason = within(Duration::from_secs(3), "the loss", guards[victim].lost()).await;
        assert_eq!(reason, LossReason::RecordGone, "hold {victim}");
    }
    for (i, guard) in guards.iter().enumerate() {
        assert_eq!(guard.is_held(), !victims.contains(&i), "hold {i}: {:?}", guard.watcher().loss());
    }
    let coverage = a.hold_coverage();
    assert!(coverage.store_wide_watch, "{coverage:?}");
    assert_eq!(coverage.store_wide + coverage.per_hold, guards.len(), "{coverage:?}");
    release_all_leaving_no_key(&h, &names, guards, &victims).await;
}

/// The same provider's connection is cut while a hold's key is deleted: the watch ends with its
/// stream, and the listing that the next watch needs finds the deletion (within a third of the
/// lease and a round trip); the other holds are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_while_the_stream_was_cut_is_found() {
    let h = EtcdHarness::shared().await;
    let (a, proxy) = long_lease_client(&h).await;
    let (names, guards) = hold_many(&a, "cut", 1100).await;
    let victim = 1050;
    proxy.proxy().blackhole();
    h.delete_holder_key(&names[victim]).await;
    proxy.proxy().cut_all();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.proxy().heal();
    let reason = within(LONG_TTL / 3 + Duration::from_secs(5), "the loss", guards[victim].lost()).await;
    assert_eq!(reason, LossReason::RecordGone);
    for (i, guard) in guards.iter().enumerate() {
        assert_eq!(guard.is_held(), i != victim, "hold {i}: {:?}", guard.watcher().loss());
    }
    covered_by_the_watch(&a, guards.len()).await;
    release_all_leaving_no_key(&h, &names, guards, &[victim]).await;
}
