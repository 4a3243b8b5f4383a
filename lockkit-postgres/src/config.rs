//! The builder: every setting, checked when the provider is built, with no network I/O (the
//! certificate files a URL names are read then).

use std::time::Duration;

use lockkit_core::config::{Key, MAX_DURATION, MAX_HOLD, ModeTlsKeys, OptionKey, STORE_ID, StoreUrl, TlsKeys, timing};
use lockkit_core::{Error, Result};

use crate::BACKEND;
use crate::tls::{SslMode, Tls};

/// The default lease: a dead holder frees the lock after it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The default response timeout of one statement.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The default schema of the lock table.
pub const DEFAULT_SCHEMA: &str = "lockkit";
/// The shortest lease accepted.
const MIN_LEASE: Duration = Duration::from_millis(100);
/// The shortest response timeout accepted.
const MIN_RESPONSE_TIMEOUT: Duration = Duration::from_millis(10);
/// The longest schema name accepted: the notification channel `<schema>_released` must fit
/// PostgreSQL's 63-byte identifiers.
const MAX_SCHEMA_LEN: usize = 50;

const LEASE: Key<Duration> = timing::lease("lease", DEFAULT_LEASE, MIN_LEASE);
const RESPONSE_TIMEOUT: Key<Duration> =
    timing::RESPONSE_TIMEOUT.default_said("5s, at most half the lease").range(MIN_RESPONSE_TIMEOUT, MAX_DURATION);
const DRIFT: Key<Duration> =
    timing::DRIFT.default_said("a sixtieth of the lease").range_said("below a third of the lease");
const SCHEMA: Key<String> =
    Key::new("schema", "the schema of the lock table (a lower-case identifier of at most 50 bytes)")
        .default(DEFAULT_SCHEMA);
const MIGRATE: Key<bool> = Key::new("migrate", "whether the provider creates its schema on first use").default(true);
const DURABLE_GRANTS: Key<bool> = Key::new(
    "durable_grants",
    "whether grants and renewals wait for the WAL flush (else the restart fence keeps them safe)",
)
.default(false);
/// The mode and the certificates, under libpq's names.
const SSL: ModeTlsKeys = ModeTlsKeys {
    mode: Key::new("sslmode", "how connections use TLS, as libpq names it").default(SslMode::Prefer),
    files: TlsKeys {
        root: Key::new("sslrootcert", "the root certificate to check the server's with, instead of the system's"),
        certificate: Key::new("sslcert", "a client certificate, for servers that authenticate clients")
            .range_said("with sslkey"),
        key: Key::new("sslkey", "the client certificate's private key").range_said("with sslcert"),
    },
};

/// The options a URL's query may carry, each the name of the builder method that sets it
/// (TLS as libpq names it: `sslmode`, and the files `sslrootcert`, `sslcert`, `sslkey`).
pub const OPTIONS: &[&dyn OptionKey] = &[
    &LEASE,
    &timing::RENEW_EVERY,
    &RESPONSE_TIMEOUT,
    &DRIFT,
    &SCHEMA,
    &MIGRATE,
    &DURABLE_GRANTS,
    &MAX_HOLD,
    &STORE_ID,
    &SSL.mode,
    &SSL.files.root,
    &SSL.files.certificate,
    &SSL.files.key,
];

lockkit_core::provider_builder! {
    /// Builds a [`PostgresLockProvider`](crate::PostgresLockProvider). `build()` checks every setting (reading the certificate
    /// files a URL names) and does no network I/O; the provider connects on first use.
    pub struct PostgresLockProviderBuilder(BACKEND, OPTIONS) {
        /// The server's address, without the query.
        address: Option<StoreUrl>,
    }
    /// The server of a `postgres://` URL: its hosts, user, password and database, read by
    /// `build`.
    address(self, url) {
        url.expect_scheme(BACKEND, &["postgres", "postgresql"], "a PostgreSQL URL: postgres://user@host:5432/database")?;
        self.address = Some(url.clone());
        Ok(())
    }
}

