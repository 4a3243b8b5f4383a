//! One try at a hold, on the files alone (blocking): take a write, read or permit hold, or
//! find the name in use otherwise; and what `inspect` and `break` do to the files.

use std::io;
use std::num::NonZeroU32;
use std::path::Path;

use lockkit_core::backend::{HolderInfo, OwnerMeta};
use lockkit_core::{FencingToken, HoldKind};

use crate::lockfile::{self, FenceLock, HolderFile, Mode, Probe};
use crate::names::LockFiles;
use crate::open_hold::{HoldFiles, OpenHold};
use crate::record::{Fence, Record};
use crate::{journal, wakeups};

/// What one try found.
#[derive(Debug)]
pub(crate) enum Taken {
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
pub(crate) fn take(files: &LockFiles, kind: &HoldKind, holder: OwnerMeta) -> io::Result<Taken> {
    match kind {
        HoldKind::Exclusive | HoldKind::Write | HoldKind::Candidate { .. } => take_write(files, kind.clone(), holder),
        HoldKind::Read => take_read(files, holder),
        HoldKind::Permit { permits } => take_permit(files, *permits, holder),
        _ => Ok(Taken::Unsupported),
    }
}

/// A mutex, a writer or a candidate: under the fence (the gate), the lock file's exclusive
/// flock. A candidate's grant also writes its term to the election's journal.
pub(crate) fn take_write(files: &LockFiles, kind: HoldKind, holder: OwnerMeta) -> io::Result<Taken> {
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
pub(crate) fn held_as_another_kind(files: &LockFiles, asking: &HoldKind) -> io::Result<Option<String>> {
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
pub(crate) fn take_read(files: &LockFiles, holder: OwnerMeta) -> io::Result<Taken> {
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
pub(crate) fn take_permit(files: &LockFiles, permits: NonZeroU32, holder: OwnerMeta) -> io::Result<Taken> {
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
pub(crate) fn lock_in_use(files: &LockFiles) -> io::Result<Option<String>> {
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
pub(crate) fn semaphore_in_use(permits: Option<NonZeroU32>, asking: &HoldKind) -> String {
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
pub(crate) fn look(files: &LockFiles) -> io::Result<Vec<HolderInfo>> {
    let Some((fence, permit)) = fenced_if_used(files)? else { return Ok(Vec::new()) };
    let mut holders = Vec::new();
    if let Probe::Found { record: Record { token: Some(token), holder: Some(holder), kind }, held: true } =
        lockfile::probe(&files.lock)?
    {
        holders.push((token, holder, kind.unwrap_or(HoldKind::Exclusive)));
    }
    for (dir, kind) in [(&files.readers, HoldKind::Read), (&files.permits, permit)] {
        for record in lockfile::live_holders(dir)? {
            if let Record { token: Some(token), holder: Some(holder), kind: recorded } = record {
                holders.push((token, holder, recorded.unwrap_or_else(|| kind.clone())));
            }
        }
    }
    drop(fence);
    Ok(in_token_order(holders))
}

/// The file backend's break, under the fence: the lock file is deleted when a mutex, a writer
/// or a candidate holds its exclusive flock or readers hold it shared, and so are the live
/// readers' and permit holders' record files. A holder keeps its flock on the unlinked file,
/// which excludes nobody any more: its checker finds the file gone at its next check
/// (`check_every`) and reports [`LossReason::RecordGone`]. The next holder creates a new lock
/// file and draws its token from the fence, which stays. A broken leader's term is closed in
/// the election's journal. Returns the holds broken, as [`look`] shows them.
pub(crate) fn break_holds(files: &LockFiles) -> io::Result<Vec<HolderInfo>> {
    let Some((fence, permit)) = fenced_if_used(files)? else { return Ok(Vec::new()) };
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
    Ok(in_token_order(broken))
}

/// The name's fence, locked, and the kind of its permits (from its counter), when the name
/// was ever used; `None`, with nothing created, when it never was.
fn fenced_if_used(files: &LockFiles) -> io::Result<Option<(FenceLock, HoldKind)>> {
    let used = [&files.fence, &files.lock, &files.readers, &files.permits].iter().any(|path| path.exists());
    if !used {
        return Ok(None);
    }
    let fence = FenceLock::lock(&files.fence)?;
    let permits = fence.read()?.permits.unwrap_or(NonZeroU32::MIN);
    Ok(Some((fence, HoldKind::Permit { permits })))
}

/// The holds `(token, holder, kind)` as [`HolderInfo`]s, in token order.
fn in_token_order(mut holds: Vec<(u64, OwnerMeta, HoldKind)>) -> Vec<HolderInfo> {
    holds.sort_by_key(|(token, ..)| *token);
    holds.into_iter().map(|(token, holder, kind)| holder.holder(FencingToken::new(token)).with_kind(kind)).collect()
}

pub(crate) fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}
