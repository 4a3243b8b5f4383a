//! The provider users hold and its builder.

use std::ops::Deref;
use std::sync::atomic::AtomicBool;
#[cfg(any(test, feature = "test-util"))]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::client::MemoryClient;
use super::store::{Lease, MemoryStore};
use super::{OPTIONS, SETTINGS};
use crate::config::{ProviderSettings, StoreUrl};
#[cfg(any(test, feature = "test-util"))]
use crate::{LockName, LossReason};
use crate::{LockProvider, Result};

/// A client of a [`MemoryStore`]: the in-process lock provider.
///
/// [`MemoryLockProvider::new`] makes a private store with one client, the embedded default.
/// For several independent clients of one store (as the conformance kit uses), make a
/// [`MemoryStore`] and call [`MemoryStore::client`] once per client.
///
/// It dereferences to [`LockProvider`], so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from`.
#[derive(Clone, Debug)]
pub struct MemoryLockProvider {
    pub(super) provider: LockProvider,
    pub(super) client: Arc<MemoryClient>,
}

/// Builds a [`MemoryLockProvider`]; every setting is checked by [`build`](Self::build).
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MemoryLockProviderBuilder {
    pub(super) store: Option<MemoryStore>,
    pub(super) lease: Option<Duration>,
    pub(super) renew_every: Option<Duration>,
    pub(super) drift: Option<Duration>,
    pub(super) common: ProviderSettings,
}

impl MemoryLockProviderBuilder {
    /// The store to be a client of; a new private store by default.
    pub fn store(mut self, store: MemoryStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Gives holds a lease, renewed automatically: a client that stops renewing (killed or
    /// partitioned) loses its holds when the lease runs out. No lease by default; at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION). URL option `lease`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How often the watchdog renews the lease; a third of the lease by default. URL option
    /// `renew_every`.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How much earlier than the store the client considers its lease ended; 2 % of the
    /// lease by default. URL option `drift`.
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// The default maximum hold of the client's acquisitions
    /// ([`LockProvider::with_max_hold`]): without a lease the store frees a hold at its
    /// maximum; with one, renewal stops there and the hold expires with its lease. None by
    /// default. URL option `max_hold`.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.common.max_hold = Some(max_hold);
        self
    }

    /// Sets the option called `key` from its text, as a URL's query gives it: the same
    /// names as the methods ([`OPTIONS`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an unknown option or a value that is not a duration.
    pub fn option(mut self, key: &str, value: &str) -> Result<Self> {
        if self.common.option(SETTINGS, key, value)? {
            return Ok(self);
        }
        Ok(match key {
            "lease" => self.lease(SETTINGS.duration(key, value)?),
            "renew_every" => self.renew_every(SETTINGS.duration(key, value)?),
            "drift" => self.drift(SETTINGS.duration(key, value)?),
            _ => return Err(SETTINGS.unknown(key, OPTIONS)),
        })
    }

    /// Checks the settings and connects the client.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a lease that is zero or longer than a day, a renewal
    /// interval that is zero or not shorter than the lease, a drift margin that leaves no
    /// time between renewals, renewal settings without a lease, or a maximum hold shorter
    /// than the renewal interval.
    pub fn build(self) -> Result<MemoryLockProvider> {
        match self.lease {
            None if self.renew_every.is_some() || self.drift.is_some() => {
                return Err(SETTINGS
                    .invalid("renew_every and drift only apply to leased holds: set a lease too, or remove them"));
            }
            None => {}
            Some(lease) => {
                SETTINGS.within("the lease", lease, Duration::from_millis(1), Duration::MAX)?;
                let renew = self.renew_every.unwrap_or(lease / 3);
                if renew.is_zero() || renew >= lease {
                    return Err(SETTINGS.invalid(format!(
                        "renew_every ({renew:?}) must be above zero and below the lease ({lease:?}); a third of the lease is a good choice"
                    )));
                }
                let drift = self.drift.unwrap_or(lease / 50);
                if drift.saturating_add(renew) >= lease {
                    return Err(SETTINGS.invalid(format!(
                        "drift ({drift:?}) plus renew_every ({renew:?}) must stay below the lease ({lease:?}), or holds expire between renewals"
                    )));
                }
            }
        }
        let common = self.common;
        let mut built = self.build_unchecked();
        built.provider = common.apply(built.provider)?;
        Ok(built)
    }

    pub(super) fn build_unchecked(self) -> MemoryLockProvider {
        let lease = self.lease.map(|ttl| Lease {
            ttl,
            renew_every: self.renew_every.unwrap_or(ttl / 3),
            drift: self.drift.unwrap_or(ttl / 50),
        });
        let store = self.store.unwrap_or_default();
        let session = store.open_session(lease);
        let client = Arc::new_cyclic(|me| MemoryClient {
            me: me.clone(),
            store,
            session,
            lease,
            killed: AtomicBool::new(false),
            partitioned: AtomicBool::new(false),
            watchdog: Mutex::new(None),
        });
        MemoryLockProvider { provider: LockProvider::new(client.clone()), client }
    }
}

impl MemoryLockProvider {
    /// A client of a new private store, without leases: the embedded default.
    pub fn new() -> Self {
        MemoryLockProviderBuilder::default().build_unchecked()
    }

