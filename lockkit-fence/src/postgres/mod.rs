//! The PostgreSQL fence (features `postgres` for tokio-postgres, `sqlx` for sqlx): a check
//! that runs inside the application's own transaction, so the write and the fence commit or
//! roll back together.
//!
//! A migration ([`PgFence::migrate`], or the SQL of [`PgFence::migration`]) creates, in the
//! schema `lockkit_fence`, the table `fences` (per resource: the lock it is bound to and the
//! highest token accepted for a write) and the function
//! `lockkit_fence.fence(resource, lock_id, token, mode)`, which any client in any language can
//! call. One statement, one round trip: for a write it advances the resource's row with one
//! `INSERT … ON CONFLICT DO UPDATE … WHERE highest <= token` (the row stays locked until the
//! transaction ends, so two writers of one resource commit in token order); for a read it
//! takes the row `FOR SHARE` and compares. A refusal is a SQL error with its own SQLSTATE:
//! [`STALE_SQLSTATE`] (`LKF01`, `DETAIL` the highest token), [`FOREIGN_LOCK_SQLSTATE`]
//! (`LKF02`), [`INVALID_INPUT_SQLSTATE`] (`LKF03`); the transaction is then aborted and
//! rolls back, the application's write with it. Rust callers get [`FenceError`]s.
//!
//! Where each resource is a row of your own table, [`PgFencedTable`] puts the fence in the
//! row instead: two columns and a row trigger, so the fenced write is the application's one
//! `UPDATE … SET …, lockkit_lock = $l, lockkit_token = $t`, from any client, and no second row
//! is written ([`PgFencedRows`] is its [`FenceSink`](crate::FenceSink)).
//!
//! In `READ COMMITTED` (the default), a writer that waited for another's row lock re-checks
//! against the committed row. In `REPEATABLE READ` or `SERIALIZABLE`, a concurrent writer of
//! the same resource gets a serialization failure (40001) instead: retry the transaction, as
//! for any write there.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(client: &mut tokio_postgres::Client, guard: lockkit_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! use lockkit_fence::postgres::PgFence;
//!
//! let fence = PgFence::new();
//! fence.migrate(client).await?; // once, at deployment
//! let tx = client.transaction().await?;
//! // The check and the write are sent together (one round trip for both) and commit together.
//! fence
//!     .check_with(&tx, "orders/42", &guard.fence(), tx.execute("UPDATE orders SET status = 'shipped' WHERE id = 42", &[]))
//!     .await?;
//! tx.commit().await?;
//! # Ok(())
//! # }
//! ```
//!
//! From a shell, under `lockkit run` (which exports `LOCKKIT_LOCK_ID` and
//! `LOCKKIT_FENCING_TOKEN`), with `psql`:
//!
//! ```sh
//! lockkit run orders/42 -- sh -c 'psql "$DATABASE_URL" -v ON_ERROR_STOP=1 \
//!     -v lock_id="$LOCKKIT_LOCK_ID" -v token="$LOCKKIT_FENCING_TOKEN" -f ship.sql'
//! ```
//!
//! ```sql
//! -- ship.sql
//! BEGIN;
//! SELECT lockkit_fence.fence('orders/42', :'lock_id', :token, 'write');
//! UPDATE orders SET status = 'shipped' WHERE id = 42;
//! COMMIT;
//! ```

#[cfg(feature = "postgres")]
mod rows;
mod sql;
#[cfg(feature = "sqlx")]
mod sqlx_pg;
mod table;
#[cfg(feature = "postgres")]
mod tokio_pg;
#[cfg(feature = "postgres")]
mod values;

#[cfg(feature = "postgres")]
pub use rows::PgFencedRows;
pub use sql::{DEFAULT_SCHEMA, FOREIGN_LOCK_SQLSTATE, INVALID_INPUT_SQLSTATE, STALE_SQLSTATE};
/// The sqlx this fence is built on (its `PgConnection` is what [`PgFence::sqlx_check`] takes).
#[cfg(feature = "sqlx")]
pub use sqlx;
pub use table::{DEFAULT_LOCK_COLUMN, DEFAULT_TOKEN_COLUMN, PgFencedTable};
#[cfg(feature = "postgres")]
pub use tokio_pg::PreparedFence;
/// The tokio-postgres this fence is built on (its `Transaction` is what
/// [`PgFence::check`] takes).
#[cfg(feature = "postgres")]
pub use tokio_postgres;
#[cfg(feature = "postgres")]
pub use values::PgFencedValues;

use crate::FenceError;
use sql::FenceSql;

/// The PostgreSQL fence of one schema: its migration, and the check (on tokio-postgres with
/// feature `postgres`, on sqlx with feature `sqlx`). Cheap to clone; holds no connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgFence {
    sql: FenceSql,
}

impl Default for PgFence {
    fn default() -> Self {
        Self::new()
    }
}

impl PgFence {
    /// The fence in the schema [`DEFAULT_SCHEMA`] (`lockkit_fence`).
    pub fn new() -> Self {
        match FenceSql::new(DEFAULT_SCHEMA) {
            Ok(sql) => Self { sql },
            // The default schema is a plain identifier.
            Err(_) => unreachable!("{DEFAULT_SCHEMA} is a plain identifier"),
        }
    }

    /// The fence in `schema`.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] unless `schema` is a plain lower-case identifier.
    pub fn with_schema(schema: &str) -> Result<Self, FenceError> {
        Ok(Self { sql: FenceSql::new(schema)? })
    }

    /// The schema.
    pub fn schema(&self) -> &str {
        &self.sql.schema
    }

    /// The migration's SQL (idempotent): the schema, the table `fences` and the function
    /// `fence(resource, lock_id, token, mode)`, for a migration tool of your own. Run it in a
    /// transaction.
    pub fn migration(&self) -> String {
        self.sql.migration()
    }

    /// The check as one SQL statement, `SELECT <schema>.fence($1, $2, $3, $4)`: resource
    /// (`text`), lock identity (`text`, [`LockId`](lockkit_core::LockId)'s text form), token
    /// (`bigint`), mode (`'write'` or `'read'`).
    pub fn check_statement(&self) -> &str {
        &self.sql.check
    }

    /// The SQL of this fence's schema.
    pub(crate) fn sql(&self) -> &FenceSql {
        &self.sql
    }
}
