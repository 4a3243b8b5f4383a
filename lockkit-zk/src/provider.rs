//! The provider users hold: a connected ZooKeeper client handing out lock handles.

use std::sync::Arc;

use lockkit_core::backend::LockBackend;
use lockkit_core::{LockName, LockProvider, Result};

use crate::config::{ZkConfig, ZkLockProviderBuilder};
use crate::recipe::ZkBackend;

/// A ZooKeeper client that hands out lock handles: one session at a time (a new one after
/// an expiry), shared by every handle of the provider. Cheap to clone; clones share the
/// session.
///
/// ```no_run
/// use lockkit_core::{DistributedLock, LockProvider};
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
    backend: Arc<ZkBackend>,
}

impl ZkLockProvider {
    /// A builder for every setting.
    pub fn builder() -> ZkLockProviderBuilder {
        ZkLockProviderBuilder::default()
    }

    /// Connects with default settings to `target`: `zk://host:port[,host:port...][/chroot]`
    /// or the plain `host:port,host:port/chroot` form.
    ///
    /// # Errors
    ///
    /// As for [`ZkLockProviderBuilder::build`].
    pub async fn connect(target: &str) -> Result<ZkLockProvider> {
        Self::builder().connect_string(target).build().await
    }

    pub(crate) async fn open(config: ZkConfig) -> Result<ZkLockProvider> {
        Ok(ZkLockProvider { backend: Arc::new(ZkBackend::open(config).await?) })
    }

    /// The ZooKeeper client of the provider's current session (a new session if the last one
    /// ended), for requests of your own on the same session: for instance a multi-op guarded
    /// by a check of the lock node, or a measurement of the raw round trip.
    ///
    /// # Errors
    ///
    /// A connection error when a new session cannot be opened.
    pub async fn zk_client(&self) -> Result<zookeeper_client::Client> {
        self.backend.zk_client().await
    }

    /// The znode of the lock called `name`: its contender nodes are its children. For
    /// operators and tests; the path includes the chroot.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for a bad name.
    pub fn lock_path(&self, name: &str) -> Result<String> {
        Ok(self.backend.config().lock_path(&LockName::new(name)?))
    }
}

impl LockProvider for ZkLockProvider {
    fn backend(&self) -> Arc<dyn LockBackend> {
        self.backend.clone()
    }
}
