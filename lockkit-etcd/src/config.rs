//! The settings of an etcd provider: the builder, URL reading and the checks `build` makes.

use std::time::Duration;

use lockkit_core::config::{ClientTls, Credentials, Key, MAX_HOLD, OptionKey, STORE_ID, TLS_KEYS, timing};
use lockkit_core::{LockName, Result};

use crate::BACKEND;

const TTL: Key<Duration> = timing::lease("ttl", DEFAULT_TTL, MIN_TTL).range_said("whole seconds, 2s to 1d");
const DRIFT: Key<Duration> = timing::DRIFT.default_said("a tenth of the ttl").range_said("below half the ttl");
const CONNECT_TIMEOUT: Key<Duration> = timing::CONNECT_TIMEOUT.default(Duration::from_secs(5));
const PREFIX: Key<String> =
    Key::new("prefix", "the key prefix under which every lock's keys live (also the URL's path)")
        .default(DEFAULT_PREFIX);

/// The URL options [`EtcdLockProviderBuilder::option`] takes; the TLS ones (paths of PEM
/// files) with `etcds://` only.
pub const OPTIONS: &[&dyn OptionKey] = &[
    &TTL,
    &DRIFT,
    &CONNECT_TIMEOUT,
    &PREFIX,
    &MAX_HOLD,
    &STORE_ID,
    &TLS_KEYS.root,
    &TLS_KEYS.certificate,
    &TLS_KEYS.key,
];

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

/// The port of a member that names none: etcd's client port.
const DEFAULT_PORT: u16 = 2379;

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
    pub(crate) credentials: Option<Credentials>,
    /// The certificates of an `etcds://` provider; `None` for plain `etcd://`.
    pub(crate) tls: Option<ClientTls>,
    /// How many holds at once make the session watch the deletions under its whole prefix.
    pub(crate) many_holds: usize,
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

/// How many holds at once make a session watch the deletions under its whole prefix rather
/// than list its holds' keys after each keep-alive.
pub(crate) const MANY_HOLDS: usize = 1000;

lockkit_core::provider_builder! {
    /// Every setting of an [`EtcdLockProvider`](crate::EtcdLockProvider); [`build`](Self::build) checks them and does no
    /// I/O.
    pub struct EtcdLockProviderBuilder(BACKEND, OPTIONS) {
        endpoints: Option<String>,
        credentials: Option<Credentials>,
        tls: bool,
        /// The many-holds threshold set for tests; the session's default otherwise.
        many_holds: Option<usize>,
    }
    /// The members, TLS (`etcds://`), the prefix (the path) and the credentials of an
    /// `etcd://` URL.
    address(self, url) {
        let form = "etcd://[user:password@]host:2379[,host:2379…][/prefix]";
        self.tls = url.expect_scheme(BACKEND, &["etcd", "etcds"], form)? == "etcds";
        let shown = url.redacted();
        let members = shown.split_once("://").map_or("", |(_, rest)| rest);
        if members.contains("etcd://") || members.contains("etcds://") {
            return Err(self.options.invalid(format!(
                "{shown} mixes schemes among its members: write one scheme for all of them, \
                 etcd://host:2379,host:2379 (or etcds://… for TLS, all members alike)"
            )));
        }
        self.credentials = url.credentials(BACKEND)?;
        self.endpoints = Some(url.hosts().to_owned());
        let path = url.path().trim_start_matches('/');
        if !path.is_empty() {
            self.options.set(&PREFIX, path.to_owned());
        }
        Ok(())
    }
}

impl EtcdLockProviderBuilder {
    lockkit_core::builder_methods!();

    /// The members, `host:port[,host:port…]` (port 2379 when left out).
    pub fn endpoints(mut self, endpoints: impl Into<String>) -> Self {
        self.endpoints = Some(endpoints.into());
        self
    }

    lockkit_core::option_setters! {
        /// The key prefix under which every lock's keys live (`lockkit` by default): segments of
        /// ASCII letters, digits, `.`, `_` and `-` separated by single `/`, at most 512 bytes.
        /// The path of an `etcd://` URL, or URL option `prefix`.
        fn prefix(prefix: impl Into<String>) => PREFIX;

        /// The TTL of the provider's lease, which every hold is bound to: a holder that dies
        /// frees its locks when the lease expires. 10 s by default; whole seconds (etcd counts
        /// leases in seconds), at least 2 s (etcd's shortest lease) and at most a day. Renewed
        /// every third of it. URL option `ttl`.
        fn ttl(ttl: Duration) => TTL;

        /// How much earlier than the lease the guard's deadline falls, for clock drift between
        /// this host and the server: a tenth of the TTL by default, below half the TTL. URL
        /// option `drift`.
        fn drift(drift: Duration) => DRIFT;

        /// How long connecting to a member and each request may take; 5 s by default, at least
        /// 1 ms. URL option `connect_timeout`.
        fn connect_timeout(timeout: Duration) => CONNECT_TIMEOUT;

        /// A user name and password for etcd's authentication.
        fn credentials(user, password) => credentials;

        /// How many holds at once make the provider watch the deletions under its whole prefix
        /// instead of listing its holds' keys after each keep-alive; 1,000 by default, 0 counts as
        /// 1. For tests, which run the contract's loss cases on the prefix watch with 1 (a session
        /// whose watch is not set within the connect timeout then fails to open): both ways keep
        /// the contract, and the default is where the watch costs less than the listing.
        #[doc(hidden)]
        fn many_holds_threshold(holds) => many_holds;
    }

