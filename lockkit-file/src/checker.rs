//! The file backend's state ([`FileBackend`]): its settings, the holds the checker looks
//! after, and the checker task, which signals a hold lost when its file is deleted or replaced
//! and frees a hold at its maximum hold; with the `test-util` feature, the fault hooks.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use lockkit_core::backend::HoldSignal;
use lockkit_core::{Error, LockName, LossReason, Result};
use tracing::Instrument;

use crate::BACKEND;
use crate::config::{Settings, SplitDowngrade};
use crate::lockfile::FileId;
use crate::names::{LockFiles, lock_files};
use crate::open_hold::{HoldFiles, OpenHold};
use crate::wakeups;

/// The file backend of one provider.
#[derive(Debug)]
pub(crate) struct FileBackend {
    pub(crate) me: Weak<FileBackend>,
    pub(crate) settings: Settings,
    pub(crate) watched: Mutex<Watched>,
    /// Set by the `kill` fault hook: the provider acts as a dead process.
    pub(crate) killed: std::sync::atomic::AtomicBool,
    /// Set by the `split_downgrades` fault hook.
    #[cfg(feature = "test-util")]
    pub(crate) split_downgrades: Mutex<Option<SplitDowngrade>>,
    /// The inotify instances of this provider's election observers, for the
    /// `drop_observer_watches` fault hook.
    #[cfg(feature = "test-util")]
    pub(crate) observers: Mutex<Vec<Weak<crate::watch::Shared>>>,
}

/// The holds of this provider that the checker looks after.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub(crate) holds: HashMap<u64, WatchedHold>,
    pub(crate) last_id: u64,
    pub(crate) checker: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Debug)]
pub(crate) struct WatchedHold {
    /// The file whose deletion ends the hold: the lock file, or a permit's record file.
    pub(crate) path: PathBuf,
    pub(crate) file: FileId,
    pub(crate) signal: HoldSignal,
    /// The path of the name's lock file, whose waiters the end of the hold wakes.
    pub(crate) wake: PathBuf,
    /// The hold's files, which the checker frees at the hold's maximum hold.
    pub(crate) open: Weak<Mutex<OpenHold>>,
    /// Other descriptors of every file the hold locks, for the `kill` fault hook.
    #[cfg(feature = "test-util")]
    pub(crate) duplicates: Vec<std::fs::File>,
    /// Set by the `kill` fault hook: the hold's process is "dead", so freeing it later must
    /// not write to files another holder may own by then.
    #[cfg(feature = "test-util")]
    pub(crate) inert: Arc<std::sync::atomic::AtomicBool>,
}

