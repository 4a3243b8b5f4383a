//! Fenced files (Unix): an atomic replace and an append that the file system refuses with a
//! stale token, safe across the processes of one machine.
//!
//! [`FileFence`] works in one directory. A resource `R` is the file `R` in it (escaped: `/`,
//! `%`, a leading `.` and bytes outside `[A-Za-z0-9._-]` become `%XX`), and its fence is the
//! file `.R.fence` beside it: the lock it is bound to and the highest token accepted,
//! flushed to disk, in two slots written in turn so that a crash never leaves it unreadable.
//! Every operation holds an `flock` on the fence file: exclusive for a write, shared for a read.
//!
//! A [`replace`](FileFence::replace) writes the new content to a temporary file beside the
//! target and flushes it, then under the lock checks the fence, records the new highest token
//! (flushed), renames the temporary file over the target and flushes the directory: the file
//! is the old content or the new, never a mix, and a token never goes back, across a crash
//! too. An [`append`](FileFence::append) checks and records the same way, then appends and
//! flushes; a crash during it can leave a partial tail, as any append.
//!
//! ```
//! use lockkit_fence::file::FileFence;
//! # use lockkit_core::memory::MemoryLockProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! let files = FileFence::new(tmp.path()); // say /var/lib/myapp
//! # let provider = MemoryLockProvider::new();
//! let guard = provider.lock("report")?.acquire().await?;
//! files.replace("report.json", &guard.fence(), b"{\"rows\": 3}".to_vec()).await?;
//! assert_eq!(files.read("report.json", &guard.fence()).await?.as_deref(), Some(&b"{\"rows\": 3}"[..]));
//! # Ok(())
//! # }
//! ```

mod record;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode};
use rustix::fs::FlockOperation;

use crate::{FenceError, FenceSink, FenceState, check_resource, decide};
use record::Record;

const SINK: &str = "file";

/// The longest escaped file name of a resource, leaving room for the fence and temporary
/// files' names within the usual 255-byte limit.
pub const MAX_FILE_NAME: usize = 200;

/// Fenced files in one directory; cheap to clone. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct FileFence {
    dir: Arc<Path>,
}

/// The paths of one resource.
struct Paths {
    data: PathBuf,
    fence: PathBuf,
    temp: PathBuf,
}

impl FileFence {
    /// Fenced files in `dir`, which must exist when they are written (nothing is done now).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: Arc::from(dir.into()) }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `resource`.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a name that is empty, over the limit, or longer than
    /// [`MAX_FILE_NAME`] once escaped.
    pub fn path(&self, resource: &str) -> Result<PathBuf, FenceError> {
        Ok(self.paths(resource)?.data)
    }

