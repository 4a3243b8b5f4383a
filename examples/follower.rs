//! A follower that knows where to send requests: it observes an election and forwards to
//! whoever leads, waiting while nobody does.
//!
//! `cargo run -p lockkit-examples --example follower` (memory), or with `LOCKKIT_URL` set to a
//! store whose backend has elections, to follow a real election.
//!
//! Two servers take turns leading "api/primary", publishing their addresses; the follower
//! prints where each request would go. It learns of every change from the store's
//! notifications (no polling), in term order, a vacancy included.

use std::time::Duration;

use lockkit::LeaderEvent;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var(lockkit::URL_ENV).unwrap_or_else(|_| "mem://follower-example".to_owned());
    let provider = lockkit::connect(&url).await?;
    let election = provider.election("api/primary")?;

    let mut changes = election.observe()?;
    let follower = tokio::spawn(async move {
        let mut forwarded = 0;
        while let Some(change) = changes.next().await {
            match change? {
                LeaderEvent::Elected(leader) => {
                    let address = leader.identity_str().unwrap_or("?");
                    println!("follower: forwarding to {address} (term {})", leader.term);
                    forwarded += 1;
                    if forwarded == 2 {
                        return Ok::<_, lockkit::Error>(());
                    }
                }
                LeaderEvent::Vacant => println!("follower: nobody leads; holding requests"),
                _ => println!("follower: missed changes; the current leader comes next"),
            }
        }
        Ok(())
    });

    for address in ["10.0.0.7:8080", "10.0.0.8:8080"] {
        let leadership = election.campaign(address).await?;
        println!("server {address}: leading in term {}", leadership.token());
        tokio::time::sleep(Duration::from_millis(100)).await;
        leadership.resign().await?;
    }
    follower.await??;
    Ok(())
}
