//! The hand-over inside the release and the schema's move forward, against a real PostgreSQL
//! server: a release grants the head of the queue in its own transaction, a waiter that gave
//! up when the hand-over came frees it for the next, and a database holding the first
//! landing's tables is brought forward by `migrate` without losing a hold.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{LockGuard, LockHandle};
use lockkit_postgres::PostgresLockProvider;
use lockkit_testkit::wait::eventually;
use support::{OPERATION, PostgresHarness, ProxyFaults, test_builder, url_of, within};
use tokio::task::JoinHandle;

fn unique(prefix: &str) -> String {
    format!("handover/{prefix}/{}", uuid::Uuid::new_v4().simple())
}

/// `lock`'s acquisition, spawned, once `holder` sees it queued on `name` as waiter number
/// `position`.
async fn queued(
    holder: &PostgresLockProvider,
    name: &str,
    lock: LockHandle,
    position: usize,
) -> JoinHandle<lockkit_core::Result<LockGuard>> {
    let waiter = tokio::spawn(async move { lock.acquire().await });
    let what = format!("waiter {position} queued");
    eventually(OPERATION, &what, || async { holder.inspect(name).await.unwrap().waiters == Some(position) }).await;
    waiter
}

/// A client `a` of the shared server (its proxy kept by `_a_faults`: bind it, not `..`)
/// holding a fresh lock named after `what`, with the name's stored form.
struct Holding {
    harness: PostgresHarness,
    a: PostgresLockProvider,
    _a_faults: Arc<ProxyFaults>,
    name: String,
    stored: String,
    held: LockGuard,
}

