//! The PostgreSQL fence's SQL, written once for tokio-postgres, sqlx and `psql`: the table,
//! the function, the statement, and how the function's errors read back.

use lockkit_core::{Fence, FenceMode, FencingToken};

use crate::FenceError;

/// The SQLSTATE the function raises for a stale token; its `DETAIL` is the highest token.
pub const STALE_SQLSTATE: &str = "LKF01";
/// The SQLSTATE the function raises for a token of another lock; its `DETAIL` is the lock the
/// resource is bound to.
pub const FOREIGN_LOCK_SQLSTATE: &str = "LKF02";
/// The SQLSTATE the function raises for bad input (a resource name that is empty or over
/// 1024 bytes, no lock identity, a negative token, a mode that is neither write nor read).
pub const INVALID_INPUT_SQLSTATE: &str = "LKF03";

/// The schema of the fence's table and function unless another is given.
pub const DEFAULT_SCHEMA: &str = "lockkit_fence";

/// The migration: the schema, the table `fences` (one row per resource: the lock it is bound
/// to and the highest token accepted for a write) and the function
/// `fence(resource, lock_id, token, mode)` (the function `fence_table` follows, from
/// `fence_table.sql`). Idempotent; `{schema}` is replaced by the schema.
const MIGRATION: &str = r#"
SELECT pg_advisory_xact_lock(hashtext('{schema}.fence migration'));
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.fences (
    resource text PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
    lock_id text NOT NULL,
    highest bigint NOT NULL CHECK (highest >= 0)
);
COMMENT ON TABLE {schema}.fences IS 'lockkit fences: per resource, the lock it is bound to and the highest fencing token accepted for a write. Never delete a row while the lock is in use: the token would go back.';
CREATE OR REPLACE FUNCTION {schema}.fence(p_resource text, p_lock_id text, p_token bigint, p_mode text DEFAULT 'write')
RETURNS bigint
LANGUAGE plpgsql
AS $fence$
DECLARE
    v_lock text;
    v_highest bigint;
BEGIN
    IF p_resource IS NULL OR octet_length(p_resource) NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'lockkit fence: the resource name must be 1 to 1024 bytes long, not %', coalesce(octet_length(p_resource), 0)
            USING ERRCODE = 'LKF03';
    END IF;
    IF p_lock_id IS NULL OR p_lock_id = '' OR p_token IS NULL OR p_token < 0 THEN
        RAISE EXCEPTION 'lockkit fence: give the lock identity ($LOCKKIT_LOCK_ID) and a token ($LOCKKIT_FENCING_TOKEN) for resource %', p_resource
            USING ERRCODE = 'LKF03';
    END IF;
    IF p_mode = 'write' THEN
        -- The common case first: a resource already bound to this lock, the token not below.
        UPDATE {schema}.fences AS f SET highest = p_token
            WHERE f.resource = p_resource AND f.lock_id = p_lock_id AND f.highest <= p_token
        RETURNING f.highest INTO v_highest;
        IF FOUND THEN
            RETURN v_highest;
        END IF;
        INSERT INTO {schema}.fences AS f (resource, lock_id, highest) VALUES (p_resource, p_lock_id, p_token)
        ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest
            WHERE f.lock_id = excluded.lock_id AND f.highest <= excluded.highest
        RETURNING f.highest INTO v_highest;
        IF FOUND THEN
            RETURN v_highest;
        END IF;
        SELECT f.lock_id, f.highest INTO v_lock, v_highest FROM {schema}.fences f WHERE f.resource = p_resource;
    ELSIF p_mode = 'read' THEN
        -- FOR SHARE: no write with a greater token commits until this transaction ends, so the
        -- reads that follow in it are checked too. Readers do not block each other.
        SELECT f.lock_id, f.highest INTO v_lock, v_highest FROM {schema}.fences f WHERE f.resource = p_resource FOR SHARE;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF v_lock = p_lock_id AND v_highest <= p_token THEN
            RETURN v_highest;
        END IF;
    ELSE
        RAISE EXCEPTION 'lockkit fence: mode % is neither write nor read ($LOCKKIT_FENCE_MODE)', quote_nullable(p_mode)
            USING ERRCODE = 'LKF03';
    END IF;
    IF v_lock IS DISTINCT FROM p_lock_id THEN
        RAISE EXCEPTION 'lockkit fence: resource % is fenced by lock %, not by %', p_resource, v_lock, p_lock_id
            USING ERRCODE = 'LKF02', DETAIL = v_lock,
                  HINT = 'tokens of different locks cannot be compared; write it under the lock that guards it';
    END IF;
    RAISE EXCEPTION 'lockkit fence: stale fencing token % for resource %: a write with token % was accepted', p_token, p_resource, v_highest
        USING ERRCODE = 'LKF01', DETAIL = v_highest::text,
              HINT = 'a newer holder of the lock has written since: stop, and roll back';
