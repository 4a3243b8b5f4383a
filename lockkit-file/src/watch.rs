//! The notifications an election observer waits on across processes: an inotify watch of the
//! directory that holds the election's lock file and journal (Linux).
//!
//! One inotify instance per observer, with one watch on the directory: creations, writes,
//! closes of files opened for writing, deletions and renames in it, and the directory's own
//! deletion or move. Events about other files of the directory are read and dropped; events
//! about the election's lock file or journal make the observer read the election again. The
//! instance is non-blocking and waited on through the Tokio reactor of the runtime that polls
//! the observer, so an idle observer holds no thread. On other systems there is no watch: an
//! observer follows changes made in its own process at once, and those of other processes at
//! its safety-net re-read (see the crate docs).

/// What one read of the watch's events found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Seen {
    /// An event about a file that matters (the lock file or the journal).
    pub(crate) relevant: bool,
    /// The watch is gone (the directory was deleted or moved, the file system unmounted, or
    /// the watch removed): it must be set again, and events may have been missed.
    pub(crate) lost: bool,
    /// The kernel's event queue overflowed: events were missed.
    pub(crate) overflow: bool,
}

#[cfg(target_os = "linux")]
pub(crate) use linux::DirWatch;
#[cfg(all(target_os = "linux", feature = "test-util"))]
pub(crate) use linux::Shared;

