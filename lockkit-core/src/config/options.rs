//! [`Options`]: the settings a builder was given, by method or by URL option (the last given
//! wins), read back typed in `build` with the default and the range of each [`Key`];
//! [`ProviderBuilder`] and [`from_url`], the one `from_url` of every builder.

use std::fmt;
use std::time::Duration;

use super::key::{GivenValue, Key, MAX_HOLD, OptionKey, STORE_ID};
use super::timing::{MIN_INTERVAL, RENEW_EVERY};
use super::url::StoreUrl;
use super::value::OptionValue;
use std::sync::Arc;

use crate::backend::LockBackend;
use crate::{Error, LockProvider, Result, TypedProvider};

/// The settings a builder was given: by its methods, by `option(key, value)`, and by the
/// query of a URL. **The last value given for a setting wins**, whichever way it came, so a
/// URL's options and the builder's methods apply in the order they were called.
///
/// `build` reads them typed ([`get`](Self::get), [`value`](Self::value),
/// [`within`](Self::within)), which applies the key's default and checks its range with the
/// messages every backend shares.
#[derive(Clone)]
pub struct Options {
    backend: &'static str,
    keys: &'static [&'static dyn OptionKey],
    given: Vec<GivenValue>,
    /// The first error of a URL given to a builder method, which cannot fail: `build`
    /// reports it ([`check`](Self::check)).
    deferred: Option<String>,
}

impl Options {
    /// No setting given yet, for a builder of `backend` that takes the settings `keys`.
    pub const fn new(backend: &'static str, keys: &'static [&'static dyn OptionKey]) -> Self {
        Self { backend, keys, given: Vec::new(), deferred: None }
    }

    /// The backend's name, as its errors carry it.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The settings this builder takes.
    pub fn keys(&self) -> &'static [&'static dyn OptionKey] {
        self.keys
    }

    /// Sets `key` to `value`, replacing what was given for it before.
    pub fn set<T: OptionValue>(&mut self, key: &Key<T>, value: T) {
        self.put(GivenValue::new(key.name(), value));
    }

    /// Forgets what was given for `key`: its default applies again.
    pub fn unset<T: OptionValue>(&mut self, key: &Key<T>) {
        self.given.retain(|given| given.name != key.name());
    }

    fn put(&mut self, value: GivenValue) {
        self.given.retain(|given| given.name != value.name);
        self.given.push(value);
    }

    /// Sets the option called `name` from its text, as a URL's query gives it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an option this backend does not take (listing those it
    /// takes) or a value that does not parse (naming the option).
    pub fn parse(&mut self, name: &str, text: &str) -> Result<()> {
        let Some(key) = self.keys.iter().find(|key| key.name() == name) else {
            let known: Vec<&str> = self.keys.iter().map(|key| key.name()).collect();
            let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            return Err(self.invalid(format!("unknown option {name:?}; this backend takes: {known}")));
        };
        let value = key.parse(text).map_err(|message| self.invalid(format!("option {name}: {message}")))?;
        self.put(value);
        Ok(())
    }

    /// Sets every option of `url`'s query, in the order written.
    ///
    /// # Errors
    ///
    /// As for [`parse`](Self::parse), for the first option that fails.
    pub fn parse_query(&mut self, url: &StoreUrl) -> Result<()> {
        url.options().try_for_each(|(name, text)| self.parse(name, text))
    }

    /// Keeps `error` (the first one) for [`check`](Self::check): for a builder method that
    /// cannot fail, such as `url(…)`.
    pub fn defer(&mut self, error: Error) {
        if self.deferred.is_none() {
            self.deferred = Some(match error {
                Error::InvalidConfig { message, .. } => message,
                other => other.to_string(),
            });
        }
    }

    /// The error a builder method deferred, if any: the first thing `build` checks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] with the deferred message.
    pub fn check(&self) -> Result<()> {
        match &self.deferred {
            Some(message) => Err(self.invalid(message.clone())),
            None => Ok(()),
        }
    }

    /// What was given for `key`, if anything.
    pub fn get<T: OptionValue>(&self, key: &Key<T>) -> Option<T> {
        let given = self.given.iter().find(|given| given.name == key.name())?;
        given.value.downcast_ref::<T>().cloned()
    }

