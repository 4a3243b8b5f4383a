//! The sinks the fenced chaos runs write through, opened from a target: the lockkit-fence sink
//! of the store (`postgres://…`: `PgFencedValues`, a transaction of the fence check and an
//! upsert; `redis://…`: `RedisFence`, one script call; `file://DIR`: `FileFence`, an atomic
//! replace), and for the planted bug the same store written with a plain write that skips the
//! fence. `rows+postgres://…` writes a fenced table (`PgFencedRows`: the token in the row,
//! checked by the table's trigger). `sql+postgres://…` is the CLI run's sink: what a `psql` script under `lockkit run`
//! sends, `BEGIN; SELECT lockkit_fence.fence(…); INSERT …; COMMIT` as one simple query, with
//! the lock identity and the token `lockkit run` exported.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use lockkit::FencingToken;
use lockkit_fence::file::FileFence;
use lockkit_fence::postgres::tokio_postgres::{self, Client, NoTls, SimpleQueryMessage};
use lockkit_fence::postgres::{FOREIGN_LOCK_SQLSTATE, PgFence, PgFencedRows, PgFencedValues, STALE_SQLSTATE};
use lockkit_fence::redis::RedisFence;
use lockkit_fence::redis::redis::{self, aio::MultiplexedConnection};
use lockkit_fence::{Fence, FenceError, FenceSink, FenceState};

/// The prefix of the CLI run's target: the SQL function called as `psql` would.
pub(crate) const SQL_PREFIX: &str = "sql+";
/// The prefix of a fenced table's target (the fence in the application's own rows).
pub(crate) const ROWS_PREFIX: &str = "rows+";

/// Opens the sink of `target`; `bypassed` skips the fence (the planted bug).
pub(crate) async fn open(target: String, bypassed: bool) -> Result<Arc<dyn FenceSink>, String> {
    if let Some(dir) = target.strip_prefix("file://") {
        let files = FileFence::new(dir);
        return Ok(if bypassed { Arc::new(PlainFiles(files)) } else { Arc::new(files) });
    }
    if target.starts_with("redis://") {
        let client = redis::Client::open(target.as_str()).map_err(|error| error.to_string())?;
        let conn = client.get_multiplexed_async_connection().await.map_err(|error| error.to_string())?;
        return Ok(if bypassed { Arc::new(PlainRedis(conn)) } else { Arc::new(RedisFence::new(conn)) });
    }
    if let Some(url) = target.strip_prefix(ROWS_PREFIX)
        && !bypassed
    {
        let rows =
            PgFencedRows::open(pg_connect(url).await?, PgFence::new()).await.map_err(|error| error.to_string())?;
        return Ok(Arc::new(rows));
    }
    if let Some(url) = target.strip_prefix(SQL_PREFIX) {
        let client = pg_connect(url).await?;
        return SqlFunction::open(client, bypassed).await.map(|sink| Arc::new(sink) as Arc<dyn FenceSink>);
    }
    if target.starts_with("postgres://") {
        let client = pg_connect(&target).await?;
        if bypassed {
            return PlainPg::open(client).await.map(|sink| Arc::new(sink) as Arc<dyn FenceSink>);
        }
        let values = PgFencedValues::open(client, PgFence::new()).await.map_err(|error| error.to_string())?;
        return Ok(Arc::new(values));
    }
    Err(format!("no sink for {target:?}"))
}

async fn pg_connect(url: &str) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    Ok(client)
}

fn store_error(sink: &'static str, error: impl std::error::Error + Send + Sync + 'static) -> FenceError {
    FenceError::store(sink, "the plain write failed", error)
}

/// The planted bug on files: the file written in place, no fence file.
#[derive(Debug)]
struct PlainFiles(FileFence);

#[async_trait]
impl FenceSink for PlainFiles {
    fn name(&self) -> &'static str {
        "plain file writes"
    }

    async fn write(&self, resource: &str, _fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        let path = self.0.path(resource)?;
        tokio::fs::write(&path, value).await.map_err(|error| store_error("file", error))
    }

    async fn read(&self, resource: &str, _fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        match tokio::fs::read(self.0.path(resource)?).await {
            Ok(value) => Ok(Some(value)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(store_error("file", error)),
        }
    }

    async fn state(&self, _resource: &str) -> Result<Option<FenceState>, FenceError> {
        Ok(None)
    }
}

/// The planted bug on Redis: `SET` and `GET`.
#[derive(Debug)]
struct PlainRedis(MultiplexedConnection);

#[async_trait]
impl FenceSink for PlainRedis {
    fn name(&self) -> &'static str {
        "plain redis SET"
    }

    async fn write(&self, resource: &str, _fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        let mut conn = self.0.clone();
        redis::cmd("SET")
            .arg(resource)
            .arg(value)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| store_error("redis", e))
    }

    async fn read(&self, resource: &str, _fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        let mut conn = self.0.clone();
        redis::cmd("GET").arg(resource).query_async(&mut conn).await.map_err(|e| store_error("redis", e))
    }

    async fn state(&self, _resource: &str) -> Result<Option<FenceState>, FenceError> {
        Ok(None)
    }
}

/// The table `PgFencedValues` writes, created as it creates it.
const VALUES_TABLE: &str = "CREATE SCHEMA IF NOT EXISTS lockkit_fence;
     SELECT pg_advisory_xact_lock(hashtext('lockkit_fence.fenced_values creation'));
     CREATE TABLE IF NOT EXISTS lockkit_fence.fenced_values (resource text PRIMARY KEY, value bytea NOT NULL);";

