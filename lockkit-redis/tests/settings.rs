//! Connection settings on a real server: ACL users, databases, key prefixes.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use lockkit_core::{Error, LockName};
use lockkit_redis::RedisLockProvider;
use support::{RedisHarness, wait_for_subscriber};

fn unique(case: &str) -> String {
    format!("settings/{case}/{}", uuid::Uuid::new_v4().simple())
}

/// An ACL user limited to lockkit's keys and channels can do everything; a wrong password
/// is a clear error, not a retryable one, and never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_limited_to_lockkit_keys_works_and_bad_passwords_are_refused() {
    let harness = RedisHarness::dedicated_with(lockkit_testkit::fixture::Persistence::None).await;
    let mut admin = harness.admin().await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">s3cret", "resetkeys", "~app:*", "resetchannels", "&app:*", "-@all"])
        .arg(lockkit_redis::ACL_COMMANDS.split_whitespace().collect::<Vec<_>>())
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://locker:s3cret@{}/", harness.upstream());
    let provider = RedisLockProvider::builder().url(&url).key_prefix("app").build().unwrap();
    let name = unique("acl");
    let lock = provider.lock(&name).unwrap();
    let guard = lock.acquire().await.unwrap();
    let waiter = provider.clone();
    let waiting = tokio::spawn({
        let name = name.clone();
        async move { RedisLockProvider::clone(&waiter).lock(&name).unwrap().acquire_timeout(Duration::from_secs(5)).await }
    });
    // Release only once the waiter listens, so that the pub/sub wake-up is what it gets.
    wait_for_subscriber(&mut admin, "app:wake:*").await;
    guard.release().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    second.release().await.unwrap();
    // Every kind, contended so that every script runs (the queue, the hand-over, the
    // downgrade), stays within the commands ACL_COMMANDS names.
    let rw = provider.rw_lock(&name).unwrap();
    let write = rw.write().await.unwrap();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read_timeout(Duration::from_secs(5)).await })
        })
        .collect();
    let read = write.read().unwrap();
    write.release().await.unwrap();
    for reader in readers {
        reader.await.unwrap().unwrap().release().await.unwrap();
    }
    read.release().await.unwrap();
    let permits = provider.semaphore(&unique("acl_semaphore"), 1).unwrap();
    let permit = permits.acquire().await.unwrap();
    let waiting = tokio::spawn({
        let permits = permits.clone();
        async move { permits.acquire_timeout(Duration::from_secs(5)).await }
    });
    while provider.inspect(permits.name().as_str()).await.unwrap().waiters != Some(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    permit.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    // An election: a leader, a queued candidate, an observer (the journal's scripts).
    let election = provider.election(&unique("acl_election")).unwrap();
    let mut observer = election.observe().unwrap();
    assert_eq!(observer.next().await.unwrap().unwrap(), lockkit_core::LeaderEvent::Vacant);
    let leadership = election.campaign("first").await.unwrap();
    let next = tokio::spawn({
        let election = election.clone();
        async move { election.campaign_timeout("second", Duration::from_secs(5)).await }
    });
    while provider.inspect(election.name().as_str()).await.unwrap().waiters != Some(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(observer.next().await, Some(Ok(lockkit_core::LeaderEvent::Elected(_)))));
    leadership.resign().await.unwrap();
    next.await.unwrap().unwrap().resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    // Breaking a held lock with a waiter queued (break.lua and its hand-over) too.
    let stuck_name = unique("acl_break");
    let stuck = provider.lock(&stuck_name).unwrap().acquire().await.unwrap();
    let queued = tokio::spawn({
        let (provider, name) = (provider.clone(), stuck_name.clone());
        async move { provider.lock(&name).unwrap().acquire_timeout(Duration::from_secs(5)).await }
    });
    while provider.inspect(&stuck_name).await.unwrap().waiters != Some(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let broken = provider.break_lock(&stuck_name).await.unwrap();
    assert_eq!(broken.iter().map(|held| held.token).collect::<Vec<_>>(), [stuck.token()]);
    let next = queued.await.unwrap().unwrap();
    assert!(next.token() > stuck.token());
    drop(stuck);
    next.release().await.unwrap();

    let wrong =
        RedisLockProvider::builder().url(format!("redis://locker:wrong@{}/", harness.upstream())).build().unwrap();
    let error = tokio::time::timeout(Duration::from_secs(5), wrong.lock(&name).unwrap().try_acquire())
        .await
        .expect("a bad password fails fast")
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("redis") && message.contains(&name), "{message}");
    assert!(matches!(error, Error::Backend { .. }), "a bad password is not retryable: {error:?}");
}

