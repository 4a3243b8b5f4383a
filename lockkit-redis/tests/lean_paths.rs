//! The lean paths of the acquire and release scripts (the mutex's, the reader's and the
//! permit's uncontended cases): what they leave in Redis is what the whole scripts leave, and
//! what they cannot decide (an expired holder to purge, a semaphore of another count) goes to
//! the whole script. Each case reads the keys directly on the server.

#![allow(clippy::unwrap_used)]

mod support;

use lockkit_core::{Error, LockName};
use lockkit_redis::RedisLockProvider;
use support::{LEASE, OPERATION, RedisHarness, test_builder, within};

fn unique(case: &str) -> String {
    format!("lean/{case}/{}", uuid::Uuid::new_v4().simple())
}

/// The key of `name` with `suffix` (see keys.rs), as `provider` names it.
fn key(provider: &RedisLockProvider, name: &str, suffix: &str) -> String {
    let base = provider.record_key(&LockName::new(name).unwrap());
    if suffix.is_empty() { base } else { format!("{base}:{suffix}") }
}

async fn pttl(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(admin).await.unwrap()
}

async fn exists(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(admin).await.unwrap();
    n == 1
}

/// Writes a holder whose lease ran out long ago in sorted set `set` of the name, with its
/// token, as a client that died without a word leaves it.
async fn plant_expired(admin: &mut redis::aio::MultiplexedConnection, set: &str, tokens: &str) {
    let _: () = redis::cmd("ZADD").arg(set).arg(1).arg("ghost").query_async(admin).await.unwrap();
    let _: () = redis::cmd("HSET").arg(tokens).arg("ghost").arg(7).query_async(admin).await.unwrap();
    for key in [set, tokens] {
        let _: () = redis::cmd("PEXPIRE").arg(key).arg(60_000).query_async(admin).await.unwrap();
    }
}

/// A reader or a permit that finds an expired holder in its set is granted by the whole
/// script, which purges the expired holder and its token; the last release leaves no key of
/// the shared kinds behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_holder_is_purged_by_the_next_reader_or_permit() {
    let harness = RedisHarness::shared().await;
    let (provider, _faults) = harness.client_with(test_builder()).await.unwrap();
    let mut admin = harness.admin().await;
    for (kind, suffix) in [("read", "readers"), ("permit", "permits")] {
        let name = unique(kind);
        let (set, tokens) = (key(&provider, &name, suffix), key(&provider, &name, "tokens"));
        plant_expired(&mut admin, &set, &tokens).await;
        if kind == "permit" {
            let count = key(&provider, &name, "permits:count");
            let _: () =
                redis::cmd("SET").arg(&count).arg(2).arg("PX").arg(60_000).query_async(&mut admin).await.unwrap();
        }
        let guard = if kind == "read" {
            within(OPERATION, "a read", provider.rw_lock(&name).unwrap().read()).await.unwrap()
        } else {
            within(OPERATION, "a permit", provider.semaphore(&name, 2).unwrap().acquire()).await.unwrap()
        };
        let ghost: Option<f64> = redis::cmd("ZSCORE").arg(&set).arg("ghost").query_async(&mut admin).await.unwrap();
        assert_eq!(ghost, None, "{kind}: the expired holder is purged");
        let token: Option<i64> = redis::cmd("HGET").arg(&tokens).arg("ghost").query_async(&mut admin).await.unwrap();
        assert_eq!(token, None, "{kind}: and its token");
        let holders: i64 = redis::cmd("ZCARD").arg(&set).query_async(&mut admin).await.unwrap();
        assert_eq!(holders, 1, "{kind}: the new holder alone");
        guard.release().await.unwrap();
        for suffix in [suffix, "tokens", "kinds", "permits:count"] {
            assert!(
                !exists(&mut admin, &key(&provider, &name, suffix)).await,
                "{kind}: {suffix} goes with the last holder"
            );
        }
    }
}

/// The keys a reader or a permit makes live twice the lease whether the holder is the first
/// (its set was empty) or joins others, as the whole script keeps them; the token is the
/// fence counter's new value; a semaphore of another count is still a conflict while permits
/// are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_keep_their_keys_and_tokens_as_the_whole_script_does() {
    let harness = RedisHarness::shared().await;
    let (provider, _faults) = harness.client_with(test_builder()).await.unwrap();
    let mut admin = harness.admin().await;
    let lease = i64::try_from(LEASE.as_millis()).unwrap();

    let name = unique("read-keys");
    let rw = provider.rw_lock(&name).unwrap();
    let first = within(OPERATION, "a first read", rw.read()).await.unwrap();
    let second = within(OPERATION, "a second read beside it", rw.read()).await.unwrap();
    assert!(second.token() > first.token(), "tokens increase on the lean path");
    let fence: i64 = redis::cmd("GET").arg(key(&provider, &name, "fence")).query_async(&mut admin).await.unwrap();
    assert_eq!(u64::try_from(fence).unwrap(), second.token().get(), "the counter holds the last token");
    for suffix in ["readers", "tokens", "kinds"] {
        let left = pttl(&mut admin, &key(&provider, &name, suffix)).await;
        assert!(left > lease && left <= 2 * lease, "read: {suffix} lives {left} ms, not between 1 and 2 leases");
    }
    assert!(provider.lock(&name).unwrap().try_acquire().await.unwrap().is_none(), "readers exclude a mutex");
    first.release().await.unwrap();
    assert!(exists(&mut admin, &key(&provider, &name, "kinds")).await, "the marker stays while a reader holds");
    second.release().await.unwrap();
    assert!(!exists(&mut admin, &key(&provider, &name, "kinds")).await, "and goes with the last reader");

    let name = unique("permit-keys");
    let semaphore = provider.semaphore(&name, 3).unwrap();
    let first = within(OPERATION, "a first permit", semaphore.acquire()).await.unwrap();
    let second = within(OPERATION, "a second permit", semaphore.acquire()).await.unwrap();
    assert!(second.token() > first.token());
    for suffix in ["permits", "tokens", "kinds", "permits:count"] {
        let left = pttl(&mut admin, &key(&provider, &name, suffix)).await;
        assert!(left > lease && left <= 2 * lease, "permit: {suffix} lives {left} ms, not between 1 and 2 leases");
    }
    let count: String =
        redis::cmd("GET").arg(key(&provider, &name, "permits:count")).query_async(&mut admin).await.unwrap();
    assert_eq!(count, "3");
    let other = provider.semaphore(&name, 2).unwrap().try_acquire().await;
    assert!(matches!(other, Err(Error::Conflict { .. })), "a semaphore of another count: {other:?}");
    let third = semaphore.try_acquire().await.unwrap().expect("a third permit of three");
    assert!(semaphore.try_acquire().await.unwrap().is_none(), "no fourth");
    for guard in [first, second, third] {
        guard.release().await.unwrap();
    }
    for suffix in ["permits", "tokens", "kinds", "permits:count"] {
        assert!(
            !exists(&mut admin, &key(&provider, &name, suffix)).await,
            "permit: {suffix} goes with the last holder"
        );
    }
}
