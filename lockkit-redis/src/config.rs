//! The provider's settings: what a user may set, as builder methods and as URL options of the
//! same names, the defaults, and the checks that refuse settings that cannot work before
//! anything touches the network.

use std::time::Duration;

use lockkit_core::Result;
use lockkit_core::config::timing::{self, MIN_INTERVAL};
use lockkit_core::config::{self, Key, MAX_DURATION, MAX_HOLD, OptionKey, STORE_ID, StoreUrl, TLS_KEYS};

use crate::BACKEND;
use crate::settings::{Settings, check_prefix, invalid, parse_target, shown_address};

/// The default lease: how long a hold outlives its holder when the holder dies.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The default key prefix: every key lockkit writes starts with `lockkit:`.
pub const DEFAULT_PREFIX: &str = "lockkit";

/// The default time a single command may take before its outcome counts as unknown.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The default claim window: how long a lock handed over to the head of a fair lock's queue
/// waits for the head to confirm it (see [`RedisLockProviderBuilder::claim_window`]).
pub const DEFAULT_CLAIM_WINDOW: Duration = Duration::from_millis(200);

/// The shortest claim window accepted: a live head must be told and confirm within it.
pub const MIN_CLAIM_WINDOW: Duration = Duration::from_millis(20);

/// The most replicas [`RedisLockProviderBuilder::replicas`] accepts: more is a typo, not a
/// deployment.
pub const MAX_REPLICAS: u32 = 16;

/// The default time a grant or a renewal waits for its replicas' acknowledgements (see
/// [`RedisLockProviderBuilder::replicas_timeout`]).
pub const DEFAULT_REPLICAS_TIMEOUT: Duration = Duration::from_millis(500);

/// The shortest default retention of an idle lock's fence counter (see
/// [`RedisLockProviderBuilder::fence_retention`]); the default is ten leases, at least this.
pub const MIN_DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(60);

/// The shortest lease accepted: below it, a renewal round trip on a busy network could not
/// be confirmed in time and every hold would be lost at random.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

const LEASE: Key<Duration> = timing::lease("lease", DEFAULT_LEASE, MIN_LEASE);
const RENEW_EVERY: Key<Duration> =
    timing::RENEW_EVERY.range_said("1ms to below the lease, with response_timeout below the lease minus drift");
const RESPONSE_TIMEOUT: Key<Duration> =
    timing::RESPONSE_TIMEOUT.default_said("2s, at most a fifth of the lease").range_said("1ms to the lease");
const DRIFT: Key<Duration> = timing::DRIFT.default_said("1 % of the lease plus 2ms").range_said("below half the lease");
const KEY_PREFIX: Key<String> =
    Key::new("key_prefix", "the prefix of every key and channel (no braces or control characters)")
        .default(DEFAULT_PREFIX);
const FAIR: Key<bool> = Key::new("fair", "whether waiters are granted the lock in arrival order").default(true);
const CLAIM_WINDOW: Key<Duration> =
    Key::new("claim_window", "how long a lock handed over to the head of a fair queue waits for the head to take it")
        .default_said("200ms, at most the lease")
        .range_said("20ms to the lease");
const REPLICAS: Key<u32> = Key::new("replicas", "how many replicas must acknowledge each grant and renewal (WAIT)")
    .default(0)
    .range(0, MAX_REPLICAS);
const REPLICAS_TIMEOUT: Key<Duration> =
    Key::new("replicas_timeout", "how long a grant or a renewal waits for the replicas' acknowledgements")
        .default_said("500ms, at most a fifth of the lease")
        .range_said("1ms to the lease");
const FENCE_RETENTION: Key<Duration> =
    Key::new("fence_retention", "how long a lock's fence counter outlives the lock's last use")
        .default_said("ten leases, at least 1m")
        .range_said("the lease plus the claim window, to 1d");
const DB: Key<u32> = Key::new("db", "the database of a redis+unix:// socket (a redis:// URL gives it as its path)")
    .default(0)
    .range_said("redis+unix:// only");

/// The options a `redis://` URL and [`RedisLockProviderBuilder::option`] take: each is the
/// name of the builder method that sets it. The TLS certificates (paths of PEM files) need
/// `rediss://` and the `tls` feature.
pub const OPTIONS: &[&dyn OptionKey] = &[
    &LEASE,
    &RENEW_EVERY,
    &RESPONSE_TIMEOUT,
    &DRIFT,
    &KEY_PREFIX,
    &FAIR,
    &CLAIM_WINDOW,
    &REPLICAS,
    &REPLICAS_TIMEOUT,
    &FENCE_RETENTION,
    &MAX_HOLD,
    &STORE_ID,
    &TLS_KEYS.root,
    &TLS_KEYS.certificate,
    &TLS_KEYS.key,
    &DB,
];