/// The planted bug on PostgreSQL: the same upsert as `PgFencedValues`, without the fence.
#[derive(Debug)]
struct PlainPg(tokio::sync::Mutex<Client>);

impl PlainPg {
    async fn open(client: Client) -> Result<Self, String> {
        client.batch_execute(VALUES_TABLE).await.map_err(|error| error.to_string())?;
        Ok(Self(tokio::sync::Mutex::new(client)))
    }
}

#[async_trait]
impl FenceSink for PlainPg {
    fn name(&self) -> &'static str {
        "plain postgres upsert"
    }

    async fn write(&self, resource: &str, _fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        let client = self.0.lock().await;
        client
            .execute(
                "INSERT INTO lockkit_fence.fenced_values (resource, value) VALUES ($1, $2)
                 ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
                &[&resource, &value],
            )
            .await
            .map(drop)
            .map_err(|error| store_error("postgres", error))
    }

    async fn read(&self, resource: &str, _fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        let client = self.0.lock().await;
        let row = client
            .query_opt("SELECT value FROM lockkit_fence.fenced_values WHERE resource = $1", &[&resource])
            .await
            .map_err(|error| store_error("postgres", error))?;
        Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
    }

    async fn state(&self, _resource: &str) -> Result<Option<FenceState>, FenceError> {
        Ok(None)
    }
}

/// The CLI run's sink: the SQL a `psql` script under `lockkit run` sends, one simple query
/// per transaction, the fence's arguments as literals (`:'lock_id'`, `:token` in psql):
///
/// ```sql
/// BEGIN;
/// SELECT lockkit_fence.fence('NAME', 'LOCK_ID', TOKEN, 'write');
/// INSERT INTO cli_counters (resource, value) VALUES ('NAME', 'VALUE')
///     ON CONFLICT (resource) DO UPDATE SET value = excluded.value;
/// COMMIT;
/// ```
///
/// A refusal aborts the transaction (the rest of the query is skipped, as `psql -v
/// ON_ERROR_STOP=1` stops); the SQLSTATE says why. Bypassed, the `SELECT` is left out.
#[derive(Debug)]
struct SqlFunction {
    client: tokio::sync::Mutex<Client>,
    bypassed: bool,
}

/// A SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl SqlFunction {
    async fn open(client: Client, bypassed: bool) -> Result<Self, String> {
        PgFence::new().migrate(&client).await.map_err(|error| error.to_string())?;
        client
            .batch_execute(
                "SELECT pg_advisory_xact_lock(hashtext('cli_counters creation'));
                 CREATE TABLE IF NOT EXISTS cli_counters (resource text PRIMARY KEY, value text NOT NULL);",
            )
            .await
            .map_err(|error| error.to_string())?;
        Ok(Self { client: tokio::sync::Mutex::new(client), bypassed })
    }

    fn fence_call(&self, resource: &str, fence: &Fence, mode: &str) -> String {
        if self.bypassed {
            return String::new();
        }
        format!(
            "SELECT lockkit_fence.fence({}, {}, {}, {});",
            literal(resource),
            literal(&fence.lock().to_string()),
            fence.token().get(),
            literal(mode)
        )
    }

    /// Runs `sql` (a whole transaction); a refusal as its typed error, the session rolled back.
    async fn run(
        &self,
        client: &Client,
        sql: &str,
        resource: &str,
        fence: &Fence,
    ) -> Result<Vec<SimpleQueryMessage>, FenceError> {
        match client.simple_query(sql).await {
            Ok(messages) => Ok(messages),
            Err(error) => {
                let _ = client.batch_execute("ROLLBACK").await;
                let db = error.as_db_error();
                let detail = db.and_then(|db| db.detail()).unwrap_or_default().to_owned();
                Err(match db.map(|db| db.code().code()) {
                    Some(STALE_SQLSTATE) => FenceError::Stale {
                        resource: resource.to_owned(),
                        token: fence.token(),
                        highest: FencingToken::new(detail.trim().parse().unwrap_or(0)),
                    },
                    Some(FOREIGN_LOCK_SQLSTATE) => FenceError::ForeignLock {
                        resource: resource.to_owned(),
                        expected: detail,
                        got: fence.lock().clone(),
                    },
                    _ => store_error("postgres", error),
                })
            }
        }
    }
}

#[async_trait]
impl FenceSink for SqlFunction {
    fn name(&self) -> &'static str {
        if self.bypassed { "plain postgres SQL" } else { "postgres SQL function" }
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        let value = String::from_utf8_lossy(value);
        let sql = format!(
            "BEGIN; {} INSERT INTO cli_counters (resource, value) VALUES ({}, {}) \
             ON CONFLICT (resource) DO UPDATE SET value = excluded.value; COMMIT;",
            self.fence_call(resource, fence, "write"),
            literal(resource),
            literal(&value)
        );
        let client = self.client.lock().await;
        self.run(&client, &sql, resource, fence).await.map(drop)
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        let sql = format!(
            "BEGIN; {} SELECT value FROM cli_counters WHERE resource = {}; COMMIT;",
            self.fence_call(resource, fence, "read"),
            literal(resource)
        );
        let client = self.client.lock().await;
        let messages = self.run(&client, &sql, resource, fence).await?;
        // The last row is the SELECT's (the fence's row comes first, when it is called).
        let value = messages.iter().rev().find_map(|message| match message {
            SimpleQueryMessage::Row(row) if row.columns().first().is_some_and(|c| c.name() == "value") => {
                row.get(0).map(|value| value.as_bytes().to_vec())
            }
            _ => None,
        });
        Ok(value)
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        let client = self.client.lock().await;
        PgFence::new().state(&*client, resource).await
    }
}
