//! [`PgFencedTable`]: the fence on the application's own rows, so that the fenced write is
//! the application's one `UPDATE` and no second row is written.

use lockkit_core::{Fence, FenceMode, FencingToken};

use super::PgFence;
use super::sql;
use crate::{FenceError, FenceState, decide};

/// The lock identity column [`PgFencedTable::new`] adds unless told another.
pub const DEFAULT_LOCK_COLUMN: &str = "lockkit_lock";
/// The token column [`PgFencedTable::new`] adds unless told another.
pub const DEFAULT_TOKEN_COLUMN: &str = "lockkit_token";

/// A table of yours whose rows carry their own fence: two columns (the lock identity, the
/// token of the row's last write) and row triggers that refuse a stale write of the row.
///
/// The migration ([`migration`](Self::migration), or `migrate` on tokio-postgres, `sqlx_migrate`
/// on sqlx) calls the SQL function `lockkit_fence.fence_table(table, lock column, token column)`,
/// which adds the columns and the triggers. Then a write of a row sets both columns, from any
/// client: `UPDATE accounts SET balance = $2, lockkit_lock = $3, lockkit_token = $4 WHERE id = $1`.
/// The trigger checks it against the row as the write has it locked, and refuses with the fence
/// function's SQLSTATEs ([`STALE_SQLSTATE`](super::STALE_SQLSTATE) with the row's token as
/// `DETAIL`, [`FOREIGN_LOCK_SQLSTATE`](super::FOREIGN_LOCK_SQLSTATE),
/// [`INVALID_INPUT_SQLSTATE`](super::INVALID_INPUT_SQLSTATE)); [`error`](Self::error) (and
/// `sqlx_error`) turn them into [`FenceError`]s. The token is in the row: it commits, rolls
/// back and survives a restart with the row, and the write costs no statement more.
///
/// - **Insert** of a new row: accepted with any token (the row has no fence yet); it must set
///   both columns. An upsert's `ON CONFLICT DO UPDATE` is checked as an update.
/// - **Update**: refused unless it sets both columns (a row never fenced is bound by its first
///   fenced write), below the row's token, or under another lock. An update that leaves the
///   two columns as they are passes as a write of the row's current holder: the trigger cannot
///   tell it from one that sets them to the same values. Set them in every write.
/// - **Delete**: refused unless the transaction first set its fence with
///   `SELECT set_config('lockkit.lock_id', $1, true), set_config('lockkit.token', $2, true)`
///   ([`delete_fence_statement`](Self::delete_fence_statement)) and it admits the row. A deleted
///   row takes its fence with it: a row inserted again under the same key starts afresh, so
///   mark rows deleted (an update) where an older holder could still insert one.
/// - **Read** with a token (contract behaviour 30): read the two columns with the row (`FOR
///   SHARE` in a transaction keeps later writers out until it ends) and pass them to
///   [`check_read`](Self::check_read); or filter, `WHERE lockkit_token <= $t`, where a missing
///   row may as well mean a stale reader.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(client: &tokio_postgres::Client, guard: lockkit_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
/// use lockkit_fence::postgres::{PgFence, PgFencedTable};
///
/// let accounts = PgFencedTable::new(&PgFence::new(), "accounts")?;
/// accounts.migrate(client).await?; // once, at deployment
/// let fence = guard.fence();
/// let (lock, token) = accounts.values(&fence)?;
/// client
///     .execute(
///         "UPDATE accounts SET balance = $2, lockkit_lock = $3, lockkit_token = $4 WHERE id = $1",
///         &[&1_i32, &90_i64, &lock, &token],
///     )
///     .await
///     .map_err(|error| accounts.error(error, "accounts/1", &fence))?; // Err(Stale) once a newer holder wrote
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgFencedTable {
    fence: PgFence,
    table: String,
    lock_column: String,
    token_column: String,
}

