//! The provider's settings: what a user may set, the defaults, and the checks that refuse
//! settings that cannot work before anything touches the network.

use std::time::Duration;

use lockkit_core::{Error, Result};
use redis::IntoConnectionInfo;

use crate::BACKEND;
use crate::provider::RedisLockProvider;

/// The default lease: how long a hold outlives its holder when the holder dies.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The default key prefix: every key lockkit writes starts with `lockkit:`.
pub const DEFAULT_PREFIX: &str = "lockkit";

/// The default time a single command may take before its outcome counts as unknown.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The default claim window: how long a lock handed over to the head of a fair lock's queue
/// waits for the head to confirm it (see [`RedisLockProviderBuilder::claim_window`]).
pub const DEFAULT_CLAIM_WINDOW: Duration = Duration::from_millis(200);

/// The shortest claim window accepted: a live head must be told and confirm within it.
pub const MIN_CLAIM_WINDOW: Duration = Duration::from_millis(20);

/// The shortest lease accepted: below it, a renewal round trip on a busy network could not
/// be confirmed in time and every hold would be lost at random.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// Builds a [`RedisLockProvider`]; every setting is checked in [`build`](Self::build).
///
/// ```
/// use std::time::Duration;
/// use lockkit_redis::RedisLockProvider;
///
/// let provider = RedisLockProvider::builder()
///     .url("redis://app:secret@127.0.0.1:6379/2")
///     .key_prefix("billing")
///     .lease(Duration::from_secs(10))
///     .build()?;
/// # Ok::<(), lockkit_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct RedisLockProviderBuilder {
    url: Option<String>,
    prefix: Option<String>,
    lease: Option<Duration>,
    renew_every: Option<Duration>,
    response_timeout: Option<Duration>,
    drift: Option<Duration>,
    fair: Option<bool>,
    claim_window: Option<Duration>,
    #[cfg(feature = "tls")]
    tls: TlsSettings,
}

impl RedisLockProviderBuilder {
    /// The server to use: `redis://[user[:password]@]host[:port][/db]`, or `rediss://` for
    /// TLS. A user name selects an ACL user; a password alone authenticates the default user.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The prefix of every key and channel, so that several applications share one server
    /// without colliding (default `lockkit`). Braces are refused: they would change the hash
    /// slot of the keys on Redis Cluster.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How long a hold survives without renewal (default 30 s): the time a dead holder keeps
    /// the lock, and the budget a live holder has to renew it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How often the watchdog renews held locks (default a third of the lease).
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How long one command may take before its outcome counts as unknown (default 2 s,
    /// and never more than a fifth of the lease when the lease is short).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// The margin for clock rate differences between this host and the server: a hold's
    /// local deadline is the send time of its last confirmed renewal plus the lease minus
    /// this margin (default 1% of the lease plus 2 ms, as the Redlock analysis suggests).
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Whether waiters are granted the lock in the order they started waiting (default
    /// `true`).
    ///
    /// A fair lock keeps a wait queue in Redis: a waiting acquisition joins it when it finds
    /// the lock taken, and while the queue has entries a free lock belongs to its head alone,
    /// so no waiter starves however busy the lock is. Its cost is paid only under
    /// contention: a releaser that asks again goes to the back instead of winning at once,
    /// and a waiter whose process dies stays in the queue until its entry expires (twice the
    /// lease) or, when its turn comes, until its claim window of 200 ms closes.
    ///
    /// `false` makes every release a race between the woken waiters: a little more
    /// throughput for a client that takes the same lock again and again, and a wait that,
    /// for an unlucky waiter, has no bound.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = Some(fair);
        self
    }

    /// How long a fair lock handed over to the head of its queue waits for the head to take
    /// it (default 200 ms, at least 20 ms, at most the lease).
    ///
    /// A release grants the lock to the head of the queue for this long only, and tells the
    /// head's provider; a live head confirms the hand-over within about one round trip, and a
    /// head whose process died lets it expire, after which the next waiter's turn comes. So
    /// this is what each dead waiter at the head of a queue costs the others, and it must
    /// cover a few round trips of your network plus a pause of the waiting process: raise it
    /// for servers far away, or for clients that stall. A head that misses its window loses
    /// its place and queues again at the back.
    pub fn claim_window(mut self, window: Duration) -> Self {
        self.claim_window = Some(window);
        self
    }

    /// Trusts the certificate authority in `pem` (PEM-encoded) for `rediss://` servers,
    /// instead of the system's trust store: for servers with a private CA.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// Presents a client certificate (`certificate` and `key`, PEM-encoded) to `rediss://`
    /// servers that authenticate clients (`tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(mut self, certificate: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.tls.client = Some((certificate.into(), key.into()));
        self
    }

