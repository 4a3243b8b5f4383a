//! The provider's builder: the servers, `zk://` URLs, every setting and its bounds, all
//! checked without touching the network.

use std::fmt;
use std::time::Duration;

use lockkit_core::config::timing::{self, MIN_INTERVAL};
use lockkit_core::config::{Credentials, Key, MAX_DURATION, MAX_HOLD, OptionKey, STORE_ID};
use lockkit_core::{LockName, Result};
use zookeeper_client as zk;

use crate::error::BACKEND;

/// The default session timeout asked of the server (which may clamp it).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The default znode under which lock nodes live (below the chroot, if any).
pub const DEFAULT_BASE_PATH: &str = "/lockkit";

const SESSION_TIMEOUT: Key<Duration> = timing::lease("session_timeout", DEFAULT_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT);
const CONNECT_TIMEOUT: Key<Duration> =
    timing::CONNECT_TIMEOUT.default_said("2/5 of the session timeout").range_said("1ms to the session timeout");
const BASE_PATH: Key<String> =
    Key::new("base_path", "the znode under which each lock gets its znode").default(DEFAULT_BASE_PATH);
const DRIFT: Key<Duration> = timing::DRIFT
    .default_said("5 % of the negotiated session timeout")
    .range_said("below a third of the session timeout");
const ACL: Key<LockAcl> =
    Key::new("acl", "who may touch the znodes lockkit creates (creator_only needs credentials)").default(LockAcl::Auto);
const DISCONNECT_POLICY: Key<DisconnectPolicy> =
    Key::new("disconnect_policy", "what a dropped connection does to the holds").default(DisconnectPolicy::Suspend);

/// The options a `zk://` URL and [`ZkLockProviderBuilder::option`] take: the names of the
/// builder's methods.
pub const OPTIONS: &[&dyn OptionKey] =
    &[&SESSION_TIMEOUT, &CONNECT_TIMEOUT, &BASE_PATH, &DRIFT, &ACL, &DISCONNECT_POLICY, &MAX_HOLD, &STORE_ID];

const DEFAULT_PORT: u16 = 2181;

/// An `InvalidConfig` error of this backend.
fn invalid(message: impl Into<String>) -> lockkit_core::Error {
    lockkit_core::Error::invalid_config(BACKEND, message)
}

/// The shortest session timeout the builder accepts. Servers refuse far less anyway (they
/// grant at least two ticks, 4 s with the default `tickTime`).
const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(100);

// The longest session timeout the builder accepts is lockkit's cap on every duration, a day.
// ZooKeeper carries the timeout as a signed 32-bit number of milliseconds (24.8 days); a
// longer one would wrap around on the wire.
const _: () = assert!(MAX_DURATION.as_millis() <= i32::MAX as u128);

/// Who may touch the znodes lockkit creates (the base path, each lock's znode and the
/// contender nodes under it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockAcl {
    /// The default: [`LockAcl::CreatorOnly`] when credentials are set, [`LockAcl::Open`]
    /// otherwise. URL value `auto`.
    #[default]
    Auto,
    /// Anyone may read, create and delete (`world:anyone` with every permission). URL value
    /// `open`.
    Open,
    /// Only clients authenticated as the same digest user may read, create or delete: a
    /// client with other or no credentials cannot take, steal or delete a lock. Needs
    /// credentials. URL value `creator_only`.
    CreatorOnly,
    /// Like [`LockAcl::CreatorOnly`], but anyone may read, so that other users can inspect
    /// locks. Needs credentials. URL value `creator_only_world_read`.
    CreatorOnlyWorldRead,
}

/// What a holder does when its connection to ZooKeeper drops while the session may still live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectPolicy {
    /// The default: the hold is suspended. Its local deadline keeps running and nothing
    /// extends it; a reconnect within the session resumes renewals, and the hold is lost only
    /// when the deadline passes or the session expires (Curator's "session" policy). URL value
    /// `suspend`.
    #[default]
    Suspend,
    /// Every hold is lost as soon as the connection drops, even if the session would survive
    /// (Curator's "standard" policy). Stricter, and more losses on a flaky network. URL value
    /// `lose_on_disconnect`.
    LoseOnDisconnect,
}

lockkit_core::option_choices!(LockAcl {
    Auto => "auto",
    Open => "open",
    CreatorOnly => "creator_only",
    CreatorOnlyWorldRead => "creator_only_world_read",
});

