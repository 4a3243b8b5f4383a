//! A password given in a URL never shows in a builder's `Debug` output, nor in the error of a
//! URL that is refused.

#![allow(clippy::unwrap_used)]

#[cfg(any(feature = "redis", feature = "zk", feature = "postgres", feature = "etcd"))]
const SECRET: &str = "s3cr3t-pw";

/// The builder of `url` and the errors of `bad` (each with the password in it) never name it.
#[cfg(any(feature = "redis", feature = "zk", feature = "postgres", feature = "etcd"))]
fn assert_hidden(builder: &dyn std::fmt::Debug, refused: impl IntoIterator<Item = lockkit::Error>) {
    let shown = format!("{builder:?}");
    assert!(!shown.contains(SECRET), "the builder shows the password: {shown}");
    for error in refused {
        let message = format!("{error} / {error:?}");
        assert!(!message.contains(SECRET), "the error shows the password: {message}");
    }
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_hides_the_password() {
    use lockkit::etcd::EtcdLockProviderBuilder;
    let builder = EtcdLockProviderBuilder::from_url(
        &lockkit::config::StoreUrl::parse(&format!("etcd://user:{SECRET}@127.0.0.1:2379/p")).unwrap(),
    )
    .unwrap();
    let bad = lockkit::connect(&format!("etcd://user:{SECRET}@127.0.0.1:2379/p?ttl=nope")).await.err().unwrap();
    assert_hidden(&builder, [bad]);
}

#[cfg(feature = "zk")]
#[tokio::test]
async fn zookeeper_hides_the_password() {
    use lockkit::zk::ZkLockProviderBuilder;
    let builder = ZkLockProviderBuilder::from_url(
        &lockkit::config::StoreUrl::parse(&format!("zk://user:{SECRET}@127.0.0.1:2181/c")).unwrap(),
    )
    .unwrap();
    let bad = lockkit::connect(&format!("zk://user:{SECRET}@127.0.0.1:2181/c?lease=nope")).await.err().unwrap();
    assert_hidden(&builder, [bad]);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_hides_the_password() {
    use lockkit::redis::RedisLockProviderBuilder;
    let builder = RedisLockProviderBuilder::from_url(
        &lockkit::config::StoreUrl::parse(&format!("redis://user:{SECRET}@127.0.0.1:6379/0")).unwrap(),
    )
    .unwrap();
    let bad = lockkit::connect(&format!("redis://user:{SECRET}@127.0.0.1:6379/0?lease=nope")).await.err().unwrap();
    assert_hidden(&builder, [bad]);
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_hides_the_password() {
    use lockkit::postgres::PostgresLockProviderBuilder;
    let builder = PostgresLockProviderBuilder::from_url(
        &lockkit::config::StoreUrl::parse(&format!("postgres://user:{SECRET}@127.0.0.1:5432/db")).unwrap(),
    )
    .unwrap();
    let bad = lockkit::connect(&format!("postgres://user:{SECRET}@127.0.0.1:5432/db?lease=nope")).await.err().unwrap();
    assert_hidden(&builder, [bad]);
}