    /// Checks the settings and builds the provider. No connection is made here: the first
    /// operation connects, and a server that cannot be reached then gives a retryable
    /// [`Error::Connection`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting to change.
    pub fn build(self) -> Result<RedisLockProvider> {
        RedisLockProvider::from_settings(self.settings()?)
    }

    pub(crate) fn settings(self) -> Result<Settings> {
        let url = self.url.ok_or_else(|| invalid("no server URL was given: call .url(\"redis://host:port\")"))?;
        let connection = parse_url(&url)?;
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        check_prefix(&prefix)?;
        let lease = self.lease.unwrap_or(DEFAULT_LEASE);
        if lease < MIN_LEASE {
            return Err(invalid(format!(
                "the lease ({lease:?}) is below the floor of {MIN_LEASE:?}: a renewal could not be confirmed in time; use a longer lease"
            )));
        }
        let renew_every = self.renew_every.unwrap_or(lease / 3);
        let drift = self.drift.unwrap_or(lease / 100 + Duration::from_millis(2));
        let response_timeout = self.response_timeout.unwrap_or_else(|| DEFAULT_RESPONSE_TIMEOUT.min(lease / 5));
        if renew_every.is_zero() {
            return Err(invalid("renew_every must be above zero; a third of the lease is a good choice"));
        }
        if response_timeout.is_zero() {
            return Err(invalid("response_timeout must be above zero; a fifth of the lease is a good choice"));
        }
        if drift >= lease / 2 {
            return Err(invalid(format!(
                "the drift margin ({drift:?}) must stay below half the lease ({lease:?}); 1% of the lease is typical"
            )));
        }
        let budget = lease - drift;
        if renew_every + response_timeout >= budget {
            return Err(invalid(format!(
                "renew_every ({renew_every:?}) plus response_timeout ({response_timeout:?}) must stay below the lease minus the drift margin ({budget:?}), or a hold expires before its renewal is confirmed; renew every third of the lease"
            )));
        }
        let claim_window = self.claim_window.unwrap_or(DEFAULT_CLAIM_WINDOW.min(lease));
        if claim_window < MIN_CLAIM_WINDOW || claim_window > lease {
            return Err(invalid(format!(
                "the claim window ({claim_window:?}) must be between {MIN_CLAIM_WINDOW:?} and the lease ({lease:?}); a few round trips to the server, 200 ms by default"
            )));
        }
        #[cfg(feature = "tls")]
        if !self.tls.is_empty() && !matches!(connection.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(invalid(format!(
                "TLS certificates were given but the URL {url:?} does not use TLS; write it as rediss://"
            )));
        }
        Ok(Settings {
            connection,
            url,
            prefix,
            lease,
            renew_every,
            response_timeout,
            drift,
            fair: self.fair.unwrap_or(true),
            claim_window,
            #[cfg(feature = "tls")]
            tls: self.tls,
        })
    }
}

/// Settings that passed every check.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) connection: redis::ConnectionInfo,
    pub(crate) url: String,
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) drift: Duration,
    pub(crate) fair: bool,
    /// How long a hand-over waits for the head to confirm it.
    pub(crate) claim_window: Duration,
    #[cfg(feature = "tls")]
    pub(crate) tls: TlsSettings,
}

/// Certificates for TLS connections; printed without their contents.
#[cfg(feature = "tls")]
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    root: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl TlsSettings {
    fn is_empty(&self) -> bool {
        self.root.is_none() && self.client.is_none()
    }

    /// The certificates in the redis crate's form, when any were given.
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.is_empty() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|(certificate, key)| redis::ClientTlsConfig {
                client_cert: certificate.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.root.clone(),
        })
    }
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("root", &self.root.as_ref().map(|_| "<certificate>"))
            .field("client", &self.client.as_ref().map(|_| "<certificate and key>"))
            .finish()
    }
}