lockkit_core::option_choices!(DisconnectPolicy { Suspend => "suspend", LoseOnDisconnect => "lose_on_disconnect" });

/// How many holds at once make a session watch its base path recursively rather than let
/// each hold watch its node (a task and a watch per hold: some 1.2 KB each).
pub(crate) const MANY_HOLDS: usize = 64;

lockkit_core::provider_builder! {
    /// Builds a [`ZkLockProvider`](crate::ZkLockProvider): every setting is checked by [`build`](Self::build), which
    /// does no I/O. The first session is opened when the provider is first used (or at once by
    /// [`ZkLockProvider::connect`](crate::ZkLockProvider::connect)).
    ///
    /// Each setting has one name: the builder method and the `zk://` URL option are spelled the
    /// same ([`OPTIONS`](crate::OPTIONS)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockkit_zk::ZkLockProvider;
    ///
    /// # fn main() -> lockkit_core::Result<()> {
    /// let provider = ZkLockProvider::builder()
    ///     .connect_string("zk1:2181,zk2:2181,zk3:2181/myapp")
    ///     .session_timeout(Duration::from_secs(6))
    ///     .credentials("locker", "secret")
    ///     .base_path("/locks")
    ///     .build()?;
    /// # let _ = provider;
    /// # Ok(())
    /// # }
    /// ```
    pub struct ZkLockProviderBuilder(BACKEND, OPTIONS) {
        servers: Option<String>,
        chroot: Option<String>,
        credentials: Option<Credentials>,
        /// The many-holds threshold set for tests; the session's default otherwise.
        many_holds: Option<usize>,
    }
    /// The servers, the chroot (the path) and the credentials of a `zk://` URL.
    address(self, url) {
        url.expect_scheme(BACKEND, &["zk"], "zk://[user:password@]host:2181[,host:2181…][/chroot]")?;
        self.credentials = url.credentials(BACKEND)?;
        self.servers = Some(url.hosts().to_owned());
        self.chroot = Some(url.path()).filter(|path| !path.is_empty() && *path != "/").map(str::to_owned);
        Ok(())
    }
}

impl ZkLockProviderBuilder {
    lockkit_core::builder_methods!();

    /// The servers, in ZooKeeper's own form, with an optional chroot:
    /// `h1:2181,h2:2181/app`. The port defaults to 2181; IPv6 hosts are written in brackets
    /// (`[::1]:2181`). A `zk://` URL goes to [`from_url`](Self::from_url) instead, and
    /// credentials to [`credentials`](Self::credentials).
    pub fn connect_string(mut self, servers: impl Into<String>) -> Self {
        self.servers = Some(servers.into());
        self
    }

    /// A chroot under which everything lives, for a connect string without one (the path of
    /// a `zk://` URL).
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    lockkit_core::option_setters! {
        /// The session timeout asked of the server; 10 s by default, at least 100 ms and at most
        /// a day ([`MAX_DURATION`]). URL option `session_timeout`.
        ///
        /// It is the lease of every hold: a holder that dies frees its locks when its session
        /// expires. The server clamps the timeout to its own `[minSessionTimeout,
        /// maxSessionTimeout]`, by default `[2 × tickTime, 20 × tickTime]` (4 s to 40 s with the
        /// default `tickTime` of 2 s); holds then use the timeout the server granted, which
        /// [`ZkLockProvider::negotiated_session_timeout`](crate::ZkLockProvider::negotiated_session_timeout) reports (and a warning is logged when
        /// it differs from the one asked).
        fn session_timeout(timeout: Duration) => SESSION_TIMEOUT;

        /// How long one connection attempt may take; 2/5 of the session timeout by default, at
        /// least 1 ms and at most the session timeout. Above 3/5 of the session timeout the
        /// client uses 2/5 of it. URL option `connect_timeout`.
        fn connect_timeout(timeout: Duration) => CONNECT_TIMEOUT;

        /// How many holds at once make a session watch its base path with one recursive watch
        /// instead of a watch per hold; 64 by default, 0 counts as 1. For tests, which run the
        /// contract's loss cases on the recursive watch with 1 (a session that cannot set the
        /// watch then fails to open): both ways keep the contract, and the default is where the
        /// recursive watch costs less than a watch per hold.
        #[doc(hidden)]
        fn many_holds_threshold(holds) => many_holds;
    }

