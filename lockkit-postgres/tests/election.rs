//! Elections under faults the conformance kit does not drive itself, against a real PostgreSQL
//! server: an observer cut off while terms pass (replayed from the journal, or a gap when the
//! journal was trimmed meanwhile), a leader that dies (its vacancy observed when its lease
//! runs out), a campaign whose reply was lost, and a name used as a lock and an election.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use lockkit_core::{Error, LeaderEvent};
use lockkit_testkit::wait::next_leader_event;
use support::{LEASE, OPERATION, PostgresHarness, test_builder, within};

fn unique(prefix: &str) -> String {
    format!("election/{prefix}/{}", uuid::Uuid::new_v4().simple())
}

fn elected(term: lockkit_core::FencingToken, identity: &str) -> impl Fn(&LeaderEvent) -> bool + '_ {
    move |event| matches!(event, LeaderEvent::Elected(l) if l.term == term && l.identity_str() == Some(identity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_cut_off_while_terms_pass_replays_every_term() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (o, fo) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("replay");
    let mut observer = o.election(&name).unwrap().observe().unwrap();
    assert_eq!(next_leader_event(&mut observer, OPERATION, "the first state").await, LeaderEvent::Vacant);
    fo.cut_off();
    let election = a.election(&name).unwrap();
    let mut terms = Vec::new();
    for identity in ["one", "two", "three"] {
        let leader = election.campaign(identity).await.unwrap();
        terms.push((leader.token(), identity));
        leader.resign().await.unwrap();
    }
    fo.reconnect();
    // Every term and every vacancy, in term order, no gap: the journal kept them.
    for (term, identity) in &terms {
        let event = next_leader_event(&mut observer, OPERATION * 2, "a replayed term").await;
        assert!(elected(*term, identity)(&event), "term {term} of {identity}, got {event:?}");
        let event = next_leader_event(&mut observer, OPERATION, "a replayed vacancy").await;
        assert_eq!(event, LeaderEvent::Vacant, "after term {term}");
    }
    // And it follows the changes after that, as before.
    let leader = election.campaign("four").await.unwrap();
    let event = next_leader_event(&mut observer, OPERATION, "the next term").await;
    assert!(elected(leader.token(), "four")(&event), "{event:?}");
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_cut_off_while_the_journal_is_trimmed_reports_a_gap() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (o, fo) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("gap");
    let election = a.election(&name).unwrap();
    let first = election.campaign("first").await.unwrap();
    let mut observer = o.election(&name).unwrap().observe().unwrap();
    let event = next_leader_event(&mut observer, OPERATION, "the first state").await;
    assert!(elected(first.token(), "first")(&event), "{event:?}");
    fo.cut_off();
    first.resign().await.unwrap();
    // More terms than the journal keeps (1000 entries), through the backend's own functions.
    let stored = lockkit_postgres::stored_name(&name);
    let admin = harness.admin().await;
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN FOR i IN 1..600 LOOP \
               PERFORM lockkit.campaign('{stored}', 'bulk-' || i, 'bulk'::bytea, 'meta', 60000, 0); \
               PERFORM lockkit.resign('{stored}', 'bulk-' || i); \
             END LOOP; END $$"
        ))
        .await
        .unwrap();
    let trimmed: i64 =
        admin.query_one("SELECT count(*) FROM lockkit.terms WHERE name = $1", &[&stored]).await.unwrap().get(0);
    assert_eq!(trimmed, 1000, "the journal keeps its last 1000 entries");
    let last = election.campaign("last").await.unwrap();
    fo.reconnect();
    // A gap, then the leader now: never a silent skip.
    let event = next_leader_event(&mut observer, OPERATION * 2, "the gap").await;
    assert_eq!(event, LeaderEvent::Gap);
    let event = next_leader_event(&mut observer, OPERATION, "the leader after the gap").await;
    assert!(elected(last.token(), "last")(&event), "{event:?}");
    last.resign().await.unwrap();
    let event = next_leader_event(&mut observer, OPERATION, "the vacancy after the gap").await;
    assert_eq!(event, LeaderEvent::Vacant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_vacancy_is_observed_when_its_lease_runs_out() {
    let harness = PostgresHarness::shared().await;
    let (a, fa) = harness.client_with(test_builder()).await.unwrap();
    let (o, _fo) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("dead");
    let leader = a.election(&name).unwrap().campaign("doomed").await.unwrap();
    let mut observer = o.election(&name).unwrap().observe().unwrap();
    let event = next_leader_event(&mut observer, OPERATION, "the first state").await;
    assert!(elected(leader.token(), "doomed")(&event), "{event:?}");
    fa.0.blackhole();
    let silent = Instant::now();
    // Nobody resigns or campaigns: the observer reads when the leader's row expires.
    let event = next_leader_event(&mut observer, LEASE + OPERATION, "the vacancy").await;
    assert_eq!(event, LeaderEvent::Vacant);
    assert!(
        silent.elapsed() + Duration::from_millis(100) >= LEASE - support::RENEW_EVERY,
        "not before the lease ran out"
    );
    assert!(!leader.is_held(), "the leader knew first");
    drop(leader);
    fa.0.heal();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_reply_was_lost_finds_its_own_candidacy() {
    let harness = PostgresHarness::shared().await;
    let (a, fa) = harness.client_with(test_builder()).await.unwrap();
    a.ping().await.unwrap();
    let name = unique("lost-reply");
    let stored = lockkit_postgres::stored_name(&name);
    let election = a.election(&name).unwrap();
    // The try waits in the proxy past the response timeout (its reply is lost to the client,
    // which tries again on a new connection); then the partition heals and both arrive.
    fa.0.blackhole();
    let campaign = tokio::spawn(async move { election.campaign("me").await });
    tokio::time::sleep(support::RESPONSE_TIMEOUT * 2).await;
    fa.0.heal();
    let leader = within(OPERATION * 2, "the campaign", campaign).await.unwrap().unwrap();
    let admin = harness.admin().await;
    let rows = admin.query("SELECT token FROM lockkit.candidates WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(rows.len(), 1, "one candidacy, not a second, leaked one");
    assert_eq!(rows[0].get::<_, Option<i64>>(0), Some(i64::try_from(leader.token().get()).unwrap()));
    let terms =
        admin.query("SELECT token FROM lockkit.terms WHERE name = $1 AND token IS NOT NULL", &[&stored]).await.unwrap();
    assert_eq!(terms.len(), 1, "one term");
    leader.resign().await.unwrap();
    let rows = admin.query("SELECT 1 FROM lockkit.candidates WHERE name = $1", &[&stored]).await.unwrap();
    assert!(rows.is_empty(), "nothing left after the resignation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_given_up_after_a_lost_reply_leaves_no_trace() {
    let harness = PostgresHarness::shared().await;
    // A schema of its own: the `voided` row of the campaign's owner id is the only one there.
    let schema = format!("given_up_{}", uuid::Uuid::new_v4().simple());
    let (a, fa) = harness.client_with(test_builder().schema(schema.clone())).await.unwrap();
    a.ping().await.unwrap();
    let name = unique("given-up");
    let stored = lockkit_postgres::stored_name(&name);
    fa.0.blackhole();
    let outcome = a.election(&name).unwrap().campaign_timeout("ghost", Duration::from_millis(1200)).await;
    assert!(outcome.is_err(), "no leadership through a blackhole");
    fa.0.heal();
    // The give-up cannot reach the server before the partition heals, and the held try may
    // land after this test first looks: an empty table proves nothing until the abandonment
    // has committed. Once it has (the owner id is voided), a try that landed before was
    // undone by it and every later one is refused: from then on there is no trace.
    let admin = harness.admin().await;
    let deadline = Instant::now() + OPERATION * 2;
    while admin.query(&format!("SELECT 1 FROM {schema}.voided"), &[]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the abandonment never reached the server");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let candidates = format!("SELECT 1 FROM {schema}.candidates WHERE name = $1");
    assert!(admin.query(&candidates, &[&stored]).await.unwrap().is_empty(), "a ghost candidacy remains");
    // A try of the campaign that lands only now (as a held one may) is refused and leaves nothing.
    let owner: String = admin.query_one(&format!("SELECT owner FROM {schema}.voided"), &[]).await.unwrap().get(0);
    let late = admin
        .query_one(
            &format!("SELECT o_token FROM {schema}.campaign($1, $2, 'ghost'::bytea, 'meta', 60000, 60000)"),
            &[&stored, &owner],
        )
        .await
        .unwrap();
    assert_eq!(late.get::<_, Option<i64>>(0), None, "a late try of the given-up campaign is refused");
    assert!(admin.query(&candidates, &[&stored]).await.unwrap().is_empty(), "the late try left a candidacy");
    let (b, _fb) = harness.client_with(test_builder().schema(schema.clone())).await.unwrap();
    let leader = b.election(&name).unwrap().candidate("b").unwrap().try_acquire().await.unwrap();
    assert!(leader.is_some(), "the election is free: no ghost leads");
    leader.unwrap().release().await.unwrap();
    assert!(admin.query(&candidates, &[&stored]).await.unwrap().is_empty(), "nothing left");
    drop((a, b));
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_held_as_a_lock_is_no_election_and_the_reverse() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (b, _fb) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("kinds");
    let lock = a.lock(&name).unwrap().acquire().await.unwrap();
    match b.election(&name).unwrap().campaign_timeout("b", OPERATION).await {
        Err(Error::Conflict { what, .. }) => assert!(what.contains("lock"), "{what}"),
        other => panic!("expected Conflict, got {:?}", other.map(|g| g.token())),
    }
    lock.release().await.unwrap();
    let leader = b.election(&name).unwrap().campaign("b").await.unwrap();
    match a.lock(&name).unwrap().acquire_timeout(OPERATION).await {
        Err(Error::Conflict { what, .. }) => assert!(what.contains("election"), "{what}"),
        other => panic!("expected Conflict, got {:?}", other.map(|g| g.token())),
    }
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_the_documented_grants_campaigns_and_observes() {
    let harness = PostgresHarness::shared().await;
    let admin = harness.admin().await;
    let schema = format!("least_{}", uuid::Uuid::new_v4().simple());
    let role = format!("elector_{}", uuid::Uuid::new_v4().simple());
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    let url = format!("postgres://{role}@{}/postgres?schema={schema}&migrate=false&lease=2s", harness.upstream());
    let owner = test_builder().url(support::url_of(harness.upstream())).schema(schema.clone()).build().unwrap();
    owner.migrate().await.unwrap();
    let refused = lockkit_postgres::PostgresLockProvider::connect(&url).await;
    let Err(Error::InvalidConfig { message, .. }) = refused else {
        panic!("expected InvalidConfig, got {:?}", refused.map(drop))
    };
    assert!(message.contains(&format!("{schema}.candidates")), "the elections' grants are named: {message}");
    let grants = message.split("run: ").nth(1).unwrap().to_owned();
    // Functions are executable by PUBLIC by default; take that away, so that only the
    // documented grants count.
    admin.batch_execute(&format!("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC")).await.unwrap();
    admin.batch_execute(&grants).await.unwrap();
    let a = lockkit_postgres::PostgresLockProvider::connect(&url).await.unwrap();
    let b = lockkit_postgres::PostgresLockProvider::connect(&url).await.unwrap();
    let mut observer = b.election("jobs").unwrap().observe().unwrap();
    assert_eq!(next_leader_event(&mut observer, OPERATION, "the first state").await, LeaderEvent::Vacant);
    let leader = a.election("jobs").unwrap().campaign("a").await.unwrap();
    let waiting = b.election("jobs").unwrap();
    let next = tokio::spawn(async move { waiting.campaign("b").await });
    tokio::time::sleep(LEASE).await;
    assert!(leader.is_held(), "renewed by the role");
    let event = next_leader_event(&mut observer, OPERATION, "the first leader").await;
    assert!(elected(leader.token(), "a")(&event), "{event:?}");
    leader.resign().await.unwrap();
    let second = within(OPERATION, "the hand-over", next).await.unwrap().unwrap();
    assert_eq!(next_leader_event(&mut observer, OPERATION, "the vacancy").await, LeaderEvent::Vacant);
    let event = next_leader_event(&mut observer, OPERATION, "the second leader").await;
    assert!(elected(second.token(), "b")(&event), "{event:?}");
    second.resign().await.unwrap();
    drop((a, b, observer));
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE; DROP OWNED BY {role}; DROP ROLE {role}"))
        .await
        .unwrap();
}
