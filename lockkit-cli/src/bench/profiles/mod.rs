//! The one table of bench profiles, one per backend, found by the backend's name as its
//! [`Scheme`](lockkit::config::Scheme) says it. A backend without a profile is benchmarked
//! anyway, with no floor and no target, and the report says so (a unit test also fails for
//! every scheme of this build without one).

mod local;
mod postgres;
mod redis;
mod zk;

#[cfg(feature = "etcd")]
mod etcd;

use super::profile::Profile;

/// Every profile.
const PROFILES: &[&dyn Profile] = &[
    &local::Memory,
    &local::File,
    &redis::Redis,
    &zk::ZooKeeper,
    &postgres::Postgres,
    #[cfg(feature = "etcd")]
    &etcd::Etcd,
];

/// The profile of `backend`, or `None` when it has none.
pub(crate) fn find(backend: &str) -> Option<&'static dyn Profile> {
    PROFILES.iter().copied().find(|profile| profile.backend() == backend)
}

/// The stand-in profile of a backend with none: no floor, no target.
pub(crate) struct Missing;

impl Profile for Missing {
    fn backend(&self) -> &'static str {
        "unknown"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_of_this_build_has_a_profile() {
        for scheme in lockkit::schemes() {
            assert!(
                find(scheme.backend).is_some(),
                "no bench profile for backend {:?}: add lockkit-cli/src/bench/profiles/{}.rs and list it in PROFILES",
                scheme.backend,
                scheme.backend
            );
        }
    }
}
