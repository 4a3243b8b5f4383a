//! Self-tests of the fault-injecting TCP proxy, in front of a real `redis-server`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lockkit_testkit::wait::eventually_some;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkit_testkit::fixture::RedisServer;
use lockkit_testkit::proxy::FaultProxy;
use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

async fn server() -> RedisServer {
    RedisServer::start().await.unwrap_or_else(|e| panic!("{e}"))
}

fn url(addr: SocketAddr) -> String {
    format!("redis://{addr}/")
}

/// A server of its own, a proxy in front of it, and a [`manager`] through the proxy that
/// answered a `PING`.
async fn managed() -> (RedisServer, FaultProxy, ConnectionManager) {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut conn = manager(proxy.addr()).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    (server, proxy, conn)
}

/// A multiplexed connection whose commands time out after 300 ms.
async fn connect(addr: SocketAddr) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_millis(300)))
        .set_connection_timeout(Some(Duration::from_millis(300)));
    redis::Client::open(url(addr))?.get_multiplexed_async_connection_with_config(&config).await
}

/// A reconnecting connection whose commands time out after 300 ms.
async fn manager(addr: SocketAddr) -> ConnectionManager {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(300)))
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(100));
    redis::Client::open(url(addr)).unwrap().get_connection_manager_with_config(config).await.unwrap()
}

async fn ping<C: redis::aio::ConnectionLike>(conn: &mut C) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

/// Reads until `want` bytes arrived or the read fails, within `limit`.
async fn read_reply(stream: &mut TcpStream, want: usize, limit: Duration) -> Result<Vec<u8>, String> {
    let read = async {
        let mut reply = Vec::new();
        let mut buf = [0u8; 64];
        while reply.len() < want {
            match stream.read(&mut buf).await {
                Ok(0) => return Err(format!("closed after {reply:?}")),
                Ok(n) => reply.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("{:?}: {e}", e.kind())),
            }
        }
        Ok(reply)
    };
    tokio::time::timeout(limit, read).await.unwrap_or_else(|_| Err("timed out".to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_pass_through() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    assert_eq!(proxy.upstream(), server.addr());
    assert_ne!(proxy.addr().port(), server.port());
    let mut conn = connect(proxy.addr()).await.unwrap();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    let value: String = redis::cmd("ECHO").arg("x".repeat(100_000)).query_async(&mut conn).await.unwrap();
    assert_eq!(value.len(), 100_000);
    assert_eq!(proxy.connection_count(), 1);
    drop(conn);
    eventually_some(Duration::from_secs(5), "the connection to close", || async {
        (proxy.connection_count() == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_all_fails_the_connection_and_the_client_reconnects() {
    let (_server, proxy, mut conn) = managed().await;

    proxy.cut_all();
    let err = ping(&mut conn).await.expect_err("the command after cut_all must fail");
    assert!(!err.is_timeout(), "a cut must fail fast, not time out: {err}");
    eventually_some(Duration::from_secs(5), "the client to reconnect", || {
        let mut conn = conn.clone();
        async move { ping(&mut conn).await.ok() }
    })
    .await;

    // A plain socket sees the reset itself.
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();
    raw.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut raw, 7, Duration::from_secs(2)).await.unwrap(), b"+PONG\r\n");
    proxy.cut_all();
    let err = read_reply(&mut raw, 1, Duration::from_secs(2)).await.unwrap_err();
    assert!(err.starts_with("ConnectionReset"), "expected a reset, got {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_silences_until_heal_delivers() {
    let (_server, proxy, mut conn) = managed().await;

    proxy.blackhole();
    assert!(proxy.is_blackholed());
    let err = ping(&mut conn).await.expect_err("a blackholed PING must not answer");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    proxy.heal();
    eventually_some(Duration::from_secs(5), "PING after heal", || {
        let mut conn = conn.clone();
        async move { ping(&mut conn).await.ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_holds_new_connections_and_heal_delivers_held_bytes() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut established = TcpStream::connect(proxy.addr()).await.unwrap();
    established.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut established, 7, Duration::from_secs(2)).await.unwrap(), b"+PONG\r\n");

    proxy.blackhole();
    // An established connection: the request is held, nothing comes back, nothing closes.
    established.write_all(PING).await.unwrap();
    // A new connection is accepted (the connect succeeds) but hears nothing.
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    fresh.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut established, 1, Duration::from_millis(300)).await.unwrap_err(), "timed out");
    assert_eq!(read_reply(&mut fresh, 1, Duration::from_millis(300)).await.unwrap_err(), "timed out");
    assert_eq!(proxy.connection_count(), 2);

    proxy.heal();
    assert!(!proxy.is_blackholed());
    assert_eq!(read_reply(&mut established, 7, Duration::from_secs(2)).await.unwrap(), b"+PONG\r\n");
    assert_eq!(read_reply(&mut fresh, 7, Duration::from_secs(2)).await.unwrap(), b"+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_delays_every_round_trip() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut conn = connect(proxy.addr()).await.unwrap();
    ping(&mut conn).await.unwrap();

    proxy.set_latency(Duration::from_millis(100));
    let mut conn = redis::Client::open(url(proxy.addr())).unwrap().get_multiplexed_async_connection().await.unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100), "a round trip took only {took:?}");
    }
    proxy.set_latency(Duration::ZERO);
    let started = Instant::now();
    ping(&mut conn).await.unwrap();
    eprintln!("round trip without latency: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_new_resets_new_connections_only() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut existing = connect(proxy.addr()).await.unwrap();

    proxy.refuse_new(true);
    let err = connect(proxy.addr()).await.map(drop).expect_err("a new connection must fail");
    eprintln!("connecting while refused: {err}");
    // The reset may arrive while connecting or on the first read.
    let err = match TcpStream::connect(proxy.addr()).await {
        Ok(mut raw) => {
            let _ = raw.write_all(PING).await;
            read_reply(&mut raw, 1, Duration::from_secs(2)).await.unwrap_err()
        }
        Err(e) => format!("{:?}: {e}", e.kind()),
    };
    assert!(err.starts_with("ConnectionReset"), "expected a reset, got {err}");
    assert_eq!(ping(&mut existing).await.unwrap(), "PONG", "existing connections keep working");
    assert_eq!(proxy.connection_count(), 1);

    proxy.refuse_new(false);
    let mut conn = connect(proxy.addr()).await.unwrap();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_closes_the_listener_and_every_connection() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let addr = proxy.addr();
    let mut raw = TcpStream::connect(addr).await.unwrap();
    raw.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut raw, 7, Duration::from_secs(2)).await.unwrap(), b"+PONG\r\n");
    proxy.blackhole(); // even a held connection is closed
    drop(proxy);
    let err = read_reply(&mut raw, 1, Duration::from_secs(2)).await.unwrap_err();
    assert!(err.starts_with("ConnectionReset"), "expected a reset, got {err}");
    eventually_some(Duration::from_secs(2), "the listener to close", || async {
        TcpStream::connect(addr).await.is_err().then_some(())
    })
    .await;
}
