//! The home runtime: the one place lockkit's background work lives.
//!
//! A hold must outlive the runtime that granted it (contract 34): its renewal, its loss
//! detection and the release of its dropped guard cannot run on a runtime that may shut
//! down, or stay alive without being driven (a current-thread runtime whose thread is parked
//! elsewhere never polls its tasks). So they run on lockkit's **home runtime**: a
//! current-thread runtime on a thread of its own (`lockkit-home`), started on first need and
//! kept for the life of the process, which nothing but lockkit drives.
//!
//! - [`spawn`] runs background work there (a renewal loop, a session task, the release of a
//!   dropped guard, the clean-up of a cancelled acquisition), from anywhere: on a runtime, on
//!   a plain thread, after every runtime of the application shut down.
//! - [`run`] runs a future there and awaits its output from any runtime: for what must
//!   *belong* to the home runtime, such as a connection whose driver task and socket a
//!   background task needs (Tokio binds a socket and a spawned driver to the runtime that
//!   made them).
//! - [`PerRuntime`] keeps one value per runtime, such as a command connection: the hot path
//!   uses the connection of the runtime it runs on (no thread hop), and the home runtime's
//!   background work uses the home runtime's.
//!
//! A backend never keeps anything of its own on a runtime it was merely called from, except
//! in a [`PerRuntime`] slot used from that same runtime.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::runtime::{Handle, Id};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// The name of the home runtime's thread.
pub const THREAD_NAME: &str = "lockkit-home";

/// The home runtime, started on first call; `None` only when the system refuses a thread
/// (then [`spawn`] and [`run`] fall back to the current runtime).
pub fn handle() -> Option<Handle> {
    static HOME: OnceLock<Option<Handle>> = OnceLock::new();
    HOME.get_or_init(|| {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "lockkit cannot start its home runtime; background work runs where it starts");
                return None;
            }
        };
        let handle = runtime.handle().clone();
        let started = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || runtime.block_on(std::future::pending::<()>()));
        match started {
            Ok(_) => Some(handle),
            Err(error) => {
                tracing::error!(%error, "lockkit cannot start its home thread; background work runs where it starts");
                None
            }
        }
    })
    .clone()
}

/// Where background work goes: the home runtime, or, where there is none (the system refused
/// a thread), the current runtime; `None` then outside every runtime.
pub fn runtime() -> Option<Handle> {
    handle().or_else(|| Handle::try_current().ok())
}

/// Whether the caller runs on the home runtime.
pub fn is_home() -> bool {
    let Ok(current) = Handle::try_current() else { return false };
    handle().is_some_and(|home| home.id() == current.id())
}

/// Runs `task` in the background on the home runtime, from anywhere, never panicking. Where
/// there is no home runtime (the system refused a thread), it runs on the current runtime, or
/// is dropped with a warning outside every runtime.
///
/// The task is not polled before it reaches the home runtime, so nothing of it belongs to the
/// caller's runtime.
pub fn spawn<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    match runtime() {
        Some(runtime) => drop(runtime.spawn(task)),
        None => tracing::warn!("a background task of lockkit found no runtime to run on and was dropped"),
    }
}

/// Runs `task` on the home runtime and returns its output: at once when called there, else
/// through one hop to the home thread and back. Dropping the returned future aborts the task.
///
/// For what must belong to the home runtime: a connection made inside `task` has its socket
/// and its driver task there, so background work on the home runtime can use it whatever
/// happens to the caller's runtime. Where there is no home runtime, `task` runs here.
///
/// # Panics
///
/// When `task` panics, with its panic.
pub async fn run<F>(task: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Some(home) = handle().filter(|_| !is_home()) else { return task.await };
    let mut joined = AbortOnDrop(home.spawn(task));
    match (&mut joined.0).await {
        Ok(output) => output,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only the home runtime's shutdown cancels a task, and it never shuts
            // down while the process runs.
            Err(_) => std::future::pending().await,
        },
    }
}

/// Aborts a task when the future awaiting it is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tells whether a runtime has shut down: a parked task on it keeps a channel open, and the
/// shutdown, which drops every task the runtime owns, closes it. Works whether or not the
/// runtime is being driven.
#[derive(Debug)]
pub struct RuntimeWatch {
    id: Id,
    gone: watch::Receiver<()>,
    sentinel: AbortHandle,
}

