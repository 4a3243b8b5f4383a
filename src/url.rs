//! Backend selection by URL: `lockkit::connect("redis://…")` returns a [`LockProvider`], so
//! that the store is a deployment setting, not a code change.
//!
//! The URL is parsed once by [`lockkit_core::config::StoreUrl`] and dispatched through the
//! scheme table of [`lockkit_core::config`], in which this crate registers the backends its
//! features build in, and an application registers a third-party backend.

use std::sync::Once;

use lockkit_core::config::{self, StoreUrl};
use lockkit_core::{Error, LockProvider, Result};

/// The environment variable that names the store, read by the examples and the CLI.
pub const URL_ENV: &str = "LOCKKIT_URL";

/// The store used when no URL is given: the local-file backend in the default directory
/// (`$XDG_RUNTIME_DIR/lockkit`, or `lockkit-$USER` in the system's temporary directory),
/// which works across the processes of one machine with no server.
pub const DEFAULT_URL: &str = "file://";

/// Schemes this crate knows, with the feature that builds each in.
const FEATURES: &[(&str, &str)] = &[
    ("redis", "redis"),
    ("rediss", "redis-tls"),
    ("redis+sentinel", "redis"),
    ("rediss+sentinel", "redis-tls"),
    ("redis+cluster", "redis"),
    ("rediss+cluster", "redis-tls"),
    ("zk", "zk"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("etcd", "etcd"),
    ("etcds", "etcd-tls"),
];

/// Registers the backends this crate's features build in (`file` on Unix, `redis`,
/// `rediss`, `redis+sentinel`, `rediss+sentinel`, `redis+cluster` and `rediss+cluster` with
/// feature `redis`, `zk` with feature `zk`, `postgres` and `postgresql` with feature
/// `postgres`, `etcd` with feature `etcd`) in the scheme table. [`connect`]
/// does it on first use; call it yourself only to list or look up schemes before that.
pub fn register_builtin_schemes() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(unix)]
        config::register(lockkit_file::SCHEME);
        #[cfg(feature = "redis")]
        config::register(lockkit_redis::SCHEME);
        #[cfg(feature = "zk")]
        config::register(lockkit_zk::SCHEME);
        #[cfg(feature = "postgres")]
        config::register(lockkit_postgres::SCHEME);
        #[cfg(feature = "etcd")]
        config::register(lockkit_etcd::SCHEME);
    });
}

/// Connects to the store named by `url`: checks every setting, reaches the store once, and
/// returns the provider.
///
/// | URL | backend | query options |
/// | --- | --- | --- |
/// | `mem://` or `mem://NAME` | in-process memory; one store per NAME per process | `lease`, `renew_every`, `drift` |
/// | `file:///path/to/dir`, `file://` | local files; `file://` alone is the default directory | `poll_min`, `poll_max`, `check_every`, `observe_every` |
/// | `redis://[user:password@]host[:port][/db]` | Redis (feature `redis`) | `lease`, `renew_every`, `response_timeout`, `drift`, `key_prefix`, `fair`, `claim_window`, `replicas`, `replicas_timeout` |
/// | `rediss://…` | Redis over TLS (feature `redis-tls`) | as `redis://` |
/// | `redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME` | the primary a Redis Sentinel names, followed across failovers (feature `redis`; `rediss+sentinel://` with `redis-tls`) | as `redis://` |
/// | `redis+cluster://[user:password@]host:port[,host:port…]` | a Redis Cluster, any of its nodes (feature `redis`; `rediss+cluster://` with `redis-tls`) | as `redis://` |
/// | `zk://[user:password@]host:port[,host:port…][/chroot]` | ZooKeeper (feature `zk`) | `session_timeout`, `connect_timeout`, `base_path`, `drift`, `acl`, `disconnect_policy` |
/// | `postgres://[user[:password]@]host[:port]/database` (or `postgresql://`) | PostgreSQL (feature `postgres`) | `lease`, `renew_every`, `response_timeout`, `drift`, `schema`, `migrate`, `max_hold` |
/// | `etcd://[user:password@]host:port[,host:port…][/prefix]` | etcd (feature `etcd`; `etcds://` for TLS with `etcd-tls`) | `ttl`, `drift`, `connect_timeout`, `prefix`, `max_hold`; with `etcds://`, `tls_root_certificate`, `tls_client_certificate`, `tls_client_key` (paths of PEM files) |
///
/// An option has the name of the backend builder's method that sets it. Durations are
/// written `500ms`, `10s`, `1.5s`, `2m` or `1h`; flags are `true` or `false`; credentials and
/// values are percent-decoded. An unknown option, a bad value, a value out of range or a
/// scheme whose feature is off is an [`Error::InvalidConfig`] that says what to change.
///
/// A third-party backend joins the table with
/// [`lockkit::config::register`](lockkit_core::config::register).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit::Result<()> {
/// let locks = lockkit::connect("mem://docs?lease=10s").await?;
/// let guard = locks.lock("reports/daily")?.acquire().await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`Error::InvalidConfig`] for a URL that cannot be used (with what to change), and the
/// backend's errors when its store cannot be reached (a retryable [`Error::Connection`]).
///
/// # Cancel safety
///
/// Cancel safe: dropping the future leaves nothing behind but a provider that was never
/// returned.
pub async fn connect(url: &str) -> Result<LockProvider> {
    register_builtin_schemes();
    let parsed = StoreUrl::parse(url)?;
    if config::lookup(parsed.scheme()).is_none()
        && let Some((scheme, feature)) = FEATURES.iter().find(|(scheme, _)| *scheme == parsed.scheme())
    {
        return Err(Error::invalid_config(
            "lockkit",
            format!(
                "{} needs the {scheme}:// backend, which is not built in: enable the `{feature}` feature of lockkit",
                parsed.redacted()
            ),
        ));
    }
    config::connect(url).await
}

