//! Elections on a real redis-server, under Redis-specific faults: a campaign whose reply is
//! lost, a leader record deleted by an operator, an observer cut off while terms pass, a
//! leader whose renewals stall.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use lockkit_core::{FencingToken, HoldKind, LeaderEvent, LockGuard, LockName, LockProvider, LossReason, Observer};
use lockkit_redis::RedisLockProvider;
use lockkit_testkit::fixture::Persistence;
use lockkit_testkit::wait::next_leader_event;
use support::{
    LEASE, LateReplies, OPERATION, RedisHarness, eventually, server_with_keyspace_events, test_builder, within,
};

fn unique(case: &str) -> String {
    format!("election/{case}/{}", uuid::Uuid::new_v4().simple())
}

fn term_of(event: &LeaderEvent) -> Option<FencingToken> {
    match event {
        LeaderEvent::Elected(leader) => Some(leader.term),
        _ => None,
    }
}

/// `leader` campaigns in election `name` as `identity`, and an observer on `watcher` sees its
/// term first: the leadership and the observer.
async fn lead_and_observe(
    leader: &LockProvider,
    watcher: &LockProvider,
    name: &str,
    identity: &str,
) -> (LockGuard, Observer) {
    let leadership =
        within(OPERATION, "the campaign", leader.election(name).unwrap().campaign(identity)).await.unwrap();
    let mut observer = watcher.election(name).unwrap().observe().unwrap();
    let first = next_leader_event(&mut observer, OPERATION, "the current leader").await;
    assert_eq!(term_of(&first), Some(leadership.token()));
    (leadership, observer)
}

fn journal_key(provider: &RedisLockProvider, name: &str) -> String {
    format!("{}:terms", provider.record_key(&LockName::new(name).unwrap()))
}

/// A campaign whose reply comes back after the response timeout is retried with the same
/// owner id and finds its own candidacy: one leadership, the term it was granted with, one
/// term in the journal, nothing left once it resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_reply_was_lost_finds_its_candidacy() {
    let name = unique("lost_reply");
    let late = LateReplies::new(&name).await;
    let election = late.client.election(&name).unwrap();
    let campaigning = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign_timeout("me:1", Duration::from_secs(10)).await })
    };
    late.heal_once_recorded("the leader's record exists on the server").await;
    let leadership = within(LEASE / 2, "the campaign finds its candidacy", campaigning).await.unwrap().unwrap();
    assert_eq!(leadership.token().get(), late.counter().await, "the term the candidacy was granted with");
    let info = late.client.inspect(&name).await.unwrap();
    assert_eq!(info.holders.len(), 1, "one candidacy: {info:?}");
    assert!(matches!(&info.holders[0].kind, HoldKind::Candidate { identity } if &identity[..] == b"me:1"));
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.term, leader.identity_str()), (leadership.token(), Some("me:1")));
    let mut admin = late.admin.clone();
    let entries: i64 = redis::cmd("XLEN").arg(journal_key(&late.client, &name)).query_async(&mut admin).await.unwrap();
    assert_eq!(entries, 1, "one term in the journal");
    leadership.resign().await.unwrap();
    assert!(late.client.inspect(&name).await.unwrap().is_idle(), "no trace is left");
}

/// An operator deletes the leader's record: the leader learns of it at once (keyspace events)
/// and observers see the vacancy of its term, then the next candidate's term, which comes
/// without waiting for the deleted record's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_leader_record_is_learnt_promptly_and_observers_see_vacant_then_the_next_term() {
    let harness = server_with_keyspace_events().await;
    let slow = || test_builder().lease(Duration::from_secs(30)).renew_every(Duration::from_secs(10));
    let (a, _fa) = harness.client_with(slow()).await.unwrap();
    let (b, _fb) = harness.client_with(slow()).await.unwrap();
    let (c, _fc) = harness.client_with(slow()).await.unwrap();
    let name = unique("deleted");
    let (leadership, mut observer) = lead_and_observe(&a, &c, &name, "a").await;
    let election_b = b.election(&name).unwrap();
    let campaign_b = tokio::spawn(async move { election_b.campaign("b").await });
    eventually(OPERATION, "b queues", || {
        let (a, name) = (a.clone(), name.clone());
        async move { a.inspect(&name).await.unwrap().waiters == Some(1) }
    })
    .await;
    let key = a.record_key(&LockName::new(&name).unwrap());
    let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut harness.admin().await).await.unwrap();
    assert_eq!(deleted, 1);
    let deleted_at = Instant::now();
    let reason = within(Duration::from_secs(2), "the leader's loss signal", leadership.lost()).await;
    // Gone, or the next candidate's already: an observer's read may hand over first.
    assert!(matches!(reason, LossReason::RecordGone | LossReason::OwnedByAnother), "{reason:?}");
    let vacant = next_leader_event(&mut observer, Duration::from_secs(2), "the vacancy").await;
    assert_eq!(vacant, LeaderEvent::Vacant);
    let next = next_leader_event(&mut observer, Duration::from_secs(5), "the next term").await;
    let leader_b = within(Duration::from_secs(5), "b leads", campaign_b).await.unwrap().unwrap();
    println!("b leads {:?} after the DEL", deleted_at.elapsed());
    assert!(deleted_at.elapsed() < Duration::from_secs(5), "long before the 30 s lease");
    match next {
        LeaderEvent::Elected(leader) => {
            assert_eq!(leader.term, leader_b.token());
            assert_eq!(leader.identity_str(), Some("b"));
        }
        other => panic!("expected b's term, got {other:?}"),
    }
    assert!(leader_b.token() > leadership.token());
    assert!(leadership.release().await.is_err(), "the deleted leadership is lost");
    leader_b.resign().await.unwrap();
}