impl Settings {
    /// The lease in whole milliseconds, as the scripts take it.
    pub(crate) fn lease_millis(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    /// The claim window in whole milliseconds, as the scripts take it.
    pub(crate) fn claim_millis(&self) -> u64 {
        u64::try_from(self.claim_window.as_millis()).unwrap_or(u64::MAX)
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_config(BACKEND, message)
}

fn parse_url(url: &str) -> Result<redis::ConnectionInfo> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    match scheme {
        Some("redis" | "rediss" | "redis+unix" | "unix") => {}
        Some(other) => {
            return Err(invalid(format!(
                "the URL {url:?} has the scheme {other:?}; use redis:// (or rediss:// for TLS)"
            )));
        }
        None => return Err(invalid(format!("{url:?} is not a URL; write it as redis://host:port"))),
    }
    url.into_connection_info().map_err(|error| {
        let hint = if scheme == Some("rediss") && error.to_string().contains("TLS") {
            " (rediss:// needs the `tls` feature of lockkit-redis: enable it in your Cargo.toml)"
        } else {
            ""
        };
        invalid(format!("the URL {url:?} cannot be used: {error}{hint}"))
    })
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(invalid("the key prefix is empty; leave it unset for `lockkit`, or name your application"));
    }
    if prefix.contains(['{', '}']) {
        return Err(invalid(format!(
            "the key prefix {prefix:?} contains a brace, which would move lockkit's keys to another Redis Cluster hash slot; remove it"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(invalid(format!("the key prefix {prefix:?} contains control characters; remove them")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(builder: RedisLockProviderBuilder) -> String {
        match builder.settings() {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    fn base() -> RedisLockProviderBuilder {
        RedisLockProviderBuilder::default().url("redis://127.0.0.1:6379")
    }

    #[test]
    fn defaults_follow_the_lease() {
        let settings = base().settings().unwrap();
        assert_eq!(settings.lease, DEFAULT_LEASE);
        assert_eq!(settings.renew_every, Duration::from_secs(10));
        assert_eq!(settings.drift, Duration::from_millis(302));
        assert_eq!(settings.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
        assert_eq!(settings.prefix, "lockkit");
        assert!(settings.fair);
        assert!(!base().fair(false).settings().unwrap().fair);
        assert_eq!(settings.claim_window, DEFAULT_CLAIM_WINDOW);
        let short = base().lease(MIN_LEASE).settings().unwrap();
        assert_eq!(short.claim_window, MIN_LEASE, "a hand-over never outlives a lease");
    }

    #[test]
    fn acl_users_and_databases_are_read_from_the_url() {
        let settings = base().url("redis://app:s3cret@localhost:7000/3").settings().unwrap();
        assert_eq!(settings.connection.redis_settings().username(), Some("app"));
        assert_eq!(settings.connection.redis_settings().password(), Some("s3cret"));
        assert_eq!(settings.connection.redis_settings().db(), 3);
    }

    #[test]
    fn bad_settings_say_what_to_change() {
        assert!(message(RedisLockProviderBuilder::default()).contains(".url("));
        assert!(message(base().url("http://localhost")).contains("redis://"));
        assert!(message(base().url("localhost:6379")).contains("redis://"));
        assert!(message(base().url("redis://localhost:notaport")).contains("cannot be used"));
        assert!(message(base().lease(Duration::from_millis(10))).contains("floor"));
        assert!(message(base().renew_every(Duration::ZERO)).contains("renew_every"));
        assert!(message(base().response_timeout(Duration::ZERO)).contains("response_timeout"));
        assert!(message(base().renew_every(Duration::from_secs(29))).contains("renew_every"));
        assert!(message(base().drift(Duration::from_secs(20))).contains("drift"));
        assert!(message(base().key_prefix("a{b")).contains("brace"));
        assert!(message(base().key_prefix("")).contains("empty"));
        assert!(message(base().claim_window(Duration::from_millis(5))).contains("claim window"));
        assert!(message(base().claim_window(Duration::from_secs(31))).contains("claim window"));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_urls_name_the_feature_to_enable() {
        assert!(message(base().url("rediss://127.0.0.1:6380")).contains("`tls` feature of lockkit-redis"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_certificates_need_a_tls_url() {
        assert!(message(base().tls_root_certificate(b"pem".to_vec())).contains("rediss://"));
        assert!(base().url("rediss://127.0.0.1:6380").tls_root_certificate(b"pem".to_vec()).settings().is_ok());
    }
}
