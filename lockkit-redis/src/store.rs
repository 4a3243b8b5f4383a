//! The commands lockkit sends to Redis, one method per script, over an auto-reconnecting
//! connection per provider and runtime; and the mapping of Redis errors into lockkit's error
//! type.
//!
//! Every call is bounded by the response timeout. A call that times out or loses its
//! connection fails with a retryable [`Error::Connection`] whose outcome is **unknown**:
//! the script may have run. Callers resolve that by owner id, never by a blind retry of a
//! write (see `lock.rs`).
//!
//! A connection's driver task (and its reconnections) run on the runtime that made it, so
//! each runtime the provider is used on gets one of its own ([`PerRuntime`]): a command never
//! waits on a runtime that shut down or is not being driven, and takes no thread hop. The
//! background work, on lockkit's home runtime, uses the home runtime's.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use lockkit_core::backend::{HolderInfo, LockInfo, OwnerMeta};
use lockkit_core::{Error, FencingToken, HoldKind, LockName, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, ScriptInvocation, ServerErrorKind, Value};

use crate::BACKEND;
use crate::builder::Settings;
use crate::error::Failure;
use crate::keys::LockKeys;
use lockkit_core::home::PerRuntime;

use crate::util::lock;

/// The sources of the scripts of the wait queue: the names of their keys (`layout.lua`), the
/// queue's functions (`queue.lua`), then the script's own body.
/// The acquire and release scripts put their lean path (the mutex's uncontended case) between
/// the layout and the queue's functions, so that it runs before those are made.
macro_rules! queue_script {
    ($layout:literal, $body:literal) => {
        concat!(include_str!($layout), include_str!("scripts/queue.lua"), include_str!($body))
    };
    ($layout:literal, $lean:literal, $body:literal) => {
        concat!(include_str!($layout), include_str!($lean), include_str!("scripts/queue.lua"), include_str!($body))
    };
}

/// The acquire script of a mutex as benchmarks call it raw, with the six keys of earlier
/// versions (record, fence counter, void marker, queue, queue expiry times, channel; see
/// `layout_v1.lua`): the provider's own acquire script in every other respect.
pub const ACQUIRE_SCRIPT: &str =
    queue_script!("scripts/layout_v1.lua", "scripts/acquire_lean.lua", "scripts/acquire.lua");
/// The release script of a mutex as benchmarks call it raw, with the five keys of earlier
/// versions (record, fence counter, queue, queue expiry times, channel; see `layout_v1.lua`).
pub const RELEASE_SCRIPT: &str =
    queue_script!("scripts/layout_v1.lua", "scripts/release_lean.lua", "scripts/release.lua");

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(queue_script!("scripts/layout.lua", "scripts/acquire_lean.lua", "scripts/acquire.lua"))
});
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(queue_script!("scripts/layout.lua", "scripts/release_lean.lua", "scripts/release.lua"))
});
static ABANDON: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/abandon.lua")));
static DOWNGRADE: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/downgrade.lua")));
static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/inspect.lua")));
static BREAK: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/break.lua")));
static OBSERVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/observe.lua")));
static RENEW_LEADER: LazyLock<Script> =
    LazyLock::new(|| Script::new(queue_script!("scripts/layout.lua", "scripts/renew_leader.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
static RENEW_RW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew_rw.lua")));
static RENEW_PERMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew_permit.lua")));

/// The kinds of hold the scripts grant, as they name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A mutex (`x`).
    Exclusive,
    /// A reader of a read-write lock (`r`).
    Read,
    /// The writer of a read-write lock (`w`).
    Write,
    /// A permit of a semaphore of this many permits (`p`).
    Permit(NonZeroU32),
    /// A candidate of an election (`c`): its identity is in its owner id (see
    /// [`candidate_owner`]).
    Candidate,
}

impl Kind {
    /// The scripts' kind of a hold of `kind`; `None` for a kind this backend does not grant.
    pub(crate) fn of(kind: &HoldKind) -> Option<Self> {
        match kind {
            HoldKind::Exclusive => Some(Self::Exclusive),
            HoldKind::Read => Some(Self::Read),
            HoldKind::Write => Some(Self::Write),
            HoldKind::Permit { permits } => Some(Self::Permit(*permits)),
            HoldKind::Candidate { .. } => Some(Self::Candidate),
            _ => None,
        }
    }

    /// The letter the scripts know the kind by.
    fn letter(self) -> &'static str {
        match self {
            Self::Exclusive => "x",
            Self::Read => "r",
            Self::Write => "w",
            Self::Permit(_) => "p",
            Self::Candidate => "c",
        }
    }

    /// The semaphore's permit count (0 for the other kinds).
    fn permits(self) -> u32 {
        match self {
            Self::Permit(permits) => permits.get(),
            _ => 0,
        }
    }

    /// The kind field of a queue member (see `queue.lua`): none for a mutex, whose members
    /// are as they were before the other kinds existed.
    pub(crate) fn member_field(self) -> Option<String> {
        match self {
            Self::Exclusive => None,
            Self::Permit(permits) => Some(format!("p{permits}")),
            other => Some(other.letter().to_owned()),
        }
    }

    /// The core's kind of a holder the inspect script lists as `letter` with owner id
    /// `owner`, on a semaphore of `count` permits.
    fn hold_kind(letter: &str, owner: &str, count: u32) -> HoldKind {
        if letter == "x"
            && let Some(identity) = candidate_identity(owner)
        {
            return HoldKind::Candidate { identity };
        }
        match letter {
            "r" => HoldKind::Read,
            "w" => HoldKind::Write,
            "p" => HoldKind::Permit { permits: NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN) },
            _ => HoldKind::Exclusive,
        }
    }
}

