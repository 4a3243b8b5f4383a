//! The provider's builder: connect string or `zk://` URL parsing and every check that can be
//! made before connecting.

use std::time::Duration;

use lockkit_core::{Error, LockName, Result};
use zookeeper_client as zk;

use crate::error::BACKEND;
use crate::provider::ZkLockProvider;

/// The default session timeout asked of the server (which may clamp it).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The default znode under which lock nodes live (below the chroot, if any).
pub const DEFAULT_BASE_PATH: &str = "/lockkit";

const DEFAULT_PORT: u16 = 2181;

/// Who may touch the znodes lockkit creates (the base path, each lock's znode and the
/// contender nodes under it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockAcl {
    /// The default: [`LockAcl::CreatorOnly`] when credentials are set, [`LockAcl::Open`]
    /// otherwise.
    #[default]
    Auto,
    /// Anyone may read, create and delete (`world:anyone` with every permission).
    Open,
    /// Only clients authenticated as the same digest user may read, create or delete: a
    /// client with other or no credentials cannot take, steal or delete a lock. Needs
    /// credentials.
    CreatorOnly,
    /// Like [`LockAcl::CreatorOnly`], but anyone may read, so that other users can inspect
    /// locks. Needs credentials.
    CreatorOnlyWorldRead,
}

/// What a holder does when its connection to ZooKeeper drops while the session may still live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectPolicy {
    /// The default: the hold is suspended. Its local deadline keeps running and nothing
    /// extends it; a reconnect within the session resumes renewals, and the hold is lost only
    /// when the deadline passes or the session expires (Curator's "session" policy).
    #[default]
    Suspend,
    /// Every hold is lost as soon as the connection drops, even if the session would survive
    /// (Curator's "standard" policy). Stricter, and more losses on a flaky network.
    LoseOnDisconnect,
}

/// Builds a [`ZkLockProvider`]. Every setting is checked before any network I/O, by
/// [`validate`](Self::validate) and again by [`build`](Self::build).
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit_zk::ZkLockProvider;
///
/// # async fn demo() -> lockkit_core::Result<()> {
/// let provider = ZkLockProvider::builder()
///     .connect_string("zk://zk1:2181,zk2:2181,zk3:2181/myapp")
///     .session_timeout(Duration::from_secs(6))
///     .credentials("locker", "secret")
///     .base_path("/locks")
///     .build()
///     .await?;
/// # let _ = provider;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ZkLockProviderBuilder {
    target: Option<String>,
    chroot: Option<String>,
    session_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    credentials: Option<(String, String)>,
    base_path: Option<String>,
    acl: LockAcl,
    drift: Option<Duration>,
    disconnect_policy: DisconnectPolicy,
}

impl ZkLockProviderBuilder {
    /// The servers to connect to, with an optional chroot: `zk://h1:2181,h2:2181/app` or the
    /// plain ZooKeeper form `h1:2181,h2:2181/app`. The port defaults to 2181, and the URL form
    /// may carry digest credentials: `zk://user:password@h1:2181/app`.
    pub fn connect_string(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// A chroot under which everything lives, for a connect string without one.
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// The session timeout asked of the server; 10 s by default. The server clamps it to its
    /// `[minSessionTimeout, maxSessionTimeout]`; the negotiated value is the holds' lease.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// How long one connection attempt may take; 2/5 of the session timeout by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Digest credentials (`user:password`), sent on every (re)connect. With credentials, lock
    /// nodes are created readable and deletable by that user only (see [`LockAcl`]).
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// The znode under which each lock gets its znode; `/lockkit` by default. Created (with
    /// its missing ancestors) when the provider connects.
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        self.base_path = Some(path.into());
        self
    }

    /// Who may touch the nodes lockkit creates; see [`LockAcl`].
    pub fn acl(mut self, acl: LockAcl) -> Self {
        self.acl = acl;
        self
    }

    /// How much earlier than the server a holder considers its session (and so its hold)
    /// possibly gone; 5 % of the session timeout by default.
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// What a dropped connection does to the holds; see [`DisconnectPolicy`].
    pub fn disconnect_policy(mut self, policy: DisconnectPolicy) -> Self {
        self.disconnect_policy = policy;
        self
    }

