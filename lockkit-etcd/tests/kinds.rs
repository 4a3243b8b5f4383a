//! etcd-specific cases of the shared kinds on a real member, beside the kit's: what a key's
//! value says, the downgrade in place (same key, create revision and lease), a mutex key of an
//! earlier release read as a writer, `inspect` of shared holds, the conflict's words, and a
//! broken reader's key gone while the other reader's key stays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions, SortOrder, SortTarget};
use lockkit_core::backend::OwnerMeta;
use lockkit_core::{Error, HoldKind};
use support::{EtcdHarness, test_builder, within};

fn fresh_name(what: &str) -> String {
    format!("kinds/{what}/{}", uuid::Uuid::new_v4())
}

/// Every key under lock `name`'s prefix in queue order: (value, create revision, lease).
async fn queue(h: &EtcdHarness, name: &str) -> Vec<(String, i64, i64)> {
    let prefix = test_builder().endpoints("unused:1").build().unwrap().lock_prefix(name).unwrap();
    let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let reply = h.admin().await.get(prefix, Some(options)).await.unwrap();
    reply.kvs().iter().map(|kv| (kv.value_str().unwrap().to_owned(), kv.create_revision(), kv.lease())).collect()
}

/// A write hold's key says `kind=write`; releasing its write guard under a live read rewrites
/// the same key's value to `kind=read`, keeping its create revision (the token) and its
/// lease; the owner line stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_rewrites_the_own_key_in_place() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("downgrade");
    let (a, _proxy) = h.client_with(test_builder()).await.unwrap();
    let write = a.rw_lock(&name).unwrap().write().await.unwrap();
    let before = queue(&h, &name).await;
    assert_eq!(before.len(), 1);
    assert!(before[0].0.ends_with(" kind=write"), "{before:?}");
    assert!(OwnerMeta::decode(&before[0].0).is_some());
    let read = write.read().unwrap();
    write.release().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let after = loop {
        let now = queue(&h, &name).await;
        if now.first().is_some_and(|(value, ..)| value.ends_with(" kind=read")) || Instant::now() >= deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].0.ends_with(" kind=read"), "the downgrade landed: {after:?}");
    assert_eq!((after[0].1, after[0].2), (before[0].1, before[0].2), "same create revision and lease");
    assert_eq!(read.token().get(), u64::try_from(before[0].1).unwrap());
    h.release_leaving_no_key(read, &name).await;
}

