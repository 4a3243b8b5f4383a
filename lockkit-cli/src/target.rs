//! Which store to talk to: the URL from `--url`, else `LOCKKIT_URL`, else
//! [`lockkit::DEFAULT_URL`]; `--lease` added as the URL's `lease` option; the redacted form that
//! every message shows.

use lockkit::LockProvider;

use crate::exit::{self, Failure, UNAVAILABLE, USAGE};

/// What a `lockkit` built without etcd says about an `etcd://` URL: the CLI's feature, and the
/// tool that feature needs at build time.
const ETCD_HINT: &str = "; this lockkit was built without etcd: install it with \
    `cargo install --path lockkit-cli --features etcd` (etcd's client needs protoc to build: \
    apt-get install protobuf-compiler)";

/// A store URL and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL as given to [`lockkit::connect`], credentials included.
    url: String,
    /// The URL with its password replaced, for messages.
    shown: String,
    /// Where the URL came from, for the message about a bad one.
    source: &'static str,
}

impl Target {
    /// The store named by `--url`, else by `LOCKKIT_URL`, else the default.
    pub(crate) fn resolve(flag: Option<String>) -> Self {
        let env_set = std::env::var(lockkit::URL_ENV).is_ok_and(|url| !url.trim().is_empty());
        let (url, source) = match flag {
            Some(url) => (url, "--url"),
            None if env_set => (lockkit::url_from_env(), "LOCKKIT_URL"),
            None => (lockkit::url_from_env(), "the default"),
        };
        let shown = lockkit::config::redact(&url);
        Self { url, shown, source }
    }

    /// Sets the `lease` query option to `lease` (the text the user wrote, already checked
    /// to be a duration), replacing one the URL has: the flag is the more specific setting.
    pub(crate) fn with_lease(mut self, lease: &str) -> Self {
        let (base, query) = self.url.split_once('?').unwrap_or((&self.url, ""));
        let mut pairs: Vec<&str> =
            query.split('&').filter(|pair| !pair.is_empty() && pair.split('=').next() != Some("lease")).collect();
        let lease = format!("lease={lease}");
        pairs.push(&lease);
        self.url = format!("{base}?{}", pairs.join("&"));
        self.shown = lockkit::config::redact(&self.url);
        self
    }

    /// The URL for messages, with no password in it.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// Connects to the store for `lock`. `lease_given` says whether `--lease` added the
    /// `lease` option, to explain a backend's refusal of it.
    pub(crate) async fn connect(&self, lock: &str, lease_given: bool) -> Result<LockProvider, Failure> {
        lockkit::connect(&self.url).await.map_err(|error| {
            let verb = match exit::code_of(&error) {
                UNAVAILABLE => "cannot reach",
                USAGE => "cannot use",
                _ => "cannot connect to",
            };
            let context = format!("{verb} {} (from {}) for lock {lock:?}", self.shown, self.source);
            let mut failure = Failure::from_lock_error(&error, &context);
            if lease_given && failure.code == USAGE && failure.message.contains("\"lease\"") {
                failure.message.push_str(" (--lease sets the URL's lease option; this backend has no lease to set)");
            }
            if failure.code == USAGE && failure.message.contains("`etcd") {
                failure.message.push_str(ETCD_HINT);
            }
            failure
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target { url: url.to_owned(), shown: lockkit::config::redact(url), source: "--url" }
    }

    #[test]
    fn lease_is_appended_or_replaces_the_urls() {
        assert_eq!(target("redis://h:1/").with_lease("10s").url, "redis://h:1/?lease=10s");
        assert_eq!(target("redis://h:1/?key_prefix=a").with_lease("10s").url, "redis://h:1/?key_prefix=a&lease=10s");
        assert_eq!(
            target("redis://h:1/?lease=5s&key_prefix=a").with_lease("10s").url,
            "redis://h:1/?key_prefix=a&lease=10s"
        );
    }

    #[test]
    fn passwords_are_not_shown() {
        let shown = target("redis://app:hunter2@h:1/").with_lease("1s").shown;
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
