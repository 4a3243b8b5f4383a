//! `etcds://` against a real etcd member serving TLS, its CA and certificates made for the
//! test by the `openssl` tool (the testkit's [`TestCertificates`]): the kit's main mutex cases over
//! TLS (through the fault proxy, which forwards the encrypted bytes), a member that requires
//! client certificates, and the clear errors of an untrusted CA or a plain URL.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, SortOrder, SortTarget, TlsOptions};
use lockkit_etcd::{EtcdLockProvider, EtcdLockProviderBuilder};
use lockkit_testkit::fixture::{EtcdOptions, EtcdServer, TestCertificates};
use lockkit_testkit::proxy::proxied_test_client;
use lockkit_testkit::{FaultResult, Harness, TestClient, Timing, cases};
use support::{TTL, test_builder, within};

/// A TLS member, and clients that trust its CA, each behind a fault proxy of its own.
struct TlsHarness {
    server: EtcdServer,
    ca: Vec<u8>,
}

impl TlsHarness {
    async fn start() -> Self {
        let options = EtcdOptions { tls: true, ..EtcdOptions::default() };
        let server = EtcdServer::start_with(options).await.unwrap_or_else(|e| panic!("the TLS tests need etcd: {e}"));
        let ca = std::fs::read(server.tls().unwrap().ca()).unwrap();
        Self { server, ca }
    }

    fn builder(&self) -> EtcdLockProviderBuilder {
        test_builder().tls(true).tls_root_certificate(self.ca.clone())
    }

    async fn admin(&self) -> Client {
        let tls = TlsOptions::new().ca_certificate(Certificate::from_pem(&self.ca));
        let endpoint = format!("https://{}", self.server.addr());
        Client::connect([endpoint], Some(ConnectOptions::new().with_tls(tls))).await.unwrap()
    }
}

#[async_trait]
impl Harness for TlsHarness {
    fn name(&self) -> &str {
        "etcd over TLS"
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        proxied_test_client("etcd", self.server.addr(), |proxy| self.builder().endpoints(proxy.to_string()).build())
            .await
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(TTL)
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        let prefix = self.builder().endpoints("unused:1").build().unwrap().lock_prefix(name).unwrap();
        let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let mut admin = self.admin().await;
        let reply = admin.get(prefix, Some(options)).await.unwrap();
        let key = reply.kvs().first().expect("the held lock has a key").key().to_vec();
        assert_eq!(admin.delete(key, None).await.unwrap().deleted(), 1);
        Ok(())
    }
}

/// The kit's main mutex cases (exclusion, waking, arrival order, cancellation, fencing,
/// release after a loss, the loss signals of a deleted key and of a blackholed holder, and
/// renewal) over `etcds://`.
#[test]
fn the_main_mutex_cases_pass_over_tls() {
    lockkit_testkit::runtime().block_on(async {
        let h = TlsHarness::start().await;
        cases::mutual_exclusion::second_owner_cannot_acquire_while_held(&h).await;
        cases::mutual_exclusion::one_holder_at_a_time_under_contention(&h).await;
        cases::acquire::try_acquire_leaves_no_trace(&h).await;
        cases::acquire::release_wakes_waiter_promptly(&h).await;
        cases::acquire::waiters_are_granted_in_arrival_order(&h).await;
        cases::acquire::acquire_cancelled_at_any_point_leaves_no_trace(&h).await;
        cases::fencing::tokens_increase_across_clients(&h).await;
        cases::fencing::fenced_resource_refuses_the_stale_holder(&h).await;
        cases::release::release_after_loss_fails_and_spares_the_new_holder(&h).await;
        cases::loss::loss_is_signalled_when_the_record_is_deleted(&h).await;
        cases::loss::loss_is_signalled_before_another_owner_can_acquire(&h).await;
        cases::loss::lease_is_renewed_while_the_guard_lives(&h).await;
    });
}

/// An `etcds://` URL with the CA as a file option: acquire, wait, release, increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_urls_take_the_ca_as_a_file() {
    let h = TlsHarness::start().await;
    let tls = h.server.tls().unwrap();
    let url = format!("{}/tls-url?ttl=2s&tls_root_certificate={}", h.server.url(), tls.ca().display());
    let a = EtcdLockProvider::connect(&url).await.unwrap();
    let b = EtcdLockProvider::connect(&url).await.unwrap();
    let first = a.lock("one").unwrap().acquire().await.unwrap();
    let waiter = b.lock("one").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(10)).await });
    let token = first.token();
    first.release().await.unwrap();
    let second = within(Duration::from_secs(10), "b's grant", waiting).await.unwrap().unwrap();
    assert!(second.token() > token);
    second.release().await.unwrap();
}

/// A CA that did not sign the member's certificate, and a plain `etcd://` URL to a TLS
/// member: clear errors when the provider connects, never a hang or a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_member_and_a_plain_url_are_clear_errors() {
    let h = TlsHarness::start().await;
    let other = tempfile_dir("other-ca");
    let other_ca = TestCertificates::generate(&other, "IP:127.0.0.1").await.unwrap().ca();
    let url = format!("{}?connect_timeout=2s&tls_root_certificate={}", h.server.url(), other_ca.display());
    let error = within(Duration::from_secs(10), "the refusal", EtcdLockProvider::connect(&url)).await.unwrap_err();
    println!("untrusted CA: {error}");
    assert!(error.to_string().contains("tls_root_certificate"), "{error}");
    let plain = format!("etcd://{}?connect_timeout=2s", h.server.addr());
    let error = within(Duration::from_secs(10), "the refusal", EtcdLockProvider::connect(&plain)).await.unwrap_err();
    println!("plain URL to a TLS member: {error}");
    assert!(error.to_string().contains("etcds://"), "{error}");
    std::fs::remove_dir_all(other).unwrap();
}

/// A member that requires client certificates: refused without one (a clear error), and
/// locks work with the certificate and key given as URL options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_presented_when_given() {
    let options = EtcdOptions { tls: true, client_cert_auth: true, ..EtcdOptions::default() };
    let server = EtcdServer::start_with(options).await.unwrap_or_else(|e| panic!("{e}"));
    let tls = server.tls().unwrap();
    let base = format!("{}?connect_timeout=2s&tls_root_certificate={}", server.url(), tls.ca().display());
    let error = within(Duration::from_secs(10), "the refusal", EtcdLockProvider::connect(&base)).await.unwrap_err();
    println!("no client certificate: {error}");
    assert!(error.to_string().contains("tls_client_certificate"), "{error}");
    let url = format!(
        "{base}&tls_client_certificate={}&tls_client_key={}",
        tls.client_certificate().display(),
        tls.client_key().display()
    );
    let provider = EtcdLockProvider::connect(&url).await.unwrap();
    let guard = provider.lock("client-cert").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();
}

fn tempfile_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lockkit-etcd-tls-{what}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
