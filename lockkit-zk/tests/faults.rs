//! ZooKeeper-specific fault cases, on a real server: each client talks to it through a fault
//! proxy of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::backend::LeaderEvents;
use lockkit_core::{Error, FencingToken, LeaderEvent, LossReason};
use lockkit_testkit::History;
use support::{SESSION_TIMEOUT, eventually, fresh_name, run, shared_harness};
use zookeeper_client as zk;

/// The holder's session expires (cut off past the session timeout, then back): the hold is
/// lost, the queued waiter acquires, the history shows no overlap, and the holder's provider
/// opens a new session and can lock again.
#[test]
fn expired_session_loses_the_hold_and_the_next_waiter_acquires() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("expired");
        let history = Arc::new(History::new());
        let (a, a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let lock_a = a.lock(&name).unwrap();
        let guard = lock_a.acquire().await.unwrap();
        let a_hold = history.acquired("a", &guard);
        let lock_b = b.lock(&name).unwrap();
        let waiter = tokio::spawn({
            let history = history.clone();
            async move {
                let guard = lock_b.acquire().await.unwrap();
                let index = history.acquired("b", &guard);
                (guard, index, Instant::now())
            }
        });
        eventually(Duration::from_secs(5), "b is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        a_proxy.proxy().blackhole();
        let reason = tokio::time::timeout(SESSION_TIMEOUT * 2, guard.lost()).await.expect("the loss fires");
        let lost_at = Instant::now();
        history.ended(a_hold, Some(&guard));
        let (b_guard, b_hold, b_at) = tokio::time::timeout(SESSION_TIMEOUT * 3, waiter).await.unwrap().unwrap();
        assert!(lost_at <= b_at, "a's loss ({reason}) fired {:?} after b acquired", lost_at - b_at);
        assert!(b_guard.token() > guard.token());
        // Back on the network, a's client learns the session expired.
        a_proxy.proxy().heal();
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        history.ended(b_hold, Some(&b_guard));
        b_guard.release().await.unwrap();
        history.assert_valid();
        // The provider is not dead: a later acquisition runs on a new session.
        let again = tokio::time::timeout(SESSION_TIMEOUT * 3, async {
            loop {
                match lock_a.acquire_timeout(Duration::from_secs(2)).await {
                    Ok(guard) => break guard,
                    Err(error) => assert!(error.is_retryable(), "only retryable errors meanwhile: {error}"),
                }
            }
        })
        .await
        .expect("the provider acquires again on a new session");
        assert!(again.token().get() > b_guard_token(&history));
        again.release().await.unwrap();
        assert!(h.contenders(&name).await.is_empty());
    });
}

fn b_guard_token(history: &History) -> u64 {
    history.holds_snapshot().iter().map(|h| h.token).max().unwrap_or(0)
}

/// A holder blackholed past the session timeout learns of its loss before the waiter behind
/// it is granted the lock, and its `valid_until` lies before that grant.
#[test]
fn blackholed_holder_loses_before_another_client_acquires() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("blackhole");
        let (a, a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let guard = a.lock(&name).unwrap().acquire().await.unwrap();
        let watcher = guard.watcher();
        let loss = tokio::spawn({
            let watcher = watcher.clone();
            async move {
                let reason = watcher.lost().await;
                (reason, Instant::now())
            }
        });
        let lock_b = b.lock(&name).unwrap();
        let waiter = tokio::spawn(async move {
            let guard = lock_b.acquire().await.unwrap();
            (guard, Instant::now())
        });
        eventually(Duration::from_secs(5), "b is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        let cut_at = Instant::now();
        a_proxy.proxy().blackhole();
        let (b_guard, acquired_at) = tokio::time::timeout(SESSION_TIMEOUT * 3, waiter).await.unwrap().unwrap();
        let (reason, lost_at) = loss.await.unwrap();
        assert!(lost_at <= acquired_at, "loss ({reason}) fired {:?} after b acquired", lost_at - acquired_at);
        assert!(watcher.valid_until().unwrap() <= acquired_at);
        assert!(
            acquired_at - cut_at >= SESSION_TIMEOUT / 2,
            "b acquired only {:?} after the cut",
            acquired_at - cut_at
        );
        a_proxy.proxy().heal();
        drop(guard);
        b_guard.release().await.unwrap();
    });
}

/// A short disconnect within the session (a reset connection, then a brief blackhole) does
/// not lose the hold: the client reconnects to the same session, the hold is renewed past its
/// first deadline, and nobody else can take the lock meanwhile.
#[test]
fn short_disconnect_within_the_session_keeps_the_hold() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("short-disconnect");
        let (a, a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let guard = a.lock(&name).unwrap().acquire().await.unwrap();
        let first_deadline = guard.valid_until().unwrap();
        a_proxy.proxy().cut_all();
        tokio::time::sleep(Duration::from_millis(300)).await;
        a_proxy.proxy().blackhole();
        tokio::time::sleep(Duration::from_millis(800)).await;
        a_proxy.proxy().heal();
        let lock_b = b.lock(&name).unwrap();
        assert!(matches!(lock_b.acquire_timeout(SESSION_TIMEOUT * 2).await, Err(Error::Timeout { .. })));
        assert!(guard.is_held(), "the hold survived: {:?}", guard.watcher().loss());
        assert!(guard.valid_until().unwrap() > first_deadline + SESSION_TIMEOUT, "the hold was renewed");
        let token = guard.token();
        guard.release().await.unwrap();
        let next = lock_b.try_acquire().await.unwrap().expect("free after the release");
        assert!(next.token() > token);
        next.release().await.unwrap();
    });
}

/// The reply to the create is lost (the proxy delays replies, and the connection is reset
/// after the node was created but before its reply got through): the client finds its own
/// node by its attempt id instead of leaking it, waits with it, and leaves nothing behind.
/// The same for a `try_acquire`, which must then delete the node it found.
#[test]
fn lost_create_reply_finds_the_own_node_and_leaves_no_orphan() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("lost-reply");
        let (a, _a_proxy) = h.proxied_client().await;
        let (c, c_proxy) = h.proxied_client().await;
        let guard = a.lock(&name).unwrap().acquire().await.unwrap();
        let holder_node = h.contenders(&name).await;
        assert_eq!(holder_node.len(), 1);

        // A waiting acquisition whose create reply is lost (on a session opened before).
        c.zk_client().await.unwrap();
        c_proxy.proxy().set_latency(Duration::from_millis(600));
        let lock_c = c.lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock_c.acquire().await.map(|g| (g.token(), g)) });
        eventually(Duration::from_secs(5), "c's node is created", || async { h.contenders(&name).await.len() == 2 })
            .await;
        let c_node_before = h.contenders(&name).await[1].clone();
        c_proxy.proxy().cut_all();
        c_proxy.proxy().heal();
        // Give the client time to reconnect and look for its node; a leaked node would show as
        // a third contender, a node made again would have another name.
        tokio::time::sleep(SESSION_TIMEOUT / 2).await;
        let queued = h.contenders(&name).await;
        assert_eq!(queued.len(), 2, "exactly one node for c: {queued:?}");
        assert_eq!(queued[1], c_node_before, "c kept the node whose create reply was lost");
        let token = guard.token();
        guard.release().await.unwrap();
        let (c_token, c_guard) = tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap().unwrap();
        assert!(c_token.get() > token.get());
        let c_node = format!("{}/{}", h.lock_znode(&name), h.contenders(&name).await[0]);
        let stat = h.admin().check_stat(&c_node).await.unwrap().unwrap();
        assert_eq!(c_token.get(), stat.czxid as u64, "the token is the czxid of c's own node");

        // A try_acquire whose create reply is lost finds its node and deletes it.
        let (d, d_proxy) = h.proxied_client().await;
        d.zk_client().await.unwrap();
        d_proxy.proxy().set_latency(Duration::from_millis(600));
        let lock_d = d.lock(&name).unwrap();
        let attempt = tokio::spawn(async move { lock_d.try_acquire().await.map(|g| g.is_some()) });
        eventually(Duration::from_secs(5), "d's node is created", || async { h.contenders(&name).await.len() == 2 })
            .await;
        d_proxy.proxy().cut_all();
        d_proxy.proxy().heal();
        let got = tokio::time::timeout(Duration::from_secs(10), attempt).await.unwrap().unwrap();
        assert!(matches!(got, Ok(false)), "the try fails without error: {got:?}");
        assert_eq!(h.contenders(&name).await.len(), 1, "the try left no node behind");
        c_guard.release().await.unwrap();
        assert!(h.contenders(&name).await.is_empty());
    });
}