    fn paths(&self, resource: &str) -> Result<Paths, FenceError> {
        check_resource(resource)?;
        let name = escape(resource);
        if name.len() > MAX_FILE_NAME {
            return Err(FenceError::invalid(format!(
                "resource {resource:?} is {} bytes long as a file name; the file fence takes at most {MAX_FILE_NAME}",
                name.len()
            )));
        }
        let temp = format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple());
        Ok(Paths {
            data: self.dir.join(&name),
            fence: self.dir.join(format!(".{name}.fence")),
            temp: self.dir.join(temp),
        })
    }

    /// Replaces the content of `resource` with `contents` if `fence` admits it: atomically,
    /// durably, the token recorded before the file changes.
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`], [`FenceError::ForeignLock`], [`FenceError::InvalidInput`]:
    /// refused, the file unchanged; [`FenceError::NotSetUp`] when the directory is missing;
    /// [`FenceError::Store`] for other I/O errors.
    ///
    /// # Cancel safety
    ///
    /// The work runs on a blocking thread and completes even when the future is dropped.
    pub async fn replace(&self, resource: &str, fence: &Fence, contents: impl Into<Vec<u8>>) -> Result<(), FenceError> {
        let contents = contents.into();
        self.blocking(resource, fence, move |this, resource, fence| this.replace_now(&resource, &fence, &contents))
            .await
    }

    /// Appends `contents` to `resource` if `fence` admits it, the token recorded before.
    ///
    /// # Errors
    ///
    /// As for [`replace`](Self::replace).
    ///
    /// # Cancel safety
    ///
    /// As for [`replace`](Self::replace).
    pub async fn append(&self, resource: &str, fence: &Fence, contents: impl Into<Vec<u8>>) -> Result<(), FenceError> {
        let contents = contents.into();
        self.blocking(resource, fence, move |this, resource, fence| this.append_now(&resource, &fence, &contents)).await
    }

    /// The content of `resource` (`None` when the file does not exist) if `fence` admits the
    /// read: below the highest write token it is refused; nothing is recorded.
    ///
    /// # Errors
    ///
    /// As for [`replace`](Self::replace).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        self.blocking(resource, fence, |this, resource, fence| this.read_now(&resource, &fence)).await
    }

    /// What the fence file of `resource` holds, without a check.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a bad name; [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        let this = self.clone();
        let resource = resource.to_owned();
        run_blocking(move || {
            let paths = this.paths(&resource)?;
            let Some(file) = open_existing(&paths.fence)? else { return Ok(None) };
            lock(&file, FlockOperation::LockShared, &paths.fence)?;
            Ok(record::read(&file).map_err(io_error("read", &paths.fence))?.map(|record| record.state))
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        resource: &str,
        fence: &Fence,
        work: impl FnOnce(Self, String, Fence) -> Result<T, FenceError> + Send + 'static,
    ) -> Result<T, FenceError> {
        let (this, resource, fence) = (self.clone(), resource.to_owned(), fence.clone());
        run_blocking(move || work(this, resource, fence)).await
    }

    fn replace_now(&self, resource: &str, fence: &Fence, contents: &[u8]) -> Result<(), FenceError> {
        let paths = self.paths(resource)?;
        // Refuse bad input and a missing directory before writing anything.
        decide(resource, None, fence, FenceMode::Write)?;
        self.check_dir()?;
        // The new content, durable, before the lock is taken: the lock is held for the check,
        // the record and the rename only.
        write_new(&paths.temp, contents)?;
        let outcome = (|| {
            let (file, fresh) = self.open_fence(&paths.fence)?;
            lock(&file, FlockOperation::LockExclusive, &paths.fence)?;
            self.record_write(resource, fence, &file, fresh, &paths.fence)?;
            fs::rename(&paths.temp, &paths.data).map_err(io_error("rename into place", &paths.data))?;
            self.sync_dir()
        })();
        if outcome.is_err() {
            let _ = fs::remove_file(&paths.temp);
        }
        outcome
    }

    fn append_now(&self, resource: &str, fence: &Fence, contents: &[u8]) -> Result<(), FenceError> {
        let paths = self.paths(resource)?;
        decide(resource, None, fence, FenceMode::Write)?;
        self.check_dir()?;
        let (file, fresh) = self.open_fence(&paths.fence)?;
        lock(&file, FlockOperation::LockExclusive, &paths.fence)?;
        self.record_write(resource, fence, &file, fresh, &paths.fence)?;
        let existed = paths.data.exists();
        let mut data = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&paths.data)
            .map_err(io_error("open for appending", &paths.data))?;
        data.write_all(contents).map_err(io_error("append to", &paths.data))?;
        data.sync_data().map_err(io_error("flush", &paths.data))?;
        if !existed {
            self.sync_dir()?;
        }
        Ok(())
    }

    fn read_now(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        let paths = self.paths(resource)?;
        // Held (shared) until the content is read: no write lands between the check and it.
        let file = open_existing(&paths.fence)?;
        let state = match &file {
            Some(file) => {
                lock(file, FlockOperation::LockShared, &paths.fence)?;
                record::read(file).map_err(io_error("read", &paths.fence))?.map(|record| record.state)
            }
            None => None,
        };
        decide(resource, state.as_ref(), fence, FenceMode::Read)?;
        match fs::read(&paths.data) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error("read", &paths.data)(error)),
        }
    }

    /// Under the exclusive lock: checks the fence against the fence file and records the new
    /// state, flushed (with the directory, for a new fence file) before the data changes.
    fn record_write(
        &self,
        resource: &str,
        fence: &Fence,
        file: &File,
        fresh: bool,
        path: &Path,
    ) -> Result<(), FenceError> {
        let current = record::read(file).map_err(io_error("read", path))?;
        let Some(next) = decide(resource, current.as_ref().map(|record| &record.state), fence, FenceMode::Write)?
        else {
            return Ok(());
        };
        if current.as_ref().is_some_and(|record| record.state == next) {
            return Ok(());
        }
        let seq = current.map_or(1, |record| record.seq + 1);
        record::write(file, &Record { seq, state: next }).map_err(io_error("write", path))?;
        if fresh { self.sync_dir() } else { Ok(()) }
    }

    fn check_dir(&self) -> Result<(), FenceError> {
        match fs::metadata(&self.dir) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(FenceError::NotSetUp {
                sink: SINK,
                how: format!("{} is not a directory; give FileFence a directory", self.dir.display()),
            }),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Err(FenceError::NotSetUp {
                sink: SINK,
                how: format!("the directory {} does not exist; create it", self.dir.display()),
            }),
            Err(error) => Err(io_error("look at", &self.dir)(error)),
        }
    }

    /// Opens (creating) the fence file; whether it is new (empty).
    fn open_fence(&self, path: &Path) -> Result<(File, bool), FenceError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_error("open", path))?;
        let fresh = file.metadata().map_err(io_error("look at", path))?.len() == 0;
        Ok((file, fresh))
    }

    fn sync_dir(&self) -> Result<(), FenceError> {
        File::open(&self.dir).and_then(|dir| dir.sync_all()).map_err(io_error("flush the directory", &self.dir))
    }
}

/// Runs `work` on a blocking thread.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FenceError> + Send + 'static,
) -> Result<T, FenceError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Err(FenceError::store(SINK, "the file operation's thread failed", error)))
}

/// Writes `contents` to a new file at `path` and flushes it.
fn write_new(path: &Path, contents: &[u8]) -> Result<(), FenceError> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path).map_err(io_error("create", path))?;
    let written = file.write_all(contents).and_then(|()| file.sync_all());
    if let Err(error) = written {
        let _ = fs::remove_file(path);
        return Err(io_error("write", path)(error));
    }
    Ok(())
}

/// The fence file at `path` for reading, if it exists.
fn open_existing(path: &Path) -> Result<Option<File>, FenceError> {
    match File::open(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_error("open", path)(error)),
    }
}

/// Takes `operation` (a blocking flock) on `file`, retrying when a signal interrupts it.
fn lock(file: &File, operation: FlockOperation, path: &Path) -> Result<(), FenceError> {
    loop {
        match rustix::fs::flock(file, operation) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(io_error("lock", path)(io::Error::from(errno))),
        }
    }
}

fn io_error<'p>(what: &'p str, path: &'p Path) -> impl FnOnce(io::Error) -> FenceError + 'p {
    move |error| FenceError::store(SINK, format!("cannot {what} {}", path.display()), error)
}

/// `resource` as one file name: `[A-Za-z0-9._-]` kept (a leading `.` escaped, so that no name
/// is `.`, `..` or a fence or temporary file's), every other byte `%XX`. Injective.
fn escape(resource: &str) -> String {
    let mut name = String::with_capacity(resource.len());
    for (at, byte) in resource.bytes().enumerate() {
        let keep = byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-') || (byte == b'.' && at > 0);
        if keep {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

#[async_trait]
impl FenceSink for FileFence {
    fn name(&self) -> &'static str {
        SINK
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        self.replace(resource, fence, value.to_vec()).await
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        FileFence::read(self, resource, fence).await
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        FileFence::state(self, resource).await
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn names_are_escaped_injectively() {
        assert_eq!(escape("report.json"), "report.json");
        assert_eq!(escape("orders/42"), "orders%2F42");
        assert_eq!(escape(".hidden"), "%2Ehidden");
        assert_eq!(escape("a%2Fb"), "a%252Fb");
        assert_eq!(escape("ü"), "%C3%BC");
    }
}