async fn a_holds(what: &str) -> Holding {
    let harness = PostgresHarness::shared().await;
    let (a, _a_faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique(what);
    let stored = lockkit_postgres::stored_name(&name);
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    Holding { harness, a, _a_faults, name, stored, held }
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_head_of_the_queue_in_its_own_transaction() {
    let Holding { harness, a, _a_faults, name, stored, held } = a_holds("head").await;
    let (b, _fb) = harness.client_with(test_builder()).await.unwrap();
    let (c, _fc) = harness.client_with(test_builder()).await.unwrap();
    let b_waiter = queued(&a, &name, b.lock(&name).unwrap(), 1).await;
    let c_waiter = queued(&a, &name, c.lock(&name).unwrap(), 2).await;
    let admin = harness.admin().await;
    let head: String = admin
        .query_one("SELECT owner FROM lockkit.waiters WHERE name = $1 ORDER BY pos LIMIT 1", &[&stored])
        .await
        .unwrap()
        .get(0);
    let before = held.token();
    held.release().await.unwrap();
    // The release's own transaction made the head the holder: no try of the head was needed.
    let row = admin.query_one("SELECT owner, token FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), head, "the head of the queue holds right after the release");
    assert!(u64::try_from(row.get::<_, i64>(1)).unwrap() > before.get());
    let guard = within(OPERATION, "the head's grant", b_waiter).await.unwrap().unwrap();
    assert_eq!(guard.token().get(), u64::try_from(row.get::<_, i64>(1)).unwrap(), "the head confirms its grant");
    assert_eq!(a.inspect(&name).await.unwrap().waiters, Some(1), "the other waiter keeps its place");
    assert!(!c_waiter.is_finished());
    guard.release().await.unwrap();
    let guard = within(OPERATION, "the next grant", c_waiter).await.unwrap().unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_hand_over_to_a_waiter_that_gave_up_is_freed_for_the_next() {
    let Holding { harness, a, _a_faults, name, stored, held } = a_holds("gave-up").await;
    let (c, _fc) = harness.client_with(test_builder()).await.unwrap();
    // A waiter at the head whose owner never confirms (it gave up as the release ran), with a
    // lease far beyond the test: only its abandon can free the hand-over.
    let admin = harness.admin().await;
    admin
        .execute(
            "INSERT INTO lockkit.waiters (name, owner, pos, expires_at, kind, permits, meta, lease_ms) \
             VALUES ($1, 'gave-up', nextval('lockkit.positions'), clock_timestamp() + interval '1 minute', 'mutex', 0, \
             'gave-up', 600000)",
            &[&stored],
        )
        .await
        .unwrap();
    let c_waiter = queued(&a, &name, c.lock(&name).unwrap(), 2).await;
    held.release().await.unwrap();
    let owner: String =
        admin.query_one("SELECT owner FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap().get(0);
    assert_eq!(owner, "gave-up", "handed over to the head");
    // The head's acquisition ends without a grant: its abandon frees the hand-over and hands
    // the lock on.
    let freed: bool = admin.query_one("SELECT lockkit.abandon($1, 'gave-up')", &[&stored]).await.unwrap().get(0);
    assert!(freed, "abandon finds the row the hand-over made");
    let guard = within(OPERATION, "the next waiter's grant", c_waiter).await.unwrap().unwrap();
    guard.release().await.unwrap();
    // And a late confirmation of the abandoned owner is refused.
    let late = admin
        .query_one("SELECT o_token FROM lockkit.acquire($1, 'gave-up', 'gave-up', 60000, 0, 'mutex', 0)", &[&stored])
        .await
        .unwrap();
    assert_eq!(late.get::<_, Option<i64>>(0), None);
}

#[tokio::test]
async fn a_waiter_cancelled_after_the_hand_over_leaves_no_trace() {
    let Holding { harness, a, _a_faults, name, stored, held } = a_holds("cancelled").await;
    let (b, b_faults) = harness.client_with(test_builder()).await.unwrap();
    let b_waiter = queued(&a, &name, b.lock(&name).unwrap(), 1).await;
    // The waiter's provider cannot confirm: the hand-over is made, then the wait is dropped.
    b_faults.0.blackhole();
    held.release().await.unwrap();
    let admin = harness.admin().await;
    let rows = admin.query("SELECT 1 FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(rows.len(), 1, "handed over to the waiter");
    b_waiter.abort();
    let _ = b_waiter.await;
    b_faults.0.heal();
    // The dropped acquisition's abandon frees it once it gets through.
    eventually(OPERATION, "the hand-over freed", || async {
        admin.query("SELECT 1 FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap().is_empty()
    })
    .await;
    let guard = a.lock(&name).unwrap().try_acquire().await.unwrap();
    assert!(guard.is_some(), "free again");
    guard.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_schema_of_the_first_landing_is_brought_forward_keeping_its_holds() {
    let harness = PostgresHarness::shared().await;
    let schema = format!("old_{}", uuid::Uuid::new_v4().simple());
    let admin = harness.admin().await;
    // The tables as the first landing made them (one row per name, no kinds), with a hold.
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE SEQUENCE {schema}.tokens AS bigint MINVALUE 1;
             CREATE TABLE {schema}.locks (name text PRIMARY KEY, owner text NOT NULL, meta text NOT NULL,
               token bigint NOT NULL, since timestamptz NOT NULL, expires_at timestamptz NOT NULL);
             CREATE SEQUENCE {schema}.positions AS bigint MINVALUE 1;
             CREATE TABLE {schema}.waiters (name text NOT NULL, owner text NOT NULL, pos bigint NOT NULL,
               expires_at timestamptz NOT NULL, PRIMARY KEY (name, owner));
             CREATE TABLE {schema}.voided (owner text PRIMARY KEY, until timestamptz NOT NULL);
             CREATE FUNCTION {schema}.acquire(p_name text, p_owner text, p_meta text, p_lease_ms bigint,
               p_queue_ms bigint, OUT o_token bigint, OUT o_left_ms bigint) LANGUAGE sql AS 'SELECT 1::bigint, 0::bigint';
             INSERT INTO {schema}.locks VALUES ('held', 'old-owner', 'old-owner', nextval('{schema}.tokens'),
               clock_timestamp(), clock_timestamp() + interval '1 minute');"
        ))
        .await
        .unwrap();
    let provider = test_builder().url(url_of(harness.upstream())).schema(schema.clone()).build().unwrap();
    provider.migrate().await.unwrap();
    assert!(provider.lock("held").unwrap().try_acquire().await.unwrap().is_none(), "the old hold still holds");
    let info = provider.inspect("held").await.unwrap();
    assert_eq!(info.holders.len(), 1);
    let guard = provider.lock("other").unwrap().acquire().await.unwrap();
    assert!(guard.token().get() > 1);
    guard.release().await.unwrap();
    let old = admin
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = $1 AND p.proname = 'acquire'",
            &[&schema],
        )
        .await
        .unwrap();
    assert_eq!(old.get::<_, i64>(0), 1, "the old acquire function is gone, the new one there");
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
}

#[tokio::test]
async fn a_release_hands_a_run_of_readers_the_lock_and_stops_at_a_writer() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("readers");
    let stored = lockkit_postgres::stored_name(&name);
    let rw = a.rw_lock(&name).unwrap();
    let written = rw.write().await.unwrap();
    let mut waiters = Vec::new();
    // Queue: reader, reader, writer, reader.
    for (n, reader) in [true, true, false, true].into_iter().enumerate() {
        let rw = a.rw_lock(&name).unwrap();
        waiters.push(tokio::spawn(async move { if reader { rw.read().await } else { rw.write().await } }));
        eventually(OPERATION, "queued", || async { a.inspect(&name).await.unwrap().waiters == Some(n + 1) }).await;
    }
    written.release().await.unwrap();
    // The release's transaction granted the two readers at the head, and stopped at the writer.
    let admin = harness.admin().await;
    let kinds: Vec<String> = admin
        .query("SELECT kind FROM lockkit.locks WHERE name = $1 ORDER BY token", &[&stored])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kinds, ["read", "read"]);
    let mut waiters = waiters.into_iter();
    let first = within(OPERATION, "the first reader", waiters.next().unwrap()).await.unwrap().unwrap();
    let second = within(OPERATION, "the second reader", waiters.next().unwrap()).await.unwrap().unwrap();
    assert!(second.token() > first.token(), "every grant its own token");
    let info = a.inspect(&name).await.unwrap();
    assert_eq!(info.holders.len(), 2);
    assert!(info.holders.iter().all(|h| h.kind == lockkit_core::HoldKind::Read));
    assert_eq!(info.waiters, Some(2), "the writer and the reader behind it wait");
    let writer = waiters.next().unwrap();
    let last_reader = waiters.next().unwrap();
    first.release().await.unwrap();
    second.release().await.unwrap();
    let write = within(OPERATION, "the writer", writer).await.unwrap().unwrap();
    assert!(!last_reader.is_finished(), "the reader behind the writer waits for it");
    write.release().await.unwrap();
    within(OPERATION, "the last reader", last_reader).await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_permit_freed_is_handed_to_the_next_waiter_and_kinds_do_not_mix() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("permits");
    let two = a.semaphore(&name, 2).unwrap();
    let first = two.acquire().await.unwrap();
    let second = two.acquire().await.unwrap();
    let waiter = {
        let two = a.semaphore(&name, 2).unwrap();
        tokio::spawn(async move { two.acquire().await })
    };
    eventually(OPERATION, "queued", || async { a.inspect(&name).await.unwrap().waiters == Some(1) }).await;
    for other in [a.lock(&name).unwrap().try_acquire().await, a.semaphore(&name, 3).unwrap().try_acquire().await] {
        assert!(matches!(other, Err(lockkit_core::Error::Conflict { .. })), "{other:?}");
    }
    first.release().await.unwrap();
    let third = within(OPERATION, "the handed-over permit", waiter).await.unwrap().unwrap();
    assert!(third.token() > second.token());
    assert_eq!(a.inspect(&name).await.unwrap().holders.len(), 2);
    second.release().await.unwrap();
    third.release().await.unwrap();
}

#[tokio::test]
async fn a_confirmation_racing_the_hand_over_finds_it_and_keeps_it() {
    let Holding { harness, a: _a, _a_faults, name: _, stored, held } = a_holds("race").await;
    let owner = "racing-waiter";
    let releaser = harness.admin().await;
    releaser
        .execute(
            "INSERT INTO lockkit.waiters (name, owner, pos, expires_at, kind, permits, meta, lease_ms) \
             VALUES ($1, $2, nextval('lockkit.positions'), clock_timestamp() + interval '1 minute', 'mutex', 0, $2, 60000)",
            &[&stored, &owner],
        )
        .await
        .unwrap();
    // Free the holder's row behind its back, then release inside an open transaction: the
    // hand-over is made but not committed, and the name's advisory lock stays held.
    releaser.execute("UPDATE lockkit.locks SET owner = 'to-release' WHERE name = $1", &[&stored]).await.unwrap();
    releaser.batch_execute("BEGIN").await.unwrap();
    let released: bool =
        releaser.query_one("SELECT lockkit.release($1, 'to-release')", &[&stored]).await.unwrap().get(0);
    assert!(released);
    let handed: i64 =
        releaser.query_one("SELECT token FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap().get(0);
    // The waiter's confirmation looks (sees no row of its own yet) and then waits for the lock.
    let confirmer = harness.admin().await;
    let pid: i32 = confirmer.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let confirm = {
        let stored = stored.clone();
        tokio::spawn(async move {
            confirmer
                .query_one(
                    "SELECT o_token FROM lockkit.acquire($1, $2, $2, 60000, 9000, 'mutex', 0)",
                    &[&stored, &owner],
                )
                .await
                .unwrap()
                .get::<_, Option<i64>>(0)
        })
    };
    let watcher = harness.admin().await;
    eventually(OPERATION, "the confirmation waits for the advisory lock", || async {
        watcher
            .query_one("SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .unwrap()
            .get(0)
    })
    .await;
    releaser.batch_execute("COMMIT").await.unwrap();
    let token = within(OPERATION, "the confirmation", confirm).await.unwrap();
    let row = watcher.query_one("SELECT owner, token FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), owner, "the hand-over stands");
    assert_eq!(row.get::<_, i64>(1), handed, "the handed-over row stays");
    assert_eq!(token, Some(handed), "the confirmation returns the handed-over token");
    assert!(matches!(held.release().await, Err(lockkit_core::Error::LockLost { .. })));
    watcher.execute("DELETE FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
}

/// Two providers with a long lease (30 s, renewed every 10 s), and a lock `a` holds with `b`
/// queued behind it. Bind `_providers` (not `..`): the providers and their proxies must live
/// as long as the test.
struct Queued {
    harness: PostgresHarness,
    held: lockkit_core::LockGuard,
    b_waiter: JoinHandle<lockkit_core::Result<LockGuard>>,
    stored: String,
    _providers: [(lockkit_postgres::PostgresLockProvider, std::sync::Arc<support::ProxyFaults>); 2],
}

/// A lock named after `what` that `a` holds, with `b`'s acquisition queued behind it.
async fn a_holds_and_b_waits(what: &str) -> Queued {
    let long = || test_builder().lease(Duration::from_secs(30)).renew_every(Duration::from_secs(10));
    let harness = PostgresHarness::shared().await;
    let (a, fa) = harness.client_with(long()).await.unwrap();
    let (b, fb) = harness.client_with(long()).await.unwrap();
    let name = unique(what);
    let stored = lockkit_postgres::stored_name(&name);
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    let b_waiter = queued(&a, &name, b.lock(&name).unwrap(), 1).await;
    Queued { harness, held, b_waiter, stored, _providers: [(a, fa), (b, fb)] }
}

#[tokio::test]
async fn a_hand_over_announced_as_token_and_owner_wakes_its_waiter_with_that_token() {
    // The notification's payload is `<token>:<owner>`; the waiter it names wakes and confirms
    // the grant the release made, with the row's token.
    let Queued { harness, held, b_waiter, stored, _providers } = a_holds_and_b_waits("notified").await;
    let before = held.token();
    held.release().await.unwrap();
    let guard = within(OPERATION, "the hand-over", b_waiter).await.unwrap().unwrap();
    let admin = harness.admin().await;
    let row = admin.query_one("SELECT token FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(guard.token().get(), u64::try_from(row.get::<_, i64>(0)).unwrap(), "the granted token is the row's");
    assert!(guard.token() > before);
    assert!(guard.is_held());
    guard.release().await.unwrap();
    assert!(admin.query("SELECT 1 FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap().is_empty());
}

/// A plain connection to the test server that `LISTEN`s on `channels`; what it hears comes out
/// of the receiver as (channel, payload).
async fn listening(
    harness: &PostgresHarness,
    channels: &[&str],
) -> (tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<(String, String)>) {
    let (client, mut connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres dbname=postgres", harness.upstream().port()),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    let (heard, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(note) = message {
                let _ = heard.send((note.channel().to_owned(), note.payload().to_owned()));
            }
        }
    });
    let listen: String = channels.iter().map(|channel| format!("LISTEN {channel};")).collect();
    client.batch_execute(&listen).await.unwrap();
    (client, receiver)
}

#[tokio::test]
async fn a_hand_over_is_announced_on_the_new_owners_provider_channel_only() {
    let Queued { harness, held, b_waiter, stored, _providers } = a_holds_and_b_waits("channel").await;
    let admin = harness.admin().await;
    let owner: String =
        admin.query_one("SELECT owner FROM lockkit.waiters WHERE name = $1", &[&stored]).await.unwrap().get(0);
    // Owner ids are `<tag>.<attempt>`, the tag the provider's: ten lower-case hex digits.
    let (tag, attempt) = owner.split_once('.').expect("a tagged owner id");
    assert!(tag.len() == 10 && tag.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{owner}");
    assert!(uuid::Uuid::parse_str(attempt).is_ok(), "{owner}");
    let own = format!("lockkit_g_{tag}");
    let (listener, mut heard) = listening(&harness, &[&own, "lockkit_granted"]).await;
    held.release().await.unwrap();
    let guard = within(OPERATION, "the hand-over", b_waiter).await.unwrap().unwrap();
    // A marker sent after the release committed comes after everything the release sent.
    listener.batch_execute("NOTIFY lockkit_granted, 'marker'").await.unwrap();
    let mut before_marker = Vec::new();
    loop {
        let (channel, payload) = within(OPERATION, "the notifications", heard.recv()).await.unwrap();
        if payload == "marker" {
            break;
        }
        before_marker.push((channel, payload));
    }
    assert_eq!(before_marker.len(), 1, "one notification, on b's channel: {before_marker:?}");
    let (channel, payload) = &before_marker[0];
    assert_eq!(channel, &own);
    let parts: Vec<&str> = payload.splitn(3, ':').collect();
    assert_eq!(parts[0], guard.token().get().to_string(), "{payload}");
    assert!(parts[1].parse::<i64>().unwrap() > 0, "{payload}: the hand-over's server time in µs");
    assert_eq!(parts[2], owner);
    guard.release().await.unwrap();
}

/// When the place of the waiter queued on `stored` expires: each try of the waiter moves it.
async fn waiter_expiry(admin: &tokio_postgres::Client, stored: &str) -> std::time::SystemTime {
    admin.query_one("SELECT expires_at FROM lockkit.waiters WHERE name = $1", &[&stored]).await.unwrap().get(0)
}

/// The waiter of `name` (the one queued), its owner id and its provider's hand-over channel,
/// once its provider listens there and the waiter has tried again after registering.
async fn queued_owner(admin: &tokio_postgres::Client, stored: &str) -> (String, String) {
    let owner: String =
        admin.query_one("SELECT owner FROM lockkit.waiters WHERE name = $1", &[&stored]).await.unwrap().get(0);
    let channel = format!("lockkit_g_{}", owner.split_once('.').expect("a tagged owner id").0);
    let place = || waiter_expiry(admin, stored);
    let first = place().await;
    eventually(OPERATION, "the waiter's provider listens on its channel", || async {
        admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN ' || $1 || '%'", &[&channel])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    })
    .await;
    eventually(OPERATION, "the waiter's try after its registration", || async { place().await > first }).await;
    (owner, channel)
}

#[tokio::test]
async fn a_hand_over_announced_after_the_waiters_refusal_is_taken_from_its_notification() {
    // Only the database's functions announce hand-overs on a provider's channel; a notification
    // sent by hand with a token no row has shows that the waiter takes the grant from the
    // notification, without a confirming try, when the hand-over's server time is later than
    // its last refusal's. (A long lease: the last refusal leaves the renewal room.)
    let Queued { harness, held, b_waiter, stored, _providers } = a_holds_and_b_waits("from-notification").await;
    let admin = harness.admin().await;
    let (owner, channel) = queued_owner(&admin, &stored).await;
    // Announced again until b takes it: a safety-poll try of b that ran after the announcement
    // would (rightly) make b confirm by a try instead, which a refuses.
    let mut b_waiter = b_waiter;
    let announce = "SELECT pg_notify($1, '4242:' || floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
                    || ':' || $2)";
    let taken = within(OPERATION, "the grant taken from the notification", async {
        loop {
            admin.execute(announce, &[&channel, &owner]).await.unwrap();
            if let Ok(taken) = tokio::time::timeout(Duration::from_millis(300), &mut b_waiter).await {
                break taken;
            }
        }
    })
    .await;
    let guard = taken.unwrap().unwrap();
    assert_eq!(guard.token().get(), 4242, "the token of the notification, which no row has");
    // The database knows nothing of it: b's renewal finds a's row, not its own, and the
    // guard is lost.
    let lost = within(Duration::from_secs(15), "the renewal finds another's row", guard.lost()).await;
    assert!(matches!(lost, lockkit_core::LossReason::OwnedByAnother), "{lost:?}");
    held.release().await.unwrap();
}

/// A holds the lock and b waits; then `announce` names a notification (channel, payload) of a
/// hand-over to b that b must not take as a grant (its `token` is in no row): b wakes, confirms
/// by a try, which is refused (a holds), and renews its place and waits on. a's real release
/// then grants b its row's token.
async fn an_announcement_is_confirmed_by_a_try(what: &str, announce: fn(&str, &str) -> (String, String), token: u64) {
    let Queued { harness, held, b_waiter, stored, _providers } = a_holds_and_b_waits(what).await;
    let admin = harness.admin().await;
    let (owner, channel) = queued_owner(&admin, &stored).await;
    let place = || waiter_expiry(&admin, &stored);
    let before = place().await;
    let (to, payload) = announce(&channel, &owner);
    admin.execute("SELECT pg_notify($1, $2)", &[&to, &payload]).await.unwrap();
    eventually(OPERATION, "b tried again", || async { place().await > before }).await;
    assert!(!b_waiter.is_finished(), "b still waits: the token of the payload is not taken");
    held.release().await.unwrap();
    let guard = within(OPERATION, "the real hand-over", b_waiter).await.unwrap().unwrap();
    assert_ne!(guard.token().get(), token);
    let row: i64 = admin.query_one("SELECT token FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap().get(0);
    assert_eq!(guard.token().get(), u64::try_from(row).unwrap());
    guard.release().await.unwrap();
}

/// A hand-over whose server time (1 µs after the epoch) is before b's refusals: the row it made
/// may be gone when they ran, so b confirms by a try.
#[tokio::test]
async fn a_hand_over_announced_before_the_waiters_refusal_is_confirmed_by_a_try() {
    an_announcement_is_confirmed_by_a_try(
        "before-refusal",
        |channel, owner| (channel.to_owned(), format!("4343:1:{owner}")),
        4343,
    )
    .await;
}

/// Functions of an earlier version (a schema not migrated again) announce a hand-over on the
/// schema's `<schema>_granted` as `<token>:<owner>`: the waiter tries again (at the
/// notification or its safety poll) and never takes the payload's token as a grant.
#[tokio::test]
async fn a_hand_over_announced_by_earlier_functions_wakes_the_waiter_which_confirms_by_a_try() {
    an_announcement_is_confirmed_by_a_try(
        "earlier-functions",
        |_channel, owner| ("lockkit_granted".to_owned(), format!("4444:{owner}")),
        4444,
    )
    .await;
}