/// The checked settings of a provider.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) config: tokio_postgres::Config,
    /// `postgres://host:port/db`, without credentials.
    pub(crate) address: String,
    pub(crate) lease: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) drift: Duration,
    pub(crate) schema: String,
    pub(crate) migrate: bool,
    /// Grants and renewals wait for the WAL flush (`synchronous_commit` on): holds survive a
    /// crash. Off by default: the restart fence keeps grants lost in a crash safe.
    pub(crate) durable_grants: bool,
    pub(crate) tls: Tls,
    /// The store's identity, made by `settings`.
    identity: String,
}

impl Settings {
    /// The store's identity (fences, the order of multi-locks), through
    /// [`StoreUrl::identity_with_port`]: `postgres://host:port,…/database?schema=…`, every
    /// host with its port (5432 when none is given), never the user.
    pub(crate) fn store_identity(&self) -> String {
        self.identity.clone()
    }
}

impl PostgresLockProviderBuilder {
    lockkit_core::builder_methods!(
        /// The server: `postgres://[user[:password]@]host[:port]/database` (or `postgresql://`).
        /// The database is required.
        url
    );

    lockkit_core::option_setters! {
        /// How long a hold outlives its last renewal (30 s by default, at least 100 ms): a holder
        /// that dies frees the lock after it.
        fn lease(lease: Duration) => LEASE;

        /// How often held locks are renewed (a third of the lease by default; less than the lease).
        fn renew_every(every: Duration) => timing::RENEW_EVERY;

        /// How long one statement may go unanswered before its connection is given up as broken
        /// (5 s by default, and at most half the lease by default). It is also the server's
        /// `statement_timeout` for this provider's connections, which bounds how late a statement
        /// whose reply was lost can still take effect.
        fn response_timeout(timeout: Duration) => RESPONSE_TIMEOUT;

        /// The margin for clock-rate drift between this host and the server, taken off every
        /// hold's local deadline (a sixtieth of the lease by default, less than a third of it).
        fn drift(drift: Duration) => DRIFT;

        /// The schema of the lock table, sequence and functions (`lockkit` by default): a lower
        /// case identifier (`a`-`z`, `0`-`9`, `_`, not starting with a digit) of at most 50 bytes.
        fn schema(schema: impl Into<String>) => SCHEMA;

        /// Whether the provider creates its schema on first use when it is missing (`true` by
        /// default). With `false`, run [`PostgresLockProvider::migrate`](crate::PostgresLockProvider::migrate) once as a role that may
        /// create it, and use a role that can only take locks (see "Least privileges" on
        /// the guide's PostgreSQL page (`src/guide/backends/postgres.md`)).
        fn migrate(migrate: bool) => MIGRATE;

        /// Whether grants and renewals wait for the server's WAL flush (`false` by default; URL option
        /// `durable_grants`). By default they commit with `synchronous_commit = off`, which saves a
        /// disk flush per grant: a grant or renewal lost in a crash of the server is made safe by the
        /// restart fence (no grant for the longest lease after a crash recovery; see "Grants without
        /// the flush: the restart fence" on the guide's PostgreSQL page
        /// (`src/guide/backends/postgres.md`)), so a crash costs every lock one lease of waiting and
        /// every hold whose grant was lost is signalled lost. With `true`, holds whose grants were
        /// confirmed survive a crash and the locks of a schema whose providers all use it are not
        /// fenced after one: for holds longer than the lease that must outlive a server crash, or a
        /// server that restarts often. Failover to a standby: with synchronous replication
        /// (`synchronous_commit` reaching the standby) only `true` keeps holds across a promotion;
        /// either way, the fence starts on a promoted standby, whose copy of the unlogged fence table
        /// is empty.
        fn durable_grants(durable: bool) => DURABLE_GRANTS;

        /// The default maximum hold of the provider's acquisitions
        /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
        /// renewal stops, the guard is told with
        /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached) and the row
        /// expires with its lease. None by default; at least `renew_every`. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;

        /// How the provider's connections use TLS ([`SslMode::Prefer`] by default, as libpq):
        /// the `sslmode` option. Every mode but `disable` and `prefer` needs the `tls` feature.
        fn ssl_mode(mode: SslMode) => SSL.mode;

