//! The ZooKeeper backend of lockkit.
//!
//! [`ZkLockProvider`] is a ZooKeeper client that hands out lock handles. Each lock is a znode
//! under a base path; each acquisition creates an EPHEMERAL_SEQUENTIAL child of it, the lowest
//! sequence holds the lock, and waiters are granted in arrival order. A waiter watches the
//! nodes ahead of it (every one of them within 16 of the head, else its predecessor), so a
//! release lets exactly one waiter proceed, without a read: the others only strike a node off.
//!
//! - **Fencing token:** the czxid of the holder's node, the ensemble-wide zxid of its create:
//!   strictly increasing across clients, parent re-creation and server restarts.
//! - **Protected names:** each node's name carries the acquisition's attempt id, so a create
//!   whose reply was lost is found again, never leaked.
//! - **Loss:** a hold lives in its session. It is guaranteed until the send time of the last
//!   answered request plus the session timeout minus a drift margin, renewed every third of
//!   the session timeout; `Disconnected` suspends it, an expired or closed session or the
//!   deletion of its node loses it (see [`DisconnectPolicy`]).
//! - **Cancel safety:** an acquisition dropped at any point deletes its node in the
//!   background; `try_acquire` and timeouts leave no node behind.
//! - **Housekeeping:** lock znodes are CONTAINER nodes, deleted by the server once empty.
//! - **Security:** with digest credentials, every node is creator-only by default, so a
//!   client with other credentials can neither take nor delete a held lock ([`LockAcl`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_core::{DistributedLock, LockProvider};
//! use lockkit_zk::ZkLockProvider;
//!
//! # async fn demo() -> lockkit_core::Result<()> {
//! let provider = ZkLockProvider::builder()
//!     .connect_string("zk://zk1:2181,zk2:2181,zk3:2181/myapp")
//!     .session_timeout(Duration::from_secs(6))
//!     .build()
//!     .await?;
//! let lock = provider.lock("reports/daily")?;
//! if let Some(guard) = lock.try_acquire().await? {
//!     // ... work, sending guard.token() with every write ...
//!     guard.release().await?;
//! }
//! # Ok(())
//! # }
//! ```

mod config;
mod error;
mod names;
mod provider;
mod recipe;
mod session;

pub use config::{
    DEFAULT_BASE_PATH, DEFAULT_SESSION_TIMEOUT, DisconnectPolicy, LockAcl, ZkConfig, ZkLockProviderBuilder,
};
pub use names::encode_name;
pub use provider::ZkLockProvider;
/// The ZooKeeper client library this backend is built on, re-exported so that
/// [`ZkLockProvider::zk_client`] comes with a matching version.
pub use zookeeper_client;