    /// Connects to the members with TLS (what an `etcds://` URL says). Without the `tls`
    /// feature, [`build`](Self::build) refuses it with an error naming the feature.
    pub fn tls(mut self, enabled: bool) -> Self {
        self.tls = enabled;
        self
    }

    lockkit_core::option_setters! {
        #[cfg(feature = "tls")]
        #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
        tls(TLS_KEYS);

        /// The default maximum hold of the provider's acquisitions
        /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
        /// keep-alives no longer extend the hold, the guard is told with
        /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached), and its key
        /// is deleted (the provider's lease, which its other holds keep alive, would keep it).
        /// None by default; at least a third of the TTL. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;
    }

    pub(crate) fn config(&self) -> Result<EtcdConfig> {
        let options = &self.options;
        options.check()?;
        let Some(written) = self.endpoints.clone().filter(|e| !e.trim().is_empty()) else {
            return Err(invalid("no members: call endpoints(\"host:2379[,host:2379…]\") or use an etcd:// URL"));
        };
        let plain = "the members use etcd:// (plain TCP): write the URL as etcds://host:2379 (or call tls(true))";
        let tls = TLS_KEYS.load_checked(options, self.tls, cfg!(feature = "tls"), plain)?;
        let (scheme, http) = if tls.is_some() { ("etcds", "https") } else { ("etcd", "http") };
        let members = lockkit_core::config::parse_hosts(BACKEND, &written, DEFAULT_PORT)?;
        let endpoints = members.iter().map(|member| format!("{http}://{member}")).collect();
        let prefix = options.value(&PREFIX)?;
        check_prefix(&prefix)?;
        let ttl = options.value(&TTL)?;
        if ttl.subsec_nanos() != 0 {
            return Err(invalid(format!(
                "ttl is {ttl:?}; etcd counts leases in whole seconds: give a whole number of seconds"
            )));
        }
        let drift = options.below(&DRIFT, ttl / 10, ttl / 2, "half the ttl")?;
        let connect_timeout = options.value(&CONNECT_TIMEOUT)?;
        Credentials::check(self.credentials.as_ref(), BACKEND, &[])?;
        Ok(EtcdConfig {
            endpoints,
            address: format!("{scheme}://{written}/{prefix}"),
            prefix,
            ttl,
            drift,
            connect_timeout,
            credentials: self.credentials.clone(),
            tls,
            many_holds: self.many_holds.unwrap_or(MANY_HOLDS),
        })
    }
}

/// An `InvalidConfig` error of this backend.
fn invalid(message: impl Into<String>) -> lockkit_core::Error {
    lockkit_core::Error::invalid_config(BACKEND, message)
}

fn check_prefix(prefix: &str) -> Result<()> {
    let ok_segment =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if prefix.len() > MAX_PREFIX || !prefix.split('/').all(ok_segment) {
        return Err(invalid(format!(
            "prefix {prefix:?} is not a valid key prefix: write segments of ASCII letters, digits, '.', '_' and '-' \
             separated by single '/', without a leading or trailing '/', at most {MAX_PREFIX} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_core::config::StoreUrl;

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
        assert_eq!(c.credentials, Some(Credentials::new("u", "p")));
        assert_eq!(config("etcd://h:2379").unwrap().prefix, DEFAULT_PREFIX);
    }

    #[test]
    fn bad_urls_say_what_to_change() {
        for (url, says) in [
            #[cfg(not(feature = "tls"))]
            ("etcds://h:2379", "`tls` feature of lockkit-etcd"),
            #[cfg(feature = "tls")]
            ("etcds://h:2379?tls_root_certificate=/nonexistent/ca.pem", "cannot be read"),
            ("etcd://h:2379?tls_root_certificate=/etc/hostname", "etcds://"),
            ("etcds://h:2379,etcd://g:2379", "mix"),
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

    #[cfg(feature = "tls")]
    #[test]
    fn etcds_urls_use_https_and_check_their_certificates() {
        let c = config("etcds://a:1,b/app").unwrap();
        assert_eq!(c.endpoints, ["https://a:1", "https://b:2379"]);
        assert!(c.address.starts_with("etcds://"));
        assert!(c.tls.as_ref().is_some_and(|t| t.root.is_none() && t.client.is_none()));
        let dir = std::env::temp_dir().join(format!("lockkit-etcd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let cert = dir.join("cert.pem");
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").unwrap();
        let shown = |p: &std::path::Path| p.display().to_string();
        for (url, says) in [
            (format!("etcds://h?tls_root_certificate={}", shown(&not_pem)), "not a PEM certificate"),
            (format!("etcds://h?tls_client_certificate={}", shown(&cert)), "needs its key"),
            (
                format!("etcds://h?tls_client_certificate={}&tls_client_key={}", shown(&cert), shown(&cert)),
                "not a PEM private key",
            ),
        ] {
            let error = config(&url).unwrap_err();
            assert!(error.to_string().contains(says), "{url}: {error}");
        }
        let c = config(&format!("etcds://h?tls_root_certificate={}", shown(&cert))).unwrap();
        assert!(c.tls.unwrap().root.is_some());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn names_escape_into_one_segment_without_collisions() {
        assert_eq!(escape("a/b c"), "a%2Fb%20c");
        assert_ne!(escape("a/b"), escape("a%2Fb"));
        assert_eq!(escape("Ab.9_-"), "Ab.9_-");
    }
}
