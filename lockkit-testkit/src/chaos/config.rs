//! The settings of a chaos run: what it contends for, for how long, and which faults it draws.

use std::fmt;
use std::time::Duration;

/// A kind of fault the chaos run injects.
///
/// New kinds come with new stores and faults, so a `match` outside this crate needs a
/// wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// Reset one client's connections ([`ClientFaults::cut_connection`](crate::ClientFaults::cut_connection)).
    Cut,
    /// Blackhole one client for longer than the lease or session timeout, then heal it. On
    /// ZooKeeper this expires the client's session.
    Blackhole,
    /// Delay one client's traffic for a while ([`ClientFaults::set_latency`](crate::ClientFaults::set_latency)).
    Latency,
    /// Kill one client for good and replace it with a fresh one.
    Kill,
    /// Suspend the store process for up to the lease plus a second, then resume it.
    PauseStore,
    /// Stop the server (ensemble member) one client is connected to for up to the lease,
    /// then start it again ([`ClientFaults::stop_server_for`](crate::ClientFaults::stop_server_for)).
    StopServer,
    /// Restart the store ([`Harness::restart_store`](crate::Harness::restart_store)).
    RestartStore,
    /// Fail over the primary that holds one of the run's names to a replica
    /// ([`Harness::failover`](crate::Harness::failover)).
    Failover,
    /// Move one of the run's names, with its data, to another server of the store (a Redis
    /// Cluster's slot migration: [`Harness::reshard`](crate::Harness::reshard)).
    Reshard,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Cut,
        FaultKind::Blackhole,
        FaultKind::Latency,
        FaultKind::Kill,
        FaultKind::PauseStore,
        FaultKind::RestartStore,
        FaultKind::StopServer,
        FaultKind::Failover,
        FaultKind::Reshard,
    ];

    /// The kinds that change which server holds a name: a failover and a resharding.
    pub const TOPOLOGY: [FaultKind; 2] = [FaultKind::Failover, FaultKind::Reshard];

    /// Every kind but those that need several servers (stopping one member, a failover, a
    /// resharding): the faults of a store with one server. `ALL` lists them first.
    pub const SINGLE_SERVER: &'static [FaultKind] = FaultKind::ALL.split_at(6).0;

    /// The kinds that act on one client only, safe on a shared store.
    pub const CLIENT: [FaultKind; 4] = [FaultKind::Cut, FaultKind::Blackhole, FaultKind::Latency, FaultKind::Kill];

    pub(super) fn label(self) -> &'static str {
        match self {
            FaultKind::Cut => "cut",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Latency => "latency",
            FaultKind::Kill => "kill",
            FaultKind::PauseStore => "pause-store",
            FaultKind::RestartStore => "restart-store",
            FaultKind::StopServer => "stop-server",
            FaultKind::Failover => "failover",
            FaultKind::Reshard => "reshard",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The settings of one chaos run. Plain `pub` fields with `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChaosConfig {
    /// The seed of the fault schedule and of every client's choices.
    pub seed: u64,
    /// How many clients contend (default 8).
    pub clients: usize,
    /// How many lock names they contend for (default 3).
    pub names: usize,
    /// How long faults are injected (default 15 s); the clients run on until every one made
    /// progress after the last fault healed.
    pub duration: Duration,
    /// The kinds of fault to draw from (default: all).
    pub faults: Vec<FaultKind>,
    /// The longest a client holds a lock in a short hold (default 120 ms).
    pub max_hold: Duration,
    /// One hold in this many is long: between half a lease and two leases (or two to eight
    /// short holds without a lease), so that renewal runs and a fault can strike mid-hold
    /// (default 8; 0 for none).
    pub long_hold_every: u64,
    /// The pause between two faults is drawn from this range (default 300 ms to 1.5 s).
    pub fault_gap: (Duration, Duration),
    /// The store loses its records when restarted (Redis without persistence), or may lose
    /// the latest writes at a failover (Redis replication is asynchronous): overlaps and lost
    /// updates involving a hold that spans a restart or a failover are counted as "by
    /// design".
    pub restart_loses_data: bool,
    /// How long every client may take to make progress after the last fault healed
    /// (default: three leases plus 15 s).
    pub liveness_bound: Option<Duration>,
    /// A label for the report, after the backend's name (such as "no persistence").
    pub label: Option<String>,
    /// What the clients contend for (default: mutexes).
    pub primitive: Primitive,
}

/// What the clients of a chaos run contend for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Primitive {
    /// Mutexes: every hold writes.
    Mutex,
    /// Read-write locks: one acquisition in four is a writer, which writes; readers read the
    /// resource with their token ([`FencedResource::read`](crate::FencedResource::read)), which must never be refused
    /// while their guard is valid.
    ReadWrite,
    /// Semaphores of this many permits: holders do not write; the history checks that no more
    /// than that many held at once.
    Semaphore(u32),
    /// Elections: every client campaigns with an identity of its own, and the leader writes
    /// with its term; the history checks that no two leaders' valid terms overlap.
    Election,
}

impl ChaosConfig {
    /// The defaults with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            clients: 8,
            names: 3,
            duration: Duration::from_secs(15),
            faults: FaultKind::ALL.to_vec(),
            max_hold: Duration::from_millis(120),
            long_hold_every: 8,
            fault_gap: (Duration::from_millis(300), Duration::from_millis(1500)),
            restart_loses_data: false,
            liveness_bound: None,
            label: None,
            primitive: Primitive::Mutex,
        }
    }

    /// The defaults for a store of one server (or one member): twenty seconds of the
    /// [`FaultKind::SINGLE_SERVER`] faults, seed 0 (a test gives its seeds to
    /// [`check`](super::check)).
    pub fn single_server() -> Self {
        Self::new(0).with_duration(Duration::from_secs(20)).with_faults(FaultKind::SINGLE_SERVER)
    }

    crate::setters::with_setters! {
        /// Sets what the clients contend for.
        fn with_primitive(primitive: Primitive) => primitive = primitive;

        /// Sets the seed.
        fn with_seed(seed: u64) => seed = seed;

        /// Sets the number of clients.
        fn with_clients(clients: usize) => clients = clients.max(1);

        /// Sets the number of lock names.
        fn with_names(names: usize) => names = names.max(1);

        /// Sets how long faults are injected.
        fn with_duration(duration: Duration) => duration = duration;

        /// Sets the kinds of fault to draw from.
        fn with_faults(faults: &[FaultKind]) => faults = faults.to_vec();

        /// Sets the longest hold.
        fn with_max_hold(max_hold: Duration) => max_hold = max_hold;

        /// Sets how often a hold is long (one in `every`; 0 for never).
        fn with_long_hold_every(every: u64) => long_hold_every = every;

        /// Declares that a store restart loses the lock records (see the field).
        fn with_restart_loses_data(loses: bool) => restart_loses_data = loses;

        /// Sets the report's label.
        fn with_label(label: impl Into<String>) => label = Some(label.into());

        /// Sets the liveness bound.
        fn with_liveness_bound(bound: Duration) => liveness_bound = Some(bound);
    }
}

/// One planned fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledFault {
    /// When it starts, after the run's start.
    pub at: Duration,
    /// Its kind.
    pub kind: FaultKind,
    /// The client it acts on (client faults).
    pub client: usize,
    /// How long it lasts before it is healed (zero for instant faults).
    pub hold: Duration,
    /// The latency added (latency faults).
    pub latency: Duration,
}

impl fmt::Display for ScheduledFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:>6} ms {:<13}", self.at.as_millis(), self.kind.label())?;
        match self.kind {
            FaultKind::Cut | FaultKind::Kill => write!(f, " client {}", self.client),
            FaultKind::Blackhole => write!(f, " client {} for {} ms", self.client, self.hold.as_millis()),
            FaultKind::Latency => write!(
                f,
                " client {} +{} ms each way for {} ms",
                self.client,
                self.latency.as_millis(),
                self.hold.as_millis()
            ),
            FaultKind::PauseStore => write!(f, " for {} ms", self.hold.as_millis()),
            FaultKind::Failover | FaultKind::Reshard => Ok(()),
            FaultKind::StopServer => write!(f, " of client {} for {} ms", self.client, self.hold.as_millis()),
            FaultKind::RestartStore => Ok(()),
        }
    }
}
