//! Each page is a module with no items, only documentation; every code block on it is a doc
//! test (`cargo test --doc --workspace --all-features`), so the guide cannot drift from the
//! code. Examples that need a server are compiled but not run.
//!
//! 1. [Getting started](getting_started): a first lock, the store as a URL, the guard.
//! 2. [Choosing a backend](backends): what each store guarantees and needs, with a page per
//!    backend ([Redis](backends::redis), [ZooKeeper](backends::zookeeper),
//!    [PostgreSQL](backends::postgres), [etcd](backends::etcd), [files](backends::files),
//!    [memory](backends::memory)).
//! 3. [Fencing end to end](fencing): why a lock alone is not enough, and how the protected
//!    resource uses the token.
//! 4. [The primitives](primitives): mutexes, read-write locks, semaphores, elections and
//!    observers, several locks at once, reentrancy, loss, a maximum hold.
//! 5. [Running in production](production): metrics, breaking a stuck lock, permissions,
//!    Redis Sentinel and Cluster, PostgreSQL behind a pooler, etcd authentication, runtimes.
//! 6. [The `lockkit` command](cli): run a command under a lock, elect, inspect, break, bench.
//! 7. [Writing a backend](writing_a_backend): the `LockBackend` seam and the conformance kit.

#[doc = include_str!("getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("backends/choosing.md")]
pub mod backends {
    #[doc = include_str!("backends/redis.md")]
    pub mod redis {}

    #[doc = include_str!("backends/zookeeper.md")]
    pub mod zookeeper {}

    #[doc = include_str!("backends/postgres.md")]
    pub mod postgres {}

    #[doc = include_str!("backends/etcd.md")]
    pub mod etcd {}

    #[doc = include_str!("backends/files.md")]
    pub mod files {}

    #[doc = include_str!("backends/memory.md")]
    pub mod memory {}
}

#[doc = include_str!("fencing.md")]
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