/// An administrator deletes the holder's node: the holder's guard reports `RecordGone`, the
/// waiter behind it is woken and acquires, and the old holder's release says `LockLost`
/// without touching the new hold. The same deletion of the new holder's node (granted after
/// waiting) is a loss for it too.
#[test]
fn node_deleted_by_an_administrator_is_a_loss() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("admin-delete");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let guard = a.lock(&name).unwrap().acquire().await.unwrap();
        let lock_b = b.lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock_b.acquire().await.unwrap() });
        eventually(Duration::from_secs(5), "b is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        let holder = h.contenders(&name).await[0].clone();
        h.admin().delete(&format!("{}/{holder}", h.lock_znode(&name)), None).await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.unwrap();
        assert_eq!(reason, LossReason::RecordGone);
        let b_guard = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        assert!(b_guard.is_held());
        assert_eq!(h.contenders(&name).await.len(), 1);
        // b was granted as a waiter, on the watch its wait left on its node: a deletion is
        // a loss for it too.
        let b_node = h.contenders(&name).await[0].clone();
        h.admin().delete(&format!("{}/{b_node}", h.lock_znode(&name)), None).await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(5), b_guard.lost()).await.unwrap();
        assert_eq!(reason, LossReason::RecordGone);
        assert!(matches!(b_guard.release().await, Err(Error::LockLost { .. })));
    });
}

/// A waiter cancelled in the middle of the queue removes its node at once, and the waiter
/// behind it (which was watching it) is granted the lock in turn.
#[test]
fn waiter_cancelled_in_the_middle_of_the_queue_does_not_block_the_next() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("cancel-middle");
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(h.proxied_client().await);
        }
        let guard = clients[0].0.lock(&name).unwrap().acquire().await.unwrap();
        let mut waiters = Vec::new();
        for (index, (client, _)) in clients.iter().enumerate().skip(1) {
            let lock = client.lock(&name).unwrap();
            waiters.push(tokio::spawn(async move {
                let guard = lock.acquire().await.unwrap();
                let at = Instant::now();
                guard.release().await.unwrap();
                (index, at)
            }));
            eventually(Duration::from_secs(5), "the waiter is queued", || async {
                h.contenders(&name).await.len() == index + 1
            })
            .await;
        }
        let middle = waiters.remove(1);
        middle.abort();
        assert!(middle.await.unwrap_err().is_cancelled());
        eventually(Duration::from_secs(5), "the cancelled waiter's node is gone", || async {
            h.contenders(&name).await.len() == 3
        })
        .await;
        guard.release().await.unwrap();
        let mut order = Vec::new();
        for waiter in waiters {
            order.push(tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap());
        }
        assert_eq!(order.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 3]);
        assert!(order[0].1 <= order[1].1);
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// A waiter that watches every node ahead of it is granted only when all of them are gone:
/// with a holder and four waiters, the second gives up (timeout) and the third is cancelled
/// while the holder still holds. The fourth, which saw both of its nearest predecessors
/// vanish, keeps waiting; once the holder releases, the first waiter and then the fourth are
/// granted in turn, promptly, with no two holds at once.
#[test]
fn waiter_is_not_granted_while_the_holder_holds_when_waiters_before_it_give_up() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("give-up-between");
        let history = Arc::new(History::new());
        let mut clients = Vec::new();
        for _ in 0..5 {
            clients.push(h.proxied_client().await);
        }
        let holder = clients[0].0.lock(&name).unwrap().acquire().await.unwrap();
        let holder_hold = history.acquired("holder", &holder);
        let mut waiters = Vec::new();
        for (index, (client, _)) in clients.iter().enumerate().skip(1) {
            let lock = client.lock(&name).unwrap();
            let history = history.clone();
            waiters.push(tokio::spawn(async move {
                // The second waiter gives up after a while (long enough for everyone to queue).
                let wait = if index == 2 { Some(Duration::from_secs(2)) } else { None };
                let guard = match wait {
                    Some(timeout) => lock.acquire_timeout(timeout).await?,
                    None => lock.acquire().await?,
                };
                let at = Instant::now();
                let hold = history.acquired(&format!("waiter {index}"), &guard);
                history.ended(hold, Some(&guard));
                guard.release().await?;
                Ok::<_, Error>((index, at))
            }));
            eventually(Duration::from_secs(5), "the waiter is queued", || async {
                h.contenders(&name).await.len() == index + 1
            })
            .await;
        }
        let fourth = waiters.pop().unwrap();
        let third = waiters.pop().unwrap();
        let second = waiters.pop().unwrap();
        let first = waiters.pop().unwrap();
        third.abort();
        assert!(third.await.unwrap_err().is_cancelled());
        let gave_up = tokio::time::timeout(Duration::from_secs(10), second).await.unwrap().unwrap();
        assert!(matches!(gave_up, Err(Error::Timeout { .. })), "the second waiter times out: {gave_up:?}");
        eventually(Duration::from_secs(5), "the nodes of the waiters that gave up are gone", || async {
            h.contenders(&name).await.len() == 3
        })
        .await;
        // The deletion notifications reach the fourth waiter within milliseconds; a waiter that
        // took either of them for its turn would be granted in this time.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !fourth.is_finished(),
            "the fourth waiter was granted while the holder holds: {:?}",
            history.holds_snapshot()
        );
        assert!(!first.is_finished(), "the first waiter was granted while the holder holds");
        assert!(holder.is_held());
        history.ended(holder_hold, Some(&holder));
        let released_at = Instant::now();
        holder.release().await.unwrap();
        let (first_index, first_at) =
            tokio::time::timeout(Duration::from_secs(5), first).await.unwrap().unwrap().unwrap();
        let (fourth_index, fourth_at) =
            tokio::time::timeout(Duration::from_secs(5), fourth).await.unwrap().unwrap().unwrap();
        assert_eq!((first_index, fourth_index), (1, 4));
        assert!(released_at <= first_at && first_at <= fourth_at, "granted in arrival order after the release");
        history.assert_valid();
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// An administrator deletes a waiting node: its waiter, which saw the holder go, must not be
/// granted the lock on a node that no longer exists while the waiter behind it (which saw both
/// nodes ahead of it go) takes the lock too. The waiter queues again, behind the other, and
/// both are granted in turn, never at once.
#[test]
fn waiter_whose_node_was_deleted_queues_again_instead_of_holding_a_ghost() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("ghost-waiter");
        let history = Arc::new(History::new());
        let (a, _a_proxy) = h.proxied_client().await;
        let (w, _w_proxy) = h.proxied_client().await;
        let (v, _v_proxy) = h.proxied_client().await;
        let holder = a.lock(&name).unwrap().acquire().await.unwrap();
        let holder_hold = history.acquired("holder", &holder);
        let spawn_waiter = |label: &'static str, client: &lockkit_zk::ZkLockProvider| {
            let lock = client.lock(&name).unwrap();
            let history = history.clone();
            tokio::spawn(async move {
                let guard = lock.acquire().await.unwrap();
                let at = Instant::now();
                let hold = history.acquired(label, &guard);
                // Hold a little, so that two holds at once would overlap in the history.
                tokio::time::sleep(Duration::from_millis(100)).await;
                history.ended(hold, Some(&guard));
                let released = guard.release().await;
                (label, at, released)
            })
        };
        let w_task = spawn_waiter("w", &w);
        eventually(Duration::from_secs(5), "w is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        let w_node = h.contenders(&name).await[1].clone();
        let v_task = spawn_waiter("v", &v);
        eventually(Duration::from_secs(5), "v is queued", || async { h.contenders(&name).await.len() == 3 }).await;
        h.admin().delete(&format!("{}/{w_node}", h.lock_znode(&name)), None).await.unwrap();
        eventually(Duration::from_secs(5), "w's node is gone", || async {
            !h.contenders(&name).await.contains(&w_node)
        })
        .await;
        history.ended(holder_hold, Some(&holder));
        holder.release().await.unwrap();
        let (v_label, v_at, v_released) = tokio::time::timeout(Duration::from_secs(5), v_task).await.unwrap().unwrap();
        let (w_label, w_at, w_released) = tokio::time::timeout(Duration::from_secs(5), w_task).await.unwrap().unwrap();
        assert_eq!((v_label, w_label), ("v", "w"));
        history.assert_valid();
        assert!(v_released.is_ok() && w_released.is_ok(), "both holds were real: {v_released:?} {w_released:?}");
        assert!(v_at <= w_at, "v, ahead after w queued again, is granted first");
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// With credentials, lock nodes are creator-only: a client with other (or no) credentials
/// can neither delete a held lock's node, nor take the lock, nor break it, while a client of
/// the same user contends normally and may break it.
#[test]
fn wrong_credentials_cannot_delete_or_take_a_held_lock() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("credentials");
        let base = format!("{}-secure", h.base());
        let proxy = lockkit_testkit::proxy::FaultProxy::start(h.upstream()).await.unwrap();
        let owner = h.builder_via(&proxy).base_path(base.clone()).credentials("locker", "right").build().unwrap();
        let peer = h.builder_via(&proxy).base_path(base.clone()).credentials("locker", "right").build().unwrap();
        let thief = h.builder_via(&proxy).base_path(base.clone()).credentials("locker", "wrong").build().unwrap();
        let guard = owner.lock(&name).unwrap().acquire().await.unwrap();
        let lock_znode = owner.lock_path(&name).unwrap();
        let children = h.admin().list_children(&lock_znode).await;
        assert_eq!(children, Err(zk::Error::NoAuth), "an anonymous client cannot even list the queue");

        let thief_zk =
            zk::Client::connector().with_auth("digest", b"locker:wrong").connect(h.connect_string()).await.unwrap();
        let peer_zk =
            zk::Client::connector().with_auth("digest", b"locker:right").connect(h.connect_string()).await.unwrap();
        let node = format!("{lock_znode}/{}", peer_zk.list_children(&lock_znode).await.unwrap()[0]);
        assert_eq!(thief_zk.delete(&node, None).await, Err(zk::Error::NoAuth));
        assert_eq!(h.admin().delete(&node, None).await, Err(zk::Error::NoAuth));
        assert_eq!(thief_zk.delete(&lock_znode, None).await, Err(zk::Error::NoAuth));

        let stolen = thief.lock(&name).unwrap().try_acquire().await;
        assert!(matches!(stolen, Err(Error::Backend { .. })), "the thief is refused: {stolen:?}");
        assert!(peer.lock(&name).unwrap().try_acquire().await.unwrap().is_none(), "the same user contends");
        let refused = thief.break_lock(&name).await;
        assert!(matches!(refused, Err(Error::Backend { .. })), "the thief may not break the lock: {refused:?}");
        assert!(guard.is_held());
        guard.release().await.unwrap();
        let next = peer.lock(&name).unwrap().try_acquire().await.unwrap().expect("the peer takes the lock");
        // The same user may break it (the ACL on the lock's node decides who may).
        let broken = owner.break_lock(&name).await.unwrap();
        assert_eq!(broken.iter().map(|held| held.token).collect::<Vec<_>>(), [next.token()]);
        tokio::time::timeout(Duration::from_secs(5), next.lost()).await.expect("the broken holder learns of it");
    });
}

