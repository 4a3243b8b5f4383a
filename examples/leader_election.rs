//! Leader election with a structured stop point: a service runs for leader, does
//! leader-only work while it holds the lock, stops that work the moment the hold is lost,
//! and then runs for leader again.
//!
//! `cargo run -p lockkit-examples --example leader_election`
//!
//! Three candidates share one memory store with a 300 ms lease, and each leader steps down
//! after a short term so that the others get a turn. During its first term, candidate 0 is
//! cut off from the store, as a partitioned node would be: its hold is lost, its work stops
//! at once, and another candidate is elected with a greater fencing token.

use std::time::{Duration, Instant};

use lockkit::memory::{MemoryLockProvider, MemoryStore};
use lockkit::{LockGuard, LossReason};

const TERM: Duration = Duration::from_millis(500);
const RUN_FOR: Duration = Duration::from_secs(3);

/// The leader-only work: runs until the term ends or the hold is lost, never past the loss.
async fn lead(candidate: usize, guard: &LockGuard) -> Option<LossReason> {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let term = tokio::time::sleep(TERM);
    tokio::pin!(term);
    loop {
        tokio::select! {
            // The stop point: the hold is gone, so the work stops before another leader's
            // work starts.
            reason = guard.lost() => return Some(reason),
            () = &mut term => return None,
            _ = tick.tick() => println!("candidate {candidate}: leader work with token {}", guard.token()),
        }
    }
}

async fn candidate(id: usize, provider: MemoryLockProvider) -> lockkit::Result<()> {
    let lock = provider.lock("services/scheduler/leader")?;
    let end = Instant::now() + RUN_FOR;
    let mut term = 0;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let Ok(guard) = lock.acquire_timeout(left).await else { break };
        term += 1;
        println!("candidate {id}: elected for term {term} with token {}", guard.token());
        if id == 0 && term == 1 {
            let cut_off = provider.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(250)).await;
                println!("candidate {id}: partitioned from the store");
                cut_off.partition(true);
            });
        }
        match lead(id, &guard).await {
            Some(reason) => {
                println!("candidate {id}: lost leadership ({reason}); leader work stopped");
                provider.partition(false);
                let _ = guard.release().await; // reports the loss; nothing else to do
            }
            None => {
                println!("candidate {id}: term over, stepping down");
                guard.release().await?;
            }
        }
        // Give the others a chance before running again.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let store = MemoryStore::new();
    let mut candidates = tokio::task::JoinSet::new();
    for id in 0..3 {
        let provider = MemoryLockProvider::builder().store(store.clone()).lease(Duration::from_millis(300)).build()?;
        candidates.spawn(candidate(id, provider));
        // Candidate 0 runs first.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while let Some(done) = candidates.join_next().await {
        if let Ok(Err(error)) = done {
            eprintln!("a candidate failed: {error}");
        }
    }
    Ok(())
}
