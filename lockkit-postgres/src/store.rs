//! The connection to the server: one command connection per provider and runtime, made lazily
//! on the runtime that uses it (the hot path takes no thread hop; the renewal round and the
//! releases of dropped guards run on lockkit's home runtime, with the home runtime's), remade
//! when it broke; every statement bounded by the response timeout; the schema checked (and
//! created, when allowed) once per provider.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lockkit_core::home::PerRuntime;
use lockkit_core::{Error, LockName, RenewalCounters, Result};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use crate::BACKEND;
use crate::config::Settings;
use crate::sql::Statements;

/// How many statements of one provider may be on the command connection at once; the others
/// wait their turn here, before their response timeout starts. The server runs a connection's
/// statements one after another, so a deeper pipeline only makes each statement wait longer
/// for its reply: 10,000 acquisitions started at once would otherwise all be sent, and the last
/// ones would outwait the response timeout behind the others (and the connection be given up
/// as broken) although the server never stopped answering.
const MAX_IN_FLIGHT: usize = 32;

/// The SQLSTATE of "insufficient privilege".
const INSUFFICIENT_PRIVILEGE: &str = "42501";

fn is_insufficient_privilege(error: &tokio_postgres::Error) -> bool {
    error.code().map(tokio_postgres::error::SqlState::code) == Some(INSUFFICIENT_PRIVILEGE)
}

/// The SQLSTATEs of errors with which the server rolled a statement back for a reason that a
/// new try may not meet: a serialization failure, a deadlock, a lock not available (a
/// `lock_timeout`), a cancelled statement (a `statement_timeout`, `pg_cancel_backend`).
/// Nothing happened; they are retried like a statement that was never sent.
const ROLLED_BACK_TRANSIENT: [&str; 4] = ["40001", "40P01", "55P03", "57014"];

/// The SQLSTATEs with which the server ends the connection for a reason that a new connection
/// may not meet: an administrator's or a crash's shutdown (`pg_terminate_backend` included),
/// "cannot connect now" (starting up, shutting down, in recovery), an idle-session timeout.
/// The statement may have committed before the end: they count as a lost reply.
const CONNECTION_ENDED: [&str; 4] = ["57P01", "57P02", "57P03", "57P05"];

/// How the server's error `code` (a SQLSTATE) is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerError {
    /// Rolled back for a reason a new try may not meet ([`ROLLED_BACK_TRANSIENT`]).
    Transient,
    /// The connection ended ([`CONNECTION_ENDED`], and the connection exceptions of class
    /// `08`): the statement's outcome is unknown.
    ConnectionEnded,
    /// Anything else: a new try would meet it again.
    Permanent,
}

impl ServerError {
    pub(crate) fn of(code: &str) -> Self {
        if ROLLED_BACK_TRANSIENT.contains(&code) {
            Self::Transient
        } else if CONNECTION_ENDED.contains(&code) || code.starts_with("08") {
            Self::ConnectionEnded
        } else {
            Self::Permanent
        }
    }
}

/// How a statement failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The statement did not take effect, and a new try may succeed: it was never sent (no
    /// connection), or the server rolled it back with a transient error
    /// ([`ServerError::Transient`], surfaced as a retryable connection error).
    NotSent(Error),
    /// The statement may or may not have taken effect: the reply was lost or late, or the
    /// server ended the connection ([`ServerError::ConnectionEnded`]).
    Unknown(Error),
    /// The server answered with an error a new try would meet again: nothing happened.
    Refused(Error),
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Self::NotSent(e) | Self::Unknown(e) | Self::Refused(e) => e,
        }
    }
}

/// A command connection and the statements of the hot path prepared on it once
/// ([`Statements::prepared`]): each of their calls is then a Bind and an Execute, not a Parse,
/// a Describe and the server's parse, analysis and planning of the statement at every call.
/// A prepared statement belongs to its connection: a new connection prepares them again.
#[derive(Debug)]
pub(crate) struct Connection {
    client: Client,
    prepared: Vec<(String, Statement)>,
}

impl Connection {
    /// The statement prepared for the text `statement`, if it is one of the hot path's.
    fn prepared(&self, statement: &str) -> Option<&Statement> {
        self.prepared.iter().find(|(which, _)| *which == statement).map(|(_, prepared)| prepared)
    }
}

