//! The provider users hold: a ZooKeeper client handing out lock handles, and the `zk` scheme.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::config::{ConnectFuture, Scheme, StoreUrl};
use lockkit_core::{LockName, LockProvider, Result};

use crate::backend::ZkBackend;
use crate::config::{ZkConfig, ZkLockProviderBuilder};
use crate::error::BACKEND;

/// The `zk` scheme: `zk://[user:password@]host:port[,host:port…][/chroot][?option=value&…]`,
/// for the scheme table of `lockkit_core::config` (the `lockkit` facade registers it). Its
/// `connect` is [`ZkLockProvider::connect`]'s: eager and health-checked.
pub const SCHEME: Scheme = Scheme { names: &["zk"], backend: BACKEND, connect: connect_url };

fn connect_url(url: StoreUrl) -> ConnectFuture {
    Box::pin(async move { ZkLockProvider::connect_to(&url).await.map(LockProvider::from) })
}

/// A ZooKeeper client that hands out lock handles: one session at a time (a new one after
/// an expiry, or when the runtime it ran on shut down), shared by every handle of the
/// provider. Cheap to clone; clones share the session.
///
/// It dereferences to [`LockProvider`], so `provider.lock(name)` works directly, and converts
/// into one with `LockProvider::from`.
///
/// ```no_run
/// use lockkit_zk::ZkLockProvider;
///
/// # async fn demo() -> lockkit_core::Result<()> {
/// let provider = ZkLockProvider::connect("zk://127.0.0.1:2181/myapp").await?;
/// let lock = provider.lock("orders/42")?;
/// let guard = lock.acquire().await?;
/// println!("holding with fencing token {}", guard.token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ZkLockProvider {
    pub(crate) provider: LockProvider,
    backend: Arc<ZkBackend>,
}

impl ZkLockProvider {
    /// A builder for every setting; its `build` is lazy (no I/O).
    pub fn builder() -> ZkLockProviderBuilder {
        ZkLockProviderBuilder::default()
    }

    /// Connects to the store a `zk://` URL names, eagerly:
    /// `zk://[user:password@]host:port[,host:port…][/chroot][?option=value&…]` with the
    /// options of [`ZkLockProviderBuilder::option`]. Checks every setting, opens the session
    /// and creates the base path if it is missing, so that a provider returned is one that
    /// reached its store.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL or setting that
    /// cannot be used ([`ZkLockProviderBuilder::build`]), before any I/O; a retryable
    /// [`Error::Connection`](lockkit_core::Error::Connection) naming the servers when none
    /// answers (at once when every server refuses connections, else within the session
    /// timeout); [`Error::Backend`](lockkit_core::Error::Backend) for what the server refuses
    /// (wrong credentials, or `NoAuth` creating the base path).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the session being opened, which the server
    /// then expires; nothing else is left.
    pub async fn connect(url: &str) -> Result<ZkLockProvider> {
        Self::connect_to(&StoreUrl::parse(url)?).await
    }

    async fn connect_to(url: &StoreUrl) -> Result<ZkLockProvider> {
        let provider = ZkLockProviderBuilder::from_url(url)?.build()?;
        provider.backend.session(None).await?;
        Ok(provider)
    }

    pub(crate) fn new(config: ZkConfig) -> ZkLockProvider {
        let backend = ZkBackend::new(config);
        ZkLockProvider { provider: LockProvider::new(backend.clone()), backend }
    }

    /// The ZooKeeper client of the provider's current session (a new session if there is
    /// none, the last one ended, or its runtime shut down), for requests of your own on the
    /// same session: for instance a multi-op guarded by a check of the lock node, or a
    /// measurement of the raw round trip.
    ///
    /// The client's type comes from [`zookeeper_client`](crate::zookeeper_client), which is
    /// outside lockkit's semver promise (see the crate docs).
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect) when a new session cannot be opened.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future while a session is being opened drops that session.
    pub async fn zk_client(&self) -> Result<zookeeper_client::Client> {
        self.backend.zk_client().await
    }

    /// The session timeout the server granted to the provider's current (or last) session,
    /// which is the lease of its holds: the timeout asked for
    /// ([`ZkLockProviderBuilder::session_timeout`]) clamped to the server's range. `None`
    /// before the first session opened.
    pub fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.backend.negotiated_session_timeout()
    }

    /// The znode of the lock called `name`: its contender nodes are its children. For
    /// operators and tests; the path includes the chroot.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for a bad name.
    pub fn lock_path(&self, name: &str) -> Result<String> {
        Ok(self.backend.config.lock_path(&LockName::new(name)?))
    }
}

impl Deref for ZkLockProvider {
    type Target = LockProvider;

    fn deref(&self) -> &LockProvider {
        &self.provider
    }
}

impl From<ZkLockProvider> for LockProvider {
    fn from(provider: ZkLockProvider) -> LockProvider {
        provider.provider
    }
}

/// A provider of the ZooKeeper backend, as its own type again: how to reach its extras
/// (`zk_client`, `lock_path`, the negotiated session timeout) from the [`LockProvider`] that `lockkit::connect` (or a conversion) gave.
/// Any other provider comes back unchanged as the error.
impl TryFrom<LockProvider> for ZkLockProvider {
    type Error = LockProvider;

    fn try_from(provider: LockProvider) -> Result<Self, LockProvider> {
        match provider.backend_as::<ZkBackend>() {
            Some(backend) => Ok(Self { provider, backend }),
            None => Err(provider),
        }
    }
}
