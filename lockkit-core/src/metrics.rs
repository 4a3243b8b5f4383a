//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade, behind the cargo feature
//! `metrics`: any exporter the application installs (Prometheus, OpenTelemetry, StatsD)
//! receives them. They are recorded once, in lockkit-core, for every backend; with the
//! feature off every call here compiles to nothing.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `lockkit_acquisitions_total` | counter | `backend`, `kind`, `outcome` | acquisitions by outcome: `granted`, `busy` (not granted without waiting), `timeout`, `cancelled` (the future was dropped), `error` |
//! | `lockkit_acquire_wait_seconds` | histogram | `backend`, `kind`, `outcome` | how long an acquisition took, from the call to its outcome |
//! | `lockkit_hold_seconds` | histogram | `backend`, `kind`, `end` | how long a hold lasted, from its grant to the release of its last guard; `end` is `released` or `lost` (it was lost before) |
//! | `lockkit_releases_total` | counter | `backend`, `kind`, `how` | holds freed by their owner: `how` is `release` (awaited) or `drop` (a guard dropped) |
//! | `lockkit_losses_total` | counter | `backend`, `kind`, `reason` | holds lost, by `LossReason` (`deadline_expired`, `session_expired`, `record_gone`, `owned_by_another`, `client_closed`, `store_restarted`, `connection_lost`, `auth_failed`, `max_hold_reached`, `other`) |
//! | `lockkit_reentries_total` | counter | `backend`, `kind` | guards taken from a held guard (`reenter`, `read`, `write`) |
//! | `lockkit_renewal_batch_size` | histogram | `backend` | holds per renewal round trip (Redis) |
//! | `lockkit_renewal_lag_seconds` | histogram | `backend` | a renewal round trip's time from its send to its reply (Redis): the part of the lease it used up |
//! | `lockkit_session_state_changes_total` | counter | `backend`, `state` | session state changes (ZooKeeper: `connected`, `disconnected`, `expired`, `closed`, `auth_failed`, ...) |
//! | `lockkit_handovers_total` | counter | `backend` | grants a waiter took from a release that handed the lock to it, without a try of its own (Redis's fair queue) |
//!
//! `kind` is `exclusive`, `read`, `write`, `permit` or `candidate`. The number of label values
//! is bounded: the lock's name is never a label, unless a provider opts in with
//! [`LockProvider::with_metrics_prefix`](crate::LockProvider::with_metrics_prefix), which
//! adds a `prefix` label to the lock-level metrics (the part of the name the function returns,
//! such as the part before the first `/`: keep the set of values small).
//!
//! A loss is counted when it is recorded: at once for a loss the backend reports (a deleted
//! record, an expired session), and for a deadline or maximum hold that passed, when
//! something looks at the hold (its `lost()` future, `is_held()`, a renewal, its release).
//!
//! Backends record what only they see through [`renewal_batch`], [`session_state`] and
//! [`handover`], one line each. [`describe`] registers the descriptions and units with the recorder.

use std::time::Duration;
#[cfg(feature = "metrics")]
use std::time::Instant;

#[cfg(feature = "metrics")]
use crate::LossReason;
use crate::{HoldKind, LockName};

/// Counter: acquisitions by outcome.
pub const ACQUISITIONS: &str = "lockkit_acquisitions_total";
/// Histogram (seconds): how long acquisitions took, by outcome.
pub const ACQUIRE_WAIT: &str = "lockkit_acquire_wait_seconds";
/// Histogram (seconds): how long holds lasted.
pub const HOLD_TIME: &str = "lockkit_hold_seconds";
/// Counter: holds freed by their owner.
pub const RELEASES: &str = "lockkit_releases_total";
/// Counter: holds lost, by reason.
pub const LOSSES: &str = "lockkit_losses_total";
/// Counter: guards taken from a held guard.
pub const REENTRIES: &str = "lockkit_reentries_total";
/// Histogram: holds per renewal round trip.
pub const RENEWAL_BATCH: &str = "lockkit_renewal_batch_size";
/// Histogram (seconds): a renewal round trip, from its send to its reply.
pub const RENEWAL_LAG: &str = "lockkit_renewal_lag_seconds";
/// Counter: session state changes.
pub const SESSION_STATES: &str = "lockkit_session_state_changes_total";
/// Counter: grants taken from a hand-over.
pub const HANDOVERS: &str = "lockkit_handovers_total";

