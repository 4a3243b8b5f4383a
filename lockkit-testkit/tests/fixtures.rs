//! Self-tests of the real-server fixtures: `redis-server`, standalone ZooKeeper and a
//! three-member ZooKeeper ensemble. A missing server program fails these tests with the
//! fixture's installation hint; nothing is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lockkit_testkit::wait::eventually_some;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_testkit::fixture::{
    FixtureError, FixtureErrorKind, Persistence, RedisCluster, RedisConfig, RedisReplicated, RedisSentinels,
    RedisServer, SENTINEL_MASTER_NAME, ZkEnsemble, ZkServer,
};
use redis::AsyncConnectionConfig;
use zookeeper_client as zk;

/// Unwraps a fixture result, failing the test with the error's full (multi-line) message.
fn ok<T>(result: Result<T, FixtureError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

async fn wait_process_gone(pid: u32) {
    eventually_some(Duration::from_secs(15), &format!("process {pid} to disappear"), || async move {
        (!process_exists(pid)).then_some(())
    })
    .await;
}

/// A multiplexed connection whose commands time out after 300 ms.
async fn redis_conn(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_millis(300)))
        .set_connection_timeout(Some(Duration::from_millis(300)));
    redis::Client::open(url)?.get_multiplexed_async_connection_with_config(&config).await
}

async fn ping(url: &str) -> redis::RedisResult<String> {
    let mut conn = redis_conn(url).await?;
    redis::cmd("PING").query_async(&mut conn).await
}

