//! [`ZkLockProvider::hold_coverage`]: how a provider's live holds hear of their node's
//! deletion, read from the session's own table of holds, for tests that must show which of the
//! two ways (the session's recursive watch on the base path, or a watch per hold) they took.

use crate::client::ZkBackend;
use crate::provider::ZkLockProvider;
use lockkit_core::HoldCoverage;

impl ZkLockProvider {
    /// How the live holds of the current session hear of their node's deletion; all zero
    /// without a live session. One look at the session's table of holds, under its lock.
    #[doc(hidden)]
    pub fn hold_coverage(&self) -> HoldCoverage {
        self.backend_as::<ZkBackend>()
            .and_then(|backend| backend.live())
            .map(|session| session.coverage())
            .unwrap_or_default()
    }
}
