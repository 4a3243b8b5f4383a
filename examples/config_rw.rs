//! Readers of a configuration while one writer migrates it: a read-write lock.
//!
//! Four readers read the configuration again and again, each holding the lock shared; a
//! writer migrates it once, holding it alone. Readers never see the migration half done,
//! and the writer is not starved by the stream of readers (it waits only for the reads that
//! started before it). Every read and write carries a fencing token that the store checks.
//!
//! `cargo run -p lockkit-examples --example config_rw` (memory), or with `LOCKKIT_URL` set
//! to a store whose backend has read-write locks.

use std::sync::Arc;
use std::time::Duration;

use lockkit_testkit::FencedResource;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var(lockkit::URL_ENV).unwrap_or_else(|_| "mem://config-example".to_owned());
    let provider = lockkit::connect(&url).await?;
    let config = provider.rw_lock("config/pricing")?;
    let store = Arc::new(FencedResource::<String>::new());
    let first = config.write().await?;
    store.write(first.token(), "pricing v1")?;
    first.release().await?;

    let mut tasks = tokio::task::JoinSet::new();
    for reader in 0..4 {
        let (config, store) = (config.clone(), Arc::clone(&store));
        tasks.spawn(async move {
            for _ in 0..5 {
                let guard = config.read().await?;
                let seen = store.read(guard.token())?;
                println!("reader {reader} (token {}): {}", guard.token(), seen.unwrap_or_default());
                tokio::time::sleep(Duration::from_millis(10)).await;
                guard.release().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        });
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    let migration = config.write().await?;
    println!("writer (token {}): migrating while no reader reads", migration.token());
    store.write(migration.token(), "pricing v2")?;
    migration.release().await?;
    while let Some(done) = tasks.join_next().await {
        done?.map_err(|error| error.to_string())?;
    }
    println!("every read saw v1 or v2 whole; {} stale request(s) refused", store.rejected());
    Ok(())
}