impl RuntimeWatch {
    /// A watch on the current runtime, or `None` outside every runtime.
    pub fn here() -> Option<Self> {
        let runtime = Handle::try_current().ok()?;
        let (alive, gone) = watch::channel(());
        let sentinel = runtime.spawn(async move {
            // Dropped, and the channel closed, when the runtime drops the task at shutdown.
            let _alive = alive;
            std::future::pending::<()>().await;
        });
        Some(Self { id: runtime.id(), gone, sentinel: sentinel.abort_handle() })
    }

    /// The id of the watched runtime.
    pub fn id(&self) -> Id {
        self.id
    }

    /// Whether the runtime has shut down.
    pub fn is_gone(&self) -> bool {
        self.gone.has_changed().is_err()
    }

    /// Resolves when the runtime shuts down; may be awaited on any runtime.
    pub async fn gone(&self) {
        let mut gone = self.gone.clone();
        // Nothing is ever sent: `changed` returns only when the sender is dropped.
        while gone.changed().await.is_ok() {}
    }
}

impl Drop for RuntimeWatch {
    fn drop(&mut self) {
        self.sentinel.abort();
    }
}

/// One value per runtime (a connection, say), each used only from the runtime it belongs to;
/// the values of runtimes that shut down are dropped as new ones come.
///
/// A runtime that is alive but not driven keeps its value, unused: nothing of another runtime
/// waits on it (each runtime makes its own value, one at a time, without waiting for another).
#[derive(Debug)]
pub struct PerRuntime<T> {
    slots: Mutex<Vec<Arc<Slot<T>>>>,
}

/// The value of one runtime, and the turn to make it.
#[derive(Debug)]
struct Slot<T> {
    runtime: RuntimeWatch,
    value: Mutex<Option<T>>,
    making: tokio::sync::Mutex<()>,
}

impl<T> Slot<T> {
    fn value(&self) -> MutexGuard<'_, Option<T>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> Default for PerRuntime<T> {
    fn default() -> Self {
        Self { slots: Mutex::new(Vec::new()) }
    }
}

impl<T: Clone> PerRuntime<T> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Arc<Slot<T>>>> {
        // Nothing panics while holding this lock; recover the data if something ever did.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of the runtime `id`, if it has one.
    fn slot(&self, id: Id) -> Option<Arc<Slot<T>>> {
        self.slots().iter().find(|slot| slot.runtime.id == id).cloned()
    }

    /// The slot of the current runtime, made (and the slots of runtimes that shut down
    /// dropped) when it has none; `None` outside every runtime.
    fn slot_here(&self) -> Option<Arc<Slot<T>>> {
        let id = Handle::try_current().ok()?.id();
        if let Some(slot) = self.slot(id) {
            return Some(slot);
        }
        let runtime = RuntimeWatch::here()?;
        let mut slots = self.slots();
        slots.retain(|slot| !slot.runtime.is_gone());
        if let Some(slot) = slots.iter().find(|slot| slot.runtime.id == id) {
            return Some(Arc::clone(slot));
        }
        let slot = Arc::new(Slot { runtime, value: Mutex::new(None), making: tokio::sync::Mutex::new(()) });
        slots.push(Arc::clone(&slot));
        Some(slot)
    }

    /// The value of the current runtime, if one was set; `None` outside every runtime.
    pub fn get(&self) -> Option<T> {
        let id = Handle::try_current().ok()?.id();
        self.slot(id)?.value().clone()
    }

    /// The value of the current runtime when there is one that `usable` accepts, else the one
    /// `make` makes, kept for this runtime: one `make` at a time per runtime, the others of
    /// that runtime waiting for it. An error is returned and nothing is kept. Outside every
    /// runtime (an executor other than Tokio's), `make`'s value is returned and not kept.
    ///
    /// # Errors
    ///
    /// `make`'s.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a `make` dropped before it finished keeps nothing.
    pub async fn get_or_make<E, F>(&self, usable: impl Fn(&T) -> bool, make: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let Some(slot) = self.slot_here() else { return make.await };
        if let Some(value) = slot.value().clone().filter(|value| usable(value)) {
            return Ok(value);
        }
        let _turn = slot.making.lock().await;
        if let Some(value) = slot.value().clone().filter(|value| usable(value)) {
            return Ok(value);
        }
        let value = make.await?;
        *slot.value() = Some(value.clone());
        Ok(value)
    }