        tls(SSL.files);
    }

    pub(crate) fn settings(&self) -> Result<Settings> {
        let options = &self.options;
        options.check()?;
        let Some(parsed) = &self.address else {
            return Err(options.invalid("no server URL; set one, like postgres://app@127.0.0.1:5432/appdb"));
        };
        let database = parsed.path().trim_start_matches('/');
        if database.is_empty() || database.contains('/') {
            return Err(options.invalid(format!(
                "{} names no database; add it to the path: postgres://user@host:5432/DATABASE",
                parsed.redacted()
            )));
        }
        let mut config = tokio_postgres::Config::new();
        config.dbname(database).application_name("lockkit");
        config.user(parsed.user().unwrap_or("postgres"));
        if let Some(password) = parsed.password() {
            config.password(password);
        }
        if parsed.hosts().is_empty() {
            return Err(
                options.invalid(format!("{} names no host; write postgres://user@host:5432/db", parsed.redacted()))
            );
        }
        for server in lockkit_core::config::parse_hosts(BACKEND, parsed.hosts(), 5432)? {
            config.host(server.name()).port(server.port);
        }
        let lease = options.value(&LEASE)?;
        let renew_every = options.renew_every(lease)?;
        let response_timeout = options.within(
            &RESPONSE_TIMEOUT,
            DEFAULT_RESPONSE_TIMEOUT.min(lease / 2),
            MIN_RESPONSE_TIMEOUT,
            MAX_DURATION,
        )?;
        let drift = options.below(&DRIFT, lease / 60, lease / 3, "a third of the lease")?;
        let schema = options.value(&SCHEMA)?;
        check_schema(&schema)?;
        let tls = Tls::new(SSL, SSL.load(options)?, &mut config)?;
        let durable_grants = options.value(&DURABLE_GRANTS)?;
        // Every statement of this provider is bounded on the server too: a statement whose
        // reply was lost cannot take effect later than this after it was sent. Without durable
        // grants, the connection's commits do not wait for the WAL flush (the schema's
        // creation, the settings row and `break_lock` set it back on for their own).
        let synchronous = if durable_grants { "" } else { " -c synchronous_commit=off" };
        config
            .options(format!("-c statement_timeout={}{synchronous}", response_timeout.as_millis()))
            .connect_timeout(response_timeout);
        let identity = parsed.identity_with_port(5432, &[("schema", &schema)]);
        Ok(Settings {
            config,
            address: parsed.shown_address(),
            lease,
            renew_every,
            response_timeout,
            drift,
            schema,
            migrate: options.value(&MIGRATE)?,
            durable_grants,
            tls,
            identity,
        })
    }
}

