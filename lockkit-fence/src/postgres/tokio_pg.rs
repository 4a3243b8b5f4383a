//! The PostgreSQL fence on tokio-postgres (feature `postgres`): one call of the function
//! `fence(resource, lock_id, token, mode)` inside the caller's transaction. The function
//! always ends holding the resource's fence row (updated, inserted, or locked for the
//! refusal), before any write sent after it takes its own locks: every fenced transaction of
//! a resource takes the fence row first, so two of them never wait on each other in a cycle.

use std::future::Future;

use lockkit_core::{Fence, FenceMode, FencingToken};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Statement, Transaction};

use super::sql::{self, FenceSql};
use super::{PgFence, PgFencedTable};
use crate::{FenceError, FenceState, check_resource};

const SINK: &str = "postgres";

/// The check statement: as text (parsed and planned at each call) or prepared on a
/// connection.
#[derive(Clone, Copy)]
enum Check<'a> {
    Text,
    Prepared(&'a Statement),
}

impl PgFence {
    /// Runs the fence's migration, then creates the value table `table` (`resource`, `value`)
    /// of a ready-made sink when it is missing; two sinks opening at once create it once.
    pub(super) async fn create_value_table(&self, client: &impl GenericClient, table: &str) -> Result<(), FenceError> {
        self.migrate(client).await?;
        client
            .batch_execute(&format!(
                "SELECT pg_advisory_xact_lock(hashtext('{table} creation'));
                 CREATE TABLE IF NOT EXISTS {table} (resource text PRIMARY KEY, value bytea NOT NULL);"
            ))
            .await
            .map_err(|error| FenceError::store(SINK, format!("creating {table} failed"), error))
    }

    /// Creates the schema, the table and the function (the SQL of
    /// [`migration`](Self::migration)), in one transaction; safe to run again and from several
    /// processes at once.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the database refuses (the user may not create a schema:
    /// run the migration's SQL as an owner once, then grant `USAGE` on the schema, `SELECT,
    /// INSERT, UPDATE` on the table and `EXECUTE` on the function).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the migration applied or not, never half applied.
    pub async fn migrate(&self, client: &impl GenericClient) -> Result<(), FenceError> {
        // One simple query: its statements run as one transaction (the advisory lock at its
        // start serializes concurrent migrations).
        client.batch_execute(&self.migration()).await.map_err(|error| {
            FenceError::store(SINK, format!("the migration of schema {} failed", self.schema()), error)
        })
    }

