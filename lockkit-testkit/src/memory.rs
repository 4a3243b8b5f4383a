//! The conformance harness of the in-process memory backend: the reference for how a
//! backend plugs into the kit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::memory::{MemoryLockProvider, MemoryStore};

use crate::harness::{ClientFaults, FaultResult, Harness, TestClient, Timing, Unsupported};

/// Runs the kit on a [`MemoryStore`], each client a [`MemoryLockProvider`] of its own.
#[derive(Debug)]
pub struct MemoryHarness {
    store: MemoryStore,
    lease: Option<Duration>,
}

impl MemoryHarness {
    /// Clients without leases: the embedded default.
    pub fn new() -> Self {
        Self { store: MemoryStore::new(), lease: None }
    }

    /// Clients whose holds have a one-second lease, renewed by the watchdog, so that every
    /// lease and loss case runs.
    pub fn with_lease() -> Self {
        Self { store: MemoryStore::new(), lease: Some(Duration::from_secs(1)) }
    }
}

impl Default for MemoryHarness {
    fn default() -> Self {
        Self::new()
    }
}

struct MemoryFaults(MemoryLockProvider);

#[async_trait]
impl ClientFaults for MemoryFaults {
    async fn kill(&self) -> FaultResult {
        self.0.kill();
        Ok(())
    }

    async fn blackhole(&self) -> FaultResult {
        self.0.partition(true);
        Ok(())
    }

    async fn heal(&self) -> FaultResult {
        self.0.partition(false);
        Ok(())
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    fn name(&self) -> &str {
        if self.lease.is_some() { "memory (leased)" } else { "memory" }
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        let mut builder = self.store.client_builder();
        if let Some(lease) = self.lease {
            builder = builder.lease(lease);
        }
        let provider = builder.build()?;
        Ok(TestClient::new(provider.clone(), Arc::new(MemoryFaults(provider))))
    }

    fn timing(&self) -> Timing {
        let timing = Timing::new();
        match self.lease {
            Some(lease) => timing.with_lease(lease),
            None => timing,
        }
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let provider = self.client().await.map_err(|_| Unsupported)?;
        provider.faults.blackhole().await?;
        Ok(provider)
    }

    async fn isolated(&self) -> Result<Arc<dyn Harness>, Unsupported> {
        Ok(Arc::new(Self { store: MemoryStore::new(), lease: self.lease }))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        self.store.delete_record(name);
        Ok(())
    }

    async fn restart_store(&self) -> FaultResult {
        self.store.restart();
        Ok(())
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let attempt = |what: &str, builder: lockkit_core::memory::MemoryLockProviderBuilder| {
            (what.to_owned(), builder.store(self.store.clone()).build().map(drop))
        };
        vec![
            attempt("a zero lease", MemoryLockProvider::builder().lease(Duration::ZERO)),
            attempt(
                "renewal slower than the lease",
                MemoryLockProvider::builder().lease(Duration::from_secs(1)).renew_every(Duration::from_secs(2)),
            ),
            attempt(
                "a zero renewal interval",
                MemoryLockProvider::builder().lease(Duration::from_secs(1)).renew_every(Duration::ZERO),
            ),
            attempt(
                "a drift margin as long as the lease",
                MemoryLockProvider::builder().lease(Duration::from_secs(1)).drift(Duration::from_secs(1)),
            ),
            attempt(
                "renewal settings without a lease",
                MemoryLockProvider::builder().renew_every(Duration::from_secs(1)),
            ),
        ]
    }
}