    /// What was given for `key`, else its default; checked against its range.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting and its range.
    pub fn value<T: OptionValue>(&self, key: &Key<T>) -> Result<T> {
        let value = match (self.get(key), key.default_value()) {
            (Some(value), _) => value,
            (None, Some(default)) => default,
            (None, None) => {
                return Err(self.invalid(format!("{} has no value and no default; give it a value", key.name())));
            }
        };
        self.check_range(key, value, key.min(), key.max())
    }

    /// What was given for `key`, else `default`; checked to lie within `min..=max` (a
    /// range that depends on other settings) as well as the key's own range.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting and the range it must lie in.
    pub fn within<T: OptionValue>(&self, key: &Key<T>, default: T, min: T, max: T) -> Result<T> {
        let value = self.get(key).unwrap_or(default);
        let (own_min, own_max) = (key.min(), key.max());
        let min = match own_min {
            Some(own) if !min.within(Some(&own), None) => own,
            _ => min,
        };
        let max = match own_max {
            Some(own) if !max.within(None, Some(&own)) => own,
            _ => max,
        };
        self.check_range(key, value, Some(min), Some(max))
    }

    /// What was given for `key`, else `default`; checked to lie below `limit`, a share of
    /// another setting that `limit_said` names ("a third of the lease"): the check of a
    /// margin, such as the drift, that must leave room inside the lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`]: "KEY is VALUE; it must be below LIMIT_SAID (LIMIT)", or "…
    /// at most 86400s" for a value above [`MAX_DURATION`](super::MAX_DURATION).
    pub fn below(&self, key: &Key<Duration>, default: Duration, limit: Duration, limit_said: &str) -> Result<Duration> {
        super::timing::check_below(self.backend, key, self.get(key).unwrap_or(default), limit, limit_said)
    }

    /// As [`below`](Self::below), and above zero: the check of an interval, such as the
    /// renewal interval, that must fit inside the lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`]: "KEY is VALUE; it must be above zero and below LIMIT_SAID
    /// (LIMIT)".
    pub fn interval_below(
        &self,
        key: &Key<Duration>,
        default: Duration,
        limit: Duration,
        limit_said: &str,
    ) -> Result<Duration> {
        let value = self.get(key).unwrap_or(default);
        if !value.is_zero() && value < limit {
            return Ok(value);
        }
        let name = key.name();
        Err(self.invalid(format!("{name} is {value:?}; it must be above zero and below {limit_said} ({limit:?})")))
    }

    /// The renewal interval of holds of `lease` ([`timing::RENEW_EVERY`](super::timing::RENEW_EVERY)):
    /// what was given, else a third of the lease; at least 1 ms and below the lease (at most
    /// the lease less 1 ms).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`]: "renew_every is VALUE; it must be at least 1ms and at most …".
    pub fn renew_every(&self, lease: Duration) -> Result<Duration> {
        let most = lease.saturating_sub(MIN_INTERVAL).max(MIN_INTERVAL);
        self.within(&RENEW_EVERY, lease / 3, MIN_INTERVAL, most)
    }

    /// Checks `value` of `key` against `min..=max` (a duration against [`MAX_DURATION`] too).
    fn check_range<T: OptionValue>(&self, key: &Key<T>, value: T, min: Option<T>, max: Option<T>) -> Result<T> {
        let max = match (max, T::cap()) {
            (Some(max), Some(longest)) if !max.within(None, Some(&longest)) => Some(longest),
            (None, longest) => longest,
            (max, _) => max,
        };
        if value.within(min.as_ref(), max.as_ref()) {
            return Ok(value);
        }
        let range = match (&min, &max) {
            (Some(min), Some(max)) => format!("at least {min:?} and at most {max:?}"),
            (Some(min), None) => format!("at least {min:?}"),
            (None, Some(max)) => format!("at most {max:?}"),
            (None, None) => "something else".to_owned(),
        };
        Err(self.invalid(format!("{} is {value:?}; it must be {range}", key.name())))
    }

    /// The maximum hold given ([`MAX_HOLD`]), if any.
    pub fn max_hold(&self) -> Option<Duration> {
        self.get(&MAX_HOLD)
    }

