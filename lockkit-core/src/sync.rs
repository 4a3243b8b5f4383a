//! Locks that a panic does not poison for good: the one helper every crate uses instead of
//! `lock().unwrap_or_else(PoisonError::into_inner)` written at each call.
//!
//! Invariant for callers: a critical section guarded this way leaves its data consistent at
//! every step (no multi-step update that a panic could interrupt halfway), so the data a
//! panicking thread left behind is safe to use, and recovering beats failing every later call.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, recovering its data if a panic poisoned it.
///
/// ```
/// use std::sync::Mutex;
/// use lockkit_core::sync::lock_or_recover;
///
/// let count = Mutex::new(0);
/// *lock_or_recover(&count) += 1;
/// assert_eq!(*lock_or_recover(&count), 1);
/// ```
pub fn lock_or_recover<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `lock` for reading, recovering its data if a panic poisoned it.
pub fn read_or_recover<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `lock` for writing, recovering its data if a panic poisoned it.
pub fn write_or_recover<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_gives_its_data() {
        let mutex = std::sync::Arc::new(Mutex::new(7));
        let poisoner = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = lock_or_recover(&poisoner);
            panic!("poison the mutex");
        })
        .join();
        assert!(mutex.is_poisoned());
        assert_eq!(*lock_or_recover(&mutex), 7);
        let rw = RwLock::new(1);
        *write_or_recover(&rw) += 1;
        assert_eq!(*read_or_recover(&rw), 2);
    }
}
