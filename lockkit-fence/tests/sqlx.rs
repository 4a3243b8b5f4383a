//! The PostgreSQL fence on sqlx (feature `sqlx`): the fence cases through a table of values
//! written by sqlx transactions that call `PgFence::sqlx_check`, on a real server (crashed and
//! restarted for behaviour 32).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode};
use lockkit_fence::postgres::PgFence;
use lockkit_fence::{FenceError, FenceSink, FenceState};
use lockkit_testkit::fixture::PostgresServer;
use lockkit_testkit::{FaultResult, FenceHarness, Unsupported};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// A table of values, each write one sqlx transaction: the check, then the upsert.
#[derive(Debug)]
struct SqlxValues {
    conn: tokio::sync::Mutex<PgConnection>,
    fence: PgFence,
}

const TABLE: &str = "lockkit_fence.sqlx_values";

fn failed(what: &'static str) -> impl FnOnce(sqlx::Error) -> FenceError {
    move |error| FenceError::store("postgres", what, error)
}

impl SqlxValues {
    async fn open(url: &str) -> Self {
        let mut conn = PgConnection::connect(url).await.unwrap_or_else(|error| panic!("connect: {error}"));
        let fence = PgFence::new();
        fence.sqlx_migrate(&mut conn).await.unwrap();
        let create = "SELECT pg_advisory_xact_lock(hashtext('sqlx_values'));
             CREATE TABLE IF NOT EXISTS lockkit_fence.sqlx_values (resource text PRIMARY KEY, value bytea NOT NULL);";
        sqlx::Executor::execute(&mut conn, create).await.unwrap();
        Self { conn: tokio::sync::Mutex::new(conn), fence }
    }
}

#[async_trait]
impl FenceSink for SqlxValues {
    fn name(&self) -> &'static str {
        "postgres (sqlx)"
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        if fence.mode() == FenceMode::Read {
            return Err(FenceError::invalid("a read fence cannot write"));
        }
        let mut conn = self.conn.lock().await;
        let mut tx = conn.begin().await.map_err(failed("BEGIN"))?;
        self.fence.sqlx_check(&mut tx, resource, fence).await?;
        sqlx::query(&format!(
            "INSERT INTO {TABLE} (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = excluded.value"
        ))
        .bind(resource)
        .bind(value)
        .execute(&mut *tx)
        .await
        .map_err(failed("the upsert"))?;
        tx.commit().await.map_err(failed("COMMIT"))
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        // A read, whatever the guard: it must not raise the highest.
        let as_read = Fence::new(fence.lock().clone(), fence.token(), FenceMode::Read);
        let mut conn = self.conn.lock().await;
        let mut tx = conn.begin().await.map_err(failed("BEGIN"))?;
        self.fence.sqlx_check(&mut tx, resource, &as_read).await?;
        let value: Option<(Vec<u8>,)> = sqlx::query_as(&format!("SELECT value FROM {TABLE} WHERE resource = $1"))
            .bind(resource)
            .fetch_optional(&mut *tx)
            .await
            .map_err(failed("the select"))?;
        tx.commit().await.map_err(failed("COMMIT"))?;
        Ok(value.map(|(value,)| value))
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        let mut conn = self.conn.lock().await;
        self.fence.sqlx_state(&mut conn, resource).await
    }
}

struct SqlxHarness {
    server: tokio::sync::Mutex<PostgresServer>,
    url: String,
}

impl SqlxHarness {
    async fn start() -> Self {
        let server = PostgresServer::start().await.unwrap_or_else(|error| panic!("PostgreSQL: {error}"));
        Self { url: server.url(), server: tokio::sync::Mutex::new(server) }
    }
}

#[async_trait]
impl FenceHarness for SqlxHarness {
    fn name(&self) -> String {
        "postgres fence (sqlx)".to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        Arc::new(SqlxValues::open(&self.url).await)
    }

    async fn isolated(&self) -> Result<Arc<dyn FenceHarness>, Unsupported> {
        Ok(Arc::new(Self::start().await))
    }

    async fn restart_store(&self) -> FaultResult {
        let mut server = self.server.lock().await;
        server.crash_restart().await.unwrap_or_else(|error| panic!("crash and restart PostgreSQL: {error}"));
        Ok(())
    }
}

lockkit_testkit::fence_conformance!(crate::SqlxHarness::start().await);

/// The fenced table on sqlx: the migration, the application's `UPDATE` with the fence's two
/// values bound, and a stale one turned into `FenceError::Stale` by `sqlx_error`.
#[test]
fn the_fenced_table_s_refusals_are_typed_on_sqlx() {
    use lockkit_core::{FencingToken, LockId, LockName};
    use lockkit_fence::postgres::PgFencedTable;

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let server = PostgresServer::start().await.unwrap_or_else(|error| panic!("PostgreSQL: {error}"));
        let mut conn = PgConnection::connect(&server.url()).await.unwrap();
        sqlx::Executor::execute(&mut conn, "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)")
            .await
            .unwrap();
        let accounts = PgFencedTable::new(&PgFence::new(), "accounts").unwrap();
        accounts.sqlx_migrate(&mut conn).await.unwrap();
        let lock = LockId::new("fence-tests://sqlx", LockName::new("accounts").unwrap()).unwrap();
        let insert = "INSERT INTO accounts (id, balance, lockkit_lock, lockkit_token) VALUES (1, $1, $2, $3)
                      ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, lockkit_lock = excluded.lockkit_lock, lockkit_token = excluded.lockkit_token";
        let mut write = async |token: u64, balance: i64| {
            let fence = Fence::new(lock.clone(), FencingToken::new(token), FenceMode::Write);
            let (lock, token) = accounts.values(&fence).unwrap();
            let sent = sqlx::query(insert).bind(balance).bind(lock).bind(token).execute(&mut conn).await;
            sent.map(drop).map_err(|error| accounts.sqlx_error(error, "accounts/1", &fence))
        };
        write(5, 10).await.unwrap();
        match write(4, 20).await {
            Err(FenceError::Stale { token, highest, .. }) => assert_eq!((token.get(), highest.get()), (4, 5)),
            other => panic!("a stale write on sqlx: {other:?}"),
        }
        write(6, 30).await.unwrap();
    });
}