    /// Sets the value of the current runtime, returning the one it replaces. Outside every
    /// runtime nothing is kept (`value` is returned).
    pub fn set(&self, value: T) -> Option<T> {
        match self.slot_here() {
            Some(slot) => slot.value().replace(value),
            None => Some(value),
        }
    }

    /// Forgets the value of the current runtime if `stale` says so (a connection that broke).
    pub fn remove_if(&self, stale: impl Fn(&T) -> bool) -> Option<T> {
        let id = Handle::try_current().ok()?.id();
        let slot = self.slot(id)?;
        let mut value = slot.value();
        if value.as_ref().is_some_and(stale) { value.take() } else { None }
    }

    /// Forgets the values of every runtime (connections to a server that is no longer the
    /// one to use, say): each runtime makes a new one at its next use.
    pub fn clear(&self) {
        for slot in self.slots().iter() {
            slot.value().take();
        }
    }

    /// Every value kept, of every runtime (to close them, say).
    pub fn values(&self) -> Vec<T> {
        self.slots().iter().filter_map(|slot| slot.value().clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn spawned_work_runs_on_the_home_thread_from_a_plain_thread() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = done_tx.send((std::thread::current().name().map(str::to_owned), is_home()));
        });
        let (thread, home) = done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(thread.as_deref(), Some(THREAD_NAME));
        assert!(home);
        assert!(!is_home(), "a plain thread is not home");
    }

    #[test]
    #[allow(clippy::async_yields_async)] // the point: a timer future made on the home runtime
    fn run_hops_to_home_and_back_and_outlives_the_callers_idle_runtime() {
        let first = runtime();
        // A timer made on the home runtime keeps working though the caller's runtime is idle.
        let sleeper = first.block_on(run(async { tokio::time::sleep(Duration::from_millis(30)) }));
        let second = runtime();
        let on = second.block_on(run(async move {
            sleeper.await;
            std::thread::current().name().map(str::to_owned)
        }));
        assert_eq!(on.as_deref(), Some(THREAD_NAME));
        drop(first);
    }

    #[test]
    fn a_runtime_watch_tells_when_its_runtime_shut_down() {
        let first = runtime();
        let watch = first.block_on(async { RuntimeWatch::here() }).unwrap();
        assert!(!watch.is_gone(), "alive while its runtime lives, driven or not");
        drop(first);
        assert!(watch.is_gone());
        let second = runtime();
        second.block_on(async { tokio::time::timeout(Duration::from_secs(1), watch.gone()).await }).unwrap();
        assert!(RuntimeWatch::here().is_none(), "no watch outside a runtime");
    }

    #[test]
    fn per_runtime_values_are_kept_apart_and_dropped_with_their_runtime() {
        let map = PerRuntime::new();
        let (first, second) = (runtime(), runtime());
        assert_eq!(first.block_on(async { map.set(1) }), None);
        assert_eq!(second.block_on(async { map.set(2) }), None);
        assert_eq!(first.block_on(async { map.get() }), Some(1));
        assert_eq!(second.block_on(async { map.get() }), Some(2));
        assert_eq!(map.get(), None, "nothing outside a runtime");
        assert_eq!(first.block_on(async { map.remove_if(|v| *v == 1) }), Some(1));
        assert_eq!(first.block_on(async { map.set(3) }), None);
        drop(first);
        let third = runtime();
        third.block_on(async { map.set(4) });
        let mut values = map.values();
        values.sort_unstable();
        assert_eq!(values, [2, 4], "the value of the runtime that shut down is gone");
        let made: Result<i32, ()> = third.block_on(map.get_or_make(|v| *v != 4, async { Ok(5) }));
        assert_eq!(made, Ok(5), "a value that is not usable is made again");
        let kept: Result<i32, ()> = third.block_on(map.get_or_make(|_| true, async { Ok(6) }));
        assert_eq!(kept, Ok(5), "a usable value is kept");
        let failed: Result<i32, &str> = second.block_on(map.get_or_make(|_| false, async { Err("no") }));
        assert_eq!((failed, second.block_on(async { map.get() })), (Err("no"), Some(2)), "a failure keeps nothing new");
        map.clear();
        assert!(map.values().is_empty());
    }
}
