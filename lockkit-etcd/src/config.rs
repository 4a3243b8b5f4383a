//! The settings of an etcd provider: the builder, URL reading and the checks `build` makes.

use std::time::Duration;

use lockkit_core::config::{ProviderSettings, Settings, StoreUrl};
use lockkit_core::{LockName, Result};

use crate::BACKEND;
use crate::provider::EtcdLockProvider;

const SETTINGS: Settings = Settings::of(BACKEND);

/// The URL options [`EtcdLockProviderBuilder::option`] takes.
pub const OPTIONS: &[&str] = &["ttl", "drift", "connect_timeout", "prefix", "max_hold"];

/// The shortest lease etcd grants with its default timing (a heartbeat of 100 ms and an
/// election timeout of 1 s): it raises shorter leases to this silently, so a shorter TTL is
/// refused rather than quietly lengthened.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// The default lease of a provider's holds.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// The default key prefix under which every lock's keys live.
pub const DEFAULT_PREFIX: &str = "lockkit";

/// The longest key prefix accepted, in bytes.
const MAX_PREFIX: usize = 512;

/// The checked settings of one provider.
#[derive(Clone, Debug)]
pub(crate) struct EtcdConfig {
    /// `http://host:port` for each member.
    pub(crate) endpoints: Vec<String>,
    /// The members as written, for messages.
    pub(crate) address: String,
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) credentials: Option<(String, String)>,
}

impl EtcdConfig {
    /// The key prefix of lock `name`'s contender keys, ending in `/`.
    pub(crate) fn lock_prefix(&self, name: &LockName) -> String {
        format!("{}/{}/", self.prefix, escape(name.as_str()))
    }
}

/// Escapes a lock name into one key segment: ASCII letters, digits, `.`, `_` and `-` stay,
/// every other byte becomes `%XX`, so no name can contain `/` or collide with another.
pub(crate) fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Every setting of an [`EtcdLockProvider`]; [`build`](Self::build) checks them and does no
/// I/O.
#[derive(Clone, Debug, Default)]
pub struct EtcdLockProviderBuilder {
    endpoints: Option<String>,
    prefix: Option<String>,
    ttl: Option<Duration>,
    drift: Option<Duration>,
    connect_timeout: Option<Duration>,
    credentials: Option<(String, String)>,
    common: ProviderSettings,
}

