//! The provider: a client of one Redis server that hands out lock handles.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{LockName, Result, TypedProvider};

use crate::backend::RedisBackend;
use crate::config::RedisLockProviderBuilder;
use crate::keys::LockKeys;

/// A client of one Redis server (or one Redis Cluster slot owner per lock): a
/// [`LockProvider`](lockkit_core::LockProvider) with the Redis extras.
///
/// It dereferences to [`LockProvider`](lockkit_core::LockProvider), so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from` (for code that picks its backend at run time).
/// Cheap to clone: clones share one command connection, one pub/sub connection for the
/// wake-ups of all their waiters, and one watchdog renewing all their holds. Separate
/// providers are separate owners, as separate processes would be.
///
/// Made by [`RedisLockProvider::builder`] (checks every setting, connects on first use) or by
/// [`RedisLockProvider::connect`] (connects at once).
///
/// ```no_run
/// use lockkit_redis::RedisLockProvider;
///
/// # async fn run() -> lockkit_core::Result<()> {
/// let locks = RedisLockProvider::connect("redis://127.0.0.1:6379/0?lease=10s").await?;
/// let guard = locks.lock("orders/42")?.acquire().await?;
/// println!("holding orders/42 with token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLockProvider(TypedProvider<RedisBackend>);
lockkit_core::typed_provider!(RedisLockProvider, RedisBackend);

lockkit_core::provider_constructors! {
    RedisLockProvider, RedisLockProviderBuilder;
    /// Checks the settings and builds the provider. No connection is made here: the first
    /// operation connects, and a server that cannot be reached then gives a retryable
    /// [`Error::Connection`](lockkit_core::Error::Connection). [`RedisLockProvider::connect`] connects at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming the setting to change and its range: no URL, a URL
    /// that cannot be used (or `rediss://` without the `tls` feature), a duration outside its
    /// range, settings that do not fit together (a renewal interval plus response timeout
    /// that does not leave time to renew within the lease), a bad key prefix.
    build(builder) {
        Arc::new(RedisBackend::new(builder.settings()?)?)
    }
    /// Connects to the server that `url` names, with the URL's options
    /// (`redis://[user[:password]@]host[:port][/db][?lease=10s&…]`, see
    /// [`OPTIONS`](crate::OPTIONS)), and checks it answers one PING.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL or an option
    /// that cannot be used; a retryable [`Error::Connection`](lockkit_core::Error::Connection)
    /// naming the server when it does not answer within the response timeout; an
    /// [`Error::Backend`](lockkit_core::Error::Backend) when it refuses (a wrong password).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing behind but a connection, closed with
    /// the provider.
    connect(provider) {
        provider.ping().await?;
        crate::eviction::warn_if_evicting(provider.backend().store(), &provider.backend().settings().address).await;
    }
}

impl RedisLockProvider {
    /// The lease of this provider's holds.
    pub fn lease(&self) -> Duration {
        self.backend().settings().lease
    }

    /// The prefix of this provider's keys.
    pub fn key_prefix(&self) -> &str {
        &self.backend().settings().prefix
    }

    /// The key of a lock's record, for operators looking at the server (`redis-cli GET`):
    /// it holds the current hold's owner line (`lockkit1`, attempt id, host, pid, start time
    /// in Unix milliseconds), with the remaining lease as its TTL.
    pub fn record_key(&self, lock: &LockName) -> String {
        LockKeys::new(&self.backend().settings().prefix, lock).record().to_owned()
    }

    /// How many holds the watchdog currently renews.
    pub fn renewing(&self) -> usize {
        self.backend().watchdog().len()
    }

    /// Sends one PING over the provider's command connection, connecting first if needed:
    /// a health check, and the raw round trip that benchmarks compare against.
    ///
    /// # Errors
    ///
    /// A retryable [`Error::Connection`](lockkit_core::Error::Connection) naming the server
    /// when it cannot be reached within the response timeout; an
    /// [`Error::Backend`](lockkit_core::Error::Backend) when it refuses the connection (a
    /// wrong password, say).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a PING changes nothing.
    pub async fn ping(&self) -> Result<()> {
        self.backend().ensure_background();
        let address = &self.backend().settings().address;
        self.backend().store().ping().await.map_err(|error| error.with_server(Some(address)))
    }

    /// Renewal counters of the watchdog: ticks run, pipelines sent, holds renewed.
    pub fn renewal_stats(&self) -> RenewalStats {
        self.backend().watchdog().stats().stats()
    }
}

/// What the renewal rounds of one provider have done since it started.
pub use lockkit_core::RenewalStats;
