//! [`FileLockProvider`] and its builder.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockkit_core::config::{
    self, ConnectFuture, Key, MAX_HOLD, OptionKey, Options, ProviderBuilder, STORE_ID, Scheme, StoreUrl,
};
use lockkit_core::{Error, LockName, LockProvider, Result, TypedProvider};

use crate::BACKEND;
use crate::checker::FileBackend;
use crate::config::Settings;
use crate::names::LockFiles;

/// The first pause of a waiter between two tries, by default.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_millis(10);
/// The longest pause of a waiter between two tries, by default.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(50);
/// How often held lock files are checked for deletion, by default.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often an election observer reads the election again without a notification (its
/// safety net), by default.
pub const DEFAULT_OBSERVE_EVERY: Duration = Duration::from_secs(5);

/// The file in the lock directory that marks it as one and proves it writable. Its name has
/// a `.` and no `.lock` suffix, so it can never be a lock file.
pub const MARKER_FILE: &str = "lockkit.dir";

const MILLI: Duration = Duration::from_millis(1);
const POLL_MIN: Key<Duration> = Key::new("poll_min", "the first pause of a waiter between two tries")
    .default(DEFAULT_POLL_MIN)
    .range_said("1ms to poll_max");
const POLL_MAX: Key<Duration> = Key::new("poll_max", "the longest pause of a waiter between two tries")
    .default(DEFAULT_POLL_MAX)
    .range(MILLI, Duration::from_secs(60));
const CHECK_EVERY: Key<Duration> = Key::new("check_every", "how often held lock files are checked for deletion")
    .default(DEFAULT_CHECK_EVERY)
    .range(MILLI, Duration::from_secs(3600));
const OBSERVE_EVERY: Key<Duration> =
    Key::new("observe_every", "how often an election observer reads the election without a notification")
        .default(DEFAULT_OBSERVE_EVERY)
        .range(Duration::from_millis(100), Duration::from_secs(3600));

/// The options a `file://` URL and [`FileLockProviderBuilder::option`] take: the names of
/// the builder's methods.
pub const OPTIONS: &[&dyn OptionKey] = &[&POLL_MIN, &POLL_MAX, &CHECK_EVERY, &OBSERVE_EVERY, &MAX_HOLD, &STORE_ID];

/// The `file` scheme: `file:///path/to/dir`, or `file://` for [`FileLockProvider::default_dir`].
pub const SCHEME: Scheme = Scheme::new(&["file"], BACKEND, connect_url)
    .with_urls(&[(
        "file:///path/to/dir",
        "local files, across the processes of one machine (`file://` alone: the default directory)",
    )])
    .with_options(OPTIONS);

const MARKER_TEXT: &str = "This directory holds the lock files of lockkit-file.\n\
Do not delete files here while processes may use the locks: a deleted lock file excludes nobody.\n";

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
lockkit_core::typed_provider!(FileLockProvider);

impl FileLockProvider {
    /// Opens the lock directory `dir`, creating it (and its parents) when missing, with
    /// default settings.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `dir` cannot be created, is not a directory, or is not
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
    /// As for [`FileLockProviderBuilder::build`], and [`Error::InvalidConfig`] for a URL that
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
        match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
            Some(dir) => PathBuf::from(dir).join("lockkit"),
            None => {
                let user =
                    std::env::var("USER").ok().filter(|user| !user.is_empty()).unwrap_or_else(|| "default".to_owned());
                std::env::temp_dir().join(format!("lockkit-{user}"))
            }
        }
    }

    fn backend(&self) -> &FileBackend {
        self.0.backend()
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
    /// [`Error::InvalidName`] for an empty name or one longer than 1024 bytes.
    pub fn lock_path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.lock_files(name)?.lock)
    }

    /// Every file of the lock called `name` (lock file, fence, reader and permit records),
    /// for administrators and tests; see the [crate docs](crate) for what each holds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name or one longer than 1024 bytes.
    pub fn lock_files(&self, name: &str) -> Result<LockFiles> {
        Ok(self.backend().lock_files(&LockName::new(name)?))
    }
}

/// Builds a [`FileLockProvider`]; every setting is checked by [`build`](Self::build).
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct FileLockProviderBuilder {
    dir: Option<PathBuf>,
    options: Options,
}