    lockkit_core::option_setters! {
        /// Digest credentials (`user:password`), sent on every (re)connect; the user and password
        /// of a `zk://` URL. With credentials, lock nodes are created readable and deletable by
        /// that user only (see [`LockAcl`]). The user must not be empty or contain `:`.
        fn credentials(user, password) => credentials;

        /// The znode under which each lock gets its znode; `/lockkit` by default. An absolute
        /// znode path other than `/`, created (with its missing ancestors) when the first session
        /// opens. URL option `base_path`.
        fn base_path(path: impl Into<String>) => BASE_PATH;

        /// Who may touch the nodes lockkit creates; see [`LockAcl`]. URL option `acl`
        /// (`auto`, `open`, `creator_only`, `creator_only_world_read`).
        fn acl(acl: LockAcl) => ACL;

        /// How much earlier than the server a holder considers its session (and so its hold)
        /// possibly gone; 5 % of the negotiated session timeout by default. At most just below a
        /// third of the session timeout (holds are renewed every third of it), checked against
        /// the timeout asked when building and the one granted when a session opens. URL option
        /// `drift`.
        fn drift(drift: Duration) => DRIFT;

        /// What a dropped connection does to the holds; see [`DisconnectPolicy`]. URL option
        /// `disconnect_policy` (`suspend`, `lose_on_disconnect`).
        fn disconnect_policy(policy: DisconnectPolicy) => DISCONNECT_POLICY;

        /// The default maximum hold of the provider's acquisitions
        /// ([`LockProvider::with_max_hold`](lockkit_core::LockProvider::with_max_hold)): past it,
        /// renewal stops, the guard is told with
        /// [`LossReason::MaxHoldReached`](lockkit_core::LossReason::MaxHoldReached) and its node is deleted then (holds live with the session, which goes on for the provider's other holds, so there is no lease of its own to run out). None
        /// by default; at least a third of the session timeout. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;
    }

    /// Every check of [`build`](Self::build), and the checked configuration.
    pub(crate) fn check(&self) -> Result<ZkConfig> {
        let options = &self.options;
        options.check()?;
        let Some(servers) = &self.servers else {
            return Err(invalid(
                "no servers: call connect_string(\"host:2181[,host:2181…][/chroot]\"), or use from_url / ZkLockProvider::connect with a zk:// URL",
            ));
        };
        let parsed = parse_servers(servers)?;
        let chroot = match (&parsed.chroot, &self.chroot) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "a chroot is given both in the connect string and with chroot(): keep only one of them",
                ));
            }
            (Some(chroot), None) => Some(chroot.clone()),
            (None, Some(chroot)) => check_path(chroot, "the chroot")?,
            (None, None) => None,
        };
        Credentials::check(self.credentials.as_ref(), BACKEND, &[':'])?;
        let session_timeout = options.value(&SESSION_TIMEOUT)?;
        let connect_timeout = options.get(&CONNECT_TIMEOUT);
        let connect_timeout = connect_timeout
            .map(|timeout| options.within(&CONNECT_TIMEOUT, timeout, MIN_INTERVAL, session_timeout))
            .transpose()?;
        let drift = options.get(&DRIFT).map(|drift| check_drift(drift, session_timeout, "asked")).transpose()?;
        let base = check_path(&options.value(&BASE_PATH)?, "the base path")?
            .ok_or_else(|| invalid("the base path is \"/\": give a dedicated znode such as /lockkit"))?;
        let acl = match (options.value(&ACL)?, self.credentials.is_some()) {
            (LockAcl::Auto, true) => LockAcl::CreatorOnly,
            (LockAcl::Auto, false) => LockAcl::Open,
            (LockAcl::CreatorOnly | LockAcl::CreatorOnlyWorldRead, false) => {
                return Err(invalid(
                    "a creator-only ACL needs credentials: call credentials(user, password), or use LockAcl::Open",
                ));
            }
            (acl, _) => acl,
        };
        let root = format!("{}{base}", chroot.as_deref().unwrap_or(""));
        Ok(ZkConfig {
            hosts: parsed.hosts,
            chroot,
            root,
            session_timeout,
            connect_timeout,
            credentials: self.credentials.clone(),
            acl,
            drift,
            disconnect_policy: options.value(&DISCONNECT_POLICY)?,
            many_holds: self.many_holds.unwrap_or(MANY_HOLDS),
        })
    }
}

/// Checks a drift margin against a session timeout (`which`: "asked" or "granted by the
/// server"): below a third of it, as holds are renewed every third of it.
pub(crate) fn check_drift(drift: Duration, session_timeout: Duration, which: &str) -> Result<Duration> {
    timing::check_below(BACKEND, &DRIFT, drift, session_timeout / 3, &format!("a third of the session timeout {which}"))
}

