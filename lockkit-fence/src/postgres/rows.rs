//! [`PgFencedRows`]: a fenced table of values, the [`FenceSink`] of [`PgFencedTable`].

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use super::table::row_state;
use super::{PgFence, PgFencedTable, sql};
use crate::{FenceError, FenceSink, FenceState, check_resource};

const SINK: &str = "postgres";

/// A table of values, one row per resource (`<schema>.fenced_rows`: `resource text`,
/// `value bytea` and the fence's two columns), fenced on its own rows with
/// [`PgFencedTable`]: each write is one upsert that sets the value and the fence together
/// (no transaction, no second row), each read one `SELECT` of the value and the fence,
/// checked in Rust. The [`FenceSink`] of the fenced table, and a worked example of it.
#[derive(Debug)]
pub struct PgFencedRows {
    client: Client,
    table: PgFencedTable,
    upsert: Statement,
    select: Statement,
}

impl PgFencedRows {
    /// Creates and fences the table when it is missing (the fence's migration first) and
    /// returns the sink over `client`.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the table cannot be created or the statements prepared.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the table created and fenced, or not.
    pub async fn open(client: Client, fence: PgFence) -> Result<Self, FenceError> {
        let name = format!("{}.fenced_rows", fence.schema());
        fence.create_value_table(&client, &name).await?;
        let table = PgFencedTable::new(&fence, &name)?;
        client
            .batch_execute(&table.migration())
            .await
            .map_err(|error| FenceError::store(SINK, format!("fencing {name} failed"), error))?;
        let (lock, token) = (table.lock_column(), table.token_column());
        let prepare = |text: String, types: &'static [Type]| {
            let client = &client;
            async move {
                client
                    .prepare_typed(&text, types)
                    .await
                    .map_err(|error| FenceError::store(SINK, format!("preparing {text} failed"), error))
            }
        };
        let upsert = prepare(
            format!(
                "INSERT INTO {name} (resource, value, {lock}, {token}) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (resource) DO UPDATE SET value = excluded.value, {lock} = excluded.{lock}, {token} = excluded.{token}"
            ),
            &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::INT8],
        )
        .await?;
        let select =
            prepare(format!("SELECT value, {lock}, {token} FROM {name} WHERE resource = $1"), &[Type::TEXT]).await?;
        Ok(Self { client, table, upsert, select })
    }

    /// The fenced table it writes.
    pub fn table(&self) -> &PgFencedTable {
        &self.table
    }

    async fn row(&self, resource: &str) -> Result<Option<(Vec<u8>, Option<FenceState>)>, FenceError> {
        check_resource(resource)?;
        let row = self
            .client
            .query_opt(&self.select, &[&resource])
            .await
            .map_err(|error| FenceError::store(SINK, format!("reading {resource:?} failed"), error))?;
        let Some(row) = row else { return Ok(None) };
        let read = |error| FenceError::store(SINK, format!("the row of {resource:?} cannot be read"), error);
        let value: Vec<u8> = row.try_get(0).map_err(read)?;
        let lock: Option<String> = row.try_get(1).map_err(read)?;
        let token: Option<i64> = row.try_get(2).map_err(read)?;
        Ok(Some((value, row_state(lock.as_deref(), token))))
    }
}

#[async_trait]
impl FenceSink for PgFencedRows {
    fn name(&self) -> &'static str {
        SINK
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        // Bad names, read fences and tokens over bigint are refused before anything is sent.
        let (lock, token, _) = sql::parameters(resource, fence, FenceMode::Write)?;
        let written = self.client.execute(&self.upsert, &[&resource, &value, &lock, &token]).await;
        written.map(drop).map_err(|error| self.table.error(error, resource, fence))
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        // One statement: the value and its fence are of one snapshot.
        let Some((value, state)) = self.row(resource).await? else { return Ok(None) };
        crate::decide(resource, state.as_ref(), fence, FenceMode::Read)?;
        Ok(Some(value))
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        Ok(self.row(resource).await?.and_then(|(_, state)| state))
    }
}
