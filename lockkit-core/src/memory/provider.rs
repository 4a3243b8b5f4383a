//! The provider users hold and its builder.

use std::sync::atomic::AtomicBool;
#[cfg(any(test, feature = "test-util"))]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::BACKEND;
use super::client::MemoryClient;
use super::store::{Lease, MemoryStore};
use crate::config::{self, Key, MAX_HOLD, OptionKey, STORE_ID, StoreUrl};
#[cfg(any(test, feature = "test-util"))]
use crate::{LockName, LossReason};
use crate::{Result, TypedProvider};

/// A client of a [`MemoryStore`]: the in-process lock provider.
///
/// [`MemoryLockProvider::new`] makes a private store with one client, the embedded default.
/// For several independent clients of one store (as the conformance kit uses), make a
/// [`MemoryStore`] and call [`MemoryStore::client`] once per client.
///
/// It dereferences to [`LockProvider`](crate::LockProvider), so `provider.lock(name)` works directly, and
/// converts into one with `LockProvider::from`.
#[derive(Clone, Debug)]
pub struct MemoryLockProvider(TypedProvider<MemoryClient>);
crate::typed_provider!(MemoryLockProvider);

/// `lease`: holds expire unless renewed.
const LEASE: Key<Duration> = Key::new("lease", "holds expire unless renewed: a client that stops renewing loses them")
    .default_said("none: a hold lasts until released")
    .at_least(Duration::from_millis(1));
/// `renew_every`: how often the watchdog renews the lease.
const RENEW_EVERY: Key<Duration> = Key::new("renew_every", "how often the client renews its lease")
    .default_said("a third of the lease")
    .range_said("above zero, below the lease");
/// `drift`: the client's margin for clock drift.
const DRIFT: Key<Duration> = Key::new("drift", "how much earlier than the store the client considers its lease ended")
    .default_said("2 % of the lease")
    .range_said("plus renew_every, below the lease");

/// The options a `mem://` URL and [`MemoryLockProviderBuilder::option`] take.
pub const OPTIONS: &[&dyn OptionKey] = &[&LEASE, &RENEW_EVERY, &DRIFT, &MAX_HOLD, &STORE_ID];

crate::provider_builder! {
    /// Builds a [`MemoryLockProvider`]; every setting is checked by [`build`](Self::build).
    pub struct MemoryLockProviderBuilder(BACKEND, OPTIONS) {
        store: Option<MemoryStore>,
    }
    /// `mem://NAME` is the process-wide store called NAME, and `mem://` the one called "".
    address(self, url) {
        url.expect_scheme(BACKEND, &["mem"], "mem://NAME")?;
        if url.user().is_some() {
            return Err(self.options.invalid(format!("{} carries credentials; mem:// takes none", url.redacted())));
        }
        // `mem://` is the store named "": every connect of the process shares it, as every
        // `mem://NAME` shares the store called NAME.
        self.store = Some(MemoryStore::named(&format!("{}{}", url.hosts(), url.path().trim_end_matches('/'))));
        Ok(())
    }
}

impl MemoryLockProviderBuilder {
    /// The store to be a client of; a new private store by default.
    pub fn store(mut self, store: MemoryStore) -> Self {
        self.store = Some(store);
        self
    }

    crate::option_setters! {
        /// Gives holds a lease, renewed automatically: a client that stops renewing (killed or
        /// partitioned) loses its holds when the lease runs out. No lease by default; at most
        /// [`MAX_DURATION`](crate::config::MAX_DURATION). URL option `lease`.
        fn lease(lease: Duration) => LEASE;

        /// How often the watchdog renews the lease; a third of the lease by default. URL option
        /// `renew_every`.
        fn renew_every(every: Duration) => RENEW_EVERY;

        /// How much earlier than the store the client considers its lease ended; 2 % of the
        /// lease by default. URL option `drift`.
        fn drift(drift: Duration) => DRIFT;

        /// The default maximum hold of the client's acquisitions
        /// ([`LockProvider::with_max_hold`](crate::LockProvider::with_max_hold)): without a lease
        /// the store frees a hold at its maximum; with one, renewal stops there and the hold
        /// expires with its lease. None by default. URL option `max_hold`.
        fn max_hold(max_hold: Duration) => MAX_HOLD;
    }

