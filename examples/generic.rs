//! Application code written once, run on several backends.
//!
//! Every backend hands out the same `LockHandle` (the backend is chosen by URL), so code that
//! works on any store needs no generics. Code that should also accept a side of a read-write
//! lock or a semaphore takes `impl DistributedLock`, as `run_nightly_job` does here.
//!
//! `cargo run -p lockkit-examples --example generic` runs it on the memory backend and on the
//! local-file backend; set `LOCKKIT_URL` to add a third store (Redis, ZooKeeper).

use lockkit::DistributedLock;

/// Runs a nightly job at most once at a time, wherever the lock lives.
async fn run_nightly_job(lock: &impl DistributedLock, store: &str) -> lockkit::Result<()> {
    let Some(guard) = lock.try_acquire().await? else {
        println!("  [{store}] another instance runs the job; skipping");
        return Ok(());
    };
    println!("  [{store}] running the job with fencing token {}", guard.token());
    guard.release().await
}

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let dir = std::env::temp_dir().join(format!("lockkit-generic-example-{}", std::process::id()));
    let mut urls = vec!["mem://".to_owned(), format!("file://{}", dir.display())];
    if let Ok(url) = std::env::var(lockkit::URL_ENV) {
        urls.push(url);
    }
    for url in urls {
        println!("on {}:", lockkit::config::redact(&url));
        let provider = lockkit::connect(&url).await?;
        let lock = provider.lock("jobs/nightly")?;
        // Another owner holds the lock meanwhile, so the first run skips and the second runs.
        let held = lock.acquire().await?;
        run_nightly_job(&lock, provider.backend_name()).await?;
        held.release().await?;
        run_nightly_job(&lock, provider.backend_name()).await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
