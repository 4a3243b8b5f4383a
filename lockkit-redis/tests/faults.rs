//! Redis-specific faults, each on a real redis-server behind per-client fault proxies,
//! asserting what the holder and the other clients see.

#![allow(clippy::unwrap_used)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{LockGuard, LockName, LossReason};
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::Persistence;
use lockkit_testkit::{ClientFaults, History};
use support::{LEASE, RENEW_EVERY, RedisHarness, test_builder, wait_for_subscriber};

/// A bound for things that take a few round trips on a loaded machine.
const OPERATION: Duration = Duration::from_secs(3);

async fn within<T>(bound: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not happen within {bound:?}"),
    }
}

/// Polls `condition` every 10 ms until it holds, failing after `bound`.
async fn eventually<F, Fut>(bound: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what} did not happen within {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

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
    let harness = RedisHarness::dedicated(Persistence::None).await;
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
    let harness = RedisHarness::dedicated(Persistence::Aof).await;
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
/// increasing in grant order.
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
            let mut count = 0_u32;
            while Instant::now() < stop_at {
                let guard = match lock.acquire_timeout(Duration::from_secs(10)).await {
                    Ok(guard) => guard,
                    Err(error) => panic!("client {client}: {error}"),
                };
                let index = history.acquired(&format!("client-{client}"), &guard);
                tokio::task::yield_now().await;
                history.ended(index, Some(&guard));
                guard.release().await.unwrap();
                count += 1;
            }
            count
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += within(Duration::from_secs(30), "a stress client finishes", task).await.unwrap();
    }
    history.assert_valid();
    let mut holds = history.holds_snapshot();
    holds.sort_by_key(|hold| hold.start);
    assert!(holds.windows(2).all(|pair| pair[0].token < pair[1].token), "tokens increase in grant order");
    assert!(total >= 16, "every client got the lock at least once: {total} grants");
    println!("{total} grants among 16 clients in 4 s");
}

/// A reply lost on a slow link: the acquisition is retried with the same owner id, finds its
/// own record, and returns the token that record was granted with. One grant, one token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acquire_reply_is_recovered_by_owner_id() {
    let harness = RedisHarness::shared().await;
    let (client, faults) = harness.client_with(test_builder()).await.unwrap();
    client.ping().await.unwrap();
    let name = unique("lost_reply");
    let key = client.record_key(&LockName::new(&name).unwrap());
    // The request arrives, the reply comes back after the response timeout.
    faults.0.set_latency(Duration::from_millis(300));
    let lock = client.lock(&name).unwrap();
    let acquiring = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(10)).await.map(|g| (g, lock)) });
    let mut admin = harness.admin().await;
    eventually(OPERATION, "the record exists on the server", || {
        let mut admin = admin.clone();
        let key = key.clone();
        async move { redis::cmd("EXISTS").arg(&key).query_async::<i64>(&mut admin).await.unwrap() == 1 }
    })
    .await;
    faults.0.set_latency(Duration::ZERO);
    // Far sooner than the lease: the retry finds its own record instead of waiting it out.
    let (guard, _lock) =
        within(LEASE / 2, "the acquisition completes by recovering its record", acquiring).await.unwrap().unwrap();
    let counter: u64 = redis::cmd("GET").arg(format!("{key}:fence")).query_async(&mut admin).await.unwrap();
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
    assert_eq!(client.renewing(), 0, "a dropped guard's hold is no longer renewed");
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
/// head takes it without another round trip and has the watchdog extend it to a full lease at
/// once, before that window closes. (When the hand-over's announcement comes too late to be
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

/// A provider first used on a runtime that then shut down (its command connection, its
/// pub/sub connection with its wake channel subscribed, and its renewal watchdog all made
/// there) works on the next runtime as on the first: a contended acquisition there waits, is
/// woken by the pub/sub hand-over (not by the holder's lease running out), holds through
/// renewals of a watchdog running there, and releases.
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
        // The first runtime took its connections with it: the server sees the wake channel
        // unsubscribed.
        eventually(OPERATION, "the first runtime's subscriptions are gone", || {
            let (mut admin, pattern) = (admin.clone(), wake_channels.clone());
            async move { subscribed(&mut admin, &pattern).await.is_empty() }
        })
        .await;
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

/// A dedicated server that publishes keyspace events for every class of key event.
async fn server_with_keyspace_events() -> RedisHarness {
    let harness = RedisHarness::dedicated(Persistence::None).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KA")
        .query_async(&mut harness.admin().await)
        .await
        .unwrap();
    harness
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
