//! The floor: the raw round trip of the same client library to the same server, measured in
//! the same run as the lock figures. Redis: `PING` on a plain multiplexed connection of the
//! `redis` crate (on a Redis Cluster, the crate's cluster connection, with the `PING` sent to
//! the primary of the slot of the raw scripts' key, as a lock's scripts are). ZooKeeper: `exists` of the base path, and create+delete of an ephemeral
//! node, on a session of zookeeper-client (the `create` is the write a lock needs; the
//! `exists` the cheapest request). PostgreSQL: `SELECT 1` on a plain tokio-postgres
//! connection, and beside it a one-row commit (an upsert of one row of a table
//! `lockkit_bench_floor`, created in the role's first schema when it may), once waiting for
//! the WAL flush and once with `synchronous_commit` off, so that the flush's cost shows. etcd: a `Get` round trip, and a put plus delete of a key
//! bound to a lease, on a client of etcd-client; etcd's own `Lock`/`Unlock` service cycle is
//! measured beside it. The memory and file backends make no network round trip,
//! so they have no floor.

use std::time::{Duration, Instant};

use lockkit::zk::ZkLockProvider;
use lockkit::zk::zookeeper_client as zk;

use super::Url;
use crate::exit::{BACKEND, Failure, UNAVAILABLE};

/// The Redis backend's acquire and release scripts, sent raw to show the floor of any
/// Lua-based lock (the CLI is not published, so reaching into the backend's sources is fine).
static ACQUIRE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(lockkit::redis::scripts::ACQUIRE_SCRIPT));
static RELEASE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(lockkit::redis::scripts::RELEASE_SCRIPT));

/// How long the raw scripts' fence counter outlives its last grant, in ms (the provider's
/// default for a 30 s lease).
const RAW_FENCE_RETENTION_MS: u64 = 300_000;

/// A connection on which raw round trips are timed.
pub(crate) enum Floor {
    /// A connection of the `redis` crate, and the key of the raw scripts' lock.
    Redis(RawRedis, String),
    /// A ZooKeeper session of its own, and the znodes it plays with.
    Zk(Box<ZkFloor>),
    /// A plain tokio-postgres connection with the provider's settings, and whether the
    /// one-row commit's table could be made.
    Postgres(lockkit::postgres::tokio_postgres::Client, bool),
    /// An etcd client, its provider's lease, and the key it plays with.
    #[cfg(feature = "etcd")]
    Etcd(Box<EtcdFloor>),
}

/// The etcd side of the floor.
#[cfg(feature = "etcd")]
pub(crate) struct EtcdFloor {
    /// Kept so that the lease lives as long as the floor.
    _provider: lockkit::etcd::EtcdLockProvider,
    client: lockkit::etcd::etcd_client::Client,
    lease: i64,
    /// The key put and deleted for the floor.
    key: String,
    /// The name given to etcd's own Lock service.
    lock_name: String,
}

/// The ZooKeeper side of the floor.
pub(crate) struct ZkFloor {
    /// Kept so that the sessions live as long as the floor.
    _providers: [ZkLockProvider; 2],
    client: zk::Client,
    /// A second session, the watcher of the raw hand-off.
    watcher: zk::Client,
    /// The base path (the parent of every lock's znode): the target of `exists`.
    root: String,
    /// An ephemeral node created and deleted for the create+delete floor.
    node: String,
    /// A container for the recipe's own requests sent raw.
    recipe_dir: String,
}

/// One raw sample of each kind the floor has.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sample {
    /// Redis PING, or ZooKeeper create+delete: the floor of the ratios.
    pub(crate) main: Duration,
    /// ZooKeeper `exists`.
    pub(crate) exists: Option<Duration>,
    /// ZooKeeper: a raw hand-off, from sending a delete on one session to the deletion's
    /// notification on another that watched the node.
    pub(crate) notify: Option<Duration>,
    /// ZooKeeper: the lock recipe's own requests sent raw (a sequential create and the
    /// children list pipelined, then the delete). Redis: the acquire and release scripts
    /// sent raw on the plain connection.
    pub(crate) recipe: Option<Duration>,
    /// PostgreSQL: a one-row commit that waits for the WAL flush, and the same commit with
    /// `synchronous_commit` off.
    pub(crate) commit: Option<(Duration, Duration)>,
}

