//! A hold's open files ([`OpenHold`]): the flocks and record files that make it, freed on
//! release (or when dropped), and the in-place downgrade of a write hold to a read hold.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use lockkit_core::backend::OwnerMeta;
use lockkit_core::{HoldKind, LossReason};

use crate::config::SplitDowngrade;
use crate::lockfile::{FenceLock, FileId, HolderFile, LockedFile};
use crate::names::LockFiles;
use crate::record::Record;
use crate::{journal, wakeups};

/// The files a hold locks.
#[derive(Debug)]
pub(crate) enum HoldFiles {
    /// A mutex or a writer: the lock file's exclusive flock.
    Write(LockedFile),
    /// A reader: the lock file's shared flock, and the reader's record file.
    Read { main: LockedFile, record: HolderFile },
    /// A permit: its record file.
    Permit(HolderFile),
}

impl HoldFiles {
    /// The file whose deletion ends the hold, for the checker.
    pub(crate) fn watched(&self) -> (PathBuf, FileId) {
        match self {
            Self::Write(main) | Self::Read { main, .. } => (main.path().to_path_buf(), main.id()),
            Self::Permit(record) => (record.path().to_path_buf(), record.id()),
        }
    }

    /// Other descriptors of every file locked, for the `kill` fault hook.
    #[cfg(feature = "test-util")]
    pub(crate) fn duplicates(&self) -> Vec<std::fs::File> {
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
pub(crate) struct OpenHold {
    pub(crate) files: Option<HoldFiles>,
    pub(crate) token: u64,
    /// Who holds it, for the reader record a downgrade writes.
    pub(crate) holder: OwnerMeta,
    /// The name's lock file: the process-wide wake-up of its waiters.
    pub(crate) wake: PathBuf,
    /// Why the hold was lost, when a downgrade lost it.
    pub(crate) lost: Option<LossReason>,
    /// The fence and the journal of the election, for a candidate's hold.
    pub(crate) candidacy: Option<(PathBuf, PathBuf)>,
    /// Set by the `kill` fault hook: free the files without writing to them, as a dead
    /// process would (another holder may own the lock file's record by then).
    pub(crate) inert: Arc<std::sync::atomic::AtomicBool>,
}

impl OpenHold {
    pub(crate) fn new(files: HoldFiles, token: u64, holder: OwnerMeta, names: &LockFiles, kind: &HoldKind) -> Self {
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
    pub(crate) fn free(&mut self) -> std::result::Result<(), LossReason> {
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
pub(crate) enum Downgraded {
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
pub(crate) fn downgrade_blocking(
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
