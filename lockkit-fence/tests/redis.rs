//! Fenced Redis writes against real servers the testkit starts: the fence cases on one server
//! with AOF (restarted for behaviour 32) and on a Redis Cluster of three primaries, every
//! ready-made write and a script of ours, exact comparison of 64-bit tokens, and a fence that
//! follows a Sentinel failover.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode, FencingToken, LockId, LockName};
use lockkit_fence::redis::{FencedScript, RedisFence};
use lockkit_fence::{FenceError, FenceSink};
use lockkit_testkit::fixture::{Persistence, RedisCluster, RedisConfig, RedisSentinels, RedisServer};
use lockkit_testkit::{FaultResult, FenceHarness, Unsupported};
use redis::aio::MultiplexedConnection;

/// One redis-server with an append-only file fsynced on every write, restarted for the
/// restart case.
struct SingleHarness {
    server: tokio::sync::Mutex<RedisServer>,
    url: String,
}

impl SingleHarness {
    async fn start() -> Self {
        let config = RedisConfig { persistence: Persistence::Aof, ..RedisConfig::default() };
        let server = RedisServer::start_with(config).await.unwrap_or_else(|error| panic!("redis-server: {error}"));
        Self { url: server.url(), server: tokio::sync::Mutex::new(server) }
    }
}

async fn connect(url: &str) -> MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

/// A server of the test's own (dropped, it stops), a connection to it for raw commands, and
/// a fence writing through a clone of that connection.
async fn fenced_server() -> (RedisServer, MultiplexedConnection, RedisFence<MultiplexedConnection>) {
    let server = RedisServer::start().await.unwrap();
    let raw = connect(&server.url()).await;
    let fenced = RedisFence::new(raw.clone());
    (server, raw, fenced)
}

#[async_trait]
impl FenceHarness for SingleHarness {
    fn name(&self) -> String {
        "redis fence (AOF)".to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        Arc::new(RedisFence::new(connect(&self.url).await))
    }

    async fn isolated(&self) -> Result<Arc<dyn FenceHarness>, Unsupported> {
        Ok(Arc::new(Self::start().await))
    }

    async fn restart_store(&self) -> FaultResult {
        self.server.lock().await.restart().await.unwrap_or_else(|error| panic!("restart redis-server: {error}"));
        Ok(())
    }
}

/// A Redis Cluster of three primaries and three replicas, without persistence: no restart.
struct ClusterHarness {
    cluster: RedisCluster,
}

#[async_trait]
impl FenceHarness for ClusterHarness {
    fn name(&self) -> String {
        "redis fence (cluster)".to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        let nodes: Vec<String> =
            self.cluster.primaries().iter().map(|node| format!("redis://127.0.0.1:{}/", node.port())).collect();
        let client = redis::cluster::ClusterClient::new(nodes).unwrap();
        Arc::new(RedisFence::new(client.get_async_connection().await.unwrap()))
    }
}

mod single {
    lockkit_testkit::fence_conformance!(crate::SingleHarness::start().await);
}

mod cluster {
    lockkit_testkit::fence_conformance!(
        crate::ClusterHarness { cluster: lockkit_testkit::fixture::RedisCluster::start().await.unwrap() },
        // Its nodes keep nothing across a restart; the single server with AOF checks it.
        without: [the_highest_token_survives_a_store_restart],
    );
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

fn fence(name: &str, token: u64) -> Fence {
    let lock = LockId::new("fence-tests://redis", LockName::new(name).unwrap()).unwrap();
    Fence::new(lock, FencingToken::new(token), FenceMode::Write)
}

fn unique(what: &str) -> String {
    format!("fence-test/{what}/{}", uuid::Uuid::new_v4().simple())
}

fn assert_stale<T: std::fmt::Debug>(outcome: Result<T, FenceError>, token: u64, highest: u64) {
    match outcome {
        Err(FenceError::Stale { token: t, highest: h, .. }) => assert_eq!((t.get(), h.get()), (token, highest)),
        other => panic!("expected Stale {{ {token}, {highest} }}, got {other:?}"),
    }
}

#[test]
fn every_ready_made_write_is_fenced() {
    runtime().block_on(async {
        let (_server, mut raw, fenced) = fenced_server().await;
        let (key, hash, counter) = (unique("set"), unique("hash"), unique("counter"));
        fenced.set(&key, &fence("a", 5), "five").await.unwrap();
        assert_stale(fenced.set(&key, &fence("a", 4), "four").await, 4, 5);
        assert_stale(fenced.set_px(&key, &fence("a", 4), "four", Duration::from_secs(9)).await, 4, 5);
        assert_stale(fenced.del(&key, &fence("a", 4)).await, 4, 5);
        assert_eq!(fenced.get::<String>(&key, &fence("a", 5)).await.unwrap().as_deref(), Some("five"));
        fenced.set_px(&key, &fence("a", 6), "six", Duration::from_secs(60)).await.unwrap();
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut raw).await.unwrap();
        assert!(ttl > 50_000, "the value expires: {ttl}");
        assert!(fenced.del(&key, &fence("a", 6)).await.unwrap());
        assert_stale(fenced.set(&key, &fence("a", 5), "back").await, 5, 6);
        let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw).await.unwrap();
        assert!(!exists, "a stale holder cannot bring a deleted key back");

        assert_eq!(fenced.hset(&hash, &fence("h", 3), &[("a", "1"), ("b", "2")]).await.unwrap(), 2);
        assert_stale(fenced.hset(&hash, &fence("h", 2), &[("a", "stale")]).await, 2, 3);
        assert_eq!(fenced.hget::<String>(&hash, &fence("h", 3), "a").await.unwrap().as_deref(), Some("1"));
        assert!(fenced.hset::<&str>(&hash, &fence("h", 3), &[]).await.is_err(), "no fields");

        assert_eq!(fenced.incr_by(&counter, &fence("c", 1), 5).await.unwrap(), 5);
        assert_eq!(fenced.incr_by(&counter, &fence("c", 2), 5).await.unwrap(), 10);
        assert_stale(fenced.incr_by(&counter, &fence("c", 1), 100).await, 1, 2);
        let value: i64 = redis::cmd("GET").arg(&counter).query_async(&mut raw).await.unwrap();
        assert_eq!(value, 10);

        let read = Fence::new(fence("c", 9).lock().clone(), FencingToken::new(9), FenceMode::Read);
        assert!(matches!(fenced.incr_by(&counter, &read, 1).await, Err(FenceError::InvalidInput { .. })));
        assert!(matches!(fenced.set("a}b", &fence("x", 1), "v").await, Err(FenceError::InvalidInput { .. })));
    });
}

