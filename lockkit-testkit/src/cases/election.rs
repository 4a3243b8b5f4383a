//! Contract 25-28: leader election. The mutex cases also run on candidates
//! (`candidate::…`): one leader at a time, terms that grow, loss signalled before another
//! leads, cancelled campaigns that leave no trace, prompt hand-over on resign. These are the
//! behaviours of an election beyond a lock's.

use std::time::{Duration, Instant, SystemTime};

use lockkit_core::{Election, Error, LeaderEvent, LockGuard, MAX_IDENTITY_LEN, Observer, Result};
use tokio::task::JoinHandle;

use super::Ctx;
use crate::harness::{Harness, TestClient};

impl Ctx<'_> {
    /// The election of this case on `client`.
    #[track_caller]
    fn election(&self, client: &TestClient) -> Election {
        self.ok(client.provider.election(&self.name), "make an election")
    }

    /// `client`'s campaign as `identity`, spawned, once `leader_client` sees it wait behind
    /// the leader.
    async fn campaign_behind(
        &self,
        client: &TestClient,
        identity: &'static str,
        leader_client: &TestClient,
    ) -> JoinHandle<Result<LockGuard>> {
        let election = self.election(client);
        let campaign = tokio::spawn(async move { election.campaign(identity).await });
        self.await_waiters(leader_client, 1).await;
        campaign
    }

    /// The guard of a spawned `campaign` once it leads, within the wake-up bound.
    async fn elected(&self, campaign: JoinHandle<Result<LockGuard>>, step: &str) -> LockGuard {
        let bound = self.h.timing().wake + self.h.timing().operation;
        let joined = self.within(bound, step, campaign).await.unwrap_or_else(|e| self.fail("join", e));
        self.ok(joined, step)
    }

    /// The next event of `observer`, within the wake-up bound.
    async fn next_event(&self, observer: &mut Observer, step: &str) -> LeaderEvent {
        let bound = self.h.timing().wake + self.h.timing().operation;
        match self.within(bound, step, observer.next()).await {
            Some(Ok(event)) => event,
            Some(Err(error)) => self.fail(step, format!("the observer failed: {error}")),
            None => self.fail(step, "the observer's stream ended"),
        }
    }
}