    /// Sets the option called `key` from its text, as a URL's query gives it: the same
    /// names as the methods ([`OPTIONS`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an unknown option or a value
    /// that is not a duration.
    pub fn option(mut self, key: &str, value: &str) -> Result<Self> {
        self.options.parse(key, value)?;
        Ok(self)
    }

    /// Checks the settings and connects the client.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a lease that is zero or longer
    /// than a day, a renewal interval that is zero or not shorter than the lease, a drift
    /// margin that leaves no time between renewals, renewal settings without a lease, or a
    /// maximum hold shorter than the renewal interval.
    pub fn build(self) -> Result<MemoryLockProvider> {
        let options = &self.options;
        if options.get(&LEASE).is_none() {
            if options.get(&RENEW_EVERY).is_some() || options.get(&DRIFT).is_some() {
                return Err(options
                    .invalid("renew_every and drift only apply to leased holds: set a lease too, or remove them"));
            }
        } else {
            let lease = options.value(&LEASE)?;
            let renew = options.interval_below(&RENEW_EVERY, lease / 3, lease, "the lease")?;
            let room = lease.saturating_sub(renew);
            options.below(&DRIFT, lease / 50, room, "the lease minus renew_every, or holds expire between renewals")?;
        }
        let options = self.options.clone();
        Ok(MemoryLockProvider(self.build_unchecked().0.map(|provider| options.apply(provider))?))
    }

    pub(super) fn build_unchecked(self) -> MemoryLockProvider {
        let lease = self.options.get(&LEASE).map(|ttl| Lease {
            ttl,
            renew_every: self.options.get(&RENEW_EVERY).unwrap_or(ttl / 3),
            drift: self.options.get(&DRIFT).unwrap_or(ttl / 50),
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
        MemoryLockProvider(TypedProvider::new(client))
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
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for another scheme, an unknown
    /// option or a bad value.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        config::from_url::<MemoryLockProviderBuilder>(url)?.build()
    }

    fn client(&self) -> &MemoryClient {
        self.0.backend()
    }

    /// The store this client talks to.
    pub fn store(&self) -> &MemoryStore {
        &self.client().store
    }

    /// Fault hook: the client dies, as a killed process would. Its guards report
    /// [`LossReason::ClientClosed`] at once; the store frees its holds when the lease runs
    /// out (at once without a lease); every later operation fails with a connection error.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn kill(&self) {
        if self.client().killed.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = self.client().store.state();
        let holds: Vec<(LockName, uuid::Uuid)> =
            state.sessions.get(&self.client().session).map(|s| s.holds.iter().cloned().collect()).unwrap_or_default();
        for (name, attempt) in &holds {
            let holders = state.locks.get(name).map(|entry| entry.holders.as_slice()).unwrap_or_default();
            if let Some(holder) = holders.iter().find(|holder| holder.attempt == *attempt) {
                holder.signal.lose(LossReason::ClientClosed);
            }
        }
        drop(state);
        if self.client().lease.is_none() {
            self.client().store.close_session(self.client().session, LossReason::ClientClosed);
        }
    }

    /// Fault hook: cuts the client off the store (`true`) or reconnects it (`false`). While
    /// cut off, renewals do not arrive and operations fail with a connection error, so a
    /// leased hold is lost at its local deadline, before the store frees it.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn partition(&self, cut_off: bool) {
        self.client().partitioned.store(cut_off, Ordering::SeqCst);
    }
}

/// The clients of a store (here rather than in `store.rs`, which knows nothing of clients).
impl MemoryStore {
    /// A new client of this store with default options (no lease).
    pub fn client(&self) -> MemoryLockProvider {
        MemoryLockProviderBuilder::default().store(self.clone()).build_unchecked()
    }

    /// A builder for a client of this store.
    pub fn client_builder(&self) -> MemoryLockProviderBuilder {
        MemoryLockProviderBuilder::default().store(self.clone())
    }
}

impl Default for MemoryLockProvider {
    fn default() -> Self {
        Self::new()
    }
}
