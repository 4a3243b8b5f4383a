//! The settings of a file provider: the builder, its URL options and their bounds, and the
//! checks `build` makes, which open the lock directory.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockkit_core::config::{Key, MAX_HOLD, OptionKey, STORE_ID};
use lockkit_core::{Error, Result};

use crate::BACKEND;

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
const MARKER_TEXT: &str = "This directory holds the lock files of lockkit-file.\n\
Do not delete files here while processes may use the locks: a deleted lock file excludes nobody.\n";

/// The checked settings of a provider.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The lock directory, canonical.
    pub(crate) dir: PathBuf,
    /// The first pause of a waiter between two tries (the cross-process safety net).
    pub(crate) poll_min: Duration,
    /// The longest pause of a waiter between two tries.
    pub(crate) poll_max: Duration,
    /// How often held lock files are checked for deletion.
    pub(crate) check_every: Duration,
    /// How often an election observer reads the election again without a notification.
    pub(crate) observe_every: Duration,
}

/// The `split_downgrades` fault hook's setting: convert in two steps with a pause between
/// them, as a kernel whose flock conversion is not atomic would, and whether to hold the
/// gate meanwhile.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub(crate) struct SplitDowngrade {
    pub(crate) pause: Duration,
    pub(crate) gate: bool,
}

lockkit_core::provider_builder! {
    /// Builds a [`FileLockProvider`](crate::FileLockProvider); every setting is checked by [`build`](Self::build).
    pub struct FileLockProviderBuilder(BACKEND, OPTIONS) {
        dir: Option<PathBuf>,
    }
    /// `file:///path/to/dir`, or `file://` for the default directory.
    address(self, url) {
        url.expect_scheme(BACKEND, &["file"], "file:///path/to/dir")?;
        self.dir = Some(match (url.hosts(), url.path()) {
            ("", "") => default_dir(),
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
    lockkit_core::builder_methods!();

    /// The lock directory; created (with its parents) when missing. Required.
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.dir = Some(dir.as_ref().to_path_buf());
        self
    }

    lockkit_core::option_setters! {
        /// The first pause of a waiter between two tries, for releases by other processes
        /// (releases in this process wake waiters at once). Default 10 ms; from 1 ms to
        /// [`poll_max`](Self::poll_max). URL option `poll_min`.
        fn poll_min(pause: Duration) => POLL_MIN;

        /// The longest pause of a waiter between two tries: the pause doubles from
        /// [`poll_min`](Self::poll_min) up to this. Default 50 ms; at most a minute. URL option
        /// `poll_max`.
        fn poll_max(pause: Duration) => POLL_MAX;

        /// How often the provider checks that the files of its held locks were not deleted
        /// (a deleted lock file is reported as [`LossReason::RecordGone`](lockkit_core::LossReason)).
        /// Default one second; from 1 ms to an hour. URL option `check_every`.
        fn check_every(every: Duration) => CHECK_EVERY;

        /// How often an election observer reads the election again when nothing notified it: a
        /// safety net only. Observers are woken by this process's releases and grants at once,
        /// and by those of other processes through inotify (Linux); on systems without inotify,
        /// this re-read is how they learn of changes made by other processes. Default five
        /// seconds; from 100 ms to an hour. URL option `observe_every`.
        fn observe_every(every: Duration) => OBSERVE_EVERY;

        /// The default maximum hold of the provider's acquisitions
        /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
        /// renewal stops, the guard is told with
        /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached) and the checker frees it (a file hold has no lease to run out). None
        /// by default; at least `check_every`. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;
    }

    /// Checks every setting and opens the lock directory (see [`build`](Self::build)).
    pub(crate) fn check(&self) -> Result<Settings> {
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
        Ok(Settings { dir, poll_min, poll_max, check_every, observe_every })
    }
}

/// The default lock directory, per user so that users do not share locks:
/// `$XDG_RUNTIME_DIR/lockkit`, or `lockkit-$USER` in the system's temporary directory.
pub(crate) fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("lockkit"),
        None => {
            let user =
                std::env::var("USER").ok().filter(|user| !user.is_empty()).unwrap_or_else(|| "default".to_owned());
            std::env::temp_dir().join(format!("lockkit-{user}"))
        }
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
