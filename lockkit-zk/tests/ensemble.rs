//! On a three-member ZooKeeper ensemble: the server a holder is connected to goes away while
//! it holds the lock. The hold survives the move to another member within the session, or its
//! loss is signalled; never are there two holders. The same for an election: the leader
//! keeps leading or is told, and an observer whose server goes away follows the changes of
//! leader from another member, in term order.
//!
//! The tests take turns: one ensemble at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockkit_core::{LeaderEvent, LockGuard, LockHandle};
use lockkit_testkit::History;
use lockkit_testkit::fixture::zk::ZkEnsemble;
use lockkit_testkit::proxy::FaultProxy;
use lockkit_zk::ZkLockProvider;
use support::{eventually, fresh_name, run};

/// Long enough to ride out a leader election on the loopback ensemble.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// One ensemble at a time in this test binary.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The test's turn (hold it to the end), a fresh ensemble, and a base path of its own.
async fn fresh_ensemble() -> (tokio::sync::MutexGuard<'static, ()>, ZkEnsemble, String) {
    let turn = ONE_AT_A_TIME.lock().await;
    let ensemble = ZkEnsemble::start().await.expect("the ensemble starts");
    (turn, ensemble, format!("/lockkit-ensemble-{}", uuid::Uuid::new_v4().simple()))
}

/// A proxy in front of each member of `ensemble`, and the connect string that reaches the
/// members through them.
async fn proxied(ensemble: &ZkEnsemble) -> (Vec<FaultProxy>, String) {
    let mut proxies = Vec::new();
    for i in 0..ensemble.member_count() {
        proxies.push(FaultProxy::start(ensemble.member_addr(i)).await.unwrap());
    }
    let through = proxies.iter().map(|p| p.addr().to_string()).collect::<Vec<_>>().join(",");
    (proxies, through)
}

#[test]
fn holder_survives_losing_its_server_or_is_told_and_there_are_never_two_holders() {
    run(async {
        let (_turn, mut ensemble, base) = fresh_ensemble().await;
        // The holder reaches each member through a proxy of its own, so we can tell which
        // member it is connected to.
        let (proxies, holder_target) = proxied(&ensemble).await;
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

/// An observer connected (through proxies, one per member) to the member that then stops,
/// while the leader resigns and another candidate comes to lead: the observer moves to
/// another member within its session and reports the new leader after the old one, with no
/// gap (one change passed while it moved, which the replayed watches tell exactly); the
/// candidates' own sessions ride out the stop too, and the new leader is told of nothing lost.
#[test]
fn an_observer_follows_the_election_from_another_member_when_its_own_stops() {
    run(async {
        let (_turn, mut ensemble, base) = fresh_ensemble().await;
        let (proxies, through_proxies) = proxied(&ensemble).await;
        let builder = |servers: String| {
            ZkLockProvider::builder().connect_string(servers).base_path(base.clone()).session_timeout(SESSION_TIMEOUT)
        };
        let observer_side = builder(through_proxies);
        let observing = observer_side.build().unwrap();
        let a = builder(ensemble.connect_string()).build().unwrap();
        let b = builder(ensemble.connect_string()).build().unwrap();
        let name = fresh_name("ensemble-observer");

        let leadership_a = a.election(&name).unwrap().campaign("a").await.unwrap();
        let mut observer = observing.election(&name).unwrap().observe().unwrap();
        let first = tokio::time::timeout(SESSION_TIMEOUT, observer.next()).await.unwrap().unwrap().unwrap();
        assert!(matches!(&first, LeaderEvent::Elected(l) if l.term == leadership_a.token()), "{first:?}");
        let session = observing.zk_client().await.unwrap().session_id();

        let member = proxies.iter().position(|p| p.connection_count() > 0).expect("the observer is connected");
        ensemble.stop_member(member).await.expect("stop the observer's member");
        let term_a = leadership_a.token();
        tokio::time::timeout(SESSION_TIMEOUT * 2, leadership_a.resign()).await.unwrap().unwrap();
        let leadership_b =
            tokio::time::timeout(SESSION_TIMEOUT * 3, b.election(&name).unwrap().campaign("b")).await.unwrap().unwrap();
        let mut seen = Vec::new();
        loop {
            let event = tokio::time::timeout(SESSION_TIMEOUT * 3, observer.next()).await.unwrap().unwrap().unwrap();
            let done = matches!(&event, LeaderEvent::Elected(l) if l.term == leadership_b.token());
            seen.push(event);
            if done {
                break;
            }
        }
        println!("after the stop of member {member}: {seen:?}");
        assert!(!seen.contains(&LeaderEvent::Gap), "one change, told exactly: {seen:?}");
        assert!(leadership_b.token() > term_a);
        assert_eq!(observing.zk_client().await.unwrap().session_id(), session, "the observer kept its session");
        assert!(leadership_b.is_held());
        leadership_b.resign().await.unwrap();
        let vacant = tokio::time::timeout(SESSION_TIMEOUT, observer.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(vacant, LeaderEvent::Vacant);
        ensemble.start_member(member).await.expect("the member rejoins");
        ensemble.wait_ready().await.expect("the ensemble is ready again");
    });
}