lockkit_core::provider_builder! {
    /// Builds a [`RedisLockProvider`](crate::RedisLockProvider); every setting is checked by [`build`](Self::build), which
    /// makes no connection.
    ///
    /// Each setting has one name: the builder method, and the URL option of
    /// [`from_url`](Self::from_url) and [`option`](Self::option) (see [`OPTIONS`]). Durations are
    /// counted in whole milliseconds, as Redis counts them (a sub-millisecond part is dropped), and
    /// none may exceed [`MAX_DURATION`](lockkit_core::config::MAX_DURATION), a day.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockkit_redis::RedisLockProvider;
    ///
    /// let provider = RedisLockProvider::builder()
    ///     .url("redis://app:secret@127.0.0.1:6379/2")
    ///     .key_prefix("billing")
    ///     .lease(Duration::from_secs(10))
    ///     .build()?; // checks every setting; connects on first use
    ///
    /// let url = lockkit_core::config::StoreUrl::parse("redis://127.0.0.1:6379/2?lease=10s&fair=false")?;
    /// let same_settings = lockkit_redis::RedisLockProviderBuilder::from_url(&url)?.key_prefix("billing").build()?;
    /// // The options of a URL given to `url` count too; a setting given later wins.
    /// let also = RedisLockProvider::builder().url("redis://127.0.0.1:6379/2?lease=10s").key_prefix("billing").build()?;
    /// # let _ = (provider, same_settings, also);
    /// # Ok::<(), lockkit_core::Error>(())
    /// ```
    pub struct RedisLockProviderBuilder(BACKEND, OPTIONS) {
        /// The server's URL (its query is taken as options).
        address: Option<StoreUrl>,
    }
    /// The server (or the sentinels, or the cluster nodes) of a URL, read by `build`.
    address(self, url) {
        self.address = Some(url.clone());
        Ok(())
    }
}

impl RedisLockProviderBuilder {
    lockkit_core::builder_methods!(
        /// The server: `redis://[user[:password]@]host[:port][/db]`, `rediss://` for TLS (feature
        /// `tls`), or `redis+unix:///path/to/socket`. A user name selects an ACL user; a password
        /// alone authenticates the default user.
        ///
        /// Or the sentinels of a Sentinel-managed primary:
        /// `redis+sentinel://[user[:password]@]s1[:port],s2[:port]/MASTER_NAME` (port 26379 by
        /// default; `rediss+sentinel://` for TLS to the sentinels and the servers). The provider
        /// asks the sentinels, in the order written, for the primary's address whenever it
        /// connects, and connects again (asking again) when the primary stops answering or
        /// refuses writes as a replica after a failover. The credentials are the Redis servers';
        /// the sentinels are asked without any. See "Sentinel" and "Tokens, restarts and failovers"
        /// on the guide's Redis page (`src/guide/backends/redis.md`).
        ///
        /// Or some nodes of a Redis Cluster: `redis+cluster://[user[:password]@]h1[:port],h2[:port]`
        /// (port 6379 by default; `rediss+cluster://` for TLS; any reachable nodes: the others and the
        /// slot map are learnt from them). See "Redis Cluster" on the guide's Redis page
        /// (`src/guide/backends/redis.md`), and [`cluster`](Self::cluster).
        url
    );

    /// The nodes of a Redis Cluster, each `host[:port]` (port 6379 by default), without
    /// credentials: the same as [`url`](Self::url) with
    /// `redis+cluster://h1:p1,h2:p2`. For credentials or TLS, give the URL instead
    /// (`redis+cluster://user:password@h1:p1,h2:p2`, `rediss+cluster://…`).
    ///
    /// ```
    /// let provider = lockkit_redis::RedisLockProvider::builder()
    ///     .cluster(["10.0.0.1:7000", "10.0.0.2:7000"])
    ///     .build()?; // checks every setting; connects on first use
    /// # let _ = provider;
    /// # Ok::<(), lockkit_core::Error>(())
    /// ```
    pub fn cluster<I, S>(self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(|node| node.as_ref().trim().to_owned()).collect();
        self.url(format!("redis+cluster://{}", nodes.join(",")))
    }

