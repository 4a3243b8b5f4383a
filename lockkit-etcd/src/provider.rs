//! The provider users hold: an etcd client handing out lock handles, and the `etcd` scheme.

use lockkit_core::config::Scheme;
use lockkit_core::{LockName, Result, TypedProvider};

use crate::BACKEND;
use crate::client::EtcdBackend;
use crate::config::EtcdLockProviderBuilder;

/// The `etcd` scheme: `etcd://[user:password@]host:port[,host:port…][/prefix][?option=value&…]`,
/// for the scheme table of `lockkit_core::config` (the `lockkit` facade registers it). Its
/// `connect` is [`EtcdLockProvider::connect`]'s: eager and health-checked. `etcds://` (TLS)
/// needs the `tls` feature; without it, it is refused with an error naming the feature.
pub const SCHEME: Scheme = Scheme::new(&["etcd", "etcds"], BACKEND, connect_url)
    .with_feature("etcd")
    .with_urls(&[
        ("etcd://[user:password@]host:port[,host:port…][/prefix]", "an etcd cluster"),
        ("etcds://…", "an etcd cluster over TLS (feature `etcd-tls`)"),
    ])
    .with_options(crate::OPTIONS);

/// An etcd client that hands out lock handles: one client and one lease at a time (a new
/// pair after the lease ended, or when the runtime it ran on shut down), shared by every
/// handle of the provider. Cheap to clone; clones share the lease.
///
/// It dereferences to [`LockProvider`](lockkit_core::LockProvider), so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from`.
///
/// ```no_run
/// use lockkit_etcd::EtcdLockProvider;
///
/// # async fn demo() -> lockkit_core::Result<()> {
/// let provider = EtcdLockProvider::connect("etcd://127.0.0.1:2379/myapp").await?;
/// let lock = provider.lock("orders/42")?;
/// let guard = lock.acquire().await?;
/// println!("holding with fencing token {}", guard.token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct EtcdLockProvider(TypedProvider<EtcdBackend>);
lockkit_core::typed_provider!(EtcdLockProvider, EtcdBackend);

lockkit_core::provider_constructors! {
    EtcdLockProvider, EtcdLockProviderBuilder;
    /// Checks every setting and makes the provider, without I/O: it connects on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming what to change.
    build(builder) {
        EtcdBackend::new(builder.config()?)
    }
    /// Connects to the store an `etcd://` URL names, eagerly: checks every setting, connects,
    /// and grants the provider's lease, so that a provider returned is one that reached its
    /// store.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL or setting that
    /// cannot be used, before any I/O; a retryable
    /// [`Error::Connection`](lockkit_core::Error::Connection) naming the members when none
    /// answers (or the endpoint does not speak etcd's protocol) within the connect timeout;
    /// [`Error::Backend`](lockkit_core::Error::Backend) for what the server refuses (wrong
    /// credentials, say).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a lease granted before the future was dropped is left to expire after its
    /// TTL, with no key bound to it.
    connect(provider) {
        provider.backend().session().await?;
    }
}

impl EtcdLockProvider {
    /// The etcd client of the provider's current lease (a new client and lease if there is
    /// none, it ended, or its runtime shut down), for requests of your own: a transaction
    /// guarded by the lock key's create revision, say, or a measurement of the raw round trip.
    ///
    /// The client's type comes from [`etcd_client`](crate::etcd_client), which is outside
    /// lockkit's semver promise.
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn etcd_client(&self) -> Result<etcd_client::Client> {
        self.backend().client().await
    }

    /// The id of the provider's current lease, which every hold's key is bound to (a new
    /// lease if there is none or it ended).
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub async fn lease_id(&self) -> Result<i64> {
        Ok(self.backend().session().await?.lease)
    }

    /// The key prefix of the lock called `name`: its contender keys are
    /// `<prefix>/<escaped name>/<provider id>-<n>`. For operators and tests.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for a bad name.
    pub fn lock_prefix(&self, name: &str) -> Result<String> {
        Ok(self.backend().config.lock_prefix(&LockName::new(name)?))
    }
}
