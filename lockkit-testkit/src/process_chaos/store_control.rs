//! The store's control a multi-process run takes for its store faults ([`StoreControl`]), and
//! the control of a store known by its pid only ([`StorePid`]). Implemented for the kit's
//! fixtures in `store.rs`. A leaf but for the signals.

use std::time::Duration;

use async_trait::async_trait;

use super::signals::signal;

/// The store's control, for the store faults of a run. `pick` is a number drawn from the
/// seed: a store of several members chooses the member with it (a single server ignores it).
#[async_trait]
pub trait StoreControl: Send + Sync + std::fmt::Debug {
    /// Suspends the store (or the member `pick` chooses) until [`resume`](Self::resume).
    ///
    /// # Errors
    ///
    /// A message when the store cannot be paused.
    async fn pause(&self, pick: u64) -> Result<(), String>;

    /// Resumes what [`pause`](Self::pause) with the same `pick` suspended.
    ///
    /// # Errors
    ///
    /// A message when the store cannot be resumed.
    async fn resume(&self, pick: u64) -> Result<(), String>;

    /// Stops the store (or the member `pick` chooses), keeps it down for about `down` where
    /// it can, starts it again and returns once it serves.
    ///
    /// # Errors
    ///
    /// A message when the store cannot be stopped or does not serve again.
    async fn restart(&self, pick: u64, down: Duration) -> Result<(), String>;
}

/// A store process the run knows by its pid only: pauses with `SIGSTOP`/`SIGCONT`; it cannot
/// restart it (a [`ProcessFault::RestartStore`](super::ProcessFault::RestartStore) drawn on it is an error of the run).
#[derive(Clone, Copy, Debug)]
pub struct StorePid(pub u32);

#[async_trait]
impl StoreControl for StorePid {
    async fn pause(&self, _pick: u64) -> Result<(), String> {
        signal(self.0, "STOP").await
    }

    async fn resume(&self, _pick: u64) -> Result<(), String> {
        signal(self.0, "CONT").await
    }

    async fn restart(&self, _pick: u64, _down: Duration) -> Result<(), String> {
        Err(format!("cannot restart the store process {}: the run knows its pid only", self.0))
    }
}
