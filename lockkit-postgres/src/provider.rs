//! The provider: a client of one PostgreSQL database that hands out lock handles.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::config::{ConnectFuture, StoreUrl};
use lockkit_core::{LockProvider, Result};

use crate::backend::PostgresBackend;
use crate::builder::{PostgresLockProviderBuilder, Settings};

/// A client of one PostgreSQL database. It dereferences to [`LockProvider`], so `lock`,
/// `inspect` and the rest are its methods; see the crate docs.
#[derive(Clone, Debug)]
pub struct PostgresLockProvider {
    pub(crate) provider: LockProvider,
    backend: Arc<PostgresBackend>,
}

impl PostgresLockProvider {
    /// A builder; `build()` checks every setting and does no network I/O.
    pub fn builder() -> PostgresLockProviderBuilder {
        PostgresLockProviderBuilder::default()
    }

    /// Builds a provider from `url` and connects at once: checks every setting, opens the
    /// connection, checks (or creates) the schema and the role's privileges.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming what to change (the
    /// URL, the schema, the role's privileges); a retryable connection error when the server
    /// does not answer.
    pub async fn connect(url: &str) -> Result<Self> {
        let provider = PostgresLockProviderBuilder::from_url(&StoreUrl::parse(url)?)?.build()?;
        provider.ping().await?;
        Ok(provider)
    }

    pub(crate) fn from_settings(settings: Settings) -> Result<Self> {
        let backend = Arc::new(PostgresBackend::new(settings));
        Ok(Self { provider: LockProvider::new(backend.clone()), backend })
    }

    /// One `SELECT 1` round trip (connecting first, with the schema checked, if need be).
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn ping(&self) -> Result<()> {
        self.backend.inner.store.ping().await
    }

    /// Creates the schema, its table, sequence and functions if they are missing (every
    /// statement is idempotent and serialized with other providers doing the same). Run it
    /// once as a role that may create them when the locking role may not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) when the role may not
    /// create the schema; connection and store errors.
    pub async fn migrate(&self) -> Result<()> {
        self.backend.inner.store.migrate().await
    }

    /// A plain connection of tokio-postgres to the provider's server, with its settings
    /// (user, database, timeouts), not used by the provider: for raw measurements such as the
    /// `SELECT 1` floor of `lockkit bench`, and for administration.
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn open_client(&self) -> Result<tokio_postgres::Client> {
        self.backend.inner.store.open().await
    }

    /// The lease of this provider's holds.
    pub fn lease(&self) -> Duration {
        self.backend.settings().lease
    }

    /// The schema of the lock table.
    pub fn schema(&self) -> &str {
        &self.backend.settings().schema
    }

    /// How many holds the renewal task renews now.
    pub fn renewing(&self) -> usize {
        self.backend.renewing()
    }
}

impl Deref for PostgresLockProvider {
    type Target = LockProvider;

    fn deref(&self) -> &LockProvider {
        &self.provider
    }
}

impl From<PostgresLockProvider> for LockProvider {
    fn from(provider: PostgresLockProvider) -> LockProvider {
        provider.provider
    }
}

/// The scheme table's `connect`: eager.
pub(crate) fn connect_url(url: StoreUrl) -> ConnectFuture {
    Box::pin(async move {
        let provider = PostgresLockProviderBuilder::from_url(&url)?.build()?;
        provider.ping().await?;
        Ok(LockProvider::from(provider))
    })
}