/// Contract 28: while a candidate leads, anyone can ask who leads: its identity, its term
/// (the leadership guard's token) and since when; after it resigns, nobody.
pub async fn the_leader_is_published_while_it_leads(h: &dyn Harness) {
    let cx = Ctx::new(h, "the_leader_is_published_while_it_leads");
    let Some([a, b]) = cx.clients_declaring("election", |c| c.election).await else { return };
    cx.check(cx.ok(cx.election(&b).leader().await, "ask who leads").is_none(), "nobody leads at first");
    let before = std::time::SystemTime::now();
    let leadership = cx.ok(cx.election(&a).campaign("10.0.0.7:8080").await, "campaign");
    let leader = match cx.ok(cx.election(&b).leader().await, "ask who leads") {
        Some(leader) => leader,
        None => cx.fail("ask who leads", "nobody leads while a candidate holds the leadership"),
    };
    cx.check(leader.identity_str() == Some("10.0.0.7:8080"), &format!("the identity is published: {leader:?}"));
    cx.check(leader.term == leadership.token(), "the term is the leadership guard's token");
    if let Some(since) = leader.since {
        let slack = Duration::from_secs(5);
        cx.check(since + slack >= before, &format!("the term began about now, not {since:?}"));
    }
    cx.ok(leadership.resign().await, "resign");
    let bound = h.timing().operation;
    let election = cx.election(&b);
    let deadline = Instant::now() + bound;
    while cx.ok(election.leader().await, "ask who leads after the resignation").is_some() {
        if Instant::now() >= deadline {
            cx.fail("ask who leads after the resignation", format!("someone still leads after {bound:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Contract 28: an observer sees every change of leader in term order, a vacancy included,
/// driven by the store's notifications: nobody, the first leader, the next after the first
/// resigns, and nobody again after the second resigns. A vacancy between two terms may show;
/// a gap may not, on a healthy connection.
pub async fn observers_see_every_change_in_term_order(h: &dyn Harness) {
    let cx = Ctx::new(h, "observers_see_every_change_in_term_order");
    let Some([a, b, c]) = cx.clients_declaring("election", |c| c.election).await else { return };
    let mut observer = cx.ok(cx.election(&c).observe(), "observe");
    let first = cx.next_event(&mut observer, "the first event").await;
    cx.check(first == LeaderEvent::Vacant, &format!("nobody leads at first: {first:?}"));
    let leader_a = cx.ok(cx.election(&a).campaign("a").await, "a campaigns");
    let campaign_b = cx.campaign_behind(&b, "b", &a).await;
    let term_a = leader_a.token();
    cx.ok(leader_a.resign().await, "a resigns");
    let leader_b = cx.elected(campaign_b, "b comes to lead").await;
    let term_b = leader_b.token();
    cx.ok(leader_b.resign().await, "b resigns");
    let mut seen = Vec::new();
    loop {
        let event = cx.next_event(&mut observer, &format!("event #{} after {seen:?}", seen.len() + 1)).await;
        let done = matches!(&event, LeaderEvent::Vacant)
            && seen.iter().any(|e| matches!(e, LeaderEvent::Elected(l) if l.term == term_b));
        seen.push(event);
        if done {
            break;
        }
    }
    cx.check(!seen.contains(&LeaderEvent::Gap), &format!("no gap on a healthy connection: {seen:?}"));
    let elected: Vec<_> = seen
        .iter()
        .filter_map(|event| match event {
            LeaderEvent::Elected(leader) => Some((leader.term, leader.identity_str().map(str::to_owned))),
            _ => None,
        })
        .collect();
    cx.check(
        elected == [(term_a, Some("a".to_owned())), (term_b, Some("b".to_owned()))],
        &format!("a then b, with their terms, each once: {seen:?}"),
    );
}

/// Contract 28: an observer that starts while a candidate leads hears of that leader first.
pub async fn observing_starts_with_the_current_state(h: &dyn Harness) {
    let cx = Ctx::new(h, "observing_starts_with_the_current_state");
    let Some([a, b]) = cx.clients_declaring("election", |c| c.election).await else { return };
    let leadership = cx.ok(cx.election(&a).campaign("the leader").await, "campaign");
    let mut observer = cx.ok(cx.election(&b).observe(), "observe");
    match cx.next_event(&mut observer, "the first event").await {
        LeaderEvent::Elected(leader) => {
            cx.check(leader.term == leadership.token(), "the current leader's term");
            cx.check(leader.identity_str() == Some("the leader"), "the current leader's identity");
        }
        other => cx.fail("the first event", format!("expected the current leader, got {other:?}")),
    }
    cx.ok(leadership.resign().await, "resign");
    let next = cx.next_event(&mut observer, "the vacancy after the resignation").await;
    cx.check(next == LeaderEvent::Vacant, &format!("nobody leads after the resignation: {next:?}"));
}

/// Bad input: an empty identity, or one longer than 1024 bytes, is refused at once with
/// `InvalidConfig` saying what to give, and nothing is left in the store.
pub async fn bad_identities_are_refused(h: &dyn Harness) {
    let cx = Ctx::new(h, "bad_identities_are_refused");
    let Some([a]) = cx.clients_declaring("election", |c| c.election).await else { return };
    let election = cx.election(&a);
    for identity in [Vec::new(), vec![b'x'; MAX_IDENTITY_LEN + 1]] {
        match election.campaign(&identity).await {
            Err(error @ Error::InvalidConfig { .. }) => {
                cx.check(error.to_string().contains("1024"), &format!("{error} gives the limit"));
            }
            other => cx.fail(
                &format!("campaign with {} bytes", identity.len()),
                format!("expected InvalidConfig, got {other:?}"),
            ),
        }
    }
    cx.check(cx.ok(election.leader().await, "ask who leads").is_none(), "nobody leads");
}

/// Contract 28: `since` is when the term began. A candidate that waited for a second while
/// another led reports a `since` (to whoever asks who leads, and to observers) that is not
/// before the previous leader resigned: not the start of its candidacy.
pub async fn a_new_terms_since_is_not_before_the_previous_term_ended(h: &dyn Harness) {
    let cx = Ctx::new(h, "a_new_terms_since_is_not_before_the_previous_term_ended");
    let Some([a, b, c]) = cx.clients_declaring("election", |c| c.election).await else { return };
    let mut observer = cx.ok(cx.election(&c).observe(), "observe");
    let leader_a = cx.ok(cx.election(&a).campaign("a").await, "a campaigns");
    let campaign_b = cx.campaign_behind(&b, "b", &a).await;
    // b's candidacy is a second old when a's term ends.
    tokio::time::sleep(CANDIDACY_AGE).await;
    let ended = SystemTime::now();
    cx.ok(leader_a.resign().await, "a resigns");
    let leader_b = cx.elected(campaign_b, "b comes to lead").await;
    let not_before_the_end = |since: Option<SystemTime>, step: &str| {
        if let Some(since) = since {
            cx.check(
                since + SINCE_SLACK >= ended,
                &format!(
                    "{step}: the term began {:?} before the previous one ended",
                    ended.duration_since(since).unwrap_or_default()
                ),
            );
        }
    };
    match cx.ok(cx.election(&c).leader().await, "ask who leads") {
        Some(leader) if leader.term == leader_b.token() => not_before_the_end(leader.since, "who leads"),
        other => cx.fail("ask who leads", format!("expected b's term {:?}, got {other:?}", leader_b.token())),
    }
    loop {
        match cx.next_event(&mut observer, "the observer hears of b's term").await {
            LeaderEvent::Elected(leader) if leader.term == leader_b.token() => {
                not_before_the_end(leader.since, "the observer");
                break;
            }
            _ => {}
        }
    }
    cx.ok(leader_b.resign().await, "b resigns");
}

/// How long the next candidate waits before the leader resigns, in
/// [`a_new_terms_since_is_not_before_the_previous_term_ended`].
const CANDIDACY_AGE: Duration = Duration::from_secs(1);

/// How far a term's `since` may lie before the end of the previous term: the store's clock
/// and this process's may disagree a little, and times are kept to the millisecond.
const SINCE_SLACK: Duration = Duration::from_millis(100);
