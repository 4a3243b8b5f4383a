//! Running the blocking file operations off the async threads, and their errors.

use std::io;
use std::path::Path;

use lockkit_core::{Error, LockName, Result};

use crate::BACKEND;

/// Runs a blocking file job on the runtime's blocking threads (or here, outside a runtime).
pub(crate) async fn run_blocking<T: Send + 'static>(
    lock: &LockName,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(job).await.map_err(|error| {
            Error::backend(BACKEND, Some(lock), error).with_context("the file operation did not finish")
        }),
        Err(_) => Ok(job()),
    }
}

/// An I/O error on the files of `lock`, naming the file.
pub(crate) fn io_error(lock: &LockName, path: &Path, error: io::Error) -> Error {
    Error::backend(BACKEND, Some(lock), error).with_context(format!("the files of lock file {}", path.display()))
}