    lockkit_core::option_setters! {
        /// The prefix of every key and channel, so that several applications share one server
        /// without colliding (default `lockkit`). Braces and control characters are refused:
        /// braces would change the hash slot of the keys on Redis Cluster. URL option
        /// `key_prefix`.
        fn key_prefix(prefix: impl Into<String>) => KEY_PREFIX;

        /// How long a hold survives without renewal (default 30 s, at least 100 ms, at most a
        /// day): the time a dead holder keeps the lock, and the budget a live holder has to renew
        /// it. URL option `lease`.
        fn lease(lease: Duration) => LEASE;

        /// How often the watchdog renews held locks (default a third of the lease; at least
        /// 1 ms, and with the response timeout below the lease minus the drift margin). URL
        /// option `renew_every`.
        fn renew_every(every: Duration) => RENEW_EVERY;

        /// How long one command may take before its outcome counts as unknown (default 2 s,
        /// and never more than a fifth of the lease when the lease is short; at least 1 ms, and
        /// with the renewal interval below the lease minus the drift margin). URL option
        /// `response_timeout`.
        fn response_timeout(timeout: Duration) => RESPONSE_TIMEOUT;

        /// The margin for clock rate differences between this host and the server: a hold's
        /// local deadline is the send time of its last confirmed renewal plus the lease minus
        /// this margin (default 1% of the lease plus 2 ms, as the Redlock analysis suggests; at
        /// most just under half the lease). URL option `drift`.
        fn drift(drift: Duration) => DRIFT;

        /// Whether waiters are granted the lock in the order they started waiting (default
        /// `true`). URL option `fair`.
        ///
        /// A fair lock keeps a wait queue in Redis: a waiting acquisition joins it when it finds
        /// the lock taken, and while the queue has entries a free lock belongs to its head alone,
        /// so no waiter starves however busy the lock is. Its cost is paid only under
        /// contention: a releaser that asks again goes to the back instead of winning at once,
        /// and a waiter whose process dies stays in the queue until its entry expires (twice the
        /// lease) or, when its turn comes, until its claim window of 200 ms closes.
        ///
        /// `false` makes every release a race between the woken waiters: a little more
        /// throughput for a client that takes the same lock again and again, and a wait that,
        /// for an unlucky waiter, has no bound.
        ///
        /// The same holds for every kind: fair, a read-write lock's readers that arrive after a
        /// queued writer wait behind it, and a semaphore's permits go to its waiters in arrival
        /// order; unfair, readers may overtake a waiting writer for as long as readers keep
        /// coming.
        fn fair(fair: bool) => FAIR;

        /// How long a fair lock handed over to the head of its queue waits for the head to take
        /// it (default 200 ms, at least 20 ms, at most the lease). URL option `claim_window`.
        ///
        /// A release grants the lock to the head of the queue for this long only, and tells the
        /// head's provider; a live head takes it at once and, unless it released it by then,
        /// confirms it (extends it to its lease) once about a quarter of the window has passed,
        /// within a round trip; a head whose process died lets it expire, after which the next
        /// waiter's turn comes. So this is what each dead waiter at the head of a queue costs
        /// the others, and three quarters of it must cover a few round trips of your network
        /// plus a pause of the waiting process: raise it for servers far away, or for clients
        /// that stall. A head that misses its window loses its place and queues again at the
        /// back.
        fn claim_window(window: Duration) => CLAIM_WINDOW;

        /// How many replicas must acknowledge each grant and each renewal (default 0: none is
        /// waited for; at most [`MAX_REPLICAS`]). URL option `replicas`.
        ///
        /// With `n` above 0, a grant is followed by `WAIT n` on the same connection and counts only
        /// when `n` replicas acknowledged it within [`replicas_timeout`](Self::replicas_timeout);
        /// otherwise the grant is released and the acquisition tries again, like after a failed call,
        /// until it gives up with a retryable [`Error::Connection`](lockkit_core::Error::Connection)
        /// saying how many replicas acknowledged. A hand-over from a fair lock's queue is acknowledged
        /// with the renewal that confirms it. Each renewal round ends with the same `WAIT`: a renewal
        /// that is not acknowledged leaves the hold's deadline where it was (the hold is not extended)
        /// and is tried again, so a hold whose replicas stay behind runs out and is signalled lost.
        ///
        /// What it narrows: a failover to a replica that has acknowledged a grant keeps that grant
        /// and its fence counter, so the new primary does not hand the lock to a second client
        /// while the first still holds it. What it cannot promise: Redis replication stays
        /// asynchronous. `WAIT` says that replicas received the writes, not that they wrote them
        /// to disk, nor that the replica promoted at a failover is one of those that
        /// acknowledged; a replica may still lose them in a restart. And a renewal that reached
        /// the primary but not the replicas before a failover is lost with it: the hold ends
        /// at the deadline of its last acknowledged renewal, which is what its local deadline
        /// says. Tokens never go back across a failover either way (see "Tokens, restarts and
        /// failovers" on the guide's Redis page (`src/guide/backends/redis.md`)).
        ///
        /// The primary must have at least `n` replicas connected: the provider checks it when it
        /// connects, and a primary with fewer is an
        /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) naming both numbers. `WAIT`
        /// blocks the provider's shared command connection while it waits, so commands of other holds
        /// queue behind it for up to `replicas_timeout` when a replica is slow.
        fn replicas(n: u32) => REPLICAS;

