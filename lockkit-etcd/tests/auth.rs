//! etcd's authentication on a real member (the fixture enables it with a root user): the
//! right user and password lock; a wrong password, an unknown user, a user without permission
//! on the prefix, and credentials for a member without authentication are clear errors when
//! the provider connects, naming what to change, and leave nothing in the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, Permission};
use lockkit_core::Error;
use lockkit_etcd::EtcdLockProvider;
use lockkit_testkit::fixture::{EtcdOptions, EtcdServer};
use support::within;

const ROOT_PASSWORD: &str = "root-secret";

/// A member with authentication on, user `app` (readwrite on `app/`) and user `other`
/// (readwrite on `other/` only).
async fn member_with_users() -> (EtcdServer, Client) {
    let server = EtcdServer::start().await.unwrap_or_else(|e| panic!("the auth tests need etcd: {e}"));
    server.enable_auth(ROOT_PASSWORD).await.unwrap();
    let options = ConnectOptions::new().with_user("root", ROOT_PASSWORD);
    let mut root = Client::connect([format!("http://{}", server.addr())], Some(options)).await.unwrap();
    for (user, password) in [("app", "app-secret"), ("other", "other-secret")] {
        root.role_add(user).await.unwrap();
        root.role_grant_permission(user, Permission::read_write(format!("{user}/")).with_prefix()).await.unwrap();
        root.user_add(user, password, None).await.unwrap();
        root.user_grant_role(user, user).await.unwrap();
    }
    (server, root)
}

/// Every key in the store and every lease, as root sees them.
async fn everything(root: &mut Client) -> (usize, usize) {
    let keys = root.get("", Some(GetOptions::new().with_all_keys())).await.unwrap().kvs().len();
    let leases = root.leases().await.unwrap().leases().len();
    (keys, leases)
}

async fn refused(url: &str) -> Error {
    within(Duration::from_secs(10), "the refusal", EtcdLockProvider::connect(url)).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_credentials_lock_and_wrong_ones_are_clear_errors() {
    let (server, mut root) = member_with_users().await;
    let addr = server.addr();
    let before = everything(&mut root).await;

    for (url, says) in [
        (format!("etcd://app:wrong@{addr}/app?connect_timeout=2s"), "check the user name and password"),
        (format!("etcd://nobody:app-secret@{addr}/app?connect_timeout=2s"), "check the user name and password"),
        (format!("etcd://other:other-secret@{addr}/app?connect_timeout=2s"), "readwrite permission on that prefix"),
        (format!("etcd://{addr}/app?connect_timeout=2s"), "no credentials were given"),
    ] {
        let error = refused(&url).await;
        println!("{url}: {error}");
        assert!(matches!(error, Error::Backend { .. }), "{url}: {error:?}");
        assert!(error.to_string().contains(says), "{url}: {error}");
        assert!(!error.to_string().contains("secret"), "the password is not shown: {error}");
    }
    assert_eq!(everything(&mut root).await, before, "the refusals left nothing in the store");

    let url = format!("etcd://app:app-secret@{addr}/app?ttl=2s");
    let a = EtcdLockProvider::connect(&url).await.unwrap();
    let b = EtcdLockProvider::connect(&url).await.unwrap();
    let first = a.lock("orders").unwrap().acquire().await.unwrap();
    assert!(b.lock("orders").unwrap().try_acquire().await.unwrap().is_none());
    let token = first.token();
    first.release().await.unwrap();
    let second = b.lock("orders").unwrap().acquire().await.unwrap();
    assert!(second.token() > token);
    second.release().await.unwrap();
    let left = root.get("app/", Some(GetOptions::new().with_prefix())).await.unwrap().kvs().len();
    assert_eq!(left, 0, "no key left under app/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_for_a_member_without_authentication_are_a_clear_error() {
    let shared = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let url = shared.url().replacen("etcd://", "etcd://someone:secret@", 1);
    let error = refused(&format!("{url}/no-auth?connect_timeout=2s")).await;
    println!("{error}");
    assert!(error.to_string().contains("authentication is not enabled"), "{error}");
}

/// Waits out a token TTL of one second: etcd forgets a simple token unused for the TTL, and
/// sweeps expired tokens once a second; three seconds leave every token of the test expired
/// (no keep-alive or check is due in between: the lease TTL is 30 s).
async fn let_the_tokens_expire() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// Providers that sat idle for longer than the member keeps an unused authentication token
/// (`--auth-token-ttl`, one second here) go on working: etcd-client authenticates once, when
/// it connects, and etcd refuses every later request with the expired token ("invalid auth
/// token"; a watch on a stream opened with it is denied). Each path is taken after an idle
/// time: a try (the put), a wait (a new watch on the provider's old watch stream), `inspect`
/// (a read), a release, and a hold across the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_idle_past_the_token_ttl_go_on_working() {
    let options = EtcdOptions { auth_token_ttl: Some(Duration::from_secs(1)), ..EtcdOptions::default() };
    let server = EtcdServer::start_with(options).await.unwrap_or_else(|e| panic!("the auth tests need etcd: {e}"));
    server.enable_auth(ROOT_PASSWORD).await.unwrap();
    let url = format!("etcd://root:{ROOT_PASSWORD}@{}/app?ttl=30s", server.addr());
    let a = within(Duration::from_secs(10), "connect a", EtcdLockProvider::connect(&url)).await.unwrap();
    let b = within(Duration::from_secs(10), "connect b", EtcdLockProvider::connect(&url)).await.unwrap();
    let (lock_a, lock_b) = (a.lock("idle").unwrap(), b.lock("idle").unwrap());
    let waiters = |n: usize| {
        let a = &a;
        async move {
            while a.inspect("idle").await.unwrap().waiters != Some(n) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // b waits once behind a, so that b's watch stream is open from now on.
    let held = within(Duration::from_secs(10), "a's first grant", lock_a.acquire()).await.unwrap();
    let waiter = tokio::spawn({
        let lock_b = lock_b.clone();
        async move { lock_b.acquire().await.unwrap().release().await.unwrap() }
    });
    within(Duration::from_secs(10), "b queued", waiters(1)).await;
    held.release().await.unwrap();
    within(Duration::from_secs(10), "b's first grant", waiter).await.unwrap();

    let_the_tokens_expire().await;
    let held = within(Duration::from_secs(10), "a's try after the idle time", lock_a.try_acquire()).await.unwrap();
    let held = held.expect("the lock is free");

    let_the_tokens_expire().await;
    // b's new watch goes to its stream opened with a token that has expired.
    let waiter = tokio::spawn({
        let lock_b = lock_b.clone();
        async move { lock_b.acquire().await.unwrap().release().await.unwrap() }
    });
    within(Duration::from_secs(10), "b queued after the idle time (inspect)", waiters(1)).await;
    let_the_tokens_expire().await;
    assert!(held.is_held(), "a's hold outlived its token");
    within(Duration::from_secs(10), "a's release after the idle time", held.release()).await.unwrap();
    within(Duration::from_secs(10), "b's grant after the idle time", waiter).await.unwrap();
}
