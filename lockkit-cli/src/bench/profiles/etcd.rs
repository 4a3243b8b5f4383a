//! etcd (the CLI's `etcd` feature): the floor is a `Get` round trip and a put plus delete of a
//! key bound to a lease, on a client of etcd-client; etcd's own `Lock`/`Unlock` service cycle
//! is measured beside it.

use std::time::{Duration, Instant};

use lockkit::etcd::etcd_client::{self, LockOptions, PutOptions};
use lockkit::etcd::{EtcdLockProvider, EtcdLockProviderBuilder};

use crate::bench::profile::{Boxed, Floor, FloorFigure, Profile, Targets, floor_failure};
use crate::bench::url::{Url, run_id};
use crate::exit::Failure;

/// The etcd profile.
pub(crate) struct Etcd;

impl Profile for Etcd {
    fn backend(&self) -> &'static str {
        "etcd"
    }

    /// No target of its own: etcd's figures are read against etcd's own Lock+Unlock cycle,
    /// measured in the floor (docs/PERFORMANCE.md).
    fn targets(&self) -> Targets {
        Targets::NONE
    }

    /// The TTL is whole seconds, 2 s at least.
    fn short_lease(&self) -> Option<(&'static str, Duration)> {
        Some(("ttl", Duration::from_secs(3)))
    }

    fn renewal_note(&self) -> Option<&'static str> {
        Some(
            "etcd renews the provider's one lease, not each hold: per third of the TTL, one keep-alive and, below 1,000 holds, one LeaseTimeToLive that lists the lease's keys (loss of a deleted key); from 1,000 holds a watch on the prefix tells deletions instead (not counted)",
        )
    }

    fn floor<'a>(&'a self, url: &'a Url) -> Boxed<'a, Result<Option<Box<dyn Floor>>, Failure>> {
        Box::pin(async move { Ok(Some(Box::new(EtcdFloor::open(url).await?) as Box<dyn Floor>)) })
    }
}

/// A client of its own, its provider's lease, and the keys it plays with.
struct EtcdFloor {
    /// Kept so that the lease lives as long as the floor.
    _provider: EtcdLockProvider,
    client: etcd_client::Client,
    lease: i64,
    /// The key put and deleted for the floor.
    key: String,
    /// The name given to etcd's own Lock service.
    lock_name: String,
}

impl EtcdFloor {
    async fn open(url: &Url) -> Result<Self, Failure> {
        let open =
            |e: lockkit::Error| Failure::from_lock_error(&e, &format!("floor: cannot open a client of {}", url.shown));
        let provider = EtcdLockProviderBuilder::from_url(&url.store).and_then(EtcdLockProviderBuilder::build);
        let provider = provider.map_err(open)?;
        let client = provider.etcd_client().await.map_err(open)?;
        let lease = provider.lease_id().await.map_err(open)?;
        let probe = provider.lock_prefix("probe").map_err(|e| Failure::from_lock_error(&e, "floor"))?;
        let root = probe.split_once('/').map(|(root, _)| root.to_owned()).unwrap_or_default();
        let id = run_id();
        Ok(Self {
            _provider: provider,
            client,
            lease,
            key: format!("{root}/lockkit-bench-floor-{id}"),
            lock_name: format!("{root}/lockkit-bench-floor-{id}-lock-service"),
        })
    }
}

/// The round trips the floor times, in the order of its samples.
const FIGURES: &[FloorFigure] = &[
    FloorFigure::other("get", "Get"),
    FloorFigure::main("put_delete", "put+delete bound to a lease"),
    FloorFigure::other_p50("lock_service", "etcd's own Lock+Unlock service cycle, no lockkit,"),
];

impl Floor for EtcdFloor {
    fn describe(&self) -> &'static str {
        "etcd put+delete of a key bound to a lease (etcd-client, one client)"
    }

    fn figures(&self) -> &'static [FloorFigure] {
        FIGURES
    }

    fn sample<'a>(&'a mut self, url: &'a Url) -> Boxed<'a, Result<Vec<Option<Duration>>, Failure>> {
        Box::pin(async move {
            let failed = |e: etcd_client::Error| floor_failure(url, e);
            let start = Instant::now();
            self.client.get(self.key.as_str(), None).await.map_err(failed)?;
            let get = start.elapsed();
            let start = Instant::now();
            let put = PutOptions::new().with_lease(self.lease);
            self.client.put(self.key.as_str(), "", Some(put)).await.map_err(failed)?;
            self.client.delete(self.key.as_str(), None).await.map_err(failed)?;
            let put_delete = start.elapsed();
            // etcd's own Lock service, on the same lease: lock, then unlock by the key it returns.
            let start = Instant::now();
            let options = LockOptions::new().with_lease(self.lease);
            let locked = self.client.lock(self.lock_name.as_str(), Some(options)).await.map_err(failed)?;
            self.client.unlock(locked.key().to_vec()).await.map_err(failed)?;
            Ok(vec![Some(get), Some(put_delete), Some(start.elapsed())])
        })
    }
}