    /// A builder, to set a lease or share a store.
    pub fn builder() -> MemoryLockProviderBuilder {
        MemoryLockProviderBuilder::default()
    }

    /// A client of the store a `mem://` URL names, with its options: `mem://NAME` is the
    /// process-wide store called NAME, and `mem://` the one called "". There is nothing to
    /// reach, so this is also what connecting to such a URL does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for another scheme, an unknown option or a bad value.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        if url.scheme() != "mem" {
            return Err(SETTINGS.invalid(format!("{} is not a mem:// URL", url.redacted())));
        }
        if url.user().is_some() {
            return Err(SETTINGS.invalid(format!("{} carries credentials; mem:// takes none", url.redacted())));
        }
        // `mem://` is the store named "": every connect of the process shares it, as every
        // `mem://NAME` shares the store called NAME.
        let name = format!("{}{}", url.hosts(), url.path().trim_end_matches('/'));
        let store = MemoryStore::named(&name);
        let mut builder = Self::builder().store(store);
        for (key, value) in url.options() {
            builder = builder.option(key, value)?;
        }
        builder.build()
    }

    /// The store this client talks to.
    pub fn store(&self) -> &MemoryStore {
        &self.client.store
    }

    /// Fault hook: the client dies, as a killed process would. Its guards report
    /// [`LossReason::ClientClosed`] at once; the store frees its holds when the lease runs
    /// out (at once without a lease); every later operation fails with a connection error.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn kill(&self) {
        if self.client.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = self.client.store.state();
        let holds: Vec<(LockName, uuid::Uuid)> =
            state.sessions.get(&self.client.session).map(|s| s.holds.iter().cloned().collect()).unwrap_or_default();
        for (name, attempt) in &holds {
            let holders = state.locks.get(name).map(|entry| entry.holders.as_slice()).unwrap_or_default();
            if let Some(holder) = holders.iter().find(|holder| holder.attempt == *attempt) {
                holder.signal.lose(LossReason::ClientClosed);
            }
        }
        drop(state);
        if self.client.lease.is_none() {
            self.client.store.close_session(self.client.session, LossReason::ClientClosed);
        }
    }

    /// Fault hook: cuts the client off the store (`true`) or reconnects it (`false`). While
    /// cut off, renewals do not arrive and operations fail with a connection error, so a
    /// leased hold is lost at its local deadline, before the store frees it.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn partition(&self, cut_off: bool) {
        self.client.partitioned.store(cut_off, Ordering::SeqCst);
    }
}

impl Default for MemoryLockProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for MemoryLockProvider {
    type Target = LockProvider;

    fn deref(&self) -> &LockProvider {
        &self.provider
    }
}

impl From<MemoryLockProvider> for LockProvider {
    fn from(provider: MemoryLockProvider) -> LockProvider {
        provider.provider
    }
}

/// A provider of the memory backend, as its own type again: how to reach its extras
/// (its store and, with `test-util`, the fault hooks) from the [`LockProvider`] that `lockkit::connect` (or a conversion) gave.
/// Any other provider comes back unchanged as the error.
impl TryFrom<LockProvider> for MemoryLockProvider {
    type Error = LockProvider;

    fn try_from(provider: LockProvider) -> Result<Self, LockProvider> {
        match provider.backend_as::<MemoryClient>() {
            Some(client) => Ok(Self { provider, client }),
            None => Err(provider),
        }
    }
}
