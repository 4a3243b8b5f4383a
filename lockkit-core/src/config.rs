//! Store URLs, settings and the scheme table: how a deployment names its store.
//!
//! - [`StoreUrl`] splits `scheme://[user:password@]hosts[/path][?key=value&…]`, with
//!   percent-decoding of the credentials and the query, once for every backend.
//! - Every setting of every backend is a typed [`Key`]: its name, type, default, range and a
//!   doc line, declared once. The name is both the builder method and the URL option
//!   (`lease=10s` is `.lease(…)`). A builder keeps what it was given in an [`Options`], which
//!   reads it back typed and checks it with the same messages for every backend; the options
//!   table of the docs is made from the keys ([`options_table`], [`url_docs`]).
//! - A backend's builder writes its shared methods with [`builder_methods!`](crate::builder_methods)
//!   and its setters with [`option_setters!`](crate::option_setters), from its keys.
//! - The [`Scheme`] of a backend is the one place its URL schemes are named, with the
//!   backend, the `lockkit` feature that builds it in, its URL forms, its options and its
//!   connect function. The memory backend's `mem` is built in; a backend crate exports its
//!   own `Scheme` and the facade (or the application, for a third-party backend)
//!   [`register`]s it, after which [`connect`] reaches it.
//!
//! # Settings from a URL and from builder methods: one rule
//!
//! **A setting takes the last value given, whichever way it came.** A builder's methods, its
//! `option(key, value)`, and the query of a URL given to its `from_url` or to its `url(…)`
//! (Redis, PostgreSQL) all set the same settings, in the order they are called:
//! `url("redis://h/?lease=10s").lease(5s)` has a 5 s lease, `lease(5s).url("redis://h/?lease=10s")`
//! a 10 s one. An option the backend does not take, or a value that does not parse, is an
//! [`Error::InvalidConfig`](crate::Error::InvalidConfig): at once from `from_url` and `option`,
//! from `build` for a URL given to `url(…)` (which cannot fail). Ranges, and settings that must
//! fit together, are checked by `build`, which does no I/O.

mod builder;
mod credentials;
mod duration;
mod hosts;
mod key;
mod options;
#[cfg(feature = "rustls")]
mod rustls;
mod scheme;
mod table;
pub mod timing;
mod tls;
mod tls_mode;
mod url;
mod value;

pub use credentials::Credentials;
pub use duration::{MAX_DURATION, millis, parse_duration, show_duration, whole_millis};
pub use hosts::{HostPort, parse_hosts};
pub use key::{GivenValue, Key, MAX_HOLD, OptionKey, STORE_ID, options_table};
pub use options::{Options, ProviderBuilder, from_url, with_url};
pub use scheme::{ConnectFuture, Scheme, url_docs};
pub use table::{connect, lookup, register, registered};
pub use tls::{ClientTls, Pem, TLS_KEYS, TlsKeys, tls_not_built};
pub use tls_mode::{ModeTlsKeys, TlsMode};
pub use url::{StoreUrl, redact};
pub use value::OptionValue;
