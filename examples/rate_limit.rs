//! At most N workers calling a rate-limited API at once, across a fleet: a counting semaphore.
//!
//! Eight workers share an API that allows three calls in flight. Each takes one of the
//! semaphore's three permits for its call; the fourth waits until one is given back. The
//! permit count belongs to the semaphore: a worker that asked for another count while these
//! hold permits would get a clear error rather than a fourth slot.
//!
//! `cargo run -p lockkit-examples --example rate_limit` (memory), or with `LOCKKIT_URL` set
//! to a store whose backend has semaphores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const CALLS_IN_FLIGHT: u32 = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var(lockkit::URL_ENV).unwrap_or_else(|_| "mem://rate-limit-example".to_owned());
    let provider = lockkit::connect(&url).await?;
    let api = provider.semaphore("partner-api/calls", CALLS_IN_FLIGHT)?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let (api, in_flight, most) = (api.clone(), Arc::clone(&in_flight), Arc::clone(&most));
        workers.spawn(async move {
            let permit = api.acquire().await?;
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            println!("worker {worker}: calling the API with permit token {} ({now} in flight)", permit.token());
            tokio::time::sleep(Duration::from_millis(30)).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            permit.release().await
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    println!("at most {} calls were in flight at once", most.load(Ordering::SeqCst));
    Ok(())
}
