//! Redis's eviction policy and lock records: a server with a `maxmemory` limit and a policy
//! other than `noeviction` may evict a lock's record, which breaks exclusion; the provider
//! warns of it when it connects.

use crate::store::connection::Store;

/// Logs a warning when the server may evict lock records (a `maxmemory` limit with a policy
/// other than `noeviction`): an evicted record is a lock another client can take while its
/// holder learns of the loss only at its next renewal. A warning and not an error, since
/// managed services often set such a policy and the operator may have memory to spare; "Tokens,
/// restarts and failovers" on the guide's Redis page (`src/guide/backends/redis.md`) says why
/// `noeviction` is needed.
pub(crate) async fn warn_if_evicting(store: &Store, address: &str) {
    if let Some(eviction) = store.eviction().await.filter(|eviction| eviction.may_evict_locks()) {
        tracing::warn!(
            server = %address,
            maxmemory = eviction.max_memory,
            policy = %eviction.policy,
            "this Redis server may evict lock records when it runs out of memory, which breaks exclusion: \
             set maxmemory-policy to noeviction"
        );
    }
}