#[cfg(not(target_os = "linux"))]
pub(crate) use other::DirWatch;
#[cfg(all(not(target_os = "linux"), feature = "test-util"))]
pub(crate) use other::Shared;

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::OsStr;
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::panic::AssertUnwindSafe;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI32, Ordering};

    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use tokio::net::unix::pipe;

    use super::Seen;

    /// The events watched on the directory.
    const MASK: WatchFlags = WatchFlags::MODIFY
        .union(WatchFlags::CLOSE_WRITE)
        .union(WatchFlags::CREATE)
        .union(WatchFlags::DELETE)
        .union(WatchFlags::MOVED_FROM)
        .union(WatchFlags::MOVED_TO)
        .union(WatchFlags::DELETE_SELF)
        .union(WatchFlags::MOVE_SELF)
        .union(WatchFlags::ONLYDIR);

    /// The events that say the watch is gone.
    const GONE: ReadFlags =
        ReadFlags::IGNORED.union(ReadFlags::DELETE_SELF).union(ReadFlags::MOVE_SELF).union(ReadFlags::UNMOUNT);

    /// The size of the buffer events are read into: many events of names up to 255 bytes.
    const BUFFER_LEN: usize = 16 * 1024;

    /// An observer's inotify instance and its current watch; shared with the
    /// `drop_observer_watches` fault hook.
    #[derive(Debug)]
    pub(crate) struct Shared {
        fd: OwnedFd,
        /// The current watch descriptor; negative when there is none.
        wd: AtomicI32,
    }

    impl Shared {
        /// Removes the current watch, as the kernel does when the watched directory goes: the
        /// observer then reads `IN_IGNORED` for it. Whether there was one to remove.
        #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
        pub(crate) fn drop_watch(&self) -> bool {
            let wd = self.wd.load(Ordering::SeqCst);
            wd >= 0 && inotify::remove_watch(&self.fd, wd).is_ok()
        }
    }

    /// The watch of one directory, for one observer.
    pub(crate) struct DirWatch {
        shared: Arc<Shared>,
        dir: PathBuf,
        /// The names, in the directory, of the files that matter.
        names: Vec<Vec<u8>>,
        /// A duplicate of the instance's descriptor, registered with the reactor of the
        /// runtime that waits on it; made again on another runtime when that one has gone.
        registered: Option<pipe::Receiver>,
        buffer: Box<[MaybeUninit<u8>]>,
    }

    impl std::fmt::Debug for DirWatch {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DirWatch").field("dir", &self.dir).field("shared", &self.shared).finish_non_exhaustive()
        }
    }

    impl DirWatch {
        /// A new inotify instance watching `dir` (created when missing) for events about the
        /// files `names` in it.
        pub(crate) fn new(dir: &Path, names: &[&OsStr]) -> io::Result<Self> {
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
            let shared = Arc::new(Shared { fd, wd: AtomicI32::new(-1) });
            let mut watch = Self {
                shared,
                dir: dir.to_path_buf(),
                names: names.iter().map(|name| name.as_bytes().to_vec()).collect(),
                registered: None,
                buffer: vec![MaybeUninit::uninit(); BUFFER_LEN].into_boxed_slice(),
            };
            watch.rewatch()?;
            Ok(watch)
        }

        /// The instance, for the fault hook.
        #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
        pub(crate) fn shared(&self) -> &Arc<Shared> {
            &self.shared
        }

        /// Sets the watch on the directory again (creating the directory when it is
        /// missing): after it was lost, or after an error.
        pub(crate) fn rewatch(&mut self) -> io::Result<()> {
            let old = self.shared.wd.swap(-1, Ordering::SeqCst);
            if old >= 0 {
                // Gone already when the kernel dropped it; otherwise it follows a moved
                // directory, which is not ours any more.
                let _ = inotify::remove_watch(&self.shared.fd, old);
            }
            let wd = match inotify::add_watch(&self.shared.fd, &self.dir, MASK) {
                Err(rustix::io::Errno::NOENT) => {
                    std::fs::create_dir_all(&self.dir)?;
                    inotify::add_watch(&self.shared.fd, &self.dir, MASK)?
                }
                other => other?,
            };
            self.shared.wd.store(wd, Ordering::SeqCst);
            Ok(())
        }

        /// Waits until events come, and reads them all.
        ///
        /// # Errors
        ///
        /// When the instance cannot be waited on (a runtime without IO, say) or read.
        pub(crate) async fn changes(&mut self) -> io::Result<Seen> {
            let mut fresh = false;
            loop {
                if self.registered.is_none() {
                    self.registered = Some(register(&self.shared.fd)?);
                    fresh = true;
                }
                let Self { shared, names, buffer, registered, .. } = self;
                let Some(receiver) = registered.as_ref() else { continue };
                if let Err(error) = receiver.readable().await {
                    // The reactor it was registered with has gone (its runtime shut down):
                    // register again on this runtime; the kernel kept the events meanwhile.
                    *registered = None;
                    if fresh {
                        return Err(error);
                    }
                    tracing::debug!(%error, "an observer's inotify registration ended; registering it again");
                    continue;
                }
                let wd = shared.wd.load(Ordering::SeqCst);
                match receiver.try_io(|| drain(receiver.as_fd(), buffer, wd, names)) {
                    Ok(seen) => return Ok(seen),
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error),
                }
            }
        }
    }

    /// Registers a duplicate of `fd` with the current runtime's reactor.
    ///
    /// Tokio's `AsyncFd` takes a raw descriptor (its safe constructors are deprecated as
    /// unsound), so the instance goes through `pipe::Receiver`, which takes an `OwnedFd` and
    /// does nothing with it but wait for readiness: the events are read with rustix. The
    /// registration panics on a runtime without IO; that panic is caught and turned into an
    /// error that says what to enable.
    fn register(fd: &OwnedFd) -> io::Result<pipe::Receiver> {
        let duplicate = fd.try_clone()?;
        match std::panic::catch_unwind(AssertUnwindSafe(|| pipe::Receiver::from_owned_fd_unchecked(duplicate))) {
            Ok(registered) => registered,
            Err(_) => Err(io::Error::other(
                "the Tokio runtime polling the observer has no IO driver; build it with enable_io() or enable_all()",
            )),
        }
    }

    /// Reads every event queued, and says what they mean for the watch `wd` and the files
    /// `names`. `WouldBlock` when there was none (the reactor's readiness is then cleared).
    fn drain(fd: impl AsFd, buffer: &mut [MaybeUninit<u8>], wd: i32, names: &[Vec<u8>]) -> io::Result<Seen> {
        let mut reader = inotify::Reader::new(fd, buffer);
        let mut seen = Seen::default();
        let mut any = false;
        loop {
            match reader.next() {
                Ok(event) => {
                    any = true;
                    let flags = event.events();
                    if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                        seen.overflow = true;
                    }
                    if event.wd() != wd {
                        // A watch replaced since: its last events do not matter.
                        continue;
                    }
                    if flags.intersects(GONE) {
                        seen.lost = true;
                    }
                    if event.file_name().is_some_and(|name| names.iter().any(|n| n.as_slice() == name.to_bytes())) {
                        seen.relevant = true;
                    }
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
        if any { Ok(seen) } else { Err(io::ErrorKind::WouldBlock.into()) }
    }

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used)]
        use super::*;

        #[tokio::test]
        async fn events_about_the_files_that_matter_are_told_from_the_others() {
            let dir = tempfile::tempdir().unwrap();
            let mut watch = DirWatch::new(dir.path(), &[OsStr::new("e.lock")]).unwrap();
            std::fs::write(dir.path().join("other.lock"), b"x").unwrap();
            let seen = watch.changes().await.unwrap();
            assert!(!seen.relevant && !seen.lost && !seen.overflow, "{seen:?}");
            std::fs::write(dir.path().join("e.lock"), b"x").unwrap();
            let mut seen = watch.changes().await.unwrap();
            while !seen.relevant {
                seen = watch.changes().await.unwrap();
            }
            // A removed watch is a lost one, and can be set again.
            assert!(watch.shared().drop_watch());
            let mut seen = watch.changes().await.unwrap();
            while !seen.lost {
                seen = watch.changes().await.unwrap();
            }
            watch.rewatch().unwrap();
            std::fs::write(dir.path().join("e.lock"), b"y").unwrap();
            let seen = watch.changes().await.unwrap();
            assert!(seen.relevant && !seen.lost, "the old watch's events are dropped: {seen:?}");
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod other {
    use std::ffi::OsStr;
    use std::io;
    use std::path::Path;
    use std::sync::Arc;

    use super::Seen;

    /// No instance: there is no inotify here.
    #[derive(Debug)]
    pub(crate) struct Shared;

    impl Shared {
        #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
        pub(crate) fn drop_watch(&self) -> bool {
            false
        }
    }

    /// No watch: [`DirWatch::new`] says so, and observers follow their safety-net re-read.
    #[derive(Debug)]
    pub(crate) struct DirWatch {
        shared: Arc<Shared>,
    }

    impl DirWatch {
        pub(crate) fn new(_dir: &Path, _names: &[&OsStr]) -> io::Result<Self> {
            Err(io::Error::new(io::ErrorKind::Unsupported, "no inotify on this system"))
        }

        #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
        pub(crate) fn shared(&self) -> &Arc<Shared> {
            &self.shared
        }

        pub(crate) fn rewatch(&mut self) -> io::Result<()> {
            Ok(())
        }

        pub(crate) async fn changes(&mut self) -> io::Result<Seen> {
            std::future::pending().await
        }
    }
}
