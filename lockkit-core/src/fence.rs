//! The credential a guard gives to a fenced resource: [`Fence`], the lock's identity
//! ([`LockId`]) and the mode of the hold ([`FenceMode`]).
//!
//! A fencing token means something only next to the tokens of the same lock: the same name on
//! the same store. A [`Fence`] carries all three things a resource needs to check a write
//! (which lock, which token, a write or a read), so that a resource bound to one lock can
//! refuse the token of another instead of comparing numbers that mean nothing together.
//! Resources that check fences live in the `lockkit-fence` crate (`lockkit::fence`).
//!
//! # The store's identity
//!
//! [`LockId::store`] names the store in text that is the same in every process and every
//! provider that reaches it, and never contains credentials: it is derived from the store's
//! URL by [`StoreUrl::identity`](crate::config::StoreUrl::identity) (the TLS scheme folded
//! into the plain one, host names in lower case and sorted, the database, prefix, chroot or
//! schema that makes the store's key space). Each backend documents what it puts there. Where
//! processes reach one store through different addresses (a load balancer, a DNS alias, a
//! Redis Cluster seeded with different nodes), give every provider the same name with the
//! option `store_id` (`?store_id=orders-db` or
//! [`LockProvider::with_store_id`](crate::LockProvider::with_store_id)).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::{Error, FencingToken, HoldKind, LockName, Result};

/// The longest store identity accepted, in bytes.
pub const MAX_STORE_ID_LEN: usize = 512;

/// The environment variable with the lock's name (`lockkit run`).
pub const LOCK_NAME_ENV: &str = "LOCKKIT_LOCK";
/// The environment variable with the hold's fencing token (`lockkit run`).
pub const TOKEN_ENV: &str = "LOCKKIT_FENCING_TOKEN";
/// The environment variable with the lock's identity as text, [`LockId`]'s `Display` form.
pub const LOCK_ID_ENV: &str = "LOCKKIT_LOCK_ID";
/// The environment variable with the hold's mode: `write` or `read`.
pub const MODE_ENV: &str = "LOCKKIT_FENCE_MODE";

/// Whether a fenced operation writes or only reads (contract behaviours 21 and 30).
///
/// A write is checked against the highest token the resource has accepted and raises it; a
/// read is checked against the highest token a *write* carried and never raises anything.
/// Exclusive holds, write holds, semaphore permits and leadership fence as writes; read holds
/// of a read-write lock fence as reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceMode {
    /// A write: refused below the highest accepted token; raises it.
    Write,
    /// A read: refused below the highest write token; raises nothing.
    Read,
}

impl FenceMode {
    /// The mode a hold of `kind` fences with: [`Read`](Self::Read) for a read hold,
    /// [`Write`](Self::Write) for every other kind.
    pub fn of(kind: &HoldKind) -> Self {
        match kind {
            HoldKind::Read => Self::Read,
            _ => Self::Write,
        }
    }

    /// `"write"` or `"read"`: the text form, as the SQL function and `lockkit run` take it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::Read => "read",
        }
    }
}

impl fmt::Display for FenceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FenceMode {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "write" => Ok(Self::Write),
            "read" => Ok(Self::Read),
            other => Err(invalid(format!("fence mode {other:?} is neither write nor read"))),
        }
    }
}

/// The identity of one lock: its store and its name. Tokens are comparable only between
/// holds of one `LockId`.
///
/// Its text form is `STORE#NAME` (`redis://10.0.0.7:6379/0?key_prefix=lockkit#orders/42`): the
/// store's identity never contains `#`, so the text splits at the first one, and the name
/// may contain anything a lock name may.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId {
    store: Arc<str>,
    name: LockName,
}

impl LockId {
    /// The lock `name` on the store identified by `store`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a store identity that is empty, longer than
    /// [`MAX_STORE_ID_LEN`], or contains `#` or a control character.
    pub fn new(store: &str, name: LockName) -> Result<Self> {
        check_store_id(store)?;
        Ok(Self { store: Arc::from(store), name })
    }

    /// `store` made usable as an identity (`#` and control characters dropped, cut to
    /// [`MAX_STORE_ID_LEN`], `lockkit` when nothing is left), for an identity a backend derived:
    /// a lock always has one.
    pub(crate) fn lossy(store: &str, name: LockName) -> Self {
        let mut kept = String::with_capacity(store.len().min(MAX_STORE_ID_LEN));
        for c in store.chars().filter(|c| *c != '#' && !c.is_control()) {
            if kept.len() + c.len_utf8() > MAX_STORE_ID_LEN {
                break;
            }
            kept.push(c);
        }
        if kept.is_empty() {
            kept.push_str("lockkit");
        }
        Self { store: Arc::from(kept), name }
    }

    /// The store's identity.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.store, self.name)
    }
}

impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockId({self})")
    }
}

impl FromStr for LockId {
    type Err = Error;

    /// Reads the `STORE#NAME` form.
    fn from_str(text: &str) -> Result<Self> {
        let Some((store, name)) = text.split_once('#') else {
            return Err(invalid(format!(
                "{text:?} is not a lock identity; it is written STORE#NAME, as in $LOCKKIT_LOCK_ID"
            )));
        };
        Self::new(store, LockName::new(name)?)
    }
}

