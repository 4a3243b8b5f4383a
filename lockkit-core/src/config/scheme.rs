//! [`Scheme`]: a backend's URL schemes with everything known about them (its names, its
//! backend, the `lockkit` feature that builds it in, its URL forms, its options and its connect
//! function), the one place each of these is written; and the URL docs made from schemes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::key::{OptionKey, options_table};
use super::url::StoreUrl;
use crate::{LockProvider, Result};

/// The future a [`Scheme`] returns: a connected, health-checked provider.
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<LockProvider>> + Send>>;

/// The URL schemes a backend serves, and everything else known about them: the single
/// source of the scheme table ([`register`](super::register)), of the facade's feature
/// hints, of the URL docs ([`url_docs`]) and of the `lockkit` CLI's list of stores.
///
/// ```
/// use lockkit_core::config::{ConnectFuture, Scheme, StoreUrl};
///
/// fn connect(url: StoreUrl) -> ConnectFuture {
///     Box::pin(async move { lockkit_core::memory::MemoryLockProvider::from_url(&url).map(Into::into) })
/// }
///
/// const TABLE: Scheme = Scheme::new(&["table"], "table", connect)
///     .with_urls(&[("table://NAME", "the lock table called NAME")]);
/// lockkit_core::config::register(TABLE);
/// ```
#[derive(Clone, Copy)]
pub struct Scheme {
    /// The schemes, lower case, without `://`: `["redis", "rediss"]`.
    pub names: &'static [&'static str],
    /// The backend's name, as in its errors.
    pub backend: &'static str,
    /// The cargo feature of the `lockkit` facade crate that builds this backend in; `None`
    /// for a backend that is always built in, or a third party's.
    pub feature: Option<&'static str>,
    /// The URL forms it reads, each with what it names, for the docs:
    /// `("zk://[user:password@]host:port[,host:port…][/chroot]", "a ZooKeeper ensemble")`.
    pub urls: &'static [(&'static str, &'static str)],
    /// The options its URLs (and its builder) take.
    pub options: &'static [&'static dyn OptionKey],
    /// Connects eagerly: checks every setting, reaches the store once, and returns the
    /// provider, or a retryable [`Error::Connection`](crate::Error::Connection) when the
    /// store does not answer.
    pub connect: fn(StoreUrl) -> ConnectFuture,
}

impl Scheme {
    /// The schemes `names` of `backend`, reached by `connect`; no feature, URL forms or
    /// options until given.
    pub const fn new(
        names: &'static [&'static str],
        backend: &'static str,
        connect: fn(StoreUrl) -> ConnectFuture,
    ) -> Self {
        Self { names, backend, feature: None, urls: &[], options: &[], connect }
    }

    /// The `lockkit` feature that builds the backend in.
    #[must_use]
    pub const fn with_feature(mut self, feature: &'static str) -> Self {
        self.feature = Some(feature);
        self
    }

    /// The URL forms, each with what it names.
    #[must_use]
    pub const fn with_urls(mut self, urls: &'static [(&'static str, &'static str)]) -> Self {
        self.urls = urls;
        self
    }

    /// The options.
    #[must_use]
    pub const fn with_options(mut self, options: &'static [&'static dyn OptionKey]) -> Self {
        self.options = options;
        self
    }

    /// Whether URL scheme `name` (lower case) is one of these.
    pub fn serves(&self, name: &str) -> bool {
        self.names.contains(&name)
    }
}

impl fmt::Debug for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheme")
            .field("names", &self.names)
            .field("backend", &self.backend)
            .field("feature", &self.feature)
            .finish_non_exhaustive()
    }
}

/// The URL docs of `schemes`, in Markdown: a table of URL forms (with the backend and the
/// feature each needs), then each backend's options table ([`options_table`]).
pub fn url_docs(schemes: &[Scheme]) -> String {
    let mut docs = String::from("| URL | store | feature |\n| --- | --- | --- |\n");
    for scheme in schemes {
        let feature = scheme.feature.map_or_else(|| "always".to_owned(), |feature| format!("`{feature}`"));
        for (form, what) in scheme.urls {
            docs.push_str(&format!("| `{form}` | {what} | {feature} |\n"));
        }
    }
    for scheme in schemes {
        let names: Vec<String> = scheme.names.iter().map(|name| format!("`{name}://`")).collect();
        docs.push_str(&format!("\nOptions of {} ({}):\n\n", scheme.backend, names.join(", ")));
        docs.push_str(&options_table(scheme.options));
    }
    docs
}
