//! The metrics lockkit-core records for every backend, checked on the memory backend with
//! `metrics-util`'s debugging recorder: granted, busy, timed-out, cancelled, failed and lost
//! acquisitions, releases, reentries and hold times, each with its labels.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use lockkit_core::memory::MemoryLockProvider;
use lockkit_core::metrics::{ACQUIRE_WAIT, ACQUISITIONS, HOLD_TIME, LOSSES, REENTRIES, RELEASES};
use lockkit_core::{AcquireOptions, LockProvider, LossReason};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

type Labels = Vec<(String, String)>;

/// Every counter by name and sorted labels, and every histogram's number of samples.
fn snapshot(recorder: &DebuggingRecorder) -> BTreeMap<(String, Labels), u64> {
    let mut values = BTreeMap::new();
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let key = key.key();
        let mut labels: Labels = key.labels().map(|label| (label.key().to_owned(), label.value().to_owned())).collect();
        labels.sort();
        let value = match value {
            DebugValue::Counter(count) => count,
            DebugValue::Histogram(samples) => samples.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        *values.entry((key.name().to_owned(), labels)).or_default() += value;
    }
    values
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut labels: Labels = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    labels.sort();
    labels
}

#[test]
fn acquisitions_releases_losses_and_reentries_are_counted_with_bounded_labels() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let provider = LockProvider::from(MemoryLockProvider::new())
                .with_metrics_prefix(|name| name.split_once('/').map(|(prefix, _)| prefix.to_owned()));
            let lock = provider.lock("orders/42").unwrap();
            let held = lock.acquire().await.unwrap();
            let inner = held.reenter().unwrap();
            assert!(lock.try_acquire().await.unwrap().is_none(), "busy");
            assert!(lock.acquire_timeout(Duration::from_millis(20)).await.is_err(), "timeout");
            assert!(tokio::time::timeout(Duration::from_millis(20), lock.acquire()).await.is_err(), "cancelled");
            let refused = lock.acquire_with(AcquireOptions::default().with_max_hold(Duration::ZERO)).await;
            assert!(refused.is_err(), "error");
            drop(inner);
            held.release().await.unwrap();

            // A hold lost at its maximum, then dropped.
            let capped = lock.acquire_with(AcquireOptions::default().with_max_hold(Duration::from_millis(30))).await;
            let capped = capped.unwrap().unwrap();
            let reason = tokio::time::timeout(Duration::from_secs(5), capped.lost()).await.unwrap();
            assert_eq!(reason, LossReason::MaxHoldReached);
            drop(capped);

            // A provider without a prefix function labels no name.
            let plain = MemoryLockProvider::new();
            plain.lock("orders/7").unwrap().acquire().await.unwrap().release().await.unwrap();
        });
    });
    let values = snapshot(&recorder);
    let base = [("backend", "memory"), ("kind", "exclusive"), ("prefix", "orders")];
    let with = |extra: (&str, &str)| {
        let mut pairs = base.to_vec();
        pairs.push(extra);
        labels(&pairs)
    };
    let get = |name: &str, labels: Labels| values.get(&(name.to_owned(), labels)).copied().unwrap_or(0);
    for (outcome, count) in [("granted", 2), ("busy", 1), ("timeout", 1), ("cancelled", 1), ("error", 1)] {
        assert_eq!(get(ACQUISITIONS, with(("outcome", outcome))), count, "{outcome}: {values:#?}");
        assert_eq!(get(ACQUIRE_WAIT, with(("outcome", outcome))), count, "wait time of {outcome}");
    }
    assert_eq!(get(REENTRIES, labels(&base)), 1, "{values:#?}");
    assert_eq!(get(LOSSES, with(("reason", "max_hold_reached"))), 1, "{values:#?}");
    assert_eq!(get(RELEASES, with(("how", "release"))), 1);
    assert_eq!(get(RELEASES, with(("how", "drop"))), 1);
    assert_eq!(get(HOLD_TIME, with(("end", "released"))), 1);
    assert_eq!(get(HOLD_TIME, with(("end", "lost"))), 1);
    let plain = labels(&[("backend", "memory"), ("kind", "exclusive"), ("outcome", "granted")]);
    assert_eq!(get(ACQUISITIONS, plain), 1, "without a prefix function, no prefix label: {values:#?}");
    for (_, labels) in values.keys() {
        assert!(labels.iter().all(|(_, value)| !value.contains("42")), "the lock name is never a label: {labels:?}");
    }
}

#[test]
fn backend_helpers_record_renewals_session_states_and_handovers() {
    #[derive(Debug)]
    enum State {
        SyncConnected,
    }
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        lockkit_core::metrics::renewal_batch("redis", 250, Duration::from_millis(3));
        lockkit_core::metrics::session_state("zk", &State::SyncConnected);
        lockkit_core::metrics::handover("redis");
    });
    let values = snapshot(&recorder);
    let get = |name: &str, pairs: &[(&str, &str)]| values.get(&(name.to_owned(), labels(pairs))).copied();
    assert_eq!(get(lockkit_core::metrics::RENEWAL_BATCH, &[("backend", "redis")]), Some(1), "{values:#?}");
    assert_eq!(get(lockkit_core::metrics::RENEWAL_LAG, &[("backend", "redis")]), Some(1));
    let state = [("backend", "zk"), ("state", "sync_connected")];
    assert_eq!(get(lockkit_core::metrics::SESSION_STATES, &state), Some(1), "{values:#?}");
    assert_eq!(get(lockkit_core::metrics::HANDOVERS, &[("backend", "redis")]), Some(1), "{values:#?}");
}
