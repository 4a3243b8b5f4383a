//! Store URLs, settings and the scheme table: how a deployment names its store.
//!
//! - [`StoreUrl`] splits `scheme://[user:password@]hosts[/path][?key=value&…]`, with
//!   percent-decoding of the credentials and the query, once for every backend.
//! - Every backend's builder takes its settings both as methods and as `option(key, value)`
//!   with **one name per setting**: the query option `lease=10s` is the builder method
//!   `.lease(…)`. [`Settings`] reads the typed values and checks their ranges, so that a URL
//!   and a builder are refused by the same code with the same message.
//! - The [`Scheme`] table maps URL schemes to backends. The memory backend's `mem` is built
//!   in; a backend crate exports its own `Scheme` and the facade (or the application, for a
//!   third-party backend) [`register`]s it, after which [`connect`] reaches it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::{Error, LockProvider, Result};

/// The longest duration any setting of any backend accepts: a day. Leases, session timeouts,
/// renewal intervals and response timeouts beyond it are refused when the provider is
/// built, which keeps every deadline computed from them far inside what `Instant`, Redis's
/// `PX` and ZooKeeper's 32-bit millisecond fields can carry. A backend may bound a setting
/// lower (ZooKeeper servers clamp session timeouts to their own range, say).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A store URL split into its parts: the one parser behind [`connect`] and every
/// backend's `from_url`.
///
/// The user name, the password and the query values are percent-decoded
/// (`p%40ss` is `p@ss`); the hosts and the path are kept as written for the backend to read.
#[derive(Clone)]
pub struct StoreUrl {
    original: String,
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: String,
    path: String,
    options: Vec<(String, String)>,
}

