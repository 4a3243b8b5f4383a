//! The local-file backend of lockkit: locks shared by the processes of one machine, with no
//! server.
//!
//! [`FileLockProvider::open`] takes a directory. Each lock is a file in it, and holding the
//! lock is holding an OS file lock (`flock(2)`) on that file: exclusive for a mutex, the
//! writer of a read-write lock or the leader of an election, shared for readers; a
//! semaphore's permits are files of their own. The operating system frees the file locks when the holding process dies,
//! however it dies, so a crashed holder never blocks anyone: the lock, the share or the
//! permit is free the moment the process is gone, with no lease to wait out (the backend
//! declares `lease: false`).
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
//! Read-write locks and counting semaphores live in the same directory:
//!
//! ```
//! use lockkit_file::FileLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! # let tmp = tempfile::tempdir().map_err(|e| lockkit_core::Error::backend("file", None, e))?;
//! # let provider = FileLockProvider::open(tmp.path())?;
//! let config = provider.rw_lock("config/pricing")?;
//! let (a, b) = (config.read().await?, config.read().await?); // readers share
//! assert!(config.try_write().await?.is_none(), "readers exclude a writer");
//! drop((a, b));
//!
//! let api = provider.semaphore("partner-api", 3)?; // at most 3 holders at once
//! let permit = api.acquire().await?;
//! println!("permit with fencing token {}", permit.token());
//! # Ok(())
//! # }
//! ```
//!
//! So do elections, whose observers in any process of the machine hear of every change of
//! leader:
//!
//! ```
//! use lockkit_core::LeaderEvent;
//! use lockkit_file::FileLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockkit_core::Result<()> {
//! # let tmp = tempfile::tempdir().map_err(|e| lockkit_core::Error::backend("file", None, e))?;
//! # let provider = FileLockProvider::open(tmp.path())?;
//! let election = provider.election("services/scheduler")?;
//! let mut changes = election.observe()?;
//! assert_eq!(changes.next().await.transpose()?, Some(LeaderEvent::Vacant));
//!
//! let leadership = election.campaign("10.0.0.7:8080").await?; // waits until it leads
//! println!("leading for term {}", leadership.token());
//! match changes.next().await.transpose()? {
//!     Some(LeaderEvent::Elected(leader)) => assert_eq!(leader.term, leadership.token()),
//!     other => unreachable!("{other:?}"),
//! }
//! leadership.resign().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - **Files**: lock `orders/42` has the files `orders%2f42.*` in the directory
//!   ([`FileLockProvider::lock_files`]; names escaped so that two never share a file): the
//!   lock file, whose flock is the lock and whose record names the holder; the fence file,
//!   with the last token; a record file per reader and per permit; an election's journal.
//! - **Exclusion**: an acquisition opens the lock file anew and tries a non-blocking
//!   `flock` on a blocking thread; a mutex *is* the writer of the read-write lock of its name.
//! - **Fencing**: every grant takes the fence file's exclusive flock, adds one to the last
//!   token and `fsync`s it before it returns, so tokens strictly increase per name across
//!   kinds, processes and restarts. The fence is also the gate writers pass first, so a
//!   downgrade, a semaphore's admission and `inspect` see no writer slip in.
//! - **Waiting**: a release wakes this process's waiters at once; waiters retry every 10 ms,
//!   doubling up to 50 ms ([`FileLockProviderBuilder::poll_min`],
//!   [`poll_max`](FileLockProviderBuilder::poll_max)), for releases by other processes. There
//!   is no queue: the backend is not fair.
//! - **Breaking** deletes the held lock file and the live records under the fence; the holder
//!   learns it at its next check.
//!
//! # Elections
//!
//! A campaign is an exclusive hold of the lock file whose record carries the leader's
//! identity; every change of leader is appended to the name's numbered journal under the
//! fence, so observers replay what they missed. Observers are woken in their process at
//! once, across processes by inotify (Linux), and by a re-read every
//! [`observe_every`](FileLockProviderBuilder::observe_every) as a safety net.
//!
//! # Loss
//!
//! A hold is not lost while its process lives, unless someone deletes or replaces its lock
//! file (or a permit's record file): each provider checks the files of its held locks every
//! [`check_every`](FileLockProviderBuilder::check_every) (a second) and reports a deleted one
//! as [`LossReason::RecordGone`](lockkit_core::LossReason::RecordGone). A dead holder's lock
//! comes back the moment its process is gone.
//!
//! # Limits
//!
//! Unix and local filesystems only (`flock` on NFS is emulated or ignored). Lock and fence
//! files are never deleted: a flock belongs to the file, not to its path, so **never delete
//! them while processes may use the locks**. Processes of different users need a directory
//! and umask that let them all write the files.
//!
//! # More
//!
//! The guide's files page has the rest: options, the files and what each holds, readers,
//! semaphores, the downgrade, elections and observers, what stays on disk, and limits:
//! <https://docs.rs/lockkit/latest/lockkit/guide/backends/files/index.html> (in this
//! repository: `src/guide/backends/files.md`).

#![cfg(unix)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod blocking;
mod checker;
mod config;
mod election;
mod held;
mod journal;
mod lockfile;
mod names;
mod open_hold;
mod provider;
mod record;
mod take;
mod wakeups;
mod watch;

pub use config::{
    DEFAULT_CHECK_EVERY, DEFAULT_OBSERVE_EVERY, DEFAULT_POLL_MAX, DEFAULT_POLL_MIN, FileLockProviderBuilder,
    MARKER_FILE, OPTIONS,
};
pub use names::{
    COMPONENT_LEN, ELECTION_SUFFIX, FENCE_SUFFIX, LOCK_SUFFIX, LockFiles, PERMITS_SUFFIX, READERS_SUFFIX, encode_name,
};
pub use provider::{FileLockProvider, SCHEME};

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "file";