/// The lock's container znode vanishes between two acquisitions (the server deletes empty
/// containers; here an administrator does it): the next acquisition makes it again, and its
/// token (a czxid) is still greater, unlike a sequence number.
#[test]
fn vanished_lock_znode_is_made_again_and_tokens_keep_growing() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("container");
        let (a, _proxy) = h.proxied_client().await;
        let lock = a.lock(&name).unwrap();
        let first = lock.acquire().await.unwrap();
        let token = first.token();
        first.release().await.unwrap();
        h.admin().delete(&h.lock_znode(&name), None).await.unwrap();
        let second = lock.acquire().await.unwrap();
        assert!(second.token() > token);
        let info = a.inspect(&name).await.unwrap();
        let holder = info.holder().cloned().unwrap();
        assert_eq!(holder.token, second.token());
        assert!(holder.owner.contains(&format!("pid {}", std::process::id())), "who holds it: {}", holder.owner);
        assert!(holder.since.is_some());
        assert_eq!(info.waiters, Some(0));
        let (_, stat) = h.admin().get_data(&h.lock_znode(&name)).await.unwrap();
        assert_eq!(stat.ephemeral_owner, 0);
        second.release().await.unwrap();
    });
}

/// With `DisconnectPolicy::LoseOnDisconnect`, a dropped connection loses the hold at once,
/// although the session survives; the lost hold's node is deleted without waiting for its
/// guard, and the lock is free again.
#[test]
fn lose_on_disconnect_policy_loses_the_hold_when_the_connection_drops() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("lose-on-disconnect");
        let proxy = Arc::new(lockkit_testkit::proxy::FaultProxy::start(h.upstream()).await.unwrap());
        let strict =
            h.builder_via(&proxy).disconnect_policy(lockkit_zk::DisconnectPolicy::LoseOnDisconnect).build().unwrap();
        let guard = strict.lock(&name).unwrap().acquire().await.unwrap();
        proxy.cut_all();
        let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("lost at the disconnect");
        assert!(matches!(reason, LossReason::ConnectionLost), "{reason:?}");
        // The lost hold does not block the queue until its guard is dropped.
        eventually(Duration::from_secs(5), "the lost hold's node is deleted after the reconnect", || async {
            h.contenders(&name).await.is_empty()
        })
        .await;
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        let again = strict.lock(&name).unwrap().try_acquire().await.unwrap();
        assert!(again.is_some(), "the same session locks again after the reconnect");
    });
}

/// Runs `body` on a current-thread runtime of its own, on a thread of its own, and shuts
/// that runtime down before returning what `body` returned.
fn on_a_private_runtime<T: Send + 'static>(body: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let out = runtime.block_on(body);
        drop(runtime);
        out
    })
    .join()
    .expect("the private runtime's thread")
}

/// A provider first used on runtime A, which then shuts down, works on runtime B with the same
/// session (sessions live on lockkit's home runtime, not on the runtime of the first use): it
/// queues behind another client's hold, is woken by the watch when that hold is released,
/// keeps its hold across several session pings, and releases it on B.
#[test]
fn a_provider_whose_first_runtime_shut_down_works_on_the_next() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("runtime-gone");
        let (p, _p_proxy) = h.proxied_client().await;
        let (q, _q_proxy) = h.proxied_client().await;
        let first = p.clone();
        let first_name = name.clone();
        let session_a = on_a_private_runtime(async move {
            let guard = first.lock(&first_name).unwrap().acquire().await.unwrap();
            guard.release().await.unwrap();
            first.zk_client().await.unwrap().session_id()
        });
        assert!(h.contenders(&name).await.is_empty(), "the release on runtime A deleted the node");

        // Runtime B: the kit's runtime.
        let held = q.lock(&name).unwrap().acquire().await.unwrap();
        let lock_p = p.lock(&name).unwrap();
        let waiter = tokio::spawn(async move {
            let guard = lock_p.acquire().await.unwrap();
            (guard, Instant::now())
        });
        eventually(Duration::from_secs(5), "p is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        let session_b = p.zk_client().await.unwrap().session_id();
        assert_eq!(session_a, session_b, "the session outlives runtime A: it lives on the home runtime");
        assert_eq!(p.negotiated_session_timeout(), Some(SESSION_TIMEOUT));

        let released_at = Instant::now();
        held.release().await.unwrap();
        let (guard, granted_at) = tokio::time::timeout(SESSION_TIMEOUT, waiter).await.unwrap().unwrap();
        assert!(
            granted_at - released_at < Duration::from_secs(1),
            "the waiter was woken by the watch, {:?} after the release",
            granted_at - released_at
        );

        // Several pings: each renewal (every third of the session timeout) moves the deadline.
        let first_deadline = guard.valid_until().unwrap();
        let other = q.lock(&name).unwrap();
        eventually(SESSION_TIMEOUT * 3, "the hold is renewed across several pings", || async {
            assert!(guard.is_held(), "the hold is kept: {:?}", guard.watcher().loss());
            assert!(other.try_acquire().await.unwrap().is_none(), "nobody else takes the lock meanwhile");
            guard.valid_until().unwrap() >= first_deadline + SESSION_TIMEOUT
        })
        .await;
        guard.release().await.unwrap();
        assert!(h.contenders(&name).await.is_empty());
    });
}

/// A guard whose runtime shut down keeps its hold (its session lives on lockkit's home
/// runtime), and, dropped afterwards on a plain thread, deletes its node at once through that
/// session.
#[test]
fn a_guard_dropped_after_its_runtime_shut_down_deletes_its_node_at_once() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("release-thread");
        let (p, _p_proxy) = h.proxied_client().await;
        let lock = p.lock(&name).unwrap();
        let (guard, session_a) = on_a_private_runtime({
            let p = p.clone();
            async move {
                let guard = lock.acquire().await.unwrap();
                (guard, p.zk_client().await.unwrap().session_id())
            }
        });
        assert_eq!(guard.watcher().loss(), None, "kept when the runtime that granted it shut down");
        assert_eq!(h.contenders(&name).await.len(), 1, "the node is there while the guard lives");
        let dropped_at = Instant::now();
        std::thread::spawn(move || drop(guard)).join().unwrap();
        eventually(SESSION_TIMEOUT / 2, "the node is deleted at once", || async {
            h.contenders(&name).await.is_empty()
        })
        .await;
        assert!(dropped_at.elapsed() < SESSION_TIMEOUT / 2);
        let session_now = p.zk_client().await.unwrap().session_id();
        assert_eq!(session_a, session_now, "the same session");
        let again = p.lock(&name).unwrap().try_acquire().await.unwrap().expect("free again");
        again.release().await.unwrap();
    });
}

