//! Redis-specific faults, each on a real redis-server behind per-client fault proxies,
//! asserting what the holder and the other clients see.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{LockGuard, LockName, LossReason};
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::Persistence;
use lockkit_testkit::{ClientFaults, History};
use support::{
    LEASE, LateReplies, OPERATION, RENEW_EVERY, RedisHarness, eventually, server_with_keyspace_events, test_builder,
    wait_for_subscriber, within,
};

fn unique(case: &str) -> String {
    format!("faults/{case}/{}", uuid::Uuid::new_v4().simple())
}

async fn acquire(provider: &RedisLockProvider, name: &str) -> LockGuard {
    let lock = provider.lock(name).unwrap();
    within(OPERATION, "an uncontended acquisition", lock.acquire()).await.unwrap()
}

/// Waits until the fair queue of lock `name`, as `provider` inspects it, counts `count`
/// waiters, failing after `bound`.
async fn until_queued(provider: &RedisLockProvider, name: &str, count: usize, what: &str, bound: Duration) {
    eventually(bound, what, || {
        let (provider, name) = (provider.clone(), name.to_owned());
        async move { provider.inspect(&name).await.ok().and_then(|info| info.waiters) == Some(count) }
    })
    .await;
}

/// Starts an acquisition of `name` on `provider` that releases at once; it returns when the
/// lock was granted.
fn spawn_timed_acquire(
    provider: &RedisLockProvider,
    name: &str,
) -> tokio::task::JoinHandle<Result<Instant, lockkit_core::Error>> {
    let lock = provider.lock(name).unwrap();
    tokio::spawn(async move {
        let guard = lock.acquire().await?;
        let at = Instant::now();
        guard.release().await?;
        Ok(at)
    })
}

/// A cut connection with the lease still valid: the provider reconnects, the watchdog
/// renews, and the hold survives; nobody else gets the lock meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connection_within_the_lease_keeps_the_hold() {
    let harness = RedisHarness::shared().await;
    let (holder, faults) = harness.client_with(test_builder()).await.unwrap();
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("cut_within_lease");
    let guard = acquire(&holder, &name).await;
    let before = guard.valid_until().unwrap();
    faults.cut_connection().await.unwrap();
    // Two renewals later the deadline has moved past where it stood before the cut.
    eventually(RENEW_EVERY * 2 + OPERATION, "a renewal after the cut", || async {
        guard.valid_until().is_some_and(|until| until > before + RENEW_EVERY)
    })
    .await;
    assert!(guard.is_held(), "the hold survived the cut");
    let attempt = other.lock(&name).unwrap().try_acquire().await.unwrap();
    assert!(attempt.is_none(), "another client got a lock whose holder only lost its connection");
    within(OPERATION, "release", guard.release()).await.unwrap();
}

/// A cut connection that cannot be rebuilt: the holder signals loss before the lease can
/// run out on the server, and the other client acquires only after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connection_without_reconnect_signals_loss_first() {
    let harness = RedisHarness::shared().await;
    let (holder, faults) = harness.client_with(test_builder()).await.unwrap();
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("cut_no_reconnect");
    let history = History::new();
    let guard = acquire(&holder, &name).await;
    let first = history.acquired("holder", &guard);
    faults.0.refuse_new(true);
    faults.cut_connection().await.unwrap();
    let lost = guard.watcher();
    let reason = within(LEASE + OPERATION, "the holder's loss", lost.lost()).await;
    assert_eq!(reason, LossReason::DeadlineExpired);
    history.ended(first, Some(&guard));
    let lock = other.lock(&name).unwrap();
    let taken = within(LEASE * 2 + OPERATION, "another client acquires", lock.acquire()).await.unwrap();
    let second = history.acquired("other", &taken);
    history.ended(second, Some(&taken));
    history.assert_valid();
    faults.0.refuse_new(false);
    let released = guard.release().await;
    assert!(matches!(released, Err(lockkit_core::Error::LockLost { .. })), "releasing a lost hold: {released:?}");
    taken.release().await.unwrap();
}

/// A holder blackholed for longer than the lease: its loss fires before anyone else can
/// acquire, as the history checker confirms, and its delayed renewals cannot revive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_holder_signals_loss_before_another_acquires() {
    let harness = RedisHarness::shared().await;
    let (holder, faults) = harness.client_with(test_builder()).await.unwrap();
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("blackhole");
    let history = History::new();
    let guard = acquire(&holder, &name).await;
    let first = history.acquired("holder", &guard);
    let watcher = guard.watcher();
    let loss = tokio::spawn(async move {
        let reason = watcher.lost().await;
        (reason, Instant::now())
    });
    faults.blackhole().await.unwrap();
    let lock = other.lock(&name).unwrap();
    let taken = within(LEASE * 2 + OPERATION, "another client acquires", lock.acquire()).await.unwrap();
    let taken_at = Instant::now();
    let (reason, lost_at) = within(OPERATION, "the loss signal", loss).await.unwrap();
    assert!(lost_at <= taken_at, "the holder learned of its loss {:?} after the other acquired", lost_at - taken_at);
    assert_eq!(reason, LossReason::DeadlineExpired);
    history.ended(first, Some(&guard));
    let second = history.acquired("other", &taken);
    faults.heal().await.unwrap();
    // The held renewals now reach the server; they find another owner and change nothing.
    tokio::time::sleep(RENEW_EVERY).await;
    assert!(taken.is_held() && !guard.is_held());
    history.ended(second, Some(&taken));
    history.assert_valid();
    assert!(taken.token() > guard.token());
    taken.release().await.unwrap();
}

/// The record deleted behind the holder's back: loss at the next renewal, as `RecordGone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_record_is_a_loss_at_the_next_renewal() {
    let harness = RedisHarness::shared().await;
    let (holder, _faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("deleted");
    let guard = acquire(&holder, &name).await;
    let key = holder.record_key(&LockName::new(&name).unwrap());
    let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut harness.admin().await).await.unwrap();
    assert_eq!(deleted, 1);
    let reason = within(RENEW_EVERY + OPERATION, "the loss signal", guard.lost()).await;
    assert_eq!(reason, LossReason::RecordGone);
    assert!(matches!(guard.release().await, Err(lockkit_core::Error::LockLost { .. })));
}

