//! The classic failure, and how fencing tokens stop it (Kleppmann, "How to do distributed
//! locking"): a holder stalls past its lease, a second holder takes the lock and writes, the
//! first wakes up and writes too. The storage refuses the stale write because its token is
//! lower than one it has already seen.
//!
//! `cargo run -p lockkit-examples --example fencing`
//!
//! It runs on the in-process memory backend with a 300 ms lease, whose fault hook cuts the
//! first client off its store so that its lease really runs out, as it would for a process
//! frozen by a long GC pause or a suspended VM.

use std::sync::Arc;
use std::time::Duration;

use lockkit::memory::{MemoryLockProvider, MemoryStore};
use lockkit_testkit::FencedResource;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();
    let client = || MemoryLockProvider::builder().store(store.clone()).lease(Duration::from_millis(300)).build();
    let (first, second) = (client()?, client()?);
    let storage = Arc::new(FencedResource::<String>::new());

    let stalled = first.lock("fencing/invoice-42")?.acquire().await?;
    println!("client 1 holds the lock with token {}", stalled.token());

    // Client 1 stalls: nothing it sends reaches the store, so its lease runs out.
    first.partition(true);
    let reason = stalled.lost().await;
    println!("client 1's guard reports the loss (a well-behaved holder stops here): {reason}");

    let fresh = second.lock("fencing/invoice-42")?.acquire().await?;
    storage.write(fresh.token(), "paid by client 2")?;
    println!("client 2 holds the lock with token {} and writes: accepted", fresh.token());

    // Client 1 wakes up and, ignoring its loss signal, writes anyway.
    match storage.write(stalled.token(), "paid by client 1") {
        Ok(()) => println!("client 1's stale write was accepted: the invoice is paid twice"),
        Err(stale) => println!("client 1's stale write with token {} is refused: {stale}", stalled.token()),
    }
    println!("the storage kept: {:?}", storage.accepted());
    fresh.release().await?;
    first.partition(false);
    // Releasing a lost hold reports the loss; the new holder was never disturbed.
    if let Err(error) = stalled.release().await {
        println!("client 1's release: {error}");
    }
    Ok(())
}
