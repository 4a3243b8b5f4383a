//! What a backend can promise beyond the common contract.

/// The optional guarantees of a backend, as plain flags.
///
/// Build one with struct update syntax: `Capabilities { fair: true, ..Capabilities::default() }`.
/// The conformance kit reads these flags: a case that needs a capability the backend does not
/// declare says so and passes without checking it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Waiters are granted the lock in arrival order.
    pub fair: bool,
    /// Fencing tokens are strictly increasing per name (every lockkit backend must say yes).
    pub fencing: bool,
    /// Fencing tokens stay strictly increasing across a restart of the store.
    pub fencing_survives_restart: bool,
    /// Holds expire unless renewed: a dead holder frees the lock after a lease or session timeout.
    pub lease: bool,
    /// Leases are renewed automatically for as long as the guard lives.
    pub lease_renewal: bool,
    /// Loss is signalled through [`LockGuard::lost`](crate::LockGuard::lost) as it happens.
    pub loss_notification: bool,
    /// The backend can report the holder, token and queue of a lock
    /// ([`LockBackend::inspect`](crate::backend::LockBackend::inspect)).
    pub inspect: bool,
    /// The backend can report how many waiters are queued on a lock.
    pub waiter_count: bool,
    /// Locks exclude owners in other OS processes, not just in this one.
    pub cross_process: bool,
}

impl Capabilities {
    /// A capability set with every flag off. Same as `Default::default()`, usable in `const`.
    pub const NONE: Self = Self {
        fair: false,
        fencing: false,
        fencing_survives_restart: false,
        lease: false,
        lease_renewal: false,
        loss_notification: false,
        inspect: false,
        waiter_count: false,
        cross_process: false,
    };
}
