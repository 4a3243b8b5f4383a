//! The ZooKeeper backend of lockkit: mutexes, read-write locks, counting semaphores and
//! leader election on ZooKeeper's recipes, with fencing tokens, loss signals and the whole
//! lockkit contract.
//!
//! [`ZkLockProvider`] is a ZooKeeper client that hands out lock handles; it dereferences to
//! lockkit's [`LockProvider`](lockkit_core::LockProvider).
//! [`ZkLockProvider::connect`] takes a `zk://` URL and connects **eagerly** (the session and
//! the base path); [`ZkLockProvider::builder`]`()…`[`build`](ZkLockProviderBuilder::build)`()`
//! checks every setting, does no I/O, and opens the session at the first use. A URL names the
//! servers, the chroot and the digest credentials, with the options of [`OPTIONS`], spelled as
//! the builder's methods:
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
//!
//! // Readers of a configuration while a writer may migrate it.
//! let config = provider.rw_lock("config/pricing")?;
//! let read = config.read().await?;
//! // ... read, checking read.token() against the last write's ...
//! read.release().await?;
//!
//! // At most three workers calling a rate-limited API, fleet-wide.
//! let slots = provider.semaphore("api/partner", 3)?;
//! let permit = slots.acquire().await?;
//! permit.release().await?;
//!
//! // One scheduler at a time; the others follow who leads.
//! let election = provider.election("services/scheduler")?;
//! let mut changes = election.observe()?;
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! // ... lead while leadership.is_held(), stamping writes with leadership.token() ...
//! leadership.resign().await?;
//! while let Some(change) = changes.next().await {
//!     match change? {
//!         lockkit_core::LeaderEvent::Elected(leader) => println!("{:?} leads", leader.identity_str()),
//!         lockkit_core::LeaderEvent::Gap => println!("changes passed unseen; the leader now follows"),
//!         _ => println!("nobody leads"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - **The queue**: each lock name is a znode under the base path (`/lockkit`); each
//!   acquisition creates an `EPHEMERAL_SEQUENTIAL` child whose name says what it asks for
//!   (`lock`, `read`, `write`, `permit-{N}`, `candidate`), and whether a node holds follows
//!   from the nodes ahead of it, so waiters are granted in arrival order. A waiter watches a
//!   bounded set of nodes ahead of it, never the whole queue: no herd effect.
//! - **Fencing token**: the czxid of the holder's node, ensemble-wide, so tokens keep growing
//!   across clients, parent re-creation and server restarts.
//! - **Protected names**: each node's name carries the acquisition's id, so a create whose
//!   reply was lost is found again, never leaked.
//! - **Loss**: a hold lives in the provider's session, renewed every third of the session
//!   timeout and guaranteed until the send time of the last answered request plus the
//!   granted timeout minus the drift; `Disconnected` suspends it, an expired session or the
//!   deletion of its node loses it (see [`DisconnectPolicy`]). Each hold watches its node;
//!   a session with 64 holds or more at once watches its base path recursively instead
//!   (ZooKeeper 3.6 and later), so that a further hold costs no watch and no request of its
//!   own, at the price of hearing every change under the base path while it has them.
//! - **Cancel safety**: an acquisition dropped at any point deletes its node in the
//!   background; `try_acquire` and timeouts leave no node behind.
//! - **Housekeeping and security**: lock znodes are CONTAINER nodes, deleted by the server
//!   once empty; with digest credentials every node is creator-only by default
//!   ([`LockAcl`]), so another user can neither take, delete nor break a held lock.
//! - **Elections** are Curator's `LeaderLatch` layout on the same queue (the term is the
//!   leader node's czxid); observers are driven by watches and say
//!   [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap) when they cannot tell a change.
//!
//! # Runtime
//!
//! A session runs on the runtime of the provider's first use and dies with it: its holds are
//! lost then, and the next use opens a new session on the current runtime. A guard released
//! after its runtime shut down deletes its node through a new session. When that runtime
//! shuts down while another runtime waits on one of its watches, zookeeper-client panics
//! inside the watch; lockkit-zk catches the panic, but a build with `panic = "abort"` aborts:
//! there, keep the provider's first runtime running as long as other runtimes use it.
//!
//! [`ZkLockProvider::zk_client`] and the [`zookeeper_client`] re-export are **exempt from
//! lockkit's semver promise**: zookeeper-client is at 0.x, and a minor release of lockkit-zk
//! may move to a newer one. Everything else of this crate follows semver.
//!
//! # More
//!
//! The guide's ZooKeeper page has the rest: every option with its default, the nodes and
//! what each kind waits for, read-write locks and their downgrade, semaphores, conflicts,
//! elections and observers, breaking, and runtimes:
//! <https://docs.rs/lockkit/latest/lockkit/guide/backends/zookeeper/index.html> (in this
//! repository: `src/guide/backends/zookeeper.md`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod client;
mod config;
mod coverage;
mod error;
mod held;
mod holds;
mod judge;
mod names;
mod observe;
mod provider;
mod recipe;
mod record;
mod session;

pub use config::{
    DEFAULT_BASE_PATH, DEFAULT_SESSION_TIMEOUT, DisconnectPolicy, LockAcl, OPTIONS, ZkLockProviderBuilder,
};
#[doc(hidden)]
pub use lockkit_core::HoldCoverage;
pub use names::encode_name;
pub use provider::{SCHEME, ZkLockProvider};
/// The ZooKeeper client library this backend is built on, re-exported so that
/// [`ZkLockProvider::zk_client`] comes with a matching version.
///
/// **Outside lockkit's semver promise:** zookeeper-client is at 0.x, and a minor release of
/// lockkit-zk may move to a newer one. Depend on it directly (the same version) if you need
/// a stable name for it.
pub use zookeeper_client;