    /// Checks every setting without touching the network.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting and what to change: no or empty connect
    /// string, an unknown URL scheme, an empty host, a bad port, a chroot or base path that is
    /// not an absolute znode path, a zero session or connect timeout, a drift margin not
    /// below a third of the session timeout, an ACL that needs credentials without them,
    /// credentials given twice or with an empty user or a `:` in the user.
    pub fn validate(&self) -> Result<ZkConfig> {
        let Some(target) = &self.target else {
            return Err(invalid("no connect string: call connect_string(\"zk://host:2181[,host:2181...][/chroot]\")"));
        };
        let parsed = parse_target(target)?;
        let chroot = match (&parsed.chroot, &self.chroot) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "a chroot is given both in the connect string and with chroot(): keep only one of them",
                ));
            }
            (Some(c), None) => Some(c.clone()),
            (None, Some(c)) => check_path(c, "the chroot")?,
            (None, None) => None,
        };
        let credentials = match (parsed.credentials, &self.credentials) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "credentials are given both in the URL and with credentials(): keep only one of them",
                ));
            }
            (Some(c), None) => Some(c),
            (None, c) => c.clone(),
        };
        if let Some((user, _)) = &credentials {
            if user.is_empty() {
                return Err(invalid("the digest user name is empty: give credentials as user:password"));
            }
            if user.contains(':') {
                return Err(invalid(format!(
                    "the digest user name {user:?} contains ':': a ZooKeeper digest user name cannot contain ':'"
                )));
            }
        }
        let session_timeout = self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT);
        if session_timeout.is_zero() {
            return Err(invalid(
                "the session timeout is zero: give one of a few seconds (it is the lease of every hold)",
            ));
        }
        if session_timeout < Duration::from_millis(100) {
            return Err(invalid(format!(
                "the session timeout {session_timeout:?} is too short: ZooKeeper needs at least two ticks; give a few seconds"
            )));
        }
        if let Some(connect) = self.connect_timeout
            && connect.is_zero()
        {
            return Err(invalid(
                "the connect timeout is zero: leave it unset (2/5 of the session timeout) or give one above zero",
            ));
        }
        let drift = self.drift.unwrap_or(session_timeout / 20);
        if drift >= session_timeout / 3 {
            return Err(invalid(format!(
                "the drift margin {drift:?} must be below a third of the session timeout {session_timeout:?} \
                 (holds are renewed every third of it); a few percent of the session timeout is typical"
            )));
        }
        let base = check_path(self.base_path.as_deref().unwrap_or(DEFAULT_BASE_PATH), "the base path")?
            .ok_or_else(|| invalid("the base path is \"/\": give a dedicated znode such as /lockkit"))?;
        let acl = match (self.acl, credentials.is_some()) {
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
            hosts: parsed.hosts.join(","),
            root,
            session_timeout,
            connect_timeout: self.connect_timeout,
            credentials,
            acl,
            drift,
            disconnect_policy: self.disconnect_policy,
        })
    }

    /// Checks the settings, connects, and creates the base path if it is missing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] as for [`validate`](Self::validate), before any network I/O;
    /// [`Error::Connection`] when no server answers within the session timeout; other errors
    /// of ZooKeeper (for instance `NoAuth` creating the base path) as [`Error::Backend`].
    pub async fn build(self) -> Result<ZkLockProvider> {
        let config = self.validate()?;
        ZkLockProvider::open(config).await
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_config(BACKEND, message)
}

/// A checked configuration, made by [`ZkLockProviderBuilder::validate`].
#[derive(Clone, Debug)]
pub struct ZkConfig {
    /// `host:port,host:port`, without chroot.
    pub(crate) hosts: String,
    /// The chroot and base path: the parent of every lock's znode.
    pub(crate) root: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) credentials: Option<(String, String)>,
    pub(crate) acl: LockAcl,
    pub(crate) drift: Duration,
    pub(crate) disconnect_policy: DisconnectPolicy,
}

