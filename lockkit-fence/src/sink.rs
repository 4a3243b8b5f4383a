//! [`FenceSink`]: the one trait of a store that checks fences, and [`FenceState`], what it
//! keeps per resource.

use async_trait::async_trait;
use lockkit_core::{Fence, FencingToken};

use crate::FenceError;

/// What a sink keeps for one resource: the lock it is bound to and the highest token it has
/// accepted for a write. Reads record nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceState {
    /// The lock the resource is bound to, by its first accepted write (`STORE#NAME`).
    pub lock: String,
    /// The highest token accepted for a write.
    pub highest: FencingToken,
}

/// A store that refuses stale writes: it accepts a write of a resource only with the fence of
/// the lock that guards it and a token not below the highest it has accepted, checked and
/// applied in one atomic step of the store (contract behaviours 29-33).
///
/// The store-specific sinks have richer APIs (a check inside your own PostgreSQL transaction,
/// any Redis write, an append to a file); this trait is what they share: a fenced replace and
/// a fenced read of a value, which the conformance kit's fence cases
/// (`lockkit_testkit::fence_conformance!`) check on every sink, a third party's included.
///
/// # Contract
///
/// - [`write`](Self::write) with a write fence whose token is not below the highest accepted
///   replaces the value and raises the highest to the token; a lower token is
///   [`FenceError::Stale`] and changes nothing. An equal token is accepted (a holder writes
///   as often as it needs).
/// - The first accepted write binds the resource to the fence's lock; a fence of another lock
///   is [`FenceError::ForeignLock`] and changes nothing.
/// - [`read`](Self::read) with a fence below the highest accepted write is
///   [`FenceError::Stale`]; a read never raises the highest and never binds.
/// - The highest token survives a restart of the store; no clock is involved.
/// - A resource name that is empty or over the sink's limit, or a read fence given to
///   `write`, is [`FenceError::InvalidInput`] and writes nothing.
#[async_trait]
pub trait FenceSink: Send + Sync + std::fmt::Debug {
    /// A short name for messages: `memory`, `file`, `redis`, `postgres`.
    fn name(&self) -> &'static str;

    /// Replaces the value of `resource` with `value` if `fence` admits it, in one atomic step.
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`], [`FenceError::ForeignLock`], [`FenceError::InvalidInput`]: refused,
    /// nothing written. [`FenceError::NotSetUp`] and [`FenceError::Store`] as the store fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the write applied or not, as a lost reply does; the
    /// check and the write are never separated.
    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError>;

    /// The value of `resource` (`None` when it has none) if `fence` admits the read.
    ///
    /// # Errors
    ///
    /// As for [`write`](Self::write).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read changes nothing.
    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError>;

    /// What the sink keeps for `resource`, without any check: `None` before its first
    /// accepted write.
    ///
    /// # Errors
    ///
    /// [`FenceError::InvalidInput`] for a bad name; store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError>;
}

#[async_trait]
impl<S: FenceSink + ?Sized> FenceSink for std::sync::Arc<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        (**self).write(resource, fence, value).await
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        (**self).read(resource, fence).await
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        (**self).state(resource).await
    }
}
