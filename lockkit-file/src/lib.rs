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
//! - **Files.** Lock `orders/42` has the files `orders%2f42.*` in the directory
//!   ([`FileLockProvider::lock_files`]): bytes other than `a-z 0-9 - _` are escaped as
//!   `%xx` (lower-case, so names stay distinct on case-insensitive filesystems), and names
//!   whose escaped form exceeds 200 bytes are cut into sub-directories, so the 255-byte limit
//!   on file names never bites and two names never share a file. A name has up to five:
//!   - `orders%2f42.lock`, the **lock file**: a mutex, a writer or an election's leader holds
//!     its exclusive flock, readers its shared flock; its record names the writer or the
//!     leader, with the identity the leader publishes (or says `free`);
//!   - `orders%2f42.fence`, the **fence file**: the last token issued for the name and, for a
//!     semaphore, its permit count; its exclusive flock is held only for an instant at a time;
//!   - `orders%2f42.readers/`, one **record file per reader** (token, holder, kind);
//!   - `orders%2f42.permits/`, one **record file per permit** of a semaphore;
//!   - `orders%2f42.election`, the **journal** of an election: its changes of leader,
//!     numbered (see [Elections](#elections)).
//!
//!   The directory also holds a `lockkit.dir` marker.
//! - **Exclusion.** An acquisition opens the lock file anew (so two providers, or two
//!   handles, of one process exclude each other too: a flock belongs to an open file
//!   description) and tries `flock(LOCK_EX | LOCK_NB)` (a mutex, a writer or a candidate)
//!   or `flock(LOCK_SH | LOCK_NB)` (a reader). It never blocks a thread on a lock. A mutex
//!   *is* a writer of the read-write lock of its name: same file, same exclusive flock, so
//!   a mutex and a read-write lock of one name exclude each other.
//! - **Fencing.** Every grant (mutex, read, write, permit, an election's term) draws its token
//!   under the name's fence: the acquirer takes the fence file's exclusive flock, reads the last token, adds
//!   one, writes it back and `fsync`s it, and only then lets go and returns. Tokens are thus
//!   strictly increasing per name across kinds, processes and restarts; readers and permits
//!   each get their own, although they hold at once. A fence file without a token (new,
//!   deleted by hand, or torn by a crash mid-write) starts above the token the lock file
//!   records and above the clock in microseconds, so tokens still increase unless the clock
//!   steps back.
//! - **The fence is also the gate.** A writer (or a mutex, or a candidate) takes the fence
//!   *before* it tries the lock file, and tries only while it holds it. Whoever holds the
//!   fence therefore knows that no writer takes the lock meanwhile; the downgrade, the
//!   semaphore's admission, `inspect` and election observers rely on it. Readers take the
//!   shared flock first and the fence after, for their token; nobody waits for a lock file
//!   while holding the fence, so the two never deadlock.
//! - **Readers.** A reader holds the lock file's shared flock and, to be seen, a record file
//!   of its own in `.readers/`, created under the fence and exclusively flocked by the reader
//!   for as long as it reads, removed when it releases. One file per reader (rather than one
//!   shared record) because readers come and go independently: each writes only its own
//!   file, no reader rewrites another's, and a reader that dies is told from a live one by
//!   the same flock probe as a writer: a record file whose flock can be shared is a dead
//!   reader's, and whoever finds it removes it.
//! - **Downgrade.** When the write guard of a hold goes while read guards of it live, the
//!   hold becomes a read hold in place, with its token: under the fence, the holder creates
//!   its reader record, marks the lock file's record free and converts its flock from
//!   `LOCK_EX` to `LOCK_SH` on the same open file. flock(2) does not promise that this
//!   conversion is atomic (the kernel may drop the lock and take it again); holding the fence
//!   throughout means no writer, all of which pass the fence first, can take the lock in
//!   between, while readers may join at once.
//! - **Semaphores.** A semaphore of N permits keeps no N slot files: under the fence, a
//!   contender lists `.permits/`, counts the record files whose flock is held (removing the
//!   dead), and if fewer than N are live, creates its own record file, flocks it exclusively,
//!   and takes the next token. The work per admission grows with the permits held, not with
//!   N (up to a million), and nothing per permit is left on disk. The count N is recorded in
//!   the fence file by every admission.
//! - **Conflicts.** A semaphore asked with another count than the one recorded while permits
//!   are held gets [`Error::Conflict`](lockkit_core::Error::Conflict); once no permit is held,
//!   the next admission records its own count. A name held as a lock (mutex, writer or
//!   readers) and asked as a semaphore, or held as a semaphore and asked as a lock, gets
//!   `Conflict` too: the admission and the lock's grants check each other under the fence.
//!   So does a name that an election's leader holds, asked as any other kind, and a name held
//!   as any other kind, asked by a candidate (see [Elections](#elections)).
//! - **Waiting.** A release in this process wakes the waiters of this process at once
//!   (a process-wide wake-up per lock name, shared by every provider of the directory).
//!   Waiters cannot be notified of releases by *other* processes; as a safety net they retry
//!   every 10 ms, doubling up to 50 ms ([`FileLockProviderBuilder::poll_min`],
//!   [`poll_max`](FileLockProviderBuilder::poll_max)), so a release in another process is
//!   noticed within about 50 ms. (Election observers are notified across processes: see
//!   [Elections](#elections).)
//! - **Not fair.** There is no queue: whoever tries first after a release wins, for every
//!   kind. A writer does not stop new readers from joining readers that hold the lock, so a
//!   steady stream of overlapping readers can keep a writer waiting; the backend declares
//!   `fair: false`, and the kit skips the arrival-order cases.
//! - **Cancel safety.** A try runs on a blocking thread and never waits for a lock (only, an
//!   instant, for the fence); if the acquisition is dropped while a try runs, a hold the try
//!   took is freed when it returns.
//! - **Release.** A writer marks its record free (keeping the token) and closes the lock
//!   file, which frees the flock; a leader does the same under the fence, and writes the end
//!   of its term to the journal; a reader removes its record file and closes both; a permit
//!   removes its record file. Then this process's waiters are woken.
//! - **Breaking.** [`break_lock`](lockkit_core::LockProvider::break_lock) takes the fence and
//!   deletes the held lock file and every live reader's and permit's record file (a broken
//!   leader's term is closed in the journal). A holder keeps its flock on a file that no path
//!   names any more, which excludes nobody: its checker finds the file gone at its next check
//!   (`check_every`) and reports `RecordGone`. The fence file stays, so the next token is
//!   greater. Breaking needs write access to the directory.
//! - **Inspection.** [`inspect`](lockkit_core::LockProvider::inspect) takes the fence for an
//!   instant and reports the writer (the lock file's record, when an instant's shared flock
//!   shows an exclusive one is held: under the fence, that probe never makes a writer's try
//!   fail), every live reader and every live permit, each with its token, kind,
//!   `pid … on host (attempt …)` and since when (the core's `OwnerMeta`, as on Redis and
//!   ZooKeeper); a leader is reported as a [`HoldKind::Candidate`](lockkit_core::HoldKind)
//!   with its identity, which is what [`Election::leader`](lockkit_core::Election::leader)
//!   reads. It never reports a read-held lock as free: the readers are seen by their
//!   records, not by the probe, which shares the flock with them. The waiter count is
//!   unknown across processes. A name never used is reported idle without creating a file.
//!
//! # Elections
//!
//! An election ([`LockProvider::election`](lockkit_core::LockProvider::election)) is a lock
//! whose holder publishes who it is, and whose changes of holder are written down for
//! observers.
//!
//! - **Candidates.** A campaign is an exclusive acquisition of the name's lock file, as a
//!   mutex's: one leader at a time, among every process of the machine; a leader that dies
//!   leads no more the moment its process is gone. Each term's token is drawn from the fence,
//!   as every grant's, so terms only grow. The grant writes the lock file's record with kind
//!   `candidate` and the leader's identity (any 1 to 1024 bytes: their length, then the bytes
//!   with those outside printable ASCII, spaces and `%` written `%xx`, so that a damaged line
//!   reads as no identity rather than another one), so `inspect` and
//!   [`Election::leader`](lockkit_core::Election::leader) answer who leads, for which term and
//!   since when, from any process:
//!
//!   ```text
//!   lockkit-file 1
//!   token 1732190000123460
//!   held lockkit1 5f0c8d2e-…-attempt-uuid myhost 1234 1732190000123
//!   kind candidate
//!   identity 13 10.0.0.7:8080
//!   ```
//! - **The journal.** Under the same fence, the grant appends `elected TERM SINCE IDENTITY`
//!   to `NAME.election`, after `vacant OLD` for a predecessor whose end nobody wrote (it
//!   died, or its lock file was deleted); a resignation appends `vacant TERM` under the fence
//!   while its term is the last one written. Each line is numbered; the journal keeps its
//!   last 64 to 128 lines (rewritten and renamed over in one step when it grows past that),
//!   and names a random epoch in its first line, which changes only when the journal is made
//!   anew (it was deleted, or damaged by a crash in the middle of a write).
//! - **Observers.** [`Election::observe`](lockkit_core::Election::observe) reports the current
//!   state first (the lock file's leader, or vacant), then every change. An observer *looks*
//!   (for an instant, under the fence, so the journal and the lock file agree) whenever it is
//!   woken, and reports the journal's new lines in order, so a term that came and went
//!   between two looks is reported all the same; then it checks the lock file, which is how a
//!   leader's death (its process wrote nothing) is seen. It is woken
//!   - in this process, at once, by the wake-ups of the lock file and the journal (every
//!     grant, release and loss of this process sends them);
//!   - across processes, by **inotify** (Linux): one inotify instance per observer, watching
//!     the directory of the lock file for writes and closes after writing, creations,
//!     deletions and renames of the lock file or the journal. The instance is non-blocking
//!     and waited on through the Tokio reactor, so an idle observer holds no thread; the
//!     events of other files in the directory wake it only to be read and dropped;
//!   - as a safety net only, by a re-read every
//!     [`observe_every`](FileLockProviderBuilder::observe_every) (five seconds) when nothing
//!     else did.
//! - **Gaps.** When the observer may have missed something the journal cannot replay, it says
//!   [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap), then the current state: when its
//!   watch was lost (the directory deleted or moved, the watch removed: the observer sets it
//!   again at once) or the kernel's event queue overflowed, when the journal lost lines the
//!   observer had not read (it fell behind by more than the journal keeps, or the journal was
//!   deleted or made anew), when a look failed, and when the lock file names a leader the journal does
//!   not explain. A gap is never silent and no term is reported out of order: the journal's
//!   lines are read in their order, and a term not above the last one reported is skipped.
//! - **Kinds.** A name in use as an election is refused as a lock, a read-write lock or a
//!   semaphore with [`Error::Conflict`](lockkit_core::Error::Conflict) while a leader holds it,
//!   and a candidate is refused with `Conflict` while the name is held as one of those. The
//!   check is made under the fence when a try finds the name held; whatever it finds, the
//!   kinds exclude each other (they share the lock file's flock, and the semaphore checks it),
//!   so a conflict a try cannot see (a release in flight) makes it wait, never share.
//!   An observer of a name held as a lock sees no leader.
//!
//! # What is left on disk
//!
//! Lock files and fence files are never deleted, not even by `try_acquire` or a timed-out
//! `acquire`: a lock that is not held is an idle lock file whose record says `free` (or
//! names a dead holder, which `inspect` sees through) and a fence file with the last token.
//! Both are small (512 bytes; a lock file whose leader published a long identity keeps the
//! size of that record, up to 4 KiB). An election keeps its journal (at most 128 lines), and
//! its rewrite may leave a `NAME.election-new` behind after a crash. Observing creates no
//! file; it creates the sub-directory a long name's files live in, when missing, to watch
//! it. A name used for reading keeps an empty `.readers/` directory, a semaphore an empty
//! `.permits/` directory; record files go with their holders (those of
//! dead holders are removed by the next admission or `inspect` of the name).
//! Deleting lock or fence files is what would break the locks: a flock belongs to the file,
//! not to its path, so a holder of a deleted lock file excludes nobody, and a new file under
//! the same path would be locked by someone else at once. Never delete them while processes
//! may use them; remove the whole directory only when no process uses it.
//!
//! # Loss
//!
//! A hold (a leader's included) is not lost while its process lives, with one exception:
//! someone deletes or replaces its lock file (or a permit's record file). Each provider
//! checks the files of its held locks every second ([`FileLockProviderBuilder::check_every`]) and reports a deleted
//! one as [`LossReason::RecordGone`](lockkit_core::LossReason::RecordGone); releasing such a
//! hold returns `LockLost`, and an acquirer that locked a file just as it was deleted
//! notices and locks the new one instead. A dead holder's hold, share or permit comes back
//! the moment its process is gone: the OS frees its flocks.
//!
//! # Runtime
//!
//! Every file operation runs on the current Tokio runtime's blocking threads (or inline,
//! outside a runtime), so acquisitions, releases and downgrades work from any runtime. A
//! dropped guard's hold is freed before `drop` returns (a candidate's resignation, which waits
//! for the fence, runs on lockkit's home runtime). The one background task, a provider's
//! checker of held files, runs on lockkit's home runtime ([`lockkit_core::home`]), whatever
//! runtime granted the holds. An election observer has no task: it does its work when polled, on the runtime
//! polling it, which needs IO and time enabled (`#[tokio::main]` and `enable_all()` do); its
//! inotify instance is registered with that runtime's reactor and registered again with the
//! next one when that runtime has gone. Polled on a runtime without IO, it reports an error
//! saying so and goes on with its safety-net re-read: Tokio's panic at the registration is
//! caught (its message may still show on standard error), unless panics abort.
//!
//! # Limits
//!
//! - Unix only, and local filesystems only: `flock` on NFS or other network filesystems is
//!   emulated or ignored depending on the system. Processes on different machines need the
//!   Redis or ZooKeeper backend.
//! - Lock files are created with the process's umask; processes of different users need a
//!   directory and umask that let them all open the files for writing.
//! - Processes of this version and of versions before the fence file (which took tokens
//!   from the lock file's record and knew no other kind than the mutex) must not share a
//!   directory: the older ones pass no gate. A directory left by an older version is fine:
//!   the first fence of a name starts above the token its lock file records.
//! - A process stopped (`SIGSTOP`) while it holds a name's fence, for the few file
//!   operations it takes, stops every grant of that name (and its observers' looks) until it
//!   continues.
//! - Observers need inotify, which only Linux has. On other Unix systems (macOS, the BSDs)
//!   elections work the same (exclusion, terms, `leader()`, the journal), and an observer
//!   hears of changes made in its own process at once, but of changes made by other
//!   processes only at its safety-net re-read: within
//!   [`observe_every`](FileLockProviderBuilder::observe_every), not at once. There, lower
//!   the interval if that matters, or use the Redis or ZooKeeper backend.
//! - Each observer takes one inotify instance and one watch: Linux allows 128 instances per
//!   user by default (`fs.inotify.max_user_instances`); past the limit, `observe` fails with
//!   an error that says which limit to raise. A later failure to watch again (the directory
//!   cannot be re-created, say) is reported once in the stream; the observer then goes on with
//!   its re-read, trying to watch again at each one, and reports a gap once it can.
//! - A candidate waiting in another process than the one that resigns, like every waiter,
//!   notices by retrying (every 10 to 50 ms), so leadership passes within that.
//! - Waiting candidates of other processes wake the name's observers each time they retry
//!   (the close of the lock file after a try looks like a release); each such wake costs the
//!   observer one look under the fence, and reports nothing unless something changed.

#![cfg(unix)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod election;
mod journal;
mod lockfile;
mod names;
mod provider;
mod record;
mod wakeups;
mod watch;

pub use names::{
    COMPONENT_LEN, ELECTION_SUFFIX, FENCE_SUFFIX, LOCK_SUFFIX, LockFiles, PERMITS_SUFFIX, READERS_SUFFIX, encode_name,
};
pub use provider::{
    DEFAULT_CHECK_EVERY, DEFAULT_OBSERVE_EVERY, DEFAULT_POLL_MAX, DEFAULT_POLL_MIN, FileLockProvider,
    FileLockProviderBuilder, MARKER_FILE, OPTIONS, SCHEME,
};

/// The backend's name in errors, spans and capability tables.
pub const BACKEND: &str = "file";