/// A restart without persistence loses every hold, and each holder is told. Tokens still
/// increase, because a missing fence counter starts from the server clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_signals_loss_and_tokens_still_increase() {
    let harness = RedisHarness::dedicated_with(Persistence::None).await;
    let (holder, _faults) = harness.client_with(test_builder()).await.unwrap();
    let names: Vec<String> = (0..3).map(|i| unique(&format!("restart_none_{i}"))).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(acquire(&holder, name).await);
    }
    harness.server().unwrap().lock().await.restart().await.unwrap();
    for guard in &guards {
        let reason = within(LEASE + OPERATION, "the loss signal", guard.lost()).await;
        assert!(
            matches!(reason, LossReason::RecordGone | LossReason::DeadlineExpired),
            "a hold lost to a restart: {reason}"
        );
    }
    let (fresh, _fresh_faults) = harness.client_with(test_builder()).await.unwrap();
    for (name, old) in names.iter().zip(&guards) {
        let new = acquire(&fresh, name).await;
        assert!(new.token() > old.token(), "token {} after the restart, {} before", new.token(), old.token());
        new.release().await.unwrap();
    }
}

/// A restart with AOF keeps the record and the counter: the hold survives a quick restart
/// and tokens stay strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_aof_keeps_holds_and_tokens_increase() {
    let harness = RedisHarness::dedicated_with(Persistence::Aof).await;
    // A lease long enough to outlast the restart on a loaded machine.
    let builder = || test_builder().lease(Duration::from_secs(6)).renew_every(Duration::from_secs(1));
    let (holder, _faults) = harness.client_with(builder()).await.unwrap();
    let name = unique("restart_aof");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = acquire(&holder, &name).await;
        tokens.push(guard.token());
        guard.release().await.unwrap();
    }
    let guard = acquire(&holder, &name).await;
    tokens.push(guard.token());
    let before = guard.valid_until().unwrap();
    harness.server().unwrap().lock().await.restart().await.unwrap();
    eventually(Duration::from_secs(2) + OPERATION, "a renewal after the restart", || async {
        guard.valid_until().is_some_and(|until| until > before)
    })
    .await;
    assert!(guard.is_held(), "the hold survived the restart: {:?}", guard.watcher().loss());
    guard.release().await.unwrap();
    let (fresh, _fresh_faults) = harness.client_with(builder()).await.unwrap();
    let after = acquire(&fresh, &name).await;
    tokens.push(after.token());
    after.release().await.unwrap();
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "tokens strictly increase: {tokens:?}");
}

/// Killing the pub/sub connection while clients wait does not strand them: they are woken
/// to look again, the subscription is rebuilt, and the release reaches them promptly (far
/// sooner than the holder's lease, which would be the fallback). Fair waiters listen on their
/// provider's wake channel, unfair ones on the lock's channel: both are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_subscriber_connection_does_not_strand_waiters() {
    for fair in [true, false] {
        killed_subscriber_connection_does_not_strand(fair).await;
    }
}

async fn killed_subscriber_connection_does_not_strand(fair: bool) {
    let harness = RedisHarness::shared().await;
    let long = || test_builder().lease(Duration::from_secs(20)).renew_every(Duration::from_secs(5)).fair(fair);
    let (holder, _faults) = harness.client_with(long()).await.unwrap();
    let (waiter, _waiter_faults) = harness.client_with(long()).await.unwrap();
    let name = unique("subscriber_killed");
    let guard = acquire(&holder, &name).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = waiter.lock(&name).unwrap();
            tokio::spawn(async move {
                let guard = lock.acquire().await?;
                let at = Instant::now();
                guard.release().await?;
                Ok::<_, lockkit_core::Error>(at)
            })
        })
        .collect();
    let mut admin = harness.admin().await;
    let record = holder.record_key(&LockName::new(&name).unwrap());
    let (command, pattern) =
        if fair { ("CHANNELS", "lockkit:wake:*".to_owned()) } else { ("NUMSUB", format!("{record}:released")) };
    eventually(OPERATION, "the waiters' subscription", || {
        let mut admin = admin.clone();
        let pattern = pattern.clone();
        async move {
            let reply: redis::Value =
                redis::cmd("PUBSUB").arg(command).arg(&pattern).query_async(&mut admin).await.unwrap();
            match command {
                "CHANNELS" => redis::from_redis_value::<Vec<String>>(reply).is_ok_and(|channels| !channels.is_empty()),
                _ => redis::from_redis_value::<Vec<(String, i64)>>(reply)
                    .is_ok_and(|counts| counts.first().is_some_and(|(_, n)| *n >= 1)),
            }
        }
    })
    .await;
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut admin).await.unwrap();
    assert!(killed >= 1, "a subscriber connection was killed");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let mut grants = Vec::new();
    for task in waiters {
        let at = within(OPERATION * 2, "every waiter acquires in turn", task).await.unwrap().unwrap();
        grants.push(at.saturating_duration_since(released_at));
    }
    grants.sort();
    assert!(
        grants[0] < Duration::from_secs(2),
        "fair {fair}: the first waiter acquired {:?} after the release",
        grants[0]
    );
}

/// Sixteen clients hammer one lock for a few seconds: never two holders, tokens strictly
/// increasing in grant order. A release may find its hold lost (the client starved past its
/// lease on a loaded machine: the history bounds each hold by its deadline, so a hold lost
/// still counts only while it was valid); any other error fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_on_one_lock_never_overlap() {
    let harness = RedisHarness::shared().await;
    let name = unique("stress");
    let history = Arc::new(History::new());
    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    let mut proxies = Vec::new();
    for client in 0..16 {
        let (provider, faults) = harness.client_with(test_builder()).await.unwrap();
        proxies.push(faults);
        let lock = provider.lock(&name).unwrap();
        let history = Arc::clone(&history);
        tasks.push(tokio::spawn(async move {
            let (mut count, mut lost) = (0_u32, 0_u32);
            while Instant::now() < stop_at {
                let guard = match lock.acquire_timeout(Duration::from_secs(10)).await {
                    Ok(guard) => guard,
                    Err(error) => panic!("client {client}: {error}"),
                };
                let index = history.acquired(&format!("client-{client}"), &guard);
                tokio::task::yield_now().await;
                history.ended(index, Some(&guard));
                match guard.release().await {
                    Ok(()) => {}
                    Err(lockkit_core::Error::LockLost { .. }) => lost += 1,
                    Err(error) => panic!("client {client}: the release failed: {error}"),
                }
                count += 1;
            }
            (count, lost)
        }));
    }
    let (mut total, mut lost) = (0, 0);
    for task in tasks {
        let (count, lost_here) = within(Duration::from_secs(30), "a stress client finishes", task).await.unwrap();
        (total, lost) = (total + count, lost + lost_here);
    }
    history.assert_valid();
    let mut holds = history.holds_snapshot();
    holds.sort_by_key(|hold| hold.start);
    assert!(holds.windows(2).all(|pair| pair[0].token < pair[1].token), "tokens increase in grant order");
    assert!(total >= 16, "every client got the lock at least once: {total} grants");
    println!("{total} grants among 16 clients in 4 s, {lost} found lost at their release");
}