impl StoreUrl {
    /// Splits `url`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when it has no `scheme://`, an option is given twice, or a
    /// percent escape does not decode to UTF-8.
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
        let scheme = scheme.to_ascii_lowercase();
        let (rest, query) = after.split_once('?').unwrap_or((after, ""));
        let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let shown = redact(url);
        let decode = |what: &str, text: &str| -> Result<String> {
            percent_decode_str(text).decode_utf8().map(|text| text.into_owned()).map_err(|_| {
                invalid("lockkit", format!("the {what} in {shown} has a percent escape that is not UTF-8"))
            })
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => match userinfo.split_once(':') {
                Some((user, password)) => (Some(decode("user name", user)?), Some(decode("password", password)?)),
                None => (Some(decode("user name", userinfo)?), None),
            },
        };
        let mut options: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode("option name", key)?;
            if !seen.insert(key.clone()) {
                return Err(invalid("lockkit", format!("option {key} is given twice in {shown}; give it once")));
            }
            options.push((key, decode(&format!("value of option {pair}"), value)?));
        }
        Ok(Self {
            original: url.to_owned(),
            scheme,
            user: user.filter(|user| !user.is_empty()),
            password,
            hosts: hosts.to_owned(),
            path: path.to_owned(),
            options,
        })
    }

    /// The scheme, in lower case: `mem`, `file`, `redis`, `rediss`, `zk`, or whatever was
    /// written.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, decoded, when one was given.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, decoded, when one was given.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Everything between the credentials and the path: `host:port` or a comma-separated
    /// list of them; empty for `file:///dir` and `mem://`.
    pub fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The path, with its leading `/` (a database number, a chroot, a directory); empty
    /// when there is none.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The URL without its query, credentials included: what a backend's own client
    /// connects to.
    pub fn address(&self) -> String {
        let rest = self.original.split_once("://").map_or("", |(_, rest)| rest);
        let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
        format!("{}://{rest}", self.scheme)
    }

    /// The query options, decoded, in the order written.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// The value of query option `key`, if given.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options().find(|(k, _)| *k == key).map(|(_, value)| value)
    }

    /// The URL as written, with any password replaced by `***`: the form messages show.
    pub fn redacted(&self) -> String {
        redact(&self.original)
    }

    /// The address without credentials or query, for error messages
    /// ([`LockBackend::address`](crate::backend::LockBackend::address)).
    pub fn shown_address(&self) -> String {
        format!("{}://{}{}", self.scheme, self.hosts, self.path)
    }

    /// The store's identity, the same for every process and provider that reaches this store
    /// at these hosts ([`LockId`](crate::LockId), and the order of
    /// [`MultiLock`](crate::MultiLock)): `scheme://hosts/path?key=value`, never with
    /// credentials. The TLS scheme is folded into the plain one (`rediss` is `redis`,
    /// `etcds` is `etcd`, `postgresql` is `postgres`), host names are put in lower case,
    /// sorted and deduplicated, the query is dropped, and `keyspace` (the settings that make
    /// the store's key space, such as a key prefix or a schema) is appended sorted by key.
    /// A `#`, `%`, `&` or `=` in the path or a value is percent-escaped, so the identity
    /// never contains `#`.
    ///
    /// No name is resolved: `localhost` and `127.0.0.1` are two identities. Where processes
    /// reach one store by different addresses, set the option `store_id` instead.
    ///
    /// ```
    /// use lockkit_core::config::StoreUrl;
    ///
    /// let url = StoreUrl::parse("rediss://app:secret@H2:6379,h1:6379/0?lease=10s")?;
    /// assert_eq!(url.identity(&[("key_prefix", "billing")]), "redis://h1:6379,h2:6379/0?key_prefix=billing");
    /// # Ok::<(), lockkit_core::Error>(())
    /// ```
    pub fn identity(&self, keyspace: &[(&str, &str)]) -> String {
        let scheme = match self.scheme.split_once('+') {
            Some((family, variant)) => format!("{}+{variant}", plain_scheme(family)),
            None => plain_scheme(&self.scheme).to_owned(),
        };
        let mut hosts: Vec<String> = self
            .hosts
            .split(',')
            .map(|host| host.trim().to_ascii_lowercase())
            .filter(|host| !host.is_empty())
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        let mut identity = format!("{scheme}://{}{}", hosts.join(","), escape_identity(&self.path));
        let mut keyspace = keyspace.to_vec();
        keyspace.sort_unstable();
        for (at, (key, value)) in keyspace.iter().enumerate() {
            let separator = if at == 0 { '?' } else { '&' };
            identity.push_str(&format!("{separator}{}={}", escape_identity(key), escape_identity(value)));
        }
        identity
    }
}

/// The plain scheme of a TLS one, and one spelling of PostgreSQL's.
fn plain_scheme(scheme: &str) -> &str {
    match scheme {
        "rediss" => "redis",
        "etcds" => "etcd",
        "postgresql" => "postgres",
        other => other,
    }
}

/// `text` with the characters that would make an identity ambiguous percent-escaped.
fn escape_identity(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '#' | '%' | '&' | '=' | '?' => escaped.push_str(&format!("%{:02X}", u32::from(c))),
            c if c.is_control() => escaped.push_str(&format!("%{:02X}", u32::from(c))),
            c => escaped.push(c),
        }
    }
    escaped
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted()).finish()
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
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
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

/// The checks every backend's settings go through, with messages that name the setting,
/// its range and what to change. A backend's `build` calls these on its typed settings, and
/// its `option(key, value)` reads strings with [`Settings::duration`] and
/// [`Settings::flag`], so URL options and builder methods are checked by the same code.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    backend: &'static str,
}

impl Settings {
    /// The checks of `backend`'s settings.
    pub const fn of(backend: &'static str) -> Self {
        Self { backend }
    }

    /// Reads option `key` as a duration.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the option when `value` is not a duration.
    pub fn duration(self, key: &str, value: &str) -> Result<Duration> {
        parse_duration(value).map_err(|message| invalid(self.backend, format!("option {key}: {message}")))
    }

    /// Reads option `key` as `true` or `false`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the option when `value` is neither.
    pub fn flag(self, key: &str, value: &str) -> Result<bool> {
        match value {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(invalid(self.backend, format!("option {key}: {other:?} is not true or false"))),
        }
    }

