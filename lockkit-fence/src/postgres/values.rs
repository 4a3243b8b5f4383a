//! [`PgFencedValues`]: a table of fenced values, the PostgreSQL [`FenceSink`].

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode};
use tokio::sync::Mutex;
use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use super::{PgFence, PreparedFence};
use crate::{FenceError, FenceSink, FenceState};

const SINK: &str = "postgres";

/// A table of values, one per resource (`<schema>.fenced_values`: `resource text`,
/// `value bytea`), written and read through the fence: the [`FenceSink`] of PostgreSQL, and
/// a worked example of the check inside a transaction. Each write is one transaction of the
/// check and an upsert, sent together ([`PgFence::check_with`]); each read one transaction of
/// the check and a `SELECT`.
///
/// It owns one connection and runs one transaction at a time on it; open several for
/// concurrent writers.
#[derive(Debug)]
pub struct PgFencedValues {
    client: Mutex<Client>,
    fence: PreparedFence,
    upsert: String,
    select: String,
}

impl PgFencedValues {
    /// Creates the table in the fence's schema when it is missing ([`PgFence::migrate`] runs
    /// first) and returns the sink over `client`.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the table cannot be created.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the table created or not.
    pub async fn open(client: Client, fence: PgFence) -> Result<Self, FenceError> {
        let table = format!("{}.fenced_values", fence.schema());
        fence.create_value_table(&client, &table).await?;
        let fence = fence.prepare(&client).await?;
        Ok(Self {
            client: Mutex::new(client),
            upsert: format!(
                "INSERT INTO {table} (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = excluded.value"
            ),
            select: format!("SELECT value FROM {table} WHERE resource = $1"),
            fence,
        })
    }
}

fn failed(what: &str, resource: &str) -> impl FnOnce(tokio_postgres::Error) -> FenceError {
    let message = format!("{what} of {resource:?} failed");
    move |error| FenceError::store(SINK, message, error)
}

#[async_trait]
impl FenceSink for PgFencedValues {
    fn name(&self) -> &'static str {
        SINK
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        // A read fence cannot write: refused before anything is sent.
        super::sql::parameters(resource, fence, FenceMode::Write)?;
        let mut client = self.client.lock().await;
        let tx = client.transaction().await.map_err(failed("BEGIN", resource))?;
        let params: [(&(dyn ToSql + Sync), Type); 2] = [(&resource, Type::TEXT), (&value, Type::BYTEA)];
        let upsert = tx.query_typed(&self.upsert, &params);
        self.fence.check_with(&tx, resource, fence, upsert).await?;
        tx.commit().await.map_err(failed("COMMIT", resource))
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        let mut client = self.client.lock().await;
        let tx = client.transaction().await.map_err(failed("BEGIN", resource))?;
        self.fence.check_access(&tx, resource, fence, FenceMode::Read).await?;
        let row =
            tx.query_typed_opt(&self.select, &[(&resource, Type::TEXT)]).await.map_err(failed("SELECT", resource))?;
        let value =
            row.map(|row| row.try_get::<_, Vec<u8>>(0)).transpose().map_err(failed("reading the value", resource))?;
        tx.commit().await.map_err(failed("COMMIT", resource))?;
        Ok(value)
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        let client = self.client.lock().await;
        self.fence.fence().state(&*client, resource).await
    }
}