/// A reply lost on a slow link: the acquisition is retried with the same owner id, finds its
/// own record, and returns the token that record was granted with. One grant, one token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acquire_reply_is_recovered_by_owner_id() {
    let name = unique("lost_reply");
    // The request arrives, the reply comes back after the response timeout.
    let late = LateReplies::new(&name).await;
    let lock = late.client.lock(&name).unwrap();
    let acquiring = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(10)).await.map(|g| (g, lock)) });
    late.heal_once_recorded("the record exists on the server").await;
    // Far sooner than the lease: the retry finds its own record instead of waiting it out.
    let (guard, _lock) =
        within(LEASE / 2, "the acquisition completes by recovering its record", acquiring).await.unwrap().unwrap();
    let counter = late.counter().await;
    assert_eq!(guard.token().get(), counter, "the recovered grant carries the token the record was granted with");
    guard.release().await.unwrap();
}

/// An acquisition abandoned while its request is stuck in the network leaves no hold
/// behind once the request arrives: the abandon script voids the owner id first or frees
/// the record after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_acquisition_leaves_no_orphan_hold() {
    let harness = RedisHarness::shared().await;
    let (client, faults) = harness.client_with(test_builder()).await.unwrap();
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    client.ping().await.unwrap();
    let name = unique("orphan");
    faults.blackhole().await.unwrap();
    let lock = client.lock(&name).unwrap();
    let outcome = lock.acquire_timeout(Duration::from_millis(300)).await;
    assert!(outcome.is_err(), "no grant while cut off");
    // The stuck acquire (and the abandon after it) now reach the server.
    faults.heal().await.unwrap();
    let lock_other = other.lock(&name).unwrap();
    let taken = within(OPERATION, "another client acquires at once, long before the lease", async {
        loop {
            if let Some(guard) = lock_other.try_acquire().await.unwrap() {
                break guard;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    taken.release().await.unwrap();
}

/// Renewal stops the moment a guard is released or dropped: the watchdog forgets the hold
/// before the release is sent, and the record is gone at once, not after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_stops_when_the_guard_is_released_or_dropped() {
    let harness = RedisHarness::shared().await;
    let (client, _faults) = harness.client_with(test_builder()).await.unwrap();
    let admin = harness.admin().await;
    let released = acquire(&client, &unique("renewal_stops_release")).await;
    let dropped = acquire(&client, &unique("renewal_stops_drop")).await;
    let keys = [released.name(), dropped.name()].map(|name| client.record_key(name));
    assert_eq!(client.renewing(), 2);
    released.release().await.unwrap();
    assert_eq!(client.renewing(), 1, "a released hold is no longer renewed");
    drop(dropped);
    // A dropped guard's release runs on lockkit's home runtime, which forgets the hold first.
    eventually(OPERATION, "a dropped guard's hold is no longer renewed", || async { client.renewing() == 0 }).await;
    eventually(OPERATION, "both records are gone", || {
        let mut admin = admin.clone();
        let keys = keys.clone();
        async move { redis::cmd("EXISTS").arg(&keys).query_async::<i64>(&mut admin).await.unwrap() == 0 }
    })
    .await;
    let renewed = client.renewal_stats().renewed;
    tokio::time::sleep(RENEW_EVERY * 2).await;
    assert_eq!(client.renewal_stats().renewed, renewed, "nothing was renewed after the guards went");
}

/// Fair lock waiters that die at the head of the queue hold the others up for their claim
/// windows only: the next live waiter is granted a fraction of a second after the release,
/// not after the dead waiters' queue entries expire (twice the lease). And it is not granted
/// before the windows close: a head's turn is kept for it while it might still come. The
/// window of a hand-over is the releaser's: a longer one is kept too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiters_at_the_head_of_the_queue_are_skipped_after_their_claim_windows() {
    let default = lockkit_redis::DEFAULT_CLAIM_WINDOW;
    for (dead, releasers_window) in [(1usize, default), (2, default), (1, Duration::from_millis(400))] {
        dead_waiters_are_skipped(dead, releasers_window).await;
    }
}

async fn dead_waiters_are_skipped(dead: usize, releasers_window: Duration) {
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder().claim_window(releasers_window)).await.unwrap();
    let (dying, dying_faults) = harness.client_with(test_builder()).await.unwrap();
    let (next, _next_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("dead_head");
    let guard = acquire(&holder, &name).await;
    let mut dying_tasks = Vec::new();
    for queued in 1..=dead {
        let lock = dying.lock(&name).unwrap();
        dying_tasks.push(tokio::spawn(async move { lock.acquire().await.map(|g| g.token()) }));
        until_queued(&holder, &name, queued, "a dying waiter is queued", OPERATION).await;
    }
    let next_task = spawn_timed_acquire(&next, &name);
    until_queued(&holder, &name, dead + 1, "the live waiter is queued", OPERATION).await;
    // The first waiters' process dies: it sends nothing more, and cleans nothing up.
    dying_faults.0.blackhole();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let granted_at = within(OPERATION, "the live waiter acquires", next_task).await.unwrap().unwrap();
    let after = granted_at.saturating_duration_since(released_at);
    // The first dead head holds the releaser's window; each further one the window of the
    // live waiter whose try handed the lock over to it (the default).
    let kept = releasers_window + lockkit_redis::DEFAULT_CLAIM_WINDOW * (u32::try_from(dead).unwrap() - 1);
    assert!(
        after >= kept * 3 / 4,
        "{dead} dead, window {releasers_window:?}: the dead heads' claim windows were not kept: granted after {after:?}"
    );
    assert!(
        after < kept + Duration::from_millis(1300),
        "{dead} dead, window {releasers_window:?}: granted {after:?} after the release"
    );
    for task in dying_tasks {
        task.abort();
    }
}

/// A release hands a fair lock over to the head of the queue for a claim window only; the
/// head takes it without another round trip and has the watchdog extend it to a full lease
/// soon (once a quarter of its local validity has passed), before that window closes. (When the hand-over's announcement comes too late to be
/// taken that way, the head asks again instead; on a loaded machine that can happen, and the
/// scenario is run again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_over_is_confirmed_to_a_full_lease_before_its_claim_window_closes() {
    const CLAIM_WINDOW: Duration = lockkit_redis::DEFAULT_CLAIM_WINDOW;
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder()).await.unwrap();
    let (waiter, _waiter_faults) = harness.client_with(test_builder()).await.unwrap();
    for round in 1..=3 {
        let name = unique("handed_over");
        let guard = acquire(&holder, &name).await;
        let lock = waiter.lock(&name).unwrap();
        let task = tokio::spawn(async move {
            let guard = lock.acquire().await?;
            Ok::<_, lockkit_core::Error>((Instant::now(), guard.valid_until(), guard))
        });
        until_queued(&holder, &name, 1, "the waiter is queued", OPERATION).await;
        let renewed_before = waiter.renewal_stats().renewed;
        let first_token = guard.token();
        guard.release().await.unwrap();
        let (granted_at, valid_until, handed) = within(OPERATION, "the hand-over", task).await.unwrap().unwrap();
        assert!(handed.token() > first_token, "the hand-over carries a fresh token");
        let valid_until = valid_until.unwrap();
        if valid_until > granted_at + CLAIM_WINDOW {
            eprintln!("round {round}: the hand-over was announced too late and the waiter asked again");
            handed.release().await.unwrap();
            continue;
        }
        // The hold was taken on the claim window alone; the confirmation must come before it
        // closes, or the guard reports the loss.
        eventually(CLAIM_WINDOW, "the hand-over is confirmed", || {
            let until = handed.valid_until();
            async move { until.is_some_and(|until| until > Instant::now() + LEASE / 2) }
        })
        .await;
        assert!(handed.is_held());
        assert_eq!(waiter.renewal_stats().renewed, renewed_before + 1, "one confirmation, before any tick");
        let info = holder.inspect(&name).await.unwrap();
        let left = info.holder().and_then(|holder| holder.lease_left).unwrap();
        assert!(left > CLAIM_WINDOW, "the record was extended on the server too: {left:?} left");
        handed.release().await.unwrap();
        return;
    }
    panic!("in three rounds, no hand-over was taken without asking again");
}

