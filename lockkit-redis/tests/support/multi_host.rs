//! The kit's harness for a Redis setup that clients reach through one URL naming several hosts
//! (a cluster's nodes, or the sentinels): every client connects through that URL, so there is
//! no proxy per client and the kit's per-client faults do not apply.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_testkit::{FaultResult, Harness, NoFaults, TestClient, Timing, Unsupported};

use super::{LEASE, closed_port, hold_keys, test_builder};

/// What differs between the setups.
#[async_trait]
pub trait Setup: Send + Sync + 'static {
    /// The harness's name in reports: `redis (cluster)`.
    const NAME: &'static str;
    /// The URL's scheme: `redis+cluster`.
    const SCHEME: &'static str;
    /// What follows the hosts in a URL of the setup: `/lockkit` (the master's name) or nothing.
    const PATH: &'static str;
    /// The environment variable that hands the URL of the parent test process to the child
    /// processes of the cross-process cases, which use the parent's setup.
    const URL_ENV: &'static str;

    /// Deletes `keys` (one lock's, in one hash slot) from the setup `url` names; how many there
    /// were.
    async fn delete(&self, url: &str, keys: &[String]) -> i64;

    /// URLs of the setup on `hosts` that a builder refuses, each with what is wrong with it,
    /// besides those of every setup (an unknown option, a mixed scheme).
    fn bad_urls(hosts: &str) -> Vec<(&'static str, String)>;
}

/// Runs the kit through the URL of a setup `S`.
pub struct MultiHostHarness<S> {
    url: String,
    setup: S,
}

impl<S: Setup> MultiHostHarness<S> {
    /// On the URL the parent test process handed down (with `in_child` as the setup), or else
    /// on the URL and the setup that `start` gives.
    pub async fn handed_down_or(in_child: S, start: impl Future<Output = (String, S)>) -> Self {
        match std::env::var(S::URL_ENV) {
            Ok(url) if !url.is_empty() => Self { url, setup: in_child },
            _ => {
                let (url, setup) = start.await;
                Self { url, setup }
            }
        }
    }

    /// `host:port,host:port` of the URL.
    pub fn hosts(&self) -> String {
        let after_scheme = self.url.strip_prefix(S::SCHEME).and_then(|rest| rest.strip_prefix("://"));
        after_scheme.unwrap_or_default().split('/').next().unwrap_or_default().to_owned()
    }
}

#[async_trait]
impl<S: Setup> Harness for MultiHostHarness<S> {
    fn name(&self) -> &str {
        S::NAME
    }

    async fn client(&self) -> lockkit_core::Result<TestClient> {
        Ok(TestClient::new(test_builder().url(&self.url).build()?, Arc::new(NoFaults)))
    }

    fn timing(&self) -> Timing {
        Timing::new().with_lease(LEASE)
    }

    async fn unreachable_client(&self) -> Result<TestClient, Unsupported> {
        let url = format!("{}://{}{}", S::SCHEME, closed_port(), S::PATH);
        let provider = test_builder().url(url).build().map_err(|_| Unsupported)?;
        Ok(TestClient::new(provider, Arc::new(NoFaults)))
    }

    async fn delete_record(&self, name: &str) -> FaultResult {
        let keys = hold_keys(name);
        let deleted = self.setup.delete(&self.url, &keys).await;
        assert!(deleted >= 1, "a record of the held lock exists among {keys:?}");
        Ok(())
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, Unsupported> {
        Ok(vec![(S::URL_ENV.to_owned(), self.url.clone())])
    }

    async fn invalid_configs(&self) -> Vec<(String, lockkit_core::Result<()>)> {
        let hosts = self.hosts();
        let mut bad = S::bad_urls(&hosts);
        // Options in the URL are settings like the builder's methods (core's one rule); one
        // that is not a setting of this backend is refused.
        bad.push(("a URL with an unknown option", format!("{}://{hosts}{}?leese=1s", S::SCHEME, S::PATH)));
        bad.push(("a mixed scheme", format!("redis+cluster+sentinel://{hosts}{}", S::PATH)));
        bad.into_iter().map(|(what, url)| (what.to_owned(), test_builder().url(url).build().map(drop))).collect()
    }
}
