//! Backend selection by URL: `lockkit::connect("redis://…")` returns a provider behind the
//! core trait, so that the store is a deployment setting, not a code change.
//!
//! The table of schemes and options is on [`connect`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use lockkit_core::memory::{MemoryLockProvider, MemoryStore};
use lockkit_core::{Error, LockProvider, Result};

/// The environment variable that names the store, read by the examples and the CLI.
pub const URL_ENV: &str = "LOCKKIT_URL";

/// The store used when no URL is given: the local-file backend in the default directory
/// (`$XDG_RUNTIME_DIR/lockkit`, or `lockkit-$USER` in the system's temporary directory),
/// which works across the processes of one machine with no server.
pub const DEFAULT_URL: &str = "file://";

/// Connects to the store named by `url` and returns a provider behind the core trait.
///
/// | URL | backend | query options |
/// | --- | --- | --- |
/// | `mem://` or `mem://NAME` | in-process memory; one store per NAME per process | `ttl` |
/// | `file:///path/to/dir`, `file://` | local files; `file://` alone is the default directory | — |
/// | `redis://[user:password@]host[:port][/db]` | Redis (feature `redis`) | `ttl`, `renew`, `timeout`, `drift`, `prefix`, `fair`, `claim` |
/// | `rediss://…` | Redis over TLS (feature `redis-tls`) | as `redis://` |
/// | `zk://[user:password@]host:port[,host:port…][/chroot]` | ZooKeeper (feature `zk`) | `session_timeout` (or `ttl`), `base`, `drift` |
///
/// Durations are written `500ms`, `10s`, `1.5s`, `2m` or `1h`; `fair` is `true` (the
/// default: waiters are granted in arrival order) or `false`. An unknown option, a bad
/// duration, or a scheme whose feature is off is an [`Error::InvalidConfig`] that says what to
/// change.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit::Result<()> {
/// use lockkit::DistributedLock;
///
/// let locks = lockkit::connect("mem://docs?ttl=10s").await?;
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
pub async fn connect(url: &str) -> Result<Arc<dyn LockProvider>> {
    let parsed = StoreUrl::parse(url)?;
    match parsed.scheme() {
        "mem" => connect_memory(&parsed),
        "file" => connect_file(&parsed),
        "redis" | "rediss" => connect_redis(&parsed).await,
        "zk" => connect_zk(&parsed).await,
        other => Err(invalid(
            "lockkit",
            format!(
                "unknown scheme {other:?} in {}; use mem://, file://, redis://, rediss:// or zk://",
                parsed.redacted()
            ),
        )),
    }
}

/// Connects to the store named by `LOCKKIT_URL`, or to [`DEFAULT_URL`] when it is unset or
/// empty.
///
/// # Errors
///
/// As for [`connect`].
pub async fn connect_from_env() -> Result<Arc<dyn LockProvider>> {
    connect(&url_from_env()).await
}

