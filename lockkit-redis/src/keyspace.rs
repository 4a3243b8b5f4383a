//! Faster loss signals from the server's keyspace notifications, where the server sends them.
//!
//! A hold whose record is deleted behind its holder's back (`DEL`, an eviction, an expiry
//! the holder did not see coming) is otherwise noticed at the next renewal, up to
//! `renew_every` later. When the server publishes keyspace events for deletions
//! (`notify-keyspace-events` includes `K` and one of `g`, `x`, `e` or `A`), each hold's record
//! channel `__keyspace@<db>__:<record key>` is subscribed on the provider's pub/sub
//! connection while the hold lives, and every event on it but the `expire` of our own
//! renewals makes the record a *suspect*: the watchdog reads it at once (`GET`) and declares
//! the hold lost when the record is not ours any more. The `GET` matters: a release of our own
//! deletes the record too, and the lock may be ours again by the time the event arrives. The
//! subscription's confirmation makes the record a suspect as well, which covers a deletion
//! before the subscription and any gap of the connection.
//!
//! The server's setting is read with `CONFIG GET` at the first hold and again at most once a
//! minute while holds are taken; a server that does not publish these events (the default),
//! or an ACL user that may not read the setting or subscribe to the channels, costs nothing
//! more than that read, and its holds learn of a deletion at the next renewal as before.
//! `FLUSHALL` and `FLUSHDB` publish no per-key events, so they are noticed at the next
//! renewal in any case.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::store::connection::Store;
use lockkit_core::sync::lock_or_recover;

/// How long the server's answer about keyspace events is trusted before it is read again.
const RECHECK: Duration = Duration::from_secs(60);

/// Whether `notify-keyspace-events` flags make the server publish, on keyspace channels, the
/// deletion (`g`), expiry (`x`) or eviction (`e`) of a key (`A` is all of them).
pub(crate) fn publishes_deletions(flags: &str) -> bool {
    flags.contains('K') && flags.chars().any(|flag| matches!(flag, 'A' | 'g' | 'x' | 'e'))
}

/// What the server says about keyspace events, and the names of the channels.
#[derive(Debug)]
pub(crate) struct Keyspace {
    /// `__keyspace@<db>__:`, the start of every record channel.
    prefix: String,
    /// Whether the server publishes deletions, and when that was read.
    known: Mutex<Option<(bool, Instant)>>,
    /// Taken while the setting is read, so that it is read once at a time.
    reading: tokio::sync::Mutex<()>,
}

impl Keyspace {
    /// The keyspace of database `db`.
    pub(crate) fn new(db: i64) -> Self {
        Self { prefix: format!("__keyspace@{db}__:"), known: Mutex::new(None), reading: tokio::sync::Mutex::new(()) }
    }

    /// The channel of a record key.
    pub(crate) fn channel(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The record key of a keyspace channel, or `None` for another channel.
    pub(crate) fn key_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel.strip_prefix(&self.prefix)
    }

    /// What was read about the server recently enough to trust, if anything.
    pub(crate) fn fresh(&self) -> Option<bool> {
        lock_or_recover(&self.known).filter(|(_, at)| at.elapsed() < RECHECK).map(|(publishes, _)| publishes)
    }

    /// Whether the server publishes deletions: read from it unless known recently. A server
    /// that does not answer, or refuses `CONFIG GET`, counts as one that does not.
    pub(crate) async fn publishes_deletions(&self, store: &Store) -> bool {
        if let Some(publishes) = self.fresh() {
            return publishes;
        }
        let _reading = self.reading.lock().await;
        if let Some(publishes) = self.fresh() {
            return publishes;
        }
        let publishes = match store.keyspace_events().await {
            Ok(flags) => publishes_deletions(&flags),
            Err(error) => {
                tracing::debug!(%error, "could not read notify-keyspace-events; deletions are seen at renewal");
                false
            }
        };
        *lock_or_recover(&self.known) = Some((publishes, Instant::now()));
        publishes
    }
}

/// Records to read at once, as their keyspace channels told; the watchdog reads them.
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    keys: Mutex<HashSet<String>>,
    pub(crate) added: Notify,
}

impl Suspects {
    /// Marks record `key` for reading.
    pub(crate) fn add(&self, key: &str) {
        lock_or_recover(&self.keys).insert(key.to_owned());
        self.added.notify_one();
    }

    /// The records marked so far, forgetting them.
    pub(crate) fn take(&self) -> HashSet<String> {
        std::mem::take(&mut *lock_or_recover(&self.keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_are_published_with_keyspace_events_of_a_deleting_class() {
        for flags in ["KA", "Kg", "Kx", "Ke", "KEA", "gK$", "AKE"] {
            assert!(publishes_deletions(flags), "{flags:?}");
        }
        for flags in ["", "K", "E", "EA", "Eg", "K$lh", "Ez"] {
            assert!(!publishes_deletions(flags), "{flags:?}");
        }
    }

    #[test]
    fn channels_name_their_record() {
        let keyspace = Keyspace::new(3);
        let channel = keyspace.channel("lockkit:{a:b}");
        assert_eq!(channel, "__keyspace@3__:lockkit:{a:b}");
        assert_eq!(keyspace.key_of(&channel), Some("lockkit:{a:b}"));
        assert_eq!(keyspace.key_of("lockkit:wake:x"), None);
        assert_eq!(keyspace.key_of("__keyspace@4__:lockkit:{a}"), None);
    }
}