/// The runtime that opened a provider's session shuts down while another runtime waits in the
/// queue on that session's watches: the session lives on lockkit's home runtime, so the waiter
/// keeps its place (and nothing panics) and is granted the lock when the holder releases.
#[test]
fn a_waiter_keeps_its_place_when_the_runtime_that_opened_the_session_shuts_down() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("runtime-gone-mid-wait");
        let (p, _p_proxy) = h.proxied_client().await;
        let (q, _q_proxy) = h.proxied_client().await;
        let runtime_a = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let session_a = {
            let p = p.clone();
            runtime_a.spawn(async move { p.zk_client().await.unwrap().session_id() }).await.unwrap()
        };
        let held = q.lock(&name).unwrap().acquire().await.unwrap();
        let lock_p = p.lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock_p.acquire().await.map(|guard| guard.token()) });
        eventually(Duration::from_secs(5), "p is queued", || async { h.contenders(&name).await.len() == 2 }).await;
        runtime_a.shutdown_background();
        tokio::time::sleep(SESSION_TIMEOUT).await;
        assert_eq!(h.contenders(&name).await.len(), 2, "p keeps its place in the queue");
        assert_eq!(p.zk_client().await.unwrap().session_id(), session_a, "on the same session");
        let token = held.token();
        held.release().await.unwrap();
        let got = tokio::time::timeout(SESSION_TIMEOUT * 2, waiter).await.unwrap().unwrap();
        assert!(got.unwrap() > token, "the waiter is granted after the holder");
        eventually(SESSION_TIMEOUT * 2, "the queue is empty", || async { h.contenders(&name).await.is_empty() }).await;
    });
}

/// Against a port nothing listens on: `connect` fails at once with a retryable connection
/// error that names the server (and no credentials), a lazily built provider's
/// `try_acquire` too, and `acquire_timeout` returns a timeout that says the store was
/// unreachable. Nothing waits for the session timeout.
#[test]
fn an_unreachable_store_is_reported_as_such_and_fast() {
    run(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let started = Instant::now();
        let error = lockkit_zk::ZkLockProvider::connect(&format!("zk://locker:hunter2@127.0.0.1:{port}/app"))
            .await
            .unwrap_err();
        assert!(error.is_connect() && error.is_retryable(), "{error}");
        let message = error.to_string();
        assert!(message.contains(&format!("zk://127.0.0.1:{port}/app")), "{message}");
        assert!(!message.contains("hunter2") && !message.contains("locker"), "{message}");
        let source = std::error::Error::source(&error).expect("a typed source");
        assert_eq!(
            source.downcast_ref::<std::io::Error>().map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionRefused)
        );

        let lazy = lockkit_zk::ZkLockProvider::builder()
            .connect_string(format!("127.0.0.1:{port}"))
            .session_timeout(SESSION_TIMEOUT)
            .build()
            .expect("building does no I/O");
        let lock = lazy.lock("x").unwrap();
        let error = lock.try_acquire().await.unwrap_err();
        assert!(error.is_connect(), "{error}");
        let error = lock.acquire_timeout(Duration::from_millis(300)).await.unwrap_err();
        assert!(error.is_timeout() && error.is_connect(), "{error}");
        assert!(error.to_string().contains("unreachable"), "{error}");
        assert!(started.elapsed() < SESSION_TIMEOUT, "took {:?}", started.elapsed());
    });
}

/// A session timeout beyond what ZooKeeper's 32-bit field carries, or beyond any clock, is
/// refused before any I/O as a configuration error naming the option and its range, never a
/// panic turned into a connection error.
#[test]
fn huge_session_timeouts_are_refused_before_any_io() {
    run(async {
        let h = shared_harness().await;
        for value in ["5000000000000000h", "600h", "25h"] {
            let url = format!("zk://{}/?session_timeout={value}", h.connect_string());
            match lockkit_zk::ZkLockProvider::connect(&url).await {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(message.contains("session_timeout") && message.contains("at most 86400s"), "{message}");
                }
                other => panic!("session_timeout={value}: expected InvalidConfig, got {other:?}"),
            }
        }
    });
}

/// The server clamps the session timeout asked to its own range (the fixture's is 1 s to
/// 60 s): the provider reports the granted one, and a hold's deadline follows it, not the one
/// asked.
#[test]
fn holds_use_the_session_timeout_the_server_granted() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("negotiated");
        let proxy = lockkit_testkit::proxy::FaultProxy::start(h.upstream()).await.unwrap();
        let asked = Duration::from_secs(90);
        let long = h.builder_via(&proxy).session_timeout(asked).build().unwrap();
        assert_eq!(long.negotiated_session_timeout(), None, "no session before the first use");
        let sent = Instant::now();
        let guard = long.lock(&name).unwrap().acquire().await.unwrap();
        let granted = long.negotiated_session_timeout().expect("a session");
        assert_eq!(granted, Duration::from_secs(60), "the fixture's maxSessionTimeout");
        let until = guard.valid_until().unwrap();
        assert!(until <= sent + granted, "the deadline follows the granted timeout, not the {asked:?} asked");
        assert!(until >= sent + granted.mul_f32(0.9), "with the drift margin of the granted timeout");
        guard.release().await.unwrap();
    });
}

/// `connect` is eager (the base path exists when it returns); `build` is lazy (nothing is
/// created until the first use).
#[test]
fn connect_creates_the_base_path_and_build_does_nothing() {
    run(async {
        let h = shared_harness().await;
        let lazy_base = format!("{}-lazy", h.base());
        let proxy = lockkit_testkit::proxy::FaultProxy::start(h.upstream()).await.unwrap();
        let lazy = h.builder_via(&proxy).base_path(lazy_base.clone()).build().unwrap();
        assert_eq!(proxy.connection_count(), 0, "building opened no connection");
        assert_eq!(h.admin().check_stat(&lazy_base).await.unwrap(), None);
        drop(lazy);
        let eager_base = format!("{}-eager", h.base());
        let url = format!("zk://{}/?base_path={eager_base}&session_timeout=3s", h.connect_string());
        let eager = lockkit_zk::ZkLockProvider::connect(&url).await.unwrap();
        assert!(h.admin().check_stat(&eager_base).await.unwrap().is_some(), "connect created the base path");
        assert_eq!(eager.negotiated_session_timeout(), Some(SESSION_TIMEOUT));
    });
}

