//! The provider: a connected client of one Redis server that hands out lock handles.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::LockBackend;
use lockkit_core::{LockName, LockProvider, Result};

use crate::builder::{RedisLockProviderBuilder, Settings};
use crate::keys::LockKeys;
use crate::lock::RedisBackend;

/// A client of one Redis server (or one Redis Cluster slot owner per lock), handing out
/// [`DistributedLock`](lockkit_core::DistributedLock) handles through [`LockProvider`].
///
/// Cheap to clone: clones share one command connection, one pub/sub connection for the
/// wake-ups of all their waiters, and one watchdog renewing all their holds. Separate
/// providers are separate owners, as separate processes would be.
///
/// ```no_run
/// use lockkit_core::{DistributedLock, LockProvider};
/// use lockkit_redis::RedisLockProvider;
///
/// # async fn run() -> lockkit_core::Result<()> {
/// let locks = RedisLockProvider::new("redis://127.0.0.1:6379")?;
/// let guard = locks.lock("orders/42")?.acquire().await?;
/// println!("holding orders/42 with token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLockProvider {
    backend: Arc<RedisBackend>,
}

impl RedisLockProvider {
    /// A provider for the server at `url` with the default settings (30 s lease, renewed
    /// every 10 s, keys under `lockkit:`). Nothing connects until the first operation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL that cannot be used.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::builder().url(url).build()
    }

    /// A provider for the server at `url` with the default settings, checked by one PING:
    /// the same shape as the other backends' `connect`, for code that selects a backend by
    /// URL.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL that cannot be
    /// used; a retryable [`Error::Connection`](lockkit_core::Error::Connection) when the
    /// server does not answer.
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        let provider = Self::new(url)?;
        provider.ping().await?;
        Ok(provider)
    }

    /// A builder for every setting.
    pub fn builder() -> RedisLockProviderBuilder {
        RedisLockProviderBuilder::default()
    }

    pub(crate) fn from_settings(settings: Settings) -> Result<Self> {
        Ok(Self { backend: Arc::new(RedisBackend::new(settings)?) })
    }

    /// The lease of this provider's holds.
    pub fn lease(&self) -> Duration {
        self.backend.settings().lease
    }

    /// The prefix of this provider's keys.
    pub fn key_prefix(&self) -> &str {
        &self.backend.settings().prefix
    }

    /// The key of a lock's record, for operators looking at the server (`redis-cli GET`):
    /// it holds the current hold's owner line (attempt id, host, pid, start time in Unix
    /// milliseconds), with the remaining lease as its TTL.
    pub fn record_key(&self, lock: &LockName) -> String {
        LockKeys::new(&self.backend.settings().prefix, lock).lock
    }

    /// How many holds the watchdog currently renews.
    pub fn renewing(&self) -> usize {
        self.backend.watchdog().len()
    }

    /// Sends one PING over the provider's command connection, connecting first if needed:
    /// a health check, and the raw round trip that benchmarks compare against.
    ///
    /// # Errors
    ///
    /// A retryable [`Error::Connection`](lockkit_core::Error::Connection) when the server
    /// cannot be reached within the response timeout.
    pub async fn ping(&self) -> Result<()> {
        self.backend.store().ping().await
    }

    /// Renewal counters of the watchdog: ticks run, pipelines sent, holds renewed.
    pub fn renewal_stats(&self) -> RenewalStats {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = self.backend.watchdog().stats();
        RenewalStats {
            ticks: stats.ticks.load(Relaxed),
            round_trips: stats.round_trips.load(Relaxed),
            renewed: stats.renewed.load(Relaxed),
        }
    }
}

/// What the renewal watchdog of one provider has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalStats {
    /// Renewal rounds completed (one per interval while something is held, plus quick
    /// retries after a failure).
    pub ticks: u64,
    /// Pipelines the rounds sent: each is one round trip carrying up to a thousand renewals.
    pub round_trips: u64,
    /// Holds renewed successfully, by the rounds and by the immediate confirmations of holds
    /// handed over by a release (which have a round trip of their own, outside the rounds).
    pub renewed: u64,
}

impl LockProvider for RedisLockProvider {
    fn backend(&self) -> Arc<dyn LockBackend> {
        self.backend.clone()
    }
}
