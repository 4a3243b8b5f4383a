//! The checked settings of a file provider.

use std::path::PathBuf;
use std::time::Duration;

/// The checked settings of a provider.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The lock directory, canonical.
    pub(crate) dir: PathBuf,
    /// The first pause of a waiter between two tries (the cross-process safety net).
    pub(crate) poll_min: Duration,
    /// The longest pause of a waiter between two tries.
    pub(crate) poll_max: Duration,
    /// How often held lock files are checked for deletion.
    pub(crate) check_every: Duration,
    /// How often an election observer reads the election again without a notification.
    pub(crate) observe_every: Duration,
}

/// The `split_downgrades` fault hook's setting: convert in two steps with a pause between
/// them, as a kernel whose flock conversion is not atomic would, and whether to hold the
/// gate meanwhile.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub(crate) struct SplitDowngrade {
    pub(crate) pause: Duration,
    pub(crate) gate: bool,
}
