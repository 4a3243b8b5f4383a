//! The file backend's granted hold ([`FileHeld`]): release (a candidate resigns under the
//! fence), release at once on drop, and downgrade.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use lockkit_core::backend::{HeldLock, HoldSignal};
use lockkit_core::{Error, HoldKind, LockName, LossReason, Result};
use tracing::Instrument;

use crate::BACKEND;
use crate::blocking::{io_error, run_blocking};
use crate::checker::FileBackend;
use crate::names::LockFiles;
use crate::open_hold::{Downgraded, OpenHold, downgrade_blocking};
use crate::wakeups;

/// The file backend's record of one granted hold.
pub(crate) struct FileHeld {
    /// Shared with a downgrade in flight.
    pub(crate) hold: Arc<Mutex<OpenHold>>,
    pub(crate) files: LockFiles,
    pub(crate) lock: LockName,
    pub(crate) kind: HoldKind,
    pub(crate) signal: HoldSignal,
    pub(crate) watch_id: Option<u64>,
    pub(crate) backend: Weak<FileBackend>,
}

impl Drop for FileHeld {
    fn drop(&mut self) {
        if let (Some(id), Some(backend)) = (self.watch_id, self.backend.upgrade()) {
            backend.unwatch(id);
        }
    }
}

#[async_trait]
impl HeldLock for FileHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        // First the checker's record of the hold: with the `kill` hook compiled in, it keeps
        // other descriptors of the locked files, and a flock lasts as long as any descriptor
        // of its open file; closed after `free`, they would keep the lock held past the
        // wake-up of its waiters, who would then find it still taken.
        if let (Some(id), Some(backend)) = (self.watch_id, self.backend.upgrade()) {
            backend.unwatch(id);
        }
        let span = tracing::debug_span!("lockkit.file.release", lock = %self.lock, kind = ?self.kind);
        let freed = if matches!(self.kind, HoldKind::Candidate { .. }) {
            // A candidate resigns under the fence, which may be busy for an instant.
            let hold = Arc::clone(&self.hold);
            let job = move || hold.lock().unwrap_or_else(PoisonError::into_inner).free();
            run_blocking(&self.lock, job).instrument(span).await?
        } else {
            span.in_scope(|| self.hold.lock().unwrap_or_else(PoisonError::into_inner).free())
        };
        freed.map_err(|reason| Error::lost(BACKEND, &self.lock, reason))
    }

    /// Every hold but a candidate's is freed without waiting (a candidate resigns under the
    /// fence): a dropped guard frees its lock before `drop` returns.
    fn release_at_once(&mut self) -> Option<Result<()>> {
        if matches!(self.kind, HoldKind::Candidate { .. }) {
            return None;
        }
        if let (Some(id), Some(backend)) = (self.watch_id.take(), self.backend.upgrade()) {
            backend.unwatch(id);
        }
        let _entered = tracing::debug_span!("lockkit.file.release", lock = %self.lock, kind = ?self.kind).entered();
        let freed = self.hold.lock().unwrap_or_else(PoisonError::into_inner).free();
        Some(freed.map_err(|reason| Error::lost(BACKEND, &self.lock, reason)))
    }

    fn downgrade(&self) -> Option<Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>> {
        if self.kind != HoldKind::Write {
            return None;
        }
        let (hold, files, lock) = (self.hold.clone(), self.files.clone(), self.lock.clone());
        let (backend, signal, watch_id) = (self.backend.clone(), self.signal.clone(), self.watch_id);
        Some(Box::pin(async move {
            let backend = backend.upgrade();
            if let Some(backend) = &backend {
                backend.alive(&lock)?;
            }
            let split = backend.as_ref().and_then(|backend| backend.split_downgrade());
            let wake = files.lock.clone();
            let job = move || downgrade_blocking(&hold, &files, split);
            let outcome = run_blocking(&lock, job).await?.map_err(|error| io_error(&lock, &wake, error))?;
            match outcome {
                Downgraded::Done(duplicate) => {
                    #[cfg(feature = "test-util")]
                    if let (Some(backend), Some(id), Some(duplicate)) = (&backend, watch_id, duplicate) {
                        backend.watch_also(id, duplicate);
                    }
                    #[cfg(not(feature = "test-util"))]
                    let _ = (duplicate, watch_id);
                    // Readers of this process may join now.
                    wakeups::notify(&wake);
                    Ok(())
                }
                Downgraded::NotHeld => Ok(()),
                Downgraded::Lost => {
                    if let (Some(backend), Some(id)) = (&backend, watch_id) {
                        backend.unwatch(id);
                    }
                    tracing::debug!(lock = %lock, "the flock was lost while converting it to a shared one");
                    signal.lose(LossReason::OwnedByAnother);
                    wakeups::notify(&wake);
                    Err(Error::lost(BACKEND, &lock, LossReason::OwnedByAnother))
                }
            }
        }))
    }
}