/// A waiter that died long enough ago that its queue entry expired (it stopped refreshing it)
/// is not handed the lock at all: the release skips it and hands the lock over to the next
/// live waiter at once, with no claim window to wait out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_skips_waiters_whose_queue_entries_expired() {
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder()).await.unwrap();
    let (dying, dying_faults) = harness.client_with(test_builder()).await.unwrap();
    let (next, _next_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("expired_entry");
    let guard = acquire(&holder, &name).await;
    let dying_lock = dying.lock(&name).unwrap();
    let dying_task = tokio::spawn(async move { dying_lock.acquire().await.map(|g| g.token()) });
    until_queued(&holder, &name, 1, "the dying waiter is queued", OPERATION).await;
    let next_task = spawn_timed_acquire(&next, &name);
    until_queued(&holder, &name, 2, "the live waiter is queued", OPERATION).await;
    dying_faults.0.blackhole();
    // Entries live twice the lease plus a window without a refresh; the live waiter refreshes
    // its own at least once per lease, so only the dead one's expires.
    until_queued(&holder, &name, 1, "the dead waiter's entry expires", LEASE * 3).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let granted_at = within(OPERATION, "the live waiter acquires", next_task).await.unwrap().unwrap();
    let after = granted_at.saturating_duration_since(released_at);
    assert!(after < Duration::from_millis(150), "granted {after:?} after the release: the dead waiter was not skipped");
    dying_task.abort();
}

/// Channels subscribed on the server whose names match `pattern`.
async fn subscribed(admin: &mut redis::aio::MultiplexedConnection, pattern: &str) -> Vec<String> {
    redis::cmd("PUBSUB").arg("CHANNELS").arg(pattern).query_async(admin).await.unwrap()
}

/// A provider first used on a runtime that then shut down (its command connection made there;
/// its pub/sub connection, with its wake channel subscribed, and its renewal watchdog started
/// from there, on lockkit's home runtime) works on the next runtime as on the first: a
/// contended acquisition there waits, is woken by the pub/sub hand-over (not by the holder's
/// lease running out), holds through renewals, and releases.
#[test]
fn a_provider_first_used_on_a_runtime_that_shut_down_works_on_the_next() {
    // The proxies and the admin connection live on the kit's runtime, which outlives both.
    let kit = lockkit_testkit::runtime();
    let harness = kit.block_on(RedisHarness::shared());
    let prefix = format!("runtimes{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let builder = || test_builder().key_prefix(&prefix);
    let (provider, _faults) = kit.block_on(harness.client_with(builder())).unwrap();
    let (other, _other_faults) = kit.block_on(harness.client_with(builder())).unwrap();
    let mut admin = kit.block_on(harness.admin());
    let wake_channels = format!("{prefix}:wake:*");
    let name = unique("two_runtimes");

    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    first.block_on(async {
        let held = acquire(&other, &name).await;
        let lock = provider.lock(&name).unwrap();
        let waiting = tokio::spawn(async move { lock.acquire().await });
        until_queued(&other, &name, 1, "the waiter is queued on the first runtime", OPERATION).await;
        wait_for_subscriber(&mut admin, &wake_channels).await;
        held.release().await.unwrap();
        let guard = within(OPERATION, "the waiter acquires on the first runtime", waiting).await.unwrap().unwrap();
        let ticks = provider.renewal_stats().ticks;
        eventually(RENEW_EVERY * 2 + OPERATION, "a renewal on the first runtime", || {
            let ticks_now = provider.renewal_stats().ticks;
            async move { ticks_now > ticks }
        })
        .await;
        guard.release().await.unwrap();
    });
    drop(first);

    let second = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    second.block_on(async {
        // The pub/sub connection lives on the home runtime: the first runtime's end left the
        // wake channel subscribed.
        let (mut check, pattern) = (admin.clone(), wake_channels.clone());
        assert!(!subscribed(&mut check, &pattern).await.is_empty(), "the wake channel is still subscribed");
        let held = acquire(&other, &name).await;
        let lock = provider.lock(&name).unwrap();
        let waiting = tokio::spawn(async move {
            let guard = lock.acquire().await?;
            Ok::<_, lockkit_core::Error>((Instant::now(), guard))
        });
        until_queued(&other, &name, 1, "the waiter is queued on the second runtime", OPERATION).await;
        wait_for_subscriber(&mut admin, &wake_channels).await;
        let released_at = Instant::now();
        held.release().await.unwrap();
        let (granted_at, guard) =
            within(OPERATION, "the waiter acquires on the second runtime", waiting).await.unwrap().unwrap();
        let after = granted_at.saturating_duration_since(released_at);
        assert!(after < LEASE / 2, "woken {after:?} after the release: by the lease, not by pub/sub");

        let ticks = provider.renewal_stats().ticks;
        eventually(RENEW_EVERY * 3 + OPERATION, "two renewals on the second runtime", || {
            let ticks_now = provider.renewal_stats().ticks;
            async move { ticks_now >= ticks + 2 }
        })
        .await;
        assert!(guard.is_held(), "the hold was kept: {:?}", guard.watcher().loss());
        assert!(guard.valid_until().is_some_and(|until| until > Instant::now() + LEASE / 2), "renewed to a lease");
        assert!(other.lock(&name).unwrap().try_acquire().await.unwrap().is_none(), "and still excludes others");
        within(OPERATION, "the release on the second runtime", guard.release()).await.unwrap();
        let again = within(OPERATION, "another client takes it", other.lock(&name).unwrap().try_acquire()).await;
        again.unwrap().expect("the lock was freed by the release").release().await.unwrap();
    });
}

/// Settings whose renewal tick (every 10 s) cannot explain a loss signalled within a second.
fn slow_ticks() -> lockkit_redis::RedisLockProviderBuilder {
    test_builder().lease(Duration::from_secs(30)).renew_every(Duration::from_secs(10))
}

/// Waits until the keyspace channel of `key` has a subscriber.
async fn until_record_watched(admin: &redis::aio::MultiplexedConnection, key: &str) {
    let channel = format!("__keyspace@0__:{key}");
    eventually(OPERATION, "the record's keyspace channel is subscribed", || {
        let (mut admin, channel) = (admin.clone(), channel.clone());
        async move {
            let counts: Vec<(String, i64)> =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut admin).await.unwrap();
            counts.first().is_some_and(|(_, n)| *n >= 1)
        }
    })
    .await;
}

