//! The settings a [`RedisLockProviderBuilder`](crate::RedisLockProviderBuilder) checked
//! ([`Settings`]), and what they are read from: the server URL (one server, the sentinels of
//! a primary, or the nodes of a cluster) and the store's identity.

use std::time::Duration;

use lockkit_core::config::{self, ClientTls, StoreUrl};
use lockkit_core::{Error, Result};
use redis::IntoConnectionInfo;

use crate::BACKEND;
use crate::cluster::ClusterSettings;
use crate::sentinel::SentinelSettings;

/// Settings that passed every check.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The server; with `sentinel`, a template (credentials, database, TLS) pointed at each
    /// primary the sentinels name.
    pub(crate) connection: redis::ConnectionInfo,
    /// The sentinels of a `redis+sentinel://` URL.
    pub(crate) sentinel: Option<SentinelSettings>,
    /// The nodes of a `redis+cluster://` URL (`connection` is then the first node's).
    pub(crate) cluster: Option<ClusterSettings>,
    /// The server's address without credentials, for messages.
    pub(crate) address: String,
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) drift: Duration,
    pub(crate) fair: bool,
    /// How long a hand-over waits for the head to confirm it.
    pub(crate) claim_window: Duration,
    /// How many replicas must acknowledge each grant and renewal (0: none).
    pub(crate) replicas: u32,
    /// How long `WAIT` waits for them.
    pub(crate) replicas_timeout: Duration,
    /// How long a fence counter outlives the last grant or renewal of its lock.
    pub(crate) fence_retention: Duration,
    /// The certificates of `rediss://` connections (none: the system's trust store).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) tls: ClientTls,
}

/// What a server URL names: a server (or, for sentinels and clusters, the connection info
/// the connections are made from), and the sentinels or the cluster nodes.
pub(crate) type Target = (redis::ConnectionInfo, Option<SentinelSettings>, Option<ClusterSettings>);

/// Reads the server URL given to [`RedisLockProviderBuilder::url`](crate::RedisLockProviderBuilder::url): a server, the sentinels of
/// a `redis+sentinel://` URL (with the connection info of the primary they will name, but for
/// its address), or the nodes of a `redis+cluster://` URL (with the first node's).
pub(crate) fn parse_target(url: &str) -> Result<Target> {
    let shown = config::redact(url);
    let parsed = StoreUrl::parse_for(BACKEND, url)?;
    let (tls, cluster) = match parsed.scheme() {
        "redis+sentinel" => (false, false),
        "redis+cluster" => (false, true),
        #[cfg(feature = "tls")]
        "rediss+sentinel" => (true, false),
        #[cfg(feature = "tls")]
        "rediss+cluster" => (true, true),
        #[cfg(not(feature = "tls"))]
        "rediss+sentinel" | "rediss+cluster" => return Err(invalid(config::tls_not_built(BACKEND))),
        _ => return Ok((parse_url(url, &parsed, &shown)?, None, None)),
    };
    if cluster {
        let cluster =
            ClusterSettings::parse(parsed.hosts(), parsed.path(), tls, parsed.user(), parsed.password(), &shown)
                .map_err(invalid)?;
        let Some((_, first)) = cluster.nodes.first() else {
            return Err(invalid(format!("the URL {shown} names no cluster node")));
        };
        return Ok((first.clone(), None, Some(cluster)));
    }
    let sentinel = SentinelSettings::parse(parsed.hosts(), parsed.path(), tls, &shown).map_err(invalid)?;
    let Some((_, first)) = sentinel.sentinels.first() else {
        return Err(invalid(format!("the URL {shown} names no sentinel")));
    };
    let mut redis_settings = first.redis_settings().clone();
    if let Some(user) = parsed.user() {
        redis_settings = redis_settings.set_username(user);
    }
    if let Some(password) = parsed.password() {
        redis_settings = redis_settings.set_password(password);
    }
    Ok((first.clone().set_redis_settings(redis_settings), Some(sentinel), None))
}

/// Reads the URL of one server.
fn parse_url(url: &str, parsed: &StoreUrl, shown: &str) -> Result<redis::ConnectionInfo> {
    match parsed.scheme() {
        "redis" | "redis+unix" | "unix" => {}
        #[cfg(feature = "tls")]
        "rediss" => {}
        #[cfg(not(feature = "tls"))]
        "rediss" => return Err(invalid(config::tls_not_built(BACKEND))),
        other => {
            return Err(invalid(format!(
                "the URL {shown} has the scheme {other:?}; use redis:// (or rediss:// for TLS), redis+sentinel://sentinel:26379,…/MASTER_NAME for a Sentinel-managed primary, or redis+cluster://node:6379,node:6379 for a Redis Cluster"
            )));
        }
    }
    let info = url.into_connection_info().map_err(|error| {
        // The client's message is all there is to say; an InvalidConfig has no source.
        invalid(format!("the URL {shown} cannot be used: {error}"))
    })?;
    let db = info.redis_settings().db();
    if !(0..i64::from(i32::MAX)).contains(&db) {
        return Err(invalid(format!(
            "the database number {db} in {shown} is out of range: Redis numbers its databases from 0 (0 to 15 by default)"
        )));
    }
    Ok(info)
}

impl Settings {
    /// The store's identity (fences, the order of multi-locks), through
    /// [`StoreUrl::identity`](config::StoreUrl::identity): `redis://host:port/db` for one
    /// server, `redis+sentinel:///SERVICE/db` under Sentinel (the service name, not the
    /// sentinels, which come and go), `redis+cluster://node,node` for a cluster (the nodes as
    /// written: give every provider the same, or set `store_id`), always with the key prefix.
    pub(crate) fn store_identity(&self) -> String {
        let db = self.connection.redis_settings().db().to_string();
        let mut keyspace = vec![("key_prefix", self.prefix.as_str())];
        let address = match (&self.sentinel, &self.cluster, self.connection.addr()) {
            (Some(sentinel), _, _) => format!("redis+sentinel:///{}/{db}", sentinel.master),
            (None, Some(cluster), _) => format!("redis+cluster://{}", cluster.shown()),
            (None, None, redis::ConnectionAddr::Unix(path)) => {
                keyspace.push(("db", db.as_str()));
                format!("redis+unix://{}", path.display())
            }
            (None, None, _) => shown_address(&self.connection),
        };
        match config::StoreUrl::parse(&address) {
            Ok(url) => url.identity(&keyspace),
            Err(_) => address,
        }
    }
}

/// An `InvalidConfig` error of this backend.
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_config(BACKEND, message)
}

/// The server's address without credentials: `redis://host:port/db`.
pub(crate) fn shown_address(info: &redis::ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    let host = |host: &str| if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    match info.addr() {
        redis::ConnectionAddr::Tcp(name, port) => format!("redis://{}:{port}/{db}", host(name)),
        redis::ConnectionAddr::TcpTls { host: name, port, .. } => format!("rediss://{}:{port}/{db}", host(name)),
        redis::ConnectionAddr::Unix(path) => format!("redis+unix://{}?db={db}", path.display()),
        other => format!("redis://{other}/{db}"),
    }
}

/// Refuses a key prefix that is empty, holds a brace (another cluster hash slot) or a
/// control character.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(invalid("key_prefix is empty; leave it unset for `lockkit`, or name your application"));
    }
    if prefix.contains(['{', '}']) {
        return Err(invalid(format!(
            "key_prefix {prefix:?} contains a brace, which would move lockkit's keys to another Redis Cluster hash slot; remove it"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(invalid(format!("key_prefix {prefix:?} contains control characters; remove them")));
    }
    Ok(())
}
