//! ZooKeeper: the floor is `exists` of the base path and create+delete of an ephemeral node on
//! a session of zookeeper-client (the `create` is the write a lock needs; the `exists` the
//! cheapest request), with the recipe's own requests sent raw and a raw hand-off (a delete
//! heard by a watch of another session) beside them.

use std::time::{Duration, Instant};

use lockkit::zk::zookeeper_client as zk;
use lockkit::zk::{ZkLockProvider, ZkLockProviderBuilder};

use crate::bench::profile::{Boxed, Floor, FloorFigure, Profile, Targets};
use crate::bench::url::{Url, run_id};
use crate::exit::{BACKEND, Failure, UNAVAILABLE};

/// The ZooKeeper profile.
pub(crate) struct ZooKeeper;

impl Profile for ZooKeeper {
    fn backend(&self) -> &'static str {
        "zk"
    }

    fn targets(&self) -> Targets {
        Targets {
            cycle: Some(1.3),
            handoff_share: None,
            handoff: Some(1.0),
            wait_spread: None,
            readers_scaling: None,
            many_locks_speedup: Some(10.0),
            memory_per_lock: None,
            server_time_per_script: None,
        }
    }

    fn floor<'a>(&'a self, url: &'a Url) -> Boxed<'a, Result<Option<Box<dyn Floor>>, Failure>> {
        Box::pin(async move { Ok(Some(Box::new(ZkFloor::open(url).await?) as Box<dyn Floor>)) })
    }

    /// The fixtures' servers accept 1 s and up; a server's default range starts at two ticks
    /// (4 s with the default `tickTime` of 2 s), so 4 s fits both.
    fn short_lease(&self) -> Option<(&'static str, Duration)> {
        Some(("session_timeout", Duration::from_secs(4)))
    }

    fn renewal_note(&self) -> Option<&'static str> {
        Some(
            "ZooKeeper renews the session, not each hold: one ping per third of the session timeout, whatever the number of holds (not counted); from 64 holds one recursive watch on the base path hears every change below it, the server's clean-up of empty lock znodes of earlier runs included (up to 10,000 a minute: some 10 ms of client CPU a second)",
        )
    }

    fn upkeep_note(&self) -> Option<&'static str> {
        Some(
            "ZooKeeper upkeep is one exists on the base path per third of the session timeout, whatever the number of holds; not counted here",
        )
    }
}

/// Two sessions of their own and the znodes the floor plays with.
struct ZkFloor {
    /// Kept so that the sessions live as long as the floor.
    _providers: [ZkLockProvider; 2],
    client: zk::Client,
    /// A second session, the watcher of the raw hand-off.
    watcher: zk::Client,
    /// The base path (the parent of every lock's znode): the target of `exists`.
    root: String,
    /// An ephemeral node created and deleted for the create+delete floor.
    node: String,
    /// A container for the recipe's own requests sent raw.
    recipe_dir: String,
}

impl ZkFloor {
    async fn open(url: &Url) -> Result<Self, Failure> {
        let open =
            |e: lockkit::Error| Failure::from_lock_error(&e, &format!("floor: cannot open a session on {}", url.shown));
        let builder = ZkLockProviderBuilder::from_url(&url.store).map_err(open)?;
        let provider = builder.clone().build().map_err(open)?;
        let second = builder.build().map_err(open)?;
        let client = provider.zk_client().await.map_err(open)?;
        let watcher = second.zk_client().await.map_err(open)?;
        let probe = provider.lock_path("probe").map_err(|e| Failure::from_lock_error(&e, "floor"))?;
        let root = probe.rsplit_once('/').map(|(root, _)| root.to_owned()).unwrap_or_default();
        let id = run_id();
        let recipe_dir = format!("{root}/lockkit-bench-floor-{id}-recipe");
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        client.create(&recipe_dir, &[], &container).await.map_err(|e| zk_failure(url, &e))?;
        Ok(Self {
            _providers: [provider, second],
            client,
            watcher,
            node: format!("{root}/lockkit-bench-floor-{id}"),
            root,
            recipe_dir,
        })
    }
}

/// The round trips the floor times, in the order of its samples.
const FIGURES: &[FloorFigure] = &[
    FloorFigure::other("exists", "exists"),
    FloorFigure::main("create_delete", "create+delete"),
    FloorFigure::other_p50("recipe_raw", "recipe's requests raw (create+list, delete)"),
    FloorFigure::other_p50("delete_notify", "raw hand-off: delete → notification on another session"),
];

impl Floor for ZkFloor {
    fn describe(&self) -> &'static str {
        "ZooKeeper create+delete of an ephemeral node (zookeeper-client, one session)"
    }

    fn figures(&self) -> &'static [FloorFigure] {
        FIGURES
    }

    fn sample<'a>(&'a mut self, url: &'a Url) -> Boxed<'a, Result<Vec<Option<Duration>>, Failure>> {
        Box::pin(async move {
            let failed = |e: zk::Error| zk_failure(url, &e);
            let start = Instant::now();
            self.client.check_stat(&self.root).await.map_err(failed)?;
            let exists = start.elapsed();

            let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            let start = Instant::now();
            self.client.create(&self.node, &[], &ephemeral).await.map_err(failed)?;
            self.client.delete(&self.node, None).await.map_err(failed)?;
            let create_delete = start.elapsed();

            let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
            let prefix = format!("{}/n-", self.recipe_dir);
            // The server deletes an empty container now and then: make it again.
            let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
            match self.client.create(&self.recipe_dir, &[], &container).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(failed(e)),
            }
            let start = Instant::now();
            let create = self.client.create(&prefix, &[], &sequential);
            let list = self.client.list_children(&self.recipe_dir);
            let (_, sequence) = create.await.map_err(failed)?;
            list.await.map_err(failed)?;
            self.client.delete(&format!("{prefix}{sequence}"), None).await.map_err(failed)?;
            let recipe = start.elapsed();

            self.client.create(&self.node, &[], &ephemeral).await.map_err(failed)?;
            let (_, _, watch) = self.watcher.get_and_watch_data(&self.node).await.map_err(failed)?;
            let start = Instant::now();
            let delete = self.client.delete(&self.node, None);
            watch.changed().await;
            let notify = start.elapsed();
            delete.await.map_err(failed)?;
            Ok(vec![Some(exists), Some(create_delete), Some(recipe), Some(notify)])
        })
    }
}

fn zk_failure(url: &Url, error: &zk::Error) -> Failure {
    let code = match error {
        zk::Error::ConnectionLoss | zk::Error::SessionExpired | zk::Error::ClientClosed => UNAVAILABLE,
        _ => BACKEND,
    };
    Failure::new(code, format!("floor: a raw ZooKeeper request to {} failed: {error}", url.shown))
}
