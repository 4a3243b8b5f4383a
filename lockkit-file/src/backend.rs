//! The file lock protocol: acquire (with waiting), release, loss detection and inspection.
//! Everything generic (reentrancy, timeouts, guards) is in lockkit-core; this module only
//! speaks files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, LockBackend, LockInfo, OwnerMeta};
use lockkit_core::{Capabilities, Error, FencingToken, LockName, LossReason, Result};
use tracing::Instrument;

use crate::BACKEND;
use crate::lockfile::{self, FileId, LockedFile, Probe};
use crate::names::lock_path;
use crate::record::{Record, next_token};
use crate::wakeups;

/// The checked settings of a provider.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The lock directory, canonical.
    pub(crate) dir: PathBuf,
    /// The first pause of a waiter between two tries (the cross-process safety net).
    pub(crate) poll_min: Duration,
    /// The longest pause of a waiter between two tries.
    pub(crate) poll_max: Duration,
    /// How often held lock files are checked for deletion.
    pub(crate) check_every: Duration,
}

/// The file backend of one provider.
#[derive(Debug)]
pub(crate) struct FileBackend {
    me: Weak<FileBackend>,
    settings: Settings,
    watched: Mutex<Watched>,
    /// Set by the `kill` fault hook: the provider acts as a dead process.
    killed: std::sync::atomic::AtomicBool,
}

/// The holds of this provider that the checker looks after.
#[derive(Debug, Default)]
struct Watched {
    holds: HashMap<u64, WatchedHold>,
    last_id: u64,
    checker: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Debug)]
struct WatchedHold {
    path: PathBuf,
    file: FileId,
    signal: HoldSignal,
    /// A second descriptor of the locked file, for the `kill` fault hook.
    #[cfg(feature = "test-util")]
    duplicate: Option<std::fs::File>,
}

impl FileBackend {
    pub(crate) fn new(settings: Settings) -> Arc<Self> {
        Arc::new_cyclic(|me| Self { me: me.clone(), settings, watched: Mutex::default(), killed: Default::default() })
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn lock_path(&self, lock: &LockName) -> PathBuf {
        lock_path(&self.settings.dir, lock)
    }

    fn watched(&self) -> MutexGuard<'_, Watched> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn acquire_inner(&self, request: AcquireRequest, path: PathBuf) -> Result<Option<Grant>> {
        let wake = wakeups::interest(&path);
        let mut pause = self.settings.poll_min;
        loop {
            // Armed before the try, so that a release between the try and the wait wakes us.
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(hold) = self.try_once(&request, &path).await? {
                return Ok(Some(self.grant(request.lock, hold)));
            }
            let wait = match request.deadline {
                Deadline::Now => return Ok(None),
                Deadline::At(at) => match at.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => pause.min(left),
                    _ => return Ok(None),
                },
                Deadline::Never => pause,
            };
            let span = tracing::debug_span!("lockkit.wait", backend = BACKEND, lock = %request.lock, at_most = ?wait);
            async {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            .instrument(span)
            .await;
            pause = (pause * 2).min(self.settings.poll_max);
        }
    }

    /// One non-blocking try, on a blocking thread (it may wait for the disk). If this future
    /// is dropped while the try runs, the try's result is dropped when it finishes, and a
    /// hold it took is freed then.
    async fn try_once(&self, request: &AcquireRequest, path: &Path) -> Result<Option<OpenHold>> {
        let holder = OwnerMeta::current(request.attempt);
        let job = {
            let path = path.to_path_buf();
            move || take(path, holder)
        };
        let outcome = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn_blocking(job).await.map_err(|error| {
                Error::backend(BACKEND, Some(&request.lock), error).with_context("the file operation did not finish")
            })?,
            Err(_) => job(),
        };
        outcome.map_err(|error| io_error(&request.lock, path, error))
    }

    fn grant(&self, lock: LockName, hold: OpenHold) -> Grant {
        let signal = HoldSignal::new(BACKEND, lock.clone(), None);
        let token = FencingToken::new(hold.token);
        let watch_id = hold.locked.as_ref().map(|locked| self.watch(locked, &signal));
        let held = FileHeld { hold, lock, watch_id, backend: self.me.clone() };
        Grant::new(token, signal, Box::new(held))
    }

    /// Has the checker look after a hold; starts the checker if it is not running.
    fn watch(&self, locked: &LockedFile, signal: &HoldSignal) -> u64 {
        let mut watched = self.watched();
        watched.last_id += 1;
        let id = watched.last_id;
        let hold = WatchedHold {
            path: locked.path().to_path_buf(),
            file: locked.id(),
            signal: signal.clone(),
            #[cfg(feature = "test-util")]
            duplicate: locked.duplicate().ok(),
        };
        watched.holds.insert(id, hold);
        if watched.checker.as_ref().is_none_or(tokio::task::JoinHandle::is_finished)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let task = check_forever(self.me.clone(), self.settings.check_every);
            let span = tracing::debug_span!("lockkit.file.checker", dir = %self.settings.dir.display());
            watched.checker = Some(runtime.spawn(task.instrument(span)));
        }
        id
    }

    fn unwatch(&self, id: u64) {
        self.watched().holds.remove(&id);
    }

    /// Fails every operation of a provider that the `kill` fault hook has killed.
    fn alive(&self, lock: &LockName) -> Result<()> {
        if self.killed.load(std::sync::atomic::Ordering::SeqCst) {
            let gone = std::io::Error::new(std::io::ErrorKind::NotConnected, "this provider was killed");
            return Err(Error::connection(BACKEND, Some(lock), gone));
        }
        Ok(())
    }

    /// The `kill` fault hook: lets go of every flock this provider holds, as the death of its
    /// process would, and reports its holds lost with [`LossReason::ClientClosed`]; later
    /// operations fail with a connection error.
    #[cfg(feature = "test-util")]
    pub(crate) fn kill(&self) {
        self.killed.store(true, std::sync::atomic::Ordering::SeqCst);
        let holds: Vec<WatchedHold> = self.watched().holds.drain().map(|(_, hold)| hold).collect();
        for hold in holds {
            if let Some(duplicate) = &hold.duplicate
                && let Err(error) = crate::lockfile::unlock(duplicate)
            {
                tracing::debug!(%error, path = %hold.path.display(), "could not let go of a killed provider's flock");
            }
            hold.signal.lose(LossReason::ClientClosed);
            wakeups::notify(&hold.path);
        }
    }
}