/// The reply to a reader's create is lost (replies delayed, the connection reset after the
/// node was created): the reader finds its own `read` node again by its attempt id instead of
/// leaking it, keeps its place behind the writer, is granted when the writer releases, with
/// the czxid of that node as its token, and leaves nothing behind. A reader's `try_read` whose
/// reply is lost finds its node and deletes it.
#[test]
fn lost_create_reply_of_a_read_node_finds_the_node_again() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("lost-read-reply");
        let (a, _a_proxy) = h.proxied_client().await;
        let (c, c_proxy) = h.proxied_client().await;
        let write = a.rw_lock(&name).unwrap().write().await.unwrap();

        c.zk_client().await.unwrap();
        c_proxy.proxy().set_latency(Duration::from_millis(600));
        let reader = c.rw_lock(&name).unwrap();
        let waiter = tokio::spawn(async move { reader.read().await });
        eventually(Duration::from_secs(5), "the reader's node is created", || async {
            h.contenders(&name).await.len() == 2
        })
        .await;
        let read_node = h.contenders(&name).await[1].clone();
        assert!(read_node.contains("-read-"), "a read node: {read_node}");
        c_proxy.proxy().cut_all();
        c_proxy.proxy().heal();
        tokio::time::sleep(SESSION_TIMEOUT / 2).await;
        let queued = h.contenders(&name).await;
        assert_eq!(queued, vec![queued[0].clone(), read_node.clone()], "exactly one node for the reader, the same");
        assert!(!waiter.is_finished(), "the reader still waits for the writer");
        let token = write.token();
        write.release().await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap().unwrap();
        assert!(read.token() > token);
        let stat = h.admin().check_stat(&format!("{}/{read_node}", h.lock_znode(&name))).await.unwrap().unwrap();
        assert_eq!(read.token().get(), stat.czxid as u64, "the token is the czxid of the node found again");

        // A try_read behind a writer, whose reply is lost: its node is found and deleted.
        c_proxy.proxy().set_latency(Duration::ZERO);
        read.release().await.unwrap();
        let write = a.rw_lock(&name).unwrap().write().await.unwrap();
        c_proxy.proxy().set_latency(Duration::from_millis(600));
        let reader = c.rw_lock(&name).unwrap();
        let attempt = tokio::spawn(async move { reader.try_read().await.map(|g| g.is_some()) });
        eventually(Duration::from_secs(5), "the try's node is created", || async {
            h.contenders(&name).await.len() == 2
        })
        .await;
        c_proxy.proxy().cut_all();
        c_proxy.proxy().heal();
        let got = tokio::time::timeout(Duration::from_secs(10), attempt).await.unwrap().unwrap();
        assert!(matches!(got, Ok(false)), "the try fails without error: {got:?}");
        assert_eq!(h.contenders(&name).await.len(), 1, "the try left no node behind");
        write.release().await.unwrap();
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// Readers queued behind a writer whose session expires. First the writer holds: its loss
/// is signalled before the reader behind it is granted. Then a writer waits between a
/// holding reader and a queued one: when its session expires, the queued reader joins the
/// holding one at once, without waiting for it; the writer, back on the network, queues again
/// on a new session, behind both readers, and gets the lock after them.
#[test]
fn a_reader_queued_behind_a_writer_whose_session_expires_is_granted() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("reader-behind-expired-writer");
        let history = Arc::new(History::new());
        let (w, w_proxy) = h.proxied_client().await;
        let (r, _r_proxy) = h.proxied_client().await;

        // The writer holds.
        let write = w.rw_lock(&name).unwrap().write().await.unwrap();
        let write_hold = history.acquired("writer", &write);
        let reader = r.rw_lock(&name).unwrap();
        let waiting = tokio::spawn(async move {
            let read = reader.read().await.unwrap();
            (read, Instant::now())
        });
        eventually(Duration::from_secs(5), "the reader is queued", || async { h.contenders(&name).await.len() == 2 })
            .await;
        w_proxy.proxy().blackhole();
        let reason = tokio::time::timeout(SESSION_TIMEOUT * 2, write.lost()).await.expect("the writer's loss");
        let lost_at = Instant::now();
        history.ended(write_hold, Some(&write));
        let (first_read, granted_at) = tokio::time::timeout(SESSION_TIMEOUT * 3, waiting).await.unwrap().unwrap();
        assert!(lost_at <= granted_at, "the writer's loss ({reason}) fired after the reader was granted");
        assert!(first_read.token() > write.token());
        let first_hold = history.acquired("reader 1", &first_read);
        w_proxy.proxy().heal();
        assert!(matches!(write.release().await, Err(Error::LockLost { .. })));

        // A writer waits between the holding reader and a queued one.
        let writer = w.rw_lock(&name).unwrap();
        let queued_writer = tokio::spawn(async move { writer.write_timeout(SESSION_TIMEOUT * 8).await });
        eventually(SESSION_TIMEOUT * 3, "the writer is queued on a new session", || async {
            h.contenders(&name).await.len() == 2
        })
        .await;
        let reader = r.rw_lock(&name).unwrap();
        assert!(reader.try_read().await.unwrap().is_none(), "a later reader waits behind the queued writer");
        let waiting = tokio::spawn(async move {
            let read = reader.read().await.unwrap();
            (read, Instant::now())
        });
        eventually(Duration::from_secs(5), "the second reader is queued", || async {
            h.contenders(&name).await.len() == 3
        })
        .await;
        let cut_at = Instant::now();
        w_proxy.proxy().blackhole();
        let (second_read, granted_at) = tokio::time::timeout(SESSION_TIMEOUT * 3, waiting).await.unwrap().unwrap();
        assert!(
            granted_at - cut_at >= SESSION_TIMEOUT / 2,
            "granted {:?} after the cut, before the writer's session could expire",
            granted_at - cut_at
        );
        assert!(first_read.is_held(), "the two readers hold at once");
        let second_hold = history.acquired("reader 2", &second_read);
        w_proxy.proxy().heal();
        assert!(!queued_writer.is_finished(), "the writer waits again, behind both readers");
        eventually(SESSION_TIMEOUT * 3, "the writer queued again behind the readers", || async {
            h.contenders(&name).await.len() == 3
        })
        .await;
        history.ended(first_hold, Some(&first_read));
        first_read.release().await.unwrap();
        history.ended(second_hold, Some(&second_read));
        let read_token = second_read.token();
        second_read.release().await.unwrap();
        let write = tokio::time::timeout(Duration::from_secs(10), queued_writer).await.unwrap().unwrap().unwrap();
        assert!(write.token() > read_token);
        let write_hold = history.acquired("writer again", &write);
        history.ended(write_hold, Some(&write));
        write.release().await.unwrap();
        history.assert_valid();
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// A write hold downgraded in place, with a reader queued right behind it, a writer behind
/// that, and a reader behind the writer: the downgrade lets the first reader in promptly
/// (woken by the data change of the node it watches), keeps the node (and token) of the
/// hold, and the queued writer waits. The holder's connection is then reset: the hold
/// survives the reconnect within the session, still a read, and the writer still waits
/// until both reads are gone; the reader behind the writer comes last.
#[test]
fn a_downgraded_hold_with_a_writer_queued_behind_survives_a_reconnect() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("downgrade-reconnect");
        let history = Arc::new(History::new());
        let (a, a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let (c, _c_proxy) = h.proxied_client().await;
        let write = a.rw_lock(&name).unwrap().write().await.unwrap();
        let token = write.token();
        let holder_node = h.contenders(&name).await[0].clone();
        let spawn = |client: &lockkit_zk::ZkLockProvider, write: bool| {
            let rw = client.rw_lock(&name).unwrap();
            tokio::spawn(async move {
                let guard = if write { rw.write().await } else { rw.read().await }.unwrap();
                (guard, Instant::now())
            })
        };
        let first_reader = spawn(&b, false);
        eventually(Duration::from_secs(5), "a reader is queued", || async { h.contenders(&name).await.len() == 2 })
            .await;
        let writer = spawn(&c, true);
        eventually(Duration::from_secs(5), "a writer is queued", || async { h.contenders(&name).await.len() == 3 })
            .await;
        let last_reader = spawn(&b, false);
        eventually(Duration::from_secs(5), "a reader behind the writer", || async {
            h.contenders(&name).await.len() == 4
        })
        .await;

        let read = write.read().unwrap();
        let downgraded_at = Instant::now();
        drop(write);
        let (first_read, first_at) = tokio::time::timeout(Duration::from_secs(2), first_reader)
            .await
            .expect("the reader joins promptly")
            .unwrap();
        assert!(first_at - downgraded_at < Duration::from_secs(1), "joined after {:?}", first_at - downgraded_at);
        let read_hold = history.acquired("downgraded", &read);
        let first_hold = history.acquired("reader behind", &first_read);
        assert_eq!(read.token(), token, "the hold keeps its token");
        assert_eq!(h.contenders(&name).await[0], holder_node, "and its node");
        let (data, _) = h.admin().get_data(&format!("{}/{holder_node}", h.lock_znode(&name))).await.unwrap();
        assert!(String::from_utf8_lossy(&data).ends_with(" mode=read"), "{}", String::from_utf8_lossy(&data));
        let info = a.inspect(&name).await.unwrap();
        assert_eq!(info.holders.len(), 2, "{info:?}");
        assert!(info.holders.iter().all(|holder| holder.kind == lockkit_core::HoldKind::Read), "{info:?}");
        assert_eq!(info.waiters, Some(2));

        // The holder's connection is reset; it reconnects within the session.
        let before = read.valid_until().unwrap();
        a_proxy.proxy().cut_all();
        eventually(SESSION_TIMEOUT * 2, "the hold is renewed after the reconnect", || async {
            assert!(read.is_held(), "the downgraded hold survives: {:?}", read.watcher().loss());
            read.valid_until().unwrap() > before
        })
        .await;
        let (data, _) = h.admin().get_data(&format!("{}/{holder_node}", h.lock_znode(&name))).await.unwrap();
        assert!(String::from_utf8_lossy(&data).ends_with(" mode=read"), "still a read");
        assert!(!writer.is_finished() && !last_reader.is_finished(), "the writer and the reader behind it wait");

        history.ended(first_hold, Some(&first_read));
        first_read.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!writer.is_finished(), "the writer waits for the downgraded read too");
        history.ended(read_hold, Some(&read));
        read.release().await.unwrap();
        let (write, _) = tokio::time::timeout(Duration::from_secs(5), writer).await.unwrap().unwrap();
        assert!(write.token() > token);
        let write_hold = history.acquired("writer", &write);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!last_reader.is_finished(), "the reader behind the writer waits for it");
        history.ended(write_hold, Some(&write));
        write.release().await.unwrap();
        let (last, _) = tokio::time::timeout(Duration::from_secs(5), last_reader).await.unwrap().unwrap();
        let last_hold = history.acquired("reader behind the writer", &last);
        history.ended(last_hold, Some(&last));
        last.release().await.unwrap();
        history.assert_valid();
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// Permits deep in a queue: a semaphore of 2 with 18 waiters, so that the last two wait
/// beyond the 16 nodes a waiter watches and watch their predecessor. The waiters in between
/// give up, the next one is granted a permit when a holder goes, and the last one, still
/// behind it, is granted the other permit promptly when the second holder goes, though its
/// predecessor still holds (the predecessor's "held" marker sent it to watch the holders).
#[test]
fn a_deep_permit_waiter_notices_a_holder_go_while_its_predecessor_holds() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("deep-permits");
        let (p, _p_proxy) = h.proxied_client().await;
        let (q, _q_proxy) = h.proxied_client().await;
        let semaphore = |client: &lockkit_zk::ZkLockProvider| client.semaphore(&name, 2).unwrap();
        let first = semaphore(&p).acquire().await.unwrap();
        let second = semaphore(&p).acquire().await.unwrap();
        let mut waiters = Vec::new();
        for index in 0..18 {
            let handle = semaphore(if index % 2 == 0 { &q } else { &p });
            waiters.push(tokio::spawn(async move {
                let guard = handle.acquire().await.unwrap();
                (guard, Instant::now())
            }));
            eventually(Duration::from_secs(5), "the waiter is queued", || async {
                h.contenders(&name).await.len() == index + 3
            })
            .await;
        }
        let last = waiters.pop().unwrap();
        let next = waiters.pop().unwrap();
        for waiter in waiters.drain(..) {
            waiter.abort();
        }
        eventually(Duration::from_secs(5), "the waiters in between are gone", || async {
            h.contenders(&name).await.len() == 4
        })
        .await;
        first.release().await.unwrap();
        let (next, _) = tokio::time::timeout(Duration::from_secs(2), next).await.expect("the next waiter").unwrap();
        assert!(!last.is_finished(), "two permits are held");
        let released_at = Instant::now();
        second.release().await.unwrap();
        let (last, granted_at) =
            tokio::time::timeout(Duration::from_secs(2), last).await.expect("the last waiter").unwrap();
        assert!(
            granted_at - released_at < Duration::from_secs(1),
            "granted {:?} after the release",
            granted_at - released_at
        );
        assert!(next.is_held() && last.is_held() && last.token() > next.token());
        let info = p.inspect(&name).await.unwrap();
        assert_eq!((info.holders.len(), info.waiters), (2, Some(0)), "{info:?}");
        next.release().await.unwrap();
        last.release().await.unwrap();
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// A semaphore of more permits than a waiter watches nodes (20): the first waiter watches the
/// list of children and is granted promptly when any holder goes (here one in the middle);
/// the waiter behind it, woken by its "held" marker, becomes the first waiter and is granted
/// when another holder goes. A handle with another count is refused with `Conflict`, waiting
/// or not, and leaves no node.
#[test]
fn a_semaphore_of_many_permits_wakes_its_first_waiter_on_any_release() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("many-permits");
        let (p, _p_proxy) = h.proxied_client().await;
        let (q, _q_proxy) = h.proxied_client().await;
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(p.semaphore(&name, 20).unwrap().acquire().await.unwrap());
        }
        let spawn = || {
            let handle = q.semaphore(&name, 20).unwrap();
            tokio::spawn(async move {
                let guard = handle.acquire().await.unwrap();
                (guard, Instant::now())
            })
        };
        let first = spawn();
        eventually(Duration::from_secs(5), "a waiter", || async { h.contenders(&name).await.len() == 21 }).await;
        let second = spawn();
        eventually(Duration::from_secs(5), "two waiters", || async { h.contenders(&name).await.len() == 22 }).await;
        for count in [19, 21] {
            let refused = q.semaphore(&name, count).unwrap().acquire_timeout(Duration::from_secs(1)).await;
            assert!(matches!(refused, Err(Error::Conflict { .. })), "another count ({count}): {refused:?}");
        }
        assert_eq!(h.contenders(&name).await.len(), 22, "the refused handles left no node");
        let released_at = Instant::now();
        held.remove(7).release().await.unwrap();
        let (first, at) = tokio::time::timeout(Duration::from_secs(2), first).await.expect("the first waiter").unwrap();
        assert!(at - released_at < Duration::from_secs(1), "granted {:?} after the release", at - released_at);
        assert!(!second.is_finished());
        let released_at = Instant::now();
        held.remove(11).release().await.unwrap();
        let (second, at) =
            tokio::time::timeout(Duration::from_secs(2), second).await.expect("the second waiter").unwrap();
        assert!(at - released_at < Duration::from_secs(1), "granted {:?} after the release", at - released_at);
        assert!(first.is_held() && second.token() > first.token());
        let info = q.inspect(&name).await.unwrap();
        assert_eq!((info.holders.len(), info.waiters), (20, Some(0)));
        drop((first, second, held));
        eventually(Duration::from_secs(5), "the queue is empty", || async { h.contenders(&name).await.is_empty() })
            .await;
    });
}

