//! TLS against a real PostgreSQL server with `ssl=on`, its CA and server certificate made for
//! the test by the `openssl` command-line tool: the kit's core cases over `verify-full`, both
//! connections of a provider encrypted, and the clear errors of a wrong host name, an untrusted
//! server and a server without TLS.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::Error;
use lockkit_core::config::StoreUrl;
use lockkit_postgres::{PostgresLockProvider, PostgresLockProviderBuilder, SslMode};
use lockkit_testkit::fixture::{CLIENT_SUBJECT, PostgresServer, TestCertificates};
use lockkit_testkit::{Harness, NoFaults, TestClient, Timing, cases};
use support::{LEASE, OPERATION, test_builder, within};
use tokio::sync::OnceCell;

/// Makes a CA, a server certificate for the host name `localhost` (and no IP address) and a
/// client certificate in `dir`.
async fn make_certificates(dir: &Path) -> TestCertificates {
    TestCertificates::generate(dir, "DNS:localhost").await.unwrap_or_else(|e| panic!("the TLS tests need: {e}"))
}

/// A server with TLS on, its CA, and the directory of the certificates.
struct TlsServer {
    server: PostgresServer,
    ca: Vec<u8>,
    dir: tempfile::TempDir,
}

impl TlsServer {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let certificates = make_certificates(dir.path()).await;
        let read = |path: PathBuf| std::fs::read(path).unwrap();
        let server =
            PostgresServer::start_with_tls(&read(certificates.server_certificate()), &read(certificates.server_key()))
                .await
                .unwrap_or_else(|e| panic!("the TLS tests need a PostgreSQL server: {e}"));
        Self { ca: read(certificates.ca()), server, dir }
    }

    /// The URL of the server by the name its certificate holds.
    fn url(&self, query: &str) -> String {
        format!("postgres://postgres@localhost:{}/postgres?{query}", self.server.port())
    }

    fn ca_path(&self) -> String {
        self.dir.path().join("ca.crt").to_string_lossy().into_owned()
    }
}

/// The kit's clients over `sslmode=verify-full` with the test CA.
struct TlsHarness {
    server: TlsServer,
}

#[async_trait]
impl Harness for TlsHarness {
    fn name(&self) -> &str {
        "postgres (verify-full)"
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        // The builder's `url` takes the address only (a query there is not read): the mode is
        // set by its method.
        let provider = test_builder()
            .url(self.server.url(""))
            .ssl_mode(SslMode::VerifyFull)
            .tls_root_certificate(self.server.ca.clone())
            .build()?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(LEASE)
    }
}

async fn harness() -> &'static TlsHarness {
    static HARNESS: OnceCell<TlsHarness> = OnceCell::const_new();
    HARNESS.get_or_init(|| async { TlsHarness { server: TlsServer::start().await } }).await
}

/// The kit's core path over TLS: exclusion, fencing across clients, release and the
/// `NOTIFY` wake-up of a waiter (which comes over the TLS `LISTEN` connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_cases_pass_over_verify_full() {
    let h = harness().await;
    // The harness's clients do check the certificate: without the CA the same settings fail.
    let unchecked = test_builder().url(h.server.url("")).ssl_mode(SslMode::VerifyFull).build().unwrap();
    let refused = within(OPERATION * 3, "an unverified server fails", unchecked.ping()).await;
    assert!(matches!(refused, Err(Error::InvalidConfig { .. })), "{refused:?}");
    cases::mutual_exclusion::second_owner_cannot_acquire_while_held(h).await;
    cases::acquire::try_acquire_returns_none_while_held(h).await;
    cases::fencing::tokens_increase_across_clients(h).await;
    cases::release::release_admits_next_waiter(h).await;
    cases::acquire::release_wakes_waiter_promptly(h).await;
    cases::acquire::acquire_timeout_succeeds_when_released_in_time(h).await;
}

/// Both connections of a provider (the command connection and the `LISTEN` connection) are
/// encrypted: the server's `pg_stat_ssl` says so for every lockkit connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_connections_of_a_provider_use_tls() {
    let h = harness().await;
    let url = format!("{}&sslrootcert={}", h.server.url("sslmode=verify-full"), h.server.ca_path());
    let provider = PostgresLockProvider::connect(&url).await.unwrap();
    let holder = provider.lock("tls/both").unwrap().acquire().await.unwrap();
    // A waiter opens the LISTEN connection.
    let waiter = provider.lock("tls/both").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(10)).await });
    let admin = provider.open_client().await.unwrap();
    let count_query = "SELECT count(*) FILTER (WHERE s.ssl AND a.query LIKE 'LISTEN%'), count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'lockkit'";
    // Every lockkit connection (command, LISTEN, this one) is encrypted, the LISTEN one included.
    within(OPERATION * 3, "the LISTEN connection opens", async {
        loop {
            let row = admin.query_one(count_query, &[]).await.unwrap();
            let (listening, plain): (i64, i64) = (row.get(0), row.get(1));
            assert_eq!(plain, 0, "no plain lockkit connection");
            if listening >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    holder.release().await.unwrap();
    let guard = within(OPERATION * 3, "the waiter is woken", waiting).await.unwrap().unwrap();
    guard.release().await.unwrap();
}

/// `verify-full` to a host name the certificate does not hold is refused with a message that
/// says so; `verify-ca` accepts the same server (it checks the chain, not the name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_wrong_host_name_and_verify_ca_does_not_check_it() {
    let h = harness().await;
    // The certificate names localhost; 127.0.0.1 is the same server by another name.
    let by_ip = |mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}&sslrootcert={}",
            h.server.server.port(),
            h.server.ca_path()
        )
    };
    let refused =
        within(OPERATION * 3, "verify-full fails", PostgresLockProvider::connect(&by_ip("verify-full"))).await;
    match refused {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("does not name the host") && message.contains("verify-full"), "{message}");
        }
        other => panic!("expected a clear error, got {other:?}"),
    }
    let provider =
        within(OPERATION * 3, "verify-ca connects", PostgresLockProvider::connect(&by_ip("verify-ca"))).await.unwrap();
    provider.lock("tls/verify-ca").unwrap().acquire().await.unwrap().release().await.unwrap();
}