    /// The error for an option this backend does not take, listing those it takes.
    pub fn unknown(self, key: &str, known: &[&str]) -> Error {
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        invalid(self.backend, format!("unknown option {key:?}; this backend takes: {known}"))
    }

    /// Checks that setting `name` lies in `min..=max`; `max` is capped at [`MAX_DURATION`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting and its range.
    pub fn within(self, name: &str, value: Duration, min: Duration, max: Duration) -> Result<Duration> {
        let max = max.min(MAX_DURATION);
        if value < min || value > max {
            return Err(invalid(
                self.backend,
                format!("{name} is {value:?}; it must be at least {min:?} and at most {max:?}"),
            ));
        }
        Ok(value)
    }

    /// An [`Error::InvalidConfig`] of this backend.
    pub fn invalid(self, message: impl Into<String>) -> Error {
        invalid(self.backend, message)
    }
}

/// The settings every backend's builder takes besides its own, under the same names
/// everywhere (a builder method and a URL option each): `max_hold`, `store_id`.
pub const PROVIDER_OPTIONS: &[&str] = &["max_hold", "store_id"];

/// The settings of [`PROVIDER_OPTIONS`], kept by every backend's builder and applied to the
/// [`LockProvider`] it builds: read once here, so that every backend spells and checks them
/// alike.
///
/// - `max_hold`: the provider's default maximum hold
///   ([`LockProvider::with_max_hold`]); none by default. At least the backend's renewal
///   interval ([`LockProvider::min_max_hold`]), at most [`MAX_DURATION`].
/// - `store_id`: the store's identity for fences and for the order of multi-locks, over the
///   one the backend derives from its URL ([`LockProvider::with_store_id`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderSettings {
    /// The default maximum hold of the provider's acquisitions.
    pub max_hold: Option<Duration>,
    /// The store's identity given by hand. Kept as a `&'static str` so that the settings stay
    /// `Copy`: each distinct value is stored once for the life of the process.
    pub store_id: Option<&'static str>,
}