/// On a server that publishes keyspace events, a record deleted behind its holder's back is
/// signalled lost at once (the event, confirmed by a read), not at the next renewal; so is
/// a deletion that came before the subscription was made (its confirmation reads the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_record_is_a_loss_at_once_when_the_server_publishes_keyspace_events() {
    let harness = server_with_keyspace_events().await;
    let (holder, _faults) = harness.client_with(slow_ticks()).await.unwrap();
    let admin = harness.admin().await;
    for watched_first in [true, false] {
        let guard = acquire(&holder, &unique("keyspace_deleted")).await;
        let key = holder.record_key(guard.name());
        if watched_first {
            until_record_watched(&admin, &key).await;
        }
        let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut admin.clone()).await.unwrap();
        assert_eq!(deleted, 1);
        let deleted_at = Instant::now();
        let reason = within(Duration::from_secs(1), "the loss signal, long before the 10 s tick", guard.lost()).await;
        assert_eq!(reason, LossReason::RecordGone);
        println!("watched first {watched_first}: lost {:?} after the DEL", deleted_at.elapsed());
        assert!(matches!(guard.release().await, Err(lockkit_core::Error::LockLost { .. })));
    }
    assert_eq!(holder.renewal_stats().ticks, 0, "no renewal tick came into it");
}

/// The keyspace events of a holder's own doings are no loss: its renewals (`expire`), and the
/// `del` of its own release, even when the lock is its own again by the time that event
/// arrives (the read finds the record ours).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_releases_and_renewals_are_not_taken_for_a_loss_by_keyspace_events() {
    let harness = server_with_keyspace_events().await;
    let fast = test_builder();
    let (holder, _faults) = harness.client_with(fast).await.unwrap();
    let admin = harness.admin().await;
    let name = unique("keyspace_own");
    let first = acquire(&holder, &name).await;
    let key = holder.record_key(first.name());
    until_record_watched(&admin, &key).await;
    first.release().await.unwrap();
    let again = acquire(&holder, &name).await;
    // Renewals every 500 ms publish `expire` events on the record's channel meanwhile.
    let ticks = holder.renewal_stats().ticks;
    eventually(RENEW_EVERY * 3 + OPERATION, "two renewals", || {
        let now = holder.renewal_stats().ticks;
        async move { now >= ticks + 2 }
    })
    .await;
    assert!(again.is_held(), "the hold was taken for lost: {:?}", again.watcher().loss());
    again.release().await.unwrap();
}

/// Spawns an acquisition of `kind` on `name` through `provider` that keeps its guard; it
/// returns when granted, with the time of the grant.
fn spawn_hold(
    provider: &RedisLockProvider,
    name: &str,
    kind: lockkit_core::HoldKind,
) -> tokio::task::JoinHandle<Result<(Instant, LockGuard), lockkit_core::Error>> {
    let handle = provider.handle(name, kind).unwrap();
    tokio::spawn(async move {
        let guard = handle.acquire().await?;
        Ok((Instant::now(), guard))
    })
}

/// Waits until `task` is granted, failing after `bound`.
async fn granted(
    task: tokio::task::JoinHandle<Result<(Instant, LockGuard), lockkit_core::Error>>,
    what: &str,
    bound: Duration,
) -> (Instant, LockGuard) {
    within(bound, what, task).await.unwrap().unwrap()
}

/// How many holders of each kind `inspect` lists for `name`: (readers, writers, permits,
/// mutexes).
async fn holders_by_kind(provider: &RedisLockProvider, name: &str) -> (usize, usize, usize, usize) {
    let info = provider.inspect(name).await.unwrap();
    let count = |pick: fn(&lockkit_core::HoldKind) -> bool| info.holders.iter().filter(|h| pick(&h.kind)).count();
    (
        count(|k| *k == lockkit_core::HoldKind::Read),
        count(|k| *k == lockkit_core::HoldKind::Write),
        count(|k| matches!(k, lockkit_core::HoldKind::Permit { .. })),
        count(|k| *k == lockkit_core::HoldKind::Exclusive),
    )
}

