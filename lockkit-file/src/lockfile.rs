//! The blocking file operations: flock a lock file without waiting (shared or exclusive), take
//! a name's fence for an instant, create and probe reader and permit record files, read and
//! write records, and check that a held file is still the one its path names.
//!
//! # Lock files are never deleted
//!
//! A flock belongs to an inode, not to a path. If a lock file were unlinked while a process
//! held or was about to lock it, the next acquirer would create a new file under the same
//! path and lock that one: two holders. So this backend never unlinks a lock file (nor a
//! fence file, which is the gate of every grant). An acquirer still checks, after its flock
//! succeeded, that the path names the inode it locked (someone else may have deleted the file
//! by hand); if not, it lets go and tries again on the new file. A holder whose file was
//! deleted learns it from the provider's checker and reports
//! [`LossReason::RecordGone`](lockkit_core::LossReason::RecordGone).
//!
//! # Record files
//!
//! Reader and permit record files are the opposite: each is created under a fresh random
//! name by its holder, under the name's fence, locked exclusively by it at once, and unlinked
//! by it on release. Nobody else ever locks one exclusively, so a shared flock that succeeds
//! on one proves its holder gone (released or dead), and the prober removes it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};

use crate::record::{Fence, MAX_RECORD_LEN, RECORD_LEN, Record};

/// Lets go of the flock held through `file` (any descriptor of the locked open file), as the
/// death of the holding process would.
#[cfg(feature = "test-util")]
pub(crate) fn unlock(file: &File) -> io::Result<()> {
    flock(file, FlockOperation::Unlock).map_err(io::Error::from)
}

/// How often an acquirer retries when the file it locked was replaced meanwhile.
const REPLACED_TRIES: usize = 8;

/// The two flock modes of a lock file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `LOCK_SH`: readers.
    Shared,
    /// `LOCK_EX`: writers and mutexes.
    Exclusive,
}

impl Mode {
    fn try_operation(self) -> FlockOperation {
        match self {
            Self::Shared => FlockOperation::NonBlockingLockShared,
            Self::Exclusive => FlockOperation::NonBlockingLockExclusive,
        }
    }
}

