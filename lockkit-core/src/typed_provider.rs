//! [`TypedProvider`]: what each backend's own provider type (`RedisLockProvider`,
//! `ZkLockProvider`, `MemoryLockProvider`, …) is made of, written once.
//!
//! A backend's provider is a [`LockProvider`] with extras (`record_key`, `lock_path`, a raw
//! client): it dereferences to the [`LockProvider`], converts into one, and keeps its backend
//! with its concrete type for the extras. Rust lets a crate add methods only to its own types,
//! so each backend keeps a named type of its own (the one users see in its docs), a one-field
//! wrapper of [`TypedProvider`]; the [`typed_provider!`](crate::typed_provider) macro gives it
//! the `Deref`, `From` and `AsRef` that make it a provider:
//!
//! ```
//! use std::sync::Arc;
//! use lockkit_core::{TypedProvider, typed_provider};
//! # use lockkit_core::backend::{AcquireRequest, Grant, LockBackend};
//! # #[derive(Debug)]
//! # struct TableBackend;
//! # #[async_trait::async_trait]
//! # impl LockBackend for TableBackend {
//! #     fn name(&self) -> &'static str { "table" }
//! #     fn capabilities(&self) -> lockkit_core::Capabilities { lockkit_core::Capabilities::NONE }
//! #     async fn acquire(&self, _: AcquireRequest) -> lockkit_core::Result<Option<Grant>> { Ok(None) }
//! # }
//!
//! /// A client of the lock table.
//! #[derive(Clone, Debug)]
//! pub struct TableLockProvider(TypedProvider<TableBackend>);
//! typed_provider!(TableLockProvider);
//!
//! impl TableLockProvider {
//!     /// An extra of this backend: its name, read from the backend itself.
//!     pub fn table_name(&self) -> &'static str {
//!         self.0.backend().name()
//!     }
//! }
//!
//! let provider = TableLockProvider(TypedProvider::new(Arc::new(TableBackend)));
//! assert_eq!(provider.backend_name(), "table"); // a LockProvider method, through Deref
//! let plain: lockkit_core::LockProvider = provider.into();
//! # let _ = plain;
//! ```

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::backend::LockBackend;
use crate::{LockProvider, Result};

/// A [`LockProvider`] that keeps its backend's concrete type: the inside of every backend's
/// provider type. Cheap to clone; clones are the same client.
pub struct TypedProvider<B: ?Sized> {
    provider: LockProvider,
    backend: Arc<B>,
}

impl<B: LockBackend + 'static> TypedProvider<B> {
    /// The provider over `backend`.
    pub fn new(backend: Arc<B>) -> Self {
        Self { provider: LockProvider::new(Arc::clone(&backend) as Arc<dyn LockBackend>), backend }
    }
}

impl<B: LockBackend + 'static> TypedProvider<B> {
    /// The provider again with its backend's type, when `provider`'s backend is a `B` (one
    /// that `lockkit::connect` or a conversion gave): how a backend's own provider type comes
    /// back from a [`LockProvider`], with its extras. Any other provider comes back unchanged
    /// as the error.
    ///
    /// # Errors
    ///
    /// `provider` itself, when its backend is not a `B`.
    pub fn downcast(provider: LockProvider) -> std::result::Result<Self, LockProvider> {
        match provider.backend_as::<B>() {
            Some(backend) => Ok(Self { provider, backend }),
            None => Err(provider),
        }
    }
}

impl<B: ?Sized> TypedProvider<B> {
    /// The backend, with its type: for the backend's extras.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The provider users hold.
    pub fn provider(&self) -> &LockProvider {
        &self.provider
    }

    /// Replaces the provider by what `change` makes of it (a provider-wide setting such as
    /// [`LockProvider::with_max_hold`]), keeping the backend.
    ///
    /// # Errors
    ///
    /// Those of `change`.
    pub fn map(self, change: impl FnOnce(LockProvider) -> Result<LockProvider>) -> Result<Self> {
        Ok(Self { provider: change(self.provider)?, backend: self.backend })
    }
}

impl<B: ?Sized> Clone for TypedProvider<B> {
    fn clone(&self) -> Self {
        Self { provider: self.provider.clone(), backend: Arc::clone(&self.backend) }
    }
}

impl<B: ?Sized> fmt::Debug for TypedProvider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.provider.fmt(f)
    }
}

impl<B: ?Sized> Deref for TypedProvider<B> {
    type Target = LockProvider;

    fn deref(&self) -> &LockProvider {
        &self.provider
    }
}

impl<B: ?Sized> From<TypedProvider<B>> for LockProvider {
    fn from(typed: TypedProvider<B>) -> LockProvider {
        typed.provider
    }
}

/// Makes a one-field wrapper of [`TypedProvider`] a provider: `Deref<Target = LockProvider>`
/// (so `provider.lock(name)` and every other [`LockProvider`] method work on it),
/// `From<…> for LockProvider`, `AsRef<LockProvider>` and `TryFrom<LockProvider>` (the way
/// back from a plain provider, [`TypedProvider::downcast`]). See [`TypedProvider`].
///
/// `typed_provider!(XLockProvider, XBackend)` also gives it a private `backend()`, the
/// backend with its type, for its extras.
#[macro_export]
macro_rules! typed_provider {
    ($provider:ty, $backend:ty) => {
        $crate::typed_provider!($provider);

        impl $provider {
            /// The backend, with its type: for this provider's extras.
            #[allow(dead_code)]
            fn backend(&self) -> &$backend {
                $crate::TypedProvider::backend(&self.0)
            }
        }
    };
    ($provider:ty) => {
        impl ::std::ops::Deref for $provider {
            type Target = $crate::LockProvider;

            fn deref(&self) -> &$crate::LockProvider {
                $crate::TypedProvider::provider(&self.0)
            }
        }

        impl ::std::convert::From<$provider> for $crate::LockProvider {
            fn from(provider: $provider) -> $crate::LockProvider {
                ::std::convert::From::from(provider.0)
            }
        }

        impl ::std::convert::AsRef<$crate::LockProvider> for $provider {
            fn as_ref(&self) -> &$crate::LockProvider {
                $crate::TypedProvider::provider(&self.0)
            }
        }

        /// A provider of this backend, as its own type again (with its extras), from the
        /// `LockProvider` that `lockkit::connect` or a conversion
        /// gave; any other provider comes back unchanged as the error.
        impl ::std::convert::TryFrom<$crate::LockProvider> for $provider {
            type Error = $crate::LockProvider;

            fn try_from(provider: $crate::LockProvider) -> ::std::result::Result<Self, $crate::LockProvider> {
                $crate::TypedProvider::downcast(provider).map(Self)
            }
        }
    };
}
