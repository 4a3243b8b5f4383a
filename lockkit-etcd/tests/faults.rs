//! etcd-specific fault cases on a real member: the lease revoked and the own key deleted
//! behind the holder, the member paused beyond the TTL, a restart, and bad endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use lockkit_core::{Error, LossReason};
use support::{EtcdHarness, TTL, test_builder, within};

fn fresh_name(what: &str) -> String {
    format!("faults/{what}/{}", uuid::Uuid::new_v4())
}

/// The provider's lease is revoked by an administrator: the hold is lost at once (its key went
/// with the lease), its release says so, another client acquires, and the provider grants
/// a new lease for its next acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_revoked_behind_the_holder_is_a_loss() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("revoked");
    let (a, _a_proxy) = h.client_with(test_builder()).await.unwrap();
    let (b, _b_proxy) = h.client_with(test_builder()).await.unwrap();
    let guard = a.lock(&name).unwrap().acquire().await.unwrap();
    let lease = a.lease_id().await.unwrap();
    h.admin().await.lease_revoke(lease).await.unwrap();
    let reason = within(Duration::from_secs(3), "the loss", guard.lost()).await;
    assert!(matches!(reason, LossReason::RecordGone | LossReason::SessionExpired), "{reason}");
    assert!(!guard.is_held());
    let b_guard = within(Duration::from_secs(3), "b's grant", b.lock(&name).unwrap().acquire()).await.unwrap();
    assert!(b_guard.token() > guard.token());
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    assert!(b_guard.is_held(), "a's release left b's hold alone");
    b_guard.release().await.unwrap();
    let again = within(Duration::from_secs(5), "a's next grant", a.lock(&name).unwrap().acquire()).await.unwrap();
    assert_ne!(a.lease_id().await.unwrap(), lease, "a new lease");
    h.release_leaving_no_key(again, &name).await;
}

/// The holder's own key is deleted behind its back: the loss is signalled by the session's
/// check of its keys after the next keep-alive,
/// release says `LockLost`, and a later holder's key is untouched by that release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_key_deleted_behind_the_holder_is_signalled() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("deleted");
    let (a, _a_proxy) = h.client_with(test_builder()).await.unwrap();
    let (b, _b_proxy) = h.client_with(test_builder()).await.unwrap();
    let guard = a.lock(&name).unwrap().acquire().await.unwrap();
    let key = h.holder_key(&name).await.unwrap();
    h.admin().await.delete(key, None).await.unwrap();
    let reason = within(Duration::from_secs(2), "the loss", guard.lost()).await;
    assert_eq!(reason, LossReason::RecordGone);
    let b_guard = b.lock(&name).unwrap().try_acquire().await.unwrap().expect("free after the delete");
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    assert_eq!(h.keys_of(&name).await, 1, "b's key stays");
    h.release_leaving_no_key(b_guard, &name).await;
}

/// The member is paused (SIGSTOP) beyond the TTL: the holder is signalled lost by its local
/// deadline while the member is still paused, so before anyone else can be granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_paused_beyond_the_ttl_loses_the_hold_before_another_is_granted() {
    let h = EtcdHarness::dedicated().await;
    let name = fresh_name("paused");
    let (a, _a_proxy) = h.client_with(test_builder()).await.unwrap();
    let (b, _b_proxy) = h.client_with(test_builder()).await.unwrap();
    b.lease_id().await.unwrap();
    let guard = a.lock(&name).unwrap().acquire().await.unwrap();
    let server = h.server().unwrap().clone();
    server.lock().await.pause().unwrap();
    let paused_at = Instant::now();
    let reason = within(TTL * 2, "the loss during the pause", guard.lost()).await;
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::DeadlineExpired);
    assert!(lost_at - paused_at <= TTL, "lost {:?} into the pause", lost_at - paused_at);
    // Keep it paused past the TTL, then let it go: only then can b be granted.
    tokio::time::sleep_until((paused_at + TTL + Duration::from_millis(500)).into()).await;
    server.lock().await.resume().unwrap();
    let b_guard = within(TTL * 5, "b's grant", async {
        loop {
            match b.lock(&name).unwrap().acquire_timeout(Duration::from_secs(2)).await {
                Ok(guard) => break guard,
                Err(error) => assert!(error.is_retryable() || error.is_timeout(), "{error}"),
            }
        }
    })
    .await;
    assert!(lost_at < Instant::now());
    assert!(b_guard.token() > guard.token());
    assert!(guard.release().await.is_err());
    b_guard.release().await.unwrap();
}

