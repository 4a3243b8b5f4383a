//! The stores with no network round trip, hence no floor and no ratio: the memory backend, and
//! local files (where a run keeps a file per lock, so `--locks` is bounded and the run removes
//! its files).

use crate::bench::profile::Profile;
use crate::bench::url::{Url, run_id};

/// The memory backend's profile.
pub(crate) struct Memory;

impl Profile for Memory {
    fn backend(&self) -> &'static str {
        "memory"
    }
}

/// The file backend's profile.
pub(crate) struct File;

impl Profile for File {
    fn backend(&self) -> &'static str {
        "file"
    }

    fn max_locks(&self) -> Option<(u32, &'static str)> {
        Some((100_000, "file:// would leave as many lock files behind"))
    }

    /// Removes this run's lock files and holder directories (every lock is released and their
    /// names carry this run's id, so no one else has them open). With the default directory,
    /// says which files to remove instead.
    fn clean_up(&self, url: &Url) -> Vec<String> {
        let marker = format!("lockkit-bench%2f{}%2f", run_id());
        let dir = url.store.path();
        if dir.is_empty() {
            return vec![format!(
                "file:// keeps every lock file: remove the files named {marker}* in the default directory"
            )];
        }
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut left = 0_usize;
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&marker) {
                continue;
            }
            // Read-write locks and semaphores keep their holders' records in a directory
            // of their own (`NAME.readers/`, `NAME.permits/`), empty once all are released.
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(entry.path()),
                _ => std::fs::remove_file(entry.path()),
            };
            if removed.is_err() {
                left += 1;
            }
        }
        if left > 0 {
            vec![format!("{left} lock files named {marker}* could not be removed from {dir}")]
        } else {
            Vec::new()
        }
    }
}
