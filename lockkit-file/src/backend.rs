//! The file lock protocol: acquire (with waiting) every kind of hold, release, downgrade,
//! loss detection, inspection, and the start of an election's observers (which live in
//! [`crate::election`]). Everything generic (reentrancy, timeouts, guards) is in
//! lockkit-core; this module only speaks files. The crate docs describe the protocol; the
//! blocking file operations are in [`crate::lockfile`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Backoff, Deadline, Grant, HoldSignal, HolderInfo, LeaderEvents, LockBackend, LockInfo, OwnerMeta,
};
use lockkit_core::{Capabilities, Error, FencingToken, LockName, Result};
use tracing::Instrument;

use crate::BACKEND;
use crate::blocking::{io_error, run_blocking};
use crate::checker::FileBackend;
use crate::held::FileHeld;
use crate::names::LockFiles;
use crate::open_hold::OpenHold;
use crate::take::{Taken, break_holds, look, take};
use crate::{election, wakeups};

impl FileBackend {
    async fn acquire_inner(&self, request: AcquireRequest, files: LockFiles) -> Result<Option<Grant>> {
        let wake = wakeups::interest(&files.lock);
        let mut backoff = Backoff::new(self.settings.poll_min, self.settings.poll_max);
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
            let pause = backoff.next_delay();
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
        // Every guarantee lockkit names but a lease (a flock holds until it is released or its
        // process ends, not for a time) and a fair queue (with its waiter count).
        Capabilities { fair: false, lease: false, lease_renewal: false, waiter_count: false, ..Capabilities::ALL }
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
