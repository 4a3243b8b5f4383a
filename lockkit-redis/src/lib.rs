//! The Redis backend of lockkit. Empty until its issue lands: the Lua acquire/release/renew scripts, pub/sub wake-up and batched watchdog will live here.
