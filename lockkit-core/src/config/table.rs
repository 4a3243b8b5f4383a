//! The scheme table: which backend serves which URL scheme ([`register`], [`lookup`]), and
//! [`connect`] through it. The memory backend's `mem` is always in it.

use std::sync::RwLock;

use super::scheme::Scheme;
use super::url::StoreUrl;
use crate::memory::SCHEME as MEMORY;
use crate::sync::{read_or_recover, write_or_recover};
use crate::{Error, LockProvider, Result};

static TABLE: RwLock<Vec<Scheme>> = RwLock::new(Vec::new());

/// Adds `scheme` to the table that [`connect`] dispatches on. A scheme registered again
/// replaces the earlier entry, so registering the same backend twice is harmless.
pub fn register(scheme: Scheme) {
    let mut table = write_or_recover(&TABLE);
    table.retain(|entry| !entry.names.iter().any(|name| scheme.names.contains(name)));
    table.push(scheme);
}

/// The entry that serves URL scheme `name`, if one is registered (`mem` always is).
pub fn lookup(name: &str) -> Option<Scheme> {
    if MEMORY.serves(name) {
        return Some(MEMORY);
    }
    let table = read_or_recover(&TABLE);
    table.iter().find(|entry| entry.serves(name)).copied()
}

/// The schemes [`connect`] serves now, sorted.
pub fn registered() -> Vec<&'static str> {
    let table = read_or_recover(&TABLE);
    let mut names: Vec<&'static str> =
        table.iter().chain([&MEMORY]).flat_map(|entry| entry.names.iter().copied()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Connects to the store named by `url` through the scheme table.
///
/// Use `lockkit::connect` from the facade crate, which registers the backends its
/// features build in first and says which feature a known scheme needs.
///
/// # Errors
///
/// [`Error::InvalidConfig`] for a URL that cannot be used or a scheme nobody registered;
/// the backend's errors when its store cannot be reached.
pub async fn connect(url: &str) -> Result<LockProvider> {
    let parsed = StoreUrl::parse(url)?;
    let Some(scheme) = lookup(parsed.scheme()) else {
        let known: Vec<String> = registered().into_iter().map(|name| format!("{name}://")).collect();
        return Err(Error::invalid_config(
            "lockkit",
            format!("unknown scheme {:?} in {}; use one of {}", parsed.scheme(), parsed.redacted(), known.join(", ")),
        ));
    };
    (scheme.connect)(parsed).await
}
