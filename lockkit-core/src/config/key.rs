//! [`Key`]: one setting of a backend declared once (name, type, default, range, doc line),
//! [`OptionKey`] its type-erased form, and the options table made from a list of keys.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::value::OptionValue;

/// One setting of a backend, declared once: its name (the builder method that sets it and
/// the URL option, spelled alike), its type `T`, its default, its range and a doc line.
///
/// ```
/// use std::time::Duration;
/// use lockkit_core::config::Key;
///
/// /// How long a hold outlives a dead holder.
/// const LEASE: Key<Duration> = Key::new("lease", "how long a hold outlives a dead holder")
///     .default(Duration::from_secs(30))
///     .range(Duration::from_millis(100), Duration::from_secs(86_400));
/// const RENEW_EVERY: Key<Duration> = Key::new("renew_every", "how often holds are renewed")
///     .default_said("a third of the lease")
///     .range_said("below the lease");
/// # let _ = (LEASE, RENEW_EVERY);
/// ```
pub struct Key<T: OptionValue> {
    name: &'static str,
    doc: &'static str,
    default: Option<T::Const>,
    default_said: Option<&'static str>,
    min: Option<T::Const>,
    max: Option<T::Const>,
    range_said: Option<&'static str>,
    value: PhantomData<fn() -> T>,
}

impl<T: OptionValue> Key<T> {
    /// The setting called `name` (lower case, words joined by `_`), described by `doc`: one
    /// line, as the options table shows it. No default and no range until given.
    pub const fn new(name: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            doc,
            default: None,
            default_said: None,
            min: None,
            max: None,
            range_said: None,
            value: PhantomData,
        }
    }

    /// The value when none is given.
    #[must_use]
    pub const fn default(mut self, value: T::Const) -> Self {
        self.default = Some(value);
        self
    }

    /// A default that depends on other settings, in words for the table (`a third of the
    /// lease`); `build` computes it and passes it to [`Options::within`](super::Options::within).
    #[must_use]
    pub const fn default_said(mut self, words: &'static str) -> Self {
        self.default_said = Some(words);
        self
    }

    /// The least and the most accepted, both included. A duration is never above
    /// [`MAX_DURATION`](super::MAX_DURATION) whatever its range says.
    #[must_use]
    pub const fn range(mut self, min: T::Const, max: T::Const) -> Self {
        self.min = Some(min);
        self.max = Some(max);
        self
    }

    /// The least accepted (the most: [`MAX_DURATION`](super::MAX_DURATION) for a duration, none otherwise).
    #[must_use]
    pub const fn at_least(mut self, min: T::Const) -> Self {
        self.min = Some(min);
        self
    }

    /// A range that depends on other settings, in words for the table (`below the lease`);
    /// `build` checks it, with [`Options::within`](super::Options::within) or a message of its own.
    #[must_use]
    pub const fn range_said(mut self, words: &'static str) -> Self {
        self.range_said = Some(words);
        self
    }

    /// The setting's name: its builder method and its URL option.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The default given to the key, when it has one.
    pub(super) fn default_value(&self) -> Option<T> {
        self.default.map(T::from_const)
    }

    /// The least accepted, when the key has one.
    pub(super) fn min(&self) -> Option<T> {
        self.min.map(T::from_const)
    }

    /// The most accepted, when the key has one.
    pub(super) fn max(&self) -> Option<T> {
        self.max.map(T::from_const)
    }
}

impl<T: OptionValue> Clone for Key<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: OptionValue> Copy for Key<T> {}

impl<T: OptionValue> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Key").field(&self.name).finish()
    }
}

/// A [`Key`] of any type, as a backend's list of its options holds it: for
/// `option(key, value)`, messages and the options table. Implemented by [`Key`] only.
pub trait OptionKey: Send + Sync + fmt::Debug {
    /// The setting's name: its builder method and its URL option.
    fn name(&self) -> &'static str;
    /// The doc line.
    fn doc(&self) -> &'static str;
    /// How a value is written ([`OptionValue::FORM`]).
    fn form(&self) -> &'static str;
    /// The default as the table shows it (`30s`, `a third of the lease`, `none`).
    fn default_text(&self) -> String;
    /// The range as the table shows it (`100ms to 1d`, `below the lease`), empty when any
    /// value of the type is accepted.
    fn range_text(&self) -> String;
    /// Reads `text` as this setting's value.
    ///
    /// # Errors
    ///
    /// What is wrong with `text`.
    fn parse(&self, text: &str) -> std::result::Result<GivenValue, String>;
}

impl<T: OptionValue> OptionKey for Key<T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn doc(&self) -> &'static str {
        self.doc
    }

    fn form(&self) -> &'static str {
        T::FORM
    }

    fn default_text(&self) -> String {
        match (self.default, self.default_said) {
            (_, Some(words)) => words.to_owned(),
            (Some(value), None) => T::from_const(value).show(),
            (None, None) => "none".to_owned(),
        }
    }

    fn range_text(&self) -> String {
        if let Some(words) = self.range_said {
            return words.to_owned();
        }
        let max = self.max().or_else(T::cap).map(|max| max.show());
        match (self.min().map(|min| min.show()), max) {
            (Some(min), Some(max)) => format!("{min} to {max}"),
            (Some(min), None) => format!("at least {min}"),
            (None, Some(max)) => format!("at most {max}"),
            (None, None) => String::new(),
        }
    }

    fn parse(&self, text: &str) -> std::result::Result<GivenValue, String> {
        T::parse(text).map(|value| GivenValue::new(self.name, value))
    }
}

/// A value given to a setting, as [`Options`](super::Options) keeps it (typed, and as text for `Debug`).
#[derive(Clone)]
pub struct GivenValue {
    pub(super) name: &'static str,
    pub(super) value: Arc<dyn Any + Send + Sync>,
    shown: String,
}

impl GivenValue {
    pub(super) fn new<T: OptionValue>(name: &'static str, value: T) -> Self {
        let shown = value.show();
        Self { name, value: Arc::new(value), shown }
    }
}

impl fmt::Debug for GivenValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.shown)
    }
}

/// The setting every backend takes besides its own: the default maximum hold of the
/// provider's acquisitions ([`LockProvider::with_max_hold`](crate::LockProvider::with_max_hold)), at least the backend's renewal
/// interval. Applied by [`Options::apply`](super::Options::apply).
pub const MAX_HOLD: Key<Duration> = Key::new("max_hold", "the default maximum hold of the provider's acquisitions")
    .range_said("at least the renewal interval, at most 1d");

/// The setting every backend takes to name its store by hand: the store's identity in
/// fences ([`LockId`](crate::LockId)) and in the order of multi-locks, over the one the backend
/// derives from its URL. Set it where processes reach one store by different addresses.
/// Applied (and checked) by [`Options::apply`](super::Options::apply).
pub const STORE_ID: Key<String> =
    Key::new("store_id", "the store's identity in fences and multi-lock order, over the one derived from the URL")
        .default_said("derived from the URL")
        .range_said("1 to 512 bytes, no `#` or control character");

/// The options table of `keys`, in Markdown: one row per setting with its name, type,
/// default, range and doc line. The URL docs of the `lockkit` facade are made from it.
pub fn options_table(keys: &[&dyn OptionKey]) -> String {
    let mut table = String::from("| option | value | default | range | what |\n| --- | --- | --- | --- | --- |\n");
    for key in keys {
        let range = key.range_text();
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            key.name(),
            key.form(),
            key.default_text(),
            range,
            key.doc()
        ));
    }
    table
}