/// Refuses a schema name that is not a plain lower-case identifier.
fn check_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= MAX_SCHEMA_LEN {
        return Ok(());
    }
    Err(Error::invalid_config(
        BACKEND,
        format!(
            "schema {schema:?} is not a valid schema name; use a lower-case identifier of letters a-z, digits and \
             '_', not starting with a digit, at most {MAX_SCHEMA_LEN} bytes (like lockkit or app_locks)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_testkit::refused as message;

    use super::*;

    fn from_url(url: &str) -> Result<Settings> {
        PostgresLockProviderBuilder::from_url(&StoreUrl::parse(url)?)?.settings()
    }

    #[test]
    fn urls_give_the_settings() {
        let s = from_url("postgresql://app:pw@db.local:6543/locks?lease=9s&schema=app_locks").unwrap();
        assert_eq!(s.lease, Duration::from_secs(9));
        assert_eq!(s.renew_every, Duration::from_secs(3));
        assert_eq!(s.schema, "app_locks");
        assert_eq!(s.address, "postgresql://db.local:6543/locks");
        assert_eq!(s.config.get_dbname(), Some("locks"));
        assert_eq!(s.config.get_ports(), [6543]);
        assert!(s.migrate);
        assert!(!s.durable_grants);
        assert!(s.config.get_options().is_some_and(|o| o.contains("synchronous_commit=off")));
        let s = from_url("postgres://h/db?durable_grants=true").unwrap();
        assert!(s.durable_grants);
        assert!(s.config.get_options().is_some_and(|o| !o.contains("synchronous_commit")));
        assert!(message(from_url("postgres://h/db?durable_grants=maybe")).contains("durable_grants"));
    }

    #[test]
    fn the_store_identity_has_no_credentials_and_names_the_schema() {
        let identity = |url: &str| from_url(url).unwrap().store_identity();
        assert_eq!(
            identity("postgresql://app:pw@DB.local:6543/locks"),
            "postgres://db.local:6543/locks?schema=lockkit"
        );
        assert_eq!(identity("postgres://db.local/locks?schema=app"), "postgres://db.local:5432/locks?schema=app");
        assert_eq!(identity("postgres://b:1,a:2/x"), "postgres://a:2,b:1/x?schema=lockkit");
    }

    #[test]
    fn options_in_a_url_given_to_the_builder_are_taken() {
        let builder =
            || PostgresLockProviderBuilder::default().url("postgres://h/db?lease=9s&schema=app&durable_grants=true");
        let s = builder().settings().unwrap();
        assert_eq!((s.lease, s.schema.as_str(), s.durable_grants), (Duration::from_secs(9), "app", true));
        // The last value given wins: a method after the URL, or the URL after a method.
        let s = builder().lease(Duration::from_secs(12)).schema("other").settings().unwrap();
        assert_eq!((s.lease, s.schema.as_str()), (Duration::from_secs(12), "other"));
        let s = PostgresLockProviderBuilder::default().lease(Duration::from_secs(12)).url("postgres://h/db?lease=9s");
        assert_eq!(s.settings().unwrap().lease, Duration::from_secs(9));
        let wrong = PostgresLockProviderBuilder::default().url("postgres://h/db?leese=9s").settings();
        assert!(message(wrong).contains("lease"));
        assert!(PostgresLockProviderBuilder::default().url("postgres://h/db?max_hold=1m").build().is_ok());
    }

    #[test]
    fn bad_input_says_what_to_change() {
        assert!(message(from_url("postgres://app@127.0.0.1:5432")).contains("names no database"));
        assert!(message(from_url("postgres://app@127.0.0.1:5432/")).contains("DATABASE"));
        for bad in ["Locks", "1abc", "a-b", "", "a;drop", &"x".repeat(51)] {
            let url = format!("postgres://h/db?schema={bad}");
            assert!(message(from_url(&url)).contains("not a valid schema name"), "{bad}");
        }
        assert!(message(from_url("postgres://h/db?lease=1s&renew_every=2s")).contains("renew_every"));
        assert!(message(from_url("postgres://h/db?ttl=1s")).contains("lease"));
        assert!(message(from_url("postgres://h:port/db")).contains("port"));
        assert!(message(from_url("postgres://h/db?lease=1ms")).contains("lease"));
        assert!(message(from_url("postgres://h/db?lease=3s&drift=1s")).contains("drift"));
        assert!(message(PostgresLockProviderBuilder::default().settings()).contains("no server URL"));
        assert!(message(PostgresLockProviderBuilder::default().url("redis://h/0").settings()).contains("PostgreSQL"));
        assert!(!message(from_url("postgres://app:s3cret@h:5432")).contains("s3cret"));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_settings_without_the_feature_name_it() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        for query in [
            "sslmode=require".to_owned(),
            "sslmode=verify-ca".to_owned(),
            "sslmode=verify-full".to_owned(),
            format!("sslrootcert={file}"),
            format!("sslcert={file}&sslkey={file}"),
        ] {
            let text = message(from_url(&format!("postgres://h/db?{query}")));
            assert!(text.contains("`tls` feature of lockkit-postgres") && text.contains("`postgres-tls`"), "{text}");
        }
        let text = message(
            PostgresLockProviderBuilder::default().url("postgres://h/db").ssl_mode(SslMode::VerifyFull).settings(),
        );
        assert!(text.contains("`tls` feature"), "{text}");
        for query in ["sslmode=prefer", "sslmode=disable", ""] {
            assert!(from_url(&format!("postgres://h/db?{query}")).is_ok(), "{query}");
        }
    }

    #[test]
    fn ssl_modes_parse_by_libpq_names() {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull] {
            assert_eq!(<SslMode as lockkit_core::config::OptionValue>::parse(mode.as_str()), Ok(mode));
        }
        assert!(message(from_url("postgres://h/db?sslmode=allow")).contains("verify-full"));
        assert!(message(from_url("postgres://h/db?sslkey=/k")).contains("sslcert and sslkey"));
    }
}