/// What the watchdog renews for one hold, and what keyspace notifications watch: the hold's
/// owner id and kind, and the keys of its kind's renew script.
#[derive(Debug)]
pub(crate) struct HoldTarget {
    pub(crate) kind: Kind,
    pub(crate) owner: String,
    /// The keys of the renew script: the mutex record and the fence counter (`renew.lua`);
    /// the writer record, the readers, their tokens, the marker of the other kinds (see
    /// `layout.lua`) and the fence counter (`renew_rw.lua`, for a write hold and, after a
    /// downgrade, a read hold); the permit holders, their tokens, the permit count and the
    /// marker of the other kinds (`renew_permit.lua`); every key of the name for a leader
    /// (`renew_leader.lua`, which writes the vacancy in the election's journal when it finds
    /// the record gone). The counter of an exclusive hold is kept as long as the hold is
    /// renewed, since its value is the hold's token.
    keys: Box<[String]>,
}

impl HoldTarget {
    /// The target of `owner`'s hold of `kind` on the lock of `keys`.
    pub(crate) fn new(kind: Kind, keys: &LockKeys, owner: String) -> Self {
        let keys: Box<[String]> = match kind {
            Kind::Exclusive => Box::new([keys.record().to_owned(), keys.fence()]),
            Kind::Read | Kind::Write => {
                Box::new([keys.writer(), keys.readers(), keys.tokens(), keys.kinds(), keys.fence()])
            }
            Kind::Permit(_) => Box::new([keys.permits(), keys.tokens(), keys.permit_count(), keys.kinds()]),
            Kind::Candidate => Box::new(keys.script_keys(keys.record())),
        };
        Self { kind, owner, keys }
    }

    /// The keys whose deletion (a keyspace event) may end the hold: the mutex record; the
    /// writer record and the readers; the permit holders.
    pub(crate) fn watched(&self) -> &[String] {
        let watched = match self.kind {
            Kind::Read | Kind::Write => 2,
            _ => 1,
        };
        self.keys.get(..watched).unwrap_or(&self.keys)
    }

    /// The renew script of the hold's kind.
    fn renew_script(&self) -> &'static Script {
        match self.kind {
            Kind::Exclusive => &RENEW,
            Kind::Read | Kind::Write => &RENEW_RW,
            Kind::Permit(_) => &RENEW_PERMIT,
            Kind::Candidate => &RENEW_LEADER,
        }
    }
}

/// What the acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The lock is ours, with this token.
    Granted(FencingToken),
    /// Not ours: another owner holds it (the head of the wait queue, maybe, to which it was
    /// just handed over).
    Busy(Refusal),
    /// This acquisition was abandoned earlier and can no longer be granted.
    Void,
    /// The name is in use as another kind of lock, or as a semaphore of another permit
    /// count: what, and what to do instead.
    Conflict(Conflict),
}

/// Why the acquire script refused a kind of hold outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// A lock was asked of a name in use as a semaphore of this many permits.
    Semaphore(u64),
    /// A permit was asked of a semaphore in use with this many permits, another count.
    Count(u64),
    /// A permit was asked of a name in use as a lock (a mutex or a read-write lock).
    Lock,
}

impl Conflict {
    /// What conflicts, and what to change, for a request of `kind`.
    pub(crate) fn describe(self, kind: Kind) -> String {
        match self {
            Self::Semaphore(count) => {
                let what = match kind {
                    Kind::Exclusive => "lock",
                    Kind::Candidate => "election",
                    _ => "read-write lock",
                };
                format!("the name is in use as a semaphore of {count} permits; give the {what} another name")
            }
            Self::Count(count) => format!(
                "the semaphore is in use with {count} permits and this handle asks for {}; every user of a semaphore must give the same count",
                kind.permits()
            ),
            Self::Lock => {
                "the name is in use as a lock (a mutex or a read-write lock); give the semaphore another name"
                    .to_owned()
            }
        }
    }
}

/// What a refused acquire call learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// How long the holder's lease lasts at most, when the server knows.
    pub(crate) left: Option<Duration>,
    /// For a call that joined the wait queue: where the queue stood.
    pub(crate) mark: Option<QueueMark>,
}

/// The state of a lock when a queued acquisition was refused, in the server's terms. A
/// hand-over that carries a token above `fence` was made after it, `server_ms` earlier than
/// the hand-over's own server time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueMark {
    /// The fence counter's value: the last token issued.
    pub(crate) fence: u64,
    /// The server's clock, in milliseconds.
    pub(crate) server_ms: u64,
}

