//! The fenced table (the fence on the application's own rows) against a real server the
//! testkit starts: the fence cases through `PgFencedRows` (the server crashed and restarted
//! for behaviour 32), an application table's UPDATE, INSERT, upsert, DELETE and read, writers
//! of one row committing in token order, and the documented `psql` script.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use lockkit_core::{Fence, FenceMode, FencingToken};
use lockkit_fence::FenceError;
use lockkit_fence::postgres::{PgFence, PgFencedTable};
use tokio_postgres::Client;

mod support;

use support::{PgHarness, connect, psql_script_is_fenced, runtime, server, write_fence};

lockkit_testkit::fence_conformance!(crate::PgHarness::start("postgres fenced table", crate::support::open_rows).await);

/// A fresh fenced `accounts` table with one row never fenced (id 1, balance 100).
async fn accounts(client: &Client) -> PgFencedTable {
    let name = format!("accounts_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!(
            "CREATE TABLE {name} (id int PRIMARY KEY, balance bigint NOT NULL); INSERT INTO {name} VALUES (1, 100);"
        ))
        .await
        .unwrap();
    let table = PgFencedTable::new(&PgFence::new(), &name).unwrap();
    table.migrate(client).await.unwrap();
    table.migrate(client).await.unwrap(); // idempotent
    table
}

/// `UPDATE <table> SET balance = $2, lock = $3, token = $4 WHERE id = $1`, its error typed.
async fn set_balance(
    client: &Client,
    table: &PgFencedTable,
    id: i32,
    balance: i64,
    fence: &Fence,
) -> Result<u64, FenceError> {
    let (lock, token) = table.values(fence).unwrap();
    let update = format!(
        "UPDATE {} SET balance = $2, {} = $3, {} = $4 WHERE id = $1",
        table.table(),
        table.lock_column(),
        table.token_column()
    );
    client.execute(&update, &[&id, &balance, &lock, &token]).await.map_err(|e| table.error(e, "accounts/1", fence))
}

async fn balance(client: &Client, table: &PgFencedTable, id: i32) -> Option<i64> {
    let row = client.query_opt(&format!("SELECT balance FROM {} WHERE id = $1", table.table()), &[&id]).await.unwrap();
    row.map(|row| row.get(0))
}

#[test]
fn the_application_s_update_is_fenced_on_its_own_row() {
    runtime().block_on(async {
        let client = connect(&server().await).await;
        let table = accounts(&client).await;
        // An unfenced write of a fenced table is refused, even of a row never fenced.
        let bare = client.execute(&format!("UPDATE {} SET balance = 1 WHERE id = 1", table.table()), &[]).await;
        let bare = table.error(bare.unwrap_err(), "accounts/1", &write_fence("a", 1));
        assert!(matches!(&bare, FenceError::InvalidInput { message } if message.contains("must set")), "{bare}");
        assert_eq!(set_balance(&client, &table, 1, 90, &write_fence("a", 5)).await.unwrap(), 1);
        assert_eq!(
            set_balance(&client, &table, 1, 80, &write_fence("a", 5)).await.unwrap(),
            1,
            "an equal token writes"
        );
        match set_balance(&client, &table, 1, 70, &write_fence("a", 4)).await {
            Err(FenceError::Stale { token, highest, .. }) => {
                assert_eq!((token.get(), highest.get()), (4, 5));
            }
            other => panic!("a stale update: {other:?}"),
        }
        let foreign = set_balance(&client, &table, 1, 60, &write_fence("b", 9)).await;
        assert!(
            matches!(&foreign, Err(FenceError::ForeignLock { expected, .. }) if expected.ends_with("#a")),
            "{foreign:?}"
        );
        assert_eq!(balance(&client, &table, 1).await, Some(80), "refused writes changed nothing");
        assert_eq!(set_balance(&client, &table, 1, 50, &write_fence("a", 7)).await.unwrap(), 1);
        assert_eq!(balance(&client, &table, 1).await, Some(50));
    });
}

