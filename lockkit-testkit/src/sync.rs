//! Locking a mutex whose holder may have panicked: the chaos runs and fixtures keep journals
//! behind `std` mutexes, and a task that panicked holding one leaves its data usable (each
//! write to it is a whole entry), so the next holder takes it as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, poisoned or not.
pub(crate) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
