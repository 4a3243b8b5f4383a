//! [`AsKind`]: a harness whose mutex cases acquire another kind of hold, so that every mutex
//! behaviour is checked on the write side of a read-write lock and on a one-permit semaphore
//! (contract 24), and a third-party backend gains those runs with its one line.

use std::num::NonZeroU32;
use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::HoldKind;

use crate::harness::{FaultResult, Harness, TestClient, Timing, Unsupported};

/// The primitives the mutex cases are run on again.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The mutex itself.
    Mutex,
    /// The write side of a read-write lock.
    WriteLock,
    /// A semaphore of one permit.
    OnePermit,
    /// Candidates of an election.
    Candidate,
}

impl Variant {
    /// The kind of hold the variant's cases acquire.
    pub fn kind(self) -> HoldKind {
        match self {
            Self::Mutex => HoldKind::Exclusive,
            Self::WriteLock => HoldKind::Write,
            Self::OnePermit => HoldKind::Permit { permits: NonZeroU32::MIN },
            Self::Candidate => HoldKind::Candidate { identity: std::sync::Arc::from(&b"lockkit-kit-candidate"[..]) },
        }
    }
}

/// A harness that runs the mutex cases on another kind of hold: everything is the inner
/// harness's, but [`Harness::mutex_kind`].
pub struct AsKind {
    inner: Arc<dyn Harness>,
    kind: HoldKind,
    name: String,
}

impl AsKind {
    /// The mutex cases of `inner`, on holds of `kind`.
    pub fn new(inner: Arc<dyn Harness>, kind: HoldKind) -> Self {
        let name = format!("{} ({:?})", inner.name(), kind);
        Self { inner, kind, name }
    }
}

#[async_trait]
impl Harness for AsKind {
    fn name(&self) -> &str {
        &self.name
    }

    fn mutex_kind(&self) -> HoldKind {
        self.kind.clone()
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        self.inner.client().await
    }

    fn timing(&self) -> Timing {
        self.inner.timing()
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        self.inner.unreachable_client().await
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        self.inner.delete_record(name).await
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        let inner = self.inner.isolated().await?;
        Ok(Arc::new(Self::new(inner, self.kind.clone())))
    }

    async fn restart_store(&self) -> FaultResult {
        self.inner.restart_store().await
    }

    async fn pause_store(&self, paused: bool) -> FaultResult {
        self.inner.pause_store(paused).await
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        self.inner.child_env()
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        self.inner.invalid_configs().await
    }
}