/// A checked configuration, made by [`ZkLockProviderBuilder::build`].
#[derive(Clone)]
pub(crate) struct ZkConfig {
    /// The servers, `host:port` each, without chroot.
    pub(crate) hosts: Vec<String>,
    /// The chroot, if any.
    pub(crate) chroot: Option<String>,
    /// The chroot and base path: the parent of every lock's znode.
    pub(crate) root: String,
    /// The session timeout asked of the server.
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) acl: LockAcl,
    /// The drift margin given, if any; 5 % of the negotiated session timeout otherwise.
    pub(crate) drift: Option<Duration>,
    pub(crate) disconnect_policy: DisconnectPolicy,
    /// How many holds at once make a session watch its base path recursively.
    pub(crate) many_holds: usize,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig").field("address", &self.address()).field("root", &self.root).finish_non_exhaustive()
    }
}

impl ZkConfig {
    /// The znode of a lock: `{chroot}{base}/{encoded name}`.
    pub(crate) fn lock_path(&self, name: &LockName) -> String {
        format!("{}/{}", self.root, crate::names::encode_name(name))
    }

    /// The servers as zookeeper-client takes them: `h1:2181,h2:2181`.
    pub(crate) fn connect_string(&self) -> String {
        self.hosts.join(",")
    }

    /// The store's address for messages, without credentials: `zk://h1:2181,h2:2181/chroot`.
    pub(crate) fn address(&self) -> String {
        format!("zk://{}{}", self.connect_string(), self.chroot.as_deref().unwrap_or(""))
    }

    /// The drift margin of a session granted `negotiated`.
    pub(crate) fn drift_for(&self, negotiated: Duration) -> Duration {
        self.drift.unwrap_or(negotiated / 20)
    }

    /// The ACL entries of every node lockkit creates.
    pub(crate) fn acls(&self) -> Vec<zk::Acl> {
        let creator = zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed());
        let anyone_read = zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone());
        match self.acl {
            LockAcl::CreatorOnly => vec![creator],
            LockAcl::CreatorOnlyWorldRead => vec![creator, anyone_read],
            LockAcl::Auto | LockAcl::Open => vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())],
        }
    }
}

struct Servers {
    hosts: Vec<String>,
    chroot: Option<String>,
}

fn parse_servers(servers: &str) -> Result<Servers> {
    let servers = servers.trim();
    if servers.is_empty() {
        return Err(invalid("the connect string is empty: give host:2181[,host:2181…][/chroot]"));
    }
    if servers.contains("://") {
        return Err(invalid(format!(
            "{:?} is a URL, not a connect string: pass a zk:// URL to ZkLockProvider::connect or ZkLockProviderBuilder::from_url, \
             or give connect_string the servers alone (host:2181[,host:2181…][/chroot])",
            lockkit_core::config::redact(servers)
        )));
    }
    if servers.contains('?') || servers.contains('#') {
        return Err(invalid(format!(
            "{servers:?} has a query or fragment: set options with the builder's methods instead"
        )));
    }
    let (authority, chroot) = match servers.find('/') {
        Some(at) => servers.split_at(at),
        None => (servers, ""),
    };
    if authority.contains('@') {
        return Err(invalid(
            "the connect string carries credentials: give them with credentials(user, password), or use a zk://user:password@host URL",
        ));
    }
    if authority.trim().is_empty() {
        return Err(invalid(format!(
            "{servers:?} names no server: give at least one host, as in zk1:2181,zk2:2181/app"
        )));
    }
    let hosts =
        lockkit_core::config::parse_hosts(BACKEND, authority, DEFAULT_PORT)?.iter().map(ToString::to_string).collect();
    let chroot = if chroot.is_empty() { None } else { check_path(chroot, "the chroot")? };
    Ok(Servers { hosts, chroot })
}

