//! [`StoreUrl`]: the one parser of store URLs, and [`redact`], the form messages show.

use std::collections::HashSet;

use percent_encoding::percent_decode_str;

use super::Credentials;
use crate::{Error, Result};

/// A store URL split into its parts: the one parser behind [`connect`](super::connect) and every
/// backend's `from_url`.
///
/// The user name, the password and the query values are percent-decoded
/// (`p%40ss` is `p@ss`); the hosts and the path are kept as written for the backend to read.
#[derive(Clone)]
pub struct StoreUrl {
    original: String,
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: String,
    path: String,
    options: Vec<(String, String)>,
}

impl StoreUrl {
    /// Splits `url`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when it has no `scheme://`, an option is given twice, or a
    /// percent escape does not decode to UTF-8.
    pub fn parse(url: &str) -> Result<Self> {
        let url = url.trim();
        let Some((scheme, after)) = url.split_once("://") else {
            return Err(invalid(
                "lockkit",
                format!(
                    "{:?} is not a lock store URL; write it like mem://, file:///var/lock/app or redis://host:6379",
                    redact(url)
                ),
            ));
        };
        let scheme = scheme.to_ascii_lowercase();
        let (rest, query) = after.split_once('?').unwrap_or((after, ""));
        let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let shown = redact(url);
        let decode = |what: &str, text: &str| -> Result<String> {
            percent_decode_str(text).decode_utf8().map(|text| text.into_owned()).map_err(|_| {
                invalid("lockkit", format!("the {what} in {shown} has a percent escape that is not UTF-8"))
            })
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => match userinfo.split_once(':') {
                Some((user, password)) => (Some(decode("user name", user)?), Some(decode("password", password)?)),
                None => (Some(decode("user name", userinfo)?), None),
            },
        };
        let mut options: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode("option name", key)?;
            if !seen.insert(key.clone()) {
                return Err(invalid("lockkit", format!("option {key} is given twice in {shown}; give it once")));
            }
            options.push((key, decode(&format!("value of option {pair}"), value)?));
        }
        Ok(Self {
            original: url.to_owned(),
            scheme,
            user: user.filter(|user| !user.is_empty()),
            password,
            hosts: hosts.to_owned(),
            path: path.to_owned(),
            options,
        })
    }

    /// The scheme, in lower case: `mem`, `file`, `redis`, `rediss`, `zk`, or whatever was
    /// written.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, decoded, when one was given.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, decoded, when one was given.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Everything between the credentials and the path: `host:port` or a comma-separated
    /// list of them; empty for `file:///dir` and `mem://`.
    pub fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The user name and password, when both were given; `None` when neither was.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] of `backend` for a user without a password or a password
    /// without a user.
    pub fn credentials(&self, backend: &'static str) -> Result<Option<Credentials>> {
        match (self.user(), self.password()) {
            (None, None) => Ok(None),
            (Some(user), Some(password)) => Ok(Some(Credentials::new(user, password))),
            _ => Err(invalid(
                backend,
                format!(
                    "the credentials in {} need both a user and a password: write {}://user:password@{}",
                    self.redacted(),
                    self.scheme,
                    self.hosts
                ),
            )),
        }
    }

    /// The path, with its leading `/` (a database number, a chroot, a directory); empty
    /// when there is none.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The URL without its query, credentials included: what a backend's own client
    /// connects to.
    pub fn address(&self) -> String {
        let rest = self.original.split_once("://").map_or("", |(_, rest)| rest);
        let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
        format!("{}://{rest}", self.scheme)
    }

    /// The query options, decoded, in the order written.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// The value of query option `key`, if given.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options().find(|(k, _)| *k == key).map(|(_, value)| value)
    }

    /// The URL as written, with any password replaced by `***`: the form messages show.
    pub fn redacted(&self) -> String {
        redact(&self.original)
    }

    /// The address without credentials or query, for error messages
    /// ([`LockBackend::address`](crate::backend::LockBackend::address)).
    pub fn shown_address(&self) -> String {
        format!("{}://{}{}", self.scheme, self.hosts, self.path)
    }

    /// The store's identity, the same for every process and provider that reaches this store
    /// at these hosts ([`LockId`](crate::LockId), and the order of
    /// [`MultiLock`](crate::MultiLock)): `scheme://hosts/path?key=value`, never with
    /// credentials. The TLS scheme is folded into the plain one (`rediss` is `redis`,
    /// `etcds` is `etcd`, `postgresql` is `postgres`), host names are put in lower case,
    /// sorted and deduplicated, the query is dropped, and `keyspace` (the settings that make
    /// the store's key space, such as a key prefix or a schema) is appended sorted by key.
    /// A `#`, `%`, `&` or `=` in the path or a value is percent-escaped, so the identity
    /// never contains `#`.
    ///
    /// No name is resolved: `localhost` and `127.0.0.1` are two identities. Where processes
    /// reach one store by different addresses, set the option `store_id` instead.
    ///
    /// ```
    /// use lockkit_core::config::StoreUrl;
    ///
    /// let url = StoreUrl::parse("rediss://app:secret@H2:6379,h1:6379/0?lease=10s")?;
    /// assert_eq!(url.identity(&[("key_prefix", "billing")]), "redis://h1:6379,h2:6379/0?key_prefix=billing");
    /// # Ok::<(), lockkit_core::Error>(())
    /// ```
    pub fn identity(&self, keyspace: &[(&str, &str)]) -> String {
        let scheme = match self.scheme.split_once('+') {
            Some((family, variant)) => format!("{}+{variant}", plain_scheme(family)),
            None => plain_scheme(&self.scheme).to_owned(),
        };
        let mut hosts: Vec<String> = self
            .hosts
            .split(',')
            .map(|host| host.trim().to_ascii_lowercase())
            .filter(|host| !host.is_empty())
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        let mut identity = format!("{scheme}://{}{}", hosts.join(","), escape_identity(&self.path));
        let mut keyspace = keyspace.to_vec();
        keyspace.sort_unstable();
        for (at, (key, value)) in keyspace.iter().enumerate() {
            let separator = if at == 0 { '?' } else { '&' };
            identity.push_str(&format!("{separator}{}={}", escape_identity(key), escape_identity(value)));
        }
        identity
    }
}