/// Takes a flock without waiting: `Ok(false)` when another open file description holds a
/// conflicting one.
fn try_flock(file: &File, operation: FlockOperation) -> io::Result<bool> {
    match flock(file, operation) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// Takes a flock, waiting for it.
fn flock_waiting(file: &File, operation: FlockOperation) -> io::Result<()> {
    loop {
        match flock(file, operation) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// An open lock file whose flock (shared or exclusive) this process holds. Dropping it closes
/// the file, which frees the flock.
#[derive(Debug)]
pub(crate) struct LockedFile(OpenFile);

/// An open file, the path it was opened at and its identity: what a lock file and a record
/// file both are.
#[derive(Debug)]
pub(crate) struct OpenFile {
    file: File,
    path: PathBuf,
    id: FileId,
}

impl OpenFile {
    fn new(file: File, path: PathBuf) -> io::Result<Self> {
        let id = FileId::of(&file.metadata()?);
        Ok(Self { file, path, id })
    }

    /// Another descriptor of the same open file, through which a test can let go of the flock
    /// as the death of the process would (the `kill` fault hook).
    #[cfg(feature = "test-util")]
    pub(crate) fn duplicate(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The identity of the file.
    pub(crate) fn id(&self) -> FileId {
        self.id
    }

    /// The path the file was opened at.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path still names the file.
    pub(crate) fn is_linked(&self) -> io::Result<bool> {
        self.id.is_at(&self.path)
    }
}

impl std::ops::Deref for LockedFile {
    type Target = OpenFile;

    fn deref(&self) -> &OpenFile {
        &self.0
    }
}

impl std::ops::Deref for HolderFile {
    type Target = OpenFile;

    fn deref(&self) -> &OpenFile {
        &self.0
    }
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

/// Opens the file at `path` for locking and writing, creating it (and its parent
/// directories) when missing.
fn open_creating(path: &Path) -> io::Result<File> {
    let open = || OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
    match open() {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            open()
        }
        other => other,
    }
}

/// Takes the flock of the lock file at `path` in `mode` without waiting, creating the file
/// (and its parent directories) when missing. `Ok(None)` when another open file description
/// (this process or another) holds a conflicting flock.
pub(crate) fn try_lock(path: &Path, mode: Mode) -> io::Result<Option<LockedFile>> {
    for _ in 0..REPLACED_TRIES {
        let file = open_creating(path)?;
        if !try_flock(&file, mode.try_operation())? {
            return Ok(None);
        }
        let opened = OpenFile::new(file, path.to_path_buf())?;
        if opened.is_linked()? {
            return Ok(Some(LockedFile(opened)));
        }
        // The file was deleted or replaced between our open and our flock: the lock we
        // hold guards nothing. Let it go (drop) and lock the file the path names now.
    }
    Err(io::Error::other(format!("the lock file {} kept being deleted or replaced while locking it", path.display())))
}

impl LockedFile {
    /// Reads the record of the locked file.
    pub(crate) fn read_record(&self) -> io::Result<Record> {
        Ok(Record::parse(&read_head(&self.file)?))
    }

    /// Writes `record` over the file's record, without waiting for the disk: the lock file's
    /// record only says who holds it (tokens are kept durable by the fence). The record is
    /// padded to the file's size, so a shorter record (a mutex's, after a candidate's with a
    /// long identity) leaves no tail of the longer one behind.
    pub(crate) fn write_record(&self, record: &Record) -> io::Result<()> {
        let size = usize::try_from(self.file.metadata()?.len()).unwrap_or(MAX_RECORD_LEN);
        self.file.write_all_at(&record.render_at_least(size.clamp(RECORD_LEN, MAX_RECORD_LEN)), 0)
    }

    /// Turns the exclusive flock into a shared one, in place (same open file). `Ok(false)`
    /// when the flock was lost in the conversion.
    ///
    /// flock(2) does not promise that the conversion is atomic: "the existing lock is first
    /// removed, and then a new lock is established", so another process may take the lock
    /// in between. Linux converts under one spinlock, other systems may not; the caller
    /// holds the name's fence (the gate every writer passes) so that no writer can. With
    /// `split`, the conversion is made in two steps with that pause between them, as such a
    /// kernel would (the `split_downgrades` fault hook).
    pub(crate) fn convert_to_shared(&self, split: Option<Duration>) -> io::Result<bool> {
        if let Some(pause) = split {
            flock(&self.file, FlockOperation::Unlock)?;
            std::thread::sleep(pause);
        }
        try_flock(&self.file, FlockOperation::NonBlockingLockShared)
    }
}

/// Reads the first bytes of `file`: a record is at most [`MAX_RECORD_LEN`] bytes.
fn read_head(file: &File) -> io::Result<Vec<u8>> {
    let mut buffer = vec![0; MAX_RECORD_LEN];
    let mut filled = 0;
    loop {
        let read = file.read_at(&mut buffer[filled..], filled as u64)?;
        filled += read;
        if read == 0 || filled == buffer.len() {
            break;
        }
    }
    buffer.truncate(filled);
    Ok(buffer)
}

/// The exclusive flock of a name's fence file, held for an instant: while a token is issued,
/// while a writer tries the lock file, while a holder downgrades, while a semaphore admits
/// a permit, and while `inspect` looks. Dropping it closes the file, which frees the flock.
#[derive(Debug)]
pub(crate) struct FenceLock {
    file: File,
}

impl FenceLock {
    /// Takes the fence of the name whose fence file is `path`, creating the file when
    /// missing, and waiting for the flock: its holders keep it only for a few file
    /// operations (and one `fsync`).
    pub(crate) fn lock(path: &Path) -> io::Result<Self> {
        for _ in 0..REPLACED_TRIES {
            let file = open_creating(path)?;
            flock_waiting(&file, FlockOperation::LockExclusive)?;
            if FileId::of(&file.metadata()?).is_at(path)? {
                return Ok(Self { file });
            }
        }
        Err(io::Error::other(format!(
            "the fence file {} kept being deleted or replaced while locking it",
            path.display()
        )))
    }

    /// Reads the fence record.
    pub(crate) fn read(&self) -> io::Result<Fence> {
        Ok(Fence::parse(&read_head(&self.file)?))
    }

    /// Writes the fence record and waits until it is on disk: a token is issued only once
    /// its fence is durable, so tokens keep increasing across crashes and restarts.
    pub(crate) fn write(&self, fence: &Fence) -> io::Result<()> {
        self.file.write_all_at(&fence.render(), 0)?;
        self.file.sync_data()
    }
}

/// The record file of one reader or permit holder, exclusively locked by it. Dropping it
/// unlinks the file (if its path still names it), then closes it.
#[derive(Debug)]
pub(crate) struct HolderFile(OpenFile);

/// The length of a record file's name: a UUID in simple form.
const HOLDER_NAME_LEN: usize = 32;

fn is_holder_file_name(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|name| name.len() == HOLDER_NAME_LEN && name.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl HolderFile {
    /// Creates a record file in `dir` (created when missing) under a fresh random name,
    /// locks it exclusively and writes `record` to it. Called under the name's fence, like
    /// every prober of record files, so nobody sees the file before it is locked.
    pub(crate) fn create(dir: &Path, record: &Record) -> io::Result<Self> {
        let path = dir.join(uuid::Uuid::new_v4().simple().to_string());
        let open = || OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        let file = match open() {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                open()?
            }
            other => other?,
        };
        // From here on, dropping `created` removes the file (an error below included).
        let created = Self(OpenFile::new(file, path)?);
        if !try_flock(&created.file, FlockOperation::NonBlockingLockExclusive)? {
            return Err(io::Error::other(format!(
                "the new record file {} was locked by someone else",
                created.path.display()
            )));
        }
        created.file.write_all_at(&record.render(), 0)?;
        Ok(created)
    }
}

impl Drop for HolderFile {
    fn drop(&mut self) {
        // Unlink first, close after: while the file exists, it is locked.
        if self.is_linked().unwrap_or(false)
            && let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::debug!(%error, path = %self.path.display(), "could not remove a released record file");
        }
    }
}

/// The records of the live holders whose record files are in `dir` (readers or permits).
/// Record files nobody holds any more (their holder died, or is releasing) are removed.
///
/// Call it under the name's fence: record files are created under it, so none is seen here
/// before its holder locked it.
pub(crate) fn live_holders(dir: &Path) -> io::Result<Vec<Record>> {
    Ok(live_holder_files(dir)?.into_iter().map(|(_, record)| record).collect())
}

/// [`live_holders`] with the path of each live holder's record file.
pub(crate) fn live_holder_files(dir: &Path) -> io::Result<Vec<(PathBuf, Record)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut live = Vec::new();
    for entry in entries {
        let entry = entry?;
        if !is_holder_file_name(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        if try_flock(&file, FlockOperation::NonBlockingLockShared)? {
            // Nobody holds it: its holder died, or released it and is about to unlink it.
            if FileId::of(&file.metadata()?).is_at(&path)?
                && let Err(error) = std::fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::debug!(%error, path = %path.display(), "could not remove a dead holder's record file");
            }
        } else {
            live.push((path, Record::parse(&read_head(&file)?)));
        }
    }
    Ok(live)
}

/// The record of the lock file at `path`, read without any lock: a hint only (it may be a
/// dead holder's, or half written by a release), to be confirmed under the fence with
/// [`probe`]. `None` when there is no lock file.
pub(crate) fn peek(path: &Path) -> io::Result<Option<Record>> {
    match File::open(path) {
        Ok(file) => Ok(Some(Record::parse(&read_head(&file)?))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// What a look at a lock file found.
#[derive(Debug)]
pub(crate) enum Probe {
    /// No lock file: the lock was never used (or its file was deleted).
    Missing,
    /// The file's record, and whether some open file description holds its exclusive flock
    /// now (a writer or a mutex).
    Found { record: Record, held: bool },
}

/// Looks at the lock file at `path` without taking the lock: its record, and whether a writer
/// holds it, found with an instant's *shared* flock.
///
/// That instant could make a writer's non-blocking try fail, so call it under the name's
/// fence, which writers take before they try. Readers share the flock with the probe and
/// are not disturbed; the probe cannot see them (see [`live_holders`]).
pub(crate) fn probe(path: &Path) -> io::Result<Probe> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Probe::Missing),
        Err(error) => return Err(error),
    };
    let record = Record::parse(&read_head(&file)?);
    let held = !try_flock(&file, FlockOperation::NonBlockingLockShared)?;
    Ok(Probe::Found { record, held })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_core::HoldKind;
    use lockkit_core::backend::OwnerMeta;

    use super::*;

    #[test]
    fn two_opens_in_one_process_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b.lock");
        let first = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_none());
        assert!(try_lock(&path, Mode::Shared).unwrap().is_none());
        drop(first);
        let readers =
            [try_lock(&path, Mode::Shared).unwrap().unwrap(), try_lock(&path, Mode::Shared).unwrap().unwrap()];
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_none());
        drop(readers);
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_some());
    }

    #[test]
    fn a_deleted_lock_file_is_noticed_and_not_locked_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        assert!(held.is_linked().unwrap());
        std::fs::remove_file(&path).unwrap();
        assert!(!held.is_linked().unwrap());
        let other = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        assert_ne!(other.id(), held.id());
    }

    #[test]
    fn probe_tells_a_dead_writer_from_a_live_one_and_does_not_see_readers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        assert!(matches!(probe(&path).unwrap(), Probe::Missing));
        let held = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        let holder = OwnerMeta::current(uuid::Uuid::new_v4());
        held.write_record(&Record::held(3, holder, HoldKind::Write)).unwrap();
        assert!(matches!(probe(&path).unwrap(), Probe::Found { held: true, .. }));
        drop(held);
        // The record still names the holder, but nobody holds the flock.
        assert!(matches!(probe(&path).unwrap(), Probe::Found { held: false, .. }));
        let reader = try_lock(&path, Mode::Shared).unwrap().unwrap();
        assert!(matches!(probe(&path).unwrap(), Probe::Found { held: false, .. }));
        // The probe let go at once: a writer may take the lock after the reader.
        drop(reader);
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_some());
    }

    #[test]
    fn a_conversion_to_shared_admits_readers_and_keeps_writers_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.lock");
        let held = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        assert!(try_lock(&path, Mode::Shared).unwrap().is_none());
        assert!(held.convert_to_shared(None).unwrap());
        let reader = try_lock(&path, Mode::Shared).unwrap().unwrap();
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_none());
        drop(reader);
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_none(), "the converted hold still reads");
        drop(held);
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_some());
    }

    #[test]
    fn record_files_are_live_while_held_and_removed_once_dead() {
        let dir = tempfile::tempdir().unwrap();
        let readers = dir.path().join("r.readers");
        assert!(live_holders(&readers).unwrap().is_empty());
        let holder = OwnerMeta::current(uuid::Uuid::new_v4());
        let first = HolderFile::create(&readers, &Record::held(4, holder.clone(), HoldKind::Read)).unwrap();
        let second = HolderFile::create(&readers, &Record::held(5, holder, HoldKind::Read)).unwrap();
        std::fs::write(readers.join("not-a-record"), b"x").unwrap();
        let mut tokens: Vec<_> = live_holders(&readers).unwrap().into_iter().map(|r| r.token).collect();
        tokens.sort();
        assert_eq!(tokens, vec![Some(4), Some(5)]);
        // A dead holder: its flock is gone, its file is left behind.
        let path = first.path().to_path_buf();
        let duplicate = first.file.try_clone().unwrap();
        flock(&duplicate, FlockOperation::Unlock).unwrap();
        let tokens: Vec<_> = live_holders(&readers).unwrap().into_iter().map(|r| r.token).collect();
        assert_eq!(tokens, vec![Some(5)]);
        assert!(!path.exists(), "the dead holder's file is removed");
        drop(first);
        let second_path = second.path().to_path_buf();
        drop(second);
        assert!(!second_path.exists(), "a released record file is removed");
        assert!(readers.join("not-a-record").exists(), "files of others are left alone");
    }

    #[test]
    fn the_fence_keeps_tokens_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("f.fence");
        let fence = FenceLock::lock(&path).unwrap();
        assert_eq!(fence.read().unwrap(), Fence::default());
        let permits = std::num::NonZeroU32::new(3);
        fence.write(&Fence { token: Some(9), permits }).unwrap();
        drop(fence);
        let fence = FenceLock::lock(&path).unwrap();
        assert_eq!(fence.read().unwrap(), Fence { token: Some(9), permits });
    }
}
