//! A password given in a URL never shows in a builder's `Debug` output, nor in the error of a
//! URL that is refused, on any network backend.

#![cfg(any(feature = "redis", feature = "zk", feature = "postgres", feature = "etcd"))]
#![allow(clippy::unwrap_used)]

use lockkit::config::{ProviderBuilder, StoreUrl, from_url};

const SECRET: &str = "s3cr3t-pw";

/// What a builder of `B` made from `url` (with the password in it) shows, and what connecting
/// to `url` with an option that does not parse says.
async fn shown<B: ProviderBuilder + std::fmt::Debug>(url: &str) -> [String; 2] {
    let builder: B = from_url(&StoreUrl::parse(url).unwrap()).unwrap();
    let refused = lockkit::connect(&format!("{url}?max_hold=nope")).await.err().unwrap();
    [format!("{builder:?}"), format!("{refused} / {refused:?}")]
}

#[tokio::test]
async fn no_builder_or_refusal_shows_the_password() {
    let shown = [
        #[cfg(feature = "etcd")]
        shown::<lockkit::etcd::EtcdLockProviderBuilder>(&format!("etcd://user:{SECRET}@127.0.0.1:2379/p")).await,
        #[cfg(feature = "zk")]
        shown::<lockkit::zk::ZkLockProviderBuilder>(&format!("zk://user:{SECRET}@127.0.0.1:2181/c")).await,
        #[cfg(feature = "redis")]
        shown::<lockkit::redis::RedisLockProviderBuilder>(&format!("redis://user:{SECRET}@127.0.0.1:6379/0")).await,
        #[cfg(feature = "postgres")]
        shown::<lockkit::postgres::PostgresLockProviderBuilder>(&format!("postgres://user:{SECRET}@127.0.0.1:5432/db"))
            .await,
    ];
    for text in shown.iter().flatten() {
        assert!(!text.contains(SECRET), "the password shows: {text}");
        assert!(text.contains("user") || text.contains("invalid") || text.contains("max_hold"), "{text}");
    }
}
