//! What the PostgreSQL fence tests share: a harness over a dedicated server (fsync on,
//! `synchronous_commit` on) that the restart case crashes and restarts, so committed fences
//! must survive crash recovery; a connection; a runtime and a server for the tests beside the
//! fence cases.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use lockkit_core::{Fence, FenceMode, FencingToken, LockId, LockName};
use lockkit_fence::FenceSink;
use lockkit_fence::postgres::{PgFence, PgFencedRows, PgFencedValues, STALE_SQLSTATE};
use lockkit_testkit::fixture::PostgresServer;
use lockkit_testkit::{FaultResult, FenceHarness, Unsupported};
use tokio_postgres::{Client, NoTls};

/// Opens the sink under test over a connection, with the fence's migration.
pub(crate) type OpenSink = fn(Client, PgFence) -> BoxFuture<'static, Arc<dyn FenceSink>>;

/// [`OpenSink`] for [`PgFencedValues`], the fence's own table of resources.
pub(crate) fn open_values(client: Client, fence: PgFence) -> BoxFuture<'static, Arc<dyn FenceSink>> {
    Box::pin(async move { Arc::new(PgFencedValues::open(client, fence).await.unwrap()) as Arc<dyn FenceSink> })
}

/// [`OpenSink`] for [`PgFencedRows`], the fence on an application's rows.
pub(crate) fn open_rows(client: Client, fence: PgFence) -> BoxFuture<'static, Arc<dyn FenceSink>> {
    Box::pin(async move { Arc::new(PgFencedRows::open(client, fence).await.unwrap()) as Arc<dyn FenceSink> })
}

/// A write fence of lock `name` with `token`.
pub(crate) fn write_fence(name: &str, token: u64) -> Fence {
    let lock = LockId::new("fence-tests://postgres", LockName::new(name).unwrap()).unwrap();
    Fence::new(lock, FencingToken::new(token), FenceMode::Write)
}

/// Runs `script` with `psql` against `url` as `lockkit run` would for the holder of lock `psql`
/// with `token`: `lock_id` and `token` set, and `variable` as given; stops at the first error
/// and shows its SQLSTATE.
fn run_psql(url: &str, script: &Path, token: u64, (variable, value): (&str, &str)) -> Output {
    let Some(psql) = ["/usr/bin/psql", "/usr/lib/postgresql/15/bin/psql"].into_iter().find(|p| Path::new(p).exists())
    else {
        panic!("psql not found: install it (Debian: `apt-get install postgresql-client`)");
    };
    let fence = write_fence("psql", token);
    let mut command = Command::new(psql);
    command.arg(url).args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"]);
    command.arg("-v").arg(format!("lock_id={}", fence.lock()));
    command.arg("-v").arg(format!("token={}", fence.token()));
    command.arg("-v").arg(format!("{variable}={value}"));
    command.arg("-f").arg(script);
    command.output().unwrap()
}

/// Writes `sql` as a psql script and runs it as `lockkit run` would: for the holder of token
/// 30 with `variable` set to `fresh`, which must succeed, then for the stale token 29 with
/// `stale`, which must fail with the fence's SQLSTATE.
pub(crate) fn psql_script_is_fenced(url: &str, sql: &str, variable: &str, (fresh, stale): (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fenced.sql");
    std::fs::write(&script, sql).unwrap();
    let first = run_psql(url, &script, 30, (variable, fresh));
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let late = run_psql(url, &script, 29, (variable, stale));
    assert!(!late.status.success());
    let stderr = String::from_utf8_lossy(&late.stderr);
    assert!(stderr.contains("stale fencing token 29") && stderr.contains(STALE_SQLSTATE), "{stderr}");
}

/// The fence cases' harness: a dedicated server and the sink `open` makes on it.
pub(crate) struct PgHarness {
    name: &'static str,
    open: OpenSink,
    server: tokio::sync::Mutex<PostgresServer>,
    url: String,
}

impl PgHarness {
    /// Starts a server of its own for the sink `open` makes, called `name` in reports.
    pub(crate) async fn start(name: &'static str, open: OpenSink) -> Self {
        let server = PostgresServer::start().await.unwrap_or_else(|error| panic!("PostgreSQL: {error}"));
        Self { name, open, url: server.url(), server: tokio::sync::Mutex::new(server) }
    }
}

/// A connection to `url`, driven on the current runtime.
pub(crate) async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| panic!("connect: {e}"));
    tokio::spawn(connection);
    client
}

#[async_trait]
impl FenceHarness for PgHarness {
    fn name(&self) -> String {
        self.name.to_owned()
    }

    async fn sink(&self) -> Arc<dyn FenceSink> {
        (self.open)(connect(&self.url).await, PgFence::new()).await
    }

    async fn isolated(&self) -> Result<Arc<dyn FenceHarness>, Unsupported> {
        Ok(Arc::new(Self::start(self.name, self.open).await))
    }

    async fn restart_store(&self) -> FaultResult {
        let mut server = self.server.lock().await;
        server.crash_restart().await.unwrap_or_else(|error| panic!("crash and restart PostgreSQL: {error}"));
        Ok(())
    }
}

/// The runtime of the tests beside the fence cases.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// One server for the tests beside the fence cases (which have their own).
pub(crate) async fn server() -> String {
    static SERVER: tokio::sync::OnceCell<PostgresServer> = tokio::sync::OnceCell::const_new();
    SERVER.get_or_init(|| async { PostgresServer::start().await.unwrap() }).await.url()
}
