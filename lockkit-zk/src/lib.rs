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
//!   answered request plus the session timeout the server granted, minus a drift margin, and
//!   renewed every third of that timeout; `Disconnected` suspends it, an expired or closed
//!   session or the deletion of its node loses it (see [`DisconnectPolicy`]).
//! - **Cancel safety:** an acquisition dropped at any point deletes its node in the
//!   background; `try_acquire` and timeouts leave no node behind.
//! - **Connection trouble:** an acquisition that may wait retries past a connection failure
//!   (no server answers, its session expired or went with its runtime), queueing again, at
//!   the back, on a new session: until its timeout, which then says the store was unreachable
//!   ([`Error::is_connect`](lockkit_core::Error::is_connect)), or for one session timeout when
//!   it waits without one. `try_acquire` does not retry.
//! - **Housekeeping:** lock znodes are CONTAINER nodes, deleted by the server once empty.
//! - **Security:** with digest credentials, every node is creator-only by default, so a
//!   client with other credentials can neither take nor delete a held lock ([`LockAcl`]).
//!
//! # Making a provider
//!
//! - [`ZkLockProvider::connect`] takes a `zk://` URL and connects **eagerly**: it checks
//!   every setting, opens the session and creates the base path, so a provider it returns has
//!   reached its store. When every server refuses connections it fails at once with a
//!   retryable [`Error::Connection`](lockkit_core::Error::Connection) naming them.
//! - [`ZkLockProvider::builder`]`()…`[`build`](ZkLockProviderBuilder::build)`()` is
//!   synchronous and **lazy**: it checks every setting and does no I/O; the first session
//!   opens at the provider's first use, and its failures come back from that use.
//! - [`SCHEME`] is the `zk` entry of lockkit's scheme table, which `lockkit::connect(url)`
//!   dispatches on.
//!
//! A URL names the servers, the chroot and the credentials, and takes the options of
//! [`OPTIONS`], spelled as the builder's methods:
//! `zk://locker:secret@zk1:2181,zk2:2181,zk3:2181/myapp?session_timeout=6s&base_path=/locks`.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_zk::ZkLockProvider;
//!
//! # async fn demo() -> lockkit_core::Result<()> {
//! let provider = ZkLockProvider::connect("zk://zk1:2181,zk2:2181,zk3:2181/myapp?session_timeout=6s").await?;
//! let lock = provider.lock("reports/daily")?;
//! if let Some(guard) = lock.try_acquire().await? {
//!     // ... work, sending guard.token() with every write ...
//!     guard.release().await?;
//! }
//!
//! // The same settings with the builder, connecting at first use.
//! let lazy = ZkLockProvider::builder()
//!     .connect_string("zk1:2181,zk2:2181,zk3:2181/myapp")
//!     .session_timeout(Duration::from_secs(6))
//!     .build()?;
//! let guard = lazy.lock("reports/daily")?.acquire_timeout(Duration::from_secs(30)).await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Runtime
//!
//! lockkit-zk runs on Tokio 1.x with the time and I/O drivers enabled, and works from any
//! runtime: one provider may be used from several. A session, with the client's connection
//! task and the task that renews its holds, runs on the runtime where it was opened (the
//! runtime of the provider's first use). When that runtime shuts down, the session dies with
//! it: its holds are lost at that moment ([`LossReason::ClientClosed`](lockkit_core::LossReason)),
//! and the next use of the provider, on whatever runtime, opens a new session there. A guard
//! released after its runtime shut down (on lockkit's release thread, say) deletes its node
//! through a new session of the same credentials, so the lock is freed at once rather than
//! when the server expires the old session. A current-thread runtime runs its tasks only
//! while it is driven (inside `block_on`): keep the runtime a provider first ran on running
//! for as long as its session serves others.
//!
//! One corner: when the runtime a session runs on shuts down while a task on another runtime
//! waits on one of that session's watches, zookeeper-client panics inside the watch (an
//! `unwrap` on a closed channel). lockkit-zk catches that panic at the watch and treats the
//! session as gone (the waiter queues again on a new session); the panic hook still prints
//! it. A build with `panic = "abort"` aborts instead: there, keep the runtime that first uses
//! a provider running for as long as other runtimes use the provider.
//!
//! # The `zookeeper_client` re-export
//!
//! [`ZkLockProvider::zk_client`] hands out the client of the provider's session, for requests
//! of your own; its type comes from [zookeeper-client](https://docs.rs/zookeeper-client),
//! re-exported as [`zookeeper_client`] so that you get the matching version. That crate is at
//! 0.x: **the re-export and `zk_client` are exempt from lockkit's semver promise**, and a
//! minor release of lockkit-zk may move to a newer zookeeper-client. Everything else of this
//! crate follows semver.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod error;
mod hold;
mod names;
mod provider;
mod recipe;
mod session;

pub use config::{
    DEFAULT_BASE_PATH, DEFAULT_SESSION_TIMEOUT, DisconnectPolicy, LockAcl, OPTIONS, ZkLockProviderBuilder,
};
pub use names::encode_name;
pub use provider::{SCHEME, ZkLockProvider};
/// The ZooKeeper client library this backend is built on, re-exported so that
/// [`ZkLockProvider::zk_client`] comes with a matching version.
///
/// **Outside lockkit's semver promise:** zookeeper-client is at 0.x, and a minor release of
/// lockkit-zk may move to a newer one. Depend on it directly (the same version) if you need
/// a stable name for it.
pub use zookeeper_client;