/// A restart of the member keeps its data: tokens keep increasing across it, and the
/// provider reconnects (with a new lease when the old one expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_across_a_restart() {
    let h = EtcdHarness::dedicated().await;
    let name = fresh_name("restart");
    let (a, _a_proxy) = h.client_with(test_builder()).await.unwrap();
    let lock = a.lock(&name).unwrap();
    let first = lock.acquire().await.unwrap();
    let before = first.token();
    first.release().await.unwrap();
    h.server().unwrap().lock().await.restart().await.unwrap();
    let second = within(Duration::from_secs(15), "a grant after the restart", async {
        loop {
            match lock.acquire_timeout(Duration::from_secs(2)).await {
                Ok(guard) => break guard,
                Err(error) => assert!(error.is_retryable() || error.is_timeout(), "{error}"),
            }
        }
    })
    .await;
    assert!(second.token() > before, "{} after {before}", second.token());
    second.release().await.unwrap();
}

/// A closed port and an endpoint that does not speak etcd's protocol are clear connection
/// errors when the provider connects, never a panic or a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_non_etcd_endpoints_are_clear_errors() {
    let closed = support::closed_port();
    let error = within(
        Duration::from_secs(5),
        "the refusal",
        lockkit_etcd::EtcdLockProvider::connect(&format!("etcd://{closed}?connect_timeout=1s")),
    )
    .await
    .unwrap_err();
    assert!(error.is_connect(), "{error}");
    // Something that accepts connections and answers garbage.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\nnot etcd\r\n").await;
            });
        }
    });
    let error = within(
        Duration::from_secs(5),
        "the refusal",
        lockkit_etcd::EtcdLockProvider::connect(&format!("etcd://{addr}?connect_timeout=1s")),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, Error::Connection { .. } | Error::Backend { .. }), "{error}");
    assert!(error.to_string().contains("etcd"), "{error}");
}

/// The reply of the put is lost (it comes after the client gave up on it): the retry finds
/// its own key (its name stays the acquisition's until the key is gone, and its value holds the
/// attempt id), so the lock is granted once and no second key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_reply_finds_its_own_key() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("lost-reply");
    let (a, a_proxy) = h.client_with(test_builder().ttl(Duration::from_secs(6))).await.unwrap();
    a.lease_id().await.unwrap();
    // 700 ms each way: the put reaches the member, its reply comes after the 1 s request timeout.
    a_proxy.0.set_latency(Duration::from_millis(700));
    let lock = a.lock(&name).unwrap();
    let started = Instant::now();
    let acquiring = tokio::spawn(async move {
        let guard = lock.acquire_timeout(Duration::from_secs(20)).await;
        (guard, started.elapsed())
    });
    let wait_for_put = async {
        while h.keys_of(&name).await == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    within(Duration::from_secs(3), "the first put reaching the member", wait_for_put).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    a_proxy.0.set_latency(Duration::ZERO);
    let (guard, took) = within(Duration::from_secs(20), "the grant", acquiring).await.unwrap();
    let guard = guard.unwrap();
    // A round trip of 1.4 s outlives the 1 s request timeout: the first reply was given up on.
    assert!(took > Duration::from_millis(1400), "granted after {took:?}, so the first reply was not lost");
    assert_eq!(h.keys_of(&name).await, 1, "one key: the retry found the first");
    h.release_leaving_no_key(guard, &name).await;
}

/// A put held by a partition and delivered after its acquisition gave up is refused: the give
/// up writes the attempt's void key with the delete of its key, so no key is left bound to the
/// provider's lease (which the provider keeps alive) whichever order the member applies the
/// late put and the give-up in.
#[tokio::test]
async fn a_put_delivered_after_its_acquisition_gave_up_leaves_no_key() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("late-put");
    let (holder, _holder_proxy) = h.client_with(test_builder().ttl(Duration::from_secs(6))).await.unwrap();
    let held = holder.lock(&name).unwrap().acquire().await.unwrap();
    let (a, a_proxy) = h.client_with(test_builder().ttl(Duration::from_secs(6))).await.unwrap();
    a.lease_id().await.unwrap();

    a_proxy.0.blackhole();
    let gave_up = a.lock(&name).unwrap().acquire_timeout(Duration::from_millis(1500)).await;
    assert!(gave_up.is_err(), "no grant through the partition: {gave_up:?}");
    // Free the lock: a late put that landed now would hold it, bound to a's live lease.
    held.release().await.unwrap();
    a_proxy.0.heal();

    let lock_prefix = test_builder().endpoints("unused:1").build().unwrap().lock_prefix(&name).unwrap();
    let base = lock_prefix.trim_end_matches('/').rsplit_once('/').map(|(base, _)| base.to_owned()).unwrap();
    let voided = async {
        let admin = h.admin().await;
        loop {
            let options = etcd_client::GetOptions::new().with_prefix().with_count_only();
            let reply = admin.clone().get(format!("{base}/%void/"), Some(options)).await.unwrap();
            if reply.count() > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(Duration::from_secs(15), "the attempt voided once the partition healed", voided).await;
    assert_eq!(h.keys_of(&name).await, 0, "no key of the given-up attempt is left");
    let again = a.lock(&name).unwrap().acquire_timeout(Duration::from_secs(5)).await.unwrap();
    again.release().await.unwrap();
}