        /// How long a grant or a renewal waits for [`replicas`](Self::replicas) acknowledgements
        /// (default 500 ms, and never more than a fifth of the lease when the lease is short; at
        /// least 1 ms, and with `replicas` set, the renewal interval plus the response timeout
        /// plus this below the lease minus the drift margin). URL option `replicas_timeout`.
        fn replicas_timeout(timeout: Duration) => REPLICAS_TIMEOUT;

        /// How long a lock's fence counter outlives the lock's last use (default ten leases, at
        /// least [`MIN_DEFAULT_FENCE_RETENTION`]; at least the lease plus the claim window, at
        /// most a day, which is also the least for a lease of a day). URL option `fence_retention`.
        ///
        /// Every grant (and every renewal of a mutex, a writer or a leader) sets the counter to expire
        /// this long after it, so a name nobody uses any more leaves no key behind once this time has
        /// passed. Tokens still never go back: a grant issues `max(counter + 1, server time in µs)`, so
        /// a counter made again later starts above every token issued before, as long as the server's
        /// clock does not step back (see "Tokens, restarts and failovers" on the guide's Redis page
        /// (`src/guide/backends/redis.md`)). A longer retention also covers a clock that steps back by
        /// less than it between two uses of a name; the lease plus the claim window is the least,
        /// because a grant whose reply was lost, or a hand-over, is confirmed within that time with the
        /// token the counter holds.
        fn fence_retention(retention: Duration) => FENCE_RETENTION;

        #[cfg(feature = "tls")]
        #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
        tls(TLS_KEYS);