impl ProviderSettings {
    /// Reads option `key` when it is one of [`PROVIDER_OPTIONS`]; `Ok(false)` when it is
    /// not, for the backend to read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the option when `value` does not parse.
    pub fn option(&mut self, settings: Settings, key: &str, value: &str) -> Result<bool> {
        match key {
            "max_hold" => self.max_hold = Some(settings.duration(key, value)?),
            "store_id" => {
                if let Some(problem) = crate::fence::store_id_problem(value) {
                    return Err(settings.invalid(format!("option store_id: {problem}")));
                }
                self.store_id = Some(intern(value));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Applies the settings to the provider a backend's builder made, checking them against
    /// the backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a maximum hold out of its range or a store identity that
    /// cannot be used.
    pub fn apply(self, provider: LockProvider) -> Result<LockProvider> {
        let provider = provider.with_max_hold(self.max_hold)?;
        match self.store_id {
            Some(store_id) => provider.with_store_id(store_id),
            None => Ok(provider),
        }
    }
}

/// `text` stored once for the life of the process: the same text always gives the same
/// `&'static str`, so memory grows with the number of distinct values only.
fn intern(text: &str) -> &'static str {
    static TABLE: std::sync::OnceLock<std::sync::Mutex<HashSet<&'static str>>> = std::sync::OnceLock::new();
    let mut table = TABLE.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = table.get(text) {
        return known;
    }
    let stored: &'static str = Box::leak(Box::from(text));
    table.insert(stored);
    stored
}

fn invalid(backend: &'static str, message: impl Into<String>) -> Error {
    Error::invalid_config(backend, message)
}

/// The future a [`Scheme`] returns: a connected, health-checked provider.
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<LockProvider>> + Send>>;

/// One entry of the scheme table: the URL schemes a backend serves and how to connect.
#[derive(Clone, Copy, Debug)]
pub struct Scheme {
    /// The schemes, lower case, without `://`: `["redis", "rediss"]`.
    pub names: &'static [&'static str],
    /// The backend's name, as in its errors.
    pub backend: &'static str,
    /// Connects eagerly: checks every setting, reaches the store once, and returns the
    /// provider, or a retryable [`Error::Connection`] when the store does not answer.
    pub connect: fn(StoreUrl) -> ConnectFuture,
}

static TABLE: RwLock<Vec<Scheme>> = RwLock::new(Vec::new());

/// Adds `scheme` to the table that [`connect`] dispatches on. A scheme registered again
/// replaces the earlier entry, so registering the same backend twice is harmless.
pub fn register(scheme: Scheme) {
    let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    table.retain(|entry| !entry.names.iter().any(|name| scheme.names.contains(name)));
    table.push(scheme);
}

/// The entry that serves URL scheme `name`, if one is registered (`mem` always is).
pub fn lookup(name: &str) -> Option<Scheme> {
    if crate::memory::SCHEME.names.contains(&name) {
        return Some(crate::memory::SCHEME);
    }
    let table = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    table.iter().find(|entry| entry.names.contains(&name)).copied()
}

/// The schemes [`connect`] serves now, sorted.
pub fn registered() -> Vec<&'static str> {
    let table = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    let mut names: Vec<&'static str> =
        table.iter().chain([&crate::memory::SCHEME]).flat_map(|entry| entry.names.iter().copied()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Connects to the store named by `url` through the scheme table.
///
/// Use `lockkit::connect` from the facade crate, which registers the backends its
/// features build in first and says which feature a known scheme needs.
///
/// # Errors
///
/// [`Error::InvalidConfig`] for a URL that cannot be used or a scheme nobody registered;
/// the backend's errors when its store cannot be reached.
pub async fn connect(url: &str) -> Result<LockProvider> {
    let parsed = StoreUrl::parse(url)?;
    let Some(scheme) = lookup(parsed.scheme()) else {
        let known: Vec<String> = registered().into_iter().map(|name| format!("{name}://")).collect();
        return Err(invalid(
            "lockkit",
            format!("unknown scheme {:?} in {}; use one of {}", parsed.scheme(), parsed.redacted(), known.join(", ")),
        ));
    };
    (scheme.connect)(parsed).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_split_into_decoded_parts() {
        let url = StoreUrl::parse("Redis://app:p%40ss%3Aw@h1:6379,h2:6379/3?lease=10s&key_prefix=a%26b").unwrap();
        assert_eq!(url.scheme(), "redis");
        assert_eq!((url.user(), url.password()), (Some("app"), Some("p@ss:w")));
        assert_eq!((url.hosts(), url.path()), ("h1:6379,h2:6379", "/3"));
        assert_eq!(url.option("key_prefix"), Some("a&b"));
        assert_eq!(url.options().map(|(k, _)| k).collect::<Vec<_>>(), ["lease", "key_prefix"]);
        assert_eq!(url.address(), "redis://app:p%40ss%3Aw@h1:6379,h2:6379/3");
        assert_eq!(url.shown_address(), "redis://h1:6379,h2:6379/3");
        assert!(!format!("{url:?}").contains("p%40ss"));
        let file = StoreUrl::parse("file:///var/lock/app").unwrap();
        assert_eq!((file.hosts(), file.path()), ("", "/var/lock/app"));
    }

    #[test]
    fn max_hold_is_one_setting_read_by_the_shared_code() {
        let built = |url: &str| crate::memory::MemoryLockProvider::from_url(&StoreUrl::parse(url).unwrap());
        let provider = built("mem://max-hold?lease=3s&max_hold=2s").unwrap();
        assert_eq!(provider.max_hold(), Some(Duration::from_secs(2)));
        assert_eq!(provider.min_max_hold(), Duration::from_secs(1));
        let message = built("mem://max-hold?lease=3s&max_hold=500ms").unwrap_err().to_string();
        assert!(message.contains("max_hold is 500ms") && message.contains("at least 1s"), "{message}");
        assert!(built("mem://max-hold?max_hold=soon").unwrap_err().to_string().contains("option max_hold"));
        assert!(built("mem://max-hold?max_hold=2d").unwrap_err().to_string().contains("at most"));
        assert!(built("mem://max-hold?bogus=1").unwrap_err().to_string().contains("max_hold"), "the options listed");
    }

    #[test]
    fn store_identities_fold_tls_sort_hosts_and_drop_credentials() {
        let identity = |url: &str, keyspace: &[(&str, &str)]| StoreUrl::parse(url).unwrap().identity(keyspace);
        assert_eq!(identity("rediss://u:secret@B:1,a:2/3?lease=1s", &[]), "redis://a:2,b:1/3");
        assert_eq!(identity("redis://a:2,b:1/3", &[]), identity("rediss://b:1,A:2,a:2/3", &[]));
        assert_eq!(identity("postgresql://h:5432/db", &[("schema", "s")]), "postgres://h:5432/db?schema=s");
        assert_eq!(identity("rediss+sentinel://m/0", &[]), "redis+sentinel://m/0");
        assert_eq!(identity("redis://h:1/0", &[("p", "x"), ("a", "#%&=")]), "redis://h:1/0?a=%23%25%26%3D&p=x");
        assert_eq!(identity("file:///var/lock/a#b", &[]), "file:///var/lock/a%23b");
    }

    #[test]
    fn store_id_is_one_setting_read_by_the_shared_code() {
        let built = |url: &str| crate::memory::MemoryLockProvider::from_url(&StoreUrl::parse(url).unwrap());
        let provider = built("mem://store-id?store_id=orders-db").unwrap();
        assert_eq!(provider.store_identity().as_deref(), Some("orders-db"));
        let lock = provider.lock("a").unwrap();
        assert_eq!(lock.lock_id().to_string(), "orders-db#a");
        assert_eq!(lock.store().address(), Some("orders-db"), "multi-locks order by it too");
        let message = built("mem://store-id?store_id=a%23b").unwrap_err().to_string();
        assert!(message.contains("store_id") && message.contains('#'), "{message}");
        let plain = built("mem://store-id").unwrap();
        let other = built("mem://store-id").unwrap();
        assert_eq!(plain.store_identity(), other.store_identity(), "two clients of one store are one store");
        assert_ne!(plain.store_identity(), built("mem://another-store").unwrap().store_identity());
    }

    #[test]
    fn bad_urls_say_what_to_change() {
        let message = |url: &str| StoreUrl::parse(url).unwrap_err().to_string();
        assert!(message("localhost:6379").contains("redis://host:6379"));
        assert!(message("redis://h/?lease=1s&lease=2s").contains("twice"));
        assert!(message("redis://u:%ff@h").contains("not UTF-8"));
        assert!(!message("redis://u:%ffsecret@h").contains("secret"));
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        for bad in ["5", "", "s", "-1s", "1x", "1e400s", "NaNs", "5000000000000000000000000h"] {
            assert!(parse_duration(bad).unwrap_err().contains("500ms"), "{bad}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://app:s3cret@host:6379/0"), "redis://app:***@host:6379/0");
        assert_eq!(redact("zk://u:p@h1:2181,h2:2181/app"), "zk://u:***@h1:2181,h2:2181/app");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn ranges_are_checked_with_advice() {
        let settings = Settings::of("test");
        let day = Duration::from_secs(86_400);
        assert!(settings.within("lease", Duration::from_secs(1), Duration::ZERO, Duration::MAX).is_ok());
        let message = settings.within("lease", day * 400, Duration::ZERO, Duration::MAX).unwrap_err().to_string();
        assert!(message.contains("lease") && message.contains("at most 86400s"), "{message}");
        assert!(settings.flag("fair", "yes").unwrap_err().to_string().contains("true or false"));
        assert!(settings.unknown("color", &["lease"]).to_string().contains("takes: lease"));
    }
}