    /// Checks `fence` for `resource` inside `tx`: one statement, one round trip. A write fence's token becomes
    /// the resource's highest when `tx` commits; a read fence's is compared only, and no write
    /// with a greater token commits until `tx` ends. Write in `tx` after it returned `Ok`, or
    /// send both together with [`check_with`](Self::check_with).
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`] or [`FenceError::ForeignLock`]: `tx` is aborted, roll it back
    /// (dropping it does; a commit rolls back too); [`FenceError::NotSetUp`] when the migration
    /// has not run; [`FenceError::InvalidInput`] for a bad name or token (nothing was sent);
    /// [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as any statement of `tx`: nothing commits before `tx` does.
    pub async fn check(&self, tx: &Transaction<'_>, resource: &str, fence: &Fence) -> Result<(), FenceError> {
        let parameters = sql::parameters(resource, fence, fence.mode())?;
        self.run(tx, Check::Text, resource, fence, parameters).await
    }

    /// Checks `fence` for `resource` and runs `write` (a statement of `tx`: `tx.execute(…)`,
    /// `tx.query(…)`) together: tokio-postgres pipelines the two on the connection, so the
    /// fenced write costs no round trip more than the write. The check goes first on the
    /// wire; when it refuses, the transaction is aborted and `write` rolls back with it.
    /// Commit `tx` after.
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check) (a refusal wins over the write's error, which it may
    /// have caused); the write's own error as [`FenceError::Store`]. Bad input is refused
    /// before anything is sent, `write` included.
    ///
    /// # Cancel safety
    ///
    /// As for [`check`](Self::check).
    pub async fn check_with<T, W>(
        &self,
        tx: &Transaction<'_>,
        resource: &str,
        fence: &Fence,
        write: W,
    ) -> Result<T, FenceError>
    where
        W: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let parameters = sql::parameters(resource, fence, fence.mode())?;
        self.run_with(tx, Check::Text, resource, fence, parameters, write).await
    }

    /// The check prepared on `client`'s connection: the same statement without a parse and a
    /// plan at each call. Prepare once per connection and keep it with the connection (a
    /// pool's statement cache does the same with [`check_statement`](Self::check_statement));
    /// a prepared fence used on another connection fails with [`FenceError::Store`].
    ///
    /// # Errors
    ///
    /// [`FenceError::NotSetUp`] when the migration has not run; [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn prepare(&self, client: &impl GenericClient) -> Result<PreparedFence, FenceError> {
        let types = [Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
        let statement = client.prepare_typed(self.check_statement(), &types).await.map_err(|error| {
            match error.as_db_error().map(|db| db.code().code()) {
                Some("42P01" | "42883" | "3F000") => FenceError::NotSetUp { sink: SINK, how: self.sql.how_to_set_up() },
                _ => FenceError::store(SINK, "preparing the fence check failed", error),
            }
        })?;
        Ok(PreparedFence { fence: self.clone(), statement })
    }

    async fn run_with<T, W>(
        &self,
        tx: &Transaction<'_>,
        check: Check<'_>,
        resource: &str,
        fence: &Fence,
        parameters: (String, i64, &'static str),
        write: W,
    ) -> Result<T, FenceError>
    where
        W: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        // `join` polls the check first: its messages are queued on the connection before the
        // write's, so the server runs the check first.
        let checked = self.run(tx, check, resource, fence, parameters);
        let (checked, written) = futures_util::future::join(checked, write).await;
        checked?;
        written.map_err(|error| FenceError::store(SINK, format!("the write fenced on {resource:?} failed"), error))
    }

    /// Sends the check.
    async fn run(
        &self,
        tx: &Transaction<'_>,
        check: Check<'_>,
        resource: &str,
        fence: &Fence,
        (lock, token, mode): (String, i64, &'static str),
    ) -> Result<(), FenceError> {
        let sent = match check {
            Check::Prepared(statement) => tx.query(statement, &[&resource, &lock, &token, &mode]).await,
            Check::Text => {
                let params: [(&(dyn ToSql + Sync), Type); 4] =
                    [(&resource, Type::TEXT), (&lock, Type::TEXT), (&token, Type::INT8), (&mode, Type::TEXT)];
                // Parse, bind and execute in one message batch: one round trip.
                tx.query_typed(self.check_statement(), &params).await
            }
        };
        sent.map(drop).map_err(|error| typed_error(&self.sql, error, resource, fence, "the fence check"))
    }

    /// What the table holds for `resource`, without a check.
    ///
    /// # Errors
    ///
    /// [`FenceError::NotSetUp`] when the migration has not run; [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn state(&self, client: &impl GenericClient, resource: &str) -> Result<Option<FenceState>, FenceError> {
        check_resource(resource)?;
        let row =
            client.query_typed_opt(&self.sql.state, &[(&resource, Type::TEXT)]).await.map_err(|error| {
                match error.as_db_error().map(|db| db.code().code()) {
                    Some("42P01" | "3F000") => FenceError::NotSetUp { sink: SINK, how: self.sql.how_to_set_up() },
                    _ => FenceError::store(SINK, format!("reading the fence of {resource:?} failed"), error),
                }
            })?;
        let Some(row) = row else { return Ok(None) };
        let read = |error| FenceError::store(SINK, format!("the fence row of {resource:?} cannot be read"), error);
        let lock: String = row.try_get(0).map_err(read)?;
        let highest: i64 = row.try_get(1).map_err(read)?;
        // The table's CHECK keeps it non-negative.
        Ok(Some(FenceState { lock, highest: FencingToken::new(u64::try_from(highest).unwrap_or(0)) }))
    }
}

/// The check of a [`PgFence`] prepared on one connection ([`PgFence::prepare`]): the same
/// [`check`](Self::check) and [`check_with`](Self::check_with), without a parse and a plan at
/// each call. Use it only on the connection that prepared it.
#[derive(Clone, Debug)]
pub struct PreparedFence {
    fence: PgFence,
    statement: Statement,
}

impl PreparedFence {
    /// As [`PgFence::check`].
    ///
    /// # Errors
    ///
    /// As for [`PgFence::check`]; [`FenceError::Store`] on another connection than the one
    /// that prepared it.
    ///
    /// # Cancel safety
    ///
    /// As for [`PgFence::check`].
    pub async fn check(&self, tx: &Transaction<'_>, resource: &str, fence: &Fence) -> Result<(), FenceError> {
        self.check_access(tx, resource, fence, fence.mode()).await
    }

    /// As [`PgFence::check_with`]: the check and `write` pipelined.
    ///
    /// # Errors
    ///
    /// As for [`PgFence::check_with`].
    ///
    /// # Cancel safety
    ///
    /// As for [`PgFence::check`].
    pub async fn check_with<T, W>(
        &self,
        tx: &Transaction<'_>,
        resource: &str,
        fence: &Fence,
        write: W,
    ) -> Result<T, FenceError>
    where
        W: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let parameters = sql::parameters(resource, fence, fence.mode())?;
        self.fence.run_with(tx, self.prepared(), resource, fence, parameters, write).await
    }

    /// The check of an operation that does `access` (a read of the sink, whatever the fence).
    pub(super) async fn check_access(
        &self,
        tx: &Transaction<'_>,
        resource: &str,
        fence: &Fence,
        access: FenceMode,
    ) -> Result<(), FenceError> {
        let parameters = sql::parameters(resource, fence, access)?;
        self.fence.run(tx, self.prepared(), resource, fence, parameters).await
    }

    fn prepared(&self) -> Check<'_> {
        Check::Prepared(&self.statement)
    }

    /// The fence it was prepared from.
    pub fn fence(&self) -> &PgFence {
        &self.fence
    }
}

impl PgFencedTable {
    /// Runs the fence's migration ([`PgFence::migrate`]) and then this table's
    /// ([`migration`](Self::migration)): adds the two columns and the triggers. Safe to run
    /// again.
    ///
    /// # Errors
    ///
    /// [`FenceError::Store`] when the database refuses (no such table, no right to alter it).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves each of the two migrations applied or not.
    pub async fn migrate(&self, client: &impl GenericClient) -> Result<(), FenceError> {
        self.fence().migrate(client).await?;
        client
            .batch_execute(&self.migration())
            .await
            .map_err(|error| FenceError::store(SINK, format!("fencing the table {} failed", self.table()), error))
    }

    /// The typed error for what a write of the table returned: [`FenceError::Stale`],
    /// [`FenceError::ForeignLock`], [`FenceError::InvalidInput`] for the triggers' refusals,
    /// [`FenceError::Store`] for any other error. `resource` names the row in the error and
    /// `fence` is the fence the write carried.
    pub fn error(&self, error: tokio_postgres::Error, resource: &str, fence: &Fence) -> FenceError {
        typed_error(self.fence().sql(), error, resource, fence, "the fenced write")
    }
}

/// The typed error for a database error of the fence's SQL in `error` (see [`sql::refusal`]),
/// else a store error that says `what` (`the fence check`) of `resource` failed.
fn typed_error(sql: &FenceSql, error: tokio_postgres::Error, resource: &str, fence: &Fence, what: &str) -> FenceError {
    if let Some(db) = error.as_db_error()
        && let Some(refused) = sql::refusal(sql, db.code().code(), db.message(), db.detail(), resource, fence)
    {
        return refused;
    }
    FenceError::store(SINK, format!("{what} of {resource:?} failed"), error)
}