impl EtcdLockProviderBuilder {
    /// The settings an `etcd://` URL gives:
    /// `etcd://[user:password@]host:port[,host:port…][/prefix][?option=value&…]`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for another scheme
    /// (`etcds://` included: TLS is not built yet), members that mix schemes, half
    /// credentials or an unknown or bad option.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        match url.scheme() {
            "etcd" => {}
            "etcds" => {
                return Err(SETTINGS.invalid(format!(
                    "{}: etcds:// (TLS) is not supported by this version of lockkit-etcd; use etcd:// on a trusted network",
                    url.redacted()
                )));
            }
            _ => {
                return Err(SETTINGS.invalid(format!(
                    "{} is not an etcd:// URL; write etcd://[user:password@]host:2379[,host:2379…][/prefix]",
                    url.redacted()
                )));
            }
        }
        let shown = url.redacted();
        let members = shown.split_once("://").map_or("", |(_, rest)| rest);
        if members.contains("etcd://") || members.contains("etcds://") {
            return Err(SETTINGS.invalid(format!(
                "{shown} mixes schemes among its members: write one scheme for all of them, \
                 etcd://host:2379,host:2379 (or etcds://… for TLS, all members alike)"
            )));
        }
        let mut builder = Self::default().endpoints(url.hosts());
        let path = url.path().trim_start_matches('/');
        if !path.is_empty() {
            builder = builder.prefix(path);
        }
        match (url.user(), url.password()) {
            (None, None) => {}
            (Some(user), Some(password)) => builder = builder.credentials(user, password),
            _ => {
                return Err(SETTINGS.invalid(format!(
                    "the credentials in {} need both a user and a password: write etcd://user:password@host:2379",
                    url.redacted()
                )));
            }
        }
        for (key, value) in url.options() {
            builder = builder.option(key, value)?;
        }
        Ok(builder)
    }

    /// The members, `host:port[,host:port…]` (port 2379 when left out).
    pub fn endpoints(mut self, endpoints: impl Into<String>) -> Self {
        self.endpoints = Some(endpoints.into());
        self
    }

    /// The key prefix under which every lock's keys live (`lockkit` by default): segments of
    /// ASCII letters, digits, `.`, `_` and `-` separated by single `/`, at most 512 bytes.
    /// The path of an `etcd://` URL, or URL option `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The TTL of the provider's lease, which every hold is bound to: a holder that dies
    /// frees its locks when the lease expires. 10 s by default; whole seconds (etcd counts
    /// leases in seconds), at least 2 s (etcd's shortest lease) and at most a day. Renewed
    /// every third of it. URL option `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How much earlier than the lease the guard's deadline falls, for clock drift between
    /// this host and the server: a tenth of the TTL by default, below half the TTL. URL
    /// option `drift`.
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// How long connecting to a member and each request may take; 5 s by default, at least
    /// 1 ms. URL option `connect_timeout`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// A user name and password for etcd's authentication.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Sets one option by its URL name ([`OPTIONS`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for an unknown option or
    /// a value that does not parse.
    pub fn option(mut self, key: &str, value: &str) -> Result<Self> {
        if self.common.option(SETTINGS, key, value)? {
            return Ok(self);
        }
        Ok(match key {
            "ttl" => self.ttl(SETTINGS.duration(key, value)?),
            "drift" => self.drift(SETTINGS.duration(key, value)?),
            "connect_timeout" => self.connect_timeout(SETTINGS.duration(key, value)?),
            "prefix" => self.prefix(value),
            _ => return Err(SETTINGS.unknown(key, OPTIONS)),
        })
    }

    /// Checks every setting and makes the provider, without I/O: it connects on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming what to change.
    pub fn build(self) -> Result<EtcdLockProvider> {
        let common = self.common;
        let mut provider = EtcdLockProvider::new(self.config()?);
        provider.provider = common.apply(provider.provider)?;
        Ok(provider)
    }

    /// The default maximum hold of the provider's acquisitions
    /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
    /// keep-alives no longer extend the hold, the guard is told with
    /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached), and its key
    /// is deleted (the provider's lease, which its other holds keep alive, would keep it).
    /// None by default; at least a third of the TTL. URL option `max_hold`.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.common.max_hold = Some(max_hold);
        self
    }

    pub(crate) fn config(self) -> Result<EtcdConfig> {
        let Some(written) = self.endpoints.filter(|e| !e.trim().is_empty()) else {
            return Err(
                SETTINGS.invalid("no members: call endpoints(\"host:2379[,host:2379…]\") or use an etcd:// URL")
            );
        };
        let mut endpoints = Vec::new();
        for member in written.split(',').map(str::trim) {
            endpoints.push(endpoint(member)?);
        }
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        check_prefix(&prefix)?;
        let ttl =
            SETTINGS.within("ttl", self.ttl.unwrap_or(DEFAULT_TTL), MIN_TTL, lockkit_core::config::MAX_DURATION)?;
        if ttl.subsec_nanos() != 0 {
            return Err(SETTINGS.invalid(format!(
                "ttl is {ttl:?}; etcd counts leases in whole seconds: give a whole number of seconds"
            )));
        }
        let drift = self.drift.unwrap_or(ttl / 10);
        if drift >= ttl / 2 {
            return Err(SETTINGS.invalid(format!("drift is {drift:?}; it must be below half the ttl ({:?})", ttl / 2)));
        }
        let connect_timeout = SETTINGS.within(
            "connect_timeout",
            self.connect_timeout.unwrap_or(Duration::from_secs(5)),
            Duration::from_millis(1),
            lockkit_core::config::MAX_DURATION,
        )?;
        if let Some((user, _)) = &self.credentials
            && user.is_empty()
        {
            return Err(SETTINGS.invalid("the user name of the credentials is empty"));
        }
        Ok(EtcdConfig {
            endpoints,
            address: format!("etcd://{written}/{prefix}"),
            prefix,
            ttl,
            drift,
            connect_timeout,
            credentials: self.credentials,
        })
    }
}