/// The checker: one task per provider, running while it has holds, checks every
/// `every` that each held lock file is still the file its path names. A deleted or
/// replaced lock file no longer excludes anyone, so its hold is lost.
async fn check_forever(backend: Weak<FileBackend>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(backend) = backend.upgrade() else { return };
        let holds: Vec<(u64, PathBuf, FileId)> = {
            let mut watched = backend.watched();
            if watched.holds.is_empty() {
                watched.checker = None;
                return;
            }
            watched.holds.iter().map(|(id, hold)| (*id, hold.path.clone(), hold.file)).collect()
        };
        // One stat per hold: on a blocking thread, as there may be many.
        let gone = tokio::task::spawn_blocking(move || {
            let mut gone = Vec::new();
            for (id, path, file) in holds {
                match file.is_at(&path) {
                    Ok(true) => {}
                    Ok(false) => gone.push(id),
                    Err(error) => tracing::debug!(%error, path = %path.display(), "cannot check a held lock file"),
                }
            }
            gone
        })
        .await
        .unwrap_or_default();
        for id in gone {
            if let Some(hold) = backend.watched().holds.remove(&id) {
                hold.signal.lose(LossReason::RecordGone);
            }
        }
    }
}

/// Takes the lock file at `path` if free, issues the next token and records the holder,
/// on disk before returning.
fn take(path: PathBuf, holder: OwnerMeta) -> std::io::Result<Option<OpenHold>> {
    let Some(locked) = lockfile::try_lock(&path)? else { return Ok(None) };
    let token = next_token(locked.read_record()?.token);
    // From here on, dropping `hold` frees the lock (an error below included).
    let hold = OpenHold { locked: Some(locked), token, path };
    if let Some(locked) = &hold.locked {
        locked.write_record(&Record { token: Some(token), holder: Some(holder) }, true)?;
    }
    Ok(Some(hold))
}

fn io_error(lock: &LockName, path: &Path, error: std::io::Error) -> Error {
    Error::backend(BACKEND, Some(lock), error).with_context(format!("lock file {}", path.display()))
}

/// A locked lock file with its token: frees the lock when dropped.
#[derive(Debug)]
struct OpenHold {
    locked: Option<LockedFile>,
    token: u64,
    /// The path the process-wide wake-ups know the file by.
    path: PathBuf,
}

impl OpenHold {
    /// Marks the record free (keeping the token), closes the file (which frees the flock),
    /// and wakes the waiters of this process. Returns whether the path still named the file,
    /// that is whether the hold was still a hold.
    fn free(&mut self) -> bool {
        let Some(locked) = self.locked.take() else { return true };
        let linked = locked.is_linked().unwrap_or(true);
        if let Err(error) = locked.write_record(&Record { token: Some(self.token), holder: None }, false) {
            tracing::debug!(%error, path = %self.path.display(), "could not mark a released lock file free");
        }
        drop(locked);
        wakeups::notify(&self.path);
        linked
    }
}

impl Drop for OpenHold {
    fn drop(&mut self) {
        self.free();
    }
}

/// The file backend's record of one granted hold.
struct FileHeld {
    hold: OpenHold,
    lock: LockName,
    watch_id: Option<u64>,
    backend: Weak<FileBackend>,
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
    async fn release(mut self: Box<Self>) -> Result<()> {
        if self.hold.free() { Ok(()) } else { Err(Error::lost(BACKEND, &self.lock, LossReason::RecordGone)) }
    }
}

#[async_trait]
impl LockBackend for FileBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn address(&self) -> Option<String> {
        Some(format!("file://{}", self.settings.dir.display()))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fencing_survives_restart: true,
            loss_notification: true,
            inspect: true,
            cross_process: true,
            ..Capabilities::NONE
        }
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        self.alive(&request.lock)?;
        let path = self.lock_path(&request.lock);
        let span = tracing::debug_span!("lockkit.file.acquire", lock = %request.lock, attempt = %request.attempt);
        self.acquire_inner(request, path).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let path = self.lock_path(lock);
        let probe = lockfile::probe(&path).map_err(|error| io_error(lock, &path, error))?;
        let holders = match probe {
            Probe::Found { record: Record { token: Some(token), holder: Some(holder) }, held: true } => {
                vec![holder.holder(FencingToken::new(token))]
            }
            Probe::Found { .. } | Probe::Missing => Vec::new(),
        };
        Ok(LockInfo::new(holders, None))
    }
}
