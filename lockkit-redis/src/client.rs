//! How a `redis::Client` is made from the settings: plain TCP, or TLS for `rediss://` URLs
//! (with the `tls` feature), for the command connection and the pub/sub connection alike.

use crate::builder::Settings;

/// A client for `info` (the settings' server, possibly with another protocol version),
/// using the settings' TLS certificates when there are any.
pub(crate) fn open(settings: &Settings, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    {
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; an application that installed
            // its own keeps it (installing a second one fails, harmlessly).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if let Some(certificates) = settings.tls.certificates() {
            return redis::Client::build_with_tls(info, certificates);
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = settings;
    redis::Client::open(info)
}
