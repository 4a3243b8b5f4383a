//! The etcd backend of lockkit: mutexes, read-write locks, counting semaphores and elections
//! on lease-bound keys ordered by etcd's global revision, with fencing tokens, loss signals
//! and the whole lock contract.
//!
//! [`EtcdLockProvider`] dereferences to lockkit's [`LockProvider`](lockkit_core::LockProvider):
//!
//! ```no_run
//! use lockkit_etcd::EtcdLockProvider;
//!
//! # async fn run() -> lockkit_core::Result<()> {
//! // Eager: checks every setting, connects, checks the credentials, grants the lease.
//! let provider = EtcdLockProvider::connect("etcd://locker:secret@127.0.0.1:2379/myapp?ttl=10s").await?;
//! let guard = provider.lock("orders/42")?.acquire().await?;
//! println!("holding orders/42 with token {}", guard.token()); // the key's create revision
//! guard.release().await?;
//!
//! let config = provider.rw_lock("config/pricing")?;
//! let read = config.read().await?; // readers behind a queued writer wait: writers never starve
//! read.release().await?;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! - **One lease per provider** (TTL 10 s by default), kept alive by one watchdog every third
//!   of the TTL; every key of every hold is bound to it. A hold's deadline runs from the
//!   *send* time of the last acknowledged keep-alive plus the TTL minus a drift margin, so a
//!   holder cut off or paused is signalled lost before the server can expire the lease.
//! - **A key per acquisition**, `<prefix>/<escaped name>/<provider id>-<n>`, put if absent in
//!   one transaction that also reads the queue. The lock is granted when no key with a lower
//!   create revision remains; a waiter waits for the deletion of the key just ahead of it
//!   only, then confirms in a transaction guarded by its own key's create revision. Waiters
//!   are granted in arrival order. Key names are reused within a provider: etcd keeps an
//!   index entry for every key ever written under a prefix until a compaction.
//! - **Fencing**: the token is the own key's create revision, which grows with every write
//!   of the cluster and is kept across restarts.
//! - **Watches**: one watch stream per provider and one kept watch per lock in use, which
//!   waits register with; no watch is created on a wait's path.
//! - **Loss of a deleted key**: after each keep-alive, one `LeaseTimeToLive` with keys tells
//!   which holds' keys are gone; at once when the lock's watch is open for a wait.
//! - **Release and cancellation**: a release deletes the own key conditioned on its create
//!   revision, never by name alone; an acquisition dropped at any point deletes its key in the
//!   background, and one given up in doubt writes a void key that refuses a late put.
//! - **Kinds**: the key's value says what it asks for (`kind=read`, `kind=write`,
//!   `kind=permit-N`, a candidate's identity); a downgrade rewrites the value in place. An
//!   observer of an election watches the prefix from the revision last seen, and says
//!   [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap) when etcd compacted it meanwhile.
//!
//! etcd's own `Lock` service is not used: a `Lock` call returns the key only once granted, so
//! an acquisition dropped while it waits leaves a key the client never learnt, holding its
//! place until the lease expires. With the KV API the client names the key, so a dropped or
//! retried acquisition always knows which key to delete or find again.
//!
//! # URLs, credentials and TLS
//!
//! `etcd://[user:password@]host:port[,host:port…][/prefix][?option=value&…]`, with the options
//! of [`EtcdLockProviderBuilder::option`] ([`OPTIONS`]): `ttl` (whole seconds, 2 s to a day),
//! `drift`, `connect_timeout`, `prefix`, `max_hold`. [`SCHEME`] is this crate's entry in
//! lockkit's scheme table.
//!
//! With credentials the provider checks at connect, with a transaction that writes nothing,
//! that the user may read, write and delete under its prefix, and says what to change
//! otherwise. It authenticates again when etcd refuses an expired or outdated token.
//!
//! `etcds://…` (feature `tls`) uses rustls with ring; URL options `tls_root_certificate`,
//! `tls_client_certificate` and `tls_client_key` name PEM files.
//!
//! # More
//!
//! The guide's etcd page has the rest: every option with its default, watches, loss,
//! kinds, elections, why not the Lock service, authentication and TLS:
//! <https://docs.rs/lockkit/latest/lockkit/guide/backends/etcd/index.html> (in this
//! repository: `src/guide/backends/etcd.md`).

mod access;
mod acquire;
mod backend;
mod client;
mod config;
mod coverage;
mod deletions;
mod election;
mod error;
mod held;
mod observe;
mod pending;
mod provider;
mod queue;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use etcd_client;

pub use crate::config::{DEFAULT_PREFIX, DEFAULT_TTL, EtcdLockProviderBuilder, MIN_TTL, OPTIONS};
pub use crate::provider::{EtcdLockProvider, SCHEME};
#[doc(hidden)]
pub use lockkit_core::HoldCoverage;

/// The backend's name in errors and spans.
pub const BACKEND: &str = "etcd";
