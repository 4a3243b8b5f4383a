//! The methods every backend's builder has, written once: [`builder_methods!`] gives a
//! [`ProviderBuilder`](super::ProviderBuilder) its `from_url`, `option` and `url`, and
//! [`option_setters!`] turns a list of documented `name(value: Type) => KEY` lines into the
//! setters that put a value in the builder's [`Options`](super::Options).
//!
//! Both expand inside an `impl XLockProviderBuilder { … }` block whose type has a field
//! `options: Options`, so that a backend writes only what its builder does differently.
//! [`provider_builder!`] declares such a type: the struct, its `Default` and its
//! [`ProviderBuilder`](super::ProviderBuilder) impl, from the address fields and the
//! `address` body of the backend.

/// The `options`, `from_url`, `option` (and, with `url`, `url`) methods of a backend's
/// builder, inside its `impl` block. The builder implements
/// [`ProviderBuilder`](crate::config::ProviderBuilder) and keeps its settings in a field
/// `options`.
///
/// `url` takes the doc comment of the `url` method: the URL forms the backend reads.
///
/// ```ignore
/// impl XLockProviderBuilder {
///     lockkit_core::builder_methods!(
///         /// The server: `x://host:port`.
///         url
///     );
/// }
/// ```
#[macro_export]
macro_rules! builder_methods {
    () => {
        /// The settings given so far.
        #[allow(dead_code)]
        pub(crate) fn options(&self) -> &$crate::config::Options {
            &self.options
        }

        /// A builder with the address and every option of `url` (the options are the
        /// backend's `OPTIONS`, named as the builder methods that set them).
        ///
        /// # Errors
        ///
        /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for another scheme, an
        /// address this backend cannot use, an unknown option or a value that does not parse;
        /// the values' ranges are checked by `build`.
        pub fn from_url(url: &$crate::config::StoreUrl) -> $crate::Result<Self> {
            $crate::config::from_url(url)
        }

        /// Sets the option called `key` from its text, as a URL's query gives it: the names
        /// are those of the builder methods (the backend's `OPTIONS`); durations are written
        /// with a unit (`500ms`, `10s`), flags as `true` or `false`, TLS files as paths.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig) for an unknown option
        /// or a value that does not parse.
        pub fn option(mut self, key: &str, value: &str) -> $crate::Result<Self> {
            self.options.parse(key, value)?;
            Ok(self)
        }
    };
    ($(#[$doc:meta])* url) => {
        $crate::builder_methods!();

        $(#[$doc])*
        ///
        /// The options of the URL's query are taken here, in order with the builder's other
        /// settings: a setting given later replaces the URL's (see `lockkit_core::config`). A
        /// URL that cannot be used, or an unknown option, is an error at `build`.
        pub fn url(self, url: impl AsRef<str>) -> Self {
            $crate::config::with_url(self, url.as_ref())
        }
    };
}

/// A backend's builder type: the struct with the backend's address fields (each `Default`
/// when nothing is given) and `options: Options` of the backend's `OPTIONS`, `Clone`, `Debug`
/// (the fields must not show a password: keep URLs as [`StoreUrl`](crate::config::StoreUrl) and
/// credentials as [`Credentials`](crate::config::Credentials), whose `Debug` hide it),
/// `#[must_use]`, `Default`, and its [`ProviderBuilder`](crate::config::ProviderBuilder) impl
/// whose `address(self, url)` takes the body given (with its doc comment).
///
/// ```ignore
/// lockkit_core::provider_builder! {
///     /// Builds an [`XLockProvider`].
///     pub struct XLockProviderBuilder(BACKEND, OPTIONS) {
///         /// The server's URL.
///         url: Option<StoreUrl>,
///     }
///     /// The server of a URL, read by `build`.
///     address(self, url) {
///         self.url = Some(url.clone());
///         Ok(())
///     }
/// }
/// ```
#[macro_export]
macro_rules! provider_builder {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($backend:expr, $options:expr) {
            $($(#[$field_meta:meta])* $field:ident: $field_ty:ty,)*
        }
        $(#[$address_meta:meta])*
        address($self:ident, $url:ident) $address:block
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug)]
        #[must_use = "a builder does nothing until `build` is called"]
        pub struct $name {
            $($(#[$field_meta])* $field: $field_ty,)*
            options: $crate::config::Options,
        }

        impl ::core::default::Default for $name {
            fn default() -> Self {
                Self {
                    $($field: ::core::default::Default::default(),)*
                    options: $crate::config::Options::new($backend, $options),
                }
            }
        }

        impl $crate::config::ProviderBuilder for $name {
            fn options_mut(&mut self) -> &mut $crate::config::Options {
                &mut self.options
            }

            $(#[$address_meta])*
            fn address(&mut $self, $url: &$crate::config::StoreUrl) -> $crate::Result<()> $address
        }
    };
}

/// Setters of a backend's builder, inside its `impl` block: each line
/// `fn name(value: Type) => KEY;`, with its doc comment and attributes, becomes
/// `pub fn name(mut self, value: Type) -> Self` that sets the option `KEY` (a
/// [`Key`](crate::config::Key)) in the builder's field `options`. `Type` may be
/// `impl Into<T>` for a `Key<T>`.
///
/// A line `tls(KEYS);` (with attributes, such as a `cfg`, that apply to both) gives the
/// PEM setters of core's [`TlsKeys`](crate::config::TlsKeys): `tls_root_certificate` and
/// `tls_client_certificate`.
///
/// A line `fn credentials(user, password) => field;`, with its doc comment, gives
/// `credentials(user, password)`, which sets the builder's field `field`, an
/// `Option<`[`Credentials`](crate::config::Credentials)`>` checked by `build`. A line
/// `fn many_holds_threshold(holds) => field;` (with its doc comment and `#[doc(hidden)]`)
/// gives the tests' knob of a backend that changes how it watches its holds past a number
/// of them: it sets the `Option<usize>` field `field` to `holds`, 0 counting as 1.
#[macro_export]
macro_rules! option_setters {
    () => {};
    ($(#[$attr:meta])* fn $name:ident($value:ident: $($ty:tt)+) => $key:expr; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn $name(mut self, $value: $($ty)+) -> Self {
            self.options.set(&$key, ::core::convert::Into::into($value));
            self
        }
        $crate::option_setters!($($rest)*);
    };
    ($(#[$attr:meta])* fn credentials(user, password) => $field:ident; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
            self.$field = Some($crate::config::Credentials::new(user, password));
            self
        }
        $crate::option_setters!($($rest)*);
    };
    ($(#[$attr:meta])* fn many_holds_threshold(holds) => $field:ident; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn many_holds_threshold(mut self, holds: usize) -> Self {
            self.$field = Some(holds.max(1));
            self
        }
        $crate::option_setters!($($rest)*);
    };
    ($(#[$attr:meta])* tls($keys:expr); $($rest:tt)*) => {
        /// Trusts the certificate authority in `pem` (PEM-encoded) for the servers'
        /// certificates, instead of the system's trust store: for servers with a private CA.
        /// As a URL option (see `OPTIONS`), the path of a PEM file.
        $(#[$attr])*
        pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
            $keys.set_root(&mut self.options, pem.into());
            self
        }

        /// Presents a client certificate (`certificate` and `key`, PEM-encoded) to servers
        /// that authenticate clients by certificate. As URL options (see `OPTIONS`), the
        /// paths of PEM files.
        $(#[$attr])*
        pub fn tls_client_certificate(mut self, certificate: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
            $keys.set_client(&mut self.options, certificate.into(), key.into());
            self
        }
        $crate::option_setters!($($rest)*);
    };
}

/// The constructors of a backend's provider type, and the connect function of its
/// [`Scheme`](crate::config::Scheme): `builder()`, `connect(url)` (with the doc comment given,
/// which says the URL forms, `# Errors` and `# Cancel safety`), a private `connect_to` for a
/// parsed URL, and `pub(crate) fn connect_url` for the scheme table. `connect` builds the
/// provider from the URL with the builder's `from_url` and `build`, then runs the block given
/// (its first contact with the store, with the provider under the name given) before it
/// returns it.
///
/// With a `build(builder) { … }` line, it also gives the builder its `build(self)` (with the
/// doc comment given, which says `# Errors`): the block reads the builder's settings (the
/// builder under the name given) and makes the backend, and `build` wraps it in the
/// provider type with the provider-wide options applied ([`Options::provider`](crate::config::Options::provider)).
///
/// ```ignore
/// lockkit_core::provider_constructors! {
///     XLockProvider, XLockProviderBuilder;
///     /// Checks the settings and builds the provider … (# Errors)
///     build(builder) { Arc::new(XBackend::new(builder.settings()?)) }
///     /// Connects to the store `url` names … (# Errors, # Cancel safety)
///     connect(provider) { provider.ping().await?; }
/// }
/// ```
#[macro_export]
macro_rules! provider_constructors {
    (
        $provider:ident, $builder:ident;
        $(#[$build_doc:meta])* build($b:ident) $make:block
        $(#[$doc:meta])* connect($p:ident) $check:block
    ) => {
        impl $builder {
            $(#[$build_doc])*
            pub fn build(self) -> $crate::Result<$provider> {
                let $b = &self;
                let backend = $make;
                self.options().provider(backend).map($provider)
            }
        }

        $crate::provider_constructors!($provider, $builder; $(#[$doc])* connect($p) $check);
    };
    ($provider:ident, $builder:ident; $(#[$doc:meta])* connect($p:ident) $check:block) => {
        impl $provider {
            /// A builder for every setting; its `build` is synchronous and makes no connection.
            pub fn builder() -> $builder {
                $builder::default()
            }

            $(#[$doc])*
            pub async fn connect(url: &str) -> $crate::Result<Self> {
                Self::connect_to(&$crate::config::StoreUrl::parse(url)?).await
            }

            /// [`connect`](Self::connect) to a parsed URL: the scheme table's `connect` too.
            async fn connect_to(url: &$crate::config::StoreUrl) -> $crate::Result<Self> {
                let $p = $builder::from_url(url)?.build()?;
                $check
                Ok($p)
            }
        }

        /// The scheme table's connect function: [`connect`]($provider::connect) to a parsed URL.
        pub(crate) fn connect_url(url: $crate::config::StoreUrl) -> $crate::config::ConnectFuture {
            ::std::boxed::Box::pin(async move { $provider::connect_to(&url).await.map($crate::LockProvider::from) })
        }
    };
}
