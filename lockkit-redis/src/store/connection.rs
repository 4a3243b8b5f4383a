//! One provider's connections ([`Store`]): an auto-reconnecting connection per runtime (or a
//! cluster connection, or the primary the sentinels name), every call bounded by the response
//! timeout, the replicas' acknowledgements (`WAIT`), and what the server says of itself
//! (keyspace events, eviction, the cluster's slot map).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkit_core::config::millis;
use lockkit_core::home::PerRuntime;
use lockkit_core::sync::lock_or_recover;
use lockkit_core::{Error, LockName, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use super::reply::map_error;
use crate::BACKEND;
use crate::error::Failure;
use crate::keys::LockKeys;
use crate::settings::Settings;

/// The command connection: to one server (or the primary the sentinels name), or to a
/// Redis Cluster, whose connection routes each command by the hash slot of its keys. The
/// scripts run unchanged on either: every key of a lock shares the `{name}` hash tag.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One server.
    Single(ConnectionManager),
    /// A cluster.
    Cluster(ClusterConnection),
}
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Connection::Single",
            Self::Cluster(_) => "Connection::Cluster",
        })
    }
}
impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}
impl Connection {
    /// Sends `cmd`, which names no key, to the server that holds `key` (on a cluster, the
    /// primary of its slot; elsewhere, the one server).
    pub(super) async fn query_at<T: redis::FromRedisValue>(&mut self, key: &str, cmd: Cmd) -> redis::RedisResult<T> {
        match self {
            Self::Single(connection) => cmd.query_async(connection).await,
            Self::Cluster(connection) => {
                let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                let value = connection.route_command(cmd, RoutingInfo::SingleNode(route)).await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }
}
/// The cluster's slot ranges and their primaries (`CLUSTER SLOTS`): first slot, last slot,
/// host, port.
pub(super) type SlotMap = Vec<(u16, u16, String, u16)>;
/// One provider's connection to the server and the commands it sends.
#[derive(Debug)]
pub(crate) struct Store {
    pub(super) client: redis::Client,
    /// The cluster client, for a `redis+cluster://` URL.
    pub(super) cluster: Option<redis::cluster::ClusterClient>,
    /// On a cluster: the slot map of the last `CLUSTER SLOTS` read (see
    /// [`refresh_slot_map`](Self::refresh_slot_map)), which groups renewals by node.
    pub(super) slot_map: Mutex<Option<Arc<SlotMap>>>,
    /// The connection of each runtime the provider is used on (its driver task and socket
    /// belong to that runtime): made on a runtime's first use. The hot path uses its own
    /// runtime's, with no thread hop; the background work (renewal, the releases of dropped
    /// guards, abandons) runs on lockkit's home runtime and uses the home runtime's.
    pub(super) links: PerRuntime<Connection>,
    /// Taken while a connection is being made, so that one is made at a time.
    pub(super) building: tokio::sync::Mutex<()>,
    pub(super) response_timeout: Duration,
    /// The claim window of hand-overs, in milliseconds.
    pub(super) claim_ms: u64,
    /// How long a fence counter outlives the last grant or renewal of its lock, in ms.
    pub(super) fence_retention_ms: u64,
    /// How many replicas must acknowledge grants and renewals (0: none).
    pub(super) replicas: u32,
    /// How long `WAIT` waits for them.
    pub(super) replicas_timeout: Duration,
    /// The server's address without credentials, for messages.
    pub(super) address: String,
    /// The settings, when the server is the primary the sentinels name: each connection is
    /// made to the primary they name at the time.
    pub(super) sentinel: Option<Box<Settings>>,
}

impl Store {
    /// A store for the given settings; nothing is connected until the first command.
    pub(crate) fn new(settings: &Settings) -> Result<Self> {
        let client = crate::client::open(&settings.tls, settings.connection.clone()).map_err(|error| {
            Error::invalid_config(BACKEND, format!("the server {} cannot be used: {error}", settings.address))
        })?;
        let reply_timeout = if settings.replicas > 0 {
            settings.response_timeout + settings.replicas_timeout
        } else {
            settings.response_timeout
        };
        let cluster = match &settings.cluster {
            Some(cluster) => Some(
                crate::cluster::client(cluster, &settings.tls, settings.response_timeout, reply_timeout, false)
                    .map_err(|error| {
                        Error::invalid_config(
                            BACKEND,
                            format!("the cluster {} cannot be used: {error}", settings.address),
                        )
                    })?,
            ),
            None => None,
        };
        Ok(Self {
            client,
            cluster,
            slot_map: Mutex::new(None),
            links: PerRuntime::new(),
            building: tokio::sync::Mutex::new(()),
            response_timeout: settings.response_timeout,
            claim_ms: millis(settings.claim_window),
            fence_retention_ms: millis(settings.fence_retention),
            replicas: settings.replicas,
            replicas_timeout: settings.replicas_timeout,
            address: settings.address.clone(),
            sentinel: settings.sentinel.is_some().then(|| Box::new(settings.clone())),
        })
    }

    /// The connection of the current runtime, if one was made.
    pub(super) fn live(&self) -> Option<Connection> {
        self.links.get()
    }

    /// Whether a connection was made on the current runtime; it may be reconnecting.
    pub(crate) fn is_connected(&self) -> bool {
        self.live().is_some()
    }

    /// The connection of the current runtime, made at its first use there. A failed attempt
    /// leaves nothing behind, so the next command tries again.
    ///
    /// With [`replicas`](crate::RedisLockProviderBuilder::replicas) set, a new connection is
    /// kept only when the server is a primary with at least that many replicas connected.
    pub(super) async fn connection(&self, name: Option<&LockName>) -> Result<Connection> {
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        let _building = self.building.lock().await;
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.response_timeout))
            // A WAIT may take the replicas' timeout on top of a reply's.
            .set_response_timeout(Some(self.reply_timeout()))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        if let Some(cluster) = &self.cluster {
            let connection = self.cluster_connection(cluster, name).await?;
            self.links.set(connection.clone());
            return Ok(connection);
        }
        let mut connection = match self.sentinel.as_deref() {
            Some(settings) => {
                // The primary the sentinels name now.
                let Some(sentinel) = settings.sentinel.as_ref() else {
                    return Err(Error::invalid_config(BACKEND, "sentinel settings without sentinels"));
                };
                let primary = crate::sentinel::discover(
                    &settings.connection,
                    &settings.tls,
                    sentinel,
                    self.response_timeout,
                    name,
                )
                .await?;
                let client = crate::client::open(&settings.tls, primary).map_err(|e| map_error(e, name))?;
                client.get_connection_manager_with_config(config).await.map_err(|e| map_error(e, name))?
            }
            None => self.client.get_connection_manager_with_config(config).await.map_err(|e| map_error(e, name))?,
        };
        if self.replicas > 0 || self.sentinel.is_some() {
            self.check_replicas(&mut connection, name).await?;
        }
        let connection = Connection::Single(connection);
        self.links.set(connection.clone());
        Ok(connection)
    }