/// The URL named by `LOCKKIT_URL`, or [`DEFAULT_URL`].
pub fn url_from_env() -> String {
    std::env::var(URL_ENV).ok().filter(|url| !url.trim().is_empty()).unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// Parses a duration written as a number and a unit: `500ms`, `10s`, `1.5s`, `2m`, `1h`
/// (also `us` and `d`). A bare number is refused, so that `--wait 5` is never mistaken for
/// milliseconds.
///
/// # Errors
///
/// A message that shows the accepted forms.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let hint = || format!("{text:?} is not a duration; write it like 500ms, 10s, 1.5s, 2m or 1h");
    let value: f64 = number.parse().map_err(|_| hint())?;
    let seconds = match unit.trim() {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" | "sec" | "secs" => value,
        "m" | "min" | "mins" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => return Err(hint()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| hint())
}

/// A store URL split into its scheme, its address and its query options: the one parser
/// behind [`connect`], public for tools that need the backend's own client beside the
/// provider (a benchmark's raw round trip, say) or a provider with settings of their own.
#[derive(Clone, Debug)]
pub struct StoreUrl {
    original: String,
    scheme: String,
    /// Everything between `scheme://` and `?`.
    rest: String,
    options: HashMap<String, String>,
}

impl StoreUrl {
    /// Splits `url`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when it has no `scheme://`.
    pub fn parse(url: &str) -> Result<Self> {
        let url = url.trim();
        let Some((scheme, after)) = url.split_once("://") else {
            return Err(invalid(
                "lockkit",
                format!(
                    "{:?} is not a lock store URL; write it like mem://, file:///var/lock/app or redis://host:6379",
                    redact(url)
                ),
            ));
        };
        let (rest, query) = after.split_once('?').unwrap_or((after, ""));
        let mut options = HashMap::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            options.insert(key.to_owned(), value.to_owned());
        }
        Ok(Self { original: url.to_owned(), scheme: scheme.to_owned(), rest: rest.to_owned(), options })
    }

    /// The scheme: `mem`, `file`, `redis`, `rediss`, `zk`, or whatever was written.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The URL without its query: what the backend's own client connects to.
    pub fn address(&self) -> String {
        format!("{}://{}", self.scheme, self.rest)
    }

    /// The value of query option `key`, if given.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// Query option `key` read as a duration, if given.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the option when it is not a duration.
    pub fn duration(&self, key: &str) -> Result<Option<Duration>> {
        let backend = self.backend();
        self.options
            .get(key)
            .map(|text| parse_duration(text).map_err(|message| invalid(backend, format!("option {key}: {message}"))))
            .transpose()
    }

    /// Query option `key` read as `true` or `false`, if given.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the option when it is neither.
    pub fn flag(&self, key: &str) -> Result<Option<bool>> {
        match self.options.get(key).map(String::as_str) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(invalid(self.backend(), format!("option {key}: {other:?} is not true or false"))),
        }
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact(&self.original)
    }

    /// The backend's name for messages.
    fn backend(&self) -> &'static str {
        match self.scheme.as_str() {
            "mem" => "memory",
            "file" => "file",
            "redis" | "rediss" => "redis",
            "zk" => "zk",
            _ => "lockkit",
        }
    }

    /// Refuses options this backend does not know.
    fn check_options(&self, known: &[&str]) -> Result<()> {
        let mut unknown: Vec<&str> = self.options.keys().map(String::as_str).filter(|k| !known.contains(k)).collect();
        unknown.sort_unstable();
        if unknown.is_empty() {
            return Ok(());
        }
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        Err(invalid(
            self.backend(),
            format!("unknown option(s) {} in {}; this backend takes: {known}", unknown.join(", "), self.redacted()),
        ))
    }

    /// A Redis builder with this URL's address and options (`ttl`, `renew`, `timeout`,
    /// `drift`, `prefix`, `fair`, `claim`: the claim window of hand-overs), for callers that
    /// add settings of their own before `build`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an unknown option, a bad duration, or `rediss://`
    /// without the `redis-tls` feature.
    #[cfg(feature = "redis")]
    pub fn redis_builder(&self) -> Result<lockkit_redis::RedisLockProviderBuilder> {
        self.check_options(&["ttl", "renew", "timeout", "drift", "prefix", "fair", "claim"])?;
        #[cfg(not(feature = "redis-tls"))]
        if self.scheme == "rediss" {
            return Err(invalid("redis", "rediss:// (TLS) is not built in: enable the `redis-tls` feature of lockkit"));
        }
        let mut builder = lockkit_redis::RedisLockProvider::builder().url(self.address());
        if let Some(ttl) = self.duration("ttl")? {
            builder = builder.lease(ttl);
        }
        if let Some(every) = self.duration("renew")? {
            builder = builder.renew_every(every);
        }
        if let Some(timeout) = self.duration("timeout")? {
            builder = builder.response_timeout(timeout);
        }
        if let Some(drift) = self.duration("drift")? {
            builder = builder.drift(drift);
        }
        if let Some(prefix) = self.option("prefix") {
            builder = builder.key_prefix(prefix);
        }
        if let Some(window) = self.duration("claim")? {
            builder = builder.claim_window(window);
        }
        if let Some(fair) = self.flag("fair")? {
            builder = builder.fair(fair);
        }
        Ok(builder)
    }

    /// A ZooKeeper builder with this URL's address and options (`session_timeout` or `ttl`,
    /// `base`, `drift`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an unknown option or a bad duration.
    #[cfg(feature = "zk")]
    pub fn zk_builder(&self) -> Result<lockkit_zk::ZkLockProviderBuilder> {
        self.check_options(&["session_timeout", "ttl", "base", "drift"])?;
        let mut builder = lockkit_zk::ZkLockProvider::builder().connect_string(self.address());
        let session = match self.duration("session_timeout")? {
            Some(timeout) => Some(timeout),
            None => self.duration("ttl")?,
        };
        if let Some(timeout) = session {
            builder = builder.session_timeout(timeout);
        }
        if let Some(base) = self.option("base") {
            builder = builder.base_path(base);
        }
        if let Some(drift) = self.duration("drift")? {
            builder = builder.drift(drift);
        }
        Ok(builder)
    }
}

/// The URL with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split_once(':').map_or(credentials, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

fn invalid(backend: &'static str, message: impl Into<String>) -> Error {
    Error::invalid_config(backend, message)
}

fn connect_memory(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    url.check_options(&["ttl"])?;
    // One store per name per process, so that every `connect("mem://x")` of a process sees
    // the same locks, each as a client of its own.
    static STORES: OnceLock<Mutex<HashMap<String, MemoryStore>>> = OnceLock::new();
    let name = url.rest.trim_end_matches('/').to_owned();
    let store = STORES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name)
        .or_default()
        .clone();
    let mut builder = MemoryLockProvider::builder().store(store);
    if let Some(ttl) = url.duration("ttl")? {
        builder = builder.lease(ttl);
    }
    Ok(Arc::new(builder.build()?))
}

