//! The file lock protocol: acquire (with waiting) every kind of hold, release, downgrade,
//! loss detection, inspection, and the start of an election's observers (which live in
//! [`crate::election`]). Everything generic (reentrancy, timeouts, guards) is in
//! lockkit-core; this module only speaks files. The crate docs describe the protocol; the
//! blocking file operations are in [`crate::lockfile`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Deadline, Grant, HeldLock, HoldSignal, HolderInfo, LeaderEvents, LockBackend, LockInfo, OwnerMeta,
};
use lockkit_core::{Capabilities, Error, FencingToken, HoldKind, LockName, LossReason, Result};
use tracing::Instrument;

use crate::BACKEND;
use crate::lockfile::{self, FenceLock, FileId, HolderFile, LockedFile, Mode, Probe};
use crate::names::{LockFiles, lock_files};
use crate::record::{Fence, Record};
use crate::{election, journal, wakeups};

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
    /// How often an election observer reads the election again without a notification.
    pub(crate) observe_every: Duration,
}

/// The `split_downgrades` fault hook's setting: convert in two steps with a pause between
/// them, as a kernel whose flock conversion is not atomic would, and whether to hold the
/// gate meanwhile.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub(crate) struct SplitDowngrade {
    pub(crate) pause: Duration,
    pub(crate) gate: bool,
}

/// The file backend of one provider.
#[derive(Debug)]
pub(crate) struct FileBackend {
    me: Weak<FileBackend>,
    settings: Settings,
    watched: Mutex<Watched>,
    /// Set by the `kill` fault hook: the provider acts as a dead process.
    killed: std::sync::atomic::AtomicBool,
    /// Set by the `split_downgrades` fault hook.
    #[cfg(feature = "test-util")]
    split_downgrades: Mutex<Option<SplitDowngrade>>,
    /// The inotify instances of this provider's election observers, for the
    /// `drop_observer_watches` fault hook.
    #[cfg(feature = "test-util")]
    observers: Mutex<Vec<Weak<crate::watch::Shared>>>,
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
    /// The file whose deletion ends the hold: the lock file, or a permit's record file.
    path: PathBuf,
    file: FileId,
    signal: HoldSignal,
    /// The path of the name's lock file, whose waiters the end of the hold wakes.
    wake: PathBuf,
    /// The hold's files, which the checker frees at the hold's maximum hold.
    open: Weak<Mutex<OpenHold>>,
    /// Other descriptors of every file the hold locks, for the `kill` fault hook.
    #[cfg(feature = "test-util")]
    duplicates: Vec<std::fs::File>,
    /// Set by the `kill` fault hook: the hold's process is "dead", so freeing it later must
    /// not write to files another holder may own by then.
    #[cfg(feature = "test-util")]
    inert: Arc<std::sync::atomic::AtomicBool>,
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