/// Connects to the store named by `LOCKKIT_URL`, or to [`DEFAULT_URL`] when it is unset or
/// empty.
///
/// # Errors
///
/// As for [`connect`].
pub async fn connect_from_env() -> Result<LockProvider> {
    connect(&url_from_env()).await
}

/// The URL named by `LOCKKIT_URL`, or [`DEFAULT_URL`].
pub fn url_from_env() -> String {
    std::env::var(URL_ENV).ok().filter(|url| !url.trim().is_empty()).unwrap_or_else(|| DEFAULT_URL.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(result: Result<LockProvider>) -> String {
        match result {
            Err(Error::InvalidConfig { message, .. }) => message,
            Err(other) => panic!("expected InvalidConfig, got {other}"),
            Ok(_) => panic!("expected InvalidConfig, got a provider"),
        }
    }

    #[tokio::test]
    async fn bad_urls_say_what_to_change() {
        assert!(message(connect("localhost:6379").await).contains("redis://host:6379"));
        assert!(message(connect("ftp://x").await).contains("unknown scheme"));
        assert!(message(connect("mem://?lease=soon").await).contains("500ms"));
        assert!(message(connect("mem://?color=red").await).contains("takes: lease"));
        assert!(message(connect("mem://?lease=5000000000000000h").await).contains("at most"));
        assert!(message(connect("mem://?lease=400d").await).contains("at most"));
        assert!(message(connect("file://relative/dir").await).contains("three slashes"));
        let leaked = message(connect("redis://u:s3cret@127.0.0.1:1/?bogus=1").await);
        assert!(!leaked.contains("s3cret"), "{leaked}");
    }

    #[cfg(not(feature = "zk"))]
    #[tokio::test]
    async fn a_scheme_whose_feature_is_off_names_the_feature() {
        assert!(message(connect("zk://127.0.0.1:1").await).contains("`zk` feature"));
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn postgres_without_its_feature_names_the_feature() {
        assert!(message(connect("postgres://app@127.0.0.1:1/db").await).contains("`postgres` feature"));
        assert!(message(connect("postgresql://app@127.0.0.1:1/db").await).contains("`postgres` feature"));
    }

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn the_etcd_scheme_names_its_feature() {
        assert!(message(connect("etcd://127.0.0.1:1").await).contains("`etcd` feature"));
    }

    #[tokio::test]
    async fn file_urls_open_a_directory() {
        let dir = std::env::temp_dir().join(format!("lockkit-url-test-{}", std::process::id()));
        let url = format!("file://{}", dir.display());
        let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
        let guard = a.lock("x").unwrap().acquire().await.unwrap();
        assert!(b.lock("x").unwrap().try_acquire().await.unwrap().is_none(), "same directory, same locks");
        guard.release().await.unwrap();
        assert!(message(connect(&format!("{url}?lease=1s")).await).contains("takes: poll_min"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn mem_urls_share_one_store_per_name() {
        let a = connect("mem://shared-test").await.unwrap();
        let b = connect("mem://shared-test").await.unwrap();
        let other = connect("mem://other-test").await.unwrap();
        let guard = a.lock("x").unwrap().acquire().await.unwrap();
        assert!(b.lock("x").unwrap().try_acquire().await.unwrap().is_none(), "same name, same store");
        assert!(other.lock("x").unwrap().try_acquire().await.unwrap().is_some(), "another name, another store");
        guard.release().await.unwrap();
    }
}
