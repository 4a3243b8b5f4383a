//! etcd-specific election cases on a real member: an observer cut off while terms pass
//! (replayed from the watch's revision, no gap), the same with the missed revisions compacted
//! (a gap, then the current leader), an observer moved to another runtime (replayed, no gap),
//! and a campaign whose reply was lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::{LeaderEvent, LockGuard, Observer};
use lockkit_etcd::EtcdLockProvider;
use lockkit_testkit::wait::next_leader_event;
use support::{EtcdHarness, ProxyFaults, TIMEOUT, test_builder, within};

fn fresh_name(what: &str) -> String {
    format!("election/{what}/{}", uuid::Uuid::new_v4())
}

/// How long an observer may take to report a change, reconnecting included.
const BOUND: Duration = Duration::from_secs(10);

fn term_of(event: &LeaderEvent) -> Option<(u64, String)> {
    match event {
        LeaderEvent::Elected(leader) => Some((leader.term.get(), leader.identity_str().unwrap_or("?").to_owned())),
        _ => None,
    }
}

/// An observer's client (with a long TTL, so that it outlives its cut) and two candidates on
/// `h`, each behind a proxy of its own, once the observer has seen the vacancy and the first
/// term, led by `a` as "first".
struct ObservedTerm {
    o_faults: Arc<ProxyFaults>,
    a: EtcdLockProvider,
    b: EtcdLockProvider,
    observer: Observer,
    first: LockGuard,
    /// The observer's provider and the candidates' proxies: bind them for the whole case.
    _kept: (EtcdLockProvider, Arc<ProxyFaults>, Arc<ProxyFaults>),
}

async fn observe_a_first_term(h: &EtcdHarness, name: &str) -> ObservedTerm {
    let (o, o_faults) = h.client_with(test_builder().ttl(Duration::from_secs(10))).await.unwrap();
    let (a, a_faults) = h.client_with(test_builder()).await.unwrap();
    let (b, b_faults) = h.client_with(test_builder()).await.unwrap();
    let mut observer = o.election(name).unwrap().observe().unwrap();
    assert_eq!(next_leader_event(&mut observer, BOUND, "the first state").await, LeaderEvent::Vacant);
    let first = a.election(name).unwrap().campaign("first").await.unwrap();
    let seen = next_leader_event(&mut observer, BOUND, "the first leader").await;
    assert_eq!(term_of(&seen), Some((first.token().get(), "first".to_owned())));
    ObservedTerm { o_faults, a, b, observer, first, _kept: (o, a_faults, b_faults) }
}

/// Two terms pass while the observer is cut off, and etcd keeps the history: back in touch,
/// the observer replays both, and the vacancy after them, in term order, with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_cut_off_replays_every_term_it_missed() {
    let h = EtcdHarness::dedicated().await;
    let name = fresh_name("replay");
    let ObservedTerm { o_faults, a: _a, b, mut observer, first, _kept } = observe_a_first_term(&h, &name).await;
    o_faults.cut_off();
    let election_b = b.election(&name).unwrap();
    let campaign = tokio::spawn(async move { election_b.campaign("second").await });
    within(BOUND, "the second candidate queued", async {
        while h.keys_of(&name).await < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    first.resign().await.unwrap();
    let second = within(BOUND, "the second term", campaign).await.unwrap().unwrap();
    let second_term = second.token().get();
    second.resign().await.unwrap();
    o_faults.proxy().heal();
    o_faults.reconnect();

    let mut missed = Vec::new();
    while missed.last() != Some(&LeaderEvent::Vacant) {
        missed.push(next_leader_event(&mut observer, BOUND, &format!("the replay after {missed:?}")).await);
    }
    assert_eq!(missed.len(), 2, "the second term and the vacancy, replayed with no gap: {missed:?}");
    assert_eq!(term_of(&missed[0]), Some((second_term, "second".to_owned())), "{missed:?}");
}

/// Terms pass while the observer is cut off and etcd compacts the revisions it missed: back in
/// touch, the observer says so with a gap and then gives the current leader, never a silent
/// skip and never a term out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_while_cut_off_is_a_gap_then_the_current_leader() {
    let h = EtcdHarness::dedicated().await;
    let name = fresh_name("compacted");
    let ObservedTerm { o_faults, a, b, mut observer, first, _kept } = observe_a_first_term(&h, &name).await;
    o_faults.cut_off();
    // A term the observer never sees, and the one after it, which leads when it comes back.
    first.resign().await.unwrap();
    let missed = b.election(&name).unwrap().campaign("missed").await.unwrap();
    missed.resign().await.unwrap();
    let current = a.election(&name).unwrap().campaign("current").await.unwrap();
    let mut admin = h.admin().await;
    let revision = admin.get("unused", None).await.unwrap().header().unwrap().revision();
    admin.compact(revision, None).await.unwrap();
    o_faults.proxy().heal();
    o_faults.reconnect();

    let gap = next_leader_event(&mut observer, BOUND, "the gap").await;
    assert_eq!(gap, LeaderEvent::Gap, "the missed terms are a gap");
    let now = next_leader_event(&mut observer, BOUND, "the current leader after the gap").await;
    assert_eq!(term_of(&now), Some((current.token().get(), "current".to_owned())));
    current.resign().await.unwrap();
    assert_eq!(next_leader_event(&mut observer, BOUND, "the vacancy").await, LeaderEvent::Vacant);
}

