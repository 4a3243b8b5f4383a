//! Redis: the floor is `PING` on a plain multiplexed connection of the `redis` crate (on a
//! Redis Cluster, the crate's cluster connection, with the `PING` sent to the primary of the
//! slot of the raw scripts' key, as a lock's scripts are), and the backend's acquire and
//! release scripts sent raw beside it. The server's time per script comes from
//! `INFO commandstats`; the upkeep phase runs on a provider of its own renewing every second.

use std::time::{Duration, Instant};

use lockkit::LockProvider;
use lockkit::redis::{RedisLockProvider, RedisLockProviderBuilder};

use crate::bench::profile::{Boxed, Floor, FloorFigure, Profile, Renewals, Targets, Upkeep, floor_failure, renewals};
use crate::bench::url::{Url, run_id};
use crate::exit::{Failure, UNAVAILABLE};

/// The Redis profile.
pub(crate) struct Redis;

/// The Redis backend's acquire and release scripts, sent raw to show the floor of any
/// Lua-based lock (the CLI is not published, so reaching into the backend's sources is fine).
static ACQUIRE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(lockkit::redis::scripts::ACQUIRE_SCRIPT));
static RELEASE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(lockkit::redis::scripts::RELEASE_SCRIPT));

/// How long the raw scripts' fence counter outlives its last grant, in ms (the provider's
/// default for a 30 s lease).
const RAW_FENCE_RETENTION_MS: u64 = 300_000;

impl Profile for Redis {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn targets(&self) -> Targets {
        Targets {
            cycle: Some(2.2),
            handoff_share: Some(0.5),
            handoff: Some(2.5),
            wait_spread: Some(20.0),
            readers_scaling: Some(4.0),
            many_locks_speedup: None,
            memory_per_lock: Some(2048.0),
            server_time_per_script: Some(5.0),
        }
    }

    fn floor<'a>(&'a self, url: &'a Url) -> Boxed<'a, Result<Option<Box<dyn Floor>>, Failure>> {
        Box::pin(async move { Ok(Some(Box::new(RedisFloor::open(url).await?) as Box<dyn Floor>)) })
    }

    fn upkeep(&self, url: &Url) -> Result<Option<Upkeep>, Failure> {
        let provider = provider(url, Duration::from_secs(5), Duration::from_secs(1), "upkeep: a Redis provider")?;
        let (renewals, ping) = (renewals(provider.clone(), RedisLockProvider::renewal_stats), provider.clone());
        let reach =
            Box::pin(async move { ping.ping().await.map_err(|e| Failure::from_lock_error(&e, "upkeep: PING")) });
        Ok(Some(Upkeep { provider: provider.into(), renewals, reach }))
    }

    fn upkeep_note(&self) -> Option<&'static str> {
        Some(
            "Redis upkeep runs on a provider of its own with a 5 s lease renewed every 1 s, so that ticks come quickly",
        )
    }

    fn short_lease(&self) -> Option<(&'static str, Duration)> {
        Some(("lease", Duration::from_secs(3)))
    }

    fn renewal_counters(&self, provider: &LockProvider) -> Option<Renewals> {
        Some(renewals(RedisLockProvider::try_from(provider.clone()).ok()?, RedisLockProvider::renewal_stats))
    }

    fn quiet_provider(&self, url: &Url) -> Result<Option<LockProvider>, Failure> {
        let context = "server time per script: a Redis provider";
        provider(url, Duration::from_secs(60), Duration::from_secs(20), context).map(|p| Some(p.into()))
    }
}

/// A provider of the URL's store and options with `lease`, renewed every `renew_every`.
fn provider(url: &Url, lease: Duration, renew_every: Duration, context: &str) -> Result<RedisLockProvider, Failure> {
    let fail = |e: lockkit::Error| Failure::from_lock_error(&e, context);
    let builder = RedisLockProviderBuilder::from_url(&url.store).map_err(fail)?;
    builder.lease(lease).renew_every(renew_every).build().map_err(fail)
}

/// The floor's connection and the key of the raw scripts' lock.
struct RedisFloor {
    connection: RawRedis,
    key: String,
    /// A provider of the URL's settings, for the keys of the run's locks (never connected).
    keys: RedisLockProvider,
}

/// The floor's Redis connection: to one server, or to a cluster.
#[derive(Clone)]
enum RawRedis {
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
    async fn query_at<T: redis::FromRedisValue>(&mut self, key: &str, cmd: redis::Cmd) -> redis::RedisResult<T> {
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
}

impl RedisFloor {
    async fn open(url: &Url) -> Result<Self, Failure> {
        let unreachable =
            |e: redis::RedisError| Failure::new(UNAVAILABLE, format!("floor: cannot reach {}: {e}", url.shown));
        let key = format!("lockkit-bench:{{{}}}:raw", run_id());
        let keys = RedisLockProviderBuilder::from_url(&url.store)
            .and_then(RedisLockProviderBuilder::build)
            .map_err(|e| Failure::from_lock_error(&e, "floor: a Redis provider"))?;
        let connection = match url.store.scheme() {
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
                RawRedis::Cluster(client.get_async_connection().await.map_err(unreachable)?)
            }
            _ => {
                let client = redis::Client::open(url.store.address()).map_err(unreachable)?;
                RawRedis::Plain(client.get_multiplexed_async_connection().await.map_err(unreachable)?)
            }
        };
        Ok(Self { connection, key, keys })
    }
}

