//! [`FileLockProvider`], its `file` scheme, and how its builder opens it.

use std::path::{Path, PathBuf};
#[cfg(feature = "test-util")]
use std::time::Duration;

use lockkit_core::config::{ConnectFuture, Scheme, StoreUrl};
use lockkit_core::{LockName, LockProvider, Result, TypedProvider};

use crate::BACKEND;
use crate::checker::FileBackend;
use crate::config::{FileLockProviderBuilder, OPTIONS, default_dir};
use crate::names::LockFiles;

/// The `file` scheme: `file:///path/to/dir`, or `file://` for [`FileLockProvider::default_dir`].
pub const SCHEME: Scheme = Scheme::new(&["file"], BACKEND, connect_url)
    .with_urls(&[(
        "file:///path/to/dir",
        "local files, across the processes of one machine (`file://` alone: the default directory)",
    )])
    .with_options(OPTIONS);
fn connect_url(url: StoreUrl) -> ConnectFuture {
    Box::pin(async move { FileLockProvider::connect(&url).map(LockProvider::from) })
}

/// A lock provider on a local directory: OS file locks, shared by every process of the
/// machine that opens the same directory. See the [crate docs](crate) for how it works.
///
/// Cheap to clone; clones are the same provider. It dereferences to [`LockProvider`], so
/// `provider.lock(name)` works directly, and converts into one with `LockProvider::from`.
#[derive(Clone, Debug)]
pub struct FileLockProvider(TypedProvider<FileBackend>);
lockkit_core::typed_provider!(FileLockProvider, FileBackend);

impl FileLockProvider {
    /// Opens the lock directory `dir`, creating it (and its parents) when missing, with
    /// default settings.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) when `dir` cannot be created, is not a directory, or is not
    /// writable; the message says which and names the directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder().dir(dir).build()
    }

    /// Opens the directory a `file://` URL names, with its options: `file:///path/to/dir`,
    /// or `file://` for [`default_dir`](Self::default_dir). There is no server, so this
    /// is what connecting to such a URL does.
    ///
    /// # Errors
    ///
    /// As for [`FileLockProviderBuilder::build`], and [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a URL that
    /// names no absolute directory, or an unknown option.
    pub fn connect(url: &StoreUrl) -> Result<Self> {
        FileLockProviderBuilder::from_url(url)?.build()
    }

    /// A builder, to choose the directory and change how waiters poll or how often held
    /// lock files are checked.
    pub fn builder() -> FileLockProviderBuilder {
        FileLockProviderBuilder::default()
    }

    /// The default lock directory, per user so that users do not share locks:
    /// `$XDG_RUNTIME_DIR/lockkit`, or `lockkit-$USER` in the system's temporary directory.
    pub fn default_dir() -> PathBuf {
        default_dir()
    }

    /// The lock directory (canonical: symbolic links resolved).
    pub fn dir(&self) -> &Path {
        &self.backend().settings().dir
    }

    /// Fault hook: the provider dies as its process would. Every flock it holds is let go
    /// (other providers and processes can take the locks at once), its guards report
    /// [`LossReason::ClientClosed`](lockkit_core::LossReason::ClientClosed), and later
    /// acquisitions fail with a connection error.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn kill(&self) {
        self.backend().kill();
    }

    /// Fault hook: emulates a kernel whose conversion of a flock from `LOCK_EX` to
    /// `LOCK_SH` is not atomic (flock(2) allows it: "the existing lock is first removed, and
    /// then a new lock is established"). From now on, a downgrade of this provider lets go of
    /// the lock file's flock, waits `pause`, then takes `LOCK_SH`. With `gate: false` it also
    /// skips the gate (the name's fence, which writers pass before they try), which is what
    /// lets a waiting writer slip in during the pause; `None` goes back to normal.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn split_downgrades(&self, split: Option<(Duration, bool)>) {
        let split = split.map(|(pause, gate)| crate::config::SplitDowngrade { pause, gate });
        self.backend().split_downgrades(split);
    }

    /// Fault hook: removes the inotify watch of every election observer of this provider,
    /// as the kernel does when a watched directory is deleted. Each observer notices at its
    /// next poll, sets its watch again, and reports
    /// [`LeaderEvent::Gap`](lockkit_core::LeaderEvent::Gap) then the current state, as it
    /// would after any lost watch or overflowed event queue. Returns how many watches were
    /// removed (none on systems without inotify).
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn drop_observer_watches(&self) -> usize {
        self.backend().drop_observer_watches()
    }

    /// The lock file of the lock called `name`, for administrators and tests.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for an empty name or one longer than 1024 bytes.
    pub fn lock_path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.lock_files(name)?.lock)
    }

    /// Every file of the lock called `name` (lock file, fence, reader and permit records),
    /// for administrators and tests; see the [crate docs](crate) for what each holds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lockkit_core::Error::InvalidName) for an empty name or one longer than 1024 bytes.
    pub fn lock_files(&self, name: &str) -> Result<LockFiles> {
        Ok(self.backend().lock_files(&LockName::new(name)?))
    }
}

