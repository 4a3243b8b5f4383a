//! Several workers contend for one lock; each prints the fencing token it was granted.
//!
//! Runs on the store named by `LOCKKIT_URL`, or the in-process memory backend when it is
//! unset: `cargo run -p lockkit-examples --example quickstart`, or
//! `LOCKKIT_URL=redis://127.0.0.1:6379 cargo run -p lockkit-examples --features full --example quickstart`
//! (`full` builds every network backend in).

use std::time::Duration;

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let url = std::env::var(lockkit::URL_ENV).unwrap_or_else(|_| "mem://".to_owned());
    let provider = lockkit::connect(&url).await?;
    println!("locking on {}", lockkit::config::redact(&url));
    // One handle, shared by every worker: each acquisition is its own owner.
    let report = provider.lock("quickstart/report")?;
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let lock = report.clone();
        workers.spawn(async move {
            for round in 0..2 {
                let guard = lock.acquire().await?;
                println!(
                    "worker {worker} round {round}: holding {} with fencing token {}",
                    guard.name(),
                    guard.token()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await?;
            }
            Ok::<_, lockkit::Error>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        match done {
            Ok(result) => result?,
            Err(panicked) => eprintln!("a worker failed: {panicked}"),
        }
    }
    println!("every worker held the lock alone, each time with a greater token");
    Ok(())
}