/// A provider's function from a lock name to the value of the `prefix` label
/// ([`LockProvider::with_metrics_prefix`](crate::LockProvider::with_metrics_prefix)).
pub type NamePrefix = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Registers the description and unit of every lockkit metric with the installed recorder
/// (an exporter shows them as help text). Call it once after installing the recorder; it is
/// optional. Does nothing without the `metrics` feature.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use ::metrics::{Unit, describe_counter, describe_histogram};
        describe_counter!(ACQUISITIONS, "Lock acquisitions by outcome (granted, busy, timeout, cancelled, error).");
        describe_histogram!(ACQUIRE_WAIT, Unit::Seconds, "How long lock acquisitions took, by outcome.");
        describe_histogram!(HOLD_TIME, Unit::Seconds, "How long holds lasted, from grant to release.");
        describe_counter!(RELEASES, "Holds freed by their owner (release or drop).");
        describe_counter!(LOSSES, "Holds lost, by reason.");
        describe_counter!(REENTRIES, "Guards taken from a held guard.");
        describe_histogram!(RENEWAL_BATCH, Unit::Count, "Holds per renewal round trip.");
        describe_histogram!(RENEWAL_LAG, Unit::Seconds, "Renewal round trips, from send to reply.");
        describe_counter!(SESSION_STATES, "Session state changes, by state.");
        describe_counter!(HANDOVERS, "Grants taken from a release that handed the lock over.");
    }
}

/// Records one renewal round trip of `backend` that renewed `holds` holds and took `lag` from
/// its send to its reply. For backends; does nothing without the `metrics` feature.
#[inline]
pub fn renewal_batch(backend: &'static str, holds: usize, lag: Duration) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("backend", backend)];
        #[allow(clippy::cast_precision_loss)]
        ::metrics::histogram!(RENEWAL_BATCH, &labels).record(holds as f64);
        ::metrics::histogram!(RENEWAL_LAG, &labels).record(lag);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, holds, lag);
}

/// Records that a waiter of `backend` took a grant that a release handed over to it. For
/// backends; does nothing without the `metrics` feature.
#[inline]
pub fn handover(backend: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(HANDOVERS, &[("backend", backend)]).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

/// Records that the session of a `backend` client changed to `state`, labelled with its
/// `Debug` name in snake_case (ZooKeeper's `SyncConnected` is `sync_connected`): give a
/// state type with few values. For backends; does nothing without the `metrics` feature.
#[inline]
pub fn session_state(backend: &'static str, state: &dyn std::fmt::Debug) {
    #[cfg(feature = "metrics")]
    {
        let state = snake_case(&format!("{state:?}"));
        ::metrics::counter!(SESSION_STATES, &[("backend", backend.to_owned()), ("state", state)]).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, state);
}

/// `SyncConnected` as `sync_connected`.
#[cfg(feature = "metrics")]
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (at, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if at > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        }
    }
    out
}

/// The `kind` label of a hold.
#[cfg(feature = "metrics")]
pub(crate) fn kind_label(kind: &HoldKind) -> &'static str {
    match kind {
        HoldKind::Exclusive => "exclusive",
        HoldKind::Read => "read",
        HoldKind::Write => "write",
        HoldKind::Permit { .. } => "permit",
        HoldKind::Candidate { .. } => "candidate",
    }
}

/// The `reason` label of a loss.
#[cfg(feature = "metrics")]
pub(crate) fn reason_label(reason: &LossReason) -> &'static str {
    match reason {
        LossReason::DeadlineExpired => "deadline_expired",
        LossReason::SessionExpired => "session_expired",
        LossReason::RecordGone => "record_gone",
        LossReason::OwnedByAnother => "owned_by_another",
        LossReason::ClientClosed => "client_closed",
        LossReason::StoreRestarted => "store_restarted",
        LossReason::ConnectionLost => "connection_lost",
        LossReason::AuthFailed => "auth_failed",
        LossReason::MaxHoldReached => "max_hold_reached",
        LossReason::Other(_) => "other",
    }
}

/// The labels every lock-level metric of one handle carries: backend, kind, and the name's
/// prefix when the provider asks for it, with each outcome's label appended. Empty without the
/// `metrics` feature.
///
/// The label sets are interned once per (backend, kind, prefix) for the life of the process, so
/// that recording allocates nothing: the sets are as few as the labels' values.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    #[cfg(feature = "metrics")]
    sets: &'static Sets,
}