#[test]
fn a_script_of_yours_runs_behind_the_fence() {
    runtime().block_on(async {
        let (_server, mut raw, fenced) = fenced_server().await;
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let (todo, done) = (format!("{{{tag}}}:todo"), format!("{{{tag}}}:done"));
        let _: () = redis::cmd("RPUSH").arg(&todo).arg("job-1").arg("job-2").query_async(&mut raw).await.unwrap();
        let move_item = FencedScript::new(
            "if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return redis.error_reply('NOJOB ' .. ARGV[1]) end\n\
             return redis.call('RPUSH', KEYS[2], ARGV[1])",
        );
        let moved: i64 =
            fenced.run(&move_item, &todo, &fence("q", 7)).key(&todo).key(&done).arg("job-1").invoke().await.unwrap();
        assert_eq!(moved, 1);
        let stale =
            fenced.run(&move_item, &todo, &fence("q", 6)).key(&todo).key(&done).arg("job-2").invoke::<i64>().await;
        assert_stale(stale, 6, 7);
        let left: Vec<String> = redis::cmd("LRANGE").arg(&todo).arg(0).arg(-1).query_async(&mut raw).await.unwrap();
        assert_eq!(left, ["job-2"], "the stale call moved nothing");
        // The script's own refusal is its error, and raises nothing.
        let refused =
            fenced.run(&move_item, &todo, &fence("q", 9)).key(&todo).key(&done).arg("job-9").invoke::<i64>().await;
        assert!(matches!(&refused, Err(FenceError::Store { .. })), "{refused:?}");
        assert_eq!(fenced.state(&todo).await.unwrap().unwrap().highest, FencingToken::new(7));
    });
}

#[test]
fn tokens_beyond_the_doubles_of_lua_are_compared_exactly() {
    runtime().block_on(async {
        let server = RedisServer::start().await.unwrap();
        let fenced = RedisFence::new(connect(&server.url()).await);
        let key = unique("big");
        let big = (1u64 << 53) + 1;
        fenced.set(&key, &fence("a", big), "big").await.unwrap();
        // 2^53 and 2^53 + 1 are one double: compared as numbers in Lua, this would pass.
        assert_stale(fenced.set(&key, &fence("a", big - 1), "below").await, big - 1, big);
        fenced.set(&key, &fence("a", u64::MAX), "max").await.unwrap();
        assert_stale(fenced.set(&key, &fence("a", 99), "short").await, 99, u64::MAX);
        assert_eq!(fenced.state(&key).await.unwrap().unwrap().highest, FencingToken::new(u64::MAX));
    });
}

/// Under Sentinel the sink writes to the primary; the fence key replicates with the data, so
/// after a failover the new primary still refuses a token below the highest.
#[test]
fn the_fence_follows_a_sentinel_failover() {
    runtime().block_on(async {
        let sentinels = RedisSentinels::start().await.unwrap();
        let primary = sentinels.primary_addr().await.unwrap();
        let key = unique("sentinel");
        let mut conn = connect(&format!("redis://{primary}/")).await;
        let fenced = RedisFence::new(conn.clone());
        fenced.set(&key, &fence("s", 20), "twenty").await.unwrap();
        // Acknowledged by both replicas before the failover.
        let acked: i64 = redis::cmd("WAIT").arg(2).arg(5_000).query_async(&mut conn).await.unwrap();
        assert_eq!(acked, 2);
        let promoted = sentinels.failover().await.unwrap();
        assert_ne!(promoted, primary);
        let fenced = RedisFence::new(connect(&format!("redis://{promoted}/")).await);
        assert_stale(fenced.set(&key, &fence("s", 19), "stale").await, 19, 20);
        fenced.set(&key, &fence("s", 21), "twenty-one").await.unwrap();
    });
}
