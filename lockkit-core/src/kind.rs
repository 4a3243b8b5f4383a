//! The kinds of hold one grant path serves.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use crate::Capabilities;

/// What kind of hold an acquisition asks for, and a guard proves.
///
/// Every primitive of lockkit goes through one grant path keyed by this kind: a mutex asks
/// for [`Exclusive`](Self::Exclusive), the two sides of a read-write lock for
/// [`Read`](Self::Read) and [`Write`](Self::Write), a counting semaphore for one
/// [`Permit`](Self::Permit) out of N, an election for leadership as a
/// [`Candidate`](Self::Candidate). A backend declares in its [`Capabilities`] which kinds
/// beyond `Exclusive` it grants, and the core refuses the others with
/// [`Error::Unsupported`](crate::Error::Unsupported) before the backend is asked, so a backend
/// written before a kind existed can never grant it as a mutex by mistake.
#[derive(Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldKind {
    /// One holder at a time: a mutex.
    Exclusive,
    /// A shared hold of a read-write lock: any number of readers, never with a writer.
    Read,
    /// The exclusive hold of a read-write lock.
    Write,
    /// One permit of a counting semaphore of `permits` permits: at most `permits` holders.
    Permit {
        /// How many permits the semaphore has in all.
        permits: NonZeroU32,
    },
    /// Leadership of an election, published with the candidate's identity while it leads.
    Candidate {
        /// What the leader publishes about itself (an address such as `host:port`, say).
        identity: Arc<[u8]>,
    },
}

impl HoldKind {
    /// Whether a backend with `capabilities` grants this kind.
    pub fn is_supported_by(&self, capabilities: &Capabilities) -> bool {
        match self {
            Self::Exclusive => true,
            Self::Read | Self::Write => capabilities.rw_lock,
            Self::Permit { .. } => capabilities.semaphore,
            Self::Candidate { .. } => capabilities.election,
        }
    }

    /// A noun phrase for messages: "an exclusive hold", "a read hold", ...
    pub fn describe(&self) -> String {
        match self {
            Self::Exclusive => "an exclusive hold".to_owned(),
            Self::Read => "a read hold".to_owned(),
            Self::Write => "a write hold".to_owned(),
            Self::Permit { permits } => format!("a permit of a {permits}-permit semaphore"),
            Self::Candidate { .. } => "a candidacy in an election".to_owned(),
        }
    }
}

impl fmt::Debug for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exclusive => f.write_str("Exclusive"),
            Self::Read => f.write_str("Read"),
            Self::Write => f.write_str("Write"),
            Self::Permit { permits } => f.debug_struct("Permit").field("permits", permits).finish(),
            Self::Candidate { identity } => {
                f.debug_struct("Candidate").field("identity", &String::from_utf8_lossy(identity)).finish()
            }
        }
    }
}

impl fmt::Display for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exclusive_needs_no_declaration() {
        let none = Capabilities::NONE;
        assert!(HoldKind::Exclusive.is_supported_by(&none));
        let permits = NonZeroU32::MIN;
        for kind in [
            HoldKind::Read,
            HoldKind::Write,
            HoldKind::Permit { permits },
            HoldKind::Candidate { identity: Arc::from(&b"host:1"[..]) },
        ] {
            assert!(!kind.is_supported_by(&none), "{kind:?}");
        }
        let rw = Capabilities { rw_lock: true, ..Capabilities::NONE };
        assert!(HoldKind::Read.is_supported_by(&rw) && HoldKind::Write.is_supported_by(&rw));
    }
}