/// Checks an absolute znode path; `None` for `/`.
fn check_path(path: &str, what: &str) -> Result<Option<String>> {
    let Some(relative) = path.strip_prefix('/') else {
        return Err(invalid(format!("{what} {path:?} is not absolute: start it with '/', as in /{path}")));
    };
    if relative.is_empty() {
        return Ok(None);
    }
    if path.ends_with('/') {
        return Err(invalid(format!("{what} {path:?} ends with '/': remove the trailing slash")));
    }
    for segment in relative.split('/') {
        if segment.is_empty() {
            return Err(invalid(format!("{what} {path:?} has an empty segment (\"//\"): remove the extra slash")));
        }
        if segment == "." || segment == ".." {
            return Err(invalid(format!("{what} {path:?} has a {segment:?} segment, which ZooKeeper refuses")));
        }
        if segment.chars().any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || c >= '\u{fff0}') {
            return Err(invalid(format!("{what} {path:?} has characters ZooKeeper refuses in a path")));
        }
    }
    Ok(Some(path.to_owned()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_core::Error;
    use lockkit_core::config::StoreUrl;

    use super::*;

    fn builder(servers: &str) -> ZkLockProviderBuilder {
        ZkLockProviderBuilder::default().connect_string(servers)
    }

    fn from_url(url: &str) -> Result<ZkLockProviderBuilder> {
        ZkLockProviderBuilder::from_url(&StoreUrl::parse(url)?)
    }

    /// The message of the `InvalidConfig` error `outcome` must be.
    #[track_caller]
    fn refused(outcome: Result<ZkConfig>) -> String {
        match outcome {
            Err(Error::InvalidConfig { backend, message }) => {
                assert_eq!(backend, "zk");
                message
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn connect_strings_and_urls_parse() {
        let c = builder("h1:2181,h2:2182/app").check().unwrap();
        assert_eq!((c.connect_string().as_str(), c.root.as_str()), ("h1:2181,h2:2182", "/app/lockkit"));
        assert_eq!(c.address(), "zk://h1:2181,h2:2182/app");
        let c = builder("h1,h2:2182/app/x").base_path("/locks").check().unwrap();
        assert_eq!((c.connect_string().as_str(), c.root.as_str()), ("h1:2181,h2:2182", "/app/x/locks"));
        let c = builder("127.0.0.1:1/").chroot("/c").check().unwrap();
        assert_eq!(c.root, "/c/lockkit");
        let c =
            from_url("zk://u:p%40ss@[::1]:2181,h2/app?session_timeout=6s&base_path=/locks&acl=creator_only_world_read")
                .unwrap()
                .check()
                .unwrap();
        assert_eq!(c.connect_string(), "[::1]:2181,h2:2181");
        assert_eq!(c.credentials, Some(Credentials::new("u", "p@ss")));
        assert_eq!((c.root.as_str(), c.session_timeout), ("/app/locks", Duration::from_secs(6)));
        assert_eq!(c.acl, LockAcl::CreatorOnlyWorldRead);
        assert_eq!(c.address(), "zk://[::1]:2181,h2:2181/app", "the address carries no credentials");
        let c = from_url("zk://u:p@h1").unwrap().check().unwrap();
        assert_eq!(c.acl, LockAcl::CreatorOnly, "credentials make nodes creator-only by default");
        let c = from_url("zk://h1/?disconnect_policy=lose_on_disconnect&drift=100ms&connect_timeout=1s")
            .unwrap()
            .check()
            .unwrap();
        assert_eq!(c.disconnect_policy, DisconnectPolicy::LoseOnDisconnect);
        assert_eq!((c.drift, c.connect_timeout), (Some(Duration::from_millis(100)), Some(Duration::from_secs(1))));
        assert_eq!((c.chroot.as_deref(), c.root.as_str()), (None, "/lockkit"));
        assert!(!format!("{:?}", from_url("zk://u:secret@h1").unwrap()).contains("secret"));
    }

    #[test]
    fn the_builder_and_the_url_take_the_same_names() {
        for option in OPTIONS.iter().map(|key| key.name()) {
            let value = match option {
                "base_path" => "/x",
                "acl" => "open",
                "disconnect_policy" => "suspend",
                _ => "1s",
            };
            assert!(builder("h1").option(option, value).is_ok(), "{option}");
        }
        for old in ["ttl", "base", "timeout"] {
            let message = from_url(&format!("zk://h1?{old}=1s")).unwrap_err().to_string();
            assert!(message.contains(&format!("unknown option {old:?}")) && message.contains("session_timeout"));
        }
    }

    #[test]
    fn bad_settings_are_refused_with_advice() {
        let cases: Vec<(ZkLockProviderBuilder, &str)> = vec![
            (ZkLockProviderBuilder::default(), "no servers"),
            (builder(""), "empty"),
            (builder("/app"), "no server"),
            (builder("h1:2181,,h2"), "empty host"),
            (builder("h1:99999"), "port"),
            (builder("h1:abc"), "port"),
            (builder("h1:0"), "port"),
            (builder("zk://h1"), "is a URL"),
            (builder("redis://h1"), "is a URL"),
            (builder("u:p@h1"), "credentials"),
            (builder("h1").chroot("app"), "not absolute"),
            (builder("h1/app").chroot("/other"), "both"),
            (builder("h1/app/"), "trailing slash"),
            (builder("h1/a//b"), "empty segment"),
            (builder("h1/a/.."), "segment"),
            (builder("h1").base_path("locks"), "not absolute"),
            (builder("h1").base_path("/"), "dedicated"),
            (builder("h1").acl(LockAcl::CreatorOnly), "needs credentials"),
            (builder("h1").credentials("a:b", "c"), "contains ':'"),
            (builder("h1").credentials("", "c"), "empty"),
            (builder("h1?x=1"), "query"),
        ];
        for (builder, expected) in cases {
            let message = refused(builder.check());
            assert!(message.contains(expected), "{message:?} should mention {expected:?}");
        }
    }

    #[test]
    fn session_timeout_is_bounded_by_a_day_and_the_32_bit_field() {
        let too_long = ["5000000000000000h", "600h", "25d", "1441m"];
        for value in too_long {
            let message = refused(builder("h1").option("session_timeout", value).unwrap().check());
            assert!(message.contains("session_timeout"), "{message}");
            assert!(message.contains("at least 100ms and at most 86400s"), "{message}");
        }
        for value in ["0s", "99ms"] {
            let message = refused(builder("h1").option("session_timeout", value).unwrap().check());
            assert!(message.contains("session_timeout") && message.contains("at least 100ms"), "{message}");
        }
        let day = builder("h1").session_timeout(MAX_DURATION).check().unwrap();
        assert_eq!(day.session_timeout, Duration::from_secs(86_400));
        assert!(i32::try_from(day.session_timeout.as_millis()).is_ok(), "a day fits ZooKeeper's field");
        assert!(builder("h1").session_timeout(MIN_SESSION_TIMEOUT).check().is_ok());
        assert!(builder("h1").session_timeout(Duration::MAX).check().is_err(), "no panic on Duration::MAX");
    }

    #[test]
    fn connect_timeout_lies_between_a_millisecond_and_the_session_timeout() {
        let session = Duration::from_secs(3);
        let message = refused(builder("h1").session_timeout(session).connect_timeout(Duration::ZERO).check());
        assert!(message.contains("connect_timeout") && message.contains("at least 1ms and at most 3s"), "{message}");
        let message = refused(builder("h1").session_timeout(session).connect_timeout(session * 2).check());
        assert!(message.contains("connect_timeout"), "{message}");
        let message = refused(builder("h1").option("connect_timeout", "5000000000000000h").unwrap().check());
        assert!(message.contains("connect_timeout"), "{message}");
        assert!(builder("h1").session_timeout(session).connect_timeout(session).check().is_ok());
        assert!(builder("h1").connect_timeout(MIN_INTERVAL).check().is_ok());
    }

    #[test]
    fn drift_stays_below_a_third_of_the_session_timeout() {
        let session = Duration::from_secs(3);
        let message = refused(builder("h1").session_timeout(session).drift(Duration::from_secs(1)).check());
        assert!(message.contains("drift") && message.contains("below a third"), "{message}");
        let message = refused(builder("h1").option("drift", "5000000000000000h").unwrap().check());
        assert!(message.contains("drift") && message.contains("at most 86400s"), "{message}");
        assert!(builder("h1").session_timeout(session).drift(Duration::from_millis(999)).check().is_ok());
        assert!(builder("h1").drift(Duration::ZERO).check().is_ok());
        assert!(check_drift(Duration::from_millis(500), Duration::from_secs(1), "granted").is_err());
        let config = builder("h1").check().unwrap();
        assert_eq!(config.drift_for(Duration::from_secs(4)), Duration::from_millis(200), "5 % of the granted timeout");
    }

    #[test]
    fn option_values_that_do_not_parse_are_refused() {
        for (key, value) in
            [("session_timeout", "5"), ("drift", "soon"), ("acl", "everyone"), ("disconnect_policy", "x")]
        {
            let message = builder("h1").option(key, value).unwrap_err().to_string();
            assert!(message.contains(key), "{message}");
        }
        assert!(from_url("redis://h1").unwrap_err().to_string().contains("not a zk:// URL"));
        assert!(from_url("zk://user@h1").unwrap_err().to_string().contains("user and a password"));
    }
}