impl ZkConfig {
    /// The znode of a lock: `{chroot}{base}/{encoded name}`.
    pub(crate) fn lock_path(&self, name: &LockName) -> String {
        format!("{}/{}", self.root, crate::names::encode_name(name))
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

struct Target {
    hosts: Vec<String>,
    chroot: Option<String>,
    credentials: Option<(String, String)>,
}

fn parse_target(target: &str) -> Result<Target> {
    let target = target.trim();
    if target.is_empty() {
        return Err(invalid("the connect string is empty: give zk://host:2181[,host:2181...][/chroot]"));
    }
    let (rest, url) = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("zk") || scheme.eq_ignore_ascii_case("zookeeper") => {
            (rest, true)
        }
        Some((scheme, _)) => {
            let hint = match scheme.to_ascii_lowercase().as_str() {
                "redis" | "rediss" => " (a Redis URL: use lockkit-redis for it)",
                "memory" => " (use the memory backend of lockkit-core for it)",
                _ => "",
            };
            return Err(invalid(format!(
                "unknown scheme {scheme:?} in {target:?}{hint}: the ZooKeeper backend takes zk://host:port[,host:port...][/chroot] or a plain host:port list"
            )));
        }
        None => (target, false),
    };
    if rest.contains('?') || rest.contains('#') {
        return Err(invalid(format!(
            "{target:?} has a query or fragment: set options with the builder's methods instead"
        )));
    }
    let (authority, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some(_) if !url => {
            return Err(invalid(format!(
                "{target:?} carries credentials but is not a zk:// URL: write zk://user:password@host:port or use credentials()"
            )));
        }
        Some((userinfo, hosts)) => {
            let Some((user, password)) = userinfo.split_once(':') else {
                return Err(invalid(format!(
                    "the credentials in {target:?} lack a password: write zk://user:password@host:port"
                )));
            };
            (Some((user.to_owned(), password.to_owned())), hosts)
        }
        None => (None, authority),
    };
    if hosts.trim().is_empty() {
        return Err(invalid(format!(
            "{target:?} names no server: give at least one host, as in zk://zk1:2181,zk2:2181/app"
        )));
    }
    let hosts = hosts.split(',').map(|host| parse_host(host, target)).collect::<Result<Vec<_>>>()?;
    let chroot = match chroot {
        Some(chroot) => check_path(chroot, "the chroot")?,
        None => None,
    };
    Ok(Target { hosts, chroot, credentials })
}

fn parse_host(host: &str, target: &str) -> Result<String> {
    let host = host.trim();
    if host.is_empty() {
        return Err(invalid(format!("{target:?} has an empty host between commas: remove the extra comma")));
    }
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let Some((name, after)) = v6.split_once(']') else {
            return Err(invalid(format!("the IPv6 host {host:?} in {target:?} lacks its closing ']'")));
        };
        match after {
            "" => (format!("[{name}]"), None),
            _ => match after.strip_prefix(':') {
                Some(port) => (format!("[{name}]"), Some(port)),
                None => return Err(invalid(format!("unexpected {after:?} after the IPv6 host in {host:?}"))),
            },
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(invalid(format!("the server {host:?} in {target:?} has no host name")));
    }
    if name.contains(char::is_whitespace) || name.contains('/') {
        return Err(invalid(format!("the host name {name:?} in {target:?} is not valid")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(invalid(format!(
                    "the port {port:?} of {name} in {target:?} is not a number between 1 and 65535"
                )));
            }
        },
    };
    Ok(format!("{name}:{port}"))
}

/// Checks an absolute znode path; `None` for `/`.
fn check_path(path: &str, what: &str) -> Result<Option<String>> {
    if !path.starts_with('/') {
        return Err(invalid(format!("{what} {path:?} is not absolute: start it with '/', as in /{path}")));
    }
    if path == "/" {
        return Ok(None);
    }
    if path.ends_with('/') {
        return Err(invalid(format!("{what} {path:?} ends with '/': remove the trailing slash")));
    }
    for segment in path[1..].split('/') {
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
    use super::*;

    fn builder(target: &str) -> ZkLockProviderBuilder {
        ZkLockProviderBuilder::default().connect_string(target)
    }

    #[test]
    fn url_and_plain_forms_parse() {
        let c = builder("zk://h1:2181,h2:2182/app").validate().unwrap();
        assert_eq!((c.hosts.as_str(), c.root.as_str()), ("h1:2181,h2:2182", "/app/lockkit"));
        let c = builder("h1,h2:2182/app/x").base_path("/locks").validate().unwrap();
        assert_eq!((c.hosts.as_str(), c.root.as_str()), ("h1:2181,h2:2182", "/app/x/locks"));
        let c = builder("zk://u:p@[::1]:2181").validate().unwrap();
        assert_eq!(c.hosts, "[::1]:2181");
        assert_eq!(c.credentials, Some(("u".into(), "p".into())));
        assert_eq!(c.acl, LockAcl::CreatorOnly);
        let c = builder("127.0.0.1:1/").chroot("/c").validate().unwrap();
        assert_eq!(c.root, "/c/lockkit");
    }

    #[test]
    fn bad_settings_are_refused_with_advice() {
        let cases: Vec<(ZkLockProviderBuilder, &str)> = vec![
            (ZkLockProviderBuilder::default(), "no connect string"),
            (builder(""), "empty"),
            (builder("zk:///app"), "no server"),
            (builder("h1:2181,,h2"), "empty host"),
            (builder("h1:99999"), "port"),
            (builder("h1:abc"), "port"),
            (builder("h1:0"), "port"),
            (builder("redis://h1"), "unknown scheme"),
            (builder("h1").chroot("app"), "not absolute"),
            (builder("h1/app/"), "trailing slash"),
            (builder("h1/a//b"), "empty segment"),
            (builder("h1/a/.."), "segment"),
            (builder("h1").base_path("locks"), "not absolute"),
            (builder("h1").base_path("/"), "dedicated"),
            (builder("h1").session_timeout(Duration::ZERO), "zero"),
            (builder("h1").connect_timeout(Duration::ZERO), "zero"),
            (builder("h1").session_timeout(Duration::from_secs(3)).drift(Duration::from_secs(1)), "drift"),
            (builder("h1").acl(LockAcl::CreatorOnly), "needs credentials"),
            (builder("h1").credentials("a:b", "c"), "contains ':'"),
            (builder("h1?x=1"), "query"),
        ];
        for (builder, expected) in cases {
            match builder.validate() {
                Err(Error::InvalidConfig { backend, message }) => {
                    assert_eq!(backend, "zk");
                    assert!(message.contains(expected), "{message:?} should mention {expected:?}");
                }
                other => panic!("expected InvalidConfig mentioning {expected:?}, got {other:?}"),
            }
        }
    }
}