impl FileLockProviderBuilder {
    /// Checks the settings, creates the directory when missing, checks that it is a writable
    /// directory, and opens the provider. There is no server: nothing else is reached.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for a missing directory, a poll interval out of range or
    /// inverted, a check or observe interval out of range, or a directory that cannot be
    /// created, is not a directory or is not writable.
    pub fn build(self) -> Result<FileLockProvider> {
        let settings = self.check()?;
        self.options().provider(FileBackend::new(settings)).map(FileLockProvider)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use lockkit_testkit::refused as config_message;

    use super::*;
    use crate::MARKER_FILE;

    #[test]
    fn missing_directories_are_created() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/c");
        let provider = FileLockProvider::open(&dir).unwrap();
        assert!(dir.join(MARKER_FILE).is_file());
        assert_eq!(provider.dir(), std::fs::canonicalize(&dir).unwrap());
    }

    #[test]
    fn files_and_bad_settings_are_refused_with_advice() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(config_message(FileLockProvider::open(&file)).contains("not a directory"));
        assert!(config_message(FileLockProvider::open(file.join("sub"))).to_lowercase().contains("not a directory"));
        assert!(config_message(FileLockProvider::open("")).contains("empty"));
        let builder = FileLockProvider::builder().dir(root.path());
        assert!(config_message(builder.clone().poll_min(Duration::ZERO).build()).contains("poll_min"));
        let inverted = builder.clone().poll_min(Duration::from_secs(1)).poll_max(Duration::from_millis(1));
        assert!(config_message(inverted.build()).contains("poll_min"));
        assert!(config_message(builder.clone().check_every(Duration::ZERO).build()).contains("check_every"));
        let eager = builder.clone().observe_every(Duration::from_millis(10));
        assert!(config_message(eager.build()).contains("observe_every"));
        assert!(
            config_message(builder.clone().option("observe_every", "2h").unwrap().build()).contains("observe_every")
        );
        let huge = builder.clone().option("check_every", "5000000000000000h");
        assert!(huge.is_err() || config_message(huge.and_then(FileLockProviderBuilder::build)).contains("at most"));
        assert!(config_message(FileLockProvider::builder().build()).contains("no lock directory"));
    }

    #[test]
    fn urls_name_a_directory_and_options() {
        let root = tempfile::tempdir().unwrap();
        let url =
            StoreUrl::parse(&format!("file://{}?check_every=200ms&observe_every=2s", root.path().display())).unwrap();
        let provider = FileLockProvider::connect(&url).unwrap();
        assert_eq!(provider.dir(), std::fs::canonicalize(root.path()).unwrap());
        let relative = StoreUrl::parse("file://relative/dir").unwrap();
        assert!(config_message(FileLockProvider::connect(&relative)).contains("three slashes"));
        let unknown = StoreUrl::parse(&format!("file://{}?lease=1s", root.path().display())).unwrap();
        assert!(config_message(FileLockProvider::connect(&unknown)).contains("takes: poll_min"));
    }
}
