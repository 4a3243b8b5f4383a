//! Application code written once against `&dyn DistributedLock`, run on two backends.
//!
//! `cargo run -p lockkit-examples --example generic` runs it on the memory backend and on the
//! local-file backend; set `LOCKKIT_URL` to add a third store (Redis, ZooKeeper).

use lockkit::DistributedLock;

/// Runs a nightly job at most once at a time, wherever the lock lives.
async fn run_nightly_job(lock: &dyn DistributedLock) -> lockkit::Result<()> {
    let Some(guard) = lock.try_acquire().await? else {
        println!("  [{}] another instance runs the job; skipping", lock.backend_name());
        return Ok(());
    };
    println!("  [{}] running the job with fencing token {}", lock.backend_name(), guard.token());
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
        println!("on {}:", lockkit::redact(&url));
        let provider = lockkit::connect(&url).await?;
        let lock = provider.lock("jobs/nightly")?;
        // A second owner holds the lock meanwhile, so the first run skips and the second runs.
        let other = provider.lock("jobs/nightly")?;
        let held = other.acquire().await?;
        run_nightly_job(&*lock).await?;
        held.release().await?;
        run_nightly_job(&*lock).await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
