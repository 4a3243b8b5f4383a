//! TLS: the `sslmode` of a provider's connections (libpq's names), its root certificates and
//! client certificate, and the connector that both the command connection and the `LISTEN`
//! connection are opened with.
//!
//! With the `tls` feature the connector is tokio-postgres-rustls on rustls with the ring
//! crypto provider (set on the connector itself, not installed as the process default);
//! without it, tokio-postgres's `NoTls`, and every setting that needs TLS is refused at build
//! time with the feature to enable.

use std::fmt;

use lockkit_core::Result;
use lockkit_core::config::{ClientTls, OptionValue};
use tokio_postgres::Socket;
use tokio_postgres::tls::MakeTlsConnect;

/// The message of a TLS setting when the feature is off.
#[cfg(not(feature = "tls"))]
const TLS_FEATURE: &str = "TLS is not built in: enable the `tls` feature of lockkit-postgres (the `postgres-tls` \
     feature of the lockkit crate) in your Cargo.toml";

/// How a connection uses TLS, with libpq's names and meanings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked (libpq's
    /// default). Without the `tls` feature, plain.
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is checked only when root certificates are
    /// given (then as for `VerifyCa`), as libpq does.
    Require,
    /// TLS, with a certificate signed by a trusted root (the given root certificates, else
    /// the system's); any host name.
    VerifyCa,
    /// TLS, with a certificate signed by a trusted root that names the host connected to.
    VerifyFull,
}

impl OptionValue for SslMode {
    const FORM: &'static str = "disable, prefer, require, verify-ca or verify-full";
    type Const = Self;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        let modes = [Self::Disable, Self::Prefer, Self::Require, Self::VerifyCa, Self::VerifyFull];
        modes
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| format!("{text:?} is not a mode; use {}", Self::FORM))
    }

    fn from_const(value: Self) -> Self {
        value
    }

    fn show(&self) -> String {
        self.as_str().to_owned()
    }
}

impl SslMode {
    /// libpq's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn driver_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => tokio_postgres::config::SslMode::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The checked TLS settings of a provider: the connector its connections are opened with.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) mode: SslMode,
    connector: Connector,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish_non_exhaustive()
    }
}

#[cfg(feature = "tls")]
type Connector = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "tls"))]
type Connector = tokio_postgres::NoTls;

/// The stream of a provider's connections.
pub(crate) type Stream = <Connector as MakeTlsConnect<Socket>>::Stream;

/// A connection's I/O half, to be driven (or polled for notifications) by a task.
pub(crate) type Connection = tokio_postgres::Connection<Socket, Stream>;

impl Tls {
    /// Checks `mode` and `certificates` and builds the connector; sets the driver's
    /// `sslmode` in `config`.
    pub(crate) fn new(mode: SslMode, certificates: ClientTls, config: &mut tokio_postgres::Config) -> Result<Self> {
        config.ssl_mode(mode.driver_mode());
        let connector = connector(mode, certificates)?;
        Ok(Self { mode, connector })
    }

    /// Opens a connection with `config` through this connector.
    pub(crate) async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> std::result::Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        #[cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]
        let connector = self.connector.clone();
        config.connect(connector).await
    }
}

#[cfg(not(feature = "tls"))]
fn connector(mode: SslMode, options: ClientTls) -> Result<Connector> {
    let what = if options.root.is_some() {
        Some("a root certificate (sslrootcert)".to_owned())
    } else if options.client.is_some() {
        Some("a client certificate (sslcert, sslkey)".to_owned())
    } else if matches!(mode, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull) {
        Some(format!("sslmode={mode}"))
    } else {
        None
    };
    match what {
        Some(what) => {
            Err(lockkit_core::Error::invalid_config(crate::BACKEND, format!("{what} needs TLS: {TLS_FEATURE}")))
        }
        None => Ok(tokio_postgres::NoTls),
    }
}

#[cfg(feature = "tls")]
fn connector(mode: SslMode, options: ClientTls) -> Result<Connector> {
    rustls_config::client_config(mode, options).map(tokio_postgres_rustls::MakeRustlsConnect::new)
}

