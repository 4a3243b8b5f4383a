//! The provider users hold: a ZooKeeper client handing out lock handles, and the `zk` scheme.

use std::time::Duration;

use lockkit_core::config::Scheme;
use lockkit_core::{LockName, Result, TypedProvider};

use crate::client::ZkBackend;
use crate::config::ZkLockProviderBuilder;
use crate::error::BACKEND;

/// The `zk` scheme: `zk://[user:password@]host:port[,host:port…][/chroot][?option=value&…]`,
/// for the scheme table of `lockkit_core::config` (the `lockkit` facade registers it). Its
/// `connect` is [`ZkLockProvider::connect`]'s: eager and health-checked.
pub const SCHEME: Scheme = Scheme::new(&["zk"], BACKEND, connect_url)
    .with_feature("zk")
    .with_urls(&[("zk://[user:password@]host:port[,host:port…][/chroot]", "a ZooKeeper ensemble")])
    .with_options(crate::OPTIONS);

/// A ZooKeeper client that hands out lock handles: one session at a time (a new one after
/// an expiry, or when the runtime it ran on shut down), shared by every handle of the
/// provider. Cheap to clone; clones share the session.
///
/// It dereferences to [`LockProvider`](lockkit_core::LockProvider), so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from`.
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
pub struct ZkLockProvider(TypedProvider<ZkBackend>);
lockkit_core::typed_provider!(ZkLockProvider, ZkBackend);

lockkit_core::provider_constructors! {
    ZkLockProvider, ZkLockProviderBuilder;
    /// Checks every setting and makes the provider, without any I/O: the first session is
    /// opened (and the base path created) when the provider is first used. Use
    /// [`ZkLockProvider::connect`] to connect at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming the setting and
    /// what to change: no or empty connect string, a URL or credentials in the connect string,
    /// an empty host, a bad port, a chroot or base path that is not an absolute znode path, a
    /// session timeout, connect timeout or drift margin out of its range (see each method), an
    /// ACL that needs credentials without them, credentials with an empty user or a `:` in
    /// the user.
    build(builder) {
        ZkBackend::new(builder.check()?)
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
    connect(provider) {
        provider.backend().session(None).await?;
    }
}

impl ZkLockProvider {
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
        self.backend().zk_client().await
    }

    /// The session timeout the server granted to the provider's current (or last) session,
    /// which is the lease of its holds: the timeout asked for
    /// ([`ZkLockProviderBuilder::session_timeout`]) clamped to the server's range. `None`
    /// before the first session opened.
    pub fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.backend().negotiated_session_timeout()
    }

    /// The znode of the lock called `name`: its contender nodes are its children. For
    /// operators and tests; the path includes the chroot.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for a bad name.
    pub fn lock_path(&self, name: &str) -> Result<String> {
        Ok(self.backend().config.lock_path(&LockName::new(name)?))
    }
}
