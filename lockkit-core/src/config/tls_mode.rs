//! How a backend whose connections may or may not use TLS verifies the server: a [`TlsMode`]
//! (libpq's five modes, which say it for any store), with the certificates of [`TlsKeys`],
//! under the names the backend gives them ([`ModeTlsKeys`]).
//!
//! With core's `rustls` feature, `ModeTlsKeys::rustls_config` turns a mode and its
//! certificates into a rustls `ClientConfig` (ring provider, set on the configuration, not
//! installed as the process default) and `ModeTlsKeys::explain` says what to change when a
//! handshake fails: a backend whose driver takes a rustls configuration writes only the glue.

use std::fmt;

use super::key::Key;
use super::options::Options;
use super::tls::{ClientTls, TlsKeys};
use crate::{Error, Result};

/// How a connection uses TLS, with libpq's names and meanings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked (libpq's
    /// default). Without TLS built in, plain.
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

crate::option_choices!(TlsMode {
    Disable => "disable",
    Prefer => "prefer",
    Require => "require",
    VerifyCa => "verify-ca",
    VerifyFull => "verify-full",
});

impl TlsMode {
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

    /// Whether the mode refuses a plain connection.
    pub fn needs_tls(self) -> bool {
        matches!(self, Self::Require | Self::VerifyCa | Self::VerifyFull)
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The TLS settings of a backend that takes a [`TlsMode`]: the mode's key and the
/// certificates' keys, under the backend's names (PostgreSQL: `sslmode`, `sslrootcert`,
/// `sslcert`, `sslkey`). The messages name the settings as the user wrote them.
#[derive(Clone, Copy, Debug)]
pub struct ModeTlsKeys {
    /// The mode.
    pub mode: Key<TlsMode>,
    /// The root certificate, and the client certificate with its key.
    pub files: TlsKeys,
}

impl ModeTlsKeys {
    /// The mode and the certificates given, with their files read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] as [`TlsKeys::load`] says.
    pub fn load(&self, options: &Options) -> Result<(TlsMode, ClientTls)> {
        Ok((options.value(&self.mode)?, self.files.load(options)?))
    }

    /// For a backend built without TLS: refuses what needs it (a certificate, or a mode
    /// that refuses plain connections), saying `feature` (how to build TLS in).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] of `backend` naming the setting and `feature`.
    pub fn refuse_without_tls(
        &self,
        backend: &'static str,
        mode: TlsMode,
        tls: &ClientTls,
        feature: &str,
    ) -> Result<()> {
        let files = &self.files;
        let what = if tls.root.is_some() {
            format!("a root certificate ({})", files.root.name())
        } else if tls.client.is_some() {
            format!("a client certificate ({}, {})", files.certificate.name(), files.key.name())
        } else if mode.needs_tls() {
            format!("{}={mode}", self.mode.name())
        } else {
            return Ok(());
        };
        Err(Error::invalid_config(backend, format!("{what} needs TLS: {feature}")))
    }
}