#[test]
fn inserts_upserts_and_deletes_are_fenced() {
    runtime().block_on(async {
        let client = connect(&server().await).await;
        let table = accounts(&client).await;
        let (name, lock_col, token_col) = (table.table(), table.lock_column(), table.token_column());
        let (lock, token) = table.values(&write_fence("a", 10)).unwrap();
        let insert = format!("INSERT INTO {name} (id, balance, {lock_col}, {token_col}) VALUES ($1, $2, $3, $4)");
        client.execute(&insert, &[&2_i32, &5_i64, &lock, &token]).await.unwrap();
        let bare = client.execute(&format!("INSERT INTO {name} VALUES (3, 1)"), &[]).await.unwrap_err();
        assert!(matches!(table.error(bare, "accounts/3", &write_fence("a", 1)), FenceError::InvalidInput { .. }));
        // The upsert's UPDATE is checked against the row.
        let upsert = format!(
            "{insert} ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, {lock_col} = excluded.{lock_col}, {token_col} = excluded.{token_col}"
        );
        let (_, stale) = table.values(&write_fence("a", 9)).unwrap();
        let refused = client.execute(&upsert, &[&2_i32, &6_i64, &lock, &stale]).await.unwrap_err();
        assert!(table.error(refused, "accounts/2", &write_fence("a", 9)).is_stale());
        assert_eq!(balance(&client, &table, 2).await, Some(5));

        // A delete needs the transaction's fence, and a fence that admits the row.
        let bare = client.execute(&format!("DELETE FROM {name} WHERE id = 2"), &[]).await.unwrap_err();
        assert!(matches!(table.error(bare, "accounts/2", &write_fence("a", 1)), FenceError::InvalidInput { .. }));
        let mut client = client;
        for (token, deleted) in [(9_u64, false), (10, true)] {
            let tx = client.transaction().await.unwrap();
            let (lock, _) = table.values(&write_fence("a", token)).unwrap();
            tx.execute(table.delete_fence_statement(), &[&lock, &token.to_string()]).await.unwrap();
            let outcome = tx.execute(&format!("DELETE FROM {name} WHERE id = 2"), &[]).await;
            match outcome {
                Ok(rows) => {
                    assert!(deleted, "a stale delete went through");
                    assert_eq!(rows, 1);
                    tx.commit().await.unwrap();
                }
                Err(error) => {
                    assert!(!deleted, "{error}");
                    assert!(table.error(error, "accounts/2", &write_fence("a", token)).is_stale());
                }
            }
        }
        assert_eq!(balance(&client, &table, 2).await, None);
    });
}

#[test]
fn a_read_with_a_token_is_checked_against_the_row() {
    runtime().block_on(async {
        let client = connect(&server().await).await;
        let table = accounts(&client).await;
        set_balance(&client, &table, 1, 90, &write_fence("a", 5)).await.unwrap();
        let select =
            format!("SELECT {}, {} FROM {} WHERE id = 1", table.lock_column(), table.token_column(), table.table());
        let row = client.query_one(&select, &[]).await.unwrap();
        let (lock, token): (Option<String>, Option<i64>) = (row.get(0), row.get(1));
        let reader =
            |token| Fence::new(write_fence("a", token).lock().clone(), FencingToken::new(token), FenceMode::Read);
        table.check_read("accounts/1", lock.as_deref(), token, &reader(5)).unwrap();
        let stale = table.check_read("accounts/1", lock.as_deref(), token, &reader(4));
        assert!(matches!(stale, Err(FenceError::Stale { .. })), "{stale:?}");
        // A row never fenced reads under any fence.
        table.check_read("accounts/9", None, None, &reader(1)).unwrap();
    });
}

#[test]
fn writers_of_one_row_commit_in_token_order() {
    runtime().block_on(async {
        let url = server().await;
        let mut first = connect(&url).await;
        let second = connect(&url).await;
        let table = accounts(&first).await;
        // The newer holder's transaction writes first and holds the row; the older one's write
        // waits for it, then sees its token and is refused.
        let tx = first.transaction().await.unwrap();
        let (lock, token) = table.values(&write_fence("a", 8)).unwrap();
        let update = format!(
            "UPDATE {} SET balance = $2, {} = $3, {} = $4 WHERE id = $1",
            table.table(),
            table.lock_column(),
            table.token_column()
        );
        tx.execute(&update, &[&1_i32, &8_i64, &lock, &token]).await.unwrap();
        let older = {
            let table = table.clone();
            tokio::spawn(async move {
                let outcome = set_balance(&second, &table, 1, 7, &write_fence("a", 7)).await;
                (outcome, second)
            })
        };
        // Wait (bounded) until the older writer is blocked on the row lock. The watcher polls
        // from its own connection: inside a transaction, `pg_stat_activity` is a snapshot taken
        // at its first read, so polling from `tx` would never see a wait that began later.
        let watcher = connect(&url).await;
        let blocked = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE {} %'",
            table.table()
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let waiting: i64 = watcher.query_one(&blocked, &[]).await.unwrap().get(0);
            if waiting > 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the older writer never waited on the row");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        tx.commit().await.unwrap();
        let (outcome, _second) = older.await.unwrap();
        assert!(matches!(outcome, Err(FenceError::Stale { .. })), "{outcome:?}");
        assert_eq!(balance(&first, &table, 1).await, Some(8));
    });
}

#[test]
fn the_documented_psql_update_is_fenced() {
    runtime().block_on(async {
        let url = server().await;
        let client = connect(&url).await;
        let table = accounts(&client).await;
        let sql = format!(
            "UPDATE {} SET balance = :balance, lockkit_lock = :'lock_id', lockkit_token = :token WHERE id = 1;\n",
            table.table()
        );
        psql_script_is_fenced(&url, &sql, "balance", ("1", "2"));
        assert_eq!(balance(&client, &table, 1).await, Some(1));
    });
}
