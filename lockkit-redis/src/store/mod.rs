//! The commands lockkit sends to Redis, one method per script, over an auto-reconnecting
//! connection per provider and runtime; and the mapping of Redis errors into lockkit's error
//! type.
//!
//! Every call is bounded by the response timeout. A call that times out or loses its
//! connection fails with a retryable [`Error::Connection`](lockkit_core::Error::Connection) whose outcome is **unknown**:
//! the script may have run. Callers resolve that by owner id, never by a blind retry of a
//! write (see backend.rs).
//!
//! A connection's driver task (and its reconnections) run on the runtime that made it, so
//! each runtime the provider is used on gets one of its own ([`PerRuntime`](lockkit_core::home::PerRuntime)): a command never
//! waits on a runtime that shut down or is not being driven, and takes no thread hop. The
//! background work, on lockkit's home runtime, uses the home runtime's.
//!
//! The parts: the script registry (`scripts`), the scripts' vocabulary (`kinds`), the
//! connections (`connection`), one module per script family (`holds`, `renew`, `election`),
//! and reading replies and errors (`reply`).

pub(crate) mod connection;
pub(crate) mod election;
pub(crate) mod holds;
pub(crate) mod kinds;
pub(crate) mod renew;
pub(crate) mod reply;
pub(crate) mod scripts;