/// Who an acquisition is, in the scripts' terms.
#[derive(Clone, Debug)]
pub(crate) struct Contender {
    /// The lock record's value while it holds: unique to the acquisition, and saying who
    /// took it.
    pub(crate) owner: String,
    /// Its entry in the wait queue, `<provider wake channel>\n<owner>` (empty when it does
    /// not queue).
    pub(crate) member: String,
    /// The key of the marker that voids it once abandoned with its outcome unknown.
    pub(crate) void: String,
    /// The kind of hold it asks for.
    pub(crate) kind: Kind,
}

/// How an acquire call stands towards the lock's wait queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Queueing {
    /// Whether the call joins the queue (or refreshes its entry) when not granted: set for
    /// the waiting acquisitions of a fair provider.
    pub(crate) join: bool,
    /// How long a queue entry lives without a refresh, in milliseconds.
    pub(crate) entry_ttl_ms: u64,
}

/// What the release, renew, downgrade and abandon scripts found: ours, gone, or another
/// owner's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// The record was ours (and was released, renewed or freed).
    Ours,
    /// There was no record.
    Gone,
    /// Another owner holds the lock.
    Other,
}

impl Ownership {
    fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Ours,
            0 => Self::Gone,
            _ => Self::Other,
        }
    }
}

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
    async fn query_at<T: redis::FromRedisValue>(&mut self, key: &str, cmd: Cmd) -> redis::RedisResult<T> {
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

/// Where a hold's renewals go, for batching: on a cluster, the primary that owns its hash
/// slot as the last `CLUSTER SLOTS` read said, or the slot itself while that is not known;
/// elsewhere, the one server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    /// The one server (or the primary the sentinels name).
    Server,
    /// A cluster node, by host and port.
    Node(String, u16),
    /// A hash slot whose node is not known.
    Slot(u16),
}

/// The cluster's slot ranges and their primaries (`CLUSTER SLOTS`): first slot, last slot,
/// host, port.
type SlotMap = Vec<(u16, u16, String, u16)>;

/// One provider's connection to the server and the commands it sends.
#[derive(Debug)]
pub(crate) struct Store {
    client: redis::Client,
    /// The cluster client, for a `redis+cluster://` URL.
    cluster: Option<redis::cluster::ClusterClient>,
    /// On a cluster: the slot map of the last `CLUSTER SLOTS` read (see
    /// [`refresh_slot_map`](Self::refresh_slot_map)), which groups renewals by node.
    slot_map: Mutex<Option<Arc<SlotMap>>>,
    /// The connection of each runtime the provider is used on (its driver task and socket
    /// belong to that runtime): made on a runtime's first use. The hot path uses its own
    /// runtime's, with no thread hop; the background work (renewal, the releases of dropped
    /// guards, abandons) runs on lockkit's home runtime and uses the home runtime's.
    links: PerRuntime<Connection>,
    /// Taken while a connection is being made, so that one is made at a time.
    building: tokio::sync::Mutex<()>,
    response_timeout: Duration,
    /// The claim window of hand-overs, in milliseconds.
    claim_ms: u64,
    /// How long a fence counter outlives the last grant or renewal of its lock, in ms.
    fence_retention_ms: u64,
    /// How many replicas must acknowledge grants and renewals (0: none).
    replicas: u32,
    /// How long `WAIT` waits for them.
    replicas_timeout: Duration,
    /// The server's address without credentials, for messages.
    address: String,
    /// The settings, when the server is the primary the sentinels name: each connection is
    /// made to the primary they name at the time.
    sentinel: Option<Box<Settings>>,
}

impl Store {
    /// A store for the given settings; nothing is connected until the first command.
    pub(crate) fn new(settings: &Settings) -> Result<Self> {
        let client = crate::client::open(settings, settings.connection.clone()).map_err(|error| {
            Error::invalid_config(BACKEND, format!("the server {} cannot be used: {error}", settings.address))
        })?;
        let reply_timeout = if settings.replicas > 0 {
            settings.response_timeout + settings.replicas_timeout
        } else {
            settings.response_timeout
        };
        let cluster = match &settings.cluster {
            Some(cluster) => {
                Some(crate::cluster::client(settings, cluster, reply_timeout, false).map_err(|error| {
                    Error::invalid_config(BACKEND, format!("the cluster {} cannot be used: {error}", settings.address))
                })?)
            }
            None => None,
        };
        Ok(Self {
            client,
            cluster,
            slot_map: Mutex::new(None),
            links: PerRuntime::new(),
            building: tokio::sync::Mutex::new(()),
            response_timeout: settings.response_timeout,
            claim_ms: settings.claim_millis(),
            fence_retention_ms: settings.fence_retention_millis(),
            replicas: settings.replicas,
            replicas_timeout: settings.replicas_timeout,
            address: settings.address.clone(),
            sentinel: settings.sentinel.is_some().then(|| Box::new(settings.clone())),
        })
    }