    /// Applies the settings every backend takes ([`MAX_HOLD`], [`STORE_ID`]) to the provider
    /// a builder made, checked against the backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a maximum hold out of its range or a store identity that
    /// cannot be used.
    pub fn apply(&self, provider: LockProvider) -> Result<LockProvider> {
        let provider = provider.with_max_hold(self.max_hold())?;
        match self.get(&STORE_ID) {
            Some(store_id) => provider.with_store_id(&store_id),
            None => Ok(provider),
        }
    }

    /// The typed provider over `backend` with the settings every backend takes applied
    /// ([`apply`](Self::apply)): how a builder's `build` makes its provider.
    ///
    /// # Errors
    ///
    /// As for [`apply`](Self::apply).
    pub fn provider<B: LockBackend + 'static>(&self, backend: Arc<B>) -> Result<TypedProvider<B>> {
        TypedProvider::new(backend).map(|provider| self.apply(provider))
    }

    /// An [`Error::InvalidConfig`] of this backend.
    pub fn invalid(&self, message: impl Into<String>) -> Error {
        Error::invalid_config(self.backend, message)
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.given).finish()
    }
}

/// What a backend's builder gives [`from_url`], the one `from_url` of every backend.
///
/// The builder keeps its settings in an [`Options`], and reads the *address* of a URL
/// (everything but the query: the hosts, the path, the credentials) itself.
pub trait ProviderBuilder: Default {
    /// The settings given so far.
    fn options_mut(&mut self) -> &mut Options;

    /// Takes the address of `url`, checking its scheme: the hosts, the path and the
    /// credentials, as this backend reads them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a scheme or an address this backend cannot use.
    fn address(&mut self, url: &StoreUrl) -> Result<()>;
}

/// A builder with the address and options of `url`: every backend's `from_url`.
///
/// # Errors
///
/// [`Error::InvalidConfig`] for an address the backend cannot use, an option it does not
/// take or a value that does not parse; ranges are checked by `build`.
pub fn from_url<B: ProviderBuilder>(url: &StoreUrl) -> Result<B> {
    let mut builder = B::default();
    builder.address(url)?;
    builder.options_mut().parse_query(url)?;
    Ok(builder)
}

