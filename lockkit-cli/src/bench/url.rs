//! The store a bench runs on, as parsed for the parts that need the backend's own client, and
//! the run's id.

use std::time::{SystemTime, UNIX_EPOCH};

use lockkit::config::StoreUrl;

use crate::exit::Failure;

/// The store URL as the facade parses it, for the parts of the benchmark that need the
/// backend's own client. The lock figures go through [`lockkit::connect`] with the URL as
/// given.
#[derive(Debug, Clone)]
pub(crate) struct Url {
    /// The URL, parsed.
    pub(crate) store: StoreUrl,
    /// The URL with no password, for messages.
    pub(crate) shown: String,
}

impl Url {
    /// Parses `url`; `shown` is its redacted form.
    pub(crate) fn parse(url: &str, shown: &str) -> Result<Self, Failure> {
        let store = StoreUrl::parse(url).map_err(|e| Failure::from_lock_error(&e, "bench"))?;
        Ok(Self { store, shown: shown.to_owned() })
    }

    /// The backend that serves the URL's scheme, as its [`Scheme`](lockkit::config::Scheme)
    /// names it; `unknown` for a scheme this build does not serve.
    pub(crate) fn backend(&self) -> &'static str {
        let scheme = self.store.scheme();
        lockkit::schemes().into_iter().find(|known| known.serves(scheme)).map_or("unknown", |known| known.backend)
    }
}

/// `url` with its query option `key` set to `value`, replacing one the URL has (the same rule
/// as `--lease` on `lockkit run`).
pub(crate) fn with_option(url: &str, key: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: Vec<&str> =
        query.split('&').filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(key)).collect();
    let pair = format!("{key}={value}");
    pairs.push(&pair);
    format!("{base}?{}", pairs.join("&"))
}

/// A short id of this run, unique enough to keep runs on one server apart.
pub(crate) fn run_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        format!("{}-{nanos:x}", std::process::id())
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        let url = Url::parse("zk://u:p@h1:2181,h2:2181/app?base=/locks&ttl=10s", "zk://u:***@h1:2181");
        assert_eq!(url.map(|url| url.backend()).ok(), Some("zk"));
        assert_eq!(Url::parse("mem://", "mem://").map(|url| url.backend()).ok(), Some("memory"));
        assert_eq!(Url::parse("postgresql://h/db", "").map(|url| url.backend()).ok(), Some("postgres"));
        assert_eq!(Url::parse("ftp://h", "").map(|url| url.backend()).ok(), Some("unknown"));
    }

    #[test]
    fn an_option_is_set_or_replaced() {
        assert_eq!(with_option("redis://h", "lease", "3s"), "redis://h?lease=3s");
        assert_eq!(with_option("redis://h?lease=30s&fair=false", "lease", "3s"), "redis://h?fair=false&lease=3s");
        assert_eq!(with_option("etcd://h/p?ttl=10s", "ttl", "3s"), "etcd://h/p?ttl=3s");
    }
}