/// A key with a bare owner line (what every mutex key writes, and all keys of the first
/// landing) counts as a writer: a reader waits behind it and is granted when it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_mutex_key_excludes_readers() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("bare");
    let (a, _proxy) = h.client_with(test_builder()).await.unwrap();
    let mut admin = h.admin().await;
    let lease = admin.lease_grant(30, None).await.unwrap().id();
    let prefix = a.lock_prefix(&name).unwrap();
    let key = format!("{prefix}{}", uuid::Uuid::new_v4());
    let owner = OwnerMeta::current(uuid::Uuid::new_v4()).encode();
    admin.put(key.clone(), owner, Some(PutOptions::new().with_lease(lease))).await.unwrap();
    let reader = a.rw_lock(&name).unwrap();
    assert!(reader.try_read().await.unwrap().is_none(), "no read beside a mutex key");
    let waiting = tokio::spawn(async move { reader.read().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the reader waits");
    admin.delete(key, None).await.unwrap();
    let guard = within(Duration::from_secs(3), "the reader's grant", waiting).await.unwrap().unwrap();
    guard.release().await.unwrap();
    let _ = admin.lease_revoke(lease).await;
}

/// `inspect` shows every reader with its kind and counts the writer queued behind them; a
/// semaphore's holders are shown as permits of their count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_shared_holders_with_their_kind() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("inspect");
    let (a, _pa) = h.client_with(test_builder()).await.unwrap();
    let (b, _pb) = h.client_with(test_builder()).await.unwrap();
    let r1 = a.rw_lock(&name).unwrap().read().await.unwrap();
    let r2 = b.rw_lock(&name).unwrap().read().await.unwrap();
    let writer = a.rw_lock(&name).unwrap();
    let waiting = tokio::spawn(async move { writer.write().await });
    let deadline = Instant::now() + Duration::from_secs(3);
    let info = loop {
        let info = b.inspect(&name).await.unwrap();
        if info.waiters == Some(1) || Instant::now() >= deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(info.waiters, Some(1), "{info:?}");
    let tokens: Vec<_> = info.holders.iter().map(|held| held.token).collect();
    assert_eq!(tokens, [r1.token(), r2.token()]);
    assert!(info.holders.iter().all(|held| held.kind == HoldKind::Read), "{info:?}");
    assert!(info.holders.iter().all(|held| held.lease_left.is_some() && held.since.is_some()), "{info:?}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    within(Duration::from_secs(3), "the writer's grant", waiting).await.unwrap().unwrap().release().await.unwrap();

    let sem = fresh_name("inspect-sem");
    let p1 = a.semaphore(&sem, 2).unwrap().acquire().await.unwrap();
    let info = b.inspect(&sem).await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert!(matches!(info.holders[0].kind, HoldKind::Permit { permits } if permits.get() == 2), "{info:?}");
    p1.release().await.unwrap();
}

/// A handle of another permit count, and a mutex of a semaphore's name, get `Conflict` in the
/// words of the other backends, and leave no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_use_of_a_name_is_a_conflict_that_says_what_to_change() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("conflict");
    let (a, _pa) = h.client_with(test_builder()).await.unwrap();
    let (b, _pb) = h.client_with(test_builder()).await.unwrap();
    let permit = a.semaphore(&name, 2).unwrap().acquire().await.unwrap();
    let other_count = b.semaphore(&name, 3).unwrap().acquire_timeout(Duration::from_secs(2)).await;
    match other_count {
        Err(Error::Conflict { what, .. }) => {
            assert!(what.contains("in use with 2 permits") && what.contains("asks for 3"), "{what}");
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    match b.lock(&name).unwrap().acquire_timeout(Duration::from_secs(2)).await {
        Err(Error::Conflict { what, .. }) => assert!(what.contains("semaphore of 2 permits"), "{what}"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    match b.lock(&name).unwrap().try_acquire().await {
        Err(Error::Conflict { .. }) => {}
        other => panic!("expected Conflict from try_acquire, got {other:?}"),
    }
    assert_eq!(h.keys_of(&name).await, 1, "only the permit's key");
    h.release_leaving_no_key(permit, &name).await;
}

/// Breaking a read-write lock held by two readers deletes both readers' keys, leaves the
/// key of the writer queued behind them, and that writer is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaking_readers_spares_the_queued_writer() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("break");
    let (a, _pa) = h.client_with(test_builder()).await.unwrap();
    let (b, _pb) = h.client_with(test_builder()).await.unwrap();
    let r1 = a.rw_lock(&name).unwrap().read().await.unwrap();
    let r2 = b.rw_lock(&name).unwrap().read().await.unwrap();
    let writer = b.rw_lock(&name).unwrap();
    let waiting = tokio::spawn(async move { writer.write().await });
    let deadline = Instant::now() + Duration::from_secs(3);
    while h.keys_of(&name).await < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let broken = a.break_lock(&name).await.unwrap();
    let mut tokens: Vec<_> = broken.iter().map(|held| held.token).collect();
    tokens.sort();
    assert_eq!(tokens, [r1.token(), r2.token()]);
    let write = within(Duration::from_secs(3), "the writer's grant", waiting).await.unwrap().unwrap();
    assert!(write.token() > r2.token());
    within(Duration::from_secs(3), "r1's loss", r1.lost()).await;
    within(Duration::from_secs(3), "r2's loss", r2.lost()).await;
    assert_eq!(h.keys_of(&name).await, 1, "the writer's key only");
    write.release().await.unwrap();
}
