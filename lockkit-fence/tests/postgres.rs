//! The PostgreSQL fence against a real server the testkit starts: the fence cases through
//! `PgFencedValues` (the server crashed and restarted for behaviour 32), the check inside an
//! application's transaction (a refusal rolls the write back), writers of one resource
//! committing in token order, a missing migration, and the documented `psql` script.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use lockkit_core::{Fence, FenceMode, FencingToken};
use lockkit_fence::FenceError;
use lockkit_fence::postgres::PgFence;
use tokio_postgres::Client;

mod support;

use support::{PgHarness, connect, psql_script_is_fenced, runtime, server, write_fence};

lockkit_testkit::fence_conformance!(crate::PgHarness::start("postgres fence", crate::support::open_values).await);

fn unique(what: &str) -> String {
    format!("{what}_{}", uuid::Uuid::new_v4().simple())
}

/// An application table with one row, and the fence migrated.
async fn orders(client: &Client) -> String {
    let table = unique("orders");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, status text); INSERT INTO {table} VALUES (42, 'new');"
        ))
        .await
        .unwrap();
    PgFence::new().migrate(client).await.unwrap();
    table
}

async fn status(client: &Client, table: &str) -> String {
    client.query_one(&format!("SELECT status FROM {table} WHERE id = 42"), &[]).await.unwrap().get(0)
}

#[test]
fn a_refused_check_rolls_the_application_s_write_back() {
    runtime().block_on(async {
        let mut client = connect(&server().await).await;
        let table = orders(&client).await;
        let pg = PgFence::new();
        let update = format!("UPDATE {table} SET status = $1 WHERE id = 42");
        let resource = unique("order");

        let tx = client.transaction().await.unwrap();
        let write = tx.execute(&update, &[&"paid"]);
        assert_eq!(pg.check_with(&tx, &resource, &write_fence("o", 8), write).await.unwrap(), 1);
        tx.commit().await.unwrap();

        // A paused holder's transaction: the check is refused, the write fails with it, and the
        // transaction cannot commit.
        let tx = client.transaction().await.unwrap();
        let write = tx.execute(&update, &[&"stale"]);
        match pg.check_with(&tx, &resource, &write_fence("o", 7), write).await {
            Err(FenceError::Stale { token, highest, .. }) => assert_eq!((token.get(), highest.get()), (7, 8)),
            other => panic!("expected Stale, got {other:?}"),
        }
        // COMMIT of an aborted transaction rolls it back (PostgreSQL answers ROLLBACK).
        tx.commit().await.unwrap();
        assert_eq!(status(&client, &table).await, "paid");

        // The same with the check first, then the write, as separate statements.
        let tx = client.transaction().await.unwrap();
        let refused = pg.check(&tx, &resource, &write_fence("o", 7)).await;
        assert!(refused.as_ref().is_err_and(FenceError::is_stale), "{refused:?}");
        drop(tx);
        let tx = client.transaction().await.unwrap();
        pg.check(&tx, &resource, &write_fence("o", 9)).await.unwrap();
        tx.execute(&update, &[&"shipped"]).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(status(&client, &table).await, "shipped");
        let state = pg.state(&client, &resource).await.unwrap().unwrap();
        assert_eq!(state.highest, FencingToken::new(9));
    });
}

/// Two writers of one resource in concurrent transactions: the second waits for the first's
/// row lock, then checks against what the first committed.
#[test]
fn concurrent_writers_of_one_resource_commit_in_token_order() {
    runtime().block_on(async {
        let url = server().await;
        let (mut first, second) = (connect(&url).await, connect(&url).await);
        PgFence::new().migrate(&first).await.unwrap();
        let resource = unique("contended");
        let pg = PgFence::new();
        let tx = first.transaction().await.unwrap();
        pg.check(&tx, &resource, &write_fence("c", 20)).await.unwrap();
        let waiting = tokio::spawn(async move {
            let mut second = second;
            let tx = second.transaction().await.unwrap();
            PgFence::new().check(&tx, &resource, &write_fence("c", 19)).await
        });
        let observer = connect(&url).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let waits: i64 = observer
                .query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'", &[])
                .await
                .unwrap()
                .get(0);
            if waits > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the second writer never waited for the first's row lock");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tx.commit().await.unwrap();
        let outcome = waiting.await.unwrap();
        match outcome {
            Err(FenceError::Stale { token, highest, .. }) => assert_eq!((token.get(), highest.get()), (19, 20)),
            other => panic!("the second writer checks against the first's commit: {other:?}"),
        }
    });
}

#[test]
fn a_missing_migration_says_what_creates_it() {
    runtime().block_on(async {
        let mut client = connect(&server().await).await;
        let pg = PgFence::with_schema(&unique("never_migrated")).unwrap();
        let tx = client.transaction().await.unwrap();
        match pg.check(&tx, "r", &write_fence("m", 1)).await {
            Err(FenceError::NotSetUp { how, .. }) => assert!(how.contains("PgFence::migrate"), "{how}"),
            other => panic!("expected NotSetUp, got {other:?}"),
        }
        drop(tx);
        assert!(matches!(pg.state(&client, "r").await, Err(FenceError::NotSetUp { .. })));
        assert!(PgFence::with_schema("Bad-Name").unwrap_err().to_string().contains("plain identifier"));
        let tx = client.transaction().await.unwrap();
        let huge = Fence::new(write_fence("m", 1).lock().clone(), FencingToken::new(u64::MAX), FenceMode::Write);
        assert!(matches!(PgFence::new().check(&tx, "r", &huge).await, Err(FenceError::InvalidInput { .. })));
    });
}

