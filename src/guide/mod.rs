//! Each page is a module with no items, only documentation; every code block on it is a doc
//! test (`cargo test --doc --workspace --all-features`), so the guide cannot drift from the
//! code. Examples that need a server are compiled but not run.
//!
//! 1. [Getting started](crate::guide::getting_started): a first lock, the store as a URL, the guard.
//! 2. [Choosing a backend](crate::guide::backends): what each store guarantees and needs, with a page per
//!    backend ([Redis](crate::guide::backends::redis), [ZooKeeper](crate::guide::backends::zookeeper),
//!    [PostgreSQL](crate::guide::backends::postgres), [etcd](crate::guide::backends::etcd), [files](crate::guide::backends::files),
//!    [memory](crate::guide::backends::memory)).
//! 3. [Fencing end to end](crate::guide::fencing): why a lock alone is not enough, and how the protected
//!    resource uses the token.
//! 4. [The primitives](crate::guide::primitives): mutexes, read-write locks, semaphores, elections and
//!    observers, several locks at once, reentrancy, loss, a maximum hold.
//! 5. [Running in production](crate::guide::production): metrics, breaking a stuck lock, permissions,
//!    Redis Sentinel and Cluster, PostgreSQL behind a pooler, etcd authentication, runtimes.
//! 6. [The `lockkit` command](crate::guide::cli): run a command under a lock, elect, inspect, break, bench.
//! 7. [Writing a backend](crate::guide::writing_a_backend): the `LockBackend` seam and the conformance kit.

#[doc = include_str!("getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("backends/choosing.md")]
pub mod backends {
    #[doc = include_str!("backends/redis.md")]
    // Its links name the backend's items, which exist with the feature only.
    #[cfg_attr(not(feature = "redis-tls"), allow(rustdoc::broken_intra_doc_links))]
    pub mod redis {}

    #[doc = include_str!("backends/zookeeper.md")]
    // Its links name the backend's items, which exist with the feature only.
    #[cfg_attr(not(feature = "zk"), allow(rustdoc::broken_intra_doc_links))]
    pub mod zookeeper {}

    #[doc = include_str!("backends/postgres.md")]
    // Its links name the backend's items, which exist with the feature only.
    #[cfg_attr(not(feature = "postgres"), allow(rustdoc::broken_intra_doc_links))]
    pub mod postgres {}

    #[doc = include_str!("backends/etcd.md")]
    // Its links name the backend's items, which exist with the feature only.
    #[cfg_attr(not(feature = "etcd"), allow(rustdoc::broken_intra_doc_links))]
    pub mod etcd {}

    #[doc = include_str!("backends/files.md")]
    pub mod files {}

    #[doc = include_str!("backends/memory.md")]
    pub mod memory {}
}

#[doc = include_str!("fencing.md")]
// Its links name the PostgreSQL sink's items, which exist with the feature only.
#[cfg_attr(not(feature = "fence-postgres"), allow(rustdoc::broken_intra_doc_links))]
pub mod fencing {}

#[doc = include_str!("primitives.md")]
pub mod primitives {}

#[doc = include_str!("production.md")]
pub mod production {}

#[doc = include_str!("cli.md")]
pub mod cli {}

#[doc = include_str!("writing_a_backend.md")]
pub mod writing_a_backend {}

/// The README's examples, compiled and run with the doc tests so that they cannot rot either.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