        /// The default maximum hold of the provider's acquisitions
        /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
        /// renewal stops, the guard is told with
        /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached) and the record expires with its lease. None
        /// by default; at least `renew_every`. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;
    }

    pub(crate) fn settings(&self) -> Result<Settings> {
        let options = &self.options;
        options.check()?;
        let Some(url) = self.address.as_ref().map(StoreUrl::address) else {
            return Err(invalid("no server URL was given: call .url(\"redis://host:port\") or use from_url"));
        };
        let url = url.as_str();
        let (mut connection, sentinel, cluster) = parse_target(url)?;
        if let Some(db) = options.get(&DB) {
            let redis::ConnectionAddr::Unix(_) = connection.addr() else {
                return Err(invalid(format!(
                    "db={db} is for redis+unix:// sockets; a redis:// URL gives its database as its path, as in redis://host:6379/{db}"
                )));
            };
            let database = connection.redis_settings().clone().set_db(i64::from(db));
            connection = connection.set_redis_settings(database);
        }
        let prefix = options.value(&KEY_PREFIX)?;
        check_prefix(&prefix)?;
        let lease = config::whole_millis(options.value(&LEASE)?);
        let renew_every = config::whole_millis(options.renew_every(lease)?);
        let response_timeout =
            options.within(&RESPONSE_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT.min(lease / 5), MIN_INTERVAL, lease)?;
        let drift = options.below(&DRIFT, lease / 100 + Duration::from_millis(2), lease / 2, "half the lease")?;
        let budget = lease.saturating_sub(drift);
        if renew_every.saturating_add(response_timeout) >= budget {
            return Err(invalid(format!(
                "renew_every ({renew_every:?}) plus response_timeout ({response_timeout:?}) must stay below the lease minus the drift margin ({budget:?}), or a hold expires before its renewal is confirmed; renew every third of the lease"
            )));
        }
        let replicas = options.get(&REPLICAS).unwrap_or(0);
        if replicas > MAX_REPLICAS {
            return Err(invalid(format!(
                "replicas is {replicas}, more than {MAX_REPLICAS}: it is the number of replicas that must acknowledge each grant, which the primary must have; write the number your primary has (or fewer)"
            )));
        }
        // Every duration Redis is sent is in whole milliseconds (PX, PEXPIRE, WAIT).
        let within = |key, default, min, max| options.within(key, default, min, max).map(config::whole_millis);
        let replicas_timeout = within(&REPLICAS_TIMEOUT, DEFAULT_REPLICAS_TIMEOUT.min(lease / 5), MIN_INTERVAL, lease)?;
        if replicas > 0 && renew_every + response_timeout + replicas_timeout >= budget {
            return Err(invalid(format!(
                "renew_every ({renew_every:?}) plus response_timeout ({response_timeout:?}) plus replicas_timeout ({replicas_timeout:?}) must stay below the lease minus the drift margin ({budget:?}), or a hold expires before its renewal is acknowledged; lower replicas_timeout or raise the lease"
            )));
        }
        let claim_window = within(&CLAIM_WINDOW, DEFAULT_CLAIM_WINDOW.min(lease), MIN_CLAIM_WINDOW, lease)?;
        let least = lease.saturating_add(claim_window).min(MAX_DURATION);
        let retention = lease.saturating_mul(10).max(MIN_DEFAULT_FENCE_RETENTION).min(MAX_DURATION).max(least);
        let fence_retention = within(&FENCE_RETENTION, retention, least, MAX_DURATION)?;
        // Without the `tls` feature a rediss:// URL is refused above, so certificates come
        // with a URL that does not use TLS, and are refused here.
        let uses_tls = matches!(connection.addr(), redis::ConnectionAddr::TcpTls { .. });
        let plain = format!("the URL {} does not use TLS; write it as rediss://", config::redact(url));
        let tls = TLS_KEYS.load_when(options, uses_tls, &plain)?.unwrap_or_default();
        Ok(Settings {
            address: match (&sentinel, &cluster) {
                (Some(sentinel), _) => format!("{}://{}", StoreUrl::parse(url)?.scheme(), sentinel.shown()),
                (None, Some(cluster)) => format!("{}://{}", StoreUrl::parse(url)?.scheme(), cluster.shown()),
                (None, None) => shown_address(&connection),
            },
            connection,
            sentinel,
            cluster,
            prefix,
            lease,
            renew_every,
            response_timeout,
            drift,
            fair: options.value(&FAIR)?,
            claim_window,
            replicas,
            replicas_timeout,
            fence_retention,
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_core::Error;

    use super::*;

    fn message(builder: RedisLockProviderBuilder) -> String {
        match builder.settings() {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    fn base() -> RedisLockProviderBuilder {
        RedisLockProviderBuilder::default().url("redis://127.0.0.1:6379")
    }

    fn from_url(url: &str) -> Result<Settings> {
        RedisLockProviderBuilder::from_url(&StoreUrl::parse(url)?)?.settings()
    }

    fn url_message(url: &str) -> String {
        match from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn the_fence_retention_is_ten_leases_at_least_a_minute_and_never_below_a_grant_s_window() {
        assert_eq!(base().settings().unwrap().fence_retention, Duration::from_secs(300));
        assert_eq!(base().lease(Duration::from_secs(1)).settings().unwrap().fence_retention, Duration::from_secs(60));
        let set = base().fence_retention(Duration::from_secs(40)).settings().unwrap();
        assert_eq!(set.fence_retention, Duration::from_secs(40));
        assert_eq!(from_url("redis://h:1/?fence_retention=90s").unwrap().fence_retention, Duration::from_secs(90));
        // The lease (30 s) plus the claim window (200 ms) is the least.
        let short = message(base().fence_retention(Duration::from_secs(30)));
        assert!(short.contains("fence_retention") && short.contains("30.2s"), "{short}");
        assert!(base().fence_retention(Duration::from_millis(30_200)).settings().is_ok());
        assert!(url_message("redis://h:1/?fence_retention=2d").contains("fence_retention"));
    }

    #[test]
    fn defaults_follow_the_lease() {
        let settings = base().settings().unwrap();
        assert_eq!(settings.lease, DEFAULT_LEASE);
        assert_eq!(settings.renew_every, Duration::from_secs(10));
        assert_eq!(settings.drift, Duration::from_millis(302));
        assert_eq!(settings.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
        assert_eq!(settings.prefix, "lockkit");
        assert!(settings.fair);
        assert!(!base().fair(false).settings().unwrap().fair);
        assert_eq!(settings.claim_window, DEFAULT_CLAIM_WINDOW);
        let short = base().lease(MIN_LEASE).settings().unwrap();
        assert_eq!(short.claim_window, MIN_LEASE, "a hand-over never outlives a lease");
        assert_eq!(short.replicas_timeout, MIN_LEASE / 5);
        assert!(base().lease(MIN_LEASE).replicas(1).settings().is_ok(), "replicas fit the shortest lease");
    }

    #[test]
    fn acl_users_and_databases_are_read_from_the_url() {
        let settings = base().url("redis://app:s3cret@localhost:7000/3").settings().unwrap();
        assert_eq!(settings.connection.redis_settings().username(), Some("app"));
        assert_eq!(settings.connection.redis_settings().password(), Some("s3cret"));
        assert_eq!(settings.connection.redis_settings().db(), 3);
        assert_eq!(settings.address, "redis://localhost:7000/3", "no credentials in the address");
        let shown = format!("{:?}", base().url("redis://app:s3cret@localhost:7000/3"));
        assert!(shown.contains("app:***@localhost") && !shown.contains("s3cret"), "{shown}");
        let decoded = from_url("redis://app:p%40ss@[::1]:7000/1?key_prefix=a%26b").unwrap();
        assert_eq!(decoded.connection.redis_settings().password(), Some("p@ss"));
        assert_eq!(decoded.address, "redis://[::1]:7000/1");
        assert_eq!(decoded.prefix, "a&b");
        assert_eq!(base().settings().unwrap().address, "redis://127.0.0.1:6379/0");
        let unix = base().url("redis+unix:///tmp/redis.sock?db=2").settings().unwrap();
        assert_eq!(unix.connection.redis_settings().db(), 2, "a socket's database is an option");
    }

    #[test]
    fn url_options_are_the_method_names() {
        let settings = from_url(
            "redis://h:1/?lease=10s&renew_every=2s&response_timeout=500ms&drift=50ms&key_prefix=app&fair=false&claim_window=300ms",
        )
        .unwrap();
        assert_eq!(settings.lease, Duration::from_secs(10));
        assert_eq!(settings.renew_every, Duration::from_secs(2));
        assert_eq!(settings.response_timeout, Duration::from_millis(500));
        assert_eq!(settings.drift, Duration::from_millis(50));
        assert_eq!(settings.prefix, "app");
        assert!(!settings.fair);
        assert_eq!(settings.claim_window, Duration::from_millis(300));
        for old in ["ttl=10s", "renew=1s", "timeout=1s", "prefix=a", "claim=1s", "color=red"] {
            let message = url_message(&format!("redis://h/?{old}"));
            assert!(message.contains("unknown option") && message.contains("renew_every"), "{old}: {message}");
        }
        assert!(url_message("redis://h/?lease=10").contains("option lease"));
        assert!(url_message("redis://h/?fair=yes").contains("option fair"));
        // The one rule of every backend: a URL's options are settings like the methods', and
        // the last value given wins.
        assert_eq!(base().url("redis://h/?lease=10s").settings().unwrap().lease, Duration::from_secs(10));
        let later = base().url("redis://h/?lease=10s").lease(Duration::from_secs(5)).settings().unwrap();
        assert_eq!(later.lease, Duration::from_secs(5));
        let earlier = base().lease(Duration::from_secs(5)).url("redis://h/?lease=10s").settings().unwrap();
        assert_eq!(earlier.lease, Duration::from_secs(10));
        let unknown = message(base().url("redis://h/?leese=10s"));
        assert!(unknown.contains("unknown option \"leese\"") && unknown.contains("lease"), "{unknown}");
        assert!(message(base().url("redis://h/?db=2")).contains("redis+unix://"));
    }

    #[test]
    fn every_duration_is_bounded_when_building() {
        let huge = url_message("redis://h/?lease=5000000000000000h");
        assert!(huge.contains("lease") && huge.contains("at most 86400s"), "{huge}");
        for (option, range) in [
            ("renew_every=5000000000000000h", "renew_every"),
            ("response_timeout=5000000000000000h", "response_timeout"),
            ("drift=5000000000000000h", "drift"),
            ("claim_window=5000000000000000h", "claim_window"),
            ("lease=2d", "lease"),
            ("lease=1ms", "at least 100ms"),
            ("renew_every=0s", "renew_every"),
            ("response_timeout=0s", "response_timeout"),
            ("claim_window=1ms", "at least 20ms"),
        ] {
            let message = url_message(&format!("redis://h/?{option}"));
            assert!(message.contains(range) && message.contains("at most"), "{option}: {message}");
        }
        for extreme in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
            for builder in [
                base().lease(extreme),
                base().renew_every(extreme),
                base().response_timeout(extreme),
                base().drift(extreme),
                base().claim_window(extreme),
            ] {
                assert!(message(builder).contains("at most"));
            }
        }
        let day = lockkit_core::config::MAX_DURATION;
        let longest = base().lease(day).settings().unwrap();
        assert_eq!(config::millis(longest.lease), 86_400_000);
        assert_eq!(longest.fence_retention, day, "the retention of the longest lease is a day");
        assert!(config::millis(longest.lease).saturating_mul(4) < u64::try_from(i64::MAX).unwrap(), "PX takes it");
    }

    #[test]
    fn replicas_are_counted_and_bounded_when_building() {
        let settings = from_url("redis://h/?replicas=2&replicas_timeout=250ms").unwrap();
        assert_eq!((settings.replicas, settings.replicas_timeout), (2, Duration::from_millis(250)));
        let default = base().settings().unwrap();
        assert_eq!((default.replicas, default.replicas_timeout), (0, DEFAULT_REPLICAS_TIMEOUT));
        let absurd = message(base().replicas(MAX_REPLICAS + 1));
        assert!(absurd.contains("replicas is 17") && absurd.contains("more than 16"), "{absurd}");
        for bad in ["replicas=-1", "replicas=two", "replicas=1.5"] {
            let message = url_message(&format!("redis://h/?{bad}"));
            assert!(message.contains("whole number"), "{bad}: {message}");
        }
        let slow = message(base().lease(Duration::from_secs(3)).replicas(1).replicas_timeout(Duration::from_secs(2)));
        assert!(slow.contains("replicas_timeout") && slow.contains("below the lease"), "{slow}");
        assert!(base().lease(Duration::from_secs(3)).replicas_timeout(Duration::from_secs(2)).settings().is_ok());
        assert!(message(base().replicas_timeout(Duration::ZERO)).contains("replicas_timeout"));
    }

    #[test]
    fn the_store_identity_has_no_credentials_and_names_the_key_space() {
        let identity = |url: &str| from_url(url).unwrap().store_identity();
        assert_eq!(identity("redis://app:pw@Cache.local:7000/3"), "redis://cache.local:7000/3?key_prefix=lockkit");
        assert_eq!(identity("redis://cache.local:7000/3?key_prefix=app"), "redis://cache.local:7000/3?key_prefix=app");
        assert_eq!(identity("redis://h"), identity("redis://h:6379/0"), "the defaults are written out");
        assert_eq!(identity("redis+sentinel://s1,s2/orders"), "redis+sentinel:///orders/0?key_prefix=lockkit");
        assert_eq!(identity("redis+sentinel://s2:26379/orders"), identity("redis+sentinel://s1/orders"));
        assert_eq!(identity("redis+cluster://n2:7001,n1:7000"), "redis+cluster://n1:7000,n2:7001?key_prefix=lockkit");
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let settings = base().url("redis+sentinel://app:pw@s1:26380,s2,[::1]:7000/mymaster").settings().unwrap();
        let sentinel = settings.sentinel.as_ref().unwrap();
        assert_eq!(sentinel.master, "mymaster");
        let hosts: Vec<&str> = sentinel.sentinels.iter().map(|(host, _)| host.as_str()).collect();
        assert_eq!(hosts, ["s1:26380", "s2:26379", "[::1]:7000"]);
        assert_eq!(settings.address, "redis+sentinel://s1:26380,s2:26379,[::1]:7000/mymaster");
        assert_eq!(settings.connection.redis_settings().username(), Some("app"));
        assert_eq!(settings.connection.redis_settings().password(), Some("pw"));
        assert!(sentinel.sentinels.iter().all(|(_, info)| info.redis_settings().password().is_none()));
        let from_url = from_url("redis+sentinel://s1/mymaster?lease=10s&replicas=1").unwrap();
        assert_eq!((from_url.lease, from_url.replicas), (Duration::from_secs(10), 1));
        let url = base().url("redis+sentinel://s1:26379/m?lease=1s").settings().unwrap();
        assert_eq!(url.lease, Duration::from_secs(1), "the URL's options count, given to url() too");
        for (url, says) in [
            ("redis+sentinel://s1:26379", "names no master"),
            ("redis+sentinel://s1:26379/", "names no master"),
            ("redis+sentinel://s1:26379,/m", "empty sentinel address"),
            ("redis+cluster+sentinel://s1/m", "redis+sentinel://"),
        ] {
            let message = message(base().url(url));
            assert!(message.contains(says), "{url}: {message}");
        }
    }

    #[test]
    fn cluster_urls_name_the_nodes() {
        let settings = base().url("redis+cluster://app:pw@n1:7000,n2,[::1]:7001").settings().unwrap();
        let cluster = settings.cluster.as_ref().unwrap();
        assert_eq!(cluster.shown(), "n1:7000,n2:6379,[::1]:7001");
        assert_eq!(settings.address, "redis+cluster://n1:7000,n2:6379,[::1]:7001");
        assert!(cluster.nodes.iter().all(|(_, info)| info.redis_settings().password() == Some("pw")));
        assert!(!format!("{settings:?}").contains("\"pw\""), "no password in the settings' Debug");
        let same = base().cluster(["n1:7000", "n2"]).settings().unwrap();
        assert_eq!(same.address, "redis+cluster://n1:7000,n2:6379");
        let from_url = from_url("redis+cluster://n1:7000?lease=10s&replicas=1").unwrap();
        assert_eq!((from_url.lease, from_url.replicas), (Duration::from_secs(10), 1));
        let url = base().url("redis+cluster://n1:7000?lease=1s").settings().unwrap();
        assert_eq!(url.lease, Duration::from_secs(1), "the URL's options count, given to url() too");
        for (url, says) in [
            ("redis+cluster://n1:7000/3", "only database 0"),
            ("redis+cluster://n1:7000,", "empty node address"),
            ("redis+cluster://n1:7000,redis://n2:7000", "mixes schemes"),
            ("redis+sentinel+cluster://n1/m", "redis+cluster://"),
        ] {
            let message = message(base().url(url));
            assert!(message.contains(says), "{url}: {message}");
        }
    }

    #[test]
    fn durations_are_whole_milliseconds_as_redis_counts_them() {
        let settings = base().lease(Duration::from_micros(2_000_999)).settings().unwrap();
        assert_eq!(settings.lease, Duration::from_millis(2000));
        assert_eq!(config::millis(settings.lease), 2000);
    }

    #[test]
    fn bad_settings_say_what_to_change() {
        assert!(message(RedisLockProviderBuilder::default()).contains(".url("));
        assert!(message(base().url("http://localhost")).contains("redis://"));
        assert!(message(base().url("localhost:6379")).contains("redis://"));
        assert!(message(base().url("redis://localhost:notaport")).contains("cannot be used"));
        assert!(message(base().url("redis://localhost/-1")).contains("database number"));
        assert!(message(base().url("redis://localhost/99999999999")).contains("database number"));
        assert!(!message(base().url("redis://u:s3cret@localhost:x")).contains("s3cret"));
        assert!(message(base().lease(Duration::from_millis(10))).contains("at least 100ms"));
        assert!(message(base().renew_every(Duration::ZERO)).contains("renew_every"));
        assert!(message(base().response_timeout(Duration::ZERO)).contains("response_timeout"));
        assert!(message(base().renew_every(Duration::from_secs(29))).contains("renew_every"));
        assert!(message(base().drift(Duration::from_secs(20))).contains("drift"));
        assert!(message(base().key_prefix("a{b")).contains("brace"));
        assert!(message(base().key_prefix("")).contains("empty"));
        assert!(message(base().claim_window(Duration::from_millis(5))).contains("claim_window"));
        assert!(message(base().claim_window(Duration::from_secs(31))).contains("claim_window"));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_urls_name_the_feature_to_enable() {
        for text in [message(base().url("rediss://127.0.0.1:6380")), url_message("rediss://127.0.0.1:6380/")] {
            assert!(text.contains("`tls` feature of lockkit-redis") && text.contains("`redis-tls`"), "{text}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_certificates_need_a_tls_url() {
        assert!(message(base().tls_root_certificate(b"pem".to_vec())).contains("rediss://"));
        let tls = base().url("rediss://127.0.0.1:6380").tls_root_certificate(b"pem".to_vec()).settings().unwrap();
        assert_eq!(tls.address, "rediss://127.0.0.1:6380/0");
    }
}
