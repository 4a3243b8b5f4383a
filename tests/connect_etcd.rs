//! `lockkit::connect` against a real etcd member: the `etcd://` URL picks the backend and its
//! options, and bad URLs are refused before any I/O.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

use lockkit::{Error, connect};
use lockkit_testkit::fixture::EtcdServer;

mod excludes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_urls_carry_their_options() {
    let server = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{}/connect-test?ttl=4s&drift=300ms&connect_timeout=2s", server.url());
    let provider = connect(&url).await.unwrap();
    assert!(provider.capabilities().fair && provider.capabilities().lease);
    let guard = provider.lock("connect/etcd").unwrap().acquire().await.unwrap();
    let second = connect(&url).await.unwrap();
    let holder = excludes::holder_seen_by(&second, &guard, "connect/etcd").await;
    assert!(holder.lease_left.is_some_and(|left| left.as_secs() <= 4), "{holder:?}");
    excludes::release_seen_by(&second, guard, "connect/etcd").await;
    for bad in [
        format!("{}?ttl=1s", server.url()),
        format!("{}/a//b", server.url()),
        format!("{},etcds://127.0.0.1:1", server.url()),
        #[cfg(not(feature = "etcd-tls"))]
        server.url().replacen("etcd://", "etcds://", 1),
        format!("{}?tls_root_certificate=/nonexistent/ca.pem", server.url().replacen("etcd://", "etcds://", 1)),
    ] {
        assert!(matches!(connect(&bad).await, Err(Error::InvalidConfig { .. })), "{bad} is refused");
    }
}
