//! The conformance harness of the file backend: every client is a `FileLockProvider` of its
//! own on one shared directory, as separate processes would be.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_file::FileLockProvider;
use lockkit_testkit::{ClientFaults, FaultResult, Harness, TestClient, Unsupported};

/// The environment variable naming the lock directory of a harness, for the child processes
/// of the cross-process cases (and for running the kit on a directory of your choice).
pub const FILE_DIR_ENV: &str = "LOCKKIT_FILE_DIR";

/// Runs the kit on one lock directory.
pub struct FileHarness {
    dir: PathBuf,
    /// Deletes the directory when the harness goes; `None` for a directory given by
    /// `LOCKKIT_FILE_DIR`.
    _temp: Option<tempfile::TempDir>,
}

impl FileHarness {
    /// A harness on `LOCKKIT_FILE_DIR` if set, else on a new temporary directory.
    pub fn new() -> Self {
        match std::env::var_os(FILE_DIR_ENV) {
            Some(dir) => Self { dir: PathBuf::from(dir), _temp: None },
            None => Self::temporary(),
        }
    }

    /// A harness on a new temporary directory, under the target directory: the kit keeps its
    /// shared harness in a static, which is never dropped, so the shared directory is left
    /// there rather than in the system's temporary directory.
    pub fn temporary() -> Self {
        let temp = tempfile::Builder::new()
            .prefix("lockkit-file-test-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a temporary directory");
        Self { dir: temp.path().to_path_buf(), _temp: Some(temp) }
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A provider on the harness's directory.
    pub fn provider(&self) -> FileLockProvider {
        FileLockProvider::open(&self.dir).expect("the lock directory opens")
    }
}

/// The one fault a local file lock has: its process dies.
struct FileFaults(FileLockProvider);

#[async_trait]
impl ClientFaults for FileFaults {
    async fn kill(&self) -> FaultResult {
        self.0.kill();
        Ok(())
    }
}

#[async_trait]
impl Harness for FileHarness {
    fn name(&self) -> &str {
        "file"
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        // A short check interval, so a deleted lock file is reported well within the bounds.
        let provider = FileLockProvider::builder().dir(&self.dir).check_every(Duration::from_millis(200)).build()?;
        Ok(TestClient::new(provider.clone(), Arc::new(FileFaults(provider))))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        // The kit does not say which kind of hold the name has (the mutex cases also run on a
        // write lock and a one-permit semaphore): delete every file that makes a hold, the
        // lock file and the reader and permit records.
        let files = self.provider().lock_files(name).expect("a valid name");
        let mut deleted = Vec::new();
        if files.lock.exists() {
            std::fs::remove_file(&files.lock).unwrap_or_else(|e| panic!("delete {}: {e}", files.lock.display()));
            deleted.push(files.lock.clone());
        }
        for dir in [&files.readers, &files.permits] {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for entry in entries {
                let path = entry.expect("a directory entry").path();
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("delete {}: {e}", path.display()));
                deleted.push(path);
            }
        }
        assert!(!deleted.is_empty(), "no file of the lock {name:?} to delete in {}", self.dir.display());
        Ok(())
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        Ok(Arc::new(Self::temporary()))
    }

    async fn restart_store(&self) -> FaultResult {
        // There is no server: the store is the directory, and every provider keeps its
        // state there. The cases make fresh providers after a restart, which is all a
        // restart of the processes would do.
        Ok(())
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![(FILE_DIR_ENV.to_owned(), self.dir.to_string_lossy().into_owned())])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let file = self.dir.join("lockkit.dir");
        let attempt = |what: &str, result: lockkit_core::Result<FileLockProvider>| (what.to_owned(), result.map(drop));
        vec![
            attempt("a regular file as the directory", FileLockProvider::open(&file)),
            attempt("a directory under a regular file", FileLockProvider::open(file.join("sub"))),
            attempt("an empty path", FileLockProvider::open("")),
            attempt(
                "a zero poll interval",
                FileLockProvider::builder().dir(&self.dir).poll_min(Duration::ZERO).build(),
            ),
            attempt(
                "a poll interval whose maximum is below its minimum",
                FileLockProvider::builder()
                    .dir(&self.dir)
                    .poll_min(Duration::from_millis(50))
                    .poll_max(Duration::from_millis(10))
                    .build(),
            ),
            attempt(
                "a zero check interval",
                FileLockProvider::builder().dir(&self.dir).check_every(Duration::ZERO).build(),
            ),
            attempt(
                "a check interval longer than an hour",
                FileLockProvider::builder().dir(&self.dir).check_every(Duration::from_secs(7200)).build(),
            ),
            attempt(
                "an observer's re-read more often than every 100 ms",
                FileLockProvider::builder().dir(&self.dir).observe_every(Duration::from_millis(10)).build(),
            ),
        ]
    }
}