impl FileBackend {
    pub(crate) fn new(settings: Settings) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            settings,
            watched: Mutex::default(),
            killed: Default::default(),
            #[cfg(feature = "test-util")]
            split_downgrades: Mutex::default(),
            #[cfg(feature = "test-util")]
            observers: Mutex::default(),
        })
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn lock_files(&self, lock: &LockName) -> LockFiles {
        lock_files(&self.settings.dir, lock)
    }

    pub(crate) fn watched(&self) -> MutexGuard<'_, Watched> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Has the checker look after a hold; starts the checker if it is not running.
    pub(crate) fn watch(
        &self,
        held: &HoldFiles,
        open: &OpenHold,
        wake: &Path,
        signal: &HoldSignal,
        files: Weak<Mutex<OpenHold>>,
    ) -> u64 {
        #[cfg(not(feature = "test-util"))]
        let _ = open;
        let (path, file) = held.watched();
        let mut watched = self.watched();
        watched.last_id += 1;
        let id = watched.last_id;
        let hold = WatchedHold {
            path,
            file,
            signal: signal.clone(),
            wake: wake.to_path_buf(),
            open: files,
            #[cfg(feature = "test-util")]
            duplicates: held.duplicates(),
            #[cfg(feature = "test-util")]
            inert: Arc::clone(&open.inert),
        };
        watched.holds.insert(id, hold);
        // On lockkit's home runtime: the checks never depend on the runtime the hold came from.
        if watched.checker.as_ref().is_none_or(tokio::task::JoinHandle::is_finished)
            && let Some(runtime) = lockkit_core::home::runtime()
        {
            let task = check_forever(self.me.clone(), self.settings.check_every);
            let span = tracing::debug_span!("lockkit.file.checker", dir = %self.settings.dir.display());
            watched.checker = Some(runtime.spawn(task.instrument(span)));
        }
        id
    }

    pub(crate) fn unwatch(&self, id: u64) {
        self.watched().holds.remove(&id);
    }

    /// Fails every operation of a provider that the `kill` fault hook has killed.
    pub(crate) fn alive(&self, lock: &LockName) -> Result<()> {
        if self.killed.load(std::sync::atomic::Ordering::SeqCst) {
            let gone = io::Error::new(io::ErrorKind::NotConnected, "this provider was killed");
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
            hold.inert.store(true, std::sync::atomic::Ordering::SeqCst);
            for duplicate in &hold.duplicates {
                if let Err(error) = crate::lockfile::unlock(duplicate) {
                    tracing::debug!(%error, path = %hold.path.display(), "could not let go of a killed provider's flock");
                }
            }
            hold.signal.lose(LossReason::ClientClosed);
            wakeups::notify(&hold.wake);
        }
    }

    /// The `split_downgrades` fault hook.
    #[cfg(feature = "test-util")]
    pub(crate) fn split_downgrades(&self, split: Option<SplitDowngrade>) {
        *self.split_downgrades.lock().unwrap_or_else(PoisonError::into_inner) = split;
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn split_downgrade(&self) -> Option<SplitDowngrade> {
        *self.split_downgrades.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(not(feature = "test-util"))]
    pub(crate) fn split_downgrade(&self) -> Option<SplitDowngrade> {
        None
    }

    /// The `drop_observer_watches` fault hook: removes the inotify watch of every live
    /// observer of this provider; returns how many were removed.
    #[cfg(feature = "test-util")]
    pub(crate) fn drop_observer_watches(&self) -> usize {
        let observers: Vec<Arc<crate::watch::Shared>> = {
            let mut observers = self.observers.lock().unwrap_or_else(PoisonError::into_inner);
            observers.retain(|observer| observer.strong_count() > 0);
            observers.iter().filter_map(Weak::upgrade).collect()
        };
        observers.iter().filter(|observer| observer.drop_watch()).count()
    }

    /// Adds the record file a downgrade created to the files the `kill` hook lets go of.
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_also(&self, id: u64, duplicate: std::fs::File) {
        if let Some(hold) = self.watched().holds.get_mut(&id) {
            hold.duplicates.push(duplicate);
        }
    }
}

/// The checker: one task per provider, running while it has holds, checks every
/// `every` that each held lock file (or permit record) is still the file its path names. A
/// deleted or replaced lock file no longer excludes anyone, so its hold is lost. A hold past
/// its maximum hold (which has no lease to run out) is freed, at its cap or within `every`
/// of it.
async fn check_forever(backend: Weak<FileBackend>, every: Duration) {
    let mut next = every;
    loop {
        tokio::time::sleep(next).await;
        let Some(backend) = backend.upgrade() else { return };
        free_capped(&backend).await;
        let holds: Vec<(u64, PathBuf, FileId)> = {
            let mut watched = backend.watched();
            if watched.holds.is_empty() {
                watched.checker = None;
                return;
            }
            let now = Instant::now();
            let cap = watched.holds.values().filter_map(|hold| hold.signal.cap()).min();
            next = cap.map_or(every, |cap| cap.saturating_duration_since(now).clamp(Duration::from_millis(1), every));
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
                tracing::debug!(path = %hold.path.display(), "the held file was deleted or replaced");
                hold.signal.lose(LossReason::RecordGone);
                // Waiters of this process may take the lock's new file at once.
                wakeups::notify(&hold.wake);
            }
        }
    }
}

/// Frees the holds past their maximum hold: their guards have been told
/// ([`LossReason::MaxHoldReached`]); a file hold has no lease that would end it otherwise.
async fn free_capped(backend: &FileBackend) {
    let capped: Vec<WatchedHold> = {
        let mut watched = backend.watched();
        let ids: Vec<u64> =
            watched.holds.iter().filter(|(_, hold)| hold.signal.past_cap()).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| watched.holds.remove(&id)).collect()
    };
    for hold in capped {
        // Records the loss if nobody looked yet (the first end wins).
        let _ = hold.signal.is_held();
        let Some(open) = hold.open.upgrade() else { continue };
        tracing::debug!(path = %hold.path.display(), "freeing a hold past its maximum hold");
        // The checker's duplicates of the files go first, as in a release.
        drop(hold);
        let job = move || {
            let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
            open.lost = Some(LossReason::MaxHoldReached);
            let _ = open.free();
        };
        if let Err(error) = tokio::task::spawn_blocking(job).await {
            tracing::debug!(%error, "could not free a hold past its maximum hold");
        }
    }
}