    /// The connection of the current runtime, if one was made.
    fn live(&self) -> Option<Connection> {
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
    async fn connection(&self, name: Option<&LockName>) -> Result<Connection> {
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
                let primary = crate::sentinel::discover(settings, sentinel, self.response_timeout, name).await?;
                let client = crate::client::open(settings, primary).map_err(|e| map_error(e, name))?;
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
    async fn cluster_connection(
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
            Ok(value) => *lock(&self.slot_map) = parse_slot_map(&value).map(Arc::new),
            Err(error) => {
                // The map read last stays: a slot that moved since is answered with MOVED and
                // retried on its new node, while a map dropped here would split the next
                // renewal into one round trip per slot (a round trip per hold, at worst).
                tracing::debug!(%error, "CLUSTER SLOTS not read; renewals keep the slot map read last");
            }
        }
    }

    /// Where `hold`'s renewals go (see [`Group`]).
    pub(crate) fn group_of(&self, hold: &HoldTarget) -> Group {
        let Some(key) = self.cluster.as_ref().and(hold.keys.first()) else { return Group::Server };
        let slot = key_slot(key.as_bytes());
        let map = lock(&self.slot_map).clone();
        map.and_then(|map| {
            map.iter()
                .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, host, port)| Group::Node(host.clone(), *port))
        })
        .unwrap_or(Group::Slot(slot))
    }

    /// How long a reply may take: the response timeout, plus the replicas' timeout when
    /// commands may end with a `WAIT`.
    fn reply_timeout(&self) -> Duration {
        if self.replicas > 0 { self.response_timeout + self.replicas_timeout } else { self.response_timeout }
    }

    /// Refuses a server that is not a primary with at least `replicas` replicas connected
    /// (`INFO replication`), naming the setting to change.
    async fn check_replicas(&self, connection: &mut ConnectionManager, lock: Option<&LockName>) -> Result<()> {
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
    async fn run<T, F, Fut>(&self, lock: Option<&LockName>, command: F) -> Result<T>
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
    fn note_error(&self, error: &RedisError) {
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
                wait.arg(wanted).arg(crate::builder::millis(timeout));
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

    /// Runs the acquire script for `contender` with a lease of `lease_ms`, in or out of the
    /// lock's wait queue as `queueing` says.
    pub(crate) async fn acquire(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        lease_ms: u64,
        queueing: Queueing,
    ) -> Result<AcquireReply> {
        // A mutex is asked with the short layout first (see `layout.lua`), and again with all
        // the keys when other kinds use the name.
        let mut short = contender.kind == Kind::Exclusive;
        let (code, value, fence, server_ms) = loop {
            let reply: (i64, i64, i64, i64) = self
                .run(Some(lock), |mut connection| async move {
                    let mut invocation = queue_script(&ACQUIRE, keys, &contender.void, short);
                    invocation
                        .arg(&contender.owner)
                        .arg(lease_ms)
                        .arg(if queueing.join { "1" } else { "0" })
                        .arg(queueing.entry_ttl_ms)
                        .arg(self.claim_ms)
                        .arg(&contender.member)
                        .arg(self.fence_retention_ms);
                    if contender.kind != Kind::Exclusive {
                        invocation.arg(contender.kind.letter()).arg(contender.kind.permits());
                    }
                    invocation.invoke_async(&mut connection).await
                })
                .await?;
            if reply.0 == -3 && short {
                short = false;
                continue;
            }
            break reply;
        };
        match code {
            1 => match u64::try_from(value) {
                Ok(token) => Ok(AcquireReply::Granted(FencingToken::new(token))),
                Err(_) => Err(Error::backend(
                    BACKEND,
                    Some(lock),
                    Failure::UnexpectedReply {
                        command: "the acquire script",
                        reply: format!("the token {value} from the fence counter {}", keys.fence()),
                    },
                )),
            },
            0 => Ok(AcquireReply::Busy(Refusal {
                left: u64::try_from(value).ok().map(Duration::from_millis),
                mark: match (u64::try_from(fence), u64::try_from(server_ms)) {
                    (Ok(fence), Ok(server_ms)) if queueing.join => Some(QueueMark { fence, server_ms }),
                    _ => None,
                },
            })),
            -2 => {
                let count = u64::try_from(fence).unwrap_or(0);
                Ok(AcquireReply::Conflict(match value {
                    1 => Conflict::Semaphore(count),
                    2 => Conflict::Count(count),
                    _ => Conflict::Lock,
                }))
            }
            _ => Ok(AcquireReply::Void),
        }
    }

    /// Runs the release script: frees `owner`'s hold of `kind` and hands what it freed over to
    /// the head of the queue, or wakes every waiter when nobody is queued.
    pub(crate) async fn release(&self, lock: &LockName, keys: &LockKeys, owner: &str, kind: Kind) -> Result<Ownership> {
        // A mutex is released with the short layout first (see `layout.lua`), and again with
        // all the keys when other kinds use the name and waiters are queued.
        let mut short = kind == Kind::Exclusive;
        loop {
            let code: i64 = self
                .run(Some(lock), |mut connection| async move {
                    let mut invocation = queue_script(&RELEASE, keys, keys.record(), short);
                    invocation.arg(owner).arg(self.claim_ms);
                    if kind != Kind::Exclusive {
                        invocation.arg(kind.letter());
                    }
                    invocation.invoke_async(&mut connection).await
                })
                .await?;
            if code == -3 && short {
                short = false;
                continue;
            }
            return Ok(Ownership::from_code(code));
        }
    }

    /// Runs the downgrade script: turns `owner`'s write hold (of token `token`) into a read
    /// hold in place, and hands the readers at the head of the queue their share.
    pub(crate) async fn downgrade(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        owner: &str,
        token: FencingToken,
    ) -> Result<Ownership> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                queue_script(&DOWNGRADE, keys, keys.record(), false)
                    .arg(owner)
                    .arg(self.claim_ms)
                    .arg(token.get())
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(Ownership::from_code(code))
    }

    /// Runs the abandon script: `contender` leaves the wait queue and frees its hold if it was
    /// granted (a try in doubt, or a hand-over); when `void_ms` is not zero (its outcome is in
    /// doubt) it is also voided for `void_ms`. Returns whether it freed a grant.
    pub(crate) async fn abandon(
        &self,
        lock: &LockName,
        keys: &LockKeys,
        contender: &Contender,
        void_ms: u64,
    ) -> Result<bool> {
        let code: i64 = self
            .run(Some(lock), |mut connection| async move {
                queue_script(&ABANDON, keys, &contender.void, false)
                    .arg(&contender.owner)
                    .arg(void_ms)
                    .arg(self.claim_ms)
                    .arg(&contender.member)
                    .arg(contender.kind.letter())
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(code == 1)
    }

    /// Renews a batch of holds of any kinds in one pipeline (one round trip, and one script
    /// call per hold, of its kind, so that it runs unchanged on Redis Cluster). Returns one
    /// answer per hold, in order, and whether the renewals count: with `replicas` set, the
    /// pipeline ends with a `WAIT`, and renewals that not enough replicas acknowledged
    /// (the error says how many did) must not extend the holds' deadlines.
    pub(crate) async fn renew_batch(
        &self,
        holds: &[&HoldTarget],
        lease_ms: u64,
    ) -> Result<(Vec<Ownership>, Result<()>)> {
        let mut answers = self.hold_pipeline(holds, Some(lease_ms)).await?;
        let acknowledged = if self.replicas > 0 {
            let acked = match answers.pop() {
                Some(answer) => parse::<i64>(answer?)?,
                None => 0,
            };
            if acked < i64::from(self.replicas) {
                Err(Error::connection(
                    BACKEND,
                    None,
                    Failure::NotReplicated {
                        what: "the renewal",
                        acked,
                        wanted: self.replicas,
                        timeout: self.replicas_timeout,
                    },
                ))
            } else {
                Ok(())
            }
        } else {
            Ok(())
        };
        let owned =
            answers.into_iter().map(|answer| Ok(Ownership::from_code(parse(answer?)?))).collect::<Result<_>>()?;
        Ok((owned, acknowledged))
    }

    /// Reads whether each of `holds` is still there, in one pipeline, changing nothing (a
    /// `GET` of a mutex record; the renew script of the other kinds with no lease, which only
    /// drops a hold whose lease ran out). Returns one answer per hold, in order.
    pub(crate) async fn check(&self, holds: &[&HoldTarget]) -> Result<Vec<Ownership>> {
        let answers = self.hold_pipeline(holds, None).await?;
        holds
            .iter()
            .zip(answers)
            .map(|(hold, answer)| {
                let answer = answer?;
                Ok(match hold.kind {
                    Kind::Exclusive => match parse::<Option<String>>(answer)? {
                        Some(value) if value == hold.owner => Ownership::Ours,
                        Some(_) => Ownership::Other,
                        None => Ownership::Gone,
                    },
                    _ => Ownership::from_code(parse(answer)?),
                })
            })
            .collect()
    }

    /// Sends the renew script of each hold's kind (with `lease_ms`, or, for `None`, the check
    /// described at [`check`](Self::check)) in one pipeline; when the server lost its script
    /// cache (a restart, `SCRIPT FLUSH`), loads the scripts and sends it again. Returns one
    /// reply per hold.
    async fn hold_pipeline(&self, holds: &[&HoldTarget], lease_ms: Option<u64>) -> Result<Vec<Result<Value>>> {
        let answers = self.send_hold_pipeline(holds, lease_ms).await?;
        let lost_scripts = answers
            .iter()
            .any(|answer| matches!(answer, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)));
        let answers = if lost_scripts {
            self.run(None, |mut connection| async move {
                for script in [&*RENEW, &*RENEW_RW, &*RENEW_PERMIT, &*RENEW_LEADER] {
                    script.prepare_invoke().load_async(&mut connection).await?;
                }
                Ok(())
            })
            .await?;
            self.send_hold_pipeline(holds, lease_ms).await?
        } else {
            answers
        };
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.map_err(|e| {
                    self.note_error(&e);
                    map_error(e, None)
                })
            })
            .collect())
    }

    async fn send_hold_pipeline(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        if self.cluster.is_some() {
            return self.send_slot_pipelines(holds, lease_ms).await;
        }
        self.send_one_pipeline(holds, lease_ms, None).await
    }

    /// On a cluster: one pipeline per node, or per hash slot where the node is not known (see
    /// [`Group`]; the cluster connection refuses a pipeline routed by keys that span slots,
    /// so a node's pipeline is sent to it by address), sent concurrently; the replies in
    /// the order of `holds`. The holds that got no answer from their node (a slot that moved
    /// since the map was read answers `MOVED`, without running the script; a node that
    /// failed over or is not connected yet fails its whole pipeline) are sent once more at
    /// once, one pipeline per slot, which the cluster connection routes by its own slot map.
    /// With `replicas` set, each pipeline ends with its own `WAIT`, and the last reply is the
    /// fewest acknowledgements any of the pipelines that answered got (0 when one failed).
    async fn send_slot_pipelines(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        type Answer = std::result::Result<Value, RedisError>;
        let waits = self.replicas > 0 && lease_ms.is_some();
        let mut answers: Vec<Option<Answer>> = (0..holds.len()).map(|_| None).collect();
        let mut fewest: Option<i64> = None;
        let mut pending: Vec<usize> = (0..holds.len()).collect();
        for by_node in [true, false] {
            if pending.is_empty() {
                break;
            }
            let mut groups: std::collections::HashMap<Group, Vec<usize>> = std::collections::HashMap::new();
            for &at in &pending {
                let Some(hold) = holds.get(at) else { continue };
                let group = match self.group_of(hold) {
                    Group::Node(..) if !by_node => Group::Slot(hold.keys.first().map_or(0, |k| key_slot(k.as_bytes()))),
                    group => group,
                };
                groups.entry(group).or_default().push(at);
            }
            let sent_by_node = groups.keys().any(|group| matches!(group, Group::Node(..)));
            let groups: Vec<(Group, Vec<usize>)> = groups.into_iter().collect();
            let sends = groups.iter().map(|(group, members)| async move {
                let holds: Vec<&HoldTarget> = members.iter().filter_map(|&at| holds.get(at).copied()).collect();
                match group {
                    Group::Node(host, port) => self.send_one_pipeline(&holds, lease_ms, Some((host, *port))).await,
                    _ => self.send_one_pipeline(&holds, lease_ms, None).await,
                }
            });
            let replies = futures_util::future::join_all(sends).await;
            let last_pass = !by_node || !sent_by_node;
            let mut failed = Vec::new();
            for ((_, members), reply) in groups.iter().zip(replies) {
                match reply {
                    Ok(mut values) => {
                        if waits {
                            let acked = match values.pop() {
                                Some(Ok(value)) => redis::from_redis_value_ref::<i64>(&value).unwrap_or(0),
                                _ => 0,
                            };
                            fewest = Some(fewest.map_or(acked, |f| f.min(acked)));
                        }
                        for (&at, value) in members.iter().zip(values) {
                            if value.is_err() && !last_pass {
                                failed.push(at);
                            } else if let Some(answer) = answers.get_mut(at) {
                                *answer = Some(value);
                            }
                        }
                    }
                    Err(error) if !last_pass => {
                        tracing::debug!(%error, holds = members.len(), "a node's renewal pipeline failed; sending per slot");
                        failed.extend(members.iter().copied());
                    }
                    Err(error) => {
                        let error = RedisError::from(std::io::Error::other(error.to_string()));
                        for &at in members {
                            if let Some(answer) = answers.get_mut(at) {
                                *answer = Some(Err(error.clone()));
                            }
                        }
                        if waits {
                            fewest = Some(0);
                        }
                    }
                }
            }
            if !failed.is_empty() {
                // The map was stale: the next round reads it again.
                *lock(&self.slot_map) = None;
            }
            pending = failed;
        }
        let mut answers: Vec<Answer> = answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(RedisError::from((ErrorKind::Io, "no reply in the pipeline")))))
            .collect();
        if waits {
            answers.push(Ok(Value::Int(fewest.unwrap_or(0))));
        }
        Ok(answers)
    }

    /// Sends the holds' pipeline (see [`hold_pipeline`](Self::hold_pipeline)) in one round trip.
    /// On a cluster, `node` (host and port) is the node to send it to, whatever the slots of
    /// its keys; without it, the cluster connection sends it to the primary of its first key.
    async fn send_one_pipeline(
        &self,
        holds: &[&HoldTarget],
        lease_ms: Option<u64>,
        node: Option<(&String, u16)>,
    ) -> Result<Vec<std::result::Result<Value, RedisError>>> {
        let mut pipeline = redis::pipe();
        pipeline.ignore_errors();
        for hold in holds {
            match (hold.kind, lease_ms) {
                (Kind::Exclusive, None) => {
                    pipeline.cmd("GET").arg(hold.keys.first());
                }
                (_, lease_ms) => {
                    let script = hold.renew_script();
                    pipeline
                        .cmd("EVALSHA")
                        .arg(script.get_hash())
                        .arg(hold.keys.len())
                        .arg(&*hold.keys)
                        .arg(&hold.owner)
                        .arg(lease_ms.unwrap_or(0));
                    if hold.kind == Kind::Candidate {
                        // Where it finds the leader gone, it hands over (see renew_leader.lua).
                        pipeline.arg(self.claim_ms);
                    }
                    // A renewal keeps the fence counter of an exclusive hold (see renew.lua).
                    pipeline.arg(self.fence_retention_ms);
                }
            }
        }
        if self.replicas > 0 && lease_ms.is_some() {
            // The renewals count once the replicas have them (see renew_batch).
            pipeline.cmd("WAIT").arg(self.replicas).arg(crate::builder::millis(self.replicas_timeout));
        }
        self.run(None, |connection| async move {
            match (connection, node) {
                (Connection::Cluster(mut connection), Some((host, port))) => {
                    let route = SingleNodeRoutingInfo::ByAddress { host: host.clone(), port };
                    let count = pipeline.cmd_iter().count();
                    let values = connection.route_pipeline(pipeline, 0, count, route).await?;
                    Ok(values.into_iter().map(Value::extract_error).collect())
                }
                (mut connection, _) => pipeline.query_async(&mut connection).await,
            }
        })
        .await
    }

    /// Reads the holders of a name (of every kind) and, for a fair provider
    /// (`count_waiters`), the number of waiters in its queue.
    pub(crate) async fn inspect(&self, lock: &LockName, keys: &LockKeys, count_waiters: bool) -> Result<LockInfo> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                queue_script(&INSPECT, keys, keys.record(), false).invoke_async(&mut connection).await
            })
            .await?;
        holders_reply(lock, &reply, count_waiters, "the inspect script")
    }

    /// Breaks every hold of a name (see `break.lua`) and returns the holds broken.
    pub(crate) async fn break_lock(&self, lock: &LockName, keys: &LockKeys) -> Result<Vec<HolderInfo>> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                queue_script(&BREAK, keys, keys.record(), false).arg(self.claim_ms).invoke_async(&mut connection).await
            })
            .await?;
        let broken = holders_reply(lock, &reply, false, "the break script")?.holders;
        if self.replicas > 0 && !broken.is_empty() {
            // As a grant does: a break the replicas missed could be undone by a failover.
            self.replicated_as(lock, keys, "the break").await?;
        }
        Ok(broken)
    }

    /// Runs the observe script for an observer of the election of `keys` that has seen the
    /// journal up to entry `seen` (none yet: `None`).
    pub(crate) async fn observe(&self, lock: &LockName, keys: &LockKeys, seen: Option<&str>) -> Result<Observed> {
        let reply: Vec<Value> = self
            .run(Some(lock), |mut connection| async move {
                queue_script(&OBSERVE, keys, keys.record(), false)
                    .arg(seen.unwrap_or(""))
                    .arg(self.claim_ms)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Observed::parse(&reply).ok_or_else(|| {
            Error::backend(
                BACKEND,
                Some(lock),
                Failure::UnexpectedReply { command: "the observe script", reply: format!("{reply:?}") },
            )
        })
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

/// Reads what the inspect and break scripts return: `[waiters, permits, since, (kind, owner,
/// ms left, token)...]`; the waiter count only when `count_waiters` (a fair provider).
fn holders_reply(lock: &LockName, reply: &[Value], count_waiters: bool, command: &'static str) -> Result<LockInfo> {
    let unexpected = || {
        Error::backend(
            BACKEND,
            Some(lock),
            Failure::UnexpectedReply {
                command,
                reply: format!("{reply:?} instead of [waiters, permits, since, (kind, owner, ms left, token)...]"),
            },
        )
    };
    let [waiters, count, since, holders @ ..] = reply else { return Err(unexpected()) };
    if holders.len() % 4 != 0 {
        return Err(unexpected());
    }
    let number = |value: &Value| redis::from_redis_value_ref::<i64>(value).ok();
    let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
    let waiters = number(waiters).and_then(|n| usize::try_from(n).ok()).filter(|_| count_waiters);
    let count = number(count).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    // When the holder of the mutex record was granted it, in server time (elections).
    let since = number(since).and_then(|ms| u64::try_from(ms).ok()).filter(|&ms| ms > 0).map(server_time);
    let holders = holders
        .chunks_exact(4)
        .map(|holder| {
            let [kind, owner, left, token] = holder else { return Err(unexpected()) };
            let owner = text(owner).unwrap_or_default();
            let token = FencingToken::new(text(token).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0));
            // Records written by lockkit carry who took them; anything else is shown as is.
            let mut info = match OwnerMeta::decode(&owner) {
                Some(meta) => meta.holder(token),
                None => HolderInfo::new(token, owner.clone()),
            };
            let letter = text(kind).unwrap_or_default();
            info = info.with_kind(Kind::hold_kind(&letter, &owner, count));
            if let (Some(since), "x") = (since, letter.as_str()) {
                info = info.with_since(since);
            }
            if let Some(left) = number(left).and_then(|left| u64::try_from(left).ok()) {
                info = info.with_lease_left(Duration::from_millis(left));
            }
            Ok(info)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LockInfo::new(holders, waiters))
}

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key's hash tag
/// (the part between the first `{` and the next `}`, when not empty) or of the whole key,
/// modulo 16384.
fn key_slot(key: &[u8]) -> u16 {
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
fn parse_slot_map(value: &Value) -> Option<SlotMap> {
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

/// An invocation of `script`, one of the scripts of the wait queue, with the twelve keys of
/// `layout.lua`, or only the first seven (`short`, for the mutex's acquire and release);
/// `void` is the void marker of the acquisition (any key of the name for the scripts that
/// void nothing).
fn queue_script<'a>(script: &'a Script, keys: &LockKeys, void: &str, short: bool) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    if short {
        for key in keys.mutex_keys(void) {
            invocation.key(key);
        }
    } else {
        for key in keys.script_keys(void) {
            invocation.key(key);
        }
    }
    invocation
}

/// The owner id of a candidate: `meta` (see [`OwnerMeta::encode`]) and a field `c:<identity
/// in hex>`, which a reader of the version-1 line ignores. Hex keeps the line free of spaces
/// and newlines (queue members are split at newlines) whatever bytes the identity has.
pub(crate) fn candidate_owner(meta: &str, identity: &[u8]) -> String {
    use std::fmt::Write;
    let mut owner = String::with_capacity(meta.len() + 3 + identity.len() * 2);
    owner.push_str(meta);
    owner.push_str(" c:");
    for byte in identity {
        let _ = write!(owner, "{byte:02x}");
    }
    owner
}

/// The identity in a candidate's owner id (see [`candidate_owner`]); `None` for other owners.
pub(crate) fn candidate_identity(owner: &str) -> Option<Arc<[u8]>> {
    let hex = owner.split(' ').skip(5).find_map(|field| field.strip_prefix("c:"))?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|at| hex.get(at..at + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    bytes.map(Arc::from)
}

/// A time the server gave in milliseconds since the epoch.
fn server_time(ms: u64) -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// A leader as the journal or the record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) term: FencingToken,
    pub(crate) identity: Arc<[u8]>,
    pub(crate) since: Option<std::time::SystemTime>,
}

impl Term {
    /// The leader of owner id `owner` for `term`, granted at server ms `since` (0: unknown);
    /// `None` when the owner is no candidate's.
    fn new(owner: &str, term: i64, since: i64) -> Option<Self> {
        let identity = candidate_identity(owner)?;
        let since = u64::try_from(since).ok().filter(|&ms| ms > 0).map(server_time);
        Some(Self { term: FencingToken::new(u64::try_from(term).ok()?), identity, since })
    }
}

/// One change in the journal of an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Elected(Term),
    /// The leader of this term no longer leads.
    Vacant(FencingToken),
}

/// What the observe script read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The current state rather than the changes since the entry the observer saw: its first
    /// read, or the entry is gone (trimmed, or the journal with it).
    pub(crate) restart: bool,
    /// The id of the last entry read (`None`: the journal is empty).
    pub(crate) last_id: Option<String>,
    /// How long the current leader's record lives, when somebody leads.
    pub(crate) leader_ttl: Option<Duration>,
    /// For a restart: the current leader, if any.
    pub(crate) leader: Option<Term>,
    /// Otherwise: the changes since the entry the observer saw, in journal order.
    pub(crate) changes: Vec<Change>,
}

impl Observed {
    fn parse(reply: &[Value]) -> Option<Self> {
        let number = |value: &Value| redis::from_redis_value_ref::<i64>(value).ok();
        let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
        let [status, last_id, ttl, owner, term, since, entries @ ..] = reply else { return None };
        let last_id = text(last_id)?;
        let restart = number(status)? == 1;
        let mut changes = Vec::new();
        if entries.len() % 5 != 0 {
            return None;
        }
        for entry in entries.chunks_exact(5) {
            let [_, kind, term, owner, since] = entry else { return None };
            let term_number = number(term)?;
            match text(kind)?.as_str() {
                "e" => changes.extend(Term::new(&text(owner)?, term_number, number(since)?).map(Change::Elected)),
                "v" => changes.push(Change::Vacant(FencingToken::new(u64::try_from(term_number).ok()?))),
                _ => {}
            }
        }
        Some(Self {
            restart,
            last_id: (!last_id.is_empty()).then_some(last_id),
            leader_ttl: u64::try_from(number(ttl)?).ok().map(Duration::from_millis),
            leader: Term::new(&text(owner)?, number(term)?, number(since)?),
            changes,
        })
    }
}

/// Reads a reply of a pipeline as a `T`.
fn parse<T: redis::FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|error| map_error(RedisError::from(error), None))
}

/// Maps a Redis error: anything that leaves the outcome unknown or may pass with time
/// (I/O, timeouts, a loading or failing-over server) is a retryable connection error; the
/// rest (permissions, wrong types, script errors) is a backend error.
pub(crate) fn map_error(error: RedisError, lock: Option<&LockName>) -> Error {
    let transient = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
        )
        || matches!(error.kind(), ErrorKind::ClusterConnectionNotFound);
    if transient { Error::connection(BACKEND, lock, error) } else { Error::backend(BACKEND, lock, error) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_a_memory_limit_with_an_evicting_policy_may_evict_locks() {
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
    fn key_slots_are_redis_clusters() {
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
    fn slot_maps_are_read_from_cluster_slots() {
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

/// What a server does when it runs out of memory: its `maxmemory` (bytes, 0 for no limit)
/// and `maxmemory-policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Eviction {
    pub(crate) max_memory: u64,
    pub(crate) policy: String,
}

impl Eviction {
    /// Reads a `CONFIG GET maxmemory*` reply (name, value, name, value...).
    fn from_config(reply: &[String]) -> Option<Self> {
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