/// The release of a writer hands the read-write lock over to the whole run of readers at the
/// head of the queue at once (three readers, each on a provider of its own: each with a token
/// of its own, above the writer's, and told on its own provider's wake channel, taking its
/// share within the claim window and having it confirmed to a full lease), and to nobody
/// past the first queued writer: the writer and the reader behind it keep waiting, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_a_read_write_lock_over_to_the_run_of_readers_at_the_head() {
    use lockkit_core::HoldKind::{Read, Write};
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder()).await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(harness.client_with(test_builder()).await.unwrap());
    }
    let (late, _late_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("reader_run");
    let rw = holder.rw_lock(&name).unwrap();
    let write = within(OPERATION, "the first writer", rw.write()).await.unwrap();
    let mut reader_tasks = Vec::new();
    for (queued, (reader, _)) in readers.iter().enumerate() {
        reader_tasks.push(spawn_hold(reader, &name, Read));
        until_queued(&holder, &name, queued + 1, "a reader is queued", OPERATION).await;
    }
    let writer_task = spawn_hold(&late, &name, Write);
    until_queued(&holder, &name, 4, "the second writer is queued", OPERATION).await;
    let late_reader_task = spawn_hold(&late, &name, Read);
    until_queued(&holder, &name, 5, "a reader behind the writer is queued", OPERATION).await;
    let confirmed_before: Vec<u64> = readers.iter().map(|(r, _)| r.renewal_stats().renewed).collect();

    let released_at = Instant::now();
    let first_token = write.token();
    write.release().await.unwrap();
    let mut guards = Vec::new();
    for task in reader_tasks {
        let (at, guard) = granted(task, "a reader of the run", OPERATION).await;
        assert!(at.saturating_duration_since(released_at) < LEASE / 4, "woken by the hand-over, not by polling");
        assert!(guard.token() > first_token);
        guards.push(guard);
    }
    let mut tokens: Vec<u64> = guards.iter().map(|g| g.token().get()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "each reader of the run has a token of its own");
    // Each share was handed over for a claim window only, and confirmed at once by its
    // provider's watchdog (outside the ticks); none is lost.
    for ((reader, _), before) in readers.iter().zip(&confirmed_before) {
        eventually(OPERATION, "the share is confirmed", || {
            let renewed = reader.renewal_stats().renewed;
            async move { renewed > *before }
        })
        .await;
    }
    for guard in &guards {
        eventually(OPERATION, "the share's deadline is a full lease", || {
            let until = guard.valid_until();
            async move { until.is_some_and(|until| until > Instant::now() + LEASE / 2) }
        })
        .await;
    }
    assert_eq!(holders_by_kind(&holder, &name).await, (3, 0, 0, 0), "the three readers hold");
    assert_eq!(holder.inspect(&name).await.unwrap().waiters, Some(2), "the writer and the late reader wait");
    assert!(!writer_task.is_finished() && !late_reader_task.is_finished());

    // The readers go: the queued writer is next, and the reader behind it only after it.
    for guard in guards {
        guard.release().await.unwrap();
    }
    let (_, writer) = granted(writer_task, "the queued writer", OPERATION).await;
    assert!(writer.token().get() > *tokens.last().unwrap());
    assert!(!late_reader_task.is_finished(), "the late reader waits behind the writer");
    let writer_token = writer.token();
    writer.release().await.unwrap();
    let (_, late_reader) = granted(late_reader_task, "the late reader", OPERATION).await;
    assert!(late_reader.token() > writer_token);
    late_reader.release().await.unwrap();
    assert!(holder.inspect(&name).await.unwrap().is_idle(), "no trace is left");
}

/// A reader whose process dies keeps its share until its lease runs out on the server, and
/// not longer: a live reader's release does not let the queued writer in, the dead reader's
/// expiry does (the writer's wait is bounded by the readers' expiry), and nothing is left of
/// the dead reader's entry or token afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_readers_share_expires_with_its_lease_and_lets_the_queued_writer_in() {
    use lockkit_core::HoldKind::Write;
    let harness = RedisHarness::shared().await;
    let (dying, dying_faults) = harness.client_with(test_builder()).await.unwrap();
    let (live, _live_faults) = harness.client_with(test_builder()).await.unwrap();
    let (writer, _writer_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("dead_reader");
    let dead_share = within(OPERATION, "the doomed reader", dying.rw_lock(&name).unwrap().read()).await.unwrap();
    let live_share = within(OPERATION, "the live reader", live.rw_lock(&name).unwrap().read()).await.unwrap();
    dying_faults.0.blackhole();
    let died_at = Instant::now();
    let writer_task = spawn_hold(&writer, &name, Write);
    until_queued(&live, &name, 1, "the writer is queued", OPERATION).await;
    live_share.release().await.unwrap();
    // The dead reader's share lives on: the writer waits.
    tokio::time::sleep(LEASE / 2).await;
    assert!(!writer_task.is_finished(), "the writer got in {:?} after the reader died", died_at.elapsed());
    let (granted_at, guard) = granted(writer_task, "the writer after the dead reader's lease", LEASE * 2).await;
    let after = granted_at.saturating_duration_since(died_at);
    assert!(after >= LEASE - RENEW_EVERY, "the share came back {after:?} after the reader died, before its lease");
    assert!(after < LEASE + Duration::from_millis(1500), "the writer waited {after:?}: not woken by the expiry");
    assert!(guard.token() > dead_share.token());
    assert_eq!(holders_by_kind(&live, &name).await, (0, 1, 0, 0), "only the writer holds");
    let tokens_key = format!("{}:tokens", live.record_key(&LockName::new(&name).unwrap()));
    let left: i64 = redis::cmd("EXISTS").arg(&tokens_key).query_async(&mut harness.admin().await).await.unwrap();
    assert_eq!(left, 0, "the dead reader's token was purged with its entry");
    guard.release().await.unwrap();
    drop(dead_share);
}

/// A permit whose grant reply is lost (it comes back after the response timeout) is found
/// again by its owner id: the retry returns the token the permit was granted with, although
/// other permits were granted since, and no second permit is taken for the same acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_is_found_again_with_its_own_token() {
    let harness = RedisHarness::shared().await;
    let (client, faults) = harness.client_with(test_builder()).await.unwrap();
    let (other, _other_faults) = harness.client_with(test_builder()).await.unwrap();
    client.ping().await.unwrap();
    let name = unique("lost_permit_reply");
    let record = client.record_key(&LockName::new(&name).unwrap());
    let (permits_key, tokens_key) = (format!("{record}:permits"), format!("{record}:tokens"));
    let first = within(OPERATION, "a first permit", other.semaphore(&name, 3).unwrap().acquire()).await.unwrap();
    // The request arrives, the reply comes back after the response timeout.
    faults.0.set_latency(Duration::from_millis(300));
    let semaphore = client.semaphore(&name, 3).unwrap();
    let acquiring = tokio::spawn(async move { semaphore.acquire_timeout(Duration::from_secs(10)).await });
    let mut admin = harness.admin().await;
    eventually(OPERATION, "the permit is granted on the server", || {
        let (mut admin, key) = (admin.clone(), permits_key.clone());
        async move { redis::cmd("ZCARD").arg(&key).query_async::<i64>(&mut admin).await.unwrap() == 2 }
    })
    .await;
    // Another permit is granted meanwhile: the fence counter moves past the lost grant's token.
    let third = within(OPERATION, "another permit", other.semaphore(&name, 3).unwrap().acquire()).await.unwrap();
    faults.0.set_latency(Duration::ZERO);
    let guard = within(LEASE / 2, "the acquisition finds its permit again", acquiring).await.unwrap().unwrap();
    let owners: Vec<String> =
        redis::cmd("ZRANGE").arg(&permits_key).arg(0).arg(-1).query_async(&mut admin).await.unwrap();
    assert_eq!(owners.len(), 3, "one permit per acquisition: {owners:?}");
    let mut stored = Vec::new();
    for owner in &owners {
        let token: u64 = redis::cmd("HGET").arg(&tokens_key).arg(owner).query_async(&mut admin).await.unwrap();
        stored.push(token);
    }
    assert!(stored.contains(&guard.token().get()), "the token the permit was granted with: {stored:?}");
    assert!(guard.token() > first.token() && guard.token() < third.token(), "granted between the two others");
    for permit in [guard, first, third] {
        permit.release().await.unwrap();
    }
    assert!(client.inspect(&name).await.unwrap().is_idle(), "no trace is left");
}

