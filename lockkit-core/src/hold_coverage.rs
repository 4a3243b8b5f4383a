//! [`HoldCoverage`]: how a provider's live holds hear of their record's deletion, for the
//! tests of backends that follow many holds with one store-wide watch (etcd's prefix watch,
//! ZooKeeper's recursive watch on the base path) and fall back to following each hold.

/// How the live holds of a provider's current session hear of their record's deletion. Not
/// part of the API: for tests (the many-holds runs check that they ran on the store-wide
/// watch and did not fall back to following each hold).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldCoverage {
    /// Whether the store confirmed the session's store-wide watch, and it still runs.
    pub store_wide_watch: bool,
    /// Live holds whose deletion the store-wide watch alone tells.
    pub store_wide: usize,
    /// Live holds followed one by one (etcd: the listing of their keys after each
    /// keep-alive; ZooKeeper: a watch on each hold's node).
    pub per_hold: usize,
}
