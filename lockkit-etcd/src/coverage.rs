//! [`EtcdLockProvider::hold_coverage`]: how a provider's live holds hear of their key's
//! deletion, read from its session, for tests that must show which of the two ways (the prefix
//! watch, or the listing of the holds' keys after each keep-alive) they took.

use crate::client::EtcdBackend;
use crate::provider::EtcdLockProvider;
use lockkit_core::HoldCoverage;

impl EtcdLockProvider {
    /// How the live holds of the current session hear of their key's deletion; all zero
    /// without a session. One look at the session's state, under its lock.
    #[doc(hidden)]
    pub fn hold_coverage(&self) -> HoldCoverage {
        self.backend_as::<EtcdBackend>()
            .and_then(|backend| backend.current_session())
            .map(|session| session.coverage())
            .unwrap_or_default()
    }
}
