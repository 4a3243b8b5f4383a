//! [`FencedResource`]: the in-memory reference of a fence sink, and the fenced store of the
//! chaos runs and examples.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use lockkit_core::{Fence, FenceMode, FencingToken};
use lockkit_fence::{FenceError, FenceSink, FenceState, decide};

/// A write refused because a newer holder has written since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleToken {
    /// The token the write carried.
    pub offered: FencingToken,
    /// The highest token the resource has accepted.
    pub highest: FencingToken,
}

impl std::fmt::Display for StaleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stale fencing token {}: the resource has already accepted token {}", self.offered, self.highest)
    }
}

impl std::error::Error for StaleToken {}

/// A resource protected by fencing tokens, as Kleppmann's "How to do distributed locking"
/// describes: it accepts a write only when its token is not below the highest it has seen,
/// so a former holder that wakes up after its lease cannot overwrite a newer holder's work.
///
/// It is the in-memory reference of [`FenceSink`] (for `FencedResource<Vec<u8>>`: named
/// resources, each bound to the lock of its first write, checked with a guard's
/// [`Fence`]), and keeps its token-only API for one unnamed resource: [`write`](Self::write),
/// [`read`](Self::read), [`accepted`](Self::accepted). Both follow the same rule
/// ([`lockkit_fence::decide`]): a write is refused below the highest accepted token and raises
/// it; a read is refused below the highest write token and records nothing, so readers come
/// back in any order and never raise the bar for the writers after them (contract
/// behaviour 30).
///
/// ```
/// use lockkit_core::FencingToken;
/// use lockkit_testkit::FencedResource;
///
/// let resource: FencedResource = FencedResource::new();
/// resource.write(FencingToken::new(34), "from the new holder").unwrap();
/// assert!(resource.write(FencingToken::new(33), "from the paused old holder").is_err());
/// assert_eq!(resource.accepted().len(), 1);
///
/// // Readers of a read-write lock: checked against writes only, in any order among them;
/// // a read records nothing.
/// resource.read(FencingToken::new(36)).unwrap();
/// resource.read(FencingToken::new(35)).unwrap();
/// assert!(resource.read(FencingToken::new(33)).is_err());
/// assert_eq!(resource.highest(), Some(FencingToken::new(34)));
/// ```
#[derive(Debug)]
pub struct FencedResource<T = String> {
    state: Mutex<HashMap<String, Slot<T>>>,
}

/// One resource: the unnamed one of the token-only API is `""`.
#[derive(Debug)]
struct Slot<T> {
    /// The lock of the first write through [`FenceSink`]; `None` while only the token-only
    /// API wrote (which binds nothing).
    lock: Option<String>,
    /// The highest token accepted for a write.
    highest: Option<FencingToken>,
    accepted: Vec<(FencingToken, T)>,
    rejected: usize,
}

impl<T> Slot<T> {
    /// Refuses `token`, and counts the refusal, when a write with a greater token was accepted
    /// before.
    fn admit(&mut self, token: FencingToken) -> Result<(), StaleToken> {
        match self.highest {
            Some(highest) if token < highest => {
                self.rejected += 1;
                Err(StaleToken { offered: token, highest })
            }
            _ => Ok(()),
        }
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self { lock: None, highest: None, accepted: Vec::new(), rejected: 0 }
    }
}

/// The name of the token-only API's resource.
const UNNAMED: &str = "";

impl<T: Clone> FencedResource<T> {
    /// An empty resource.
    pub fn new() -> Self {
        Self { state: Mutex::new(HashMap::new()) }
    }

    fn state(&self) -> MutexGuard<'_, HashMap<String, Slot<T>>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `value` if `token` is not below the highest token accepted so far.
    ///
    /// # Errors
    ///
    /// [`StaleToken`] when a write with a greater token was accepted before.
    pub fn write(&self, token: FencingToken, value: impl Into<T>) -> Result<(), StaleToken> {
        let mut state = self.state();
        let slot = state.entry(UNNAMED.to_owned()).or_default();
        slot.admit(token)?;
        slot.highest = Some(token);
        slot.accepted.push((token, value.into()));
        Ok(())
    }

    /// Reads the latest value for a reader of a read-write lock holding `token`: a reader
    /// is compared with the highest *write* token only, since two readers may come back in
    /// either order, and a read records nothing (contract behaviours 21 and 30).
    ///
    /// # Errors
    ///
    /// [`StaleToken`] when a write with a greater token was accepted before: a newer writer
    /// has held the lock since this reader's grant.
    pub fn read(&self, token: FencingToken) -> Result<Option<T>, StaleToken> {
        let mut state = self.state();
        let slot = state.entry(UNNAMED.to_owned()).or_default();
        slot.admit(token)?;
        Ok(slot.accepted.last().map(|(_, value)| value.clone()))
    }

    /// Every accepted write of the unnamed resource, in order.
    pub fn accepted(&self) -> Vec<(FencingToken, T)> {
        self.state().get(UNNAMED).map(|slot| slot.accepted.clone()).unwrap_or_default()
    }

    /// Every accepted write of `resource` (through [`FenceSink`]), in order.
    pub fn accepted_of(&self, resource: &str) -> Vec<(FencingToken, T)> {
        self.state().get(resource).map(|slot| slot.accepted.clone()).unwrap_or_default()
    }

    /// How many writes and reads were refused, over every resource.
    pub fn rejected(&self) -> usize {
        self.state().values().map(|slot| slot.rejected).sum()
    }

    /// The highest token accepted so far by the unnamed resource.
    pub fn highest(&self) -> Option<FencingToken> {
        self.state().get(UNNAMED).and_then(|slot| slot.highest)
    }

    /// Decides an operation on `resource` through the one rule (counting a refusal) and, when
    /// it is admitted, runs `then` on the resource, under one lock: one atomic step.
    fn admit<R>(
        &self,
        resource: &str,
        fence: &Fence,
        access: FenceMode,
        then: impl FnOnce(&mut Slot<T>) -> R,
    ) -> Result<R, FenceError> {
        lockkit_fence::check_resource(resource)?;
        let mut state = self.state();
        let slot = state.entry(resource.to_owned()).or_default();
        // A resource written only through the token-only API is bound to no lock yet.
        let kept = slot
            .highest
            .map(|highest| FenceState { lock: slot.lock.clone().unwrap_or_else(|| fence.lock().to_string()), highest });
        match decide(resource, kept.as_ref(), fence, access) {
            Ok(next) => {
                if let Some(next) = next {
                    slot.lock = Some(next.lock);
                    slot.highest = Some(next.highest);
                }
                Ok(then(slot))
            }
            Err(refused) => {
                slot.rejected += 1;
                Err(refused)
            }
        }
    }
}

impl<T: Clone> Default for FencedResource<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl FenceSink for FencedResource<Vec<u8>> {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn write(&self, resource: &str, fence: &Fence, value: &[u8]) -> Result<(), FenceError> {
        self.admit(resource, fence, FenceMode::Write, |slot| slot.accepted.push((fence.token(), value.to_vec())))
    }

    async fn read(&self, resource: &str, fence: &Fence) -> Result<Option<Vec<u8>>, FenceError> {
        self.admit(resource, fence, FenceMode::Read, |slot| slot.accepted.last().map(|(_, value)| value.clone()))
    }

    async fn state(&self, resource: &str) -> Result<Option<FenceState>, FenceError> {
        lockkit_fence::check_resource(resource)?;
        let state = self.state();
        Ok(state.get(resource).and_then(|slot| {
            let highest = slot.highest?;
            Some(FenceState { lock: slot.lock.clone().unwrap_or_default(), highest })
        }))
    }
}
