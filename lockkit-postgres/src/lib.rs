//! The PostgreSQL backend of lockkit: locks in the database most teams already run.
//!
//! [`PostgresLockProvider`] keeps the lockkit mutex contract, and elections with observers, on
//! one PostgreSQL server (12 or later). It dereferences to lockkit's [`LockProvider`](lockkit_core::LockProvider):
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
//! # Ok(()) }
//! ```
//!
//! # Settings and URLs
//!
//! `postgres://[user[:password]@]host[:port]/database` (or `postgresql://`); the database is
//! required. Options ([`OPTIONS`]), each the name of a builder method: `lease` (30 s),
//! `renew_every` (a third of the lease), `response_timeout` (5 s, also the server-side
//! `statement_timeout` of the provider's connections), `drift` (a sixtieth of the lease),
//! `schema` (`lockkit`; a lower-case identifier), `migrate` (`true`: create the schema on first
//! use), and TLS as libpq names it: `sslmode`, `sslrootcert`, `sslcert`, `sslkey` (below).
//! [`SCHEME`] registers `postgres://` and `postgresql://` with
//! `lockkit_core::config::register`; the `lockkit` facade does it with its feature `postgres`.
//!
//! # Design, and why
//!
//! - **A lock table with a lease on the database clock**, not advisory locks. An advisory
//!   lock lives as long as its session, so a paused or partitioned holder keeps it until the
//!   server notices a dead connection, which has no bound a holder can compute: the contract
//!   asks that such a holder loses the lock after the lease, and knows it first. So a hold is a
//!   row `<schema>.locks(name primary key, owner, meta, token, since, expires_at)`, where `expires_at`
//!   is `clock_timestamp() + lease` on the server. Only server times are compared with each
//!   other; the client keeps its own deadline (below).
//! - **Grants are one function call**, `<schema>.acquire(name, owner, meta, lease_ms)`, like
//!   the Redis backend's scripts: one round trip, one transaction. It takes a transaction-level
//!   advisory lock on the name's hash, so every grant of a name is serialized, reads the row,
//!   and grants when there is none or it expired, drawing the **fencing token from a sequence**
//!   (`nextval`) while that lock is held, in the same transaction as the grant. Tokens of a name
//!   therefore increase in commit order, even though rows come and go; a sequence never goes
//!   back, across connections, processes and restarts (its WAL record runs ahead of the values
//!   handed out; the test server runs with `fsync` on). Refused, it returns the holder's
//!   remaining lease.
//! - **The lease and the local deadline.** A grant or renewal confirmed for a statement sent at
//!   `t` makes the guard valid until `t + lease - drift` on the client's clock; the row
//!   expires at the server's `clock_timestamp()` at execution (after `t`) plus the lease. So a
//!   paused or partitioned holder's guard reports the loss before the row can expire and
//!   another owner be granted.
//! - **Waiting by `LISTEN`/`NOTIFY`.** Each provider has one dedicated listening connection
//!   (made at its first wait), whose messages are read through `Connection::poll_message`.
//!   `<schema>.release` deletes the own row and calls `pg_notify('<schema>_released', name)` in the
//!   same transaction: the payload names the lock, and the provider wakes only that lock's
//!   waiters. One channel per schema rather than per lock: lock names (up to 1024 bytes) do not
//!   fit a channel name, and a waiter needs no `LISTEN` round trip of its own. A waiter arms its
//!   wake-up before every try; it also wakes when the holder's lease ends (a dead holder
//!   notifies nobody), every 2 s as a safety net, and every 100 ms while the listening
//!   connection is down.
//! - **Fair order** ([`Capabilities::fair`](lockkit_core::Capabilities) and `waiter_count`): a
//!   waiting acquisition's first refused try takes a place in `<schema>.waiters(name, owner,
//!   pos, expires_at)`, `pos` from the sequence `<schema>.positions`, in the same call. A free
//!   lock is granted only to a try with no live waiter ahead of it (an acquisition without a
//!   place, `try_acquire` included, counts every live waiter as ahead), and the grant removes
//!   the winner's place. Every try of a waiter renews its place for twice the safety poll plus
//!   the response timeout, so a waiter that died loses its place after about 5 s and stops
//!   blocking the queue; a waiter that times out or is cancelled leaves it at once (`abandon`).
//!   A release wakes every waiter of the name; the head is granted and the others find
//!   themselves behind it again (no hand-over: the head's own try takes the lock).
//! - **Renewal**: one task per provider renews every hold with one statement per round, an
//!   `UPDATE … FROM unnest(names, owners) … RETURNING`, every `renew_every`. A hold the
//!   statement did not renew is lost at once: `OwnedByAnother` when another row has the name,
//!   `RecordGone` when none has. An unconfirmed round is retried soon; the deadlines keep
//!   running meanwhile.
//! - **A lost reply** (a timeout or a broken connection after the statement was sent): the
//!   outcome is resolved by the owner id, which is unique per acquisition. The next try, with
//!   the same owner id, is granted the row if it is already ours (the function recognises the
//!   owner). An acquisition that ends without a grant (timeout, cancellation) after a try in
//!   doubt calls `<schema>.abandon(name, owner)` in the background: under the name's advisory
//!   lock it voids the owner id (a row in `<schema>.voided`, kept an hour) and deletes the own
//!   row if a lost try made one, and its place in the queue. A try of that owner still on its way through the network
//!   (a partition that heals later) is then refused by `acquire`: no ghost is left, however
//!   late the statement arrives.
//! - **Elections** (contract 25-28; [`LockProvider::election`](lockkit_core::LockProvider::election)):
//!   tables and functions of their own. A candidate is a row of `<schema>.candidates(name,
//!   owner, identity, meta, pos, token, since, expires_at)`; the leader's row carries the term,
//!   a token from the same sequence as the locks' tokens, drawn by `<schema>.campaign` under the
//!   name's advisory lock (the same lock as a lock grant's, so that a name held as a lock is
//!   refused as an election, and the reverse, with `Error::Conflict`). The other candidates wait
//!   in `pos` order like lock waiters; a campaign is an acquisition, with the same lease, local
//!   deadline, batched renewal, lost-reply resolution by the owner id and `abandon` of a
//!   campaign in doubt, so the leadership guard is a lock guard. Every term and every vacancy
//!   (a resignation; a leader whose lease ran out or whose row was deleted, found by the next
//!   campaign or observer read) is appended to the journal `<schema>.terms` in the same
//!   transaction, which keeps the last 1000 entries of each election, and
//!   `pg_notify('<schema>_elections', …)` wakes the waiting candidates (the next one takes the
//!   leadership with its own try, one round trip after the notification) and the observers.
//!   An observer, registered on the provider's listening connection, reads the journal after
//!   the last entry it saw at each notification (and when the leader's lease would run out, and
//!   every 100 ms only while the listening connection is down); when entries it had not read
//!   were trimmed, it reports `LeaderEvent::Gap` and then the leader now.
//! - **Breaking a stuck lock** ([`Capabilities::break_lock`](lockkit_core::Capabilities),
//!   `lockkit break`): `<schema>.break_lock(name)` deletes every holder row of the name under
//!   the name's advisory lock, returns the holds that were still live, and notifies the
//!   name's waiters, which take the lock as after a release, with a greater token. The broken
//!   holder learns it at its next renewal at the latest (`RecordGone`: its row is gone), that
//!   is within `renew_every`, and before its local deadline in any case.
//! - **Schema managed by the backend**: created on first use when missing (`migrate=true`, the
//!   default) or by [`PostgresLockProvider::migrate`]: `CREATE SCHEMA/SEQUENCE/TABLE IF NOT
//!   EXISTS` and `CREATE OR REPLACE FUNCTION` in one transaction, serialized by an advisory
//!   lock so that providers racing to create it do not fail. At connect time the provider
//!   checks that the objects exist and that its role may use them, and otherwise says which
//!   `GRANT`s to run.
//!
//! # Least privileges
//!
//! The schema's owner (or the database owner) runs `migrate()` once; a role that can only take
//! locks then needs (for schema `lockkit`, role `app`), with `migrate=false` in its URL:
//!
//! ```sql
//! GRANT USAGE ON SCHEMA lockkit TO app;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON lockkit.locks TO app;
//! GRANT SELECT, INSERT, DELETE ON lockkit.voided TO app;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON lockkit.waiters TO app;
//! GRANT USAGE ON SEQUENCE lockkit.tokens, lockkit.positions TO app;
//! GRANT EXECUTE ON FUNCTION lockkit.acquire(text,text,text,bigint,bigint), lockkit.release(text,text),
//!   lockkit.abandon(text,text), lockkit.break_lock(text) TO app;
//! -- Elections (the lock grant reads `candidates` too, to refuse a name in use as an election):
//! GRANT SELECT, INSERT, UPDATE, DELETE ON lockkit.candidates TO app;
//! GRANT SELECT, INSERT, DELETE ON lockkit.terms TO app;
//! GRANT SELECT, INSERT, UPDATE ON lockkit.elections TO app;
//! GRANT EXECUTE ON FUNCTION lockkit.campaign(text,text,bytea,text,bigint,bigint), lockkit.resign(text,text),
//!   lockkit.abandon_candidacy(text,text), lockkit.observe_election(text,bigint),
//!   lockkit.election_journal(text,bigint,bytea,timestamptz), lockkit.election_settle(text) TO app;
//! ```
//!
//! (PostgreSQL lets `PUBLIC` execute new functions unless that was revoked; the `EXECUTE`
//! grants matter where it was.) A role without them is told at connect time which `GRANT`s
//! to run.
//!
//! # TLS
//!
//! With the `tls` feature (the `postgres-tls` feature of the `lockkit` crate), `sslmode` takes
//! libpq's five modes ([`SslMode`]) with libpq's meanings: `disable`; `prefer` (the default:
//! TLS when the server offers it, the certificate unchecked); `require` (TLS or nothing; the
//! certificate is checked against `sslrootcert` only when one is given, as libpq does);
//! `verify-ca` (a certificate signed by a trusted root, any host name); `verify-full` (that, and
//! the certificate names the host connected to). `sslrootcert=/path/root.crt` (PEM) replaces the
//! system's roots; `sslcert` and `sslkey` present a client certificate. The builder takes the
//! same as [`ssl_mode`](PostgresLockProviderBuilder::ssl_mode),
//! [`tls_root_certificate`](PostgresLockProviderBuilder::tls_root_certificate) and
//! [`tls_client_certificate`](PostgresLockProviderBuilder::tls_client_certificate). Both the
//! command connection and the `LISTEN` connection use it. A certificate that does not verify,
//! or a server without TLS under `require`, is an [`InvalidConfig`](lockkit_core::Error) error
//! at connect time saying what to change. Without the feature, `prefer` connects in plain text
//! (as a libpq built without TLS does) and every other TLS setting is refused at build time
//! with the feature to enable.
//!
//! The connector is tokio-postgres-rustls on rustls with ring, chosen over postgres-native-tls:
//! it is the TLS stack the Redis backend's `tls` already brings (rustls 0.23 with ring), it
//! needs no system OpenSSL to build or run, and it does SCRAM channel binding. The crypto
//! provider is set on the provider's own rustls configuration: nothing is installed as the
//! process default. `verify-ca` is a verifier that runs webpki's and forgives only a name
//! mismatch.
//!
//! # Driver: tokio-postgres
//!
//! Chosen over sqlx: it is small (no query macros, no compile-time database, no pool we do
//! not need: a provider keeps one command connection, which pipelines concurrent statements,
//! and one listening connection), and its `Connection::poll_message` hands out the
//! asynchronous `NOTIFY` messages that the wake-ups are built on.
//!
//! The command connection carries at most 32 statements at once; more wait their turn in the
//! provider, in arrival order, and their response timeout starts when they go. The server
//! runs one connection's statements one after another, so a deeper pipeline gains nothing and
//! would make the last of 10,000 acquisitions started together outwait the response timeout
//! behind the others (and the connection be given up as broken, though the server was
//! answering all along). The renewal round does not wait its turn: its one statement renews
//! every hold while their deadlines run.
//!
//! # Not yet
//!
//! Read-write locks and semaphores are not offered (their capabilities are off, so the core
//! answers `Unsupported`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod builder;
mod election;
mod election_sql;
mod listener;
mod observe;
mod provider;
mod sql;
mod store;
mod tls;

pub use builder::{DEFAULT_LEASE, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SCHEMA, OPTIONS, PostgresLockProviderBuilder};
pub use provider::{PostgresLockProvider, RenewalStats};
pub use tls::SslMode;
/// The driver, re-exported for [`PostgresLockProvider::open_client`].
pub use tokio_postgres;

/// The value of the `name` column for lock `name`: the name itself, with `%` written `%25` and
/// NUL (which PostgreSQL's `text` cannot hold) written `%00`, so that distinct names never share
/// a row. Release notifications carry this value too.
pub fn stored_name(name: &str) -> String {
    if !name.contains(['%', '\0']) {
        return name.to_owned();
    }
    name.replace('%', "%25").replace('\0', "%00")
}

/// The backend's name in errors and spans.
pub const BACKEND: &str = "postgres";

/// The scheme table entry: `postgres://` and `postgresql://`.
pub const SCHEME: lockkit_core::config::Scheme = lockkit_core::config::Scheme {
    names: &["postgres", "postgresql"],
    backend: BACKEND,
    connect: provider::connect_url,
};

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