/// The member applies a campaign whose reply is lost (the client's connection is silently
/// blackholed until after the request timed out): the retry finds its own candidacy, so one
/// key stands for it, the candidate leads once, and resigning leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_reply_was_lost_finds_its_own_candidacy() {
    let h = EtcdHarness::shared().await;
    let name = fresh_name("lost-reply");
    let (a, a_faults) = h.client_with(test_builder().ttl(Duration::from_secs(6))).await.unwrap();
    let (b, _b_faults) = h.client_with(test_builder()).await.unwrap();
    a.lease_id().await.unwrap();
    a_faults.0.blackhole();
    let election = a.election(&name).unwrap();
    let started = Instant::now();
    let campaign = tokio::spawn(async move {
        let leadership = election.campaign_timeout("lost-reply", Duration::from_secs(20)).await;
        (leadership, started.elapsed())
    });
    // Past the request timeout: the campaign's first request is given up on. On heal the held
    // bytes are delivered in order, so the member applies that first put, whose reply is lost.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(300)).await;
    a_faults.0.heal();
    let (leadership, took) = within(Duration::from_secs(20), "the campaign", campaign).await.unwrap();
    let leadership = leadership.unwrap();
    assert!(took > TIMEOUT, "led after {took:?}: the first reply was not lost");
    assert_eq!(h.keys_of(&name).await, 1, "one key: the retry found the first candidacy");
    let leader = b.election(&name).unwrap().leader().await.unwrap().expect("someone leads");
    assert_eq!(leader.identity_str(), Some("lost-reply"));
    assert_eq!(leader.term, leadership.token());
    leadership.resign().await.unwrap();
    assert_eq!(h.keys_of(&name).await, 0, "no candidacy left behind");
    assert!(b.election(&name).unwrap().leader().await.unwrap().is_none());
}

/// The runtime of an observer's task shuts down; polled on another runtime, the observer goes
/// on from the revision it had reached: the term that passed meanwhile and the vacancy after it
/// are replayed, with no gap.
#[test]
fn an_observer_moved_to_another_runtime_replays_what_passed() {
    let main = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let name = fresh_name("runtimes");
    let (h, o, a) = main.block_on(async {
        let h = EtcdHarness::shared().await;
        let (o, o_faults) = h.client_with(test_builder()).await.unwrap();
        let (a, a_faults) = h.client_with(test_builder()).await.unwrap();
        (h, (o, o_faults), (a, a_faults))
    });
    let mut observer = o.0.election(&name).unwrap().observe().unwrap();
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let state = first.block_on(next_leader_event(&mut observer, BOUND, "the first state, on a runtime of its own"));
    assert_eq!(state, LeaderEvent::Vacant);
    drop(first);
    main.block_on(async {
        let leadership = a.0.election(&name).unwrap().campaign("meanwhile").await.unwrap();
        let term = leadership.token().get();
        leadership.resign().await.unwrap();
        let replayed = next_leader_event(&mut observer, BOUND, "the term that passed meanwhile").await;
        assert_eq!(term_of(&replayed), Some((term, "meanwhile".to_owned())), "no gap: {replayed:?}");
        assert_eq!(next_leader_event(&mut observer, BOUND, "the vacancy after it").await, LeaderEvent::Vacant);
        assert_eq!(h.keys_of(&name).await, 0);
    });
}
