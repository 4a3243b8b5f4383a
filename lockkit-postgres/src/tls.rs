//! TLS: the connector that both the command connection and the `LISTEN` connection are
//! opened with, from the `sslmode` and certificates (core's [`TlsMode`] and
//! [`ModeTlsKeys`](lockkit_core::config::ModeTlsKeys), under libpq's names).
//!
//! With the `tls` feature the connector is tokio-postgres-rustls on the rustls configuration
//! core makes of the mode (ring, set on the connector itself, not installed as the process
//! default); without it, tokio-postgres's `NoTls`, and every setting that needs TLS is refused
//! at build time with the feature to enable.

use std::fmt;

use lockkit_core::Result;
use lockkit_core::config::{ClientTls, ModeTlsKeys, TlsMode};
use tokio_postgres::Socket;
use tokio_postgres::tls::MakeTlsConnect;

/// How a connection uses TLS, with libpq's names and meanings (core's [`TlsMode`]).
pub use lockkit_core::config::TlsMode as SslMode;

/// The driver's `sslmode`: the checking modes are `require` to it, the checks are rustls's.
fn driver_mode(mode: TlsMode) -> tokio_postgres::config::SslMode {
    match mode {
        TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
        TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    }
}

/// The checked TLS settings of a provider: the connector its connections are opened with.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) mode: SslMode,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    keys: ModeTlsKeys,
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
    /// Checks `mode` and `certificates` (named by `keys`) and builds the connector; sets the
    /// driver's `sslmode` in `config`.
    pub(crate) fn new(
        keys: ModeTlsKeys,
        (mode, certificates): (TlsMode, ClientTls),
        config: &mut tokio_postgres::Config,
    ) -> Result<Self> {
        config.ssl_mode(driver_mode(mode));
        #[cfg(feature = "tls")]
        let connector =
            tokio_postgres_rustls::MakeRustlsConnect::new(keys.rustls_config(crate::BACKEND, mode, certificates)?);
        #[cfg(not(feature = "tls"))]
        let connector = {
            keys.refuse_without_tls(
                crate::BACKEND,
                mode,
                &certificates,
                &lockkit_core::config::tls_not_built(crate::BACKEND),
            )?;
            tokio_postgres::NoTls
        };
        Ok(Self { mode, keys, connector })
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

    /// Why a connection failed, when TLS is the reason: a message that says what to change.
    pub(crate) fn explain(&self, error: &tokio_postgres::Error, address: &str) -> Option<String> {
        // The driver's own message is in its source chain (its Display names only the kind).
        if lockkit_core::error_chain(error).contains("server does not support TLS") {
            let mode = self.mode;
            return Some(format!(
                "{address} does not accept TLS connections, and sslmode={mode} requires TLS; turn TLS on at the \
                 server (ssl=on) or choose sslmode=prefer or sslmode=disable"
            ));
        }
        #[cfg(feature = "tls")]
        return self.keys.explain(error, self.mode, address);
        #[cfg(not(feature = "tls"))]
        None
    }
}