impl StoreUrl {
    /// [`identity`](Self::identity) with every host given its port, `default_port` where the
    /// URL names none, so that `h` and `h:5432` are one store. Hosts that do not parse (which
    /// `build` refuses anyway) are taken as written.
    ///
    /// ```
    /// use lockkit_core::config::StoreUrl;
    ///
    /// let url = StoreUrl::parse("postgresql://app:pw@B,a:6543/locks")?;
    /// assert_eq!(url.identity_with_port(5432, &[]), "postgres://a:6543,b:5432/locks");
    /// # Ok::<(), lockkit_core::Error>(())
    /// ```
    pub fn identity_with_port(&self, default_port: u16, keyspace: &[(&str, &str)]) -> String {
        let Ok(hosts) = super::parse_hosts("lockkit", &self.hosts, default_port) else {
            return self.identity(keyspace);
        };
        let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        Self { hosts: hosts.join(","), ..self.clone() }.identity(keyspace)
    }
}

/// The plain scheme of a TLS one, and one spelling of PostgreSQL's.
fn plain_scheme(scheme: &str) -> &str {
    match scheme {
        "rediss" => "redis",
        "etcds" => "etcd",
        "postgresql" => "postgres",
        other => other,
    }
}

/// `text` with the characters that would make an identity ambiguous percent-escaped.
fn escape_identity(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '#' | '%' | '&' | '=' | '?' => escaped.push_str(&format!("%{:02X}", u32::from(c))),
            c if c.is_control() => escaped.push_str(&format!("%{:02X}", u32::from(c))),
            c => escaped.push(c),
        }
    }
    escaped
}