    /// A connection to the cluster, kept only when `CLUSTER INFO` says `cluster_state:ok` and,
    /// with `replicas` set, every primary has that many replicas connected.
    pub(super) async fn cluster_connection(
        &self,
        cluster: &redis::cluster::ClusterClient,
        name: Option<&LockName>,
    ) -> Result<Connection> {
        let attempt = tokio::time::timeout(self.response_timeout, cluster.get_async_connection());
        let mut connection = match attempt.await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) if crate::cluster::is_not_a_cluster(&error) => {
                return Err(crate::cluster::not_a_cluster(&self.address));
            }
            Ok(Err(error)) => return Err(map_error(error, name)),
            Err(_) => return Err(Error::connection(BACKEND, name, Failure::NoReply(self.response_timeout))),
        };
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut connection)
            .await
            .map_err(|e| map_error(e, name).with_context("read CLUSTER INFO"))?;
        crate::cluster::check_state(&info, &self.address, name)?;
        if self.replicas > 0 {
            let nodes: String =
                redis::cmd("CLUSTER").arg("NODES").query_async(&mut connection).await.map_err(|e| {
                    map_error(e, name).with_context("read CLUSTER NODES to check the `replicas` setting")
                })?;
            crate::cluster::check_replicas(&nodes, self.replicas, &self.address)?;
        }
        Ok(Connection::Cluster(connection))
    }

    /// Whether the server is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`, one round trip), by which the next
    /// renewal rounds are grouped per node; when it cannot be read, the map read last stays
    /// (and until one is read, they are grouped per slot).
    /// Nothing is sent elsewhere than on a cluster.
    pub(crate) async fn refresh_slot_map(&self) {
        if self.cluster.is_none() {
            return;
        }
        let reply: Result<Value> =
            self.run(None, |mut connection| async move {
                redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut connection).await
            })
            .await;
        match reply {
            Ok(value) => *lock_or_recover(&self.slot_map) = parse_slot_map(&value).map(Arc::new),
            Err(error) => {
                // The map read last stays: a slot that moved since is answered with MOVED and
                // retried on its new node, while a map dropped here would split the next
                // renewal into one round trip per slot (a round trip per hold, at worst).
                tracing::debug!(%error, "CLUSTER SLOTS not read; renewals keep the slot map read last");
            }
        }
    }

    /// How long a reply may take: the response timeout, plus the replicas' timeout when
    /// commands may end with a `WAIT`.
    pub(super) fn reply_timeout(&self) -> Duration {
        if self.replicas > 0 { self.response_timeout + self.replicas_timeout } else { self.response_timeout }
    }

    /// Refuses a server that is not a primary with at least `replicas` replicas connected
    /// (`INFO replication`), naming the setting to change.
    pub(super) async fn check_replicas(
        &self,
        connection: &mut ConnectionManager,
        lock: Option<&LockName>,
    ) -> Result<()> {
        let info: String =
            redis::cmd("INFO").arg("replication").query_async(connection).await.map_err(|e| {
                map_error(e, lock).with_context("read INFO replication to check the `replicas` setting")
            })?;
        let field = |name: &str| info.lines().find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'));
        let wanted = self.replicas;
        if self.sentinel.is_some() && field("role") != Some("master") {
            // The sentinels named a server that is no longer the primary: a failover is under
            // way, and the next try asks them again.
            return Err(Error::connection(
                BACKEND,
                lock,
                std::io::Error::other(format!(
                    "the sentinels of {} named a server that is not the primary (role {:?}); a failover is under way",
                    self.address,
                    field("role").unwrap_or("unknown")
                )),
            ));
        }
        if wanted == 0 {
            return Ok(());
        }
        if field("role") != Some("master") {
            return Err(Error::invalid_config(
                BACKEND,
                format!(
                    "replicas={wanted} asks the primary to wait for its replicas, but {} is a replica (role {:?}); point the URL at the primary, or use redis+sentinel:// to find it",
                    self.address,
                    field("role").unwrap_or("unknown")
                ),
            ));
        }
        let connected: u32 = field("connected_slaves").and_then(|n| n.parse().ok()).unwrap_or(0);
        if connected < wanted {
            return Err(Error::invalid_config(
                BACKEND,
                format!(
                    "replicas={wanted}, but the primary {} has {connected} replica(s) connected; lower replicas to {connected} or fewer, or attach more replicas",
                    self.address
                ),
            ));
        }
        Ok(())
    }

    /// Runs `command` on the connection within the response timeout (and the replicas'
    /// timeout, when `replicas` is set: a command may end with a `WAIT`).
    pub(super) async fn run<T, F, Fut>(&self, lock: Option<&LockName>, command: F) -> Result<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = std::result::Result<T, RedisError>>,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime there is no timer and no socket; the lease frees the lock.
            return Err(Error::connection(BACKEND, lock, Failure::NoRuntime));
        }
        if let Some(connection) = self.live() {
            // The hot path: the connection bounds every reply by itself (its response timeout,
            // set where it was made), so no timer of ours is armed for the call. An armed timer
            // earlier than the runtime's next wake-up costs a cross-thread wake of its driver.
            return command(connection).await.map_err(|error| {
                self.note_error(&error);
                if error.is_timeout() && self.sentinel.is_some() {
                    // A primary that stopped answering may have been failed over.
                    self.links.clear();
                }
                map_error(error, lock)
            });
        }
        let attempt = async {
            let connection = self.connection(lock).await?;
            command(connection).await.map_err(|error| {
                self.note_error(&error);
                map_error(error, lock)
            })
        };
        let timeout = self.reply_timeout();
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => {
                if self.sentinel.is_some() {
                    // A primary that stopped answering may have been failed over.
                    self.links.clear();
                }
                Err(Error::connection(BACKEND, lock, Failure::NoReply(timeout)))
            }
        }
    }

    /// With sentinels, forgets the connection after an error that says the server may no
    /// longer be the primary, so that the next command asks the sentinels again.
    pub(super) fn note_error(&self, error: &RedisError) {
        if self.sentinel.is_some() && crate::sentinel::is_failover_sign(error) {
            tracing::debug!(%error, "the primary may have changed; asking the sentinels again");
            self.links.clear();
        }
    }

    /// How many replicas must acknowledge grants and renewals (0: none).
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Waits until `replicas` replicas acknowledged every write this provider's connection
    /// made so far (a grant just made among them): `WAIT replicas replicas_timeout`.
    ///
    /// # Errors
    ///
    /// A retryable [`Error::Connection`] ([`Failure::NotReplicated`]) when fewer did in time.
    pub(crate) async fn replicated(&self, lock: &LockName, keys: &LockKeys) -> Result<()> {
        self.replicated_as(lock, keys, "the grant").await
    }

    /// [`replicated`](Self::replicated) for a write described as `what` in the error.
    pub(crate) async fn replicated_as(&self, lock: &LockName, keys: &LockKeys, what: &'static str) -> Result<()> {
        let (wanted, timeout) = (self.replicas, self.replicas_timeout);
        let acked: i64 = self
            .run(Some(lock), |mut connection| async move {
                let mut wait = redis::cmd("WAIT");
                wait.arg(wanted).arg(millis(timeout));
                // On a cluster, the primary of the lock's slot: the one that made the grant.
                connection.query_at(keys.record(), wait).await
            })
            .await?;
        if acked < i64::from(wanted) {
            return Err(Error::connection(
                BACKEND,
                Some(lock),
                Failure::NotReplicated { what, acked, wanted, timeout },
            ));
        }
        Ok(())
    }

    /// The server's `notify-keyspace-events` flags (`CONFIG GET`).
    pub(crate) async fn keyspace_events(&self) -> Result<String> {
        if self.cluster.is_some() {
            // Each node publishes the events of its own keys only, and the pub/sub link
            // listens on one node: no keyspace events on a cluster (the renewals notice).
            return Ok(String::new());
        }
        let reply: Vec<String> = self
            .run(None, |mut connection| async move {
                redis::cmd("CONFIG").arg("GET").arg("notify-keyspace-events").query_async(&mut connection).await
            })
            .await?;
        match reply.as_slice() {
            [_, flags] => Ok(flags.clone()),
            _ => Err(Error::backend(
                BACKEND,
                None,
                Failure::UnexpectedReply { command: "CONFIG GET notify-keyspace-events", reply: format!("{reply:?}") },
            )),
        }
    }

    /// The server's eviction settings (`CONFIG GET maxmemory` and `maxmemory-policy`), or
    /// `None` on a cluster (each node has its own) and where `CONFIG` is refused or answers
    /// something else: the caller only warns, so not knowing is not an error.
    pub(crate) async fn eviction(&self) -> Option<Eviction> {
        if self.cluster.is_some() {
            return None;
        }
        let reply: Vec<String> = self
            .run(None, |mut connection| async move {
                redis::cmd("CONFIG").arg("GET").arg("maxmemory*").query_async(&mut connection).await
            })
            .await
            .ok()?;
        Eviction::from_config(&reply)
    }

    /// One PING (on a cluster, to every primary).
    pub(crate) async fn ping(&self) -> Result<()> {
        let _: String = self
            .run(None, |mut connection| async move { redis::cmd("PING").query_async(&mut connection).await })
            .await?;
        Ok(())
    }
}

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key's hash tag
/// (the part between the first `{` and the next `}`, when not empty) or of the whole key,
/// modulo 16384.
pub(super) fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            rest.get(..close)
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}
/// Reads a `CLUSTER SLOTS` reply: for each range, its first and last slot and its primary's
/// host and port. `None` when the reply is not one, or names a primary without a host.
pub(super) fn parse_slot_map(value: &Value) -> Option<SlotMap> {
    let Value::Array(ranges) = value else { return None };
    let number = |value: &Value| redis::from_redis_value_ref::<i64>(value).ok();
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else { return None };
        let [first, last, primary, ..] = fields.as_slice() else { return None };
        let Value::Array(primary) = primary else { return None };
        let [host, port, ..] = primary.as_slice() else { return None };
        let host = redis::from_redis_value_ref::<String>(host).ok().filter(|host| !host.is_empty())?;
        map.push((
            u16::try_from(number(first)?).ok()?,
            u16::try_from(number(last)?).ok()?,
            host,
            u16::try_from(number(port)?).ok()?,
        ));
    }
    Some(map)
}
/// What a server does when it runs out of memory: its `maxmemory` (bytes, 0 for no limit)
/// and `maxmemory-policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Eviction {
    pub(crate) max_memory: u64,
    pub(crate) policy: String,
}
impl Eviction {
    /// Reads a `CONFIG GET maxmemory*` reply (name, value, name, value...).
    pub(super) fn from_config(reply: &[String]) -> Option<Self> {
        let value = |name: &str| {
            reply.chunks_exact(2).find_map(|pair| match pair {
                [key, value] if key == name => Some(value.clone()),
                _ => None,
            })
        };
        Some(Eviction { max_memory: value("maxmemory")?.parse().ok()?, policy: value("maxmemory-policy")? })
    }