/// `builder` with the address and options of `url` taken now, in order with its other
/// settings (so a setting given later replaces the URL's); an error is kept for `build` to
/// report. The `url(…)` method of the builders that take a URL.
pub fn with_url<B: ProviderBuilder>(mut builder: B, url: &str) -> B {
    let taken = StoreUrl::parse(url)
        .and_then(|url| builder.address(&url).map(|()| url))
        .and_then(|url| builder.options_mut().parse_query(&url));
    if let Err(error) = taken {
        builder.options_mut().defer(error);
    }
    builder
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::key::options_table;
    use super::*;

    #[test]
    fn store_id_is_one_setting_read_by_the_shared_code() {
        let built = |url: &str| crate::memory::MemoryLockProvider::from_url(&StoreUrl::parse(url).unwrap());
        let provider = built("mem://store-id?store_id=orders-db").unwrap();
        assert_eq!(provider.store_identity().as_deref(), Some("orders-db"));
        let lock = provider.lock("a").unwrap();
        assert_eq!(lock.lock_id().to_string(), "orders-db#a");
        assert_eq!(lock.store().address(), Some("orders-db"), "multi-locks order by it too");
        let message = built("mem://store-id?store_id=a%23b").unwrap_err().to_string();
        assert!(message.contains("store_id") && message.contains('#'), "{message}");
        let plain = built("mem://store-id").unwrap();
        let other = built("mem://store-id").unwrap();
        assert_eq!(plain.store_identity(), other.store_identity(), "two clients of one store are one store");
        assert_ne!(plain.store_identity(), built("mem://another-store").unwrap().store_identity());
    }

    const LEASE: Key<Duration> = Key::new("lease", "how long a hold outlives a dead holder")
        .default(Duration::from_secs(30))
        .range(Duration::from_millis(100), Duration::from_secs(3600));
    const RENEW_EVERY: Key<Duration> =
        Key::new("renew_every", "how often holds are renewed").default_said("a third of the lease");
    const FAIR: Key<bool> = Key::new("fair", "waiters in arrival order").default(true);
    const PREFIX: Key<String> = Key::new("key_prefix", "the prefix of every key").default("lockkit");
    const KEYS: &[&dyn OptionKey] = &[&LEASE, &RENEW_EVERY, &FAIR, &PREFIX, &MAX_HOLD];

    fn options() -> Options {
        Options::new("test", KEYS)
    }

    #[test]
    fn the_last_value_given_wins_whichever_way_it_came() {
        let mut options = options();
        options.parse("lease", "10s").unwrap();
        options.set(&LEASE, Duration::from_secs(5));
        assert_eq!(options.value(&LEASE).unwrap(), Duration::from_secs(5));
        options.parse_query(&StoreUrl::parse("x://h/?lease=7s&fair=false").unwrap()).unwrap();
        assert_eq!(options.value(&LEASE).unwrap(), Duration::from_secs(7));
        assert!(!options.value(&FAIR).unwrap());
        assert_eq!(options.value(&PREFIX).unwrap(), "lockkit");
        assert_eq!(format!("{options:?}"), "[lease=7s, fair=false]");
    }

    #[test]
    fn bad_values_name_the_option_and_the_range() {
        let mut options = options();
        let message = |error: Error| error.to_string();
        assert!(message(options.parse("lease", "10").unwrap_err()).contains("option lease"));
        assert!(message(options.parse("fair", "yes").unwrap_err()).contains("true or false"));
        let unknown = message(options.parse("color", "red").unwrap_err());
        assert!(unknown.contains("unknown option \"color\"") && unknown.contains("takes: lease, renew_every"));
        options.set(&LEASE, Duration::from_millis(10));
        let range = message(options.value(&LEASE).unwrap_err());
        assert!(range.contains("lease is 10ms; it must be at least 100ms and at most 3600s"), "{range}");
        options.set(&RENEW_EVERY, Duration::from_secs(2));
        let lease = Duration::from_secs(3);
        let derived = message(options.within(&RENEW_EVERY, lease / 3, Duration::ZERO, lease / 2).unwrap_err());
        assert!(derived.contains("renew_every is 2s; it must be at least 0ns and at most 1.5s"), "{derived}");
        options.set(&RENEW_EVERY, Duration::MAX);
        let huge = message(options.within(&RENEW_EVERY, lease, Duration::ZERO, Duration::MAX).unwrap_err());
        assert!(huge.contains("at most 86400s"), "every duration is at most a day: {huge}");
    }

    #[test]
    fn a_url_given_to_a_builder_method_is_checked_by_build() {
        #[derive(Debug)]
        struct Builder(Options, Option<String>);
        impl Default for Builder {
            fn default() -> Self {
                Self(options(), None)
            }
        }
        impl ProviderBuilder for Builder {
            fn options_mut(&mut self) -> &mut Options {
                &mut self.0
            }
            fn address(&mut self, url: &StoreUrl) -> Result<()> {
                self.1 = Some(url.hosts().to_owned());
                Ok(())
            }
        }
        let built = from_url::<Builder>(&StoreUrl::parse("x://h1/?lease=1s").unwrap()).unwrap();
        assert_eq!((built.0.value(&LEASE).unwrap(), built.1.as_deref()), (Duration::from_secs(1), Some("h1")));
        let mut later = with_url(Builder::default(), "x://h2/?lease=2s");
        later.0.set(&LEASE, Duration::from_secs(3));
        assert_eq!(later.0.value(&LEASE).unwrap(), Duration::from_secs(3), "the method came last");
        let deferred = with_url(Builder::default(), "x://h/?leese=2s");
        assert!(deferred.0.check().unwrap_err().to_string().contains("unknown option \"leese\""));
    }

    #[test]
    fn the_table_says_each_setting_s_type_default_and_range() {
        let table = options_table(KEYS);
        assert!(table.contains("| `lease` | duration | 30s | 100ms to 1h | how long a hold outlives a dead holder |"));
        assert!(table.contains("| `renew_every` | duration | a third of the lease | at most 1d |"), "{table}");
        assert!(table.contains("| `fair` | true or false | true |  |"));
        assert!(table.contains("| `key_prefix` | text | lockkit |  |"));
    }
}
