//! What a backend can promise beyond the common contract.

/// The optional guarantees of a backend, as plain flags.
///
/// Build one with struct update syntax: `Capabilities { fair: true, ..Capabilities::NONE }`,
/// or start from [`Capabilities::ALL`] for a backend that claims every guarantee (a flag added
/// to lockkit later is then claimed too, and the conformance kit checks it). Fencing is not a
/// flag: every backend issues fencing tokens.
///
/// The core reads the kind flags ([`rw_lock`](Self::rw_lock), [`semaphore`](Self::semaphore),
/// [`election`](Self::election)) and refuses a kind of hold the backend does not declare with
/// [`Error::Unsupported`](crate::Error::Unsupported), and [`inspect`](Self::inspect) and
/// [`break_lock`](Self::break_lock) likewise.
/// The conformance kit reads the others: a case that needs a guarantee the backend does not
/// declare says so and does not check it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // Plain flags are the point (OpenDAL's `Capability` does the same).
pub struct Capabilities {
    /// Waiters are granted the lock in arrival order.
    pub fair: bool,
    /// Fencing tokens stay strictly increasing across a restart of the store.
    pub fencing_survives_restart: bool,
    /// Holds expire unless renewed: a dead holder frees the lock after a lease or session timeout.
    pub lease: bool,
    /// Leases are renewed automatically for as long as the guard lives.
    pub lease_renewal: bool,
    /// Loss is signalled through [`LockGuard::lost`](crate::LockGuard::lost) as it happens.
    pub loss_notification: bool,
    /// The backend can report the holders, tokens and queue of a lock
    /// ([`LockBackend::inspect`](crate::backend::LockBackend::inspect)).
    pub inspect: bool,
    /// The backend can report how many waiters are queued on a lock.
    pub waiter_count: bool,
    /// Locks exclude owners in other OS processes, not just in this one.
    pub cross_process: bool,
    /// The backend grants [`HoldKind::Read`](crate::HoldKind::Read) and
    /// [`HoldKind::Write`](crate::HoldKind::Write): read-write locks.
    pub rw_lock: bool,
    /// The backend grants [`HoldKind::Permit`](crate::HoldKind::Permit): counting semaphores.
    pub semaphore: bool,
    /// The backend grants [`HoldKind::Candidate`](crate::HoldKind::Candidate): leader election.
    pub election: bool,
    /// The backend can free a lock whose holder is stuck
    /// ([`LockBackend::break_lock`](crate::backend::LockBackend::break_lock)): the holder's
    /// guard is signalled lost, and the next owner's token is greater than the broken one's.
    pub break_lock: bool,
}

impl Capabilities {
    /// A capability set with every flag off. Same as `Default::default()`, usable in `const`.
    pub const NONE: Self = Self {
        fair: false,
        fencing_survives_restart: false,
        lease: false,
        lease_renewal: false,
        loss_notification: false,
        inspect: false,
        waiter_count: false,
        cross_process: false,
        rw_lock: false,
        semaphore: false,
        election: false,
        break_lock: false,
    };

    /// A capability set with every flag on: a backend that keeps every guarantee lockkit
    /// names, now and as flags are added (`..Capabilities::ALL` to turn some off).
    pub const ALL: Self = Self {
        fair: true,
        fencing_survives_restart: true,
        lease: true,
        lease_renewal: true,
        loss_notification: true,
        inspect: true,
        waiter_count: true,
        cross_process: true,
        rw_lock: true,
        semaphore: true,
        election: true,
        break_lock: true,
    };
}

#[cfg(test)]
mod tests {
    use super::Capabilities;

    #[test]
    fn all_and_none_are_the_two_ends() {
        // Written without `..`: a flag added to the struct must be added to both ends.
        let Capabilities {
            fair,
            fencing_survives_restart,
            lease,
            lease_renewal,
            loss_notification,
            inspect,
            waiter_count,
            cross_process,
            rw_lock,
            semaphore,
            election,
            break_lock,
        } = Capabilities::ALL;
        assert!(
            fair && fencing_survives_restart
                && lease
                && lease_renewal
                && loss_notification
                && inspect
                && waiter_count
                && cross_process
                && rw_lock
                && semaphore
                && election
                && break_lock
        );
        assert_eq!(Capabilities::NONE, Capabilities::default());
    }
}
