//! The orphan of the etcd chaos runs (issue 33), reproduced without chance: a key under a
//! lock's prefix that no hold or acquisition owns, bound to a live provider's lease (which the
//! provider's other holds keep alive), so the lock stays blocked for as long as the provider
//! lives.
//!
//! How it comes about: a try of an acquisition is sent into a silent network and times out,
//! so its outcome is unknown (a try in doubt), and the acquisition goes on with a next try,
//! which is granted. The first try's bytes were only held, not lost: a blackholed link that
//! heals delivers them, and the cancellation of the timed-out request may come too late to
//! stop etcd from applying it. When that late put lands after the hold's key was deleted (the
//! release, a break, an expiry), its condition (the key absent) holds again, and it puts the
//! key back, bound to the provider's lease. The cluster run has every fault for it: a
//! blackholed link per member, leader kills, heals. The test below makes the late put land at
//! the worst moment on purpose: it replays the first try's transaction, as that try sent it,
//! right after the release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lockkit_core::backend::OwnerMeta;
use lockkit_etcd::DEFAULT_PREFIX;
use support::{EtcdHarness, TIMEOUT, test_builder, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_put_of_a_try_in_doubt_leaves_no_key_behind() {
    let harness = EtcdHarness::shared().await;
    let (provider, faults) = harness.client_with(test_builder()).await.unwrap();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let name = format!("late-put/{nanos}");
    let lock = provider.lock(&name).unwrap();
    // The provider's session is up before the network goes silent.
    let lease = provider.lease_id().await.unwrap();

    // The first try goes into a silent network and times out: its outcome is unknown.
    faults.0.blackhole();
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(TIMEOUT + Duration::from_millis(500)).await;
    // What the silent link held is dropped (the late put is replayed below instead, at the
    // moment that matters), and a next try on a new connection is granted.
    faults.0.cut_all();
    faults.0.heal();
    let guard = within(Duration::from_secs(15), "the next try is granted", acquiring).await.unwrap().unwrap();

    // The try's transaction, as every try of the attempt sends it: put the own key (the same
    // name and value for every try) if absent, unless the attempt was voided.
    let mut admin = harness.admin().await;
    let prefix = provider.lock_prefix(&name).unwrap();
    let held = admin.get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await.unwrap();
    let [own] = held.kvs() else { panic!("one key under {prefix}: {:?}", held.kvs()) };
    assert_eq!(own.lease(), lease, "the hold's key is bound to the provider's lease");
    let (key, value) = (own.key().to_vec(), own.value().to_vec());
    let attempt = OwnerMeta::decode(own.value_str().unwrap()).unwrap().attempt;
    let void_key = format!("{DEFAULT_PREFIX}/%void/{attempt}");
    guard.release().await.unwrap();

    // The first try's put lands now, after the release.
    let late = Txn::new()
        .when([
            Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Compare::version(void_key, CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))]);
    let landed = admin.txn(late).await.unwrap().succeeded();

    let left = admin.get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await.unwrap();
    assert!(
        !landed && left.kvs().is_empty(),
        "the late put of the try in doubt was refused (landed: {landed}); keys left under the lock: {:?}",
        left.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect::<Vec<_>>()
    );
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    let taken = other.lock(&name).unwrap().try_acquire().await.unwrap();
    assert!(taken.is_some(), "another client takes the lock");
}
