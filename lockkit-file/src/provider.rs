//! [`FileLockProvider`] and its builder.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::LockBackend;
use lockkit_core::{Error, LockName, LockProvider, Result};

use crate::BACKEND;
use crate::backend::{FileBackend, Settings};

/// The first pause of a waiter between two tries, by default.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_millis(10);
/// The longest pause of a waiter between two tries, by default.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(50);
/// How often held lock files are checked for deletion, by default.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The file in the lock directory that marks it as one and proves it writable. Its name has
/// a `.` and no `.lock` suffix, so it can never be a lock file.
pub const MARKER_FILE: &str = "lockkit.dir";

const MARKER_TEXT: &str = "This directory holds the lock files of lockkit-file.\n\
Do not delete files here while processes may use the locks: a deleted lock file excludes nobody.\n";

/// A lock provider on a local directory: OS file locks, shared by every process of the
/// machine that opens the same directory. See the [crate docs](crate) for how it works.
///
/// Cheap to clone; clones are the same provider.
#[derive(Clone, Debug)]
pub struct FileLockProvider {
    backend: Arc<FileBackend>,
}

impl FileLockProvider {
    /// Opens the lock directory `dir`, creating it (and its parents) when missing, with
    /// default settings.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `dir` cannot be created, is not a directory, or is not
    /// writable; the message says which and names the directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a provider on `dir`, to change how waiters poll or how often held
    /// lock files are checked.
    pub fn builder(dir: impl AsRef<Path>) -> FileLockProviderBuilder {
        FileLockProviderBuilder {
            dir: dir.as_ref().to_path_buf(),
            poll_min: DEFAULT_POLL_MIN,
            poll_max: DEFAULT_POLL_MAX,
            check_every: DEFAULT_CHECK_EVERY,
        }
    }

    /// The lock directory (canonical: symbolic links resolved).
    pub fn dir(&self) -> &Path {
        &self.backend.settings().dir
    }

    /// The lock file of the lock called `name`, for administrators and tests.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name or one longer than 1024 bytes.
    pub fn lock_path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.backend.lock_path(&LockName::new(name)?))
    }
}

impl LockProvider for FileLockProvider {
    fn backend(&self) -> Arc<dyn LockBackend> {
        self.backend.clone()
    }
}

/// Builds a [`FileLockProvider`]; every setting is checked by [`build`](Self::build).
#[derive(Clone, Debug)]
pub struct FileLockProviderBuilder {
    dir: PathBuf,
    poll_min: Duration,
    poll_max: Duration,
    check_every: Duration,
}

impl FileLockProviderBuilder {
    /// How a waiter polls for releases by other processes: first after `min`, then twice as
    /// long each time up to `max`. Releases in this process wake waiters at once whatever
    /// these are. Default 10 ms to 50 ms.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// How often the provider checks that the files of its held locks were not deleted
    /// (a deleted lock file is reported as [`LossReason::RecordGone`](lockkit_core::LossReason)).
    /// Default one second.
    pub fn check_every(mut self, every: Duration) -> Self {
        self.check_every = every;
        self
    }

    /// Checks the settings, creates the directory when missing and opens the provider.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a zero or inverted poll interval, a zero check interval,
    /// or a directory that cannot be created, is not a directory or is not writable.
    pub fn build(self) -> Result<FileLockProvider> {
        if self.poll_min.is_zero() || self.poll_max < self.poll_min {
            return Err(Error::invalid_config(
                BACKEND,
                format!(
                    "the poll interval must be above zero with min <= max, not {:?} to {:?}; the default is 10 ms to 50 ms",
                    self.poll_min, self.poll_max
                ),
            ));
        }
        if self.check_every.is_zero() {
            return Err(Error::invalid_config(
                BACKEND,
                "check_every must be above zero; the default checks held lock files every second",
            ));
        }
        let dir = open_dir(&self.dir)?;
        let settings =
            Settings { dir, poll_min: self.poll_min, poll_max: self.poll_max, check_every: self.check_every };
        Ok(FileLockProvider { backend: FileBackend::new(settings) })
    }
}

/// Creates the lock directory when missing, checks it is a writable directory, and returns
/// its canonical path.
fn open_dir(dir: &Path) -> Result<PathBuf> {
    let shown = dir.display();
    if dir.as_os_str().is_empty() {
        return Err(Error::invalid_config(
            BACKEND,
            "the lock directory is empty; name a directory such as /var/lock/app",
        ));
    }
    if let Err(error) = std::fs::create_dir_all(dir) {
        let why = if dir.exists() && !dir.is_dir() {
            "it exists and is not a directory".to_owned()
        } else {
            error.to_string()
        };
        return Err(Error::invalid_config(
            BACKEND,
            format!("cannot create the lock directory {shown}: {why}; name a directory this process may create"),
        ));
    }
    if !dir.is_dir() {
        return Err(Error::invalid_config(
            BACKEND,
            format!("the lock directory {shown} is not a directory; name a directory, not a file"),
        ));
    }
    let canonical = std::fs::canonicalize(dir).map_err(|error| {
        Error::invalid_config(BACKEND, format!("cannot resolve the lock directory {shown}: {error}"))
    })?;
    write_marker(&canonical).map_err(|error| {
        Error::invalid_config(
            BACKEND,
            format!(
                "the lock directory {shown} is not writable ({error}); lock files are created there, so give this process write access or name another directory"
            ),
        )
    })?;
    Ok(canonical)
}

fn write_marker(dir: &Path) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(dir.join(MARKER_FILE))?;
    if file.metadata()?.len() == 0 {
        file.write_all(MARKER_TEXT.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config_message(result: Result<FileLockProvider>) -> String {
        match result {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

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
        let builder = FileLockProvider::builder(root.path());
        assert!(config_message(builder.clone().poll_interval(Duration::ZERO, Duration::ZERO).build()).contains("poll"));
        let inverted = builder.clone().poll_interval(Duration::from_secs(1), Duration::from_millis(1));
        assert!(config_message(inverted.build()).contains("poll"));
        assert!(config_message(builder.check_every(Duration::ZERO).build()).contains("check_every"));
    }
}