/// A reader whose grant reaches it late (its link is slow: half a second each way) carries the
/// czxid of its node, created before a reader that was granted, held and released meanwhile
/// on a fast link: its token is below that reader's, and above every write token before it,
/// which is what contract 21 asks (a resource compares a reader with writes only), and what a
/// `FencedResource` checks: the late reader's read is accepted, and a writer after both is
/// above both.
#[test]
fn a_reader_granted_late_is_above_every_earlier_write_not_every_earlier_read() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("late-reader");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, b_proxy) = h.proxied_client().await;
        let (c, _c_proxy) = h.proxied_client().await;
        let resource: lockkit_testkit::FencedResource = lockkit_testkit::FencedResource::new();
        let write = a.rw_lock(&name).unwrap().write().await.unwrap();
        resource.write(write.token(), "w").unwrap();
        let reader = b.rw_lock(&name).unwrap();
        let late = tokio::spawn(async move { reader.read().await.map(|guard| (guard, Instant::now())) });
        eventually(Duration::from_secs(5), "the slow reader is queued", || async {
            h.contenders(&name).await.len() == 2
        })
        .await;
        b_proxy.proxy().set_latency(Duration::from_millis(500));
        write.release().await.unwrap();
        let fast = c.rw_lock(&name).unwrap().read().await.unwrap();
        resource.read(fast.token()).unwrap();
        let fast_token = fast.token();
        fast.release().await.unwrap();
        let fast_done = Instant::now();
        let (slow, granted_at) = tokio::time::timeout(Duration::from_secs(10), late).await.unwrap().unwrap().unwrap();
        assert!(granted_at > fast_done, "the slow reader learned of its grant after the fast one was done");
        assert!(slow.token() < fast_token, "its node came first");
        let write_token = resource.accepted().last().map(|(token, _)| *token).unwrap();
        assert!(slow.token() > write_token, "above every write before it");
        assert!(resource.read(slow.token()).is_ok(), "the resource accepts the read (contract 21)");
        b_proxy.proxy().set_latency(Duration::ZERO);
        slow.release().await.unwrap();
        let write = a.rw_lock(&name).unwrap().write().await.unwrap();
        assert!(write.token() > fast_token && resource.write(write.token(), "w2").is_ok());
        write.release().await.unwrap();
    });
}

// ------------------------------------------------------------------------------ elections

/// The next event of an observer, within `bound`; connection errors (the stream says them
/// while its session is being opened again) are skipped when `past_errors`.
async fn next_event(observer: &mut lockkit_core::Observer, bound: Duration, past_errors: bool) -> LeaderEvent {
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, observer.next()).await {
            Ok(Some(Ok(event))) => return event,
            Ok(Some(Err(error))) if past_errors && error.is_retryable() => {}
            other => panic!("expected an event within {bound:?}, got {other:?}"),
        }
    }
}

