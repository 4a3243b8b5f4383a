//! The PostgreSQL fence on sqlx (feature `sqlx`): the same SQL as on tokio-postgres.
//!
//! The migration sends its SQL as a plain `&str` query and returns `impl Future + Send` written
//! out: through `sqlx::raw_sql`, its future was not provably `Send` where it is awaited inside
//! another generic future (an `#[async_trait]` method, a spawned task), a known limit of the
//! compiler's inference.

use std::future::Future;

use lockkit_core::{Fence, FencingToken};
use sqlx::postgres::{PgConnection, PgDatabaseError};

use super::sql::{self, FenceSql};
use super::{PgFence, PgFencedTable};
use crate::{FenceError, FenceState, check_resource};

const SINK: &str = "postgres";

impl PgFence {
    /// [`migrate`](Self::migrate) on a sqlx connection: the migration's statements as one
    /// simple query, which runs them in one transaction.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the database refuses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the migration applied or not, never half applied.
    pub fn sqlx_migrate<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> impl Future<Output = Result<(), FenceError>> + Send + 'a {
        let migration = self.migration();
        async move { apply(conn, &migration, || format!("the migration of schema {} failed", self.schema())).await }
    }

    /// [`check`](Self::check) on a sqlx connection inside a transaction (`&mut *tx` of a
    /// `sqlx::Transaction<'_, Postgres>`): one statement, prepared once per connection by sqlx.
    /// A write fence raises the highest when the transaction commits; to check a read in a
    /// writer's transaction, give a [`FenceMode::Read`](lockkit_core::FenceMode::Read) fence.
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check): after a refusal the transaction is aborted; roll it back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as any statement of the transaction: nothing commits before it does.
    pub async fn sqlx_check(&self, conn: &mut PgConnection, resource: &str, fence: &Fence) -> Result<(), FenceError> {
        {
            let (lock, token, mode) = sql::parameters(resource, fence, fence.mode())?;
            let sent = sqlx::query(self.check_statement())
                .bind(resource)
                .bind(lock)
                .bind(token)
                .bind(mode)
                .execute(conn)
                .await;
            sent.map(drop).map_err(|error| typed_error(&self.sql, error, resource, fence, "the fence check"))
        }
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
        {
            check_resource(resource)?;
            let row: Result<Option<(String, i64)>, sqlx::Error> =
                sqlx::query_as(&self.sql.state).bind(resource).fetch_optional(conn).await;
            let row = row.map_err(|error| match &error {
                sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("42P01" | "3F000")) => {
                    FenceError::NotSetUp { sink: SINK, how: self.sql.how_to_set_up() }
                }
                _ => FenceError::store(SINK, format!("reading the fence of {resource:?} failed"), error),
            })?;
            Ok(row.map(|(lock, highest)| FenceState {
                lock,
                highest: FencingToken::new(u64::try_from(highest).unwrap_or(0)),
            }))
        }
    }
}

impl PgFencedTable {
    /// [`migrate`](Self::migrate) on a sqlx connection: the fence's migration, then this
    /// table's.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the database refuses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves each of the two migrations applied or not.
    pub fn sqlx_migrate<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> impl Future<Output = Result<(), FenceError>> + Send + 'a {
        let migration = self.migration();
        async move {
            self.fence().sqlx_migrate(&mut *conn).await?;
            apply(conn, &migration, || format!("fencing the table {} failed", self.table())).await
        }
    }

    /// [`error`](Self::error) for sqlx: the typed error for what a write of the table
    /// returned.
    pub fn sqlx_error(&self, error: sqlx::Error, resource: &str, fence: &Fence) -> FenceError {
        typed_error(self.fence().sql(), error, resource, fence, "the fenced write")
    }
}

/// Runs `migration`'s statements as one simple query (a query without arguments goes as one,
/// statements and all, in one transaction); a refusal is a store error that says `failed()`.
async fn apply(conn: &mut PgConnection, migration: &str, failed: impl FnOnce() -> String) -> Result<(), FenceError> {
    let applied = sqlx::Executor::execute(conn, migration).await;
    applied.map(drop).map_err(|error| FenceError::store(SINK, failed(), error))
}

/// The typed error for a database error of the fence's SQL in `error` (see [`sql::refusal`]),
/// else a store error that says `what` (`the fence check`) of `resource` failed.
fn typed_error(sql: &FenceSql, error: sqlx::Error, resource: &str, fence: &Fence, what: &str) -> FenceError {
    if let sqlx::Error::Database(db) = &error
        && let Some(code) = db.code()
    {
        let detail = db.try_downcast_ref::<PgDatabaseError>().and_then(PgDatabaseError::detail);
        if let Some(refused) = sql::refusal(sql, &code, db.message(), detail, resource, fence) {
            return refused;
        }
    }
    FenceError::store(SINK, format!("{what} of {resource:?} failed"), error)
}
