//! A hold seen from a second provider on the same store, for the `connect` tests: the URL
//! reached the store the hold is on.

#![allow(dead_code, clippy::unwrap_used)]

use lockkit::{HolderInfo, LockGuard, LockProvider};

/// Checks that `guard`, a hold of lock `name`, keeps `other` (a provider on the same store)
/// out: it cannot acquire `name`, and its inspection names the hold's token. Returns what it
/// inspected.
pub(crate) async fn holder_seen_by(other: &LockProvider, guard: &LockGuard, name: &str) -> HolderInfo {
    assert!(other.lock(name).unwrap().try_acquire().await.unwrap().is_none(), "{name} is held");
    let info = other.inspect(name).await.unwrap();
    let holder = info.holder().unwrap_or_else(|| panic!("{name} has a holder: {info:?}")).clone();
    assert_eq!(holder.token, guard.token());
    holder
}

/// Releases `guard`, a hold of lock `name`, and checks that `other` sees the lock idle.
pub(crate) async fn release_seen_by(other: &LockProvider, guard: LockGuard, name: &str) {
    guard.release().await.unwrap();
    assert!(other.inspect(name).await.unwrap().is_idle(), "{name} is idle after the release");
}
