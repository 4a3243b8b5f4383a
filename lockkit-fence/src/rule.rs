//! The rule every sink applies, written once for the sinks that run it in Rust (memory, files);
//! the Redis script and the SQL function apply the same rule inside their store.

use lockkit_core::{Fence, FenceMode};

use crate::{FenceError, FenceState};

/// The longest resource name, in bytes, as for lock names.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// Checks a resource name: not empty, at most [`MAX_RESOURCE_LEN`] bytes, no NUL (which
/// PostgreSQL's `text` cannot hold).
///
/// # Errors
///
/// [`FenceError::InvalidInput`] saying what to change.
pub fn check_resource(resource: &str) -> Result<(), FenceError> {
    if resource.is_empty() {
        return Err(FenceError::invalid("the resource name is empty; name what the write protects, such as orders/42"));
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(FenceError::invalid(format!(
            "the resource name is {} bytes long; give at most {MAX_RESOURCE_LEN} (name the resource, not its content)",
            resource.len()
        )));
    }
    if resource.contains('\0') {
        return Err(FenceError::invalid("the resource name contains a NUL character; leave it out"));
    }
    Ok(())
}

/// Decides an operation on `resource` whose sink keeps `state`: `access` is what the
/// operation does ([`FenceMode::Write`] replaces or changes the value, [`FenceMode::Read`]
/// only reads it). Returns the state to keep after an accepted write, or `None` for an
/// accepted read, which records nothing.
///
/// - A fence of another lock than the one the resource is bound to is
///   [`FenceError::ForeignLock`].
/// - A token below the highest accepted is [`FenceError::Stale`], for a write and for a read
///   alike: the highest is raised by writes only, so it is both "the highest of any kind"
///   a writer must not be below and "the highest write" a reader must not be below
///   (contract behaviours 21 and 30).
/// - A read fence cannot write: [`FenceError::InvalidInput`].
///
/// # Errors
///
/// As above; nothing is to be written then.
pub fn decide(
    resource: &str,
    state: Option<&FenceState>,
    fence: &Fence,
    access: FenceMode,
) -> Result<Option<FenceState>, FenceError> {
    check_resource(resource)?;
    if access == FenceMode::Write && fence.mode() == FenceMode::Read {
        return Err(FenceError::invalid(format!(
            "resource {resource:?}: a read fence (a read guard's) cannot write; write under a write, exclusive or permit hold"
        )));
    }
    let lock = fence.lock().to_string();
    if let Some(state) = state {
        if state.lock != lock {
            return Err(FenceError::ForeignLock {
                resource: resource.to_owned(),
                expected: state.lock.clone(),
                got: fence.lock().clone(),
            });
        }
        if fence.token() < state.highest {
            return Err(FenceError::Stale {
                resource: resource.to_owned(),
                token: fence.token(),
                highest: state.highest,
            });
        }
    }
    Ok(match access {
        FenceMode::Write => Some(FenceState { lock, highest: fence.token() }),
        FenceMode::Read => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use lockkit_core::{FencingToken, LockId, LockName};

    use super::*;

    fn fence(lock: &str, token: u64, mode: FenceMode) -> Fence {
        Fence::new(LockId::new("mem://s", LockName::new(lock).unwrap()).unwrap(), FencingToken::new(token), mode)
    }

    #[test]
    fn writes_raise_reads_only_compare() {
        let state = decide("r", None, &fence("a", 5, FenceMode::Write), FenceMode::Write).unwrap().unwrap();
        assert_eq!(state.highest, FencingToken::new(5));
        assert!(decide("r", Some(&state), &fence("a", 4, FenceMode::Write), FenceMode::Write).unwrap_err().is_stale());
        assert!(decide("r", Some(&state), &fence("a", 4, FenceMode::Read), FenceMode::Read).unwrap_err().is_stale());
        assert_eq!(decide("r", Some(&state), &fence("a", 9, FenceMode::Read), FenceMode::Read).unwrap(), None);
        let again = decide("r", Some(&state), &fence("a", 5, FenceMode::Write), FenceMode::Write).unwrap();
        assert_eq!(again, Some(state.clone()), "an equal token writes again");
        let foreign = decide("r", Some(&state), &fence("b", 9, FenceMode::Write), FenceMode::Write).unwrap_err();
        assert!(matches!(foreign, FenceError::ForeignLock { .. }), "{foreign}");
        assert!(decide("r", None, &fence("a", 1, FenceMode::Read), FenceMode::Write).is_err(), "a read cannot write");
    }

    #[test]
    fn bad_names_say_what_to_change() {
        assert!(check_resource("").unwrap_err().to_string().contains("empty"));
        assert!(check_resource(&"x".repeat(1025)).unwrap_err().to_string().contains("at most 1024"));
        assert!(check_resource("a\0b").is_err());
        assert!(check_resource(&"é".repeat(512)).is_ok());
    }
}