    /// Whether the server may evict a lock record: a memory limit with a policy other than
    /// `noeviction` (every record has an expiry, so `volatile-*` policies pick them too).
    pub(crate) fn may_evict_locks(&self) -> bool {
        self.max_memory > 0 && self.policy != "noeviction"
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    pub(super) fn only_a_memory_limit_with_an_evicting_policy_may_evict_locks() {
        let config = |limit: &str, policy: &str| {
            let reply: Vec<String> =
                ["maxmemory", limit, "maxmemory-samples", "5", "maxmemory-policy", policy].map(str::to_owned).to_vec();
            Eviction::from_config(&reply).unwrap()
        };
        assert!(config("1048576", "volatile-lru").may_evict_locks());
        assert!(config("1048576", "allkeys-lfu").may_evict_locks());
        assert!(!config("1048576", "noeviction").may_evict_locks());
        assert!(!config("0", "volatile-ttl").may_evict_locks());
        assert_eq!(Eviction::from_config(&["maxmemory".to_owned()]), None);
        assert_eq!(Eviction::from_config(&["maxmemory".to_owned(), "lots".to_owned()]), None);
    }

    #[test]
    pub(super) fn key_slots_are_redis_clusters() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(key_slot(b"{b}k"), 3300);
        assert_eq!(key_slot(b"{a}k"), 15495);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{}foo"), key_slot(b"{}foo"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
    }

    #[test]
    pub(super) fn slot_maps_are_read_from_cluster_slots() {
        let range = |first: i64, last: i64, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec()), Value::Int(port)]),
            ])
        };
        let map = parse_slot_map(&Value::Array(vec![range(0, 5460, 7000), range(5461, 16383, 7001)])).unwrap();
        assert_eq!(map, vec![(0, 5460, "127.0.0.1".to_owned(), 7000), (5461, 16383, "127.0.0.1".to_owned(), 7001)]);
        assert!(parse_slot_map(&Value::Int(1)).is_none());
    }
}