impl PgFencedTable {
    /// The fenced table `table` (as SQL names it: `accounts`, `billing.accounts`,
    /// `"Accounts"`), with the columns [`DEFAULT_LOCK_COLUMN`] and [`DEFAULT_TOKEN_COLUMN`], and
    /// the function of `fence`'s schema.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for an empty name or one holding a NUL.
    pub fn new(fence: &PgFence, table: &str) -> Result<Self, FenceError> {
        let named = |what: &str, name: &str| {
            if name.is_empty() || name.contains('\0') || name.len() > 200 {
                Err(FenceError::invalid(format!(
                    "the {what} name {name:?} is empty, too long or holds a NUL; give it as SQL names it, such as accounts"
                )))
            } else {
                Ok(name.to_owned())
            }
        };
        Ok(Self {
            fence: fence.clone(),
            table: named("table", table)?,
            lock_column: DEFAULT_LOCK_COLUMN.to_owned(),
            token_column: DEFAULT_TOKEN_COLUMN.to_owned(),
        })
    }

    /// The same table with columns of other names (plain names, not quoted).
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for an empty or equal pair of names, or one over 63 bytes.
    pub fn with_columns(mut self, lock_column: &str, token_column: &str) -> Result<Self, FenceError> {
        for name in [lock_column, token_column] {
            if name.is_empty() || name.len() > 63 || name.contains('\0') {
                return Err(FenceError::invalid(format!(
                    "the column name {name:?} is empty, over 63 bytes or holds a NUL; give a column name such as {DEFAULT_TOKEN_COLUMN}"
                )));
            }
        }
        if lock_column == token_column {
            return Err(FenceError::invalid(format!(
                "the lock and token columns are both {lock_column:?}; give two different names"
            )));
        }
        self.lock_column = lock_column.to_owned();
        self.token_column = token_column.to_owned();
        Ok(self)
    }

    /// The table, as given.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The lock identity column (`text`).
    pub fn lock_column(&self) -> &str {
        &self.lock_column
    }

    /// The token column (`bigint`).
    pub fn token_column(&self) -> &str {
        &self.token_column
    }

    /// The fence whose schema holds `fence_table`.
    pub fn fence(&self) -> &PgFence {
        &self.fence
    }

    /// The SQL that fences the table, after the fence's own migration
    /// ([`PgFence::migration`]): one call of `fence_table`. Idempotent.
    pub fn migration(&self) -> String {
        let literal = |text: &str| format!("'{}'", text.replace('\'', "''"));
        format!(
            "SELECT {}.fence_table({}::regclass, {}, {});",
            self.fence.schema(),
            literal(&self.table),
            literal(&self.lock_column),
            literal(&self.token_column)
        )
    }

    /// The values a write of a row binds for the two columns: the lock identity (`text`) and
    /// the token (`bigint`).
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a read fence (it cannot write) or a token above
    /// `i64::MAX`.
    pub fn values(&self, fence: &Fence) -> Result<(String, i64), FenceError> {
        let (lock, token, _) = sql::parameters(&self.table, fence, FenceMode::Write)?;
        Ok((lock, token))
    }

    /// The statement that sets the transaction's fence before a `DELETE` of fenced rows:
    /// `SELECT set_config('lockkit.lock_id', $1, true), set_config('lockkit.token', $2, true)`,
    /// both parameters `text` ([`values`](Self::values), the token in decimal).
    pub fn delete_fence_statement(&self) -> &'static str {
        "SELECT set_config('lockkit.lock_id', $1, true), set_config('lockkit.token', $2, true)"
    }

    /// Checks a read of a row whose two columns held `lock` and `token` (`None`: a row never
    /// written under a fence): [`FenceError::Stale`] when a write with a greater token than
    /// `fence`'s has been accepted, [`FenceError::ForeignLock`] for another lock. `resource`
    /// names the row in the error.
    ///
    /// # Errors
    ///
    /// As above, and [`FenceError::InvalidInput`] for a bad `resource` name.
    pub fn check_read(
        &self,
        resource: &str,
        lock: Option<&str>,
        token: Option<i64>,
        fence: &Fence,
    ) -> Result<(), FenceError> {
        let state = row_state(lock, token);
        decide(resource, state.as_ref(), fence, FenceMode::Read).map(drop)
    }
}

/// What a row's two columns say, as a [`FenceState`]; `None` for a row never fenced.
pub(super) fn row_state(lock: Option<&str>, token: Option<i64>) -> Option<FenceState> {
    match (lock, token) {
        (Some(lock), Some(token)) => {
            // The trigger refuses a negative token.
            Some(FenceState { lock: lock.to_owned(), highest: FencingToken::new(u64::try_from(token).unwrap_or(0)) })
        }
        _ => None,
    }
}
