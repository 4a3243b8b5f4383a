//! The session's following of its holds on a real etcd member: the races between a deletion
//! and a hold's registration that the prefix watch alone cannot tell.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use etcd_client::PutOptions;
use lockkit_core::LockName;
use lockkit_core::config::StoreUrl;
use lockkit_testkit::fixture::EtcdServer;
use lockkit_testkit::wait::eventually;

use super::*;

const BOUND: Duration = Duration::from_secs(10);

/// A session on the shared member whose holds the prefix watch alone follows (a many-holds
/// threshold of one), under a prefix of its own; its provider id is `id`.
async fn session(id: &str) -> (Arc<Session>, String) {
    session_with(id, 1).await
}

/// A session that sets the prefix watch from `many_holds` holds.
async fn session_with(id: &str, many_holds: usize) -> (Arc<Session>, String) {
    let url = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let prefix = format!("session-test/{}", uuid::Uuid::new_v4().simple());
    let url = StoreUrl::parse(&format!("{url}/{prefix}?ttl=2s")).unwrap();
    let config =
        crate::EtcdLockProviderBuilder::from_url(&url).unwrap().many_holds_threshold(many_holds).config().unwrap();
    (Session::open(&config, id).await.unwrap(), prefix)
}

/// Puts `key` bound to the session's lease; the revision it was created at.
async fn put_own(session: &Session, key: &str) -> i64 {
    let lease = Some(PutOptions::new().with_lease(session.lease));
    let put = session.kv.clone().put(key.as_bytes(), "", lease).await.unwrap();
    put.header().unwrap().revision()
}

/// Deletes `key`; the revision of the deletion.
async fn delete(session: &Session, key: &str) -> i64 {
    session.kv.clone().delete(key.as_bytes(), None).await.unwrap().header().unwrap().revision()
}

/// Registers a hold of lock `name` on `key`, created at `revision`; its signal.
fn register(session: &Session, name: &str, key: &Arc<str>, revision: i64) -> HoldSignal {
    let signal = HoldSignal::new(crate::BACKEND, LockName::new(name).unwrap(), Some(session.valid_until()));
    assert!(session.register(&signal, key, revision));
    signal
}

/// Waits until `signal` is lost because its key is gone.
async fn lost(signal: &HoldSignal) {
    eventually(BOUND, "the hold is lost with its key gone", || async { signal.loss() == Some(LossReason::RecordGone) })
        .await;
}

/// Waits until the prefix watch handed on the deletion at `revision` of a key of the
/// provider's that no hold had.
async fn handed_on(session: &Session, revision: i64) {
    eventually(BOUND, "the prefix watch hands the deletion on", || async { session.state().unmatched >= revision })
        .await;
}

/// The race of a grant and a deletion: the key is deleted after the acquisition read it
/// (its grant decided) but before the hold registered, and the watch hands the deletion on
/// while the key is nobody's. The registration must bring a listing, which finds the key
/// gone: without it no listing is sent (the watch covers every hold) and the hold would
/// never hear of its loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_before_its_hold_registered_is_lost() {
    let id = "0123456789abcdef";
    let (session, prefix) = session(id).await;
    let covered = HoldCoverage { store_wide_watch: true, store_wide: 0, per_hold: 0 };
    assert_eq!(session.coverage(), covered);
    let key: Arc<str> = Arc::from(format!("{prefix}/name/{id}-0"));
    let revision = put_own(&session, &key).await;
    handed_on(&session, delete(&session, &key).await).await;
    lost(&register(&session, "name", &key, revision)).await;
}

/// A hold put after the deletions the watch handed on stays with the watch (no listing),
/// and only this provider's keys count as its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_put_after_the_deletions_stays_with_the_watch() {
    let id = "fedcba9876543210";
    let (session, prefix) = session(id).await;
    assert!(session.is_own(&format!("{prefix}/name/{id}-0")));
    assert!(session.is_own(&format!("{prefix}/a%2Fb/{id}-12")));
    assert!(!session.is_own(&format!("{prefix}/name/0123456789abcdef-0")));
    assert!(!session.is_own(&format!("{prefix}/name/{id}")));
    assert!(!session.is_own(&format!("{prefix}/{id}-0/other")));
    let key: Arc<str> = Arc::from(format!("{prefix}/name/{id}-0"));
    put_own(&session, &key).await;
    handed_on(&session, delete(&session, &key).await).await;
    let signal = register(&session, "name", &key, put_own(&session, &key).await);
    assert!(signal.is_held());
    let covered = HoldCoverage { store_wide_watch: true, store_wide: 1, per_hold: 0 };
    assert_eq!(session.coverage(), covered);
}

/// A key put before the prefix watch was created and deleted before it too (the watch never
/// hears of it), whose hold registers after the listing that followed the creation was
/// sent: the registration must bring another listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_before_the_watch_was_set_is_lost() {
    let id = "00112233445566ff";
    let (session, prefix) = session_with(id, 2).await;
    let late: Arc<str> = Arc::from(format!("{prefix}/late/{id}-0"));
    let late_revision = put_own(&session, &late).await;
    delete(&session, &late).await;
    let mut signals = Vec::new();
    for name in ["a", "b"] {
        let key: Arc<str> = Arc::from(format!("{prefix}/{name}/{id}-0"));
        let revision = put_own(&session, &key).await;
        signals.push(register(&session, name, &key, revision));
    }
    let covered = HoldCoverage { store_wide_watch: true, store_wide: 2, per_hold: 0 };
    eventually(BOUND, "the watch is set and a listing covers both holds", || async { session.coverage() == covered })
        .await;
    lost(&register(&session, "late", &late, late_revision)).await;
    assert!(signals.iter().all(HoldSignal::is_held), "the holds whose keys are there stay held");
}
