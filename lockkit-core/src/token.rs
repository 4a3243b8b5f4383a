//! Fencing tokens.

use std::fmt;

/// A 64-bit fencing token: strictly greater for every fresh acquisition of a lock name on
/// one store than for any acquisition before it.
///
/// Pass it with every write the lock protects and have the resource reject a write whose
/// token is below the highest it has seen; that is what keeps a paused or partitioned former
/// holder from corrupting data (see Kleppmann, "How to do distributed locking"). A reentrant
/// acquisition carries the token of the hold it reenters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value as issued by a store.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value, for sending along with a write.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}