fn connect_file(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    url.check_options(&[])?;
    let dir = if url.rest.is_empty() {
        default_file_dir()
    } else if url.rest.starts_with('/') {
        std::path::PathBuf::from(&url.rest)
    } else {
        return Err(invalid(
            "file",
            format!(
                "{} names no absolute directory; write file:///path/to/dir (three slashes), or file:// for the default",
                url.redacted()
            ),
        ));
    };
    #[cfg(unix)]
    return Ok(Arc::new(lockkit_file::FileLockProvider::open(dir)?));
    #[cfg(not(unix))]
    return Err(invalid(
        "file",
        format!("the file backend needs flock(2), which this system lacks ({})", dir.display()),
    ));
}

/// The default directory of the file backend: per user, so users do not share locks.
fn default_file_dir() -> std::path::PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir).join("lockkit"),
        None => {
            let user =
                std::env::var("USER").ok().filter(|user| !user.is_empty()).unwrap_or_else(|| "default".to_owned());
            std::env::temp_dir().join(format!("lockkit-{user}"))
        }
    }
}

#[cfg(feature = "redis")]
async fn connect_redis(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    let provider = url.redis_builder()?.build()?;
    provider.ping().await?;
    Ok(Arc::new(provider))
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    Err(invalid(
        "redis",
        format!(
            "{} needs the Redis backend, which is not built in: enable the `redis` feature of lockkit",
            url.redacted()
        ),
    ))
}

#[cfg(feature = "zk")]
async fn connect_zk(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    Ok(Arc::new(url.zk_builder()?.build().await?))
}

#[cfg(not(feature = "zk"))]
async fn connect_zk(url: &StoreUrl) -> Result<Arc<dyn LockProvider>> {
    Err(invalid(
        "zk",
        format!(
            "{} needs the ZooKeeper backend, which is not built in: enable the `zk` feature of lockkit",
            url.redacted()
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(result: Result<Arc<dyn LockProvider>>) -> String {
        match result {
            Err(Error::InvalidConfig { message, .. }) => message,
            Err(other) => panic!("expected InvalidConfig, got {other}"),
            Ok(_) => panic!("expected InvalidConfig, got a provider"),
        }
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        for bad in ["5", "", "s", "-1s", "1x", "1e400s", "NaNs"] {
            assert!(parse_duration(bad).unwrap_err().contains("500ms"), "{bad}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://app:s3cret@host:6379/0"), "redis://app:***@host:6379/0");
        assert_eq!(redact("zk://u:p@h1:2181,h2:2181/app"), "zk://u:***@h1:2181,h2:2181/app");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }

    #[tokio::test]
    async fn bad_urls_say_what_to_change() {
        assert!(message(connect("localhost:6379").await).contains("redis://host:6379"));
        assert!(message(connect("ftp://x").await).contains("unknown scheme"));
        assert!(message(connect("mem://?ttl=soon").await).contains("500ms"));
        assert!(message(connect("mem://?color=red").await).contains("takes: ttl"));
        assert!(message(connect("file://relative/dir").await).contains("three slashes"));
        let leaked = message(connect("redis://u:s3cret@127.0.0.1:1/?bogus=1").await);
        assert!(!leaked.contains("s3cret"), "{leaked}");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn flags_are_true_or_false() {
        let url = StoreUrl::parse("redis://127.0.0.1:1/?fair=false").unwrap();
        assert_eq!(url.flag("fair").unwrap(), Some(false));
        assert!(url.redis_builder().is_ok());
        let bad = StoreUrl::parse("redis://127.0.0.1:1/?fair=no").unwrap();
        match bad.redis_builder() {
            Err(Error::InvalidConfig { message, .. }) => assert!(message.contains("true or false"), "{message}"),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn the_claim_window_is_a_checked_duration() {
        let url = StoreUrl::parse("redis://127.0.0.1:1/?claim=1s").unwrap();
        assert!(url.redis_builder().unwrap().build().is_ok());
        let tiny = StoreUrl::parse("redis://127.0.0.1:1/?claim=1ms").unwrap();
        match tiny.redis_builder().and_then(lockkit_redis::RedisLockProviderBuilder::build) {
            Err(Error::InvalidConfig { message, .. }) => assert!(message.contains("claim window"), "{message}"),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn file_urls_open_a_directory() {
        let dir = std::env::temp_dir().join(format!("lockkit-url-test-{}", std::process::id()));
        let url = format!("file://{}", dir.display());
        let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
        let guard = a.lock("x").unwrap().acquire().await.unwrap();
        assert!(b.lock("x").unwrap().try_acquire().await.unwrap().is_none(), "same directory, same locks");
        guard.release().await.unwrap();
        assert!(message(connect(&format!("{url}?ttl=1s")).await).contains("takes: none"));
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
