//! How a session tells its holds' deletions: one recursive watch on the base path for all of
//! them. A deletion reaches the one hold it concerns among many, and a deletion made while the
//! holder's connection was cut (events the server does not replay) is still found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lockkit_core::{Error, LossReason};
use support::{SESSION_TIMEOUT, eventually, fresh_name, run, shared_harness};

/// 200 holds on one provider; an administrator deletes one of their nodes: that hold, and no
/// other, is lost, at once; the others release normally.
#[test]
fn a_deleted_node_among_many_holds_loses_that_hold_only() {
    run(async {
        let h = shared_harness().await;
        let (a, _proxy) = h.proxied_client().await;
        let names: Vec<String> = (0..200).map(|i| fresh_name(&format!("many-{i}"))).collect();
        let mut guards = Vec::new();
        for name in &names {
            guards.push(a.lock(name).unwrap().acquire().await.unwrap());
        }
        let victim = 137;
        let node = h.contenders(&names[victim]).await[0].clone();
        h.admin().delete(&format!("{}/{node}", h.lock_znode(&names[victim])), None).await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(5), guards[victim].lost()).await.unwrap();
        assert_eq!(reason, LossReason::RecordGone);
        // Past a renewal, every other hold is still held.
        tokio::time::sleep(SESSION_TIMEOUT / 2).await;
        for (i, guard) in guards.iter().enumerate() {
            assert_eq!(guard.is_held(), i != victim, "hold {i}: {:?}", guard.watcher().loss());
        }
        for (i, guard) in guards.into_iter().enumerate() {
            let released = guard.release().await;
            if i == victim {
                assert!(matches!(released, Err(Error::LockLost { .. })), "{released:?}");
            } else {
                released.unwrap();
            }
        }
        for name in &names {
            assert!(h.contenders(name).await.is_empty(), "{name} left a node behind");
        }
    });
}

/// The holder's connection is cut (shorter than the session timeout), its node is deleted
/// meanwhile, and the connection comes back: the server does not replay the deletion to the
/// recursive watch, and the session finds it by looking: the hold is lost, the other kept.
#[test]
fn a_node_deleted_while_the_connection_was_cut_is_found_after_the_reconnection() {
    run(async {
        let h = shared_harness().await;
        let (a, a_proxy) = h.proxied_client().await;
        let (gone, kept) = (fresh_name("cut-delete"), fresh_name("cut-keep"));
        let guard = a.lock(&gone).unwrap().acquire().await.unwrap();
        let other = a.lock(&kept).unwrap().acquire().await.unwrap();
        a_proxy.proxy().cut_all();
        a_proxy.proxy().blackhole();
        let node = h.contenders(&gone).await[0].clone();
        h.admin().delete(&format!("{}/{node}", h.lock_znode(&gone)), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        a_proxy.proxy().heal();
        let reason = tokio::time::timeout(SESSION_TIMEOUT, guard.lost()).await.unwrap();
        assert_eq!(reason, LossReason::RecordGone);
        eventually(SESSION_TIMEOUT, "the other hold is renewed after the reconnection", || async {
            other.is_held() && other.valid_until().is_some_and(|until| until > std::time::Instant::now() + SESSION_TIMEOUT / 2)
        })
        .await;
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        other.release().await.unwrap();
        assert!(h.contenders(&kept).await.is_empty());
    });
}
