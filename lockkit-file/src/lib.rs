//! The local-file backend of lockkit: locks shared by the processes of one machine, with no
//! server.
//!
//! [`FileLockProvider::open`] takes a directory. Each lock is a file in it, and holding the
//! lock is holding an exclusive OS file lock (`flock(2)`) on that file. The operating system
//! frees the file lock when the holding process dies, however it dies, so a crashed holder
//! never blocks anyone: the lock is free the moment the process is gone, with no lease to
//! wait out (the backend declares `lease: false`).
//!
//! ```
//! use lockkit_file::FileLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! # let tmp = tempfile::tempdir().map_err(|e| lockkit_core::Error::backend("file", None, e))?;
//! # let dir = tmp.path();
//! let provider = FileLockProvider::open(dir)?; // say /var/lock/myapp
//! let lock = provider.lock("reports/daily")?;
//! let guard = lock.acquire().await?;
//! println!("holding {} with fencing token {}", guard.name(), guard.token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - **Files.** Lock `orders/42` is the file `orders%2f42.lock` in the directory: bytes other
//!   than `a-z 0-9 - _` are escaped as `%xx` (lower-case, so names stay distinct on
//!   case-insensitive filesystems), and names whose escaped form exceeds 200 bytes are cut
//!   into sub-directories, so the 255-byte limit on file names never bites and two names
//!   never share a file. The directory also holds a `lockkit.dir` marker.
//! - **Exclusion.** An acquisition opens the lock file anew (so two providers, or two
//!   handles, of one process exclude each other too: a flock belongs to an open file
//!   description) and tries `flock(LOCK_EX | LOCK_NB)`. It never blocks a thread on a lock.
//! - **Fencing.** The lock file records the last token issued for the lock. The acquirer,
//!   holding the flock, reads it, adds one, and writes the new token with its own identity
//!   (pid, host, time, attempt id) to the file, `fsync`ed before the grant, so tokens keep
//!   increasing across process and machine restarts. A lock file without a token (new,
//!   deleted by hand, or torn by a crash mid-write) starts from the clock in microseconds,
//!   so tokens still increase unless the clock steps back.
//! - **Waiting.** A release in this process wakes the waiters of this process at once
//!   (a process-wide wake-up per lock file, shared by every provider of the directory).
//!   Waiters cannot be notified of releases by *other* processes; as a safety net they retry
//!   every 10 ms, doubling up to 50 ms ([`FileLockProviderBuilder::poll_min`], [`poll_max`](FileLockProviderBuilder::poll_max)), so a
//!   release in another process is noticed within about 50 ms. The backend is not fair:
//!   whoever tries first after a release wins.
//! - **Cancel safety.** A try runs on a blocking thread and takes no time waiting; if the
//!   acquisition is dropped while a try runs, a hold the try took is freed when it returns.
//! - **Release** marks the record free (keeping the token), closes the file, which frees the
//!   flock, and wakes this process's waiters.
//! - **Inspection.** [`inspect`](lockkit_core::LockProvider::inspect) reads the record and,
//!   when it names a holder, checks with an instant's shared flock that the holder is alive.
//!   It reports the holder's token, `pid … on host (attempt …)` and since when (the core's
//!   `OwnerMeta`, as on Redis and ZooKeeper); the waiter count is unknown across processes.
//!   The record is written just after the flock is taken, so for that instant a new hold
//!   can still read as free.
//!
//! # What is left on disk
//!
//! Lock files are never deleted, not even by `try_acquire` or a timed-out `acquire`: a lock
//! that is not held is an idle file whose record says `free` (or names a dead holder, which
//! `inspect` sees through). They are small (512 bytes) and one per lock name ever used.
//! Deleting them is what would break the locks: a flock belongs to the file, not to its
//! path, so a holder of a deleted file excludes nobody, and a new file under the same path
//! would be locked by someone else at once. Never delete lock files while processes may
//! use them; remove the whole directory only when no process uses it.
//!
//! # Loss
//!
//! A hold is not lost while its process lives, with one exception: someone deletes or
//! replaces its lock file. Each provider checks the files of its held locks every second
//! ([`FileLockProviderBuilder::check_every`]) and reports a deleted one as
//! [`LossReason::RecordGone`](lockkit_core::LossReason::RecordGone); releasing such a hold
//! returns `LockLost`, and an acquirer that locked a file just as it was deleted notices
//! and locks the new one instead.
//!
//! # Limits
//!
//! - Unix only, and local filesystems only: `flock` on NFS or other network filesystems is
//!   emulated or ignored depending on the system. Processes on different machines need the
//!   Redis or ZooKeeper backend.
//! - Lock files are created with the process's umask; processes of different users need a
//!   directory and umask that let them all open the files for writing.

#![cfg(unix)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod lockfile;
mod names;
mod provider;
mod record;
mod wakeups;

pub use names::{COMPONENT_LEN, LOCK_SUFFIX, encode_name};
pub use provider::{
    DEFAULT_CHECK_EVERY, DEFAULT_POLL_MAX, DEFAULT_POLL_MIN, FileLockProvider, FileLockProviderBuilder, MARKER_FILE,
    OPTIONS, SCHEME,
};

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "file";