/// The round trips the floor times, in the order of its samples.
const FIGURES: &[FloorFigure] = &[
    FloorFigure::main("ping", "PING"),
    FloorFigure::other_p50("scripts_raw", "acquire+release scripts raw, no lockkit,"),
];

impl Floor for RedisFloor {
    fn describe(&self) -> &'static str {
        match self.connection {
            RawRedis::Plain(_) => "Redis PING on a plain connection of the redis crate",
            RawRedis::Cluster(_) => {
                "Redis PING to the primary of the raw key's slot, on the redis crate's cluster connection"
            }
        }
    }

    fn figures(&self) -> &'static [FloorFigure] {
        FIGURES
    }

    fn sample<'a>(&'a mut self, url: &'a Url) -> Boxed<'a, Result<Vec<Option<Duration>>, Failure>> {
        Box::pin(async move {
            let failed = |e: redis::RedisError| floor_failure(url, e);
            let (connection, key) = (&mut self.connection, self.key.as_str());
            let start = Instant::now();
            let _: String = connection.query_at(key, redis::cmd("PING")).await.map_err(failed)?;
            let ping = start.elapsed();
            let owner = format!("raw-{}", run_id());
            let start = Instant::now();
            let _: redis::Value = ACQUIRE
                .key(key)
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
                .key(key)
                .key(format!("{key}:fence"))
                .key(format!("{key}:queue"))
                .key(format!("{key}:queue:expiry"))
                .key(format!("{key}:released"))
                .arg(&owner)
                .arg(200)
                .invoke_async(connection)
                .await
                .map_err(failed)?;
            Ok(vec![Some(ping), Some(start.elapsed())])
        })
    }

    fn script_totals(&mut self) -> Boxed<'_, Option<(u64, u64)>> {
        Box::pin(async move {
            let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut self.connection).await.ok()?;
            let Some(fields) = info.lines().find_map(|line| line.strip_prefix("cmdstat_evalsha:")) else {
                return Some((0, 0));
            };
            let field =
                |name: &str| fields.split(',').find_map(|f| f.strip_prefix(name)).and_then(|v| v.trim().parse().ok());
            Some((field("calls=")?, field("usec=")?))
        })
    }

    fn server_time(&mut self) -> Boxed<'_, Vec<(&'static str, String, f64)>> {
        Box::pin(async move {
            let (connection, key) = (&mut self.connection, self.key.as_str());
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
                let Some((name, fields)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                    continue;
                };
                let key = match name {
                    "ping" => "ping_usec_per_call",
                    "evalsha" => "evalsha_usec_per_call",
                    "eval" => "eval_usec_per_call",
                    "subscribe" => "subscribe_usec_per_call",
                    "ssubscribe" => "ssubscribe_usec_per_call",
                    _ => continue,
                };
                let label = match name {
                    "evalsha" => "server time per EVALSHA, every script since the server started".to_owned(),
                    other => format!("server time per {}", other.to_uppercase()),
                };
                let per_call =
                    fields.split(',').find_map(|f| f.strip_prefix("usec_per_call=")).and_then(|v| v.parse().ok());
                if let Some(per_call) = per_call {
                    out.push((key, label, per_call));
                }
            }
            out
        })
    }

    /// Deletes the fence counters of the run's locks at once (the backend lets a counter
    /// expire only `fence_retention` after its lock's last use; nobody else uses these names).
    fn clean_up<'a>(&'a mut self, names: &'a [String]) -> Boxed<'a, Vec<String>> {
        Box::pin(async move {
            let mut failed = false;
            for chunk in names.chunks(1000) {
                let keys = chunk
                    .iter()
                    .filter_map(|name| lockkit::LockName::new(name).ok())
                    .map(|name| format!("{}:fence", self.keys.record_key(&name)));
                match &mut self.connection {
                    RawRedis::Cluster(_) => {
                        // A pipeline goes to one node: one UNLINK each, concurrently.
                        let unlinks = keys.map(|key| {
                            let mut connection = self.connection.clone();
                            async move { redis::cmd("UNLINK").arg(key).query_async::<()>(&mut connection).await }
                        });
                        failed |= futures_util::future::join_all(unlinks).await.iter().any(Result::is_err);
                    }
                    connection @ RawRedis::Plain(_) => {
                        let mut pipeline = redis::pipe();
                        for key in keys {
                            pipeline.cmd("UNLINK").arg(key).ignore();
                        }
                        failed |= pipeline.query_async::<()>(connection).await.is_err();
                    }
                }
            }
            if failed {
                vec![format!(
                    "some fence counters of this run could not be deleted: keys matching *lockkit-bench/{}/*:fence",
                    run_id()
                )]
            } else {
                Vec::new()
            }
        })
    }
}
