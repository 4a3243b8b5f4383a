//! What a backend provides to the conformance kit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockProvider;

/// The answer of a fault hook the backend's harness does not have. A case that needs the
/// hook cannot check its behaviour: it fails under `LOCKKIT_CONFORMANCE_STRICT=1`, and
/// otherwise prints why and passes. Declare such cases in `conformance!(…, without: […])`
/// to have them reported as ignored instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported;

/// The result of a fault hook.
pub type FaultResult = Result<(), Unsupported>;

/// The time bounds of a backend's clients, as the cases need them.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Timing {
    /// The longest one operation may take without waiting on another owner (a few round
    /// trips on a loaded machine). Used as a liveness bound, never to measure speed.
    pub operation: Duration,
    /// The longest a release may take to reach a waiting acquirer. Far below the lease, so a
    /// backend that polls at lease granularity fails the notification case.
    pub wake: Duration,
    /// How long a dead holder's hold outlives it (lease or session timeout), when holds
    /// expire at all.
    pub lease: Option<Duration>,
    /// How late a timed-out acquisition may return past its timeout.
    pub late: Duration,
}

impl Timing {
    /// Bounds for a backend whose holds do not expire.
    pub fn new() -> Self {
        Self {
            operation: Duration::from_secs(3),
            wake: Duration::from_millis(1500),
            lease: None,
            late: Duration::from_millis(750),
        }
    }

    crate::setters::with_setters! {
        /// Sets the lease or session timeout after which a dead holder's hold ends.
        fn with_lease(lease: Duration) => lease = Some(lease);

        /// Sets the bound on a single operation.
        fn with_operation(operation: Duration) => operation = operation;

        /// Sets the bound on a release reaching a waiter.
        fn with_wake(wake: Duration) => wake = wake;
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self::new()
    }
}