/// Why a connection failed, when TLS is the reason: a message that says what to change.
pub(crate) fn explain(error: &tokio_postgres::Error, mode: SslMode, address: &str) -> Option<String> {
    // The driver's own message is in its source chain (its Display names only the kind); a
    // rustls error comes wrapped in an `io::Error`, whose `source` skips it.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current.to_string().contains("server does not support TLS") {
            return Some(format!(
                "{address} does not accept TLS connections, and sslmode={mode} requires TLS; turn TLS on at the \
                 server (ssl=on) or choose sslmode=prefer or sslmode=disable"
            ));
        }
        #[cfg(feature = "tls")]
        {
            let inner = current.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
            let tls = current.downcast_ref::<rustls::Error>().or_else(|| inner.and_then(|e| e.downcast_ref()));
            if let Some(tls) = tls {
                return Some(rustls_config::explain(tls, mode, address));
            }
        }
        source = current.source();
    }
    None
}

#[cfg(feature = "tls")]
mod rustls_config {
    use std::sync::Arc;

    use lockkit_core::{Error, Result};
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::WebPkiSupportedAlgorithms;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

    use lockkit_core::config::ClientTls;

    use super::SslMode;
    use crate::BACKEND;

    fn invalid(message: String) -> Error {
        Error::invalid_config(BACKEND, message)
    }

    /// The rustls configuration of `mode`.
    pub(super) fn client_config(mode: SslMode, options: ClientTls) -> Result<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS cannot be set up: {e}")))?;
        // libpq: `require` with a root certificate verifies as `verify-ca` does.
        let verify = match mode {
            SslMode::VerifyFull => Some(true),
            SslMode::VerifyCa => Some(false),
            SslMode::Require if options.root.is_some() => Some(false),
            _ => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match verify {
            None => Arc::new(AnyCertificate { algorithms: provider.signature_verification_algorithms }),
            Some(check_name) => {
                let roots = roots(options.root.as_deref())?;
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| invalid(format!("the root certificates cannot be used: {e}")))?;
                if check_name { webpki } else { Arc::new(AnyName { inner: webpki }) }
            }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        match options.client {
            None => Ok(builder.with_no_client_auth()),
            Some((certificate, key)) => {
                let chain = CertificateDer::pem_slice_iter(&certificate)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| invalid(format!("the client certificate (sslcert) is not PEM: {e}")))?;
                if chain.is_empty() {
                    return Err(invalid("the client certificate (sslcert) holds no certificate".to_owned()));
                }
                let key = PrivateKeyDer::from_pem_slice(&key)
                    .map_err(|e| invalid(format!("the client key (sslkey) is not a PEM private key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid(format!("the client certificate and key cannot be used together: {e}")))
            }
        }
    }

    /// The given root certificates, else the system's.
    fn roots(pem: Option<&[u8]>) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match pem {
            Some(pem) => {
                let certificates = CertificateDer::pem_slice_iter(pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| invalid(format!("the root certificate (sslrootcert) is not PEM: {e}")))?;
                let (added, _) = roots.add_parsable_certificates(certificates);
                if added == 0 {
                    return Err(invalid("the root certificate (sslrootcert) holds no usable certificate".to_owned()));
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(invalid(
                        "no root certificate to verify the server with: the system has none; give one with \
                         sslrootcert=/path/to/root.crt"
                            .to_owned(),
                    ));
                }
            }
        }
        Ok(roots)
    }

    /// A connection error's TLS cause, said with what to change.
    pub(super) fn explain(error: &rustls::Error, mode: SslMode, address: &str) -> String {
        match error {
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!(
                "the certificate of {address} does not name the host connected to, and sslmode={mode} checks it \
                 ({error}); connect with a host name the certificate names, or use sslmode=verify-ca"
            ),
            rustls::Error::InvalidCertificate(_) => format!(
                "the certificate of {address} was refused with sslmode={mode} ({error}); give the root \
                 certificate that signed it with sslrootcert=/path/to/root.crt"
            ),
            other => format!("the TLS handshake with {address} failed with sslmode={mode}: {other}"),
        }
    }

    /// `verify-ca`: the chain is checked, the host name is not.
    #[derive(Debug)]
    struct AnyName {
        inner: Arc<WebPkiServerVerifier>,
    }

    impl ServerCertVerifier for AnyName {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    }

    /// `prefer` and `require` without a root certificate: encrypted, the certificate not
    /// checked (libpq's meaning of these modes); the handshake's signatures still are.
    #[derive(Debug)]
    struct AnyCertificate {
        algorithms: WebPkiSupportedAlgorithms,
    }

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    }
}
