//! The lockkit contract: one [`DistributedLock`] trait for every backend, the
//! [`LockGuard`] it hands out, one [`Error`] type, and [`memory`], the in-process backend.
//!
//! # The model
//!
//! A [`LockProvider`] is a connected client of one backend. It hands out lock handles by
//! name; a handle is one owner. Acquiring returns a [`LockGuard`] that carries
//!
//! - a [`FencingToken`], strictly greater for every fresh acquisition of the name, to send
//!   with each write so the resource can refuse a former holder's late writes;
//! - [`LockGuard::lost`], which resolves when the hold can no longer be guaranteed, and
//!   [`LockGuard::is_held`] / [`LockGuard::valid_until`], the local deadline computed from the
//!   send time of the last confirmed renewal, so a holder learns of a loss no later than
//!   another owner could acquire the lock.
//!
//! Reentrancy, deadlines, cancellation, the loss signal and name validation are written
//! once, in [`LockHandle`]. A backend implements [`backend::LockBackend`]: its store's
//! protocol and nothing more. The conformance kit in `lockkit-testkit` checks that a backend
//! keeps the contract.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_core::memory::MemoryLockProvider;
//! use lockkit_core::{DistributedLock, LockProvider};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! let provider = MemoryLockProvider::new();
//! let first = provider.lock("reports/daily")?;
//! let second = provider.lock("reports/daily")?; // another owner
//!
//! let guard = first.acquire().await?;
//! assert!(second.try_acquire().await?.is_none());
//!
//! let token = guard.token();
//! guard.release().await?;
//! let guard = second.acquire_timeout(Duration::from_secs(1)).await?;
//! assert!(guard.token() > token);
//! # Ok(())
//! # }
//! ```

pub mod backend;
mod capabilities;
mod error;
mod guard;
mod handle;
mod lock;
pub mod memory;
mod name;
mod options;
mod signal;
mod token;

pub use backend::{HolderInfo, LockInfo, OwnerMeta};
pub use capabilities::Capabilities;
pub use error::{BoxError, Error, LossReason, Result};
pub use guard::LockGuard;
pub use handle::LockHandle;
pub use lock::{DistributedLock, LockProvider};
pub use name::LockName;
pub use options::{AcquireOptions, Deadline, Wait};
pub use signal::{HoldEnd, HoldSignal, HoldWatcher, lease_deadline};
pub use token::FencingToken;