/// The next item of a backend's raw stream of changes, within `bound`, connection errors
/// skipped when `past_errors`.
async fn next_raw(events: &mut LeaderEvents, bound: Duration, past_errors: bool) -> LeaderEvent {
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let item = tokio::time::timeout(left, std::future::poll_fn(|cx| events.as_mut().poll_next(cx))).await;
        match item {
            Ok(Some(Ok(event))) => return event,
            Ok(Some(Err(error))) if past_errors && error.is_retryable() => {}
            other => panic!("expected an event within {bound:?}, got {other:?}"),
        }
    }
}

fn term_of(event: &LeaderEvent) -> Option<FencingToken> {
    match event {
        LeaderEvent::Elected(leader) => Some(leader.term),
        _ => None,
    }
}

/// The reply to a campaign's create is lost (the proxy delays replies, and the connection is
/// reset after the candidate's node was created but before its reply got through): the
/// campaign finds its own candidacy again by its attempt id instead of leaving a second one,
/// and leads with it once the leader resigns (a leaked candidacy ahead of its own would block
/// it for ever): its term is that node's czxid, and its identity is published.
#[test]
fn a_campaign_whose_create_reply_is_lost_finds_its_candidacy_again() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("lost-campaign-reply");
        let (a, _a_proxy) = h.proxied_client().await;
        let (c, c_proxy) = h.proxied_client().await;
        let leadership = a.election(&name).unwrap().campaign("a:1").await.unwrap();

        c.zk_client().await.unwrap();
        c_proxy.proxy().set_latency(Duration::from_millis(600));
        let election_c = c.election(&name).unwrap();
        let campaign = tokio::spawn(async move { election_c.campaign("c:1").await });
        eventually(Duration::from_secs(5), "c's candidacy is created", || async {
            h.contenders(&name).await.len() == 2
        })
        .await;
        let c_node = h.contenders(&name).await[1].clone();
        assert!(c_node.contains("-candidate-"), "a candidate's node: {c_node}");
        c_proxy.proxy().cut_all();
        c_proxy.proxy().heal();
        let term = leadership.token();
        leadership.resign().await.unwrap();
        let led = tokio::time::timeout(SESSION_TIMEOUT * 2, campaign).await.expect("c comes to lead").unwrap().unwrap();
        assert!(led.token() > term);
        assert_eq!(h.contenders(&name).await, vec![c_node.clone()], "c's one candidacy, the node whose reply was lost");
        let stat = h.admin().check_stat(&format!("{}/{c_node}", h.lock_znode(&name))).await.unwrap().unwrap();
        assert_eq!(led.token().get(), stat.czxid as u64, "the term is the czxid of the node found again");
        let leader = a.election(&name).unwrap().leader().await.unwrap().expect("c leads");
        assert_eq!((leader.identity_str(), leader.term), (Some("c:1"), led.token()));
        led.resign().await.unwrap();
        assert!(h.contenders(&name).await.is_empty());
    });
}

/// An observer cut off past its session timeout, while the leader resigns and another
/// candidate comes to lead: ZooKeeper cannot replay what passed, so the observer says
/// `Gap` and then the current leader (after any connection errors while its provider opens a
/// new session). Through the backend's raw stream, a cut while the leader stays gives `Gap`
/// and the same leader again.
#[test]
fn an_observer_cut_off_past_the_session_timeout_gets_a_gap_then_the_current_leader() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("observer-expired");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let (o, o_proxy) = h.proxied_client().await;
        let leadership_a = a.election(&name).unwrap().campaign("a").await.unwrap();
        let mut observer = o.election(&name).unwrap().observe().unwrap();
        let first = next_event(&mut observer, Duration::from_secs(5), false).await;
        assert_eq!(term_of(&first), Some(leadership_a.token()), "{first:?}");

        // An ephemeral marker of the observer's session tells when the server expired it.
        let expired = expire_the_session_of(h, &o, o_proxy.proxy(), async {
            leadership_a.resign().await.unwrap();
            b.election(&name).unwrap().campaign("b").await.unwrap()
        })
        .await;
        let leadership_b = expired;
        assert_eq!(next_event(&mut observer, SESSION_TIMEOUT * 3, true).await, LeaderEvent::Gap);
        match next_event(&mut observer, SESSION_TIMEOUT * 3, true).await {
            LeaderEvent::Elected(leader) => {
                assert_eq!((leader.term, leader.identity_str()), (leadership_b.token(), Some("b")));
            }
            other => panic!("expected b after the gap, got {other:?}"),
        }
        drop(observer);

        // The raw stream restates the same leader after a gap.
        let lock = lockkit_core::LockName::new(&name).unwrap();
        let mut raw = o.backend().observe(&lock).unwrap();
        let first = next_raw(&mut raw, Duration::from_secs(5), false).await;
        assert_eq!(term_of(&first), Some(leadership_b.token()), "{first:?}");
        expire_the_session_of(h, &o, o_proxy.proxy(), async {}).await;
        assert_eq!(next_raw(&mut raw, SESSION_TIMEOUT * 3, true).await, LeaderEvent::Gap);
        let again = next_raw(&mut raw, SESSION_TIMEOUT * 3, true).await;
        assert_eq!(term_of(&again), Some(leadership_b.token()), "the same leader, restated: {again:?}");
        leadership_b.resign().await.unwrap();
        assert_eq!(next_raw(&mut raw, Duration::from_secs(5), false).await, LeaderEvent::Vacant);
    });
}

/// Blackholes `client` until the server has expired its session (an ephemeral marker of the
/// session is gone), running `meanwhile` while it is cut off, then heals it.
async fn expire_the_session_of<T>(
    h: &support::ZkHarness,
    client: &lockkit_zk::ZkLockProvider,
    proxy: &lockkit_testkit::proxy::FaultProxy,
    meanwhile: impl std::future::Future<Output = T>,
) -> T {
    let marker = format!("{}/session-marker-{}", h.base(), uuid::Uuid::new_v4().simple());
    let session = client.zk_client().await.unwrap();
    session.create(&marker, b"", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())).await.unwrap();
    proxy.blackhole();
    let out = meanwhile.await;
    eventually(SESSION_TIMEOUT * 3, "the server expires the cut-off session", || async {
        h.admin().check_stat(&marker).await.unwrap().is_none()
    })
    .await;
    proxy.heal();
    out
}

/// A leader blackholed past its session timeout learns of the loss of its leadership before
/// the candidate behind it comes to lead, and its `valid_until` lies before that; an observer
/// on a healthy connection sees the first leader, then the second, in term order.
#[test]
fn a_leader_whose_session_expires_is_told_before_another_candidate_leads() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("leader-expires");
        let (a, a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let (o, _o_proxy) = h.proxied_client().await;
        let mut observer = o.election(&name).unwrap().observe().unwrap();
        assert_eq!(next_event(&mut observer, Duration::from_secs(5), false).await, LeaderEvent::Vacant);
        let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
        let watcher = leadership.watcher();
        let loss = tokio::spawn({
            let watcher = watcher.clone();
            async move { (watcher.lost().await, Instant::now()) }
        });
        let election_b = b.election(&name).unwrap();
        let campaign = tokio::spawn(async move {
            let led = election_b.campaign("b").await.unwrap();
            (led, Instant::now())
        });
        eventually(Duration::from_secs(5), "b is a candidate", || async { h.contenders(&name).await.len() == 2 }).await;
        let cut_at = Instant::now();
        a_proxy.proxy().blackhole();
        let (led, led_at) = tokio::time::timeout(SESSION_TIMEOUT * 3, campaign).await.unwrap().unwrap();
        let (reason, lost_at) = loss.await.unwrap();
        assert!(lost_at <= led_at, "a's loss ({reason}) came {:?} after b led", lost_at - led_at);
        assert!(watcher.valid_until().unwrap() <= led_at);
        assert!(led_at - cut_at >= SESSION_TIMEOUT / 2, "b led only {:?} after the cut", led_at - cut_at);
        assert!(led.token() > leadership.token());
        let mut terms = Vec::new();
        while terms.last() != Some(&led.token()) {
            match next_event(&mut observer, SESSION_TIMEOUT * 2, false).await {
                LeaderEvent::Elected(leader) => terms.push(leader.term),
                LeaderEvent::Vacant => {}
                LeaderEvent::Gap => panic!("no gap for an observer on a healthy connection"),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(terms, vec![leadership.token(), led.token()]);
        a_proxy.proxy().heal();
        assert!(matches!(leadership.resign().await, Err(Error::LockLost { .. })));
        led.resign().await.unwrap();
    });
}