/// Checks a store identity given by hand (option `store_id`) or read back from text.
///
/// # Errors
///
/// [`Error::InvalidConfig`] saying what to change.
pub fn check_store_id(store: &str) -> Result<()> {
    match store_id_problem(store) {
        Some(problem) => Err(invalid(problem)),
        None => Ok(()),
    }
}

/// What is wrong with a store identity, if anything, and what to change.
pub(crate) fn store_id_problem(store: &str) -> Option<String> {
    if store.is_empty() {
        return Some("the store identity is empty; name the store, such as orders-db".to_owned());
    }
    if store.len() > MAX_STORE_ID_LEN {
        return Some(format!("the store identity is {} bytes long; give at most {MAX_STORE_ID_LEN}", store.len()));
    }
    if store.contains('#') || store.chars().any(char::is_control) {
        return Some(format!("the store identity {store:?} contains '#' or a control character; use neither"));
    }
    None
}

/// What a guard gives a fenced resource with each write or read: the lock's identity, the
/// hold's token and its mode. Get one from [`LockGuard::fence`](crate::LockGuard::fence),
/// or in a command run by `lockkit run` from its environment ([`Fence::from_env`]).
///
/// ```
/// use lockkit_core::memory::MemoryLockProvider;
/// use lockkit_core::FenceMode;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let guard = provider.lock("orders/42")?.acquire().await?;
/// let fence = guard.fence();
/// assert_eq!((fence.token(), fence.mode()), (guard.token(), FenceMode::Write));
/// assert_eq!(fence.lock().name().as_str(), "orders/42");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    lock: LockId,
    token: FencingToken,
    mode: FenceMode,
}

impl Fence {
    /// A fence of `lock` with `token`, for `mode`.
    pub fn new(lock: LockId, token: FencingToken, mode: FenceMode) -> Self {
        Self { lock, token, mode }
    }

    /// The lock the token belongs to.
    pub fn lock(&self) -> &LockId {
        &self.lock
    }

    /// The hold's fencing token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether the hold writes or only reads.
    pub fn mode(&self) -> FenceMode {
        self.mode
    }

    /// The environment `lockkit run` gives its command: the lock's name, the token, the
    /// lock's identity and the mode, under [`LOCK_NAME_ENV`], [`TOKEN_ENV`], [`LOCK_ID_ENV`]
    /// and [`MODE_ENV`].
    pub fn env(&self) -> [(&'static str, String); 4] {
        [
            (LOCK_NAME_ENV, self.lock.name.to_string()),
            (TOKEN_ENV, self.token.to_string()),
            (LOCK_ID_ENV, self.lock.to_string()),
            (MODE_ENV, self.mode.to_string()),
        ]
    }

    /// The fence of the hold a command runs under, from the environment `lockkit run` gave
    /// it ([`env`](Self::env)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the variable that is missing or does not parse.
    pub fn from_env() -> Result<Self> {
        let read = |name: &str| {
            std::env::var(name)
                .map_err(|_| invalid(format!("{name} is not set (or not UTF-8); run the command under `lockkit run`")))
        };
        let lock: LockId = read(LOCK_ID_ENV)?.parse()?;
        let token = read(TOKEN_ENV)?;
        let token = token
            .parse::<u64>()
            .map_err(|_| invalid(format!("{TOKEN_ENV}={token:?} is not a fencing token (a number)")))?;
        let mode = read(MODE_ENV)?.parse()?;
        Ok(Self::new(lock, FencingToken::new(token), mode))
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_config("lockkit", message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lock_ids_round_trip_through_text() {
        let id = LockId::new("redis://h:6379/0", LockName::new("a#b c/ü").unwrap()).unwrap();
        assert_eq!(id.to_string(), "redis://h:6379/0#a#b c/ü");
        let back: LockId = id.to_string().parse().unwrap();
        assert_eq!(back, id);
        assert!("no-separator".parse::<LockId>().unwrap_err().to_string().contains("STORE#NAME"));
        assert!("s#".parse::<LockId>().is_err(), "an empty name");
        assert!("#n".parse::<LockId>().is_err(), "an empty store");
    }

    #[test]
    fn bad_store_identities_say_what_to_change() {
        assert!(check_store_id("").unwrap_err().to_string().contains("empty"));
        assert!(check_store_id(&"x".repeat(MAX_STORE_ID_LEN + 1)).unwrap_err().to_string().contains("at most"));
        assert!(check_store_id("a\nb").is_err());
        assert!(check_store_id("orders-db").is_ok());
    }

    #[test]
    fn modes_follow_the_kind() {
        assert_eq!(FenceMode::of(&HoldKind::Read), FenceMode::Read);
        for kind in [HoldKind::Exclusive, HoldKind::Write, HoldKind::Permit { permits: std::num::NonZeroU32::MIN }] {
            assert_eq!(FenceMode::of(&kind), FenceMode::Write);
        }
        assert_eq!("read".parse::<FenceMode>().unwrap(), FenceMode::Read);
        assert!("Write".parse::<FenceMode>().is_err());
    }
}
