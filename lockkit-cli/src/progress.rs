//! The line that shows, on a terminal, what `lockkit run` waits for and for how long.
//!
//! It is drawn on stderr only when stderr is a terminal, and rewritten in place about once a
//! second; it is cleared when the wait ends. Who holds the lock is read with
//! [`LockProvider::inspect`] in a task of its own, so that a slow store never delays the
//! acquisition itself.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit::LockProvider;
use lockkit::backend::LockInfo;
use lockkit::sync::lock_or_recover;
use tokio::task::JoinHandle;

/// How long a wait lasts before the line first appears: short waits show nothing.
const FIRST_DRAW: Duration = Duration::from_millis(300);
/// How often the line and the holder are refreshed.
const REFRESH: Duration = Duration::from_secs(1);

/// The waiting line of one acquisition; inert when stderr is not a terminal.
#[derive(Debug)]
pub(crate) struct Progress {
    active: Option<Active>,
}

#[derive(Debug)]
struct Active {
    lock: String,
    url: String,
    start: Instant,
    deadline: Option<Duration>,
    holder: Arc<Mutex<Option<LockInfo>>>,
    inspector: JoinHandle<()>,
    drawn: bool,
}

impl Progress {
    /// A line that never shows, for acquisitions that do not wait.
    pub(crate) fn inert() -> Self {
        Self { active: None }
    }

    /// Starts following `lock` for a wait of at most `deadline` (forever when `None`).
    pub(crate) fn start(provider: &LockProvider, lock: &str, url: &str, deadline: Option<Duration>) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self::inert();
        }
        let holder = Arc::new(Mutex::new(None));
        let inspector = tokio::spawn(inspect_loop(provider.clone(), lock.to_owned(), Arc::clone(&holder)));
        Self {
            active: Some(Active {
                lock: lock.to_owned(),
                url: url.to_owned(),
                start: Instant::now(),
                deadline,
                holder,
                inspector,
                drawn: false,
            }),
        }
    }

    /// Resolves at the next moment the line should be redrawn; never when inactive.
    pub(crate) async fn tick(&self) {
        match &self.active {
            None => std::future::pending().await,
            Some(active) => {
                let elapsed = active.start.elapsed();
                let next = if elapsed < FIRST_DRAW {
                    FIRST_DRAW
                } else {
                    // The next whole second of waiting, so that the count moves evenly.
                    Duration::from_secs(elapsed.as_secs() + 1)
                };
                tokio::time::sleep_until((active.start + next).into()).await;
            }
        }
    }

    /// Redraws the line.
    pub(crate) fn draw(&mut self) {
        let Some(active) = &mut self.active else { return };
        let held_by = match &*lock_or_recover(&active.holder) {
            Some(info) => match info.holder() {
                Some(holder) => {
                    let queue = match info.waiters {
                        Some(0) | None => String::new(),
                        Some(n) => format!(", {n} queued"),
                    };
                    format!(" (held by token {}{queue})", holder.token)
                }
                None => String::new(),
            },
            None => String::new(),
        };
        let waited = active.start.elapsed().as_secs();
        let limit = active.deadline.map(|d| format!(" of {}", crate::status::human(d))).unwrap_or_default();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r\x1b[2Kwaiting for lock {:?} on {}{held_by} for {waited}s{limit}",
            active.lock, active.url
        );
        let _ = stderr.flush();
        active.drawn = true;
    }

    /// Clears the line and stops following the lock.
    pub(crate) fn finish(&mut self) {
        if let Some(active) = self.active.take() {
            active.inspector.abort();
            if active.drawn {
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "\r\x1b[2K");
                let _ = stderr.flush();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

async fn inspect_loop(provider: LockProvider, lock: String, holder: Arc<Mutex<Option<LockInfo>>>) {
    loop {
        if let Ok(Ok(info)) = tokio::time::timeout(REFRESH, provider.inspect(&lock)).await {
            *lock_or_recover(&holder) = Some(info);
        }
        tokio::time::sleep(REFRESH).await;
    }
}
