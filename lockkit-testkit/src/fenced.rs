//! [`FencedResource`]: a store that refuses writes carrying a stale fencing token.

use std::sync::{Mutex, PoisonError};

use lockkit_core::FencingToken;

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
/// ```
/// use lockkit_core::FencingToken;
/// use lockkit_testkit::FencedResource;
///
/// let resource: FencedResource = FencedResource::new();
/// resource.write(FencingToken::new(34), "from the new holder").unwrap();
/// assert!(resource.write(FencingToken::new(33), "from the paused old holder").is_err());
/// assert_eq!(resource.accepted().len(), 1);
///
/// // Readers of a read-write lock: checked against writes only, in any order among them,
/// // and a writer after them must be above every reader it follows.
/// resource.read(FencingToken::new(36)).unwrap();
/// resource.read(FencingToken::new(35)).unwrap();
/// assert!(resource.write(FencingToken::new(35), "a stale writer").is_err());
/// ```
#[derive(Debug)]
pub struct FencedResource<T = String> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    /// The highest token of any kind seen: a writer must not be below it.
    highest: Option<FencingToken>,
    /// The highest token a write carried: a reader must not be below it.
    highest_write: Option<FencingToken>,
    accepted: Vec<(FencingToken, T)>,
    rejected: usize,
}

impl<T: Clone> FencedResource<T> {
    /// An empty resource.
    pub fn new() -> Self {
        Self { state: Mutex::new(State { highest: None, highest_write: None, accepted: Vec::new(), rejected: 0 }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `value` if `token` is not below the highest token accepted so far.
    ///
    /// # Errors
    ///
    /// [`StaleToken`] when a write with a greater token was accepted before.
    pub fn write(&self, token: FencingToken, value: impl Into<T>) -> Result<(), StaleToken> {
        let mut state = self.state();
        if let Some(highest) = state.highest
            && token < highest
        {
            state.rejected += 1;
            return Err(StaleToken { offered: token, highest });
        }
        state.highest = Some(token);
        state.highest_write = Some(token);
        state.accepted.push((token, value.into()));
        Ok(())
    }

    /// Reads the latest value for a reader of a read-write lock holding `token`: a reader
    /// is compared with the highest *write* token only, since two readers may come back in
    /// either order; its token then counts for the writers that follow (contract 21).
    ///
    /// # Errors
    ///
    /// [`StaleToken`] when a write with a greater token was accepted before: a newer writer
    /// has held the lock since this reader's grant.
    pub fn read(&self, token: FencingToken) -> Result<Option<T>, StaleToken> {
        let mut state = self.state();
        if let Some(highest) = state.highest_write
            && token < highest
        {
            state.rejected += 1;
            return Err(StaleToken { offered: token, highest });
        }
        state.highest = state.highest.max(Some(token));
        Ok(state.accepted.last().map(|(_, value)| value.clone()))
    }

    /// Every accepted write, in order.
    pub fn accepted(&self) -> Vec<(FencingToken, T)> {
        self.state().accepted.clone()
    }

    /// How many writes were refused.
    pub fn rejected(&self) -> usize {
        self.state().rejected
    }

    /// The highest token accepted so far.
    pub fn highest(&self) -> Option<FencingToken> {
        self.state().highest
    }
}

impl<T: Clone> Default for FencedResource<T> {
    fn default() -> Self {
        Self::new()
    }
}
