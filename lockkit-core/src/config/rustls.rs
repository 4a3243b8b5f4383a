//! A [`TlsMode`] as a rustls client configuration (feature `rustls`): the verifiers of the
//! modes that do not check everything, the root store, the client certificate, and what a
//! failed handshake says. Used through [`ModeTlsKeys`]; no I/O but reading the system's roots.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::tls::{ClientTls, TlsKeys};
use super::tls_mode::{ModeTlsKeys, TlsMode};
use crate::{Error, Result};

#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
impl ModeTlsKeys {
    /// The rustls configuration of `mode` with the certificates `tls` (ring provider).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] of `backend` for a certificate or key that is not PEM or
    /// cannot be used, or a verifying mode without root certificates anywhere.
    pub fn rustls_config(&self, backend: &'static str, mode: TlsMode, tls: ClientTls) -> Result<rustls::ClientConfig> {
        client_config(backend, &self.files, mode, tls)
    }

    /// Why a connection failed, when a TLS error in `error`'s source chain is the reason: a
    /// message that says what to change (a certificate that does not name the host, one
    /// that no trusted root signed), with `address` the server's.
    pub fn explain(&self, error: &(dyn std::error::Error + 'static), mode: TlsMode, address: &str) -> Option<String> {
        explain(self, error, mode, address)
    }
}

/// The rustls configuration of `mode`.
fn client_config(backend: &'static str, keys: &TlsKeys, mode: TlsMode, tls: ClientTls) -> Result<ClientConfig> {
    let invalid = |message: String| Error::invalid_config(backend, message);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS cannot be set up: {e}")))?;
    // libpq: `require` with a root certificate verifies as `verify-ca` does.
    let verify = match mode {
        TlsMode::VerifyFull => Some(true),
        TlsMode::VerifyCa => Some(false),
        TlsMode::Require if tls.root.is_some() => Some(false),
        _ => None,
    };
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        None => Arc::new(Lenient { chain: None, algorithms }),
        Some(check_name) => {
            let roots = roots(keys, tls.root.as_deref()).map_err(invalid)?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| invalid(format!("the root certificates cannot be used: {e}")))?;
            if check_name { webpki } else { Arc::new(Lenient { chain: Some(webpki), algorithms }) }
        }
    };
    let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
    let Some((certificate, key)) = tls.client else { return Ok(builder.with_no_client_auth()) };
    let (certificate_key, key_key) = (keys.certificate.name(), keys.key.name());
    let chain = CertificateDer::pem_slice_iter(&certificate)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("the client certificate ({certificate_key}) is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(format!("the client certificate ({certificate_key}) holds no certificate")));
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| invalid(format!("the client key ({key_key}) is not a PEM private key: {e}")))?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| invalid(format!("the client certificate and key cannot be used together: {e}")))
}

/// The given root certificates, else the system's.
fn roots(keys: &TlsKeys, pem: Option<&[u8]>) -> std::result::Result<RootCertStore, String> {
    let name = keys.root.name();
    let mut roots = RootCertStore::empty();
    match pem {
        Some(pem) => {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| format!("the root certificate ({name}) is not PEM: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(format!("the root certificate ({name}) holds no usable certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(format!(
                    "no root certificate to verify the server with: the system has none; give one with \
                     {name}=/path/to/root.crt"
                ));
            }
        }
    }
    Ok(roots)
}

/// The TLS cause in `error`'s source chain, said with what to change.
fn explain(
    keys: &ModeTlsKeys,
    error: &(dyn std::error::Error + 'static),
    mode: TlsMode,
    address: &str,
) -> Option<String> {
    // A rustls error comes wrapped in an `io::Error`, whose `source` skips it.
    let mut source = Some(error);
    let tls = loop {
        let current = source?;
        let inner = current.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
        if let Some(tls) = current.downcast_ref::<rustls::Error>().or_else(|| inner.and_then(|e| e.downcast_ref())) {
            break tls;
        }
        source = current.source();
    };
    let (mode_key, root) = (keys.mode.name(), keys.files.root.name());
    Some(match tls {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the certificate of {address} does not name the host connected to, and {mode_key}={mode} checks it \
             ({tls}); connect with a host name the certificate names, or use {mode_key}=verify-ca"
        ),
        rustls::Error::InvalidCertificate(_) => format!(
            "the certificate of {address} was refused with {mode_key}={mode} ({tls}); give the root \
             certificate that signed it with {root}=/path/to/root.crt"
        ),
        other => format!("the TLS handshake with {address} failed with {mode_key}={mode}: {other}"),
    })
}

/// The modes that do not check everything: `verify-ca` checks the chain but not the host
/// name; `prefer` and `require` without a root certificate check no certificate (libpq's
/// meaning of these modes). The handshake's signatures are checked in every mode.
#[derive(Debug)]
struct Lenient {
    /// The chain's checker for `verify-ca`; `None`: the certificate is not checked.
    chain: Option<Arc<WebPkiServerVerifier>>,
    /// The provider's signature algorithms, which the chain's checker uses too.
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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