/// The function refuses bad input itself, for callers in any language.
#[test]
fn the_sql_function_refuses_bad_input_with_its_own_sqlstate() {
    runtime().block_on(async {
        let client = connect(&server().await).await;
        PgFence::new().migrate(&client).await.unwrap();
        let long = "x".repeat(1025);
        for (resource, lock, token, mode) in [
            ("", "s#n", 1i64, "write"),
            (long.as_str(), "s#n", 1, "write"),
            ("r", "", 1, "write"),
            ("r", "s#n", -1, "write"),
            ("r", "s#n", 1, "append"),
        ] {
            let error = client
                .query("SELECT lockkit_fence.fence($1, $2, $3, $4)", &[&resource, &lock, &token, &mode])
                .await
                .unwrap_err();
            let db = error.as_db_error().unwrap();
            assert_eq!(db.code().code(), "LKF03", "{resource:.10} {lock} {token} {mode}: {}", db.message());
        }
    });
}

/// The crate docs' `psql` script, as `lockkit run` would run it: the first holder's update
/// commits; a stale token makes psql fail with the fence's SQLSTATE and changes nothing.
#[test]
fn the_documented_psql_script_fences_the_update() {
    runtime().block_on(async {
        let url = server().await;
        let client = connect(&url).await;
        let table = orders(&client).await;
        let sql = format!(
            "BEGIN;\nSELECT lockkit_fence.fence('{table}/42', :'lock_id', :token, 'write');\nUPDATE {table} SET status = :'status' WHERE id = 42;\nCOMMIT;\n"
        );
        psql_script_is_fenced(&url, &sql, "status", ("shipped", "stale"));
        assert_eq!(status(&client, &table).await, "shipped");
    });
}

/// A fence whose migration never ran, or ran and lost its function: the check says what
/// creates it, and the application's write sent with it does not land.
#[test]
fn a_missing_migration_writes_nothing() {
    runtime().block_on(async {
        let mut client = connect(&server().await).await;
        let table = orders(&client).await;
        let half = unique("half_migrated");
        let half_fence = PgFence::with_schema(&half).unwrap();
        half_fence.migrate(&client).await.unwrap();
        client.batch_execute(&format!("DROP FUNCTION {half}.fence(text, text, bigint, text)")).await.unwrap();
        for pg in [PgFence::with_schema(&unique("never_migrated")).unwrap(), half_fence] {
            let tx = client.transaction().await.unwrap();
            let update = format!("UPDATE {table} SET status = 'shipped' WHERE id = 42");
            let refused = pg.check_with(&tx, "orders/42", &write_fence("m", 1), tx.execute(&update, &[])).await;
            match refused {
                Err(FenceError::NotSetUp { how, .. }) => {
                    assert!(how.contains(pg.schema()) && how.contains("PgFence::migrate"), "{how}");
                }
                other => panic!("schema {}: expected NotSetUp, got {other:?}", pg.schema()),
            }
            // A commit of the aborted transaction rolls back.
            let _ = tx.commit().await;
            assert_eq!(status(&client, &table).await, "new", "schema {}: nothing written", pg.schema());
        }
    });
}

/// The SQL function, as `psql` calls it, refuses a token of another lock with its own
/// SQLSTATE and a message naming the lock that guards the resource; the script's update does
/// not land.
#[test]
fn the_sql_function_refuses_a_token_of_another_lock() {
    runtime().block_on(async {
        let client = connect(&server().await).await;
        let table = orders(&client).await;
        let resource = unique("orders/42");
        let script = |lock: &str, token: u64, status: &str| {
            format!(
                "BEGIN; SELECT lockkit_fence.fence('{resource}', '{lock}', {token}, 'write'); \
                 UPDATE {table} SET status = '{status}' WHERE id = 42; COMMIT;"
            )
        };
        let (guarding, other) = (write_fence("a", 5).lock().to_string(), write_fence("b", 99).lock().to_string());
        client.batch_execute(&script(&guarding, 5, "paid")).await.unwrap();
        let error = client.batch_execute(&script(&other, 99, "foreign")).await.unwrap_err();
        let _ = client.batch_execute("ROLLBACK").await;
        let db = error.as_db_error().unwrap();
        assert_eq!(db.code().code(), lockkit_fence::postgres::FOREIGN_LOCK_SQLSTATE, "{}", db.message());
        assert!(db.message().contains(&guarding) && db.message().contains(&other), "{}", db.message());
        assert!(db.hint().is_some_and(|hint| hint.contains("write it under the lock")), "{:?}", db.hint());
        assert_eq!(status(&client, &table).await, "paid", "the foreign write changed nothing");
    });
}
