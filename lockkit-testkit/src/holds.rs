//! Many holds on one provider at once, for the tests of how a backend watches its holds when
//! it has many (ZooKeeper's recursive watch, etcd's prefix watch).

use lockkit_core::{Error, HoldCoverage, LockGuard, LockProvider};

/// Acquires the locks `names` on `provider`, one after another, and returns their guards in the
/// same order.
///
/// # Panics
///
/// When a name is invalid or an acquisition fails.
#[allow(clippy::unwrap_used)] // a test helper: a failed acquisition fails the test
pub async fn hold_all(provider: &LockProvider, names: &[String]) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(names.len());
    for name in names {
        guards.push(provider.lock(name).unwrap().acquire().await.unwrap());
    }
    guards
}

/// Releases `guards` in order: the holds at the indices in `lost` must say that they were lost
/// ([`Error::LockLost`]), the others must be released.
///
/// # Panics
///
/// When a release does not end as it should.
pub async fn release_all(guards: Vec<LockGuard>, lost: &[usize]) {
    for (i, guard) in guards.into_iter().enumerate() {
        let released = guard.release().await;
        if lost.contains(&i) {
            assert!(matches!(released, Err(Error::LockLost { .. })), "hold {i}: {released:?}");
        } else if let Err(error) = released {
            panic!("hold {i} was not released: {error}");
        }
    }
}

/// Holds `names` on `provider` and checks that `coverage` (the backend's hidden
/// `hold_coverage`) counts every hold on the store-wide watch and none one by one; then releases
/// them and checks that it counts none, the watch still set.
///
/// # Panics
///
/// When an acquisition or a release fails, or a coverage is not the one expected.
pub async fn check_store_wide_coverage(provider: &LockProvider, names: &[String], coverage: impl Fn() -> HoldCoverage) {
    let guards = hold_all(provider, names).await;
    let covered = HoldCoverage { store_wide_watch: true, store_wide: names.len(), per_hold: 0 };
    assert_eq!(coverage(), covered, "with {} holds", names.len());
    release_all(guards, &[]).await;
    let released = HoldCoverage { store_wide_watch: true, store_wide: 0, per_hold: 0 };
    assert_eq!(coverage(), released, "after the releases");
}