END
$fence$;
"#;

/// The function `fence_table(table, lock column, token column)` of the fenced table, part of
/// the migration.
const FENCE_TABLE: &str = include_str!("fence_table.sql");

/// The fence's SQL for one schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FenceSql {
    pub(crate) schema: String,
    /// `SELECT schema.fence($1, $2, $3, $4)`.
    pub(crate) check: String,
    /// `SELECT lock_id, highest FROM schema.fences WHERE resource = $1`.
    pub(crate) state: String,
}

impl FenceSql {
    /// The SQL of `schema`.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a schema that is not a plain lower-case identifier.
    pub(crate) fn new(schema: &str) -> Result<Self, FenceError> {
        let plain = schema.len() <= 63
            && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(FenceError::invalid(format!(
                "the schema {schema:?} is not a plain identifier; give lower-case letters, digits and _ (at most 63), such as {DEFAULT_SCHEMA}"
            )));
        }
        Ok(Self {
            schema: schema.to_owned(),
            check: format!("SELECT {schema}.fence($1, $2, $3, $4)"),
            state: format!("SELECT lock_id, highest FROM {schema}.fences WHERE resource = $1"),
        })
    }

    /// The migration for this schema.
    pub(crate) fn migration(&self) -> String {
        [MIGRATION, FENCE_TABLE].concat().replace("{schema}", &self.schema)
    }

    /// What creates the fence when it is missing.
    pub(crate) fn how_to_set_up(&self) -> String {
        format!(
            "the schema {0}, its table fences or its function fence is missing; run PgFence::migrate once (or the SQL of PgFence::migration) on the database",
            self.schema
        )
    }
}

/// The parameters of the check statement for an operation that does `access`: the lock's
/// identity, the token as PostgreSQL's `bigint`, the mode. A read fence is checked as a read
/// whatever the access; a write fence as `access`.
///
/// # Errors
///
/// [`FenceError::InvalidInput`] for a bad resource name, a token above `i64::MAX` (no lockkit
/// backend issues one; server-clock tokens reach it in the year 294,000), or a read fence
/// given to a write.
pub(crate) fn parameters(
    resource: &str,
    fence: &Fence,
    access: FenceMode,
) -> Result<(String, i64, &'static str), FenceError> {
    crate::check_resource(resource)?;
    if access == FenceMode::Write && fence.mode() == FenceMode::Read {
        return Err(FenceError::invalid(format!(
            "resource {resource:?}: a read fence (a read guard's) cannot write; write under a write, exclusive or permit hold"
        )));
    }
    let token = i64::try_from(fence.token().get()).map_err(|_| {
        FenceError::invalid(format!(
            "token {} does not fit PostgreSQL's bigint; the PostgreSQL fence takes tokens up to {}",
            fence.token(),
            i64::MAX
        ))
    })?;
    let mode = if fence.mode() == FenceMode::Read { FenceMode::Read } else { access };
    Ok((fence.lock().to_string(), token, mode.as_str()))
}

/// The typed error for a database error of the fence function (`code`, its `detail`), or
/// `None` when it is another error.
pub(crate) fn refusal(
    sql: &FenceSql,
    code: &str,
    message: &str,
    detail: Option<&str>,
    resource: &str,
    fence: &Fence,
) -> Option<FenceError> {
    match code {
        STALE_SQLSTATE => detail.and_then(|d| d.trim().parse::<u64>().ok()).map(|highest| FenceError::Stale {
            resource: resource.to_owned(),
            token: fence.token(),
            highest: FencingToken::new(highest),
        }),
        FOREIGN_LOCK_SQLSTATE => Some(FenceError::ForeignLock {
            resource: resource.to_owned(),
            expected: detail.unwrap_or_default().to_owned(),
            got: fence.lock().clone(),
        }),
        INVALID_INPUT_SQLSTATE => Some(FenceError::invalid(message.to_owned())),
        // undefined_table, undefined_function, invalid_schema_name
        "42P01" | "42883" | "3F000" => Some(FenceError::NotSetUp { sink: "postgres", how: sql.how_to_set_up() }),
        _ => None,
    }
}