/// A database number in the URL is honoured, and so is the key prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_and_prefix_are_honoured() {
    let harness = RedisHarness::shared().await;
    let url = format!("redis://{}/5", harness.upstream());
    let provider = RedisLockProvider::builder().url(&url).key_prefix("billing").build().unwrap();
    let name = unique("db");
    let guard = provider.lock(&name).unwrap().acquire().await.unwrap();
    let key = provider.record_key(&LockName::new(&name).unwrap());
    assert!(key.starts_with("billing:{settings/db/"), "{key}");
    let mut admin = harness.admin().await;
    let _: () = redis::cmd("SELECT").arg(5).query_async(&mut admin).await.unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut admin).await.unwrap();
    assert_eq!(exists, 1, "the record lives in database 5");
    let holder = provider.inspect(&name).await.unwrap().holder().cloned().unwrap();
    assert_eq!(holder.token, guard.token());
    assert!(holder.owner.contains(&format!("pid {}", std::process::id())), "who holds it: {}", holder.owner);
    assert!(holder.since.is_some() && holder.lease_left.is_some());
    guard.release().await.unwrap();
}

/// Dropping a provider closes its connections: the command connection and the pub/sub
/// connection of its waiters, with no task left holding them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_provider_closes_its_connections() {
    let harness = RedisHarness::dedicated_with(lockkit_testkit::fixture::Persistence::None).await;
    let mut admin = harness.admin().await;
    let url = format!("redis://{}/", harness.upstream());
    let clients = |mut admin: redis::aio::MultiplexedConnection| async move {
        let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut admin).await.unwrap();
        list.lines().count()
    };
    let baseline = clients(admin.clone()).await;
    {
        let holder = RedisLockProvider::builder().url(&url).build().unwrap();
        let waiter = RedisLockProvider::builder().url(&url).build().unwrap();
        let name = unique("drop");
        let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
        // The waiter times out after subscribing: both its connections are open.
        let waited = waiter.lock(&name).unwrap().acquire_timeout(Duration::from_millis(200)).await;
        assert!(matches!(waited, Err(Error::Timeout { .. })));
        assert!(clients(admin.clone()).await >= baseline + 3, "holder: 1 connection, waiter: 2");
        guard.release().await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while clients(admin.clone()).await > baseline {
        if std::time::Instant::now() >= deadline {
            let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut admin).await.unwrap();
            panic!(
                "connections of the dropped providers are still open:
{list}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _: () = redis::cmd("PING").query_async(&mut admin).await.unwrap();
}

/// The messages of an error and its sources, outermost first.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut lines = vec![error.to_string()];
    let mut next = error.source();
    while let Some(source) = next {
        lines.push(source.to_string());
        next = source.source();
    }
    lines
}

/// Whether some error in the chain is the Redis client's own, kept typed.
fn has_redis_source(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.downcast_ref::<redis::RedisError>().is_some() {
            return true;
        }
        next = error.source();
    }
    false
}

/// `connect` is eager and reads the URL's options; through the scheme table it is the same.
/// A server that does not answer is a retryable connection error that names the server and
/// never the password, and so are the errors of a lazy provider's operations, with the
/// client's error kept typed as their source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reads_the_url_and_errors_name_the_server_without_credentials() {
    let harness = RedisHarness::shared().await;
    let url = format!("redis://{}/4?lease=5s&key_prefix=connected&fair=false", harness.upstream());
    let provider = RedisLockProvider::connect(&url).await.unwrap();
    assert_eq!((provider.lease(), provider.key_prefix()), (Duration::from_secs(5), "connected"));
    assert!(!provider.capabilities().fair);
    let guard = provider.lock(&unique("connect")).unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    lockkit_core::config::register(lockkit_redis::SCHEME);
    let via_table = lockkit_core::config::connect(&format!("redis://{}/?lease=5s", harness.upstream())).await.unwrap();
    assert_eq!(via_table.backend_name(), "redis");
    via_table.lock(&unique("scheme")).unwrap().acquire().await.unwrap().release().await.unwrap();

    let closed = support::closed_port();
    let address = format!("redis://{closed}/0");
    let refused = RedisLockProvider::connect(&format!("redis://app:s3cret@{closed}/0?lease=5s")).await.unwrap_err();
    let lines = chain(&refused);
    assert!(refused.is_connect() && refused.is_retryable(), "{lines:?}");
    assert!(lines[0].contains(&address), "the server is named: {lines:?}");
    assert!(!lines.iter().any(|line| line.contains("s3cret")), "the password is not: {lines:?}");
    assert!(has_redis_source(&refused), "the client's error is the typed source: {lines:?}");

    let lazy = RedisLockProvider::builder().url(format!("redis://app:s3cret@{closed}/0")).build().unwrap();
    let lock = lazy.lock("settings/unreachable").unwrap();
    let error = lock.try_acquire().await.unwrap_err();
    assert!(error.is_connect() && chain(&error)[0].contains(&address), "{:?}", chain(&error));
    let timeout = lock.acquire_timeout(Duration::from_millis(300)).await.unwrap_err();
    let lines = chain(&timeout);
    assert!(timeout.is_connect() && timeout.is_retryable(), "{lines:?}");
    assert!(lines.iter().any(|line| line.contains(&address)), "{lines:?}");
    assert!(!lines.iter().any(|line| line.contains("s3cret")), "{lines:?}");
    assert!(has_redis_source(&timeout), "{lines:?}");
}
