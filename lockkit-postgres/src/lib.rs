//! The PostgreSQL backend of lockkit: locks in the database most teams already run.
//!
//! [`PostgresLockProvider`] keeps the lockkit contract for mutexes, read-write locks, counting
//! semaphores and elections with observers on one PostgreSQL server (12 or later). It dereferences to lockkit's [`LockProvider`](lockkit_core::LockProvider):
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
//! use), `durable_grants` (`false`: grants do not wait for the WAL flush; see "Grants without
//! the flush: the restart fence" below), and TLS as libpq names it: `sslmode`, `sslrootcert`, `sslcert`, `sslkey` (below).
//! [`SCHEME`] registers `postgres://` and `postgresql://` with
//! `lockkit_core::config::register`; the `lockkit` facade does it with its feature `postgres`.
//!
//! # Design, and why
//!
//! - **A lock table with a lease on the database clock**, not advisory locks. An advisory
//!   lock lives as long as its session, so a paused or partitioned holder keeps it until the
//!   server notices a dead connection, which has no bound a holder can compute: the contract
//!   asks that such a holder loses the lock after the lease, and knows it first. So a hold is a
//!   row `<schema>.locks(name, owner, meta, token, since, expires_at, kind, permits)`, keyed by
//!   `(name, owner)`, where `expires_at` is `clock_timestamp() + lease` on the server. Only server times are compared with each
//!   other; the client keeps its own deadline (below).
//! - **Grants are one function call**, `<schema>.acquire(name, owner, meta, lease_ms,
//!   queue_ms, kind, permits)`, like
//!   the Redis backend's scripts: one round trip, one transaction. It takes a transaction-level
//!   advisory lock on the name's hash, so every grant of a name is serialized, reads the row,
//!   and grants when there is none or it expired, drawing the **fencing token** while that lock
//!   is held, in the same transaction as the grant: `<schema>.next_token()`, the greater of the
//!   sequence's `nextval` and the server clock in microseconds (the sequence moved up to it).
//!   Tokens of a name therefore increase in commit order, even though rows come and go, across
//!   connections, processes and restarts, and across a crash that lost the sequence's last
//!   advance with a grant that did not wait for the flush (below): that rests on the
//!   assumption that **the server clock does not step back** (as the Redis backend's tokens
//!   do without AOF), and that two grants of one name, serialized by its advisory lock until
//!   commit, are at least a microsecond apart. Refused, it returns the holder's remaining
//!   lease. **The lean path**: when there is nothing at all on the name (no holder row, live
//!   or expired, no place in the queue, no election candidate), the owner is not voided and no
//!   restart fence holds, one statement checks all of that and the row is inserted; the kind,
//!   fairness and conflict checks run only when something is there (measured server-side: a
//!   grant's function work about halved).
//! - **The lease and the local deadline.** A grant or renewal confirmed for a statement sent at
//!   `t` makes the guard valid until `t + lease - drift` on the client's clock; the row
//!   expires at the server's `clock_timestamp()` at execution (after `t`) plus the lease. So a
//!   paused or partitioned holder's guard reports the loss before the row can expire and
//!   another owner be granted.
//! - **Waiting by `LISTEN`/`NOTIFY`.** Each provider has one dedicated listening connection
//!   (made at its first wait), whose messages are read through `Connection::poll_message`, on
//!   a channel of its own and the schema's: `<schema>_g_<tag>`, where `<tag>` is ten random
//!   hex digits drawn by the provider, which start every owner id of its lock acquisitions
//!   (`<tag>.<attempt>`), carries the hand-overs to its waiters (below): the release derives
//!   the channel from the new owner's id, so a hand-over's `NOTIFY` reaches only that
//!   provider's listening connection, and wakes that one waiter; `<schema>_released`, whose
//!   payload names a lock freed with nobody to hand it to, wakes that lock's waiters.
//!   Channels per provider and per schema rather than per lock: lock names (up to 1024 bytes)
//!   do not fit a channel name, and a waiter needs no `LISTEN` round trip of its own.
//!   (PostgreSQL 15 still signals every listening backend of the database at each `NOTIFY`;
//!   each one reads the notification queue and drops what its session does not listen to, so
//!   the other providers' backends still do that much, but their clients hear nothing.) A waiter's wake-up is
//!   kept if it comes while the waiter is not waiting (a `Notify` permit). A waiting
//!   acquisition registers its wake-up before its first try when the listening connection is
//!   up already (else after its first refusal, and then it tries once more before it first
//!   sleeps), so one refused try is all a waiter sends before it waits. It also wakes when
//!   the holder's lease ends (a dead holder notifies nobody), every 2 s as a safety net, and
//!   every 100 ms while the listening connection is down.
//! - **Fair order** ([`Capabilities::fair`](lockkit_core::Capabilities) and `waiter_count`): a
//!   waiting acquisition's first refused try takes a place in `<schema>.waiters(name, owner,
//!   pos, expires_at, kind, permits, meta, lease_ms)`, `pos` from the sequence
//!   `<schema>.positions`, in the same call. A free lock is granted only to a try with no live
//!   waiter ahead of it that it must let go first (an acquisition without a place,
//!   `try_acquire` included, counts every live waiter as ahead), and the grant removes the
//!   winner's place. Every try of a waiter renews its place for twice the safety poll plus the
//!   response timeout, so a waiter that died loses its place after about 5 s and stops
//!   blocking the queue; a waiter that times out or is cancelled leaves it at once (`abandon`).
//! - **Hand-over inside the release.** `<schema>.release` deletes the own row and, under the
//!   name's advisory lock and in the same transaction, calls `<schema>.hand_over`: it grants
//!   the head of the queue (a new row for the head's owner, with the head's lease and its own
//!   token from the sequence, the place removed), and goes on along the queue while the
//!   holders admit the next (a run of readers, free permits), and `NOTIFY`s each new owner on
//!   its provider's channel `<schema>_g_<tag>` as `<token>:<server µs>:<owner id>` (the
//!   server time at which the row's lease began). Only that waiter's provider hears it (the
//!   other waiters stay asleep behind it: no herd of tries queueing on the advisory lock).
//!   **The waiter takes the grant from the notification** when that is proven safe, and
//!   otherwise confirms it with a try. Every try's reply carries the server time once it had
//!   run (µs, computed as the notification's). A waiter whose last try was refused at server
//!   time `R`, and which hears of a hand-over made at `H > R`, takes the notification's token
//!   with the deadline counted from that try's send time `s`: `s` came before the refusal ran,
//!   which came before the hand-over (on one server clock that does not step back, the
//!   assumption the tokens rest on too, and the Redis backend's), so `s + lease − drift` ends
//!   before the handed row's lease, `H + lease`. A crash after the hand-over keeps new grants
//!   out until the longest lease after the restart (the restart fence, below), past that
//!   deadline too. A refusal that ran after the hand-over proves nothing: the handed row may
//!   be gone already (lost in a crash and refused by the fence, expired while the waiter was
//!   cut off, broken), and a deadline counted from it may end after the row's (the first
//!   version of this, which trusted any last refusal, was taken out when the chaos run with
//!   crash restarts found an overlap). So when `H ≤ R`, when the last try was not a refusal
//!   (granted, or its reply lost), or when the deadline would leave less than a renewal round
//!   and a half, the waiter confirms with its next try, which finds the row its own and,
//!   without writing and before it would take the advisory lock (so it does not queue behind
//!   the grants and refusals of the name), returns the token and the lease left; the guard's
//!   deadline counts that from the try's send time, which came before the server looked.
//!   **Upgrading:** an owner id without a tag (a
//!   provider of an earlier version) is handed over on the schema's `<schema>_granted` as
//!   `<token>:<owner id>`, as those providers expect, and a provider listens there too, for
//!   functions of an earlier version: old and new providers may share a schema in any order
//!   of upgrade. A schema made by an earlier version counts as present (its functions keep
//!   their signatures), so a provider does not migrate it on its own: until
//!   [`migrate`](PostgresLockProvider::migrate) is run once (it replaces the functions in
//!   place, holds and queues kept), hand-overs are announced on `<schema>_granted` as before,
//!   and waiters confirm them by a try. Nothing is missed: a waiter registers its wake-up and then tries once more
//!   before it first sleeps, and a wake-up that comes between two tries is kept. A waiter that
//!   gives up (timeout, cancellation) as the hand-over is made calls `abandon`, which frees the
//!   row it was handed and hands the lock on; so does a waiter's place that lapses (the
//!   handed-over row then expires after the lease, like a dead holder's). `abandon` of a place
//!   also hands over, since the ones behind a writer that gave up may now go.
//! - **Releases commit without waiting for the disk.** A release with nobody waiting (no
//!   place in the queue) deletes its row and commits, with no `NOTIFY` (whose commit is
//!   serialized across the server): every waiter has a place, taken by its first refused try
//!   before it waits. A release (and an abandon) that hands
//!   nothing over sets `synchronous_commit = off` for its own transaction (`set_config(...,
//!   true)` at its end): the commit returns before the WAL flush. So does a refused try (its
//!   write is the waiter's place, which its next try takes again if a crash lost it), which
//!   also keeps the name's advisory lock from being held through a flush. A release lost in a crash
//!   only leaves a row that expires after its lease, so this costs liveness at worst (the
//!   lock stays taken a lease longer after a crash), never safety.
//! - **Grants without the flush: the restart fence.** By default (`durable_grants=false`) the
//!   provider's connections run with `synchronous_commit = off`, so grants, hand-overs inside
//!   releases, renewals and campaigns commit without waiting for the WAL flush too (a flush
//!   is most of a one-row commit's time). Such a commit can be lost only in a crash of the
//!   server (or a failover to a standby that lacked it); the grant made in it is then undone
//!   although its holder was told it holds, and a renewal undone leaves its row with an
//!   earlier expiry than its holder counts on. The fence makes that safe instead of durable:
//!   - `<schema>.alive` is an `UNLOGGED` table of one row, `since`. PostgreSQL empties unlogged
//!     tables in every crash recovery, the restart after one backend's crash (the postmaster
//!     surviving) included, and they are empty on a promoted standby (they are not
//!     replicated); a clean shutdown, which flushes all WAL, keeps them. (Checked on the test
//!     server: `kill -9` of a backend and `pg_ctl stop -m immediate` empty it, `-m fast`
//!     keeps it.) Created with the schema it says `since = 'epoch'`: nothing can have been
//!     lost before.
//!   - `<schema>.settings` (durable) has the longest lease of any provider of the schema and
//!     whether any of them grants without the flush; each provider raises them (`GREATEST`,
//!     committed synchronously) when it first connects, before its first grant.
//!   - `<schema>.fence_ms()`, called by every grant (`acquire`, `hand_over`, `campaign`),
//!     finds `alive` empty after a crash and writes `clock_timestamp()` into it (`ON CONFLICT
//!     DO NOTHING`, read back); while `clock_timestamp() < since + longest lease`, nothing is
//!     granted: a try is refused (`try_acquire` returns `None`), a waiter keeps its place and
//!     is told to look again when the fence ends, a release hands nothing over. Every holder
//!     whose grant or renewal was lost sent it before the crash, so its local deadline (send
//!     time + lease − drift) has passed before the fence ends: it was signalled lost
//!     (`RecordGone` at its next renewal, or `DeadlineExpired`) before anyone else can be
//!     granted. A renewal after the crash of a row that survived renews it as before.
//!   - Tokens keep increasing across the crash although the sequence's advance may be lost
//!     with the grant: they come from the server clock (above), and the fence puts the first
//!     grant after a crash a lease after any token handed out before it.
//!
//!   The cost: after a crash, every lock of the schema waits one (longest) lease, and holds
//!   whose grants were not yet flushed are lost. `durable_grants=true` keeps the old behaviour
//!   for a provider: its grants and renewals wait for the flush, so confirmed holds survive a
//!   crash, and when every provider of a schema uses it there is no fence. It suits holds that
//!   must outlive a server crash without a pause (long jobs that cannot restart), servers that
//!   crash often, and failover setups with synchronous replication, where a grant confirmed
//!   only with the flush is on the standby too. The schema's creation, the settings row and
//!   `break_lock` always commit synchronously.
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
//! - **Transient server errors** are retried, not final: a statement the server rolled back
//!   for a reason a new try may not meet (serialization failure 40001, deadlock 40P01, lock
//!   not available 55P03, a cancelled statement 57014, a `statement_timeout` included) did
//!   nothing, like one never sent; one whose connection the server ended (an administrator's
//!   or a crash's shutdown 57P01/57P02, "cannot connect now" 57P03, an idle-session timeout
//!   57P05, the connection exceptions of class 08) may have committed, like a lost reply. Both
//!   surface as the retryable `Error::Connection` (an acquisition with a deadline rides them
//!   out, and the background abandons of an acquisition or a campaign retry them until they
//!   complete); every other error the server answers with is `Error::Backend` and final.
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
//!   the name's advisory lock, returns the holds that were still live, and hands the lock to
//!   the queue as a release does (or notifies the name's waiters), each next owner with a
//!   greater token; an election's leader is removed too, its vacancy journaled, so the next
//!   candidate leads. The broken
//!   holder learns it at its next renewal at the latest (`RecordGone`: its row is gone), that
//!   is within `renew_every`, and before its local deadline in any case.
//! - **Schema managed by the backend**: created on first use when missing (`migrate=true`, the
//!   default) or by [`PostgresLockProvider::migrate`]: `CREATE SCHEMA/SEQUENCE/TABLE IF NOT
//!   EXISTS` and `CREATE OR REPLACE FUNCTION` in one transaction, serialized by an advisory
//!   lock so that providers racing to create it do not fail. **An older schema is brought
//!   forward in place**, not versioned beside it: the first landing had one row per name and
//!   no kinds; the migration adds the kind columns (an old row is a mutex hold, which it was),
//!   rekeys `locks` by `(name, owner)`, and drops the old five-argument `acquire`. A schema
//!   counts as present only when the current functions are there, so a provider finding the
//!   old one migrates it on first use (with `migrate=true`), holds and all. At connect time the provider
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
//! GRANT UPDATE ON SEQUENCE lockkit.tokens TO app;  -- tokens moved up to the clock (setval)
//! GRANT SELECT, INSERT ON lockkit.alive TO app;    -- the restart fence
//! GRANT SELECT, UPDATE ON lockkit.settings TO app; -- the longest lease, raised at connect
//! GRANT EXECUTE ON FUNCTION lockkit.acquire(text,text,text,bigint,bigint,text,integer),
//!   lockkit.release(text,text), lockkit.abandon(text,text), lockkit.downgrade(text,text),
//!   lockkit.hand_over(text), lockkit.break_lock(text), lockkit.fence_ms(),
//!   lockkit.next_token() TO app;
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
//! The statements of the hot path (a grant's `acquire`, a `release`) are prepared once per
//! command connection, when it is opened (one pipelined round trip, after the schema check),
//! and each call is then a Bind and an Execute: the server neither parses nor plans them
//! again, and no Describe comes back. The other statements go by `query_typed`
//! (the parameters' types with the statement, one round trip, nothing prepared). A prepared
//! statement belongs to its connection: a new connection (after a break, a timeout, a server
//! restart) prepares them again, and one cancelled while it opens is dropped with its
//! statements. Measured (docs/PERFORMANCE.md): the uncontended cycle about a quarter shorter.
//! Both connections must each be one server session for as long as they live: a pooler in
//! front of the server must pool by session (PgBouncer's `pool_mode = session`): a
//! transaction-mode pooler would send the prepared statements to server sessions that never
//! prepared them, and keep no session listening for the notifications.
//!
//! # Runtime
//!
//! lockkit-postgres runs on Tokio with the time and I/O drivers enabled, and a provider works
//! from any runtime. Each runtime it is used on gets a command connection of its own (with the
//! hot path's statements prepared on it), so a call takes no thread hop. The renewal task, the
//! `LISTEN` connection, the releases of dropped guards and the abandons of cancelled
//! acquisitions run on lockkit's home runtime ([`lockkit_core::home`]), with the home
//! runtime's command connection: holds are renewed and waiters woken whatever happens to the
//! runtime that granted a hold.
//!
//! # Read-write locks and semaphores
//!
//! Every holder of a name is a row of its own with a kind: `mutex`, `read`, `write`, or
//! `permit` with the semaphore's permit count. Under the name's advisory lock, `acquire`
//! grants a reader when no writer (or mutex) holds and no writer waits ahead of it in the
//! queue (so a stream of readers cannot starve a queued writer), a writer or a mutex when
//! nobody holds and nobody waits ahead, and a permit when the holders and the waiters ahead
//! number fewer than the permits. A mutex and a read-write lock of one name exclude each other
//! (a mutex counts as a writer); a name in use as a semaphore and asked for as a lock, as a
//! lock and asked for as a semaphore, or as a semaphore of another permit count, is
//! [`Error::Conflict`](lockkit_core::Error::Conflict) with the Redis backend's messages. Every
//! grant draws its own token, so tokens of one name increase over reads, writes and permits
//! alike. [`HeldLock::downgrade`](lockkit_core::backend::HeldLock::downgrade) is
//! `<schema>.downgrade(name, owner)`: the write row becomes a read row in place, keeping its
//! token, and the readers at the head of the queue are handed the lock with it (a writer queued
//! meanwhile keeps its turn). `inspect` lists every live holder with its kind; the renewal
//! statement renews every row the provider holds.
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