/// The interned label sets of one (backend, kind, prefix).
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Sets {
    base: &'static [::metrics::Label],
    /// By outcome: granted, busy, timeout, cancelled, error.
    outcome: [&'static [::metrics::Label]; 5],
    /// By end: released, lost.
    end: [&'static [::metrics::Label]; 2],
    /// By how: release, drop.
    how: [&'static [::metrics::Label]; 2],
}

#[cfg(feature = "metrics")]
impl Sets {
    fn of(backend: &'static str, kind: &'static str, prefix: Option<String>) -> &'static Sets {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock, PoisonError};
        type Table = Mutex<HashMap<(&'static str, &'static str, Option<String>), &'static Sets>>;
        static TABLE: OnceLock<Table> = OnceLock::new();
        let mut table = TABLE.get_or_init(Table::default).lock().unwrap_or_else(PoisonError::into_inner);
        let key = (backend, kind, prefix);
        if let Some(sets) = table.get(&key) {
            return sets;
        }
        let mut base = vec![::metrics::Label::from_static_parts("backend", backend)];
        base.push(::metrics::Label::from_static_parts("kind", kind));
        if let Some(prefix) = &key.2 {
            base.push(::metrics::Label::new("prefix", prefix.clone()));
        }
        let with = |name: &'static str, value: &'static str| -> &'static [::metrics::Label] {
            let mut labels = base.clone();
            labels.push(::metrics::Label::from_static_parts(name, value));
            Box::leak(labels.into_boxed_slice())
        };
        let sets = Sets {
            outcome: ["granted", "busy", "timeout", "cancelled", "error"].map(|outcome| with("outcome", outcome)),
            end: ["released", "lost"].map(|end| with("end", end)),
            how: ["release", "drop"].map(|how| with("how", how)),
            base: Box::leak(base.clone().into_boxed_slice()),
        };
        let sets: &'static Sets = Box::leak(Box::new(sets));
        table.insert(key, sets);
        sets
    }
}

/// Where lockkit's metrics say they come from.
#[cfg(feature = "metrics")]
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// Adds one to counter `name` with `labels`, allocating nothing.
#[cfg(feature = "metrics")]
fn count(name: &'static str, labels: &'static [::metrics::Label]) {
    let key = ::metrics::Key::from_static_labels(name, labels);
    ::metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA).increment(1));
}

/// Records `value` in histogram `name` with `labels`, allocating nothing.
#[cfg(feature = "metrics")]
fn observe(name: &'static str, labels: &'static [::metrics::Label], value: Duration) {
    let key = ::metrics::Key::from_static_labels(name, labels);
    ::metrics::with_recorder(|recorder| recorder.register_histogram(&key, &METADATA).record(value));
}

impl Labels {
    pub(crate) fn new(backend: &'static str, kind: &HoldKind, name: &LockName, prefix: Option<&NamePrefix>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let prefix = prefix.map(|prefix| prefix(name.as_str()).unwrap_or_default());
            Self { sets: Sets::of(backend, kind_label(kind), prefix) }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (backend, kind, name, prefix);
            Self {}
        }
    }

    /// A guard was taken from a held guard.
    #[inline]
    pub(crate) fn reentered(&self) {
        #[cfg(feature = "metrics")]
        count(REENTRIES, self.sets.base);
    }

    /// A hold was lost with `reason` (rare: this one builds its labels).
    #[cfg(feature = "metrics")]
    #[inline]
    pub(crate) fn lost(&self, reason: &LossReason) {
        let mut labels = self.sets.base.to_vec();
        labels.push(::metrics::Label::from_static_parts("reason", reason_label(reason)));
        ::metrics::counter!(LOSSES, labels).increment(1);
    }
}

/// How an acquisition ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    Busy,
    Timeout,
    Error,
}

/// Times one acquisition; dropped unfinished, it records a cancelled one.
#[must_use]
pub(crate) struct AcquireTimer<'a> {
    #[cfg(feature = "metrics")]
    started: Instant,
    #[cfg(feature = "metrics")]
    labels: &'a Labels,
    #[cfg(feature = "metrics")]
    finished: bool,
    #[cfg(not(feature = "metrics"))]
    labels: std::marker::PhantomData<&'a Labels>,
}

impl<'a> AcquireTimer<'a> {
    #[inline]
    pub(crate) fn start(labels: &'a Labels) -> Self {
        #[cfg(feature = "metrics")]
        {
            Self { started: Instant::now(), labels, finished: false }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Self { labels: std::marker::PhantomData }
        }
    }

    #[inline]
    pub(crate) fn finish(mut self, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        {
            self.finished = true;
            self.record(match outcome {
                Outcome::Granted => 0,
                Outcome::Busy => 1,
                Outcome::Timeout => 2,
                Outcome::Error => 4,
            });
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (&mut self, outcome);
    }

    /// Records the outcome at `index` of [`Sets::outcome`].
    #[cfg(feature = "metrics")]
    fn record(&self, index: usize) {
        let labels = self.labels.sets.outcome[index];
        observe(ACQUIRE_WAIT, labels, self.started.elapsed());
        count(ACQUISITIONS, labels);
    }
}

#[cfg(feature = "metrics")]
impl Drop for AcquireTimer<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Sets::outcome[3]: cancelled.
            self.record(3);
        }
    }
}

/// The start of one hold, for its hold time.
#[derive(Debug)]
pub(crate) struct HoldClock {
    #[cfg(feature = "metrics")]
    since: Instant,
}

impl HoldClock {
    #[inline]
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            since: Instant::now(),
        }
    }

    /// The hold's last guard went: by `release` or by a drop, after a loss or not.
    #[inline]
    pub(crate) fn ended(&self, labels: &Labels, released: bool, lost: bool) {
        #[cfg(feature = "metrics")]
        {
            observe(HOLD_TIME, labels.sets.end[usize::from(lost)], self.since.elapsed());
            count(RELEASES, labels.sets.how[usize::from(!released)]);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (labels, released, lost);
    }
}
