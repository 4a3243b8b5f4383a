//! Money transfers that each hold both accounts' locks: a `MultiLock` takes them all or
//! nothing, always in one order, so transfers in opposite directions never deadlock; each
//! account's fenced store checks the token of its own lock.
//!
//! Runs on the store named by `LOCKKIT_URL`, or the in-process memory backend when it is
//! unset: `cargo run -p lockkit-examples --example transfer`.

use std::sync::Arc;
use std::time::Duration;

use lockkit::MultiLock;
use lockkit_testkit::FencedResource;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var(lockkit::URL_ENV).unwrap_or_else(|_| "mem://".to_owned());
    let provider = lockkit::connect(&url).await?;
    println!("locking on {}", lockkit::config::redact(&url));
    // Each account's balance lives in a store that refuses writes with a stale token.
    let accounts = ["transfer/alice", "transfer/bob"];
    let books: Arc<[FencedResource<i64>; 2]> = Arc::new([FencedResource::new(), FencedResource::new()]);
    let mut transfers = tokio::task::JoinSet::new();
    for (id, (from, to)) in [(0, 1), (1, 0), (0, 1), (1, 0)].into_iter().enumerate() {
        let (provider, books) = (provider.clone(), Arc::clone(&books));
        transfers.spawn(async move {
            // Given in opposite orders by half of the transfers; acquired in one order by all.
            let both = MultiLock::new([provider.lock(accounts[from])?, provider.lock(accounts[to])?])?;
            let guard = both.acquire_timeout(Duration::from_secs(10)).await?;
            let token = |account: usize| guard.token(accounts[account]).ok_or("a lock of the set");
            let (from_token, to_token) = (token(from)?, token(to)?);
            let balance = |account: usize| books[account].accepted().last().map_or(100, |(_, amount)| *amount);
            books[from].write(from_token, balance(from) - 10)?;
            books[to].write(to_token, balance(to) + 10)?;
            println!(
                "transfer {id}: 10 from {} (token {from_token}) to {} (token {to_token})",
                accounts[from], accounts[to]
            );
            guard.release().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        });
    }
    while let Some(done) = transfers.join_next().await {
        done?.map_err(|error| error.to_string())?;
    }
    let total: i64 = (0..2).map(|account| books[account].accepted().last().map_or(100, |(_, amount)| *amount)).sum();
    println!("balances add up to {total} (200 before the transfers)");
    Ok(())
}
