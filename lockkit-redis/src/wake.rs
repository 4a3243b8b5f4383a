//! What wakes a waiter of this provider: why its wait ended ([`Woken`]), and a hand-over of a
//! fair lock addressed to it ([`Handover`]), as the subscriber routes them.

use std::time::Duration;

/// Why a wait ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release for everyone, a renewed subscription, messages that may have been missed,
    /// or the time given: look at the lock again.
    #[default]
    Look,
    /// A release whose turn is another queued waiter's.
    OthersTurn,
    /// A release handed the lock over to this queued waiter.
    HandedOver(Handover),
}

/// The latest wake-up of a waiter, and the latest hand-over addressed to it, which stays
/// when later wake-ups come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wake {
    pub(crate) woken: Woken,
    pub(crate) handover: Option<Handover>,
}

/// A hand-over of a fair lock to the head of its queue, as the release announced it: the
/// head holds the lock, for `window` from `server_ms` on, unless it was already handed over
/// to it earlier and lost meanwhile (which the token tells).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handover {
    /// The grant's fencing token.
    pub(crate) token: u64,
    /// The server's clock when the grant was made, in milliseconds.
    pub(crate) server_ms: u64,
    /// How long the grant lasts unless confirmed: the releaser's claim window.
    pub(crate) window: Duration,
}
