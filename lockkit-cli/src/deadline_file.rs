//! The file that tells the command under `lockkit run` or `lockkit elect` until when its hold
//! is guaranteed (`LOCKKIT_VALID_UNTIL_FILE`).
//!
//! An environment variable is fixed when the command starts, but a hold's deadline moves
//! with every renewal; so lockkit keeps it in a file that it rewrites at each renewal, and
//! the command reads the file before a step that must not outlive the hold. The file holds
//! one line: the deadline in Unix milliseconds; `0` once the hold is no longer guaranteed
//! (lost, or released as lockkit stops); `none` for a hold without a deadline (files without
//! a maximum hold: held until lockkit says otherwise). Each update is written to a new file
//! and renamed over the old one, so a reader never sees half a line. The file lives in a
//! directory of its own, readable by its owner only, removed when lockkit ends.
//!
//! The deadline is a promise of the local clock, converted to wall-clock time when written:
//! a command compares it with its own wall clock, which is only as good as the two clocks
//! agree. It tells when to stop starting work; the fencing token is what makes a store refuse
//! a write that came too late anyway.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockkit::HoldWatcher;
use tokio::task::JoinHandle;

use crate::exit::{Failure, OS_ERROR};

/// The environment variable that names the file.
pub(crate) const ENV: &str = "LOCKKIT_VALID_UNTIL_FILE";

/// The deadline file of one hold, kept current by a task while it lives; removed on drop.
pub(crate) struct DeadlineFile {
    /// The private directory of the file; dropping it removes both.
    _dir: tempfile::TempDir,
    path: PathBuf,
    follower: JoinHandle<()>,
}

impl DeadlineFile {
    /// Creates the file with the hold's current deadline and starts following its renewals.
    pub(crate) fn create(watcher: HoldWatcher) -> Result<Self, Failure> {
        let cannot = |error: std::io::Error| {
            Failure::new(OS_ERROR, format!("cannot create the file that tells the command its deadline: {error}"))
        };
        let dir = tempfile::Builder::new().prefix("lockkit-").tempdir().map_err(cannot)?;
        let path = dir.path().join("valid-until");
        let seen = watcher.valid_until();
        write(&path, &line(if watcher.is_held() { Shown::Deadline(seen) } else { Shown::Ended })).map_err(cannot)?;
        let follower = tokio::spawn(follow(watcher, seen, path.clone()));
        Ok(Self { _dir: dir, path, follower })
    }

    /// The file's path, for the command's environment.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Says in the file that the hold is no longer guaranteed, before the command is stopped.
    pub(crate) fn mark_ended(&self) {
        self.follower.abort();
        if let Err(error) = write(&self.path, &line(Shown::Ended)) {
            eprintln!("lockkit: cannot update {}: {error}", self.path.display());
        }
    }
}

impl Drop for DeadlineFile {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

/// What the file says.
enum Shown {
    /// The hold is guaranteed until then (`None`: a hold without a deadline).
    Deadline(Option<Instant>),
    /// The hold is no longer guaranteed.
    Ended,
}

/// The file's one line.
fn line(shown: Shown) -> String {
    match shown {
        Shown::Deadline(Some(deadline)) => format!("{}\n", unix_millis(deadline)),
        Shown::Deadline(None) => "none\n".to_owned(),
        Shown::Ended => "0\n".to_owned(),
    }
}

/// `deadline` on the wall clock, in Unix milliseconds (a deadline already passed is now).
fn unix_millis(deadline: Instant) -> u128 {
    let at = SystemTime::now() + deadline.saturating_duration_since(Instant::now());
    at.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis())
}

/// Rewrites the file whenever the deadline moves, and says `0` when the hold ends.
async fn follow(watcher: HoldWatcher, mut seen: Option<Instant>, path: PathBuf) {
    let mut reported = false;
    loop {
        let (shown, last) = match watcher.deadline_changed(seen).await {
            Ok(deadline) => (Shown::Deadline(deadline), false),
            Err(_) => (Shown::Ended, true),
        };
        // NotFound: the directory was removed as lockkit ends, racing this last update.
        if let Err(error) = write(&path, &line(shown))
            && error.kind() != std::io::ErrorKind::NotFound
            && !reported
        {
            eprintln!("lockkit: cannot update {}: {error}", path.display());
            reported = true;
        }
        if last {
            return;
        }
        seen = watcher.valid_until();
    }
}

/// Writes `text` to a new file beside `path` and renames it over `path`.
fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let fresh = path.with_extension("new");
    std::fs::write(&fresh, text)?;
    std::fs::rename(&fresh, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_line_is_a_number_zero_or_none() {
        let soon = Instant::now() + std::time::Duration::from_secs(5);
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
        let shown: u128 = line(Shown::Deadline(Some(soon))).trim().parse().unwrap();
        assert!(shown >= now_ms + 4_900 && shown <= now_ms + 5_100, "{shown} vs {now_ms}");
        assert_eq!(line(Shown::Ended), "0\n");
        assert_eq!(line(Shown::Deadline(None)), "none\n");
    }
}
