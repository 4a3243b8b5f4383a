//! TLS for `etcds://` members (feature `tls`): etcd-client's rustls transport with ring.

use etcd_client::{Certificate, Identity, TlsOptions};

use lockkit_core::config::ClientTls;

/// The TLS options of the client: the given CA (or the system's trust store) and the client
/// certificate, if any.
pub(crate) fn options(settings: &ClientTls) -> TlsOptions {
    let tls = TlsOptions::new();
    let tls = match &settings.root {
        Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
        None => tls.with_native_roots(),
    };
    match &settings.client {
        Some((certificate, key)) => tls.identity(Identity::from_pem(certificate, key)),
        None => tls,
    }
}