/// The floor's Redis connection: to one server, or to a cluster.
#[derive(Clone)]
pub(crate) enum RawRedis {
    /// A plain multiplexed connection.
    Plain(redis::aio::MultiplexedConnection),
    /// The redis crate's cluster connection, which routes each command by its keys' slot.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for RawRedis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Plain(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Plain(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Plain(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

impl RawRedis {
    /// Sends `cmd`, which names no key, to the server of `key` (on a cluster, the primary of
    /// its slot).
    pub(crate) async fn query_at<T: redis::FromRedisValue>(
        &mut self,
        key: &str,
        cmd: redis::Cmd,
    ) -> redis::RedisResult<T> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        match self {
            Self::Plain(connection) => cmd.query_async(connection).await,
            Self::Cluster(connection) => {
                let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                let value = connection.route_command(cmd, RoutingInfo::SingleNode(route)).await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl Floor {
    /// Opens the floor's connection for `url`; `None` for the memory and file backends.
    pub(crate) async fn open(url: &Url) -> Result<Option<Floor>, Failure> {
        let unreachable =
            |e: redis::RedisError| Failure::new(UNAVAILABLE, format!("floor: cannot reach {}: {e}", url.shown));
        let key = format!("lockkit-bench:{{{}}}:raw", super::run_id());
        match url.store.scheme() {
            "redis" | "rediss" => {
                let client = redis::Client::open(url.store.address()).map_err(unreachable)?;
                let connection = client.get_multiplexed_async_connection().await.map_err(unreachable)?;
                Ok(Some(Floor::Redis(RawRedis::Plain(connection), key)))
            }
            scheme @ ("redis+cluster" | "rediss+cluster") => {
                let tls = scheme == "rediss+cluster";
                let credentials = match (url.store.user(), url.store.password()) {
                    (Some(user), Some(password)) => format!("{user}:{password}@"),
                    (None, Some(password)) => format!(":{password}@"),
                    (Some(user), None) => format!("{user}@"),
                    (None, None) => String::new(),
                };
                let nodes: Vec<String> = url
                    .store
                    .hosts()
                    .split(',')
                    .map(|node| format!("{}://{credentials}{}/", if tls { "rediss" } else { "redis" }, node.trim()))
                    .collect();
                let client = redis::cluster::ClusterClient::new(nodes).map_err(unreachable)?;
                let connection = client.get_async_connection().await.map_err(unreachable)?;
                Ok(Some(Floor::Redis(RawRedis::Cluster(connection), key)))
            }
            "zk" => {
                let open = |e: lockkit::Error| {
                    Failure::from_lock_error(&e, &format!("floor: cannot open a session on {}", url.shown))
                };
                let builder = lockkit::zk::ZkLockProviderBuilder::from_url(&url.store).map_err(open)?;
                let provider = builder.clone().build().map_err(open)?;
                let second = builder.build().map_err(open)?;
                let client = provider.zk_client().await.map_err(open)?;
                let watcher = second.zk_client().await.map_err(open)?;
                let probe = provider.lock_path("probe").map_err(|e| Failure::from_lock_error(&e, "floor"))?;
                let root = probe.rsplit_once('/').map(|(root, _)| root.to_owned()).unwrap_or_default();
                let id = super::run_id();
                let recipe_dir = format!("{root}/lockkit-bench-floor-{id}-recipe");
                let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                client.create(&recipe_dir, &[], &container).await.map_err(|e| zk_failure(url, &e))?;
                Ok(Some(Floor::Zk(Box::new(ZkFloor {
                    _providers: [provider, second],
                    client,
                    watcher,
                    node: format!("{root}/lockkit-bench-floor-{id}"),
                    root,
                    recipe_dir,
                }))))
            }
            "postgres" | "postgresql" => {
                let open = |e: lockkit::Error| {
                    Failure::from_lock_error(&e, &format!("floor: cannot connect to {}", url.shown))
                };
                let provider = lockkit::postgres::PostgresLockProviderBuilder::from_url(&url.store)
                    .and_then(lockkit::postgres::PostgresLockProviderBuilder::build)
                    .map_err(open)?;
                let client = provider.open_client().await.map_err(open)?;
                // The provider's connections may run with `synchronous_commit` off (grants that
                // do not wait for the flush): the floor's one-row commit waits for it, as the
                // server's default does.
                let table = client.simple_query("SET synchronous_commit = on").await.is_ok()
                    && client
                        .simple_query(
                            "CREATE TABLE IF NOT EXISTS lockkit_bench_floor (id text PRIMARY KEY, n bigint NOT NULL)",
                        )
                        .await
                        .is_ok();
                Ok(Some(Floor::Postgres(client, table)))
            }
            #[cfg(feature = "etcd")]
            "etcd" => {
                let open = |e: lockkit::Error| {
                    Failure::from_lock_error(&e, &format!("floor: cannot open a client of {}", url.shown))
                };
                let builder = lockkit::etcd::EtcdLockProviderBuilder::from_url(&url.store).map_err(open)?;
                let provider = builder.build().map_err(open)?;
                let client = provider.etcd_client().await.map_err(open)?;
                let lease = provider.lease_id().await.map_err(open)?;
                let probe = provider.lock_prefix("probe").map_err(|e| Failure::from_lock_error(&e, "floor"))?;
                let root = probe.split_once('/').map(|(root, _)| root.to_owned()).unwrap_or_default();
                let id = super::run_id();
                Ok(Some(Floor::Etcd(Box::new(EtcdFloor {
                    _provider: provider,
                    client,
                    lease,
                    key: format!("{root}/lockkit-bench-floor-{id}"),
                    lock_name: format!("{root}/lockkit-bench-floor-{id}-lock-service"),
                }))))
            }
            _ => Ok(None),
        }
    }

    /// What the floor is, for the report.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Floor::Redis(RawRedis::Plain(_), _) => "Redis PING on a plain connection of the redis crate",
            Floor::Redis(RawRedis::Cluster(_), _) => {
                "Redis PING to the primary of the raw key's slot, on the redis crate's cluster connection"
            }
            Floor::Zk(_) => "ZooKeeper create+delete of an ephemeral node (zookeeper-client, one session)",
            Floor::Postgres(..) => "PostgreSQL SELECT 1 on a plain tokio-postgres connection",
            #[cfg(feature = "etcd")]
            Floor::Etcd(_) => "etcd put+delete of a key bound to a lease (etcd-client, one client)",
        }
    }

    /// Times one sample of each kind.
    pub(crate) async fn sample(&mut self, url: &Url) -> Result<Sample, Failure> {
        match self {
            Floor::Redis(connection, key) => {
                let failed =
                    |e: redis::RedisError| Failure::new(UNAVAILABLE, format!("floor: {} failed: {e}", url.shown));
                let start = Instant::now();
                let _: String = connection.query_at(key, redis::cmd("PING")).await.map_err(failed)?;
                let main = start.elapsed();
                let owner = format!("raw-{}", super::run_id());
                let start = Instant::now();
                let _: (i64, i64, i64, i64) = ACQUIRE
                    .key(key.as_str())
                    .key(format!("{key}:fence"))
                    .key(format!("{key}:void:x"))
                    .key(format!("{key}:queue"))
                    .key(format!("{key}:queue:expiry"))
                    .key(format!("{key}:released"))
                    .arg(&owner)
                    .arg(30_000)
                    .arg("0")
                    .arg(60_000)
                    .arg(200)
                    .arg("")
                    .arg(RAW_FENCE_RETENTION_MS)
                    .invoke_async(connection)
                    .await
                    .map_err(failed)?;
                let _: i64 = RELEASE
                    .key(key.as_str())
                    .key(format!("{key}:fence"))
                    .key(format!("{key}:queue"))
                    .key(format!("{key}:queue:expiry"))
                    .key(format!("{key}:released"))
                    .arg(&owner)
                    .arg(200)
                    .invoke_async(connection)
                    .await
                    .map_err(failed)?;
                Ok(Sample { main, exists: None, notify: None, recipe: Some(start.elapsed()), commit: None })
            }
            Floor::Postgres(client, table) => {
                let failed = |what: &str, e: lockkit::postgres::tokio_postgres::Error| {
                    Failure::new(UNAVAILABLE, format!("floor: {what} on {} failed: {e}", url.shown))
                };
                let start = Instant::now();
                client.simple_query("SELECT 1").await.map_err(|e| failed("SELECT 1", e))?;
                let main = start.elapsed();
                let mut commit = None;
                if *table {
                    // The id is the run's: no value to escape, and runs do not meet.
                    let upsert = format!(
                        "INSERT INTO lockkit_bench_floor AS f VALUES ('{}', 1) ON CONFLICT (id) DO UPDATE SET n = f.n + 1",
                        super::run_id()
                    );
                    let start = Instant::now();
                    client.simple_query(&upsert).await.map_err(|e| failed("a one-row commit", e))?;
                    let flushed = start.elapsed();
                    let unflushed = format!("BEGIN; SET LOCAL synchronous_commit = off; {upsert}; COMMIT");
                    let start = Instant::now();
                    client.simple_query(&unflushed).await.map_err(|e| failed("a one-row commit", e))?;
                    commit = Some((flushed, start.elapsed()));
                }
                Ok(Sample { main, commit, ..Sample::default() })
            }
            Floor::Zk(floor) => {
                let start = Instant::now();
                floor.client.check_stat(&floor.root).await.map_err(|e| zk_failure(url, &e))?;
                let exists = start.elapsed();

                let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
                let start = Instant::now();
                floor.client.create(&floor.node, &[], &ephemeral).await.map_err(|e| zk_failure(url, &e))?;
                floor.client.delete(&floor.node, None).await.map_err(|e| zk_failure(url, &e))?;
                let main = start.elapsed();

                let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                let prefix = format!("{}/n-", floor.recipe_dir);
                // The server deletes an empty container now and then: make it again.
                let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                match floor.client.create(&floor.recipe_dir, &[], &container).await {
                    Ok(_) | Err(zk::Error::NodeExists) => {}
                    Err(e) => return Err(zk_failure(url, &e)),
                }
                let start = Instant::now();
                let create = floor.client.create(&prefix, &[], &sequential);
                let list = floor.client.list_children(&floor.recipe_dir);
                let (_, sequence) = create.await.map_err(|e| zk_failure(url, &e))?;
                list.await.map_err(|e| zk_failure(url, &e))?;
                floor.client.delete(&format!("{prefix}{sequence}"), None).await.map_err(|e| zk_failure(url, &e))?;
                let recipe = start.elapsed();

                floor.client.create(&floor.node, &[], &ephemeral).await.map_err(|e| zk_failure(url, &e))?;
                let (_, _, watch) =
                    floor.watcher.get_and_watch_data(&floor.node).await.map_err(|e| zk_failure(url, &e))?;
                let start = Instant::now();
                let delete = floor.client.delete(&floor.node, None);
                watch.changed().await;
                let notify = start.elapsed();
                delete.await.map_err(|e| zk_failure(url, &e))?;
                Ok(Sample { main, exists: Some(exists), notify: Some(notify), recipe: Some(recipe), commit: None })
            }
            #[cfg(feature = "etcd")]
            Floor::Etcd(floor) => {
                use lockkit::etcd::etcd_client::{LockOptions, PutOptions};
                let failed = |e: lockkit::etcd::etcd_client::Error| {
                    Failure::new(UNAVAILABLE, format!("floor: {} failed: {e}", url.shown))
                };
                let start = Instant::now();
                floor.client.get(floor.key.as_str(), None).await.map_err(failed)?;
                let exists = start.elapsed();
                let start = Instant::now();
                let put = PutOptions::new().with_lease(floor.lease);
                floor.client.put(floor.key.as_str(), "", Some(put)).await.map_err(failed)?;
                floor.client.delete(floor.key.as_str(), None).await.map_err(failed)?;
                let main = start.elapsed();
                // etcd's own Lock service, on the same lease: lock, then unlock by the key it returns.
                let start = Instant::now();
                let options = LockOptions::new().with_lease(floor.lease);
                let locked = floor.client.lock(floor.lock_name.as_str(), Some(options)).await.map_err(failed)?;
                floor.client.unlock(locked.key().to_vec()).await.map_err(failed)?;
                let recipe = start.elapsed();
                Ok(Sample { main, exists: Some(exists), notify: None, recipe: Some(recipe), commit: None })
            }
        }
    }

    /// Redis only: the calls and microseconds of `EVALSHA` the server counted so far
    /// (`INFO commandstats`, cumulative); the difference of two readings around a phase that
    /// runs one script only is that script's server time. `None` where refused.
    pub(crate) async fn evalsha_totals(&mut self) -> Option<(u64, u64)> {
        let Floor::Redis(connection, _) = self else { return None };
        let info: String = redis::cmd("INFO").arg("commandstats").query_async(connection).await.ok()?;
        let Some(fields) = info.lines().find_map(|line| line.strip_prefix("cmdstat_evalsha:")) else {
            return Some((0, 0));
        };
        let field =
            |name: &str| fields.split(',').find_map(|f| f.strip_prefix(name)).and_then(|v| v.trim().parse().ok());
        Some((field("calls=")?, field("usec=")?))
    }

    /// Redis only: the server's own time per call of the commands a lock uses, from
    /// `INFO commandstats` (cumulative since the server started; `None` where refused).
    pub(crate) async fn server_usec_per_call(&mut self) -> Vec<(String, f64)> {
        let Floor::Redis(connection, key) = self else { return Vec::new() };
        // The raw scripts' fence counter is the one key they leave.
        let _: Result<i64, _> = redis::cmd("DEL").arg(format!("{key}:fence")).query_async(connection).await;
        let mut info_cmd = redis::cmd("INFO");
        info_cmd.arg("commandstats");
        // On a cluster: the primary of the raw key's slot, one of the servers the run used.
        let Ok(info) = connection.query_at::<String>(key, info_cmd).await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for line in info.lines() {
            // cmdstat_evalsha:calls=10,usec=71,usec_per_call=7.10,...
            let Some((name, fields)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
            if !matches!(name, "ping" | "evalsha" | "eval" | "subscribe" | "ssubscribe") {
                continue;
            }
            let per_call =
                fields.split(',').find_map(|f| f.strip_prefix("usec_per_call=")).and_then(|v| v.parse().ok());
            if let Some(per_call) = per_call {
                out.push((name.to_owned(), per_call));
            }
        }
        out
    }
}

fn zk_failure(url: &Url, error: &zk::Error) -> Failure {
    let code = match error {
        zk::Error::ConnectionLoss | zk::Error::SessionExpired | zk::Error::ClientClosed => UNAVAILABLE,
        _ => BACKEND,
    };
    Failure::new(code, format!("floor: a raw ZooKeeper request to {} failed: {error}", url.shown))
}
