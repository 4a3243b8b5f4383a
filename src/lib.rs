//! lockkit: distributed locks with fencing tokens and loss signals, on Redis, ZooKeeper,
//! PostgreSQL, etcd, local files, in process, or a third-party backend, behind one
//! [`LockProvider`].
//!
//! This is the facade crate: application code depends on `lockkit` alone. It re-exports
//! [`lockkit_core`] and holds no lock logic. The network backends are behind features (as the
//! modules `lockkit::redis`, `lockkit::zk`, `lockkit::postgres` and `lockkit::etcd`); the
//! in-process [`memory`] backend and, on Unix, the local-file backend (`lockkit::file`) are
//! always present. [`connect`] picks the backend from a URL (`mem://`, `file:///dir`,
//! `redis://…`, `zk://…`, `postgres://…`, `etcd://…`), so the store is a deployment setting;
//! its docs list the URLs and the options each backend takes.
//!
//! Start with [the guide](guide): a first lock, choosing a backend, fencing end to end, the
//! primitives, running in production, the CLI, writing a backend.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit::Result<()> {
//! // Usually `lockkit::connect_from_env()`, which reads LOCKKIT_URL.
//! let provider = lockkit::connect("mem://").await?;
//! let lock = provider.lock("invoices/2026-11")?;
//! let guard = lock.acquire().await?;
//! // Send guard.token() with every write; stop when guard.lost() fires.
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! - `redis`: the Redis backend, `lockkit::redis`, and `redis://` URLs.
//! - `redis-tls`: `rediss://` (TLS) for the Redis backend.
//! - `zk`: the ZooKeeper backend, `lockkit::zk`, and `zk://` URLs.
//! - `postgres`: the PostgreSQL backend, `lockkit::postgres`, and `postgres://` URLs.
//! - `postgres-tls`: TLS for the PostgreSQL backend (`sslmode=require`, `verify-full`, …).
//! - `etcd`: the etcd backend, `lockkit::etcd`, and `etcd://` URLs.
//! - `fence-postgres`, `fence-sqlx`, `fence-redis`: fenced writes that PostgreSQL (on
//!   tokio-postgres or sqlx) or Redis refuse with a stale token, in [`fence`]; fenced files
//!   are always there on Unix.
//! - `full`: all of them.
//! - `metrics`: metrics through the `metrics` facade, recorded for every backend.
//! - `test-util`: the fault hooks of the memory and file backends (kill a client, cut it off,
//!   delete a record, restart the store), for tests of your own.
//!
//! # A backend's own provider
//!
//! [`connect`] gives a [`LockProvider`], the same type for every backend. A backend's own
//! provider type, with its extras (the Redis record key of a lock, the ZooKeeper client, …),
//! comes back from it with `TryFrom`, which hands the provider back unchanged when it is of
//! another backend:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit::Result<()> {
//! let provider = lockkit::connect("mem://").await?;
//! let memory = lockkit::memory::MemoryLockProvider::try_from(provider).expect("a mem:// URL");
//! let guard = memory.lock("reports")?.acquire().await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The guide: how to use lockkit, from a first lock to production; every example in it is a
/// doc test.
pub mod guide;
mod url;

pub use lockkit_core::*;
pub use url::{DEFAULT_URL, URL_ENV, connect, connect_from_env, register_builtin_schemes, schemes, url_from_env};

/// The Redis backend (feature `redis`): [`RedisLockProvider`](lockkit_redis::RedisLockProvider).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lockkit_redis as redis;

/// The ZooKeeper backend (feature `zk`): [`ZkLockProvider`](lockkit_zk::ZkLockProvider).
#[cfg(feature = "zk")]
#[cfg_attr(docsrs, doc(cfg(feature = "zk")))]
pub use lockkit_zk as zk;

/// The etcd backend (feature `etcd`): [`EtcdLockProvider`](lockkit_etcd::EtcdLockProvider).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lockkit_etcd as etcd;
/// The PostgreSQL backend (feature `postgres`): [`PostgresLockProvider`](lockkit_postgres::PostgresLockProvider).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lockkit_postgres as postgres;

/// The local-file backend (Unix): [`FileLockProvider`](lockkit_file::FileLockProvider).
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub use lockkit_file as file;

/// Fencing at the resource ([`lockkit_fence`]): writes that the store holding the data refuses
/// when their token is stale. Files on Unix always; PostgreSQL with `fence-postgres` or
/// `fence-sqlx`, Redis with `fence-redis`.
pub use lockkit_fence as fence;
