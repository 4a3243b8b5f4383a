//! The PostgreSQL fence on sqlx (feature `sqlx`): the same SQL as on tokio-postgres.

use lockkit_core::{Fence, FencingToken};
use sqlx::postgres::{PgConnection, PgDatabaseError};

use super::PgFence;
use super::sql;
use crate::{FenceError, FenceState, check_resource};

const SINK: &str = "postgres";

impl PgFence {
    /// [`migrate`](Self::migrate) on a sqlx connection: the migration's statements in one
    /// transaction.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the database refuses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the migration applied or not, never half applied.
    pub async fn sqlx_migrate(&self, conn: &mut PgConnection) -> Result<(), FenceError> {
        // One simple query: its statements run as one transaction.
        sqlx::raw_sql(&self.migration()).execute(conn).await.map(drop).map_err(|error| {
            FenceError::store(SINK, format!("the migration of schema {} failed", self.schema()), error)
        })
    }

    /// [`check`](Self::check) on a sqlx connection inside a transaction (`&mut *tx` of a
    /// `sqlx::Transaction<'_, Postgres>`): one statement, prepared once per connection by sqlx.
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check): after a refusal the transaction is aborted; roll it back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as any statement of the transaction: nothing commits before it does.
    pub async fn sqlx_check(&self, conn: &mut PgConnection, resource: &str, fence: &Fence) -> Result<(), FenceError> {
        let (lock, token, mode) = sql::parameters(resource, fence, fence.mode())?;
        let sent =
            sqlx::query(self.check_statement()).bind(resource).bind(lock).bind(token).bind(mode).execute(conn).await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) => Err(self.sqlx_refusal(error, resource, fence)),
        }
    }

    fn sqlx_refusal(&self, error: sqlx::Error, resource: &str, fence: &Fence) -> FenceError {
        if let sqlx::Error::Database(db) = &error
            && let Some(code) = db.code()
        {
            let detail = db.try_downcast_ref::<PgDatabaseError>().and_then(PgDatabaseError::detail);
            if let Some(refused) = sql::refusal(&self.sql, &code, db.message(), detail, resource, fence) {
                return refused;
            }
        }
        FenceError::store(SINK, format!("the fence check of {resource:?} failed"), error)
    }

    /// [`state`](Self::state) on a sqlx connection.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`], [`FenceError::NotSetUp`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn sqlx_state(&self, conn: &mut PgConnection, resource: &str) -> Result<Option<FenceState>, FenceError> {
        check_resource(resource)?;
        let row: Option<(String, i64)> =
            sqlx::query_as(self.sql.state.as_str()).bind(resource).fetch_optional(conn).await.map_err(|error| {
                match &error {
                    sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("42P01" | "3F000")) => {
                        FenceError::NotSetUp { sink: SINK, how: self.sql.how_to_set_up() }
                    }
                    _ => FenceError::store(SINK, format!("reading the fence of {resource:?} failed"), error),
                }
            })?;
        Ok(row.map(|(lock, highest)| FenceState {
            lock,
            highest: FencingToken::new(u64::try_from(highest).unwrap_or(0)),
        }))
    }
}
