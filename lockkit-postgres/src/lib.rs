//! The PostgreSQL backend of lockkit: locks in the database most teams already run.
//!
//! [`PostgresLockProvider`] keeps the lockkit contract for mutexes, read-write locks, counting
//! semaphores and elections with observers on one PostgreSQL server (12 or later). It
//! dereferences to lockkit's [`LockProvider`](lockkit_core::LockProvider):
//!
//! ```no_run
//! use lockkit_postgres::PostgresLockProvider;
//!
//! # async fn run() -> lockkit_core::Result<()> {
//! // Eager: checks every setting, connects, checks (or creates) the schema.
//! let provider = PostgresLockProvider::connect("postgres://app:secret@127.0.0.1:5432/appdb?lease=10s").await?;
//! let guard = provider.lock("orders/42")?.acquire().await?;
//! println!("holding orders/42 with token {}", guard.token());
//! guard.release().await?;
//!
//! // Lazy: checks every setting, connects on first use.
//! let lazy = PostgresLockProvider::builder().url("postgres://app:secret@127.0.0.1:5432/appdb").build()?;
//! let leadership = lazy.election("services/scheduler")?.campaign("10.0.0.7:8080").await?;
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! # Settings and URLs
//!
//! `postgres://[user[:password]@]host[:port]/database` (or `postgresql://`); the database is
//! required. Options ([`OPTIONS`]), each the name of a builder method: `lease` (30 s),
//! `renew_every` (a third of the lease), `response_timeout` (5 s, at most half the lease; also
//! the server-side `statement_timeout` of the provider's connections), `drift` (a sixtieth of
//! the lease), `schema` (`lockkit`), `migrate` (`true`: create the schema on first use),
//! `durable_grants` (`false`), `max_hold`, and TLS as libpq names it: `sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey` ([`SslMode`]; feature `tls`). [`SCHEME`] registers
//! `postgres://` and `postgresql://` in lockkit's scheme table.
//!
//! # How it works
//!
//! - **A lock table with a lease on the database clock**, not advisory locks (a paused holder
//!   would keep an advisory lock until the server noticed its dead connection, with no bound
//!   it could compute): a hold is a row of `<schema>.locks` that expires at the server's
//!   `clock_timestamp() + lease`, and the guard's deadline runs from the statement's send time.
//! - **A grant is one function call** under a transaction-level advisory lock on the name,
//!   and draws the **fencing token** there: `max(sequence, server clock in µs)`, so tokens
//!   increase across connections, restarts and crashes, while the server clock does not step
//!   back.
//! - **Fair waiting by `LISTEN`/`NOTIFY`**: waiters take a place in `<schema>.waiters`; the
//!   release hands the lock to the head of the queue in its own transaction and notifies only
//!   that waiter's provider.
//! - **Renewal** is one `UPDATE … FROM unnest(…)` per round for every hold of the provider.
//! - **Lost replies** are resolved by the owner id; an acquisition given up in doubt voids it
//!   (`<schema>.abandon`), so a late try is refused. Transient server errors are retryable.
//! - **Grants without the WAL flush**, made safe by the **restart fence**: after a server
//!   crash no grant is made for the longest lease of any provider, by which time every holder
//!   whose grant or renewal was lost was signalled lost. `durable_grants=true` makes grants
//!   wait for the flush instead.
//! - **Read-write locks, semaphores and elections** are rows with a kind, in the same queue;
//!   elections add a candidates table and a journal of terms for observers.
//!
//! # Deployment
//!
//! A provider keeps two connections, each one server session: a pooler in front must pool
//! by session (PgBouncer's `pool_mode = session`). The schema's owner runs
//! [`migrate`](PostgresLockProvider::migrate) once; a role that only takes locks needs the
//! grants the guide lists, and is told at connect time which `GRANT`s it lacks.
//!
//! The driver is tokio-postgres (small, pipelining, and its `Connection::poll_message` hands
//! out the notifications the wake-ups are built on); TLS is rustls with ring, set on the
//! provider's own configuration, never installed process-wide.
//!
//! # More
//!
//! The guide's PostgreSQL page has the rest: every option with its default, the hand-over
//! and its safety, the restart fence, kinds and elections, the least privileges as SQL,
//! poolers and TLS: <https://docs.rs/lockkit/latest/lockkit/guide/backends/postgres/index.html>
//! (in this repository: `src/guide/backends/postgres.md`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod client;
mod config;
mod election;
mod election_sql;
mod held;
mod listener;
mod observe;
mod provider;
mod sql;
mod store;
mod tls;

pub use config::{DEFAULT_LEASE, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SCHEMA, OPTIONS, PostgresLockProviderBuilder};
pub use provider::{PostgresLockProvider, RenewalStats};
pub use tls::SslMode;
/// The driver, re-exported for [`PostgresLockProvider::open_client`].
pub use tokio_postgres;

/// The value of the `name` column for lock `name`: the name itself, with `%` written `%25` and
/// NUL (which PostgreSQL's `text` cannot hold) written `%00`, so that distinct names never share
/// a row. Release notifications carry this value too.
pub fn stored_name(name: &str) -> String {
    stored(name).into_owned()
}

/// [`stored_name`], borrowed when the name needs no escape (the renewal round's thousands of
/// names).
pub(crate) fn stored(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['%', '\0']) {
        return std::borrow::Cow::Borrowed(name);
    }
    std::borrow::Cow::Owned(name.replace('%', "%25").replace('\0', "%00"))
}

/// The backend's name in errors and spans.
pub const BACKEND: &str = "postgres";

/// The scheme table entry: `postgres://` and `postgresql://`.
pub const SCHEME: lockkit_core::config::Scheme =
    lockkit_core::config::Scheme::new(&["postgres", "postgresql"], BACKEND, provider::connect_url)
        .with_feature("postgres")
        .with_urls(&[(
            "postgres://[user[:password]@]host[:port]/database",
            "PostgreSQL (or `postgresql://`; the database is required; TLS with feature `postgres-tls`)",
        )])
        .with_options(OPTIONS);

#[cfg(test)]
mod tests {
    use super::stored_name;

    #[test]
    fn stored_names_never_collide() {
        let names = ["a", "a%", "a%25", "a\0b", "a%00b", "a\0", "%", "%%", "", "x/y z é"];
        let stored: std::collections::HashSet<String> = names.iter().map(|n| stored_name(n)).collect();
        assert_eq!(stored.len(), names.len());
        assert!(stored.iter().all(|s| !s.contains('\0')));
        assert_eq!(stored_name("orders/42"), "orders/42");
    }
}