/// The command connection of one provider.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) settings: Settings,
    pub(crate) sql: Statements,
    /// The command connection of each runtime the provider is used on.
    connections: PerRuntime<Arc<Connection>>,
    schema_ready: AtomicBool,
    /// Turns on the command connection ([`MAX_IN_FLIGHT`]), in arrival order.
    in_flight: tokio::sync::Semaphore,
    /// What the renewal rounds did.
    pub(crate) renewals: RenewalCounters,
}

impl Store {
    pub(crate) fn new(settings: Settings) -> Self {
        let sql = Statements::new(&settings.schema);
        Self {
            settings,
            sql,
            connections: PerRuntime::new(),
            schema_ready: AtomicBool::new(false),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            renewals: RenewalCounters::default(),
        }
    }

    pub(crate) fn connection_error(&self, lock: Option<&LockName>, source: impl Into<lockkit_core::BoxError>) -> Error {
        Error::connection(BACKEND, lock, source).with_server(Some(&self.settings.address))
    }

    pub(crate) fn store_error(&self, lock: Option<&LockName>, source: impl Into<lockkit_core::BoxError>) -> Error {
        Error::backend(BACKEND, lock, source).with_server(Some(&self.settings.address))
    }

    /// Opens a new connection on the current runtime (its task is spawned there).
    pub(crate) async fn open(&self) -> Result<Client> {
        let connect = self.settings.tls.connect(&self.settings.config);
        let (client, connection) = match tokio::time::timeout(self.settings.response_timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(error)) => return Err(self.classify_connect(error)),
            Err(_) => {
                return Err(self.connection_error(
                    None,
                    format!("no answer within {:?} while connecting", self.settings.response_timeout),
                ));
            }
        };
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "postgres connection ended");
            }
        });
        // No JIT compilation: the renewal round of many holds is estimated costly enough to
        // be compiled, which took a second of each round at 100,000 holds (EXPLAIN ANALYZE)
        // for a statement that runs once.
        match tokio::time::timeout(self.settings.response_timeout, client.batch_execute("SET jit = off")).await {
            Ok(Ok(())) => Ok(client),
            Ok(Err(error)) => Err(self.connection_error(None, error)),
            Err(_) => Err(self.connection_error(
                None,
                format!("no answer within {:?} while connecting", self.settings.response_timeout),
            )),
        }
    }

    /// A connection error, or a clear configuration error when the server refused us for
    /// a reason that retrying will not fix (authentication, a missing database).
    pub(crate) fn classify_connect(&self, error: tokio_postgres::Error) -> Error {
        if let Some(message) = self.settings.tls.explain(&error, &self.settings.address) {
            return Error::invalid_config(BACKEND, message);
        }
        match error.code().map(tokio_postgres::error::SqlState::code) {
            Some("3D000") => Error::invalid_config(
                BACKEND,
                format!(
                    "database {:?} does not exist on {}; create it or name another in the URL's path ({error})",
                    self.settings.config.get_dbname().unwrap_or_default(),
                    self.settings.address
                ),
            ),
            Some("28P01" | "28000") => Error::invalid_config(
                BACKEND,
                format!(
                    "{} refused the user {:?}: fix the user or password in the URL, or pg_hba.conf ({error})",
                    self.settings.address,
                    self.settings.config.get_user().unwrap_or_default()
                ),
            ),
            _ => self.connection_error(None, error),
        }
    }

    /// The command connection of the current runtime, opened (with the schema checked, and
    /// the hot path's statements prepared) when there is none or it broke. Cancelled before it
    /// is stored, a new connection is dropped, and its prepared statements with it.
    pub(crate) async fn client(&self) -> Result<Arc<Connection>> {
        self.connections.get_or_make(|connection| !connection.client.is_closed(), self.connect()).await
    }

    /// A new command connection on the current runtime, ready for the hot path.
    async fn connect(&self) -> Result<Arc<Connection>> {
        let client = self.open().await?;
        if !self.schema_ready.load(Ordering::Acquire) {
            self.prepare_schema(&client).await?;
            self.schema_ready.store(true, Ordering::Release);
        }
        // One round trip for all of them: the client pipelines the requests.
        let hot = self.sql.prepared();
        let prepared =
            futures_util::future::try_join_all(hot.iter().map(|(text, types)| client.prepare_typed(text, types)));
        let prepared = self.bounded(prepared).await.map_err(|e| e.with_context("prepare the statements"))?;
        let prepared = hot.iter().map(|(text, _)| (*text).to_owned()).zip(prepared).collect();
        Ok(Arc::new(Connection { client, prepared }))
    }

    /// Forgets `client` if it is still the current runtime's (a statement on it timed out).
    fn discard(&self, client: &Arc<Connection>) {
        self.connections.remove_if(|current| Arc::ptr_eq(current, client));
    }

    /// Runs `statement` on the command connection within the response timeout: one round
    /// trip (a statement of the hot path is bound to its prepared statement; any other is
    /// sent by `query_typed` with the parameters' types, not prepared first). It waits its
    /// turn first when [`MAX_IN_FLIGHT`] statements are on the connection; the response
    /// timeout starts when it goes.
    pub(crate) async fn query(
        &self,
        lock: Option<&LockName>,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> std::result::Result<Vec<Row>, Failure> {
        // The semaphore is never closed.
        let _turn = self.in_flight.acquire().await.map_err(|e| Failure::NotSent(self.connection_error(lock, e)))?;
        self.query_now(lock, statement, params).await
    }

    /// As [`query`](Self::query), without waiting for a turn: for the renewal round's
    /// statements (a few at a time, `client.rs`), which must not queue behind a burst of
    /// acquisitions while the holds' deadlines run.
    pub(crate) async fn query_now(
        &self,
        lock: Option<&LockName>,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> std::result::Result<Vec<Row>, Failure> {
        let client = self.client().await.map_err(|error| match error {
            Error::Connection { .. } => Failure::NotSent(error),
            other => Failure::Refused(other),
        })?;
        let run = async {
            match client.prepared(statement) {
                Some(prepared) => {
                    let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
                    client.client.query(prepared, &values).await
                }
                None => client.client.query_typed(statement, params).await,
            }
        };
        match tokio::time::timeout(self.settings.response_timeout, run).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(error)) if error.code().is_some() => match ServerError::of(error.code().map_or("", |c| c.code())) {
                ServerError::Permanent => Err(Failure::Refused(self.store_error(lock, error))),
                ServerError::Transient => Err(Failure::NotSent(self.connection_error(lock, error))),
                ServerError::ConnectionEnded => {
                    self.discard(&client);
                    Err(Failure::Unknown(self.connection_error(lock, error)))
                }
            },
            Ok(Err(error)) => {
                self.discard(&client);
                Err(Failure::Unknown(self.connection_error(lock, error)))
            }
            Err(_) => {
                // A connection that does not answer is given up: the next statement opens
                // a new one instead of queueing behind a blackhole.
                self.discard(&client);
                Err(Failure::Unknown(
                    self.connection_error(lock, format!("no answer within {:?}", self.settings.response_timeout)),
                ))
            }
        }
    }

    /// Checks that the schema is there and usable by this role; creates it when missing and
    /// `migrate` is on.
    async fn prepare_schema(&self, client: &Client) -> Result<()> {
        let present = self.schema_present(client).await?;
        if !present {
            if !self.settings.migrate {
                return Err(Error::invalid_config(
                    BACKEND,
                    format!(
                        "the lock schema {:?} is missing on {}; run PostgresLockProvider::migrate() once as a role \
                         that may create it, or set migrate=true",
                        self.sql.schema, self.settings.address
                    ),
                ));
            }
            self.migrate_on(client).await?;
        }
        self.check_privileges(client).await?;
        self.register(client).await
    }

    /// Records this provider's lease (and whether it commits grants without waiting for the
    /// disk) in the schema's settings row, durably, before its first grant: the restart fence
    /// lasts the longest lease of any provider. No write when the row says so already. It waits
    /// for another provider's registration (the row's lock) within the statement timeout,
    /// whatever `lock_timeout` the role sets.
    async fn register(&self, client: &Client) -> Result<()> {
        let s = &self.sql.schema;
        let lease_ms = self.settings.lease.as_millis();
        let asynchronous = !self.settings.durable_grants;
        let statement = format!(
            "BEGIN; SET LOCAL synchronous_commit = on; SET LOCAL lock_timeout = 0; \
             UPDATE {s}.settings SET longest_lease_ms = greatest(longest_lease_ms, {lease_ms}), \
               async_grants = async_grants OR {asynchronous} \
             WHERE longest_lease_ms < {lease_ms} OR (NOT async_grants AND {asynchronous}); COMMIT;"
        );
        match self.bounded_raw(client.batch_execute(&statement)).await? {
            Ok(()) => Ok(()),
            Err(error) if is_insufficient_privilege(&error) => Err(self.privileges_error()),
            Err(error) if error.code().is_some() => {
                Err(self.store_error(None, error).with_context("record the lease in the lock schema's settings"))
            }
            Err(error) => {
                Err(self.connection_error(None, error).with_context("record the lease in the lock schema's settings"))
            }
        }
    }

    async fn schema_present(&self, client: &Client) -> Result<bool> {
        // Without USAGE on an existing schema, looking into it is refused: say which GRANTs.
        let row = match self.bounded_raw(client.query_one(&self.sql.present, &[])).await? {
            Ok(row) => row,
            Err(error) if is_insufficient_privilege(&error) => return Err(self.privileges_error()),
            Err(error) if error.code().is_some() => return Err(self.store_error(None, error)),
            Err(error) => return Err(self.connection_error(None, error)),
        };
        Ok(row.try_get::<_, Option<bool>>(0).map_err(|e| self.store_error(None, e))?.unwrap_or(false))
    }

    /// Creates the schema (idempotent, serialized with other providers).
    pub(crate) async fn migrate_on(&self, client: &Client) -> Result<()> {
        match self.bounded_raw(client.batch_execute(&self.sql.migration())).await? {
            Ok(()) => Ok(()),
            Err(error) if is_insufficient_privilege(&error) => Err(Error::invalid_config(
                BACKEND,
                format!(
                    "the role {:?} may not create the lock schema {:?} on {} ({error}); run \
                         PostgresLockProvider::migrate() once as the database owner, or GRANT CREATE ON DATABASE \
                         to this role",
                    self.settings.config.get_user().unwrap_or_default(),
                    self.sql.schema,
                    self.settings.address
                ),
            )),
            Err(error) if error.code().is_some() => {
                Err(self.store_error(None, error).with_context("create the lock schema"))
            }
            Err(error) => Err(self.connection_error(None, error).with_context("create the lock schema")),
        }
    }

    async fn check_privileges(&self, client: &Client) -> Result<()> {
        let row = self.bounded(client.query_one(&self.sql.privileges, &[])).await?;
        let all = (0..row.len()).all(|i| row.try_get::<_, Option<bool>>(i).ok().flatten().unwrap_or(false));
        if all { Ok(()) } else { Err(self.privileges_error()) }
    }

    /// The role lacks privileges on the schema: which `GRANT`s to run.
    fn privileges_error(&self) -> Error {
        let role = self.settings.config.get_user().unwrap_or("ROLE");
        Error::invalid_config(
            BACKEND,
            format!(
                "the role {role:?} lacks privileges on the lock schema {:?} on {}; as its owner run: {}",
                self.sql.schema,
                self.settings.address,
                self.sql.grants(role)
            ),
        )
    }

    async fn bounded<T>(
        &self,
        future: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match self.bounded_raw(future).await? {
            Ok(value) => Ok(value),
            Err(error) if error.code().is_some() => Err(self.store_error(None, error)),
            Err(error) => Err(self.connection_error(None, error)),
        }
    }

    async fn bounded_raw<T>(
        &self,
        future: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<std::result::Result<T, tokio_postgres::Error>> {
        tokio::time::timeout(self.settings.response_timeout, future)
            .await
            .map_err(|_| self.connection_error(None, format!("no answer within {:?}", self.settings.response_timeout)))
    }

    /// Creates the schema now on a connection of its own.
    pub(crate) async fn migrate(&self) -> Result<()> {
        let client = self.open().await?;
        self.migrate_on(&client).await?;
        self.schema_ready.store(false, Ordering::Release);
        Ok(())
    }

    /// One `SELECT 1` round trip on the command connection.
    pub(crate) async fn ping(&self) -> Result<()> {
        self.query(None, "SELECT 1", &[]).await.map(drop).map_err(Failure::into_error)
    }
}

#[cfg(test)]
mod tests {
    use super::ServerError;

    #[test]
    fn transient_server_errors_are_told_from_final_ones() {
        for code in ["40001", "40P01", "55P03", "57014"] {
            assert_eq!(ServerError::of(code), ServerError::Transient, "{code}");
        }
        for code in ["57P01", "57P02", "57P03", "57P05", "08006", "08P01"] {
            assert_eq!(ServerError::of(code), ServerError::ConnectionEnded, "{code}");
        }
        // A dropped database (57P04), a missing privilege, a raised conflict: final.
        for code in ["57P04", "42501", "P0001", "23505", "42883"] {
            assert_eq!(ServerError::of(code), ServerError::Permanent, "{code}");
        }
    }
}
