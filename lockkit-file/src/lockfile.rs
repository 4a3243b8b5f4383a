//! The blocking file operations: take a lock file's flock without waiting, read and write its
//! record, probe whether someone holds it, and check that a held file is still the one its
//! path names.
//!
//! # Lock files are never deleted
//!
//! A flock belongs to an inode, not to a path. If a lock file were unlinked while a process
//! held or was about to lock it, the next acquirer would create a new file under the same
//! path and lock that one: two holders. So this backend never unlinks a lock file. An
//! acquirer still checks, after its flock succeeded, that the path names the inode it locked
//! (someone else may have deleted the file by hand); if not, it lets go and tries again on
//! the new file. A holder whose file was deleted learns it from the provider's checker and
//! reports [`LossReason::RecordGone`](lockkit_core::LossReason::RecordGone).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::record::{RECORD_LEN, Record};

/// Lets go of the flock held through `file` (any descriptor of the locked open file), as the
/// death of the holding process would.
#[cfg(feature = "test-util")]
pub(crate) fn unlock(file: &File) -> io::Result<()> {
    flock(file, FlockOperation::Unlock).map_err(io::Error::from)
}

/// How often an acquirer retries when the lock file it locked was replaced meanwhile.
const REPLACED_TRIES: usize = 8;

/// An open lock file whose exclusive flock this process holds. Dropping it closes the file,
/// which frees the flock.
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
    path: PathBuf,
    id: FileId,
}

/// The identity of a file: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> Self {
        Self { dev: metadata.dev(), ino: metadata.ino() }
    }

    /// Whether `path` still names this file. `Ok(false)` when it names another file or none.
    pub(crate) fn is_at(self, path: &Path) -> io::Result<bool> {
        match std::fs::metadata(path) {
            Ok(metadata) => Ok(Self::of(&metadata) == self),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// Takes the exclusive flock of the lock file at `path` without waiting, creating the file
/// (and its parent directories) when missing. `Ok(None)` when another open file description
/// (this process or another) holds it.
pub(crate) fn try_lock(path: &Path) -> io::Result<Option<LockedFile>> {
    for _ in 0..REPLACED_TRIES {
        let file = match open_for_locking(path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                open_for_locking(path)?
            }
            other => other?,
        };
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(errno) => return Err(errno.into()),
        }
        let id = FileId::of(&file.metadata()?);
        if id.is_at(path)? {
            return Ok(Some(LockedFile { file, path: path.to_path_buf(), id }));
        }
        // The file was deleted or replaced between our open and our flock: the lock we
        // hold guards nothing. Let it go (drop) and lock the file the path names now.
    }
    Err(io::Error::other(format!("the lock file {} kept being deleted or replaced while locking it", path.display())))
}

fn open_for_locking(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
}

impl LockedFile {
    /// Another descriptor of the same open file, through which a test can let go of the flock
    /// as the death of the process would.
    #[cfg(feature = "test-util")]
    pub(crate) fn duplicate(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The identity of the locked file.
    pub(crate) fn id(&self) -> FileId {
        self.id
    }

    /// The path this file was locked under.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the record of the locked file.
    pub(crate) fn read_record(&self) -> io::Result<Record> {
        read_record(&self.file)
    }

    /// Writes `record` over the file's record; with `sync`, waits until it is on disk.
    pub(crate) fn write_record(&self, record: &Record, sync: bool) -> io::Result<()> {
        self.file.write_all_at(&record.render(), 0)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Whether the path still names the locked file.
    pub(crate) fn is_linked(&self) -> io::Result<bool> {
        self.id.is_at(&self.path)
    }
}

fn read_record(file: &File) -> io::Result<Record> {
    let mut buffer = vec![0; RECORD_LEN * 2];
    let mut filled = 0;
    loop {
        let read = file.read_at(&mut buffer[filled..], filled as u64)?;
        if read == 0 || filled + read == buffer.len() {
            filled += read;
            break;
        }
        filled += read;
    }
    buffer.truncate(filled);
    Ok(Record::parse(&buffer))
}

/// What a look at a lock file found.
#[derive(Debug)]
pub(crate) enum Probe {
    /// No lock file: the lock was never used (or its file was deleted).
    Missing,
    /// The file's record, and whether some process holds its flock now.
    Found { record: Record, held: bool },
}

/// Looks at the lock file at `path` without taking the lock.
///
/// The record alone cannot tell a live holder from a dead one, so when it names a holder
/// this takes a *shared* flock for an instant to see whether an exclusive one is held. That
/// instant could make a concurrent `try_acquire` of the (then free) lock fail, so it only
/// happens when the record claims a holder, which is almost always a live one.
pub(crate) fn probe(path: &Path) -> io::Result<Probe> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Probe::Missing),
        Err(error) => return Err(error),
    };
    let record = read_record(&file)?;
    if record.holder.is_none() {
        return Ok(Probe::Found { record, held: false });
    }
    let held = match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => false,
        Err(rustix::io::Errno::WOULDBLOCK) => true,
        Err(errno) => return Err(errno.into()),
    };
    Ok(Probe::Found { record, held })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn two_opens_in_one_process_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b.lock");
        let first = try_lock(&path).unwrap().unwrap();
        assert!(try_lock(&path).unwrap().is_none());
        drop(first);
        assert!(try_lock(&path).unwrap().is_some());
    }

    #[test]
    fn a_deleted_lock_file_is_noticed_and_not_locked_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = try_lock(&path).unwrap().unwrap();
        assert!(held.is_linked().unwrap());
        std::fs::remove_file(&path).unwrap();
        assert!(!held.is_linked().unwrap());
        let other = try_lock(&path).unwrap().unwrap();
        assert_ne!(other.id(), held.id());
    }

    #[test]
    fn probe_tells_a_dead_holder_from_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        assert!(matches!(probe(&path).unwrap(), Probe::Missing));
        let held = try_lock(&path).unwrap().unwrap();
        let holder = lockkit_core::backend::OwnerMeta::current(uuid::Uuid::new_v4());
        held.write_record(&Record { token: Some(3), holder: Some(holder) }, false).unwrap();
        assert!(matches!(probe(&path).unwrap(), Probe::Found { held: true, .. }));
        drop(held);
        // The record still names the holder, but nobody holds the flock.
        assert!(matches!(probe(&path).unwrap(), Probe::Found { held: false, .. }));
    }
}