/// Faults that act on one client: its session or connection.
#[async_trait]
pub trait ClientFaults: Send + Sync {
    /// The client dies as a killed process would: it sends nothing more, and its holds end
    /// only when the store notices (lease or session expiry, or a closed connection).
    async fn kill(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Silently cuts the client off the store (a blackhole: no reset, no reply).
    async fn blackhole(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Undoes [`blackhole`](Self::blackhole).
    async fn heal(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Breaks the client's connections now (the client sees a reset and may reconnect).
    async fn cut_connection(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Delays every message between the client and the store by `latency` each way;
    /// `Duration::ZERO` removes the delay. Used by the chaos run ([`crate::chaos`]).
    async fn set_latency(&self, latency: Duration) -> FaultResult {
        let _ = latency;
        Err(Unsupported)
    }

    /// Stops the server this client is connected to (one member of a replicated store, such
    /// as a ZooKeeper ensemble), keeps it down for `down`, then starts it again and waits
    /// until the store serves. Used by the chaos run ([`crate::chaos`]).
    async fn stop_server_for(&self, down: Duration) -> FaultResult {
        let _ = down;
        Err(Unsupported)
    }
}

/// A client that has no fault hooks.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

impl ClientFaults for NoFaults {}

/// One independent client for a case: a second client is a second session or connection.
#[derive(Clone)]
pub struct TestClient {
    /// The client.
    pub provider: LockProvider,
    /// Its fault hooks.
    pub faults: Arc<dyn ClientFaults>,
}

impl TestClient {
    /// A client with fault hooks.
    pub fn new(provider: impl Into<LockProvider>, faults: Arc<dyn ClientFaults>) -> Self {
        Self { provider: provider.into(), faults }
    }

    /// A client without fault hooks.
    pub fn without_faults(provider: impl Into<LockProvider>) -> Self {
        Self { provider: provider.into(), faults: Arc::new(NoFaults) }
    }
}

/// What a backend implements to run the conformance kit.
///
/// One harness is made per test process and shared by every case; cases run in parallel and
/// draw fresh lock names, so they never disturb each other, except the server-wide faults
/// ([`restart_store`](Self::restart_store)), which a harness should apply to a store of its own.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The backend's name in failure messages.
    fn name(&self) -> &str;

    /// A fresh, independent client.
    ///
    /// # Errors
    ///
    /// When the client cannot connect; the case fails with this error.
    async fn client(&self) -> lockkit_core::Result<TestClient>;

    /// The kind of hold the mutex cases acquire: [`HoldKind::Exclusive`](lockkit_core::HoldKind::Exclusive). The kit's
    /// [`AsKind`](crate::AsKind) wrapper changes it to run every mutex case again on a write
    /// lock and on a one-permit semaphore; a backend's harness keeps the default.
    fn mutex_kind(&self) -> lockkit_core::HoldKind {
        lockkit_core::HoldKind::Exclusive
    }

    /// The time bounds of this backend's clients.
    fn timing(&self) -> Timing {
        Timing::new()
    }

    /// A client whose store cannot be reached (a closed port on loopback, say), built with
    /// the backend's builder and not connected: its operations must fail with errors that
    /// say the store is unreachable ([`Error::is_connect`](lockkit_core::Error::is_connect)).
    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        Err(Unsupported)
    }

    /// Deletes the record of lock `name` behind its holder's back (an administrator deleting
    /// the key or znode).
    async fn delete_record(&self, name: &str) -> FaultResult {
        let _ = name;
        Err(Unsupported)
    }

    /// A harness on a store of its own (a dedicated server), for the cases that apply
    /// server-wide faults such as [`restart_store`](Self::restart_store) without disturbing
    /// the cases running in parallel on the shared one.
    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        Err(Unsupported)
    }

    /// Restarts the store, keeping its data where the backend is configured to. Only called
    /// on a harness from [`isolated`](Self::isolated).
    async fn restart_store(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Suspends (`true`) or resumes (`false`) the store process, as a long garbage-collection
    /// pause or a frozen VM would: connections stay open and nothing is answered. Only called
    /// on a harness from [`isolated`](Self::isolated) (or one that owns its store), by the
    /// chaos run ([`crate::chaos`]).
    async fn pause_store(&self, paused: bool) -> FaultResult {
        let _ = paused;
        Err(Unsupported)
    }

    /// Fails over the primary that holds lock `name` to one of its replicas (a Redis
    /// Cluster's `CLUSTER FAILOVER` of the slot's primary, a Sentinel failover) and returns
    /// once the store serves again. Used by the chaos run ([`crate::chaos`]); only called on
    /// a harness that owns its store.
    async fn failover(&self, name: &str) -> FaultResult {
        let _ = name;
        Err(Unsupported)
    }

    /// Moves lock `name`, with its data, to another server of the store (a Redis Cluster's
    /// slot migration) and returns once every server agrees. Used by the chaos run
    /// ([`crate::chaos`]); only called on a harness that owns its store.
    async fn reshard(&self, name: &str) -> FaultResult {
        let _ = name;
        Err(Unsupported)
    }

    /// Discards the store's history of past changes up to now (etcd's compaction), so that a
    /// client that resumes watching from a revision it saw before learns that the changes in
    /// between are gone. Used by the observers' chaos run ([`crate::observer_chaos`]) while
    /// the client is cut off; stores without such a history keep the default.
    async fn compact_history(&self) -> FaultResult {
        Err(Unsupported)
    }

    /// Environment variables under which the same harness expression, evaluated in a child
    /// process (the test binary run again), reaches the same store as this harness, for the
    /// cases where two OS processes contend (`cross_process`). For example the URL of the
    /// shared server, or the directory of a file store.
    ///
    /// The default says the harness cannot: those cases then say so and pass. Backends that
    /// live in one process (the memory backend) keep the default.
    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Err(Unsupported)
    }

    /// Tries to build clients with settings that must be refused, returning a description of
    /// each attempt and its outcome. Every outcome must be
    /// [`Error::InvalidConfig`](lockkit_core::Error::InvalidConfig).
    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        Vec::new()
    }
}
