//! Leader election with a stop point: a service campaigns, does leader-only work while it
//! leads, stops that work the moment its leadership is lost, and campaigns again.
//!
//! `cargo run -p lockkit-examples --example leader_election`
//!
//! Three candidates share one memory store with a 300 ms lease, and each leader resigns after
//! a short term so that the others get a turn. During its first term, candidate 0 is cut off
//! from the store, as a partitioned node would be: its leadership is lost, its work stops at
//! once, and another candidate leads with a greater term. Every term is a fencing token:
//! send it with the leader's writes.

use std::time::{Duration, Instant};

use lockkit::memory::{MemoryLockProvider, MemoryStore};
use lockkit::{LockGuard, LossReason};

const TERM: Duration = Duration::from_millis(500);
const RUN_FOR: Duration = Duration::from_secs(3);

/// The leader-only work: runs until the term ends or the leadership is lost, never past the
/// loss.
async fn lead(candidate: usize, leadership: &LockGuard) -> Option<LossReason> {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let term = tokio::time::sleep(TERM);
    tokio::pin!(term);
    loop {
        tokio::select! {
            // The stop point: the leadership is gone, so the work stops before another
            // leader's work starts.
            reason = leadership.lost() => return Some(reason),
            () = &mut term => return None,
            _ = tick.tick() => println!("candidate {candidate}: leader work in term {}", leadership.token()),
        }
    }
}

async fn candidate(id: usize, provider: MemoryLockProvider) -> lockkit::Result<()> {
    let election = provider.election("services/scheduler")?;
    let identity = format!("scheduler-{id}:8080");
    let end = Instant::now() + RUN_FOR;
    let mut terms = 0;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let Ok(leadership) = election.campaign_timeout(&identity, left).await else { break };
        terms += 1;
        println!("candidate {id}: elected, term {}", leadership.token());
        if id == 0 && terms == 1 {
            let cut_off = provider.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(250)).await;
                println!("candidate {id}: partitioned from the store");
                cut_off.partition(true);
            });
        }
        match lead(id, &leadership).await {
            Some(reason) => {
                println!("candidate {id}: lost the leadership ({reason}); leader work stopped");
                provider.partition(false);
                let _ = leadership.resign().await; // reports the loss; nothing else to do
            }
            None => {
                println!("candidate {id}: term over, resigning");
                leadership.resign().await?;
            }
        }
        // Give the others a chance before campaigning again.
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
        // Candidate 0 campaigns first.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while let Some(done) = candidates.join_next().await {
        if let Ok(Err(error)) = done {
            eprintln!("a candidate failed: {error}");
        }
    }
    Ok(())
}
