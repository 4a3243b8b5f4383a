//! Fencing at the resource: writes that the store holding the data refuses when their
//! fencing token is stale, on PostgreSQL, Redis and files.
//!
//! A lock's fencing token protects nothing until the store that holds the data checks it: a
//! holder paused past its lease (a GC pause, a stopped VM, a slow network) wakes up believing
//! it still holds the lock and writes. Here the store itself refuses that write. Each check
//! is atomic with the write it guards (one transaction, one script, one atomic replace), and a
//! stale token is a typed error, [`FenceError::Stale`] `{ token, highest }`, never a silent
//! no-op.
//!
//! A guard gives everything a store needs with [`LockGuard::fence`](lockkit_core::LockGuard::fence):
//! the lock's identity (store and name: tokens are comparable only within one lock), the
//! token, and whether the hold writes or reads. A resource is bound to the lock of its first
//! write, and a token of another lock is refused ([`FenceError::ForeignLock`]) rather than
//! compared.
//!
//! | store | module | feature | the write and its check |
//! |---|---|---|---|
//! | PostgreSQL | `postgres` | `postgres` (tokio-postgres), `sqlx` | one statement in your transaction, pipelined with your write, or a fenced table: the token in your own row, checked by a trigger on your one `UPDATE`; SQL for any language |
//! | Redis | `redis` | `redis` | one script call: set, delete, hash set, … or a script of yours; Cluster and Sentinel |
//! | files | [`file`](mod@file) | Unix | an atomic replace or an append under an `flock` |
//!
//! Every sink implements [`FenceSink`], and the conformance kit's
//! `lockkit_testkit::fence_conformance!` checks a sink (yours too) against the contract's
//! fencing behaviours with one line.
//!
//! # Readers
//!
//! A write is refused below the highest token the resource has accepted; a read (a read
//! guard's fence) is refused below the highest token a *write* carried, so readers of a
//! read-write lock may come back in any order. A read never raises the highest token and
//! records nothing (contract behaviour 30): reading would otherwise be a write at the store
//! (a row update and its WAL in PostgreSQL, readers queued on that row, a file rewritten and
//! flushed), and a store read on a replica could not fence at all. What this leaves open: a
//! stale writer whose lock was since taken only by readers can still land its write after
//! their reads (no newer write is overwritten; no read is torn, as each read is one atomic
//! step of the store). A reader that needs the data not to change until it is done reads it
//! in one step: one transaction (the PostgreSQL check holds the fence row `FOR SHARE` until
//! the transaction ends), one script, one file read.
//!
//! # Example
//!
//! ```
//! use lockkit_core::memory::MemoryLockProvider;
//! use lockkit_fence::{FenceError, file::FileFence};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! let provider = MemoryLockProvider::new();
//! let lock = provider.lock("ledger")?;
//! let files = FileFence::new(tmp.path());
//!
//! let old = lock.acquire().await?;
//! let old_fence = old.fence();
//! drop(old); // its lease ran out, say, while it was paused
//!
//! let new = lock.acquire().await?;
//! files.replace("ledger.csv", &new.fence(), b"written by the new holder".to_vec()).await?;
//!
//! // The old holder wakes up and writes: the file system refuses.
//! let refused = files.replace("ledger.csv", &old_fence, b"stale".to_vec()).await;
//! assert!(matches!(refused, Err(FenceError::Stale { .. })));
//! # Ok(())
//! # }
//! ```
//!
//! See the README of this crate for fencing end to end (with `lockkit run` and `psql`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod rule;
mod sink;

#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod file;
#[cfg(any(feature = "postgres", feature = "sqlx"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres", feature = "sqlx"))))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

pub use error::FenceError;
pub use lockkit_core::{Fence, FenceMode, LockId};
pub use rule::{MAX_RESOURCE_LEN, check_resource, decide};
pub use sink::{FenceSink, FenceState};
