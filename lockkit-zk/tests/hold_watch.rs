//! How a session tells its holds' deletions: each of its first holds watches its node, and
//! once it has many at once (64) one recursive watch on the base path serves them all, those
//! granted from then on and those it takes over (checked from the session's table of holds,
//! `hold_coverage`). A deletion reaches the one hold it concerns among many, either way, and a
//! deletion made while the holder's connection was cut (events the server does not replay to a
//! recursive watch) is still found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{LockGuard, LossReason};
use lockkit_testkit::holds::{hold_all, release_all};
use lockkit_zk::{HoldCoverage, ZkLockProvider};
use support::{ProxyFaults, SESSION_TIMEOUT, ZkHarness, eventually, fresh_name, run, shared_harness};

/// The default threshold of the recursive watch.
const MANY_HOLDS: usize = 64;

/// A provider of its own behind a fault proxy, holding `count` locks with fresh names, the
/// last `covered` of them taken once the recursive watch is set: the provider (to keep while
/// the holds live), its proxy, the names and the guards. Checks, from the session's table of
/// holds, that the recursive watch covers every hold: the last ones from their grant, the
/// first ones (which watched their own node until it was set) since it took them over.
async fn proxied_holds(
    h: &ZkHarness,
    what: &str,
    count: usize,
    covered: usize,
) -> (ZkLockProvider, Arc<ProxyFaults>, Vec<String>, Vec<LockGuard>) {
    assert!(count - covered >= MANY_HOLDS, "the holds before the last ones set the recursive watch");
    let (provider, proxy) = h.proxied_client().await;
    let names: Vec<String> = (0..count).map(|i| fresh_name(&format!("{what}-{i}"))).collect();
    let (first, last) = names.split_at(count - covered);
    let mut guards = hold_all(&provider, first).await;
    eventually(SESSION_TIMEOUT, "the recursive watch is set", || async { provider.hold_coverage().store_wide_watch })
        .await;
    guards.extend(hold_all(&provider, last).await);
    assert_eq!(provider.hold_coverage(), HoldCoverage { store_wide_watch: true, store_wide: count, per_hold: 0 });
    (provider, proxy, names, guards)
}

/// Deletes the node of the holder of lock `name`, as an administrator would.
async fn delete_holder_node(h: &ZkHarness, name: &str) {
    let node = h.contenders(name).await[0].clone();
    h.admin().delete(&format!("{}/{node}", h.lock_znode(name)), None).await.unwrap();
}

/// Releases `guards`, the holds of `names` (those at the indices `lost` were lost), and checks
/// that no node is left behind.
async fn release_leaving_no_node(h: &ZkHarness, names: &[String], guards: Vec<LockGuard>, lost: &[usize]) {
    release_all(guards, lost).await;
    for name in names {
        assert!(h.contenders(name).await.is_empty(), "{name} left a node behind");
    }
}

/// 400 holds on one provider, the last 100 taken once the recursive watch is set; an
/// administrator deletes the node of one of the first (which watched its own node until the
/// recursive watch took it over) and of one of the last (covered from its grant): those holds,
/// and no other, are lost, at once; the others release normally.
#[test]
fn a_deleted_node_among_many_holds_loses_that_hold_only() {
    run(async {
        let h = shared_harness().await;
        let (_a, _proxy, names, guards) = proxied_holds(h, "many", 400, 100).await;
        let victims = [17, 377];
        for victim in victims {
            delete_holder_node(h, &names[victim]).await;
            let reason = tokio::time::timeout(Duration::from_secs(5), guards[victim].lost()).await.unwrap();
            assert_eq!(reason, LossReason::RecordGone, "hold {victim}");
        }
        // Past a renewal, every other hold is still held.
        tokio::time::sleep(SESSION_TIMEOUT / 2).await;
        for (i, guard) in guards.iter().enumerate() {
            assert_eq!(guard.is_held(), !victims.contains(&i), "hold {i}: {:?}", guard.watcher().loss());
        }
        release_leaving_no_node(h, &names, guards, &victims).await;
    });
}

/// A provider with 300 holds (the last 20 taken once the recursive watch is set) has its
/// connection cut, shorter than the session timeout; the node of its last hold is deleted
/// meanwhile, and the connection comes back: the server does not replay the deletion to the
/// recursive watch, and the session finds it by looking: that hold is lost, the others kept.
#[test]
fn a_node_deleted_while_the_connection_was_cut_is_found_after_the_reconnection() {
    run(async {
        let h = shared_harness().await;
        let (_a, a_proxy, names, guards) = proxied_holds(h, "cut", 300, 20).await;
        let victim = names.len() - 1;
        a_proxy.proxy().cut_all();
        a_proxy.proxy().blackhole();
        delete_holder_node(h, &names[victim]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        a_proxy.proxy().heal();
        let reason = tokio::time::timeout(SESSION_TIMEOUT, guards[victim].lost()).await.unwrap();
        assert_eq!(reason, LossReason::RecordGone);
        let kept = &guards[victim - 1];
        eventually(SESSION_TIMEOUT, "the other holds are renewed after the reconnection", || async {
            kept.is_held() && kept.valid_until().is_some_and(|until| until > Instant::now() + SESSION_TIMEOUT / 2)
        })
        .await;
        release_leaving_no_node(h, &names, guards, &[victim]).await;
    });
}
