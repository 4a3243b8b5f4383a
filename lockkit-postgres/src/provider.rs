//! The provider: a client of one PostgreSQL database that hands out lock handles.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{Result, TypedProvider};

use crate::backend::PostgresBackend;
use crate::config::PostgresLockProviderBuilder;

/// A client of one PostgreSQL database. It dereferences to [`LockProvider`](lockkit_core::LockProvider), so `lock`,
/// `inspect` and the rest are its methods; see the crate docs.
#[derive(Clone, Debug)]
pub struct PostgresLockProvider(TypedProvider<PostgresBackend>);
lockkit_core::typed_provider!(PostgresLockProvider, PostgresBackend);

lockkit_core::provider_constructors! {
    PostgresLockProvider, PostgresLockProviderBuilder;
    /// Checks every setting and builds the provider; connects on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming what to change.
    build(builder) {
        Arc::new(PostgresBackend::new(builder.settings()?))
    }
    /// Builds a provider from `url` and connects at once: checks every setting, opens the
    /// connection, checks (or creates) the schema and the role's privileges.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming what to change (the
    /// URL, the schema, the role's privileges); a retryable connection error when the server
    /// does not answer.
    connect(provider) {
        provider.ping().await?;
    }
}

impl PostgresLockProvider {
    /// One `SELECT 1` round trip (connecting first, with the schema checked, if need be).
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn ping(&self) -> Result<()> {
        self.backend().inner.store.ping().await
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
        self.backend().inner.store.migrate().await
    }

    /// A plain connection of tokio-postgres to the provider's server, with its settings
    /// (user, database, timeouts), not used by the provider: for raw measurements such as the
    /// `SELECT 1` floor of `lockkit bench`, and for administration.
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn open_client(&self) -> Result<tokio_postgres::Client> {
        self.backend().inner.store.open().await
    }

    /// The lease of this provider's holds.
    pub fn lease(&self) -> Duration {
        self.backend().settings().lease
    }

    /// The schema of the lock table.
    pub fn schema(&self) -> &str {
        &self.backend().settings().schema
    }

    /// How many holds the renewal task renews now.
    pub fn renewing(&self) -> usize {
        self.backend().renewing()
    }

    /// What the renewal task has done since the provider was built (for `lockkit bench`'s
    /// round trips per renewal tick).
    pub fn renewal_stats(&self) -> RenewalStats {
        self.backend().inner.store.renewals.stats()
    }
}

/// What the renewal rounds of one provider have done since it started.
pub use lockkit_core::RenewalStats;