/// `http://host:port` for one member as written (`host`, `host:port`, `[::1]:port`).
fn endpoint(member: &str) -> Result<String> {
    if member.contains("://") {
        return Err(SETTINGS.invalid(format!(
            "member {member:?} carries its own scheme: every member of an etcd:// URL uses the URL's scheme, \
             so write host:port only (and do not mix etcd:// and etcds:// members)"
        )));
    }
    let bad = || SETTINGS.invalid(format!("member {member:?} is not host:port"));
    if member.is_empty() || member.contains(['/', '?', '@', ' ']) {
        return Err(bad());
    }
    let (host, port) = if let Some(rest) = member.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match member.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (member.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad());
    }
    let port: u16 = match port {
        None => 2379,
        Some(port) => port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
            SETTINGS.invalid(format!("member {member:?} has port {port:?}; a port is a number from 1 to 65535"))
        })?,
    };
    Ok(format!("http://{host}:{port}"))
}

fn check_prefix(prefix: &str) -> Result<()> {
    let ok_segment =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if prefix.len() > MAX_PREFIX || !prefix.split('/').all(ok_segment) {
        return Err(SETTINGS.invalid(format!(
            "prefix {prefix:?} is not a valid key prefix: write segments of ASCII letters, digits, '.', '_' and '-' \
             separated by single '/', without a leading or trailing '/', at most {MAX_PREFIX} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(url: &str) -> Result<EtcdConfig> {
        EtcdLockProviderBuilder::from_url(&StoreUrl::parse(url)?)?.config()
    }

    #[test]
    fn urls_give_members_prefix_and_options() {
        let c = config("etcd://u:p@a:1,b,[::1]:3/app/x?ttl=4s&drift=200ms").unwrap();
        assert_eq!(c.endpoints, ["http://a:1", "http://b:2379", "http://[::1]:3"]);
        assert_eq!(c.prefix, "app/x");
        assert_eq!((c.ttl, c.drift), (Duration::from_secs(4), Duration::from_millis(200)));
        assert_eq!(c.credentials, Some(("u".into(), "p".into())));
        assert_eq!(config("etcd://h:2379").unwrap().prefix, DEFAULT_PREFIX);
    }

    #[test]
    fn bad_urls_say_what_to_change() {
        for (url, says) in [
            ("etcds://h:2379", "TLS"),
            ("etcd://h:2379,etcds://g:2379", "mix"),
            ("etcd://h:2379/a//b", "prefix"),
            ("etcd://h:2379/a b", "prefix"),
            ("etcd://h:2379?ttl=1s", "ttl"),
            ("etcd://h:2379?ttl=2500ms", "whole"),
            ("etcd://h:2379?ttl=3d", "ttl"),
            ("etcd://h:2379?ttl=4s&drift=2s", "drift"),
            ("etcd://h:0", "port"),
            ("etcd://h:99999", "port"),
            ("etcd://", "members"),
            ("etcd://u@h", "password"),
            ("etcd://h?nope=1", "nope"),
        ] {
            let error = config(url).unwrap_err();
            assert!(matches!(error, lockkit_core::Error::InvalidConfig { .. }), "{url}: {error}");
            assert!(error.to_string().contains(says), "{url}: {error}");
        }
    }

    #[test]
    fn names_escape_into_one_segment_without_collisions() {
        assert_eq!(escape("a/b c"), "a%2Fb%20c");
        assert_ne!(escape("a/b"), escape("a%2Fb"));
        assert_eq!(escape("Ab.9_-"), "Ab.9_-");
    }
}