/// A write hold turned into a read hold while a reader, a writer and another reader are
/// queued (in that order): the downgrade keeps the token and lets the first reader join at
/// once, the queued writer stays out for as long as a read lives (not slipping in between the
/// write and the read), and the reader behind the writer does not pass it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_lets_the_readers_at_the_head_join_and_keeps_the_queued_writer_out() {
    use lockkit_core::HoldKind::{Read, Write};
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder()).await.unwrap();
    let (waiters, _waiter_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("downgrade_queue");
    let write = within(OPERATION, "the write", holder.rw_lock(&name).unwrap().write()).await.unwrap();
    let token = write.token();
    let first_reader = spawn_hold(&waiters, &name, Read);
    until_queued(&holder, &name, 1, "the first reader is queued", OPERATION).await;
    let writer = spawn_hold(&waiters, &name, Write);
    until_queued(&holder, &name, 2, "the writer is queued", OPERATION).await;
    let late_reader = spawn_hold(&waiters, &name, Read);
    until_queued(&holder, &name, 3, "the late reader is queued", OPERATION).await;

    let read = write.read().unwrap();
    write.release().await.unwrap();
    let (_, first) = granted(first_reader, "the first reader joins the downgraded hold", OPERATION).await;
    assert!(read.is_held() && read.token() == token, "the read keeps the hold and its token");
    assert!(first.token() > token);
    assert_eq!(holders_by_kind(&holder, &name).await, (2, 0, 0, 0), "two readers, the downgraded one among them");
    let info = holder.inspect(&name).await.unwrap();
    assert!(info.holders.iter().any(|h| h.token == token), "the downgraded hold keeps its token in the store");
    assert_eq!(info.waiters, Some(2), "the writer and the late reader wait");
    // Renewals of the downgraded hold go on as a read hold.
    let renewed = holder.renewal_stats().renewed;
    eventually(RENEW_EVERY * 2 + OPERATION, "a renewal of the read hold", || {
        let now = holder.renewal_stats().renewed;
        async move { now > renewed }
    })
    .await;
    assert!(read.is_held(), "the downgraded hold is renewed: {:?}", read.watcher().loss());
    assert!(!writer.is_finished() && !late_reader.is_finished());
    first.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer slipped in while the downgraded read lives");
    read.release().await.unwrap();
    let (_, writer) = granted(writer, "the writer after the last read", OPERATION).await;
    assert!(!late_reader.is_finished(), "the late reader waits behind the writer");
    let writer_token = writer.token();
    writer.release().await.unwrap();
    let (_, late) = granted(late_reader, "the late reader after the writer", OPERATION).await;
    assert!(late.token() > writer_token);
    late.release().await.unwrap();
}

/// A mutex and a read-write lock of one name exclude each other as a writer excludes, both
/// ways and through the queue (the mutex's release hands over to the readers queued behind
/// it); a semaphore of that name is a conflict while either is in use, and a semaphore of
/// another count a conflict while the semaphore is. No script meets a key of another type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_of_one_name_exclude_each_other_or_conflict() {
    use lockkit_core::HoldKind::Read;
    let harness = RedisHarness::shared().await;
    let (a, _a_faults) = harness.client_with(test_builder()).await.unwrap();
    let (b, _b_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("kinds");
    let mutex = acquire(&a, &name).await;
    assert!(b.rw_lock(&name).unwrap().try_read().await.unwrap().is_none(), "a mutex excludes readers");
    assert!(b.rw_lock(&name).unwrap().try_write().await.unwrap().is_none(), "and writers");
    let conflict = b.semaphore(&name, 2).unwrap().try_acquire().await;
    assert!(matches!(conflict, Err(lockkit_core::Error::Conflict { .. })), "{conflict:?}");
    let readers: Vec<_> = (0..2).map(|_| spawn_hold(&b, &name, Read)).collect();
    until_queued(&a, &name, 2, "two readers queue behind the mutex", OPERATION).await;
    let mutex_token = mutex.token();
    mutex.release().await.unwrap();
    for task in readers {
        let (_, read) = granted(task, "a reader after the mutex", OPERATION).await;
        assert!(read.token() > mutex_token);
        assert!(a.lock(&name).unwrap().try_acquire().await.unwrap().is_none(), "readers exclude a mutex");
        read.release().await.unwrap();
    }
    let permit =
        within(OPERATION, "a permit of the free name", b.semaphore(&name, 2).unwrap().acquire()).await.unwrap();
    for outcome in [
        a.lock(&name).unwrap().try_acquire().await.map(|g| g.is_some()),
        a.rw_lock(&name).unwrap().try_read().await.map(|g| g.is_some()),
        a.semaphore(&name, 3).unwrap().try_acquire().await.map(|g| g.is_some()),
    ] {
        match outcome {
            Err(lockkit_core::Error::Conflict { what, .. }) => assert!(what.contains("name") || what.contains("count")),
            other => panic!("a conflict while the semaphore is in use: {other:?}"),
        }
    }
    let permit_token = permit.token();
    permit.release().await.unwrap();
    // Idle again: any kind may take the name, with tokens still increasing. A read held for
    // several leases (its renewals keep the marker of the other kinds alive) still keeps a
    // mutex out, whose script takes its short path only while the marker is absent.
    let read = within(OPERATION, "a read of the idle name", a.rw_lock(&name).unwrap().read()).await.unwrap();
    assert!(read.token() > permit_token);
    tokio::time::sleep(LEASE * 2).await;
    assert!(read.is_held());
    assert!(b.lock(&name).unwrap().try_acquire().await.unwrap().is_none(), "a long read still excludes a mutex");
    read.release().await.unwrap();
    assert!(a.inspect(&name).await.unwrap().is_idle());
    let marker = format!("{}:kinds", a.record_key(&LockName::new(&name).unwrap()));
    let left: i64 = redis::cmd("EXISTS").arg(&marker).query_async(&mut harness.admin().await).await.unwrap();
    assert_eq!(left, 0, "the marker of the other kinds goes with the last of them");
    acquire(&b, &name).await.release().await.unwrap();
}