impl StoreUrl {
    /// As [`parse`](Self::parse), with the error of `backend` (for a backend that reads its
    /// URL forms itself).
    ///
    /// # Errors
    ///
    /// As for [`parse`](Self::parse).
    pub fn parse_for(backend: &'static str, url: &str) -> Result<Self> {
        Self::parse(url).map_err(|error| match error {
            Error::InvalidConfig { message, .. } => invalid(backend, message),
            other => other,
        })
    }

    /// The URL's scheme when it is one of `names` (a backend's schemes, lower case), for the
    /// `address` of a backend's builder.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] of `backend` for another scheme: "URL is not a NAME:// URL;
    /// write `form`".
    pub fn expect_scheme(&self, backend: &'static str, names: &[&str], form: &str) -> Result<&str> {
        if names.contains(&self.scheme.as_str()) {
            return Ok(&self.scheme);
        }
        let name = names.first().unwrap_or(&backend);
        let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        Err(invalid(backend, format!("{} is not {article} {name}:// URL; write {form}", self.redacted())))
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted()).finish()
    }
}

/// The URL with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

fn invalid(backend: &'static str, message: impl Into<String>) -> Error {
    Error::invalid_config(backend, message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn store_identities_fold_tls_sort_hosts_and_drop_credentials() {
        let identity = |url: &str, keyspace: &[(&str, &str)]| StoreUrl::parse(url).unwrap().identity(keyspace);
        assert_eq!(identity("rediss://u:secret@B:1,a:2/3?lease=1s", &[]), "redis://a:2,b:1/3");
        assert_eq!(identity("redis://a:2,b:1/3", &[]), identity("rediss://b:1,A:2,a:2/3", &[]));
        assert_eq!(identity("postgresql://h:5432/db", &[("schema", "s")]), "postgres://h:5432/db?schema=s");
        assert_eq!(identity("rediss+sentinel://m/0", &[]), "redis+sentinel://m/0");
        assert_eq!(identity("redis://h:1/0", &[("p", "x"), ("a", "#%&=")]), "redis://h:1/0?a=%23%25%26%3D&p=x");
        assert_eq!(identity("file:///var/lock/a#b", &[]), "file:///var/lock/a%23b");
    }

    #[test]
    fn urls_split_into_decoded_parts() {
        let url = StoreUrl::parse("Redis://app:p%40ss%3Aw@h1:6379,h2:6379/3?lease=10s&key_prefix=a%26b").unwrap();
        assert_eq!(url.scheme(), "redis");
        assert_eq!((url.user(), url.password()), (Some("app"), Some("p@ss:w")));
        assert_eq!((url.hosts(), url.path()), ("h1:6379,h2:6379", "/3"));
        assert_eq!(url.option("key_prefix"), Some("a&b"));
        assert_eq!(url.options().map(|(k, _)| k).collect::<Vec<_>>(), ["lease", "key_prefix"]);
        assert_eq!(url.address(), "redis://app:p%40ss%3Aw@h1:6379,h2:6379/3");
        assert_eq!(url.shown_address(), "redis://h1:6379,h2:6379/3");
        assert!(!format!("{url:?}").contains("p%40ss"));
        let file = StoreUrl::parse("file:///var/lock/app").unwrap();
        assert_eq!((file.hosts(), file.path()), ("", "/var/lock/app"));
    }

    #[test]
    fn bad_urls_say_what_to_change() {
        let message = |url: &str| StoreUrl::parse(url).unwrap_err().to_string();
        assert!(message("localhost:6379").contains("redis://host:6379"));
        assert!(message("redis://h/?lease=1s&lease=2s").contains("twice"));
        assert!(message("redis://u:%ff@h").contains("not UTF-8"));
        assert!(!message("redis://u:%ffsecret@h").contains("secret"));
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://app:s3cret@host:6379/0"), "redis://app:***@host:6379/0");
        assert_eq!(redact("zk://u:p@h1:2181,h2:2181/app"), "zk://u:***@h1:2181,h2:2181/app");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
