//! Backend selection by URL: `lockkit::connect("redis://…")` returns a [`LockProvider`], so
//! that the store is a deployment setting, not a code change.
//!
//! The URL is parsed once by [`lockkit_core::config::StoreUrl`] and dispatched through the
//! scheme table of [`lockkit_core::config`], in which this crate registers the backends its
//! features build in, and an application registers a third-party backend.

use std::sync::Once;

use lockkit_core::config::{self, Scheme, StoreUrl};
use lockkit_core::{Error, LockProvider, Result};

/// The environment variable that names the store, read by the examples and the CLI.
pub const URL_ENV: &str = "LOCKKIT_URL";

/// The store used when no URL is given: the local-file backend in the default directory
/// (`$XDG_RUNTIME_DIR/lockkit`, or `lockkit-$USER` in the system's temporary directory),
/// which works across the processes of one machine with no server.
pub const DEFAULT_URL: &str = "file://";

/// `(feature, Some(crate::SCHEME))` when the cargo feature is on, `(feature, None)` when off
/// (the backend's crate is then not built).
macro_rules! optional {
    ($feature:literal, $krate:ident) => {
        ($feature, {
            #[cfg(feature = $feature)]
            let scheme = Some($krate::SCHEME);
            #[cfg(not(feature = $feature))]
            let scheme = None;
            scheme
        })
    };
}

/// The backends this crate builds in by cargo feature, each feature named as its backend:
/// `Some` with the backend's [`Scheme`] when the feature is on. Every URL scheme of such a
/// backend starts with the feature's name (`rediss+cluster`, `postgresql`, `etcds`), which a
/// test checks, so a URL whose backend is not built in is told its feature without any
/// scheme being named here.
const OPTIONAL: [(&str, Option<Scheme>); 4] = [
    optional!("redis", lockkit_redis),
    optional!("zk", lockkit_zk),
    optional!("postgres", lockkit_postgres),
    optional!("etcd", lockkit_etcd),
];

/// The schemes of every backend this build has: memory, files (on Unix) and those of the
/// features that are on, in that order. What [`connect`] serves (with any a third party
/// registered), and what the URL docs and the `lockkit` CLI are made from.
pub fn schemes() -> Vec<Scheme> {
    let mut schemes = vec![lockkit_core::memory::SCHEME];
    #[cfg(unix)]
    schemes.push(lockkit_file::SCHEME);
    schemes.extend(OPTIONAL.iter().filter_map(|(_, scheme)| *scheme));
    schemes
}

/// The feature that builds in the backend of URL scheme `name`, when that feature is off.
fn missing_feature(name: &str) -> Option<&'static str> {
    OPTIONAL.iter().find(|(feature, scheme)| scheme.is_none() && name.starts_with(feature)).map(|(feature, _)| *feature)
}

/// Registers the backends this crate's features build in ([`schemes`]) in the scheme table.
/// [`connect`] does it on first use; call it yourself only to list or look up schemes before
/// that.
pub fn register_builtin_schemes() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| schemes().into_iter().for_each(config::register));
}

/// Connects to the store named by `url`: checks every setting, reaches the store once, and
/// returns the provider.
///
/// The stores, and the options each takes (the table is made from the backends' [`Scheme`]s,
/// and a test checks it):
///
#[doc = include_str!("url_docs.md")]
///
/// An option has the name of the backend builder's method that sets it, and a setting
/// takes the last value given, by URL or by method (see [`lockkit_core::config`]).
/// Durations are written `500ms`, `10s`, `1.5s`, `2m` or `1h`; flags are `true` or `false`;
/// credentials and values are percent-decoded. An unknown option, a bad value, a value out of
/// range or a scheme whose feature is off is an [`Error::InvalidConfig`] that says what to
/// change.
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
        && let Some(feature) = missing_feature(parsed.scheme())
    {
        return Err(Error::invalid_config(
            "lockkit",
            format!(
                "{} needs the {feature} backend, which is not built in: enable the `{feature}` feature of lockkit",
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

    /// Every scheme of a backend a feature builds in starts with the feature's name, which is
    /// how a URL of a backend that is not built in is told its feature.
    #[test]
    fn the_schemes_of_each_feature_start_with_its_name() {
        for (feature, scheme) in OPTIONAL {
            let Some(scheme) = scheme else { continue };
            assert_eq!(scheme.feature, Some(feature), "{scheme:?}");
            assert!(scheme.names.iter().all(|name| name.starts_with(feature)), "{scheme:?}");
        }
        let names: Vec<&str> = schemes().iter().flat_map(|scheme| scheme.names.iter().copied()).collect();
        let unique: std::collections::HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "no scheme is served twice: {names:?}");
    }

    /// The URL docs of `connect` (src/url_docs.md) are made from the schemes of every backend;
    /// `LOCKKIT_UPDATE_DOCS=1` writes them again.
    #[cfg(all(unix, feature = "redis", feature = "zk", feature = "postgres", feature = "etcd"))]
    #[test]
    fn the_url_docs_are_the_schemes_docs() {
        let made = config::url_docs(&schemes());
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/url_docs.md");
        if std::env::var_os("LOCKKIT_UPDATE_DOCS").is_some() {
            std::fs::write(path, &made).unwrap();
        }
        let written = std::fs::read_to_string(path).unwrap();
        assert!(
            written == made,
            "src/url_docs.md differs from the backends' schemes and options: run `LOCKKIT_UPDATE_DOCS=1 cargo test -p lockkit --all-features --lib url_docs` and commit it"
        );
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
