//! Faults the conformance kit does not drive itself, against real PostgreSQL servers: a
//! restart, a pause longer than the lease, the row deleted or taken behind the holder, a lost
//! reply, racing schema creation, the bad input of the issue (no database, a bad schema
//! name, a role without privileges), and the abandon of an acquisition or of a campaign
//! interrupted by a transient server error (a lock timeout, a cancelled statement, a terminated
//! backend), which is retried.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use lockkit_core::{Error, LossReason};
use lockkit_postgres::PostgresLockProvider;
use support::{LEASE, OPERATION, PostgresHarness, test_builder, url_of, within};

fn unique(prefix: &str) -> String {
    format!("faults/{prefix}/{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_across_a_restart() {
    let harness = PostgresHarness::dedicated().await;
    let (provider, _faults) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("restart");
    let first = provider.lock(&name).unwrap().acquire().await.unwrap();
    let before = first.token();
    first.release().await.unwrap();
    // Tokens of other names move the sequence too; one of them was drawn last before the stop.
    let other = provider.lock(&unique("other")).unwrap().acquire().await.unwrap();
    let last = other.token();
    other.release().await.unwrap();
    harness.server().unwrap().lock().await.restart().await.unwrap();
    let again = within(OPERATION * 3, "an acquire after the restart", async {
        loop {
            match provider.lock(&name).unwrap().acquire_timeout(OPERATION).await {
                Ok(guard) => return guard,
                Err(error) if error.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(error) => panic!("acquire after the restart: {error}"),
            }
        }
    })
    .await;
    assert!(again.token() > last && last > before, "{} after {} and {}", again.token(), last, before);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_longer_than_the_lease_is_signalled_before_another_is_granted() {
    let harness = PostgresHarness::dedicated().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (b, _fb) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("pause");
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    b.ping().await.unwrap();
    harness.server().unwrap().lock().await.pause().unwrap();
    let paused_at = Instant::now();
    let reason = within(LEASE * 2, "the holder's loss while the server is paused", held.lost()).await;
    let lost_at = Instant::now();
    assert!(lost_at - paused_at < LEASE, "lost {:?} after the pause, within the lease", lost_at - paused_at);
    assert_eq!(reason, LossReason::DeadlineExpired);
    // Keep the server paused past the row's expiry, then resume: only now can B be granted.
    tokio::time::sleep(LEASE.saturating_sub(lost_at - paused_at) + Duration::from_millis(200)).await;
    harness.server().unwrap().lock().await.resume().unwrap();
    let taken = within(LEASE * 3, "another owner after the resume", async {
        loop {
            match b.lock(&name).unwrap().acquire_timeout(OPERATION).await {
                Ok(guard) => return guard,
                Err(error) if error.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(error) => panic!("acquire after the resume: {error}"),
            }
        }
    })
    .await;
    assert!(Instant::now() > lost_at);
    assert!(taken.token() > held.token());
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
    taken.release().await.unwrap();
}

#[tokio::test]
async fn a_row_taken_over_behind_the_holder_is_owned_by_another() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("taken");
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    let admin = harness.admin().await;
    let changed =
        admin.execute("UPDATE lockkit.locks SET owner = 'someone else' WHERE name = $1", &[&name]).await.unwrap();
    assert_eq!(changed, 1);
    let reason = within(LEASE, "the loss", held.lost()).await;
    assert_eq!(reason, LossReason::OwnedByAnother);
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
    admin.execute("DELETE FROM lockkit.locks WHERE name = $1", &[&name]).await.unwrap();
}

#[tokio::test]
async fn a_lost_reply_leaves_no_ghost() {
    let harness = PostgresHarness::shared().await;
    // A schema of its own: the `voided` row of the acquisition's owner id is the only one there.
    let schema = format!("ghost_{}", uuid::Uuid::new_v4().simple());
    let (a, faults) = harness.client_with(test_builder().schema(schema.clone())).await.unwrap();
    a.ping().await.unwrap();
    let name = unique("ghost");
    // The try reaches the proxy and waits there; the client gives up on it and, after its
    // timeout, abandons; then the partition heals and the held try reaches the server.
    faults.0.blackhole();
    let outcome = a.lock(&name).unwrap().acquire_timeout(Duration::from_millis(1200)).await;
    assert!(outcome.is_err(), "no grant through a blackhole");
    faults.0.heal();
    let admin = harness.admin().await;
    let stored = lockkit_postgres::stored_name(&name);
    // The abandon retries until it reaches the server. Until it has committed an empty table
    // proves nothing (the held try may land later); once the owner id is voided, a try that
    // landed before was deleted by it and every later one is refused.
    let deadline = Instant::now() + OPERATION * 2;
    while admin.query(&format!("SELECT 1 FROM {schema}.voided"), &[]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the abandonment never reached the server");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = admin.query(&format!("SELECT owner FROM {schema}.locks WHERE name = $1"), &[&stored]).await.unwrap();
    assert!(rows.is_empty(), "a ghost row of the abandoned acquisition remains");
    // A try of the acquisition that lands only now (as a held one may) is refused, unqueued.
    let owner: String = admin.query_one(&format!("SELECT owner FROM {schema}.voided"), &[]).await.unwrap().get(0);
    let late = admin
        .query_one(
            &format!("SELECT o_token FROM {schema}.acquire($1, $2, 'meta', 60000, 60000, 'mutex', 0)"),
            &[&stored, &owner],
        )
        .await
        .unwrap();
    assert_eq!(late.get::<_, Option<i64>>(0), None, "a late try of the abandoned acquisition is refused");
    let queued = admin.query(&format!("SELECT 1 FROM {schema}.waiters WHERE name = $1"), &[&stored]).await.unwrap();
    assert!(queued.is_empty(), "the late try took no place in the queue");
    let (b, _fb) = harness.client_with(test_builder().schema(schema.clone())).await.unwrap();
    let guard = within(OPERATION, "a try_acquire", b.lock(&name).unwrap().try_acquire()).await.unwrap();
    assert!(guard.is_some(), "the lock is free: no ghost");
    guard.unwrap().release().await.unwrap();
    drop((a, b));
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
}

#[tokio::test]
async fn providers_racing_to_create_a_schema_all_succeed() {
    let harness = PostgresHarness::shared().await;
    let schema = format!("race_{}", uuid::Uuid::new_v4().simple());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let provider = test_builder().url(url_of(harness.upstream())).schema(schema.clone()).build().unwrap();
        tasks.push(tokio::spawn(async move { provider.ping().await }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let provider = test_builder().url(url_of(harness.upstream())).schema(schema.clone()).build().unwrap();
    let guard = provider.lock("x").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();
    harness.admin().await.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_clear_error_naming_what_to_change() {
    let harness = PostgresHarness::shared().await;
    let addr = harness.upstream();
    let message = |result: lockkit_core::Result<PostgresLockProvider>| match result {
        Err(Error::InvalidConfig { message, .. }) => message,
        Err(other) => panic!("expected InvalidConfig, got {other}"),
        Ok(_) => panic!("expected InvalidConfig, got a provider"),
    };
    assert!(
        message(PostgresLockProvider::connect(&format!("postgres://postgres@{addr}")).await)
            .contains("names no database")
    );
    assert!(
        message(PostgresLockProvider::connect(&format!("postgres://postgres@{addr}/db?schema=Bad-Name")).await)
            .contains("not a valid schema name")
    );
    assert!(
        message(PostgresLockProvider::connect(&format!("postgres://postgres@{addr}/no_such_db")).await)
            .contains("does not exist")
    );
    let missing = format!("missing_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}?schema={missing}&migrate=false", url_of(addr));
    assert!(message(PostgresLockProvider::connect(&url).await).contains("migrate"));
}

#[tokio::test]
async fn a_role_that_can_only_take_locks_needs_just_the_documented_grants() {
    let harness = PostgresHarness::shared().await;
    let admin = harness.admin().await;
    let schema = format!("least_{}", uuid::Uuid::new_v4().simple());
    let role = format!("locker_{}", uuid::Uuid::new_v4().simple());
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    let as_role = |migrate: bool| {
        format!("postgres://{role}@{}/postgres?schema={schema}&migrate={migrate}&lease=2s", harness.upstream())
    };
    // The role may not create the schema: the error says how to get it made.
    let created = PostgresLockProvider::connect(&as_role(true)).await;
    let Err(Error::InvalidConfig { message, .. }) = created else {
        panic!("expected InvalidConfig, got {:?}", created.map(drop))
    };
    assert!(message.contains("may not create") && message.contains("migrate()"), "{message}");
    // The owner migrates; the role still lacks privileges, and is told which GRANTs to run.
    // The schema's creation is one transaction of some size: a loaded machine needs more than
    // the test clients' 600 ms statement timeout for it.
    let owner = test_builder()
        .response_timeout(OPERATION)
        .url(url_of(harness.upstream()))
        .schema(schema.clone())
        .build()
        .unwrap();
    owner.migrate().await.unwrap();
    let refused = PostgresLockProvider::connect(&as_role(false)).await;
    let Err(Error::InvalidConfig { message, .. }) = refused else {
        panic!("expected InvalidConfig, got {:?}", refused.map(drop))
    };
    assert!(message.contains("GRANT"), "{message}");
    let grants = message.split("run: ").nth(1).unwrap().to_owned();
    admin.batch_execute(&grants).await.unwrap();
    // With exactly those, it takes, renews, waits on and releases locks.
    let locker = PostgresLockProvider::connect(&as_role(false)).await.unwrap();
    let other = PostgresLockProvider::connect(&as_role(false)).await.unwrap();
    let guard = locker.lock("jobs/1").unwrap().acquire().await.unwrap();
    let waiter = tokio::spawn(async move { other.lock("jobs/1").unwrap().acquire_timeout(OPERATION * 2).await });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(guard.is_held(), "renewed by the role");
    assert!(locker.inspect("jobs/1").await.unwrap().holder().is_some());
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    let _ = next.release().await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE; DROP OWNED BY {role}; DROP ROLE {role}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_waiter_that_died_loses_its_place_in_the_queue() {
    let harness = PostgresHarness::shared().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (dead, dead_faults) = harness.client_with(test_builder()).await.unwrap();
    let (c, _fc) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("dead-waiter");
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    let dead_lock = dead.lock(&name).unwrap();
    let dead_waiter = tokio::spawn(async move { dead_lock.acquire().await.map(|g| g.token()) });
    let queued = |n: usize| {
        let a = a.clone();
        let name = name.clone();
        async move { a.inspect(&name).await.unwrap().waiters == Some(n) }
    };
    let deadline = Instant::now() + OPERATION;
    while !queued(1).await {
        assert!(Instant::now() < deadline, "the first waiter is queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let c_lock = c.lock(&name).unwrap();
    let live_waiter = tokio::spawn(async move { c_lock.acquire().await });
    while !queued(2).await {
        assert!(Instant::now() < deadline, "the second waiter is queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The head of the queue goes silent for good; the holder releases.
    dead_faults.0.blackhole();
    held.release().await.unwrap();
    // The live waiter is granted once the dead one's place lapses (about 5 s), not never.
    let guard = within(Duration::from_secs(10), "the live waiter's grant", live_waiter).await.unwrap().unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
    dead_waiter.abort();
}

/// Retries `attempt` while the server is away (a restart), up to `bound`.
async fn once_reachable<T, F, Fut>(bound: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lockkit_core::Result<T>>,
{
    within(bound, what, async {
        loop {
            match attempt().await {
                Ok(value) => return value,
                Err(error) if error.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(error) => panic!("{what}: {error}"),
            }
        }
    })
    .await
}

/// The server time of `alive.since`, in milliseconds since the epoch, if the row is there.
async fn alive_since_ms(admin: &tokio_postgres::Client) -> Option<i64> {
    let rows = admin.query("SELECT (extract(epoch FROM since) * 1000)::bigint FROM lockkit.alive", &[]).await.unwrap();
    rows.first().map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_fences_every_grant_for_a_lease_and_the_holder_it_lost_is_signalled_first() {
    let harness = PostgresHarness::dedicated().await;
    // The WAL writer flushes asynchronous commits every 10 s: a crash right after a grant
    // loses it, as it can on any server between two flushes. A restart puts the setting in
    // force before the grant (a reload reaches the WAL writer whenever it next looks, which on
    // a busy machine can be after the grant was flushed).
    let admin = harness.admin().await;
    admin.batch_execute("ALTER SYSTEM SET wal_writer_delay = '10s'").await.unwrap();
    drop(admin);
    harness.server().unwrap().lock().await.restart().await.unwrap();
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let (b, _fb) = harness.client_with(test_builder()).await.unwrap();
    b.ping().await.unwrap();
    let name = unique("crash");
    let stored = lockkit_postgres::stored_name(&name);
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    harness.server().unwrap().lock().await.crash_restart().await.unwrap();
    let admin = harness.admin().await;
    // Crash recovery emptied the unlogged table; the grant was lost with the WAL.
    assert_eq!(alive_since_ms(&admin).await, None, "crash recovery empties lockkit.alive");
    let kept = admin.query("SELECT 1 FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert!(kept.is_empty(), "the grant committed without a flush was lost in the crash");
    // The first try after the crash is refused, and starts the fence.
    let other = unique("crash-other");
    let first = once_reachable(OPERATION * 3, "a try after the crash", || async {
        b.lock(&other).unwrap().try_acquire().await
    })
    .await;
    assert!(first.is_none(), "no grant while the fence lasts, even of a free name");
    let since = alive_since_ms(&admin).await.expect("the first try after the crash writes lockkit.alive");
    // The holder whose grant was lost learns it (its renewal finds no row, or its deadline
    // passes) before anyone is granted its lock.
    let taken =
        once_reachable(LEASE * 4, "the lock after the fence", || async { b.lock(&name).unwrap().acquire().await })
            .await;
    let granted_at = Instant::now();
    assert!(!held.is_held(), "the lost holder is signalled before the next grant");
    let reason = within(Duration::from_millis(10), "the lost holder's signal", held.lost()).await;
    assert!(matches!(reason, LossReason::RecordGone | LossReason::DeadlineExpired), "{reason:?}");
    let row = admin
        .query_one("SELECT (extract(epoch FROM since) * 1000)::bigint FROM lockkit.locks WHERE name = $1", &[&stored])
        .await
        .unwrap();
    let granted_ms: i64 = row.get(0);
    let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
    assert!(
        granted_ms >= since + lease_ms,
        "granted at {granted_ms} ms, the fence ran from {since} ms for {lease_ms} ms"
    );
    // Tokens keep increasing although the sequence's advance was lost with the grant.
    assert!(taken.token() > held.token(), "{} after {}", taken.token(), held.token());
    assert!(granted_at.elapsed() < OPERATION);
    taken.release().await.unwrap();
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_keeps_holds_and_fences_nothing() {
    let harness = PostgresHarness::dedicated().await;
    let (a, _fa) = harness.client_with(test_builder()).await.unwrap();
    let name = unique("clean");
    let stored = lockkit_postgres::stored_name(&name);
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    let admin = harness.admin().await;
    let since = alive_since_ms(&admin).await;
    assert!(since.is_some());
    drop(admin);
    harness.server().unwrap().lock().await.restart().await.unwrap();
    let admin = harness.admin().await;
    assert_eq!(alive_since_ms(&admin).await, since, "a clean shutdown keeps lockkit.alive");
    // A free name is granted at once: no fence after a clean restart.
    let other = unique("clean-other");
    let free = once_reachable(OPERATION * 3, "a try after the restart", || async {
        a.lock(&other).unwrap().try_acquire().await
    })
    .await;
    free.expect("a free name is granted at once after a clean restart").release().await.unwrap();
    // The hold survived and is renewed after the restart.
    let restarted: i64 =
        admin.query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[]).await.unwrap().get(0);
    let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
    let deadline = Instant::now() + OPERATION * 2;
    loop {
        let row = admin
            .query_one(
                "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM lockkit.locks WHERE name = $1",
                &[&stored],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0) > restarted + lease_ms {
            break;
        }
        assert!(Instant::now() < deadline, "the hold is renewed after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(held.is_held());
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_grants_a_hold_survives_a_crash_and_nothing_is_fenced() {
    let harness = PostgresHarness::dedicated().await;
    // A lease that outlasts the crash and the recovery on a loaded machine.
    let durable =
        test_builder().durable_grants(true).lease(Duration::from_secs(20)).renew_every(Duration::from_secs(1));
    let (a, _fa) = harness.client_with(durable).await.unwrap();
    let name = unique("durable");
    let stored = lockkit_postgres::stored_name(&name);
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    harness.server().unwrap().lock().await.crash_restart().await.unwrap();
    let admin = harness.admin().await;
    let kept = admin.query("SELECT 1 FROM lockkit.locks WHERE name = $1", &[&stored]).await.unwrap();
    assert_eq!(kept.len(), 1, "a durable grant survives the crash");
    let other = unique("durable-other");
    let free = once_reachable(OPERATION * 3, "a try after the crash", || async {
        a.lock(&other).unwrap().try_acquire().await
    })
    .await;
    free.expect("no fence when every provider of the schema grants durably").release().await.unwrap();
    assert!(held.is_held());
    held.release().await.unwrap();
}

/// A role whose `lock_timeout` is shorter than another provider's migration still creates the
/// schema: the migration waits out the other's (within the statement timeout), whatever the
/// role sets for its own statements. Many schemas created at once on a loaded server once
/// made a migration give up at a 100 ms `lock_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_a_short_lock_timeout_waits_out_another_migration() {
    let harness = PostgresHarness::shared().await;
    let admin = harness.admin().await;
    let schema = format!("short_wait_{}", uuid::Uuid::new_v4().simple());
    let (role, url) = role_with_a_short_lock_timeout(&harness, &admin, "short_wait").await;
    let provider = test_builder().url(url).schema(schema.clone()).build().unwrap();
    // Another provider's migration in progress holds the migrations' advisory lock.
    let blocker = harness.admin().await;
    blocker.execute("SELECT pg_advisory_lock($1, 0)", &[&ADVISORY_CLASS]).await.unwrap();
    let name = unique("short-lock-timeout");
    let acquiring =
        tokio::spawn(async move { provider.lock(&name).unwrap().acquire().await.map(|guard| guard.token()) });
    waiting_for_the_advisory_lock(&admin, &format!("%CREATE SCHEMA IF NOT EXISTS {schema}%"), "the migration").await;
    // Keep the lock three times the role's lock timeout: a migration that obeyed it gives up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.execute("SELECT pg_advisory_unlock($1, 0)", &[&ADVISORY_CLASS]).await.unwrap();
    let granted = within(OPERATION, "the grant after the other migration", acquiring).await.unwrap();
    assert!(granted.is_ok(), "the migration gave up at the role's lock timeout: {granted:?}");
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE; DROP ROLE {role}")).await.unwrap();
}

/// A new superuser role, named from `prefix`, whose statements wait at most 100 ms for a lock
/// (then fail with SQLSTATE 55P03), and a URL that logs in as it.
async fn role_with_a_short_lock_timeout(
    harness: &PostgresHarness,
    admin: &tokio_postgres::Client,
    prefix: &str,
) -> (String, String) {
    let role = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN SUPERUSER; ALTER ROLE {role} SET lock_timeout = '100ms'"))
        .await
        .unwrap();
    let url = format!("postgres://{role}@{}/postgres", harness.upstream());
    (role, url)
}

/// The first key of the advisory locks the schema's functions take on a name (`sql.rs`).
const ADVISORY_CLASS: i32 = 0x6c6b_6b74;

/// The backend of the statement matching `pattern` (a `LIKE` pattern of its text) once it waits
/// for an advisory lock.
async fn waiting_for_the_advisory_lock(admin: &tokio_postgres::Client, pattern: &str, what: &str) -> i32 {
    let waits = "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' \
                 AND query LIKE $1";
    let deadline = Instant::now() + OPERATION;
    loop {
        if let Some(row) = admin.query(waits, &[&pattern]).await.unwrap().first() {
            return row.get(0);
        }
        assert!(Instant::now() < deadline, "{what} waits for the name's advisory lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Returns once backend `pid` no longer waits for an advisory lock in the statement matching
/// `pattern` (the server ended that wait).
async fn no_longer_waiting(admin: &tokio_postgres::Client, pid: i32, pattern: &str, what: &str) {
    let still = "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'advisory' AND query LIKE $2";
    let deadline = Instant::now() + OPERATION;
    while !admin.query(still, &[&pid, &pattern]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How the server interrupts an abandon that waits for the name's advisory lock.
#[derive(Clone, Copy, Debug)]
enum Interrupt {
    /// The role's `lock_timeout` (100 ms) ends the wait: SQLSTATE 55P03.
    LockTimeout,
    /// `pg_cancel_backend`: SQLSTATE 57014.
    Cancel,
    /// `pg_terminate_backend` ends the abandon's connection: SQLSTATE 57P01.
    Terminate,
}

/// A queued acquisition (or, with `campaign`, a waiting campaign) is cancelled while another
/// session holds the name's advisory lock (as a release in progress does), so that its abandon
/// waits for it; the server then ends the abandon's statement with a transient error
/// (`interrupt`), and lets the lock go. The abandon must still complete: its owner voided, its
/// place in the queue gone.
async fn an_abandon_interrupted_still_completes(interrupt: Interrupt, campaign: bool) {
    let harness = PostgresHarness::shared().await;
    let admin = harness.admin().await;
    let schema = format!("transient_{}", uuid::Uuid::new_v4().simple());
    let (role, url) = match interrupt {
        Interrupt::LockTimeout => role_with_a_short_lock_timeout(&harness, &admin, "transient").await,
        Interrupt::Cancel | Interrupt::Terminate => (String::new(), url_of(harness.upstream())),
    };
    // A response timeout (and so a statement timeout) far above the test's waits: only the
    // interruption ends the abandon's statement.
    let builder = || test_builder().response_timeout(Duration::from_secs(10)).url(url.clone()).schema(schema.clone());
    let holder = builder().build().unwrap();
    let waiter = builder().build().unwrap();
    let name = unique("transient");
    let stored = lockkit_postgres::stored_name(&name);
    let held = async {
        if campaign {
            holder.election(&name).unwrap().campaign("a").await
        } else {
            holder.lock(&name).unwrap().acquire().await
        }
    };
    let guard = within(OPERATION, "the holder's grant", held).await.unwrap();
    // The waiter's listening connection first, by a wait that times out: then the acquisition
    // below registers its wake-up before its first try, and that refused try is the only one
    // it sends before it waits (else a second try, sent once the listener is up, could be the
    // statement that waits for the advisory lock, with the abandon queued behind it).
    if !campaign {
        let warm = waiter.lock(&name).unwrap().acquire_timeout(Duration::from_millis(50)).await;
        assert!(warm.is_err(), "the lock is held");
    }
    let queued = if campaign {
        format!("SELECT owner, xmin::text FROM {schema}.candidates WHERE name = $1 AND token IS NULL")
    } else {
        format!("SELECT owner, xmin::text FROM {schema}.waiters WHERE name = $1")
    };
    let voided = format!("SELECT 1 FROM {schema}.voided WHERE owner = $1");
    let deadline = Instant::now() + OPERATION;
    while !admin.query(&queued, &[&stored]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the timed-out wait left the queue");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (lock, election) = (waiter.lock(&name).unwrap(), waiter.election(&name).unwrap());
    let waiting = tokio::spawn(async move {
        let wait = Duration::from_secs(60);
        if campaign { election.campaign_timeout("b", wait).await } else { lock.acquire_timeout(wait).await }
            .map(|g| g.token())
    });
    let deadline = Instant::now() + OPERATION;
    let (owner, first): (String, String) = loop {
        if let Some(row) = admin.query(&queued, &[&stored]).await.unwrap().first() {
            break (row.get(0), row.get(1));
        }
        assert!(Instant::now() < deadline, "the waiter is queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if campaign {
        // A campaign tries once more once its wake-up is registered: wait for that try (it
        // renews the place: a new row version), so that the abandon is the statement that
        // waits below, not that try with the abandon queued behind it.
        while admin.query(&queued, &[&stored]).await.unwrap().first().map(|row| row.get::<_, String>(1))
            == Some(first.clone())
        {
            assert!(Instant::now() < deadline, "the campaign's second try");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let blocker = harness.admin().await;
    blocker.execute("SELECT pg_advisory_lock($1, hashtext($2))", &[&ADVISORY_CLASS, &stored]).await.unwrap();
    waiting.abort();
    let _ = waiting.await;
    // The abandon sent on the cancellation waits for the advisory lock.
    let pattern = format!("%{schema}.abandon%");
    let pid = waiting_for_the_advisory_lock(&admin, &pattern, "the abandon").await;
    match interrupt {
        Interrupt::LockTimeout => {}
        Interrupt::Cancel => {
            admin.execute("SELECT pg_cancel_backend($1)", &[&pid]).await.unwrap();
        }
        Interrupt::Terminate => {
            admin.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
        }
    }
    // That statement ended while the lock was still held: with the server's error.
    let what = format!("the abandon's wait was interrupted ({interrupt:?})");
    no_longer_waiting(&admin, pid, &pattern, &what).await;
    blocker.execute("SELECT pg_advisory_unlock($1, hashtext($2))", &[&ADVISORY_CLASS, &stored]).await.unwrap();
    // The abandon is retried, and completes.
    let deadline = Instant::now() + OPERATION * 3;
    while admin.query(&voided, &[&owner]).await.unwrap().is_empty()
        || !admin.query(&queued, &[&stored]).await.unwrap().is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the abandon gave up at the server's error ({interrupt:?}): the place remains"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.release().await.unwrap();
    drop((holder, waiter));
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
    if matches!(interrupt, Interrupt::LockTimeout) {
        admin.batch_execute(&format!("DROP ROLE {role}")).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandon_rides_out_a_lock_timeout() {
    an_abandon_interrupted_still_completes(Interrupt::LockTimeout, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandon_rides_out_a_cancelled_statement() {
    an_abandon_interrupted_still_completes(Interrupt::Cancel, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandon_rides_out_the_termination_of_its_connection() {
    an_abandon_interrupted_still_completes(Interrupt::Terminate, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_given_up_rides_out_a_lock_timeout() {
    an_abandon_interrupted_still_completes(Interrupt::LockTimeout, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_given_up_rides_out_the_termination_of_its_connection() {
    an_abandon_interrupted_still_completes(Interrupt::Terminate, true).await;
}

/// A release whose delete the server rolled back (a lock timeout while it waited for the name's
/// advisory lock: it did nothing) and that then finds its row gone reports the hold lost (the
/// row went behind the holder's back), not released: only a delete whose reply was lost may
/// have been the one that removed the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rolled_back_then_finding_its_row_gone_reports_the_loss() {
    let harness = PostgresHarness::shared().await;
    let admin = harness.admin().await;
    let schema = format!("rolledback_{}", uuid::Uuid::new_v4().simple());
    let (role, url) = role_with_a_short_lock_timeout(&harness, &admin, "rolledback").await;
    // A lease far longer than the test, so that no renewal round notices the deletion first.
    let provider = test_builder()
        .lease(Duration::from_secs(60))
        .renew_every(Duration::from_secs(20))
        .response_timeout(Duration::from_secs(10))
        .url(url)
        .schema(schema.clone())
        .build()
        .unwrap();
    let name = unique("rolled-back");
    let stored = lockkit_postgres::stored_name(&name);
    let guard = within(OPERATION, "the grant", provider.lock(&name).unwrap().acquire()).await.unwrap();
    let blocker = harness.admin().await;
    blocker.execute("SELECT pg_advisory_lock($1, hashtext($2))", &[&ADVISORY_CLASS, &stored]).await.unwrap();
    let release = tokio::spawn(guard.release());
    let pattern = format!("%{schema}.release%");
    let pid = waiting_for_the_advisory_lock(&admin, &pattern, "the release").await;
    // The row goes behind the holder's back while its release waits.
    let deleted = admin.execute(&format!("DELETE FROM {schema}.locks WHERE name = $1"), &[&stored]).await.unwrap();
    assert_eq!(deleted, 1);
    // The lock timeout rolls the waiting delete back; then the name's lock is let go.
    no_longer_waiting(&admin, pid, &pattern, "the lock timeout ended the release's wait").await;
    blocker.execute("SELECT pg_advisory_unlock($1, hashtext($2))", &[&ADVISORY_CLASS, &stored]).await.unwrap();
    let outcome = within(OPERATION, "the release's outcome", release).await.unwrap();
    assert!(
        matches!(outcome, Err(Error::LockLost { reason: LossReason::RecordGone, .. })),
        "a release that found its row gone after a rolled-back delete: {outcome:?}"
    );
    drop(provider);
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
    admin.batch_execute(&format!("DROP ROLE {role}")).await.unwrap();
}
