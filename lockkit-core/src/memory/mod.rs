//! The in-process backend: the executable reference of the contract and the embedded default.
//!
//! A [`MemoryStore`] plays the server; each [`MemoryLockProvider`] is one client of it with a
//! session of its own, as a ZooKeeper client has. Without a lease (the default) a hold lasts
//! until released. With a lease, the client renews its session from one watchdog task per
//! provider, every hold of the client is guaranteed until the send time of the last confirmed
//! renewal plus the lease minus the drift margin, and the store frees the holds of a session
//! that stops renewing when the lease runs out.
//!
//! The fault hooks (feature `test-util`: `MemoryLockProvider::kill` and `partition`,
//! `MemoryStore::delete_record` and `restart`) make holds lost for real, so every loss case
//! of the conformance kit runs against this backend too.
//!
//! URLs: `mem://NAME` (one store per NAME per process; `mem://` is the store named ""), with
//! the option `lease` (and `renew_every`, `drift`).
//!
//! ```
//! use lockkit_core::memory::MemoryLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! let provider = MemoryLockProvider::new();
//! let lock = provider.lock("orders/42")?;
//! let guard = lock.acquire().await?;
//! println!("holding {} with token {}", guard.name(), guard.token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod provider;
mod store;

use crate::LockProvider;
use crate::config::{ConnectFuture, Scheme, StoreUrl};

pub use provider::{MemoryLockProvider, MemoryLockProviderBuilder, OPTIONS};
pub use store::MemoryStore;

pub(crate) const BACKEND: &str = "memory";

/// The `mem` scheme: `mem://NAME` is one store per NAME per process, shared by every connect
/// with that name (each as a client of its own); `mem://` is the store named "".
pub const SCHEME: Scheme = Scheme::new(&["mem"], BACKEND, connect_url)
    .with_urls(&[("mem://NAME", "in-process memory: one store per NAME per process (`mem://` is the one named \"\")")])
    .with_options(OPTIONS);

fn connect_url(url: StoreUrl) -> ConnectFuture {
    Box::pin(async move { MemoryLockProvider::from_url(&url).map(LockProvider::from) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;
    use crate::LockName;
    use crate::config::StoreUrl;

    #[tokio::test]
    async fn cancelled_waiter_is_removed_and_next_is_granted() {
        let store = MemoryStore::new();
        let (a, b, c) = (store.client(), store.client(), store.client());
        let held = a.lock("x").unwrap().acquire().await.unwrap();
        let b_lock = b.lock("x").unwrap();
        let c_lock = c.lock("x").unwrap();
        let b_wait = tokio::time::timeout(Duration::from_millis(20), b_lock.acquire());
        assert!(b_wait.await.is_err());
        let c_task = tokio::spawn(async move { c_lock.acquire().await.map(|g| g.token()) });
        while store.state().locks.get(&LockName::new("x").unwrap()).map_or(0, |e| e.queue.len()) < 1 {
            tokio::task::yield_now().await;
        }
        held.release().await.unwrap();
        assert!(c_task.await.unwrap().is_ok());
    }

    #[test]
    fn max_hold_is_one_setting_read_by_the_shared_code() {
        let built = |url: &str| MemoryLockProvider::from_url(&StoreUrl::parse(url).unwrap());
        let provider = built("mem://max-hold?lease=3s&max_hold=2s").unwrap();
        assert_eq!(provider.max_hold(), Some(Duration::from_secs(2)));
        assert_eq!(provider.min_max_hold(), Duration::from_secs(1));
        let message = built("mem://max-hold?lease=3s&max_hold=500ms").unwrap_err().to_string();
        assert!(message.contains("max_hold is 500ms") && message.contains("at least 1s"), "{message}");
        assert!(built("mem://max-hold?max_hold=soon").unwrap_err().to_string().contains("option max_hold"));
        assert!(built("mem://max-hold?max_hold=2d").unwrap_err().to_string().contains("at most"));
        assert!(built("mem://max-hold?bogus=1").unwrap_err().to_string().contains("max_hold"), "the options listed");
    }

    #[test]
    fn bad_leases_are_refused_with_advice() {
        let err =
            MemoryLockProvider::builder().lease(Duration::from_secs(1)).renew_every(Duration::from_secs(2)).build();
        assert!(err.unwrap_err().to_string().contains("renew_every"));
        assert!(MemoryLockProvider::builder().lease(Duration::ZERO).build().is_err());
        assert!(MemoryLockProvider::builder().drift(Duration::from_millis(1)).build().is_err());
    }
}