/// Without a queue (`fair(false)`), read-write locks and semaphores still keep their modes:
/// readers share, a writer excludes them, a semaphore admits its count, and a waiter of each
/// kind is woken by the release that lets it in (pub/sub on the name's channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfair_providers_keep_the_modes_and_wake_on_release() {
    use lockkit_core::HoldKind::{Permit, Read, Write};
    let harness = RedisHarness::shared().await;
    let (a, _a_faults) = harness.client_with(test_builder().fair(false)).await.unwrap();
    let (b, _b_faults) = harness.client_with(test_builder().fair(false)).await.unwrap();
    let name = unique("unfair_rw");
    let reads = [
        within(OPERATION, "a read", a.rw_lock(&name).unwrap().read()).await.unwrap(),
        within(OPERATION, "another read", b.rw_lock(&name).unwrap().read()).await.unwrap(),
    ];
    let writer = spawn_hold(&b, &name, Write);
    let mut admin = harness.admin().await;
    let channel = format!("{}:released", a.record_key(&LockName::new(&name).unwrap()));
    wait_for_subscriber(&mut admin, &channel).await;
    let [first, second] = reads;
    first.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "a writer got in beside a reader");
    let released_at = Instant::now();
    second.release().await.unwrap();
    let (at, write) = granted(writer, "the writer after the readers", OPERATION).await;
    assert!(at.saturating_duration_since(released_at) < LEASE / 4, "woken by the release");
    let reader = spawn_hold(&a, &name, Read);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reader.is_finished(), "a reader got in beside the writer");
    write.release().await.unwrap();
    granted(reader, "the reader after the writer", OPERATION).await.1.release().await.unwrap();

    let name = unique("unfair_semaphore");
    let two = lockkit_core::HoldKind::Permit { permits: std::num::NonZeroU32::new(2).unwrap() };
    let held = [
        granted(spawn_hold(&a, &name, two.clone()), "a permit", OPERATION).await.1,
        granted(spawn_hold(&b, &name, two.clone()), "another permit", OPERATION).await.1,
    ];
    let third = spawn_hold(&b, &name, two);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!third.is_finished(), "a third permit of two");
    let [one, other] = held;
    one.release().await.unwrap();
    let (_, got) = granted(third, "the third after a permit came back", OPERATION).await;
    assert!(matches!(got.kind(), Permit { .. }) && got.token() > other.token());
    for permit in [got, other] {
        permit.release().await.unwrap();
    }
}

/// On a server that publishes keyspace events, the readers' set or the permit holders' set
/// deleted behind the holders' backs is signalled lost at once (not at the next renewal),
/// while other holders joining and leaving the set, and the holder's own renewals, are not
/// taken for a loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_learn_of_a_deleted_set_at_once_from_keyspace_events() {
    let harness = server_with_keyspace_events().await;
    let (holder, _faults) = harness.client_with(slow_ticks()).await.unwrap();
    let (others, _other_faults) = harness.client_with(slow_ticks()).await.unwrap();
    let admin = harness.admin().await;
    for (suffix, semaphore) in [("readers", false), ("permits", true)] {
        let name = unique("keyspace_shared");
        let take = |provider: &RedisLockProvider| {
            let provider = provider.clone();
            let name = name.clone();
            async move {
                if semaphore {
                    provider.semaphore(&name, 5).unwrap().acquire().await.unwrap()
                } else {
                    provider.rw_lock(&name).unwrap().read().await.unwrap()
                }
            }
        };
        let guard = within(OPERATION, "a shared hold", take(&holder)).await;
        let set = format!("{}:{suffix}", holder.record_key(guard.name()));
        until_record_watched(&admin, &set).await;
        // Others come and go: their `zadd` and `zrem` leave this hold alone.
        for _ in 0..3 {
            let other = within(OPERATION, "another holder", take(&others)).await;
            other.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            guard.is_held(),
            "{suffix}: the comings and goings of others are no loss: {:?}",
            guard.watcher().loss()
        );
        let deleted: i64 = redis::cmd("DEL").arg(&set).query_async(&mut admin.clone()).await.unwrap();
        assert_eq!(deleted, 1);
        let reason = within(Duration::from_secs(1), "the loss signal, long before the 10 s tick", guard.lost()).await;
        assert_eq!(reason, LossReason::RecordGone, "{suffix}");
        assert!(matches!(guard.release().await, Err(lockkit_core::Error::LockLost { .. })));
    }
    assert_eq!(holder.renewal_stats().ticks, 0, "no renewal tick came into it");
}

/// A writer at the head of the queue that gives up (its timed acquisition ends) leaves the
/// queue through the abandon script, which hands the readers queued behind it their share
/// beside the readers that hold: they are granted at once, not when the holders go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_writer_that_gives_up_lets_the_readers_behind_it_join() {
    use lockkit_core::HoldKind::Read;
    let harness = RedisHarness::shared().await;
    let (holder, _holder_faults) = harness.client_with(test_builder()).await.unwrap();
    let (writer, _writer_faults) = harness.client_with(test_builder()).await.unwrap();
    let (readers, _reader_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("writer_gives_up");
    let read = within(OPERATION, "the first reader", holder.rw_lock(&name).unwrap().read()).await.unwrap();
    let rw = writer.rw_lock(&name).unwrap();
    let giving_up = tokio::spawn(async move { rw.write_timeout(Duration::from_millis(600)).await });
    until_queued(&holder, &name, 1, "the writer is queued", OPERATION).await;
    let behind: Vec<_> = (0..2).map(|_| spawn_hold(&readers, &name, Read)).collect();
    until_queued(&holder, &name, 3, "two readers queue behind the writer", OPERATION).await;
    let outcome = within(OPERATION, "the writer's timeout", giving_up).await.unwrap();
    assert!(matches!(outcome, Err(lockkit_core::Error::Timeout { .. })), "{outcome:?}");
    let gave_up_at = Instant::now();
    for task in behind {
        let (at, guard) = granted(task, "a reader behind the writer", OPERATION).await;
        assert!(at.saturating_duration_since(gave_up_at) < LEASE / 4, "granted by the abandon's hand-over");
        assert!(guard.token() > read.token());
        guard.release().await.unwrap();
    }
    assert!(read.is_held());
    read.release().await.unwrap();
    assert!(holder.inspect(&name).await.unwrap().is_idle(), "no trace is left");
}
