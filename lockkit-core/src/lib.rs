//! The lockkit contract: one [`LockProvider`] and [`LockHandle`] for every backend, the
//! [`LockGuard`] they hand out, one [`Error`] type, and [`memory`], the in-process backend.
//!
//! # The model
//!
//! A [`LockProvider`] is a connected client of one backend. It hands out lock handles by
//! name; a handle is a cheap factory of acquisitions, and **every acquisition is its own
//! owner**, so tasks that share a handle exclude each other. Acquiring returns a
//! [`LockGuard`] that carries
//!
//! - a [`FencingToken`], strictly greater for every fresh acquisition of the name, to send
//!   with each write so the resource can refuse a former holder's late writes;
//! - [`LockGuard::lost`], which resolves when the hold can no longer be guaranteed, and
//!   [`LockGuard::is_held`] / [`LockGuard::valid_until`], the local deadline computed from the
//!   send time of the last confirmed renewal;
//! - [`LockGuard::reenter`], another guard of the same hold for code that needs the lock
//!   again while holding it.
//!
//! Several locks are taken all or nothing, in one canonical order and with one deadline, by a
//! [`MultiLock`]; an operator frees a lock whose holder is stuck with
//! [`LockProvider::break_lock`] (the holder's guard is signalled lost, the next token is
//! greater).
//!
//! Deadlines, cancellation, reentrancy, the loss signal, name validation and the release of
//! dropped guards are written once, here. A backend implements [`backend::LockBackend`]: its
//! store's protocol and nothing more. The conformance kit in `lockkit-testkit` checks that a
//! backend keeps the contract.
//!
//! Applications usually depend on the `lockkit` facade, which re-exports this crate, picks a
//! backend by URL and carries the guide (choosing a backend, fencing end to end, the
//! primitives, running in production, writing a backend):
//! <https://docs.rs/lockkit/latest/lockkit/guide/index.html>.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_core::memory::MemoryLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! let provider = MemoryLockProvider::new();
//! let lock = provider.lock("reports/daily")?;
//!
//! let guard = lock.acquire().await?;
//! assert!(lock.try_acquire().await?.is_none(), "a second acquisition is another owner");
//!
//! let token = guard.token();
//! guard.release().await?;
//! let guard = lock.acquire_timeout(Duration::from_secs(1)).await?;
//! assert!(guard.token() > token);
//! # Ok(())
//! # }
//! ```
//!
//! # What the loss signal promises
//!
//! A guard declares its hold lost no later than its local deadline: the send time of the
//! last acquisition or renewal the store confirmed, plus the lease or session timeout, minus
//! a drift margin. Everything that ends a hold by *time* (a lease or session running out, a
//! connection cut, a paused store or a paused holder) is therefore signalled before another
//! owner can be granted the lock. A record deleted by *someone else* (an operator's `DEL`,
//! `FLUSHALL`, an eviction, a deleted lock file) is signalled as soon as the backend notices
//! (at the latest by the next renewal or check), which can be after another owner was
//! granted the lock. Fencing tokens cover that window: a resource that refuses writes with a
//! token below the highest it has seen refuses the former holder's writes.
//!
//! # A maximum hold
//!
//! [`AcquireOptions::with_max_hold`] (or a provider's default, [`LockProvider::with_max_hold`],
//! URL option `max_hold`) caps a hold: its deadline never goes past the cap, renewal stops
//! there, the guard is signalled lost with [`LossReason::MaxHoldReached`], and the record
//! expires with its lease (a backend whose holds have no lease frees it at the cap). The cap
//! is carried by the hold's signal, so every backend keeps it the same way.
//!
//! # Runtime
//!
//! lockkit runs on Tokio 1.x with the time driver (and the I/O driver for network backends)
//! enabled: `#[tokio::main]` and `#[tokio::test]` do both. A hold lives as long as its guard,
//! whatever happens to the runtime that granted it: renewal, loss detection and the release of
//! dropped guards run on lockkit's [`home`] runtime, a thread of lockkit's own started at the
//! first need, which nothing else drives and which never shuts down. So a provider works from
//! any runtime, also after the runtime that first used it shut down, or while that runtime is
//! alive but not driven (a current-thread runtime whose thread is parked elsewhere). Calls run
//! on the caller's runtime, each runtime with a connection of its own where the store allows
//! (no thread hop on the hot path). A guard may be dropped anywhere (in async code, on a plain
//! thread, after its runtime and its provider are gone): an in-process store frees it before
//! `drop` returns, a network store within a round trip or two; dropping never panics. Timer
//! methods ([`LockHandle::acquire_timeout`], [`LockGuard::lost`]) panic, as every Tokio timer
//! does, when polled outside a runtime with the time driver.
//!
//! # Features
//!
//! - `metrics`: metrics through the `metrics` facade, recorded here for every backend (see
//!   [`metrics`] for the names and labels); without it nothing is recorded and nothing costs.
//! - `test-util`: the fault hooks of the memory backend (`MemoryLockProvider::kill`,
//!   `partition`, `MemoryStore::delete_record`, `restart`), for conformance tests. They are
//!   named here without links so that the documentation builds with and without the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod backoff;
mod capabilities;
pub mod config;
mod election;
mod error;
pub mod fence;
mod guard;
mod handle;
mod handle_inner;
mod hold_coverage;
pub mod home;
mod journal_observer;
mod kind;
mod lock;
pub mod memory;
pub mod metrics;
mod multi;
mod name;
mod observer_task;
mod options;
mod provider;
mod release;
mod renewal;
mod rw_lock;
mod signal;
pub mod sync;
mod token;
mod typed_provider;

pub use backend::{HolderInfo, LockInfo};
pub use capabilities::Capabilities;
pub use election::{Election, Leader, LeaderEvent, MAX_IDENTITY_LEN, Observer};
pub use error::{BoxError, Error, LossReason, NameUse, Result, error_chain};
pub use fence::{Fence, FenceMode, LockId};
pub use guard::LockGuard;
pub use handle::LockHandle;
#[doc(hidden)]
pub use hold_coverage::HoldCoverage;
pub use kind::HoldKind;
pub use lock::DistributedLock;
pub use multi::{MultiGuard, MultiLock, StoreId};
pub use name::LockName;
pub use options::{AcquireOptions, Wait};
pub use provider::{LockProvider, MAX_PERMITS};
pub use renewal::{RenewalCounters, RenewalStats};
pub use rw_lock::RwLock;
pub use signal::{HoldEnd, HoldWatcher};
pub use token::FencingToken;
pub use typed_provider::TypedProvider;

pub(crate) use signal::HoldSignal;
