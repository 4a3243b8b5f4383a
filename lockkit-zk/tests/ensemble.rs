//! On a three-member ZooKeeper ensemble: the server a holder is connected to goes away while
//! it holds the lock. The hold survives the move to another member within the session, or its
//! loss is signalled; never are there two holders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockkit_core::{LockGuard, LockHandle};
use lockkit_testkit::History;
use lockkit_testkit::fixture::zk::ZkEnsemble;
use lockkit_testkit::proxy::FaultProxy;
use lockkit_zk::ZkLockProvider;
use support::{eventually, fresh_name, run};

/// Long enough to ride out a leader election on the loopback ensemble.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

#[test]
fn holder_survives_losing_its_server_or_is_told_and_there_are_never_two_holders() {
    run(async {
        let mut ensemble = ZkEnsemble::start().await.expect("the ensemble starts");
        let base = format!("/lockkit-ensemble-{}", uuid::Uuid::new_v4().simple());
        // The holder reaches each member through a proxy of its own, so we can tell which
        // member it is connected to.
        let mut proxies = Vec::new();
        for i in 0..ensemble.member_count() {
            proxies.push(FaultProxy::start(ensemble.member_addr(i)).await.unwrap());
        }
        let holder_target = proxies.iter().map(|p| p.addr().to_string()).collect::<Vec<_>>().join(",");
        let holder = ZkLockProvider::builder()
            .connect_string(holder_target)
            .base_path(base.clone())
            .session_timeout(SESSION_TIMEOUT)
            .build()
            .unwrap();
        let contender = ZkLockProvider::builder()
            .connect_string(ensemble.connect_string())
            .base_path(base.clone())
            .session_timeout(SESSION_TIMEOUT)
            .build()
            .unwrap();

        // Phase 1: stop the member the holder is connected to (whatever its role).
        let member = |proxies: &[FaultProxy]| proxies.iter().position(|p| p.connection_count() > 0);
        let name = fresh_name("ensemble-member");
        let outcome = hold_while(&holder, &contender, &name, async {
            let i = member(&proxies).expect("the holder is connected to a member");
            let role = ensemble.member_mode(i).await;
            ensemble.stop_member(i).await.expect("stop the holder's member");
            println!("stopped member {i} ({role:?}), the holder's server");
            i
        })
        .await;
        ensemble.start_member(outcome).await.expect("the member rejoins");
        ensemble.wait_ready().await.expect("the ensemble is ready again");

        // Phase 2: stop the leader while holding.
        let name = fresh_name("ensemble-leader");
        hold_while(&holder, &contender, &name, async {
            let leader = ensemble.leader_index().await.expect("a leader");
            let connected = member(&proxies);
            ensemble.stop_member(leader).await.expect("stop the leader");
            println!("stopped the leader, member {leader} (the holder is connected to {connected:?})");
        })
        .await;
    });
}

/// Takes the lock with `holder`, lets `contender` try to take it over and over, applies
/// `fault`, then checks: the hold survived (the store still shows it as the holder and it
/// keeps being renewed) or its loss was signalled, and the history has no overlap.
async fn hold_while<T>(
    holder: &ZkLockProvider,
    contender: &ZkLockProvider,
    name: &str,
    fault: impl std::future::Future<Output = T>,
) -> T {
    let history = Arc::new(History::new());
    let lock = holder.lock(name).unwrap();
    let guard = lock.acquire().await.unwrap();
    let hold = history.acquired("holder", &guard);
    let stop = Arc::new(AtomicBool::new(false));
    let contending = tokio::spawn(contend(contender.lock(name).unwrap(), history.clone(), stop.clone()));

    let outcome = fault.await;
    // Wait for the holder's session to answer again (through another member), or for the loss.
    eventually(SESSION_TIMEOUT * 3, "the holder reconnects or learns of its loss", || async {
        !guard.is_held() || holder.inspect(name).await.is_ok()
    })
    .await;
    if guard.is_held() {
        let info = holder.inspect(name).await.unwrap();
        assert_eq!(info.holder().map(|h| h.token), Some(guard.token()), "the store still shows our hold");
        let before = guard.valid_until().unwrap();
        // Renewals go on through the new server: the deadline moves within a renewal period.
        let bound = Instant::now() + SESSION_TIMEOUT;
        while guard.valid_until().is_some_and(|until| until <= before) && guard.is_held() {
            assert!(Instant::now() < bound, "no renewal through the new server within {SESSION_TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(guard.is_held(), "the hold survived the move: {:?}", guard.watcher().loss());
        println!("the hold survived the move");
    } else {
        println!("the hold was lost: {:?}", guard.watcher().loss());
    }
    history.ended(hold, Some(&guard));
    drop(guard);
    // Give the contender a chance to take the lock after us.
    let contender_lock = contender.lock(name).unwrap();
    eventually(SESSION_TIMEOUT * 3, "the lock is free or taken over", || async {
        contender_lock.try_acquire().await.is_ok_and(|g| g.is_some()) || history.len() > 1
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    contending.await.unwrap();
    history.assert_valid();
    outcome
}

async fn contend(lock: LockHandle, history: Arc<History>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match lock.acquire_timeout(Duration::from_millis(500)).await {
            Ok(guard) => {
                let index = history.acquired("contender", &guard);
                tokio::time::sleep(Duration::from_millis(20)).await;
                end(&history, index, guard).await;
            }
            Err(error) => assert!(error.is_retryable(), "the contender sees only retryable errors: {error}"),
        }
    }
}

async fn end(history: &History, index: usize, guard: LockGuard) {
    history.ended(index, Some(&guard));
    let _ = guard.release().await;
}