// ------------------------------------------------------------------------------------- redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_starts_and_answers_ping() {
    let started = Instant::now();
    let server = ok(RedisServer::start().await);
    eprintln!("redis-server ready in {:?}", started.elapsed());
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}/", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(process_exists(server.pid().unwrap()));
    assert_eq!(ping(&server.url()).await.unwrap(), "PONG");
    ok(server.stop().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_loses_keys() {
    let mut server = ok(RedisServer::start().await);
    assert_eq!(server.persistence(), Persistence::None);
    let mut conn = redis_conn(&server.url()).await.unwrap();
    let () = redis::cmd("SET").arg("k").arg("v").query_async(&mut conn).await.unwrap();
    let (port, pid) = (server.port(), server.pid());
    ok(server.restart().await);
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    let mut conn = redis_conn(&server.url()).await.unwrap();
    let value: Option<String> = redis::cmd("GET").arg("k").query_async(&mut conn).await.unwrap();
    assert_eq!(value, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_with_aof_keeps_keys_and_counters() {
    let config = RedisConfig { persistence: Persistence::Aof, ..RedisConfig::default() };
    let mut server = ok(RedisServer::start_with(config).await);
    let mut conn = redis_conn(&server.url()).await.unwrap();
    let () = redis::cmd("SET").arg("k").arg("v").query_async(&mut conn).await.unwrap();
    for _ in 0..3 {
        let _: i64 = redis::cmd("INCR").arg("counter").query_async(&mut conn).await.unwrap();
    }
    let port = server.port();
    ok(server.restart().await);
    assert_eq!(server.port(), port);
    let mut conn = redis_conn(&server.url()).await.unwrap();
    let value: Option<String> = redis::cmd("GET").arg("k").query_async(&mut conn).await.unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    let counter: i64 = redis::cmd("INCR").arg("counter").query_async(&mut conn).await.unwrap();
    assert_eq!(counter, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_pause_blocks_replies_until_resume() {
    let mut server = ok(RedisServer::start().await);
    let url = server.url();
    let mut conn = redis_conn(&url).await.unwrap();
    ok(server.pause());
    let err = redis::cmd("PING").query_async::<String>(&mut conn).await.expect_err("a paused server must not answer");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    ok(server.resume());
    eventually_some(Duration::from_secs(5), "PING after resume", || {
        let url = url.clone();
        async move { ping(&url).await.ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stop_and_drop_leave_no_process() {
    let server = ok(RedisServer::start().await);
    let (pid, dir) = (server.pid().unwrap(), server.dir().to_owned());
    ok(server.stop().await);
    assert!(!process_exists(pid), "stop() returned while {pid} still exists");
    assert!(!dir.exists(), "stop() left {}", dir.display());

    let server = ok(RedisServer::start().await);
    let (pid, dir) = (server.pid().unwrap(), server.dir().to_owned());
    drop(server);
    wait_process_gone(pid).await;
    eventually_some(Duration::from_secs(5), "the directory to be removed", || {
        let gone = !dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_shared_is_one_server() {
    let first = ok(RedisServer::shared().await);
    let second = ok(RedisServer::shared().await);
    assert!(std::ptr::eq(first, second));
    assert_eq!(ping(&first.url()).await.unwrap(), "PONG");
}

/// The shared server outlives the runtime that started it.
#[test]
fn redis_shared_survives_the_runtime_that_started_it() {
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let shared = runtime().block_on(async { ok(RedisServer::shared().await) });
    // The first runtime is gone now.
    let reply = runtime().block_on(async { ping(&shared.url()).await });
    assert_eq!(reply.unwrap(), "PONG");
}

// ------------------------------------------------------------------------------------- zk

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replicated_replicates_and_promotes() {
    let fixture = ok(RedisReplicated::start(1).await);
    let mut primary = redis_conn(&fixture.primary().url()).await.unwrap();
    let _: () = redis::cmd("SET").arg("fixture-key").arg("1").query_async(&mut primary).await.unwrap();
    ok(fixture.wait_in_sync().await);
    let mut replica = redis_conn(&fixture.replicas()[0].url()).await.unwrap();
    let seen: Option<String> = redis::cmd("GET").arg("fixture-key").query_async(&mut replica).await.unwrap();
    assert_eq!(seen.as_deref(), Some("1"));
    ok(fixture.promote(0).await);
    let _: () = redis::cmd("SET").arg("fixture-key").arg("2").query_async(&mut primary).await.unwrap();
    let _: () = redis::cmd("SET").arg("promoted").arg("1").query_async(&mut replica).await.unwrap();
    let seen: Option<String> = redis::cmd("GET").arg("fixture-key").query_async(&mut replica).await.unwrap();
    assert_eq!(seen.as_deref(), Some("1"), "the promoted replica no longer follows the old primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinels_name_the_primary_and_fail_over() {
    let fixture = ok(RedisSentinels::start().await);
    assert!(fixture.url().starts_with("redis+sentinel://127.0.0.1:"), "{}", fixture.url());
    assert!(fixture.url().ends_with(&format!("/{SENTINEL_MASTER_NAME}")), "{}", fixture.url());
    assert_eq!(ok(fixture.primary_addr().await), fixture.servers().primary().addr());
    let new = ok(fixture.failover().await);
    assert_ne!(new, fixture.servers().primary().addr());
    assert!(fixture.servers().replicas().iter().any(|r| r.addr() == new), "{new} is one of the replicas");
    let mut promoted = redis_conn(&format!("redis://{new}/")).await.unwrap();
    let _: () = redis::cmd("SET").arg("after-failover").arg("1").query_async(&mut promoted).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_forms_and_redirects() {
    let cluster = ok(RedisCluster::start().await);
    assert!(cluster.url().starts_with("redis+cluster://127.0.0.1:"), "{}", cluster.url());
    assert_eq!((cluster.primaries().len(), cluster.replicas().len()), (3, 3));
    let mut node = redis_conn(&cluster.primaries()[0].url()).await.unwrap();
    let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut node).await.unwrap();
    assert!(info.contains("cluster_state:ok") && info.contains("cluster_size:3"), "{info}");
    // "{b}" hashes to slot 3300 (the first primary's), "{a}" to 15495 (the third's).
    let _: () = redis::cmd("SET").arg("{b}k").arg("1").query_async(&mut node).await.unwrap();
    let moved = redis::cmd("SET").arg("{a}k").arg("1").query_async::<()>(&mut node).await.unwrap_err();
    assert!(moved.to_string().contains("MOVED") || moved.code() == Some("MOVED"), "{moved}");

    // The helpers: the slot and primary of a key, a failover of that primary, a migration
    // of the slot with its keys.
    assert_eq!(ok(cluster.slot_of("{b}k").await), 3300);
    let first = cluster.primaries()[0].addr();
    assert_eq!(ok(cluster.primary_of("{b}k").await), first);
    let (old, new) = ok(cluster.failover("{b}k").await);
    assert_eq!((old, new), (first, cluster.replicas()[0].addr()));
    assert_eq!(ok(cluster.primary_of("{b}k").await), new);
    let mut paused = false;
    let (from, to) = ok(cluster
        .migrate("{b}k", || {
            paused = true;
            async {}
        })
        .await);
    assert!(paused);
    assert_eq!(from, new);
    assert_ne!(to, new);
    assert_eq!(ok(cluster.primary_of("{b}k").await), to);
    let mut moved_to = redis_conn(&format!("redis://{to}/")).await.unwrap();
    let value: String = redis::cmd("GET").arg("{b}k").query_async(&mut moved_to).await.unwrap();
    assert_eq!(value, "1", "the key moved with its slot");
}

async fn zk_client(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {connect}: {e}"))
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_starts_serves_and_keeps_data_across_restart() {
    let started = Instant::now();
    let mut server = ok(ZkServer::start().await);
    eprintln!("ZooKeeper standalone ready in {:?}", started.elapsed());
    assert_eq!(server.connect_string(), format!("127.0.0.1:{}", server.port()));
    let client = zk_client(&server.connect_string()).await;
    client.create("/fixture", b"kept", &persistent()).await.unwrap();
    let (data, _) = client.get_data("/fixture").await.unwrap();
    assert_eq!(data, b"kept");
    drop(client);

    let (port, pid) = (server.port(), server.pid());
    let started = Instant::now();
    ok(server.restart().await);
    eprintln!("ZooKeeper standalone restarted in {:?}", started.elapsed());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    let client = zk_client(&server.connect_string()).await;
    let (data, _) = client.get_data("/fixture").await.unwrap();
    assert_eq!(data, b"kept");
    drop(client);

    let pid = server.pid().unwrap();
    ok(server.stop().await);
    assert!(!process_exists(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_pause_blocks_requests_until_resume() {
    let mut server = ok(ZkServer::start().await);
    let client = zk_client(&server.connect_string()).await;
    client.check_stat("/").await.unwrap();
    ok(server.pause());
    let stalled = tokio::time::timeout(Duration::from_millis(500), client.check_stat("/")).await;
    assert!(stalled.is_err(), "a paused server answered: {stalled:?}");
    ok(server.resume());
    eventually_some(Duration::from_secs(8), "a request after resume", || {
        let client = client.clone();
        async move { client.check_stat("/").await.ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_shared_is_one_server() {
    let first = ok(ZkServer::shared().await);
    let second = ok(ZkServer::shared().await);
    assert!(std::ptr::eq(first, second));
    let client = zk_client(&first.connect_string()).await;
    client.check_stat("/").await.unwrap();
}

/// Returns the index of the member serving `session` (its `cons` lists the session id).
async fn member_serving(ensemble: &ZkEnsemble, session: &str) -> Option<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for i in 0..ensemble.member_count() {
        let Ok(mut stream) = tokio::net::TcpStream::connect(ensemble.member_addr(i)).await else {
            continue;
        };
        let mut reply = String::new();
        if stream.write_all(b"cons").await.is_ok()
            && stream.read_to_string(&mut reply).await.is_ok()
            && reply.contains(&format!("sid={session},"))
        {
            return Some(i);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_ensemble_survives_losing_the_clients_member() {
    let started = Instant::now();
    let mut ensemble = ok(ZkEnsemble::start().await);
    eprintln!("ZooKeeper ensemble (3 members) ready in {:?}", started.elapsed());
    assert_eq!(ensemble.member_count(), 3);
    assert_eq!(ensemble.connect_string().split(',').count(), 3);
    assert!(ensemble.leader_index().await.is_some());

    let client = zk_client(&ensemble.connect_string()).await;
    client.create("/survivor", b"1", &persistent()).await.unwrap();
    let session = client.session_id().to_string();
    let victim = eventually_some(Duration::from_secs(5), "the member serving the session", || {
        member_serving(&ensemble, &session)
    })
    .await;

    let pid = ensemble.member_pid(victim).unwrap();
    ok(ensemble.stop_member(victim).await);
    assert!(!process_exists(pid));
    assert_eq!(ensemble.member_pid(victim), None);
    // The session moves to another member and keeps working.
    eventually_some(Duration::from_secs(15), "the session to work after its member stopped", || {
        let client = client.clone();
        async move { client.set_data("/survivor", b"2", None).await.ok() }
    })
    .await;
    assert_eq!(client.session_id().to_string(), session, "the session must survive");
    ok(ensemble.wait_ready().await);

    let started = Instant::now();
    ok(ensemble.start_member(victim).await);
    eprintln!("ZooKeeper member rejoined in {:?}", started.elapsed());
    let mode = ensemble.member_mode(victim).await;
    assert!(matches!(mode.as_deref(), Some("leader" | "follower")), "mode {mode:?}");
    let (data, _) = client.get_data("/survivor").await.unwrap();
    assert_eq!(data, b"2");
    drop(client);

    let pids: Vec<u32> = (0..3).filter_map(|i| ensemble.member_pid(i)).collect();
    assert_eq!(pids.len(), 3);
    ok(ensemble.stop().await);
    for pid in pids {
        assert!(!process_exists(pid));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_ensemble_pause_and_errors() {
    let mut ensemble = ok(ZkEnsemble::start().await);
    let leader = ensemble.leader_index().await;
    let follower = (0..3).find(|&i| Some(i) != leader).unwrap();
    ok(ensemble.pause_member(follower));
    assert_eq!(ensemble.member_mode(follower).await, None, "a paused member answered srvr");
    ok(ensemble.resume_member(follower));
    eventually_some(Duration::from_secs(10), "the resumed member to serve", || async {
        ensemble.member_mode(follower).await
    })
    .await;
    ok(ensemble.stop_member(follower).await);
    let err = ensemble.stop_member(follower).await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::InvalidState);
    let err = ensemble.pause_member(follower).unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::InvalidState);
}

// ------------------------------------------------------------------------------------- errors

/// Environment variable telling a re-executed copy of this binary which helper to act as.
const CHILD_ENV: &str = "LOCKKIT_FIXTURE_TEST_CHILD";

/// Runs one `#[ignore]`d helper test of this binary in a child process.
fn child_test(name: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--ignored", "--exact", "--nocapture", "--test-threads=1", name])
        .env(CHILD_ENV, name)
        .env_remove("LOCKKIT_REDIS_URL")
        .env_remove("LOCKKIT_ZK_ADDR")
        .stdin(Stdio::null());
    command
}

#[test]
fn missing_programs_fail_with_an_installation_hint() {
    let output = child_test("child_missing_programs").env("PATH", "/nonexistent").output().unwrap();
    assert!(
        output.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let output = child_test("child_missing_jar").env("LOCKKIT_ZK_JAR", "/nonexistent/zookeeper.jar").output().unwrap();
    assert!(
        output.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
#[ignore = "helper run by missing_programs_fail_with_an_installation_hint"]
async fn child_missing_programs() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("child_missing_programs") {
        return;
    }
    let err = RedisServer::start().await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::NotInstalled);
    assert_eq!(
        err.to_string(),
        "redis-server not found on PATH: install it (Debian: `apt-get install redis-server`) \
         or set LOCKKIT_REDIS_URL to an external server"
    );
    let err = RedisServer::shared().await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::NotInstalled);
    let err = ZkServer::start().await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::NotInstalled);
    let message = err.to_string();
    assert!(message.contains("java"), "{message}");
    assert!(message.contains("apt-get install zookeeper"), "{message}");
    assert!(message.contains("LOCKKIT_ZK_ADDR"), "{message}");
    let err = ZkEnsemble::start().await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::NotInstalled);
    assert!(err.to_string().contains("apt-get install zookeeper"), "{err}");
}

#[tokio::test]
#[ignore = "helper run by missing_programs_fail_with_an_installation_hint"]
async fn child_missing_jar() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("child_missing_jar") {
        return;
    }
    let err = ZkServer::start().await.unwrap_err();
    assert_eq!(err.kind(), FixtureErrorKind::NotInstalled);
    let message = err.to_string();
    assert!(message.contains("/nonexistent/zookeeper.jar"), "{message}");
    assert!(message.contains("LOCKKIT_ZK_JAR"), "{message}");
}

// ------------------------------------------------------------------------------------- orphans

/// Kills a test process that holds shared servers in statics with SIGKILL, then checks that
/// the servers die too and their directories are removed.
#[test]
fn servers_do_not_outlive_a_killed_test_process() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let mut child = child_test("child_hold_shared_servers")
        .env("LOCKKIT_FIXTURE_REPORT", &report)
        .stdin(Stdio::piped()) // the child ends if this process dies and the pipe closes
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&report) {
            break text;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited early with {status}");
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the child reported nothing");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut lines = text.lines();
    let pids: Vec<u32> = lines.next().unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect();
    let dirs: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!((pids.len(), dirs.len()), (5, 3), "{text}");
    for &pid in &pids {
        assert!(process_exists(pid));
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no atexit handler runs
    child.wait().unwrap();
    let started = Instant::now();
    while pids.iter().any(|&pid| process_exists(pid)) || dirs.iter().any(|d| Path::new(d).exists()) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "servers {pids:?} or directories {dirs:?} survived the killed test process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("servers and directories gone {:?} after SIGKILL of the test process", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper run by servers_do_not_outlive_a_killed_test_process"]
async fn child_hold_shared_servers() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("child_hold_shared_servers") {
        return;
    }
    let (redis, zk, ensemble) = tokio::join!(RedisServer::shared(), ZkServer::shared(), ZkEnsemble::shared());
    let (redis, zk, ensemble) = (ok(redis).server().unwrap(), ok(zk).server().unwrap(), ok(ensemble));
    let mut pids = vec![redis.pid().unwrap(), zk.pid().unwrap()];
    pids.extend((0..3).map(|i| ensemble.member_pid(i).unwrap()));
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let dirs = [redis.dir(), zk.dir(), ensemble.dir()].map(|d| d.display().to_string());
    let report = std::env::var("LOCKKIT_FIXTURE_REPORT").unwrap();
    let temp = format!("{report}.tmp");
    std::fs::write(&temp, format!("{}\n{}\n", pids.join(" "), dirs.join(" "))).unwrap();
    std::fs::rename(&temp, &report).unwrap();
    // Wait to be killed; also end when the parent test process goes away (stdin reaches
    // end-of-file), so that killing the parent does not leave this process behind.
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    });
    let _ = tokio::time::timeout(Duration::from_secs(120), stdin_closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_durable_server_fsyncs_and_runs_the_full_jit() {
    let server = ok(ZkServer::start_durable().await);
    let config = std::fs::read_to_string(server.dir().join("zoo.cfg")).unwrap();
    assert!(config.contains("forceSync=yes"), "the durable server's configuration: {config}");
    let pid = server.pid().unwrap();
    let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let command_line = String::from_utf8_lossy(&command_line).replace('\0', " ");
    assert!(!command_line.contains("TieredStopAtLevel"), "the JIT is limited: {command_line}");
    let client = zk_client(&server.connect_string()).await;
    client.create("/durable", b"x", &persistent()).await.unwrap();
    assert_eq!(client.get_data("/durable").await.unwrap().0, b"x");
}

/// The durable server with Netty serves requests through Netty (Debian's jar finds it on its
/// class path): the configuration names the factory and the server's log says it uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_durable_netty_server_serves_through_netty() {
    let server = ok(ZkServer::start_durable_netty().await);
    let config = std::fs::read_to_string(server.dir().join("zoo.cfg")).unwrap();
    assert!(config.contains("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"), "{config}");
    let client = zk_client(&server.connect_string()).await;
    client.create("/netty", b"x", &persistent()).await.unwrap();
    assert_eq!(client.get_data("/netty").await.unwrap().0, b"x");
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("NettyServerCnxnFactory"), "the server's log does not mention Netty:\n{log}");
}