/// Runs `terms` terms of election `name` on `provider`, one after the other; returns the last.
async fn pass_terms(provider: &RedisLockProvider, name: &str, terms: usize) -> FencingToken {
    let election = provider.election(name).unwrap();
    let mut last = FencingToken::new(0);
    for i in 0..terms {
        let leadership = election.campaign(format!("runner-{i}")).await.unwrap();
        last = leadership.token();
        leadership.resign().await.unwrap();
    }
    last
}

/// An observer whose subscriber connection is killed while terms pass replays every term
/// from the journal, in order; one cut off long enough for the journal to be trimmed past
/// what it saw gets a gap, then the current leader; never a term out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_cut_off_while_terms_pass_gets_every_term_or_a_gap_then_the_current_leader() {
    let harness = RedisHarness::dedicated_with(Persistence::None).await;
    let (watcher, faults) = harness.client_with(test_builder()).await.unwrap();
    let (runner, _runner_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("cut_off");
    let mut observer = watcher.election(&name).unwrap().observe().unwrap();
    assert_eq!(next_leader_event(&mut observer, OPERATION, "the first state").await, LeaderEvent::Vacant);
    let mut admin = harness.admin().await;

    // The subscriber connection killed while five terms pass: every term, in order.
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut admin).await.unwrap();
    assert!(killed >= 1, "a subscriber connection was killed");
    let last = pass_terms(&runner, &name, 5).await;
    let mut terms = Vec::new();
    while terms.last() != Some(&last) {
        let event = next_leader_event(&mut observer, OPERATION, &format!("the terms after {terms:?}")).await;
        assert_ne!(event, LeaderEvent::Gap, "the journal replays what the killed subscriber missed");
        terms.extend(term_of(&event));
    }
    assert_eq!(terms.len(), 5, "every term once: {terms:?}");
    assert!(terms.windows(2).all(|pair| pair[0] < pair[1]), "in order: {terms:?}");

    // Cut off (blackholed) while the journal is trimmed past what it saw: a gap, then the
    // current leader.
    faults.0.blackhole();
    pass_terms(&runner, &name, 700).await;
    let current = runner.election(&name).unwrap().campaign("current").await.unwrap();
    faults.0.heal();
    let mut after = Vec::new();
    loop {
        let event =
            next_leader_event(&mut observer, Duration::from_secs(15), &format!("the events after {after:?}")).await;
        let done = term_of(&event) == Some(current.token());
        after.push(event);
        if done {
            break;
        }
    }
    let gap = after.iter().position(|event| *event == LeaderEvent::Gap);
    assert!(gap.is_some(), "a gap is reported: {after:?}");
    let seen: Vec<_> = after.iter().filter_map(term_of).collect();
    assert!(seen.iter().all(|term| *term > last), "never a term out of order: {after:?}");
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "in order: {after:?}");
    assert!(matches!(after.last(), Some(LeaderEvent::Elected(leader)) if leader.identity_str() == Some("current")));
    current.resign().await.unwrap();
    assert_eq!(next_leader_event(&mut observer, OPERATION, "the vacancy").await, LeaderEvent::Vacant);
}

/// A leader whose renewals stall (its connection blackholed) stops leading before its record
/// expires, and observers are told of the vacancy within about a lease, although no script of
/// the leader's runs: the observers read again when the record expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_stall_is_reported_vacant_within_about_a_lease() {
    let harness = RedisHarness::shared().await;
    let (leader, faults) = harness.client_with(test_builder()).await.unwrap();
    let (watcher, _watcher_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("stalled");
    let (leadership, mut observer) = lead_and_observe(&leader, &watcher, &name, "stalling").await;
    faults.0.blackhole();
    let stalled_at = Instant::now();
    within(LEASE + OPERATION, "the leader's loss signal", leadership.lost()).await;
    let lost_after = stalled_at.elapsed();
    let vacant = next_leader_event(&mut observer, LEASE + Duration::from_secs(2), "the vacancy").await;
    let vacant_after = stalled_at.elapsed();
    println!("lost after {lost_after:?}, reported vacant after {vacant_after:?}");
    assert_eq!(vacant, LeaderEvent::Vacant);
    assert!(lost_after <= vacant_after, "the leader stops before observers hear of the vacancy");
    assert!(vacant_after < LEASE + Duration::from_secs(1), "within about a lease: {vacant_after:?}");
    assert!(watcher.election(&name).unwrap().leader().await.unwrap().is_none());
    faults.0.heal();
    drop(leadership);
}
