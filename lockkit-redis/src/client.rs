//! How a `redis::Client` is made from the settings: plain TCP, or TLS for `rediss://` URLs
//! (with the `tls` feature), for the command connection and the pub/sub connection alike.

use lockkit_core::config::ClientTls;

/// A client for `info` (the settings' server, possibly with another protocol version),
/// using the settings' TLS certificates `tls` when there are any. Makes no connection.
pub(crate) fn open(tls: &ClientTls, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    {
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            install_crypto_provider();
        }
        if let Some(certificates) = certificates(tls) {
            return redis::Client::build_with_tls(info, certificates);
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    redis::Client::open(info)
}

/// The certificates in the redis crate's form, when any were given.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &ClientTls) -> Option<redis::TlsCertificates> {
    if tls.is_empty() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: tls.client.as_ref().map(|(certificate, key)| redis::ClientTlsConfig {
            client_cert: certificate.clone(),
            client_key: key.clone(),
        }),
        root_cert: tls.root.clone(),
    })
}

/// rustls needs a process-wide crypto provider. Installs ring's as the default only when none
/// is installed, so that an application that installed its own keeps it; one that installs
/// its own later must tolerate finding this one (`install_default` then fails; use
/// `CryptoProvider::get_default` first, or install before the first `rediss://` connection).
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: one provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