/// Without the CA, `verify-full` does not trust the server (the system's roots did not sign
/// it): a clear error, not a hang. `require` without a root certificate encrypts without
/// checking, as libpq's does; `require` with one checks the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_servers_are_refused_and_require_encrypts() {
    let h = harness().await;
    let untrusted = within(
        OPERATION * 3,
        "an untrusted server fails",
        PostgresLockProvider::connect(&h.server.url("sslmode=verify-full")),
    )
    .await;
    match untrusted {
        Err(Error::InvalidConfig { message, .. }) => assert!(message.contains("sslrootcert"), "{message}"),
        other => panic!("expected a clear error, got {other:?}"),
    }
    let provider = PostgresLockProvider::connect(&h.server.url("sslmode=require")).await.unwrap();
    provider.lock("tls/require").unwrap().acquire().await.unwrap().release().await.unwrap();
    let client = provider.open_client().await.unwrap();
    let row = client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap();
    assert!(row.get::<_, bool>(0), "sslmode=require encrypts");

    // A root that did not sign the server's certificate: `require` checks the chain with it.
    let other = tempfile::tempdir().unwrap();
    let wrong_root = std::fs::read(make_certificates(other.path()).await.ca()).unwrap();
    let provider = PostgresLockProvider::builder()
        .url(h.server.url(""))
        .ssl_mode(SslMode::Require)
        .tls_root_certificate(wrong_root)
        .build()
        .unwrap();
    let outcome = within(OPERATION * 3, "a wrong root fails", provider.ping()).await;
    assert!(matches!(outcome, Err(Error::InvalidConfig { .. })), "{outcome:?}");
}

/// `sslmode=require` against a server without TLS is a clear error naming both ways out;
/// `prefer` (the default) connects in plain text, and `disable` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_says_so() {
    let shared = PostgresServer::shared().await.unwrap_or_else(|e| panic!("the tests need a PostgreSQL server: {e}"));
    let plain = shared.url();
    let outcome =
        within(OPERATION * 3, "require fails", PostgresLockProvider::connect(&format!("{plain}?sslmode=require")))
            .await;
    match outcome {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("does not accept TLS") && message.contains("sslmode=prefer"), "{message}");
        }
        other => panic!("expected a clear error, got {other:?}"),
    }
    for mode in [SslMode::Prefer, SslMode::Disable] {
        let provider = PostgresLockProvider::builder().url(&plain).ssl_mode(mode).build().unwrap();
        within(OPERATION * 3, "a plain connection", provider.ping()).await.unwrap();
    }
}

/// Bad TLS settings are refused when the provider is built, saying what to change.
#[test]
fn bad_tls_settings_say_what_to_change() {
    let message =
        |url: &str| match StoreUrl::parse(url).and_then(|url| PostgresLockProviderBuilder::from_url(&url)?.build()) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig for {url}, got {other:?}"),
        };
    assert!(message("postgres://h/db?sslmode=verify").contains("verify-full"));
    assert!(message("postgres://h/db?sslrootcert=/nonexistent/root.crt").contains("cannot be read"));
    assert!(message("postgres://h/db?sslcert=/nonexistent/client.crt").contains("sslkey"));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    assert!(
        message(&format!("postgres://h/db?sslmode=verify-full&sslrootcert={}", junk.display())).contains("sslrootcert")
    );
}

/// `sslcert` and `sslkey` present a client certificate: the server, which asks for one signed
/// by the test CA, verifies it and shows its subject in `pg_stat_ssl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = make_certificates(dir.path()).await;
    let read = |path: PathBuf| std::fs::read(path).unwrap();
    let path = |path: PathBuf| path.to_string_lossy().into_owned();
    let server = PostgresServer::start_with_client_ca(
        &read(certificates.server_certificate()),
        &read(certificates.server_key()),
        &read(certificates.ca()),
    )
    .await
    .unwrap_or_else(|e| panic!("the TLS tests need a PostgreSQL server: {e}"));
    let url = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        server.port(),
        path(certificates.ca()),
        path(certificates.client_certificate()),
        path(certificates.client_key())
    );
    let provider = within(OPERATION * 3, "connect", PostgresLockProvider::connect(&url)).await.unwrap();
    provider.lock("tls/client-cert").unwrap().acquire().await.unwrap().release().await.unwrap();
    let client = provider.open_client().await.unwrap();
    let row = client.query_one("SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap();
    let subject: Option<String> = row.get(0);
    assert_eq!(subject.as_deref(), Some(CLIENT_SUBJECT), "the server saw the client certificate");
}