/// Resigning hands leadership to the next candidate within a few round trips: the delete,
/// and the notification of the candidate that watched it (which then leads with no list).
/// The bound is loose for a shared machine; the figures are printed.
#[test]
fn resigning_hands_over_within_a_few_round_trips() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("resign-handover");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let (o, _o_proxy) = h.proxied_client().await;
        let client = b.zk_client().await.unwrap();
        let mut round_trips = Vec::new();
        for _ in 0..20 {
            let sent = Instant::now();
            client.check_stat("/").await.unwrap();
            round_trips.push(sent.elapsed());
        }
        round_trips.sort();
        let round_trip = round_trips[round_trips.len() / 2];
        for round in 0..5 {
            let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
            let mut observer = o.election(&name).unwrap().observe().unwrap();
            next_event(&mut observer, Duration::from_secs(5), false).await;
            let election_b = b.election(&name).unwrap();
            let campaign = tokio::spawn(async move {
                let led = election_b.campaign("b").await.unwrap();
                (led, Instant::now())
            });
            eventually(Duration::from_secs(5), "b is a candidate", || async { h.contenders(&name).await.len() == 2 })
                .await;
            let resigned_at = Instant::now();
            leadership.resign().await.unwrap();
            let (led, led_at) = tokio::time::timeout(Duration::from_secs(5), campaign).await.unwrap().unwrap();
            let handover = led_at - resigned_at;
            let seen = loop {
                if term_of(&next_event(&mut observer, Duration::from_secs(5), false).await) == Some(led.token()) {
                    break resigned_at.elapsed();
                }
            };
            println!("round {round}: handover {handover:?}, observed after {seen:?} (round trip {round_trip:?})");
            assert!(
                handover <= round_trip * 10 + Duration::from_millis(250),
                "b led {handover:?} after the resignation (round trip {round_trip:?})"
            );
            led.resign().await.unwrap();
        }
    });
}

/// A name in use as an election is `Conflict` for a mutex, a read-write lock and a semaphore,
/// and a name in use as a lock is `Conflict` for a campaign, with a message that says to use
/// another name; nothing is left behind, and the name serves again once free.
#[test]
fn an_election_and_a_lock_of_one_name_conflict() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("election-conflict");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
        let conflicts = |outcome: lockkit_core::Result<Option<lockkit_core::LockGuard>>, what: &str| match outcome {
            Err(error @ Error::Conflict { .. }) => {
                assert!(error.to_string().contains("in use as an election"), "{what}: {error}");
            }
            other => panic!("{what}: expected Conflict, got {other:?}"),
        };
        conflicts(b.lock(&name).unwrap().try_acquire().await, "a mutex");
        conflicts(b.lock(&name).unwrap().acquire().await.map(Some), "a waiting mutex");
        conflicts(b.rw_lock(&name).unwrap().try_read().await, "a reader");
        conflicts(b.semaphore(&name, 2).unwrap().try_acquire().await, "a semaphore");
        assert_eq!(h.contenders(&name).await.len(), 1, "the refused nodes are gone");
        leadership.resign().await.unwrap();

        let mutex = a.lock(&name).unwrap().acquire().await.unwrap();
        match b.election(&name).unwrap().campaign("b").await {
            Err(error @ Error::Conflict { .. }) => {
                assert!(error.to_string().contains("give the election another name"), "{error}");
            }
            other => panic!("a campaign on a mutex's name: expected Conflict, got {other:?}"),
        }
        assert_eq!(b.election(&name).unwrap().leader().await.unwrap(), None, "a mutex holder is no leader");
        mutex.release().await.unwrap();
        let leadership = b.election(&name).unwrap().campaign("b").await.unwrap();
        leadership.resign().await.unwrap();
        assert!(h.contenders(&name).await.is_empty());
    });
}

/// An observer runs on lockkit's home runtime, not on the runtime that polls it (on a runtime
/// of its own, the count of live tasks does not change), and opens no session: the provider's
/// session is the one it had. Dropping it ends its task and its watches.
#[test]
fn a_dropped_observer_leaves_no_task_or_session_behind() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("observer-dropped");
        let (o, _o_proxy) = h.proxied_client().await;
        on_a_private_runtime(async move {
            let session = o.zk_client().await.unwrap().session_id();
            let metrics = tokio::runtime::Handle::current().metrics();
            let before = metrics.num_alive_tasks();
            let mut observer = o.election(&name).unwrap().observe().unwrap();
            assert_eq!(next_event(&mut observer, Duration::from_secs(5), false).await, LeaderEvent::Vacant);
            assert_eq!(metrics.num_alive_tasks(), before, "the task that follows the election is not here");
            drop(observer);
            assert_eq!(o.zk_client().await.unwrap().session_id(), session, "no other session");
        });
    });
}

/// An observer first polled on a runtime that then shuts down follows on from the runtime that
/// polls it next, on the same session, with no gap: the next change is the next event.
#[test]
fn an_observer_whose_runtime_shut_down_follows_on_the_next() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("observer-runtime-gone");
        let (a, _a_proxy) = h.proxied_client().await;
        let (o, _o_proxy) = h.proxied_client().await;
        let leadership = a.election(&name).unwrap().campaign("a").await.unwrap();
        let lock = lockkit_core::LockName::new(&name).unwrap();
        let term = leadership.token();
        let (mut raw, first_session) = {
            let o = o.clone();
            on_a_private_runtime(async move {
                let mut raw = o.backend().observe(&lock).unwrap();
                let first = next_raw(&mut raw, Duration::from_secs(5), false).await;
                assert_eq!(term_of(&first), Some(term));
                (raw, o.zk_client().await.unwrap().session_id())
            })
        };
        assert_eq!(o.zk_client().await.unwrap().session_id(), first_session, "the same session");
        leadership.resign().await.unwrap();
        assert_eq!(next_raw(&mut raw, Duration::from_secs(5), false).await, LeaderEvent::Vacant);
    });
}

/// An observer whose connection drops and comes back within the session rides it out: the
/// server replays the watches that fired meanwhile. One change of leader while it was away
/// shows as the new leader, with no gap; two (a candidate led and resigned unseen) show as a
/// gap and the leader now, never as a wrong order.
#[test]
fn an_observer_rides_out_a_reconnect_within_its_session() {
    run(async {
        let h = shared_harness().await;
        let name = fresh_name("observer-reconnect");
        let (a, _a_proxy) = h.proxied_client().await;
        let (b, _b_proxy) = h.proxied_client().await;
        let (c, _c_proxy) = h.proxied_client().await;
        let (o, o_proxy) = h.proxied_client().await;
        let session = o.zk_client().await.unwrap().session_id();
        let leadership_a = a.election(&name).unwrap().campaign("a").await.unwrap();
        let mut observer = o.election(&name).unwrap().observe().unwrap();
        assert_eq!(
            term_of(&next_event(&mut observer, Duration::from_secs(5), false).await),
            Some(leadership_a.token())
        );

        // One change while away.
        o_proxy.proxy().cut_all();
        o_proxy.proxy().blackhole();
        leadership_a.resign().await.unwrap();
        let leadership_b = b.election(&name).unwrap().campaign("b").await.unwrap();
        o_proxy.proxy().heal();
        let next = next_event(&mut observer, SESSION_TIMEOUT, false).await;
        assert_eq!(term_of(&next), Some(leadership_b.token()), "b, with no gap: {next:?}");

        // c queues behind b (the observer reads its candidacy), then while the observer is
        // away b resigns, c leads and resigns, and a leads again.
        let election_c = c.election(&name).unwrap();
        let campaign_c = tokio::spawn(async move { election_c.campaign("c").await.unwrap() });
        eventually(Duration::from_secs(5), "c is a candidate", || async { h.contenders(&name).await.len() == 2 }).await;
        o_proxy.proxy().cut_all();
        o_proxy.proxy().blackhole();
        leadership_b.resign().await.unwrap();
        let leadership_c = tokio::time::timeout(Duration::from_secs(5), campaign_c).await.unwrap().unwrap();
        let term_c = leadership_c.token();
        leadership_c.resign().await.unwrap();
        let leadership_a = a.election(&name).unwrap().campaign("a again").await.unwrap();
        o_proxy.proxy().heal();
        let mut events = Vec::new();
        while term_of(events.last().unwrap_or(&LeaderEvent::Vacant)) != Some(leadership_a.token()) {
            events.push(next_event(&mut observer, SESSION_TIMEOUT, false).await);
        }
        let terms: Vec<_> = events.iter().filter_map(term_of).collect();
        println!("after b, c and a again while away: {events:?}");
        assert!(
            events.first() == Some(&LeaderEvent::Gap) || terms.contains(&term_c),
            "c's term is shown, or a gap says it may have passed: {events:?}"
        );
        assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms in order: {events:?}");
        assert_eq!(o.zk_client().await.unwrap().session_id(), session, "the observer kept its session");
        leadership_a.resign().await.unwrap();
    });
}