impl Default for FileLockProviderBuilder {
    fn default() -> Self {
        Self { dir: None, options: Options::new(BACKEND, OPTIONS) }
    }
}

impl ProviderBuilder for FileLockProviderBuilder {
    fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// `file:///path/to/dir`, or `file://` for the default directory.
    fn address(&mut self, url: &StoreUrl) -> Result<()> {
        if url.scheme() != "file" {
            return Err(self.options.invalid(format!("{} is not a file:// URL", url.redacted())));
        }
        self.dir = Some(match (url.hosts(), url.path()) {
            ("", "") => FileLockProvider::default_dir(),
            ("", path) => PathBuf::from(path),
            _ => {
                return Err(self.options.invalid(format!(
                    "{} names no absolute directory; write file:///path/to/dir (three slashes), or file:// for the default",
                    url.redacted()
                )));
            }
        });
        Ok(())
    }
}

impl FileLockProviderBuilder {
    /// A builder with the directory and options of a `file://` URL.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for another scheme, a URL that names no absolute directory,
    /// an unknown option or a bad value.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        config::from_url(url)
    }

    /// The lock directory; created (with its parents) when missing. Required.
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The first pause of a waiter between two tries, for releases by other processes
    /// (releases in this process wake waiters at once). Default 10 ms; from 1 ms to
    /// [`poll_max`](Self::poll_max). URL option `poll_min`.
    pub fn poll_min(mut self, pause: Duration) -> Self {
        self.options.set(&POLL_MIN, pause);
        self
    }

    /// The longest pause of a waiter between two tries: the pause doubles from
    /// [`poll_min`](Self::poll_min) up to this. Default 50 ms; at most a minute. URL option
    /// `poll_max`.
    pub fn poll_max(mut self, pause: Duration) -> Self {
        self.options.set(&POLL_MAX, pause);
        self
    }

    /// How often the provider checks that the files of its held locks were not deleted
    /// (a deleted lock file is reported as [`LossReason::RecordGone`](lockkit_core::LossReason)).
    /// Default one second; from 1 ms to an hour. URL option `check_every`.
    pub fn check_every(mut self, every: Duration) -> Self {
        self.options.set(&CHECK_EVERY, every);
        self
    }

    /// How often an election observer reads the election again when nothing notified it: a
    /// safety net only. Observers are woken by this process's releases and grants at once,
    /// and by those of other processes through inotify (Linux); on systems without inotify,
    /// this re-read is how they learn of changes made by other processes. Default five
    /// seconds; from 100 ms to an hour. URL option `observe_every`.
    pub fn observe_every(mut self, every: Duration) -> Self {
        self.options.set(&OBSERVE_EVERY, every);
        self
    }

    /// Sets the option called `key` from its text, as a URL's query gives it: the same
    /// names as the methods ([`OPTIONS`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an unknown option or a value that is not a duration.
    pub fn option(mut self, key: &str, value: &str) -> Result<Self> {
        self.options.parse(key, value)?;
        Ok(self)
    }

    /// The default maximum hold of the provider's acquisitions
    /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
    /// renewal stops, the guard is told with
    /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached) and the checker frees it (a file hold has no lease to run out). None
    /// by default; at least `check_every`. URL option `max_hold`.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.set(&MAX_HOLD, max_hold);
        self
    }

    /// Checks the settings, creates the directory when missing, checks that it is a writable
    /// directory, and opens the provider. There is no server: nothing else is reached.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a missing directory, a poll interval out of range or
    /// inverted, a check or observe interval out of range, or a directory that cannot be
    /// created, is not a directory or is not writable.
    pub fn build(self) -> Result<FileLockProvider> {
        let options = &self.options;
        options.check()?;
        let Some(dir) = &self.dir else {
            return Err(options.invalid("no lock directory: name one with dir(…), such as /var/lock/app"));
        };
        let poll_max = options.value(&POLL_MAX)?;
        let poll_min = options.within(&POLL_MIN, DEFAULT_POLL_MIN, MILLI, poll_max)?;
        let check_every = options.value(&CHECK_EVERY)?;
        let observe_every = options.value(&OBSERVE_EVERY)?;
        let dir = open_dir(dir)?;
        let backend = FileBackend::new(Settings { dir, poll_min, poll_max, check_every, observe_every });
        Ok(FileLockProvider(TypedProvider::new(backend).map(|provider| options.apply(provider))?))
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