    fn watched(&self) -> MutexGuard<'_, Watched> {
        // No code panics while holding this lock; recover the data if a panic ever did.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn acquire_inner(&self, request: AcquireRequest, files: LockFiles) -> Result<Option<Grant>> {
        let wake = wakeups::interest(&files.lock);
        let mut pause = self.settings.poll_min;
        loop {
            // Armed before the try, so that a release between the try and the wait wakes us.
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_once(&request, &files).await? {
                Taken::Held(hold) => return Ok(Some(self.grant(&request, files, hold))),
                Taken::Conflict(what) => return Err(Error::conflict(BACKEND, Some(&request.lock), what)),
                Taken::Unsupported => {
                    return Err(Error::unsupported(BACKEND, Some(&request.lock), request.kind.describe()));
                }
                Taken::Busy => {}
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

    /// One non-blocking try, on a blocking thread (it may wait for the disk, and for the
    /// fence an instant). If this future is dropped while the try runs, the try's result is
    /// dropped when it finishes, and a hold it took is freed then.
    async fn try_once(&self, request: &AcquireRequest, files: &LockFiles) -> Result<Taken> {
        let holder = OwnerMeta::current(request.attempt);
        let job = {
            let (files, kind) = (files.clone(), request.kind.clone());
            move || take(&files, &kind, holder)
        };
        run_blocking(&request.lock, job).await?.map_err(|error| io_error(&request.lock, &files.lock, error))
    }

    fn grant(&self, request: &AcquireRequest, files: LockFiles, hold: Box<OpenHold>) -> Grant {
        let lock = request.lock.clone();
        let signal = HoldSignal::new(BACKEND, lock.clone(), None);
        let token = FencingToken::new(hold.token);
        let hold = Arc::new(Mutex::new(*hold));
        let watch_id = {
            let open = hold.lock().unwrap_or_else(PoisonError::into_inner);
            open.files.as_ref().map(|held| self.watch(held, &open, &files.lock, &signal, Arc::downgrade(&hold)))
        };
        let held = FileHeld {
            hold,
            files,
            lock,
            kind: request.kind.clone(),
            signal: signal.clone(),
            watch_id,
            backend: self.me.clone(),
        };
        Grant::new(token, signal, Box::new(held))
    }

    /// Has the checker look after a hold; starts the checker if it is not running.
    fn watch(
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

    fn unwatch(&self, id: u64) {
        self.watched().holds.remove(&id);
    }

    /// Fails every operation of a provider that the `kill` fault hook has killed.
    fn alive(&self, lock: &LockName) -> Result<()> {
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
                if let Err(error) = lockfile::unlock(duplicate) {
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
    fn split_downgrade(&self) -> Option<SplitDowngrade> {
        *self.split_downgrades.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(not(feature = "test-util"))]
    fn split_downgrade(&self) -> Option<SplitDowngrade> {
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
    fn watch_also(&self, id: u64, duplicate: std::fs::File) {
        if let Some(hold) = self.watched().holds.get_mut(&id) {
            hold.duplicates.push(duplicate);
        }
    }
}

/// Runs a blocking file job on the runtime's blocking threads (or here, outside a runtime).
pub(crate) async fn run_blocking<T: Send + 'static>(
    lock: &LockName,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(job).await.map_err(|error| {
            Error::backend(BACKEND, Some(lock), error).with_context("the file operation did not finish")
        }),
        Err(_) => Ok(job()),
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

/// What one try found.
#[derive(Debug)]
enum Taken {
    /// Granted.
    Held(Box<OpenHold>),
    /// Held by others in a way that excludes this kind.
    Busy,
    /// The name is in use as another kind of lock; the message says how.
    Conflict(String),
    /// A kind this backend does not grant (the core never asks for one).
    Unsupported,
}

/// Tries once to take a hold of `kind` on the lock whose files are `files`, for `holder`;
/// every grant draws its token from the name's fence, on disk before it returns.
fn take(files: &LockFiles, kind: &HoldKind, holder: OwnerMeta) -> io::Result<Taken> {
    match kind {
        HoldKind::Exclusive | HoldKind::Write | HoldKind::Candidate { .. } => take_write(files, kind.clone(), holder),
        HoldKind::Read => take_read(files, holder),
        HoldKind::Permit { permits } => take_permit(files, *permits, holder),
        _ => Ok(Taken::Unsupported),
    }
}

/// A mutex, a writer or a candidate: under the fence (the gate), the lock file's exclusive
/// flock. A candidate's grant also writes its term to the election's journal.
fn take_write(files: &LockFiles, kind: HoldKind, holder: OwnerMeta) -> io::Result<Taken> {
    // Writers try only under the fence, so that whoever holds it (a holder converting its
    // write hold into a read hold, a semaphore's admission, `inspect`, an election observer)
    // never sees a writer take the lock meanwhile.
    let fence = FenceLock::lock(&files.fence)?;
    let Some(main) = lockfile::try_lock(&files.lock, Mode::Exclusive)? else {
        return Ok(match held_as_another_kind(files, &kind)? {
            Some(what) => Taken::Conflict(what),
            None => Taken::Busy,
        });
    };
    let counter = fence.read()?;
    if !lockfile::live_holders(&files.permits)?.is_empty() {
        drop(main);
        wakeups::notify(&files.lock);
        return Ok(Taken::Conflict(semaphore_in_use(counter.permits, &kind)));
    }
    let token = counter.next_token(main.read_record()?.token);
    fence.write(&Fence { token: Some(token), ..counter })?;
    main.write_record(&Record::held(token, holder.clone(), kind.clone()))?;
    if let HoldKind::Candidate { identity } = &kind {
        // Published before the fence is let go, so that observers, who look under it, see
        // the term in the journal whenever they see its holder.
        journal::record_elected(&files.election, token, holder.since, identity)?;
    }
    drop(fence);
    if matches!(kind, HoldKind::Candidate { .. }) {
        wakeups::notify(&files.election);
    }
    Ok(Taken::Held(Box::new(OpenHold::new(HoldFiles::Write(main), token, holder, files, &kind))))
}

/// Why an exclusive try on the lock file failed, when it is because the name is in use as
/// another kind than `asking`: a candidate leads and a lock is asked, or a lock (mutex,
/// writer, readers) holds and a candidate is asked. `None` when the holder is of the same
/// kind, or cannot be told (a release in flight): then it is busy. Under the fence.
fn held_as_another_kind(files: &LockFiles, asking: &HoldKind) -> io::Result<Option<String>> {
    let candidate = matches!(asking, HoldKind::Candidate { .. });
    let what = if candidate { "the election" } else { "the lock" };
    match lockfile::probe(&files.lock)? {
        Probe::Found { held: true, record: Record { holder: Some(_), kind, .. } } => {
            let held = match kind {
                Some(HoldKind::Candidate { .. }) if candidate => return Ok(None),
                Some(HoldKind::Candidate { .. }) => "an election (a candidate leads)",
                _ if !candidate => return Ok(None),
                Some(HoldKind::Write) => "a lock, held by the writer of a read-write lock",
                _ => "a lock, held by a mutex",
            };
            Ok(Some(format!("the name is in use as {held}; give {what} another name")))
        }
        Probe::Found { held: false, .. } if candidate && !lockfile::live_holders(&files.readers)?.is_empty() => {
            Ok(Some(format!("the name is in use as a read-write lock, held by readers; give {what} another name")))
        }
        _ => Ok(None),
    }
}

/// A reader: the lock file's shared flock, then, under the fence, its token and its record.
fn take_read(files: &LockFiles, holder: OwnerMeta) -> io::Result<Taken> {
    let Some(main) = lockfile::try_lock(&files.lock, Mode::Shared)? else {
        // Held exclusively. When the record hints at a candidate, make sure under the fence.
        if lockfile::peek(&files.lock)?.is_some_and(|record| matches!(record.kind, Some(HoldKind::Candidate { .. }))) {
            let fence = FenceLock::lock(&files.fence)?;
            if let Some(what) = held_as_another_kind(files, &HoldKind::Read)? {
                return Ok(Taken::Conflict(what));
            }
            drop(fence);
        }
        return Ok(Taken::Busy);
    };
    let fence = FenceLock::lock(&files.fence)?;
    let counter = fence.read()?;
    if !lockfile::live_holders(&files.permits)?.is_empty() {
        drop(main);
        wakeups::notify(&files.lock);
        return Ok(Taken::Conflict(semaphore_in_use(counter.permits, &HoldKind::Read)));
    }
    let token = counter.next_token(main.read_record()?.token);
    fence.write(&Fence { token: Some(token), ..counter })?;
    let record = HolderFile::create(&files.readers, &Record::held(token, holder.clone(), HoldKind::Read))?;
    drop(fence);
    Ok(Taken::Held(Box::new(OpenHold::new(HoldFiles::Read { main, record }, token, holder, files, &HoldKind::Read))))
}

/// A permit: under the fence, count the live permits and, if one is free, create a locked
/// record file for this one.
fn take_permit(files: &LockFiles, permits: NonZeroU32, holder: OwnerMeta) -> io::Result<Taken> {
    let fence = FenceLock::lock(&files.fence)?;
    if let Some(what) = lock_in_use(files)? {
        return Ok(Taken::Conflict(what));
    }
    let counter = fence.read()?;
    let live = lockfile::live_holders(&files.permits)?;
    if !live.is_empty()
        && let Some(current) = counter.permits
        && current != permits
    {
        return Ok(Taken::Conflict(format!(
            "the semaphore is in use with {current} permits and this handle asks for {permits}; every user of a semaphore must give the same count"
        )));
    }
    if live.len() >= permits.get() as usize {
        return Ok(Taken::Busy);
    }
    let token = counter.next_token(None);
    fence.write(&Fence { token: Some(token), permits: Some(permits) })?;
    let kind = HoldKind::Permit { permits };
    let record = HolderFile::create(&files.permits, &Record::held(token, holder.clone(), kind.clone()))?;
    drop(fence);
    Ok(Taken::Held(Box::new(OpenHold::new(HoldFiles::Permit(record), token, holder, files, &kind))))
}

/// Whether the name is in use as a lock (a writer, a mutex or a candidate holds the lock
/// file, or live readers have records), and how, for a semaphore's admission. Under the
/// fence.
fn lock_in_use(files: &LockFiles) -> io::Result<Option<String>> {
    if let Probe::Found { held: true, record } = lockfile::probe(&files.lock)? {
        let what = match record.kind {
            Some(HoldKind::Write) => "a lock, held by the writer of a read-write lock",
            Some(HoldKind::Candidate { .. }) => "an election (a candidate leads)",
            _ => "a lock, held by a mutex",
        };
        return Ok(Some(format!("the name is in use as {what}; give the semaphore another name")));
    }
    if !lockfile::live_holders(&files.readers)?.is_empty() {
        return Ok(Some(
            "the name is in use as a read-write lock, held by readers; give the semaphore another name".to_owned(),
        ));
    }
    Ok(None)
}

/// The conflict of `asking` (a lock or a candidate) with a semaphore of the name.
fn semaphore_in_use(permits: Option<NonZeroU32>, asking: &HoldKind) -> String {
    let what = if matches!(asking, HoldKind::Candidate { .. }) { "the election" } else { "the lock" };
    match permits {
        Some(permits) => {
            format!("the name is in use as a semaphore of {permits} permits; give {what} another name")
        }
        None => format!("the name is in use as a semaphore; give {what} another name"),
    }
}

/// What `inspect` reports: the writer of the lock file and the live readers and permits,
/// seen under the fence.
fn look(files: &LockFiles) -> io::Result<Vec<HolderInfo>> {
    let used = [&files.fence, &files.lock, &files.readers, &files.permits].iter().any(|path| path.exists());
    if !used {
        // Never used: look without creating anything.
        return Ok(Vec::new());
    }
    let fence = FenceLock::lock(&files.fence)?;
    let counter = fence.read()?;
    let mut holders = Vec::new();
    if let Probe::Found { record: Record { token: Some(token), holder: Some(holder), kind }, held: true } =
        lockfile::probe(&files.lock)?
    {
        holders.push((token, holder, kind.unwrap_or(HoldKind::Exclusive)));
    }
    let permit = HoldKind::Permit { permits: counter.permits.unwrap_or(NonZeroU32::MIN) };
    for (dir, kind) in [(&files.readers, HoldKind::Read), (&files.permits, permit)] {
        for record in lockfile::live_holders(dir)? {
            if let Record { token: Some(token), holder: Some(holder), kind: recorded } = record {
                holders.push((token, holder, recorded.unwrap_or_else(|| kind.clone())));
            }
        }
    }
    drop(fence);
    holders.sort_by_key(|(token, ..)| *token);
    Ok(holders
        .into_iter()
        .map(|(token, holder, kind)| holder.holder(FencingToken::new(token)).with_kind(kind))
        .collect())
}

/// The file backend's break, under the fence: the lock file is deleted when a mutex, a writer
/// or a candidate holds its exclusive flock or readers hold it shared, and so are the live
/// readers' and permit holders' record files. A holder keeps its flock on the unlinked file,
/// which excludes nobody any more: its checker finds the file gone at its next check
/// (`check_every`) and reports [`LossReason::RecordGone`]. The next holder creates a new lock
/// file and draws its token from the fence, which stays. A broken leader's term is closed in
/// the election's journal. Returns the holds broken, as [`look`] shows them.
fn break_holds(files: &LockFiles) -> io::Result<Vec<HolderInfo>> {
    let used = [&files.fence, &files.lock, &files.readers, &files.permits].iter().any(|path| path.exists());
    if !used {
        return Ok(Vec::new());
    }
    let fence = FenceLock::lock(&files.fence)?;
    let counter = fence.read()?;
    let mut broken = Vec::new();
    let mut lock_file_held = false;
    if let Probe::Found { record, held: true } = lockfile::probe(&files.lock)? {
        lock_file_held = true;
        if let Record { token: Some(token), holder: Some(holder), kind } = record {
            if matches!(kind, Some(HoldKind::Candidate { .. })) {
                journal::record_vacant(&files.election, token)?;
            }
            broken.push((token, holder, kind.unwrap_or(HoldKind::Exclusive)));
        }
    }
    let readers = lockfile::live_holder_files(&files.readers)?;
    let permits = lockfile::live_holder_files(&files.permits)?;
    if lock_file_held || !readers.is_empty() {
        remove_if_there(&files.lock)?;
    }
    let permit = HoldKind::Permit { permits: counter.permits.unwrap_or(NonZeroU32::MIN) };
    for (records, kind) in [(readers, HoldKind::Read), (permits, permit)] {
        for (path, record) in records {
            remove_if_there(&path)?;
            if let Record { token: Some(token), holder: Some(holder), kind: recorded } = record {
                broken.push((token, holder, recorded.unwrap_or_else(|| kind.clone())));
            }
        }
    }
    drop(fence);
    if !broken.is_empty() {
        // The waiters of this process may take the lock's new file at once.
        wakeups::notify(&files.lock);
        wakeups::notify(&files.election);
    }
    broken.sort_by_key(|(token, ..)| *token);
    Ok(broken
        .into_iter()
        .map(|(token, holder, kind)| holder.holder(FencingToken::new(token)).with_kind(kind))
        .collect())
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

fn io_error(lock: &LockName, path: &Path, error: io::Error) -> Error {
    Error::backend(BACKEND, Some(lock), error).with_context(format!("the files of lock file {}", path.display()))
}

/// The files a hold locks.
#[derive(Debug)]
enum HoldFiles {
    /// A mutex or a writer: the lock file's exclusive flock.
    Write(LockedFile),
    /// A reader: the lock file's shared flock, and the reader's record file.
    Read { main: LockedFile, record: HolderFile },
    /// A permit: its record file.
    Permit(HolderFile),
}

impl HoldFiles {
    /// The file whose deletion ends the hold, for the checker.
    fn watched(&self) -> (PathBuf, FileId) {
        match self {
            Self::Write(main) | Self::Read { main, .. } => (main.path().to_path_buf(), main.id()),
            Self::Permit(record) => (record.path().to_path_buf(), record.id()),
        }
    }

    /// Other descriptors of every file locked, for the `kill` fault hook.
    #[cfg(feature = "test-util")]
    fn duplicates(&self) -> Vec<std::fs::File> {
        let duplicates = match self {
            Self::Write(main) => vec![main.duplicate()],
            Self::Read { main, record } => vec![main.duplicate(), record.duplicate()],
            Self::Permit(record) => vec![record.duplicate()],
        };
        duplicates.into_iter().filter_map(io::Result::ok).collect()
    }
}

/// A hold's files with its token: frees the hold when dropped.
#[derive(Debug)]
struct OpenHold {
    files: Option<HoldFiles>,
    token: u64,
    /// Who holds it, for the reader record a downgrade writes.
    holder: OwnerMeta,
    /// The name's lock file: the process-wide wake-up of its waiters.
    wake: PathBuf,
    /// Why the hold was lost, when a downgrade lost it.
    lost: Option<LossReason>,
    /// The fence and the journal of the election, for a candidate's hold.
    candidacy: Option<(PathBuf, PathBuf)>,
    /// Set by the `kill` fault hook: free the files without writing to them, as a dead
    /// process would (another holder may own the lock file's record by then).
    inert: Arc<std::sync::atomic::AtomicBool>,
}

impl OpenHold {
    fn new(files: HoldFiles, token: u64, holder: OwnerMeta, names: &LockFiles, kind: &HoldKind) -> Self {
        let candidacy =
            matches!(kind, HoldKind::Candidate { .. }).then(|| (names.fence.clone(), names.election.clone()));
        Self {
            files: Some(files),
            token,
            holder,
            wake: names.lock.clone(),
            lost: None,
            candidacy,
            inert: Arc::default(),
        }
    }

    /// Frees the hold: a writer marks the lock file's record free (keeping the token); a
    /// candidate does so under the fence and writes the end of its term to the journal; a
    /// reader or a permit unlinks its record file; then the files are closed, which frees
    /// the flocks, and the waiters of this process are woken. `Err` with the reason when the
    /// hold was no longer a hold (its file had been deleted, or a downgrade lost it).
    ///
    /// A candidate's release waits for the fence (an instant): run it on a blocking thread.
    fn free(&mut self) -> std::result::Result<(), LossReason> {
        let Some(files) = self.files.take() else { return self.lost.clone().map_or(Ok(()), Err) };
        let inert = self.inert.load(std::sync::atomic::Ordering::SeqCst);
        let linked = match files {
            HoldFiles::Write(main) if inert => main.is_linked().unwrap_or(true),
            HoldFiles::Write(main) => {
                let linked = main.is_linked().unwrap_or(true);
                // A candidate's end is written under the fence, with its journal line, so
                // that observers see both or neither.
                let fence = match &self.candidacy {
                    Some((fence, _)) => match FenceLock::lock(fence) {
                        Ok(fence) => Some(fence),
                        Err(error) => {
                            tracing::debug!(%error, path = %fence.display(), "could not take the fence to resign");
                            None
                        }
                    },
                    None => None,
                };
                if let Err(error) = main.write_record(&Record::free(Some(self.token))) {
                    tracing::debug!(%error, path = %main.path().display(), "could not mark a released lock file free");
                }
                if let (Some(_), Some((_, journal))) = (&fence, &self.candidacy)
                    && let Err(error) = journal::record_vacant(journal, self.token)
                {
                    tracing::debug!(%error, path = %journal.display(), "could not write the end of a term");
                }
                // The lock file first, the fence after: a candidate waiting for the fence
                // then finds the lock free.
                drop(main);
                drop(fence);
                if let Some((_, journal)) = &self.candidacy {
                    wakeups::notify(journal);
                }
                linked
            }
            HoldFiles::Read { main, record } => {
                let linked = main.is_linked().unwrap_or(true);
                // The record goes first, so that the lock is never free while it names us.
                drop(record);
                drop(main);
                linked
            }
            HoldFiles::Permit(record) => record.is_linked().unwrap_or(true),
        };
        wakeups::notify(&self.wake);
        if linked { Ok(()) } else { Err(LossReason::RecordGone) }
    }
}

impl Drop for OpenHold {
    fn drop(&mut self) {
        let _ = self.free();
    }
}

/// What a downgrade did.
enum Downgraded {
    /// The hold is a read hold now; with the new record file's duplicate for the `kill` hook.
    Done(Option<std::fs::File>),
    /// The hold was released (or was no write hold) before the downgrade ran.
    NotHeld,
    /// The conversion lost the flock: someone else took the lock in between.
    Lost,
}

/// Turns the write hold in `hold` into a read hold in place: same open lock file, same
/// token. Holds the name's fence (the gate writers pass before they try) throughout, so that
/// no writer can take the lock file while its flock changes mode, however the kernel makes
/// the change; readers may join at once.
fn downgrade_blocking(
    hold: &Mutex<OpenHold>,
    files: &LockFiles,
    split: Option<SplitDowngrade>,
) -> io::Result<Downgraded> {
    let gate = match split {
        Some(SplitDowngrade { gate: false, .. }) => None,
        _ => Some(FenceLock::lock(&files.fence)?),
    };
    let mut hold = hold.lock().unwrap_or_else(PoisonError::into_inner);
    let main = match hold.files.take() {
        Some(HoldFiles::Write(main)) => main,
        other => {
            hold.files = other;
            return Ok(Downgraded::NotHeld);
        }
    };
    let reader = Record::held(hold.token, hold.holder.clone(), HoldKind::Read);
    let record = match HolderFile::create(&files.readers, &reader) {
        Ok(record) => record,
        Err(error) => {
            // Still a write hold: safe, and the core keeps it one.
            hold.files = Some(HoldFiles::Write(main));
            return Err(error);
        }
    };
    // The reader record names the holder from now on.
    if let Err(error) = main.write_record(&Record::free(Some(hold.token))) {
        tracing::debug!(%error, path = %main.path().display(), "could not mark a downgraded lock file free");
    }
    let converted = main.convert_to_shared(split.map(|split| split.pause));
    drop(gate);
    match converted {
        Ok(true) => {
            #[cfg(feature = "test-util")]
            let duplicate = record.duplicate().ok();
            #[cfg(not(feature = "test-util"))]
            let duplicate = None;
            hold.files = Some(HoldFiles::Read { main, record });
            Ok(Downgraded::Done(duplicate))
        }
        Ok(false) => {
            hold.lost = Some(LossReason::OwnedByAnother);
            Ok(Downgraded::Lost)
        }
        Err(error) => {
            // The flock's state is unknown: give the hold up.
            hold.lost = Some(LossReason::Other(format!("the lock file's flock could not be converted: {error}")));
            Ok(Downgraded::Lost)
        }
    }
}

/// The file backend's record of one granted hold.
struct FileHeld {
    /// Shared with a downgrade in flight.
    hold: Arc<Mutex<OpenHold>>,
    files: LockFiles,
    lock: LockName,
    kind: HoldKind,
    signal: HoldSignal,
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

#[async_trait]
impl LockBackend for FileBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn address(&self) -> Option<String> {
        Some(format!("file://{}", self.settings.dir.display()))
    }

    fn renewal_interval(&self) -> Option<Duration> {
        // Nothing renews a file hold; the checker frees one past its maximum hold.
        Some(self.settings.check_every)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fencing_survives_restart: true,
            loss_notification: true,
            inspect: true,
            cross_process: true,
            rw_lock: true,
            semaphore: true,
            election: true,
            break_lock: true,
            ..Capabilities::NONE
        }
    }

    async fn acquire(&self, request: AcquireRequest) -> Result<Option<Grant>> {
        self.alive(&request.lock)?;
        let files = self.lock_files(&request.lock);
        let span = tracing::debug_span!(
            "lockkit.file.acquire",
            lock = %request.lock,
            kind = ?request.kind,
            attempt = %request.attempt
        );
        self.acquire_inner(request, files).instrument(span).await
    }

    async fn inspect(&self, lock: &LockName) -> Result<LockInfo> {
        let files = self.lock_files(lock);
        let job = {
            let files = files.clone();
            move || look(&files)
        };
        let holders = run_blocking(lock, job).await?.map_err(|error| io_error(lock, &files.lock, error))?;
        Ok(LockInfo::new(holders, None))
    }

    async fn break_lock(&self, lock: &LockName) -> Result<Vec<HolderInfo>> {
        self.alive(lock)?;
        let files = self.lock_files(lock);
        let job = {
            let files = files.clone();
            move || break_holds(&files)
        };
        run_blocking(lock, job).await?.map_err(|error| {
            io_error(lock, &files.lock, error).with_context(format!(
                "break the lock: delete its files in {} (needs write access to the directory)",
                self.settings.dir.display()
            ))
        })
    }

    fn observe(&self, lock: &LockName) -> Result<LeaderEvents> {
        self.alive(lock)?;
        let files = self.lock_files(lock);
        let dir = files.lock.parent().unwrap_or(&self.settings.dir).to_path_buf();
        let watch = if cfg!(target_os = "linux") {
            let watch = crate::watch::DirWatch::new(&dir, &election::watched_names(&files)).map_err(|error| {
                Error::backend(BACKEND, Some(lock), error).with_context(format!(
                    "watch {} with inotify (at the limit, raise fs.inotify.max_user_instances or max_user_watches)",
                    dir.display()
                ))
            })?;
            #[cfg(feature = "test-util")]
            {
                let mut observers = self.observers.lock().unwrap_or_else(PoisonError::into_inner);
                observers.retain(|observer| observer.strong_count() > 0);
                observers.push(Arc::downgrade(watch.shared()));
            }
            Some(watch)
        } else {
            None
        };
        tracing::debug!(lock = %lock, dir = %dir.display(), "lockkit.file.observe");
        Ok(election::follow(lock.clone(), files, watch, self.settings.observe_every))
    }
}
